//! GPUs as dcgm-exporter reports them, one per physical device, and the join
//! of GPUs to the engines they serve.
//!
//! dcgm-exporter with `--kubernetes-virtual-gpus` (time-slicing, MPS) or DRA
//! writes a copy of every device series per pod sharing the GPU: the copies
//! differ only in `pod`/`namespace`/`container`/`vgpu`/`dra_*` labels. Each
//! GPU is therefore read from one series (the copies carry the same values)
//! before anything is summed, and the pods of all copies say whom it serves.

use super::view::{GPU_GROUP, GaugeStats, Keep, LabelPairs, MaxPri, View, matches, ratio, restrict, source_of};
use super::vllm::get;
use super::{Engine, Join, Out, Settings, TargetKey};
use crate::engine::ingest::{TargetState, WireName};
use crate::schema::{self, Input, Source};
use crate::window::{Skip, change_point_rate};
use infertel_model::Labels;
use std::collections::{BTreeMap, BTreeSet};

/// One physical GPU (or one MIG instance, for the per-GPU gauges).
#[derive(Clone)]
pub(crate) struct Gpu<'a> {
    pub(crate) st: &'a TargetState,
    /// Its identifying labels (`GPU_GROUP`), without the per-pod labels.
    pub(crate) labels: LabelPairs,
    /// `UUID` (or the index where the exporter has none).
    pub(crate) id: String,
    /// The node it is on: the target's `node` label, else `Hostname`.
    pub(crate) node: Option<String>,
    /// (namespace, pod) of every copy that names a pod.
    pub(crate) pods: BTreeSet<(String, String)>,
}

/// Gauge statistics of the first series `keep` selects (copies of one GPU
/// carry the same values; summing them would count the GPU once per pod).
fn one(v: &View, input: &Input, keep: Keep<'_>) -> Result<GaugeStats, Skip> {
    let sel = v.select(input, "", keep)?;
    let (_, s) = sel.iter().min_by(|a, b| a.0.cmp(b.0)).ok_or(Skip::MissingInput)?;
    GaugeStats::of(s).ok_or(Skip::MissingInput)
}

impl Gpu<'_> {
    fn view(&self, t: i64, w: i64) -> View<'_> {
        View::new(self.st, t, w)
    }

    fn keep(&self) -> impl Fn(&Labels) -> bool + '_ {
        move |l: &Labels| matches(l, &self.labels, GPU_GROUP)
    }

    /// Mean of a gauge of this GPU over the window.
    pub(crate) fn mean(&self, input: &Input, t: i64, w: i64) -> Option<f64> {
        one(&self.view(t, w), input, Keep::when(&self.keep())).ok().map(|g| g.mean)
    }

    /// Watts drawn over the window: from the energy counter between its
    /// change points when the window holds two of them (dcgm-exporter
    /// refreshes every 30 s by default, so a counter read between arbitrary
    /// scrapes would see one update too many or too few), else the mean of
    /// the power gauge.
    pub(crate) fn watts(&self, t: i64, w: i64) -> Result<f64, Skip> {
        let v = self.view(t, w);
        let keep = self.keep();
        if let Some(name) = v.pick(&schema::ENERGY, "")
            && let Some(m) = v.st.series.get(&WireName(name))
            && let Some((_, c)) = m.into_iter().filter(|(l, _)| keep(l)).min_by(|a, b| a.0.cmp(b.0))
        {
            let (before, window) = v.window_and_before(m, c);
            // mJ for the classic field, J for DCGM 4.6.1's.
            let per_joule = if name == "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL" { 1.0 } else { 1000.0 };
            if let Some(r) = change_point_rate(before, &window) {
                return Ok(r / per_joule);
            }
        }
        one(&v, &schema::POWER, Keep::when(&keep)).map(|g| g.mean)
    }
}

/// The node of a target: its own `node` label (set by discovery relabeling),
/// else the agent's (`K8S_NODE_NAME`).
pub(crate) fn target_node(st: &TargetState, settings: &Settings) -> Option<String> {
    let found = match &st.node {
        Some(n) => n.clone(),
        None => scan_node(st),
    };
    found.or_else(|| settings.node_name.clone())
}

/// Target labels are on every series of the target: the first that has a
/// `node` answers. Kept in `TargetState::node` from one ingest to the next.
pub(crate) fn scan_node(st: &TargetState) -> Option<String> {
    st.series.values().flat_map(|m| m.into_iter()).find_map(|(l, _)| l.get("node").map(str::to_string))
}

/// The per-GPU gauges of a dcgm-exporter target: one value per GPU (or MIG
/// instance), whatever the number of pods sharing it.
pub(crate) fn eval_dcgm(v: &View, settings: &Settings, out: &mut Out) {
    let mut gpus: BTreeSet<LabelPairs> = BTreeSet::new();
    for input in [&schema::FB_USED, &schema::POWER, &schema::DRAM_ACTIVE] {
        if let Some(n) = v.pick(input, "") {
            let m = &v.st.series[&WireName(n)];
            for (l, c) in m {
                if v.newest_in_window(m, c).is_some() {
                    gpus.insert(restrict(l, GPU_GROUP));
                }
            }
        }
    }
    for g in &gpus {
        let gk = g.clone();
        let keep = move |l: &Labels| matches(l, &gk, GPU_GROUP);
        let keep = Keep::when(&keep);
        let used = one(v, &schema::FB_USED, keep).map(|x| x.last);
        let free = one(v, &schema::FB_FREE, keep).map(|x| x.last);
        let total = match (used, free) {
            (Ok(u), Ok(f)) => Ok(u + f),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let vram = match ratio(used, total) {
            Err(Skip::MissingInput) => one(v, &schema::FB_USED_RATIO, keep).map(|x| x.last),
            r => r,
        };
        out.put("infertel_vram_used_ratio", g.clone(), vram);
        let mb = &settings.memory_bound;
        let r = match (one(v, &schema::DRAM_ACTIVE, keep), one(v, &schema::TENSOR_ACTIVE, keep)) {
            (Ok(d), Ok(t)) => {
                Ok(if d.mean >= mb.dram_active_min && t.mean <= mb.tensor_active_max { 1.0 } else { 0.0 })
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        out.put("infertel_memory_bound", g.clone(), r);
        // The article's triad as data: GPU_UTIL says 100% whenever a kernel
        // is resident, while the units doing the work may idle.
        for (activity, input, scale) in [
            ("util", &schema::GPU_UTIL, 0.01),
            ("graphics", &schema::GR_ENGINE_ACTIVE, 1.0),
            ("sm", &schema::SM_ACTIVE, 1.0),
            ("sm_occupancy", &schema::SM_OCCUPANCY, 1.0),
            ("tensor", &schema::TENSOR_ACTIVE, 1.0),
            ("dram", &schema::DRAM_ACTIVE, 1.0),
        ] {
            if let Ok(x) = one(v, input, keep) {
                let mut l = g.clone();
                l.push(("activity".to_string(), activity.to_string()));
                l.sort();
                out.put("infertel_gpu_activity_ratio", l, Ok(x.mean * scale));
            }
        }
    }
}

/// Splits the GPUs of a node into those serving `pods` and the rest, when
/// dcgm-exporter maps GPUs to pods and the engines' pods are known; else
/// every GPU is taken to serve and `None` is the idle set (unknown).
fn classify<'a>(gpus: Vec<Gpu<'a>>, pods: &BTreeSet<(String, String)>) -> (Vec<Gpu<'a>>, Option<Vec<Gpu<'a>>>) {
    if pods.is_empty() || gpus.iter().all(|g| g.pods.is_empty()) {
        return (gpus, None);
    }
    let (serving, idle) = gpus.into_iter().partition(|g| g.pods.iter().any(|p| pods.contains(p)));
    (serving, Some(idle))
}

/// The (namespace, pod) of a target's engine groups.
fn pods_of(groups: &[(u32, LabelPairs)]) -> BTreeSet<(String, String)> {
    groups.iter().filter_map(|(_, g)| Some((get(g, "namespace")?, get(g, "pod")?))).collect()
}

impl Engine {
    /// Every physical GPU with power samples in the window, once each (by
    /// UUID, across copies and across targets); MIG instances are not
    /// devices here (they have no power of their own).
    pub(crate) fn gpus(&self, t: i64) -> Vec<Gpu<'_>> {
        let mut by_id: BTreeMap<String, Gpu<'_>> = BTreeMap::new();
        for st in self.targets.values() {
            if source_of(st) != Some(Source::Dcgm) || st.gone {
                continue;
            }
            let v = View::new(st, t, self.settings.window_ms);
            let Some(n) = v.pick(&schema::POWER, "") else { continue };
            let target_node = target_node(st, &self.settings);
            let m = &st.series[&WireName(n)];
            for (l, c) in m {
                if l.get("GPU_I_ID").is_some() || v.newest_in_window(m, c).is_none() {
                    continue;
                }
                let id = l.get("UUID").or(l.get("uuid")).or(l.get("gpu")).unwrap_or("").to_string();
                let node = l
                    .get("node")
                    .or(l.get("Hostname"))
                    .or(l.get("hostname"))
                    .map(str::to_string)
                    .or_else(|| target_node.clone());
                let gpu = by_id.entry(id.clone()).or_insert_with(|| Gpu {
                    st,
                    labels: restrict(l, GPU_GROUP),
                    id,
                    node,
                    pods: BTreeSet::new(),
                });
                if std::ptr::eq(gpu.st, st)
                    && let (Some(ns), Some(pod)) = (l.get("namespace"), l.get("pod"))
                {
                    gpu.pods.insert((ns.to_string(), pod.to_string()));
                }
            }
        }
        by_id.into_values().collect()
    }

    /// Live inference-server targets (vLLM and the servers derived alike)
    /// on `node`, in key order. Lazy, and the node is compared before the
    /// samples are looked at: every target's evaluation asks whether it is
    /// the first on its node, and most are not.
    fn vllm_targets_on<'s>(
        &'s self,
        t: i64,
        node: &'s Option<String>,
    ) -> impl Iterator<Item = (&'s TargetKey, &'s TargetState)> + 's {
        self.targets
            .iter()
            .filter(|(_, st)| st.detected.is_some_and(|s| s.engine_derived()) && !st.gone)
            .filter(move |(_, st)| target_node(st, &self.settings) == *node)
            .filter(move |(_, st)| View::new(st, t, self.settings.window_ms).live(&schema::GENERATION_TOKENS))
    }

    /// The GPUs that serve target `key` under the configured join.
    pub(crate) fn serving_gpus(&self, key: &TargetKey, t: i64) -> Vec<Gpu<'_>> {
        let Some(st) = self.targets.get(key) else { return Vec::new() };
        let v = View::new(st, t, self.settings.window_ms);
        let pods = pods_of(&super::vllm::groups(&v));
        let all = self.gpus(t);
        match &self.settings.join {
            Join::Node => {
                let node = target_node(st, &self.settings);
                let here: Vec<Gpu> = all.into_iter().filter(|g| node.is_none() || g.node == node).collect();
                classify(here, &pods).0
            }
            Join::Pod => all.into_iter().filter(|g| g.pods.iter().any(|p| pods.contains(p))).collect(),
            Join::Map(map) => {
                let uuids = map.get(&*key.instance).cloned().unwrap_or_default();
                all.into_iter().filter(|g| uuids.contains(&g.id)).collect()
            }
        }
    }

    pub(crate) fn eval_power(&self, v: &View, key: &TargetKey, groups: &[(u32, LabelPairs)], out: &mut Out) {
        const NAME: &str = "infertel_tokens_per_watt";
        let (t, w) = (v.t, v.w);
        // (output labels, token rate, GPUs)
        let mut jobs: Vec<(LabelPairs, Result<f64, Skip>, Vec<Gpu>)> = Vec::new();
        match &self.settings.join {
            Join::Node => {
                // One series per node, emitted by the node's first live vLLM
                // target; its tokens are every engine's on that node, its
                // GPUs those of that node that serve one of them.
                let node = target_node(v.st, &self.settings);
                if self.vllm_targets_on(t, &node).next().map(|(k, _)| k) != Some(key) {
                    return;
                }
                let peers: Vec<_> = self.vllm_targets_on(t, &node).collect();
                let mut tokens = Err(Skip::MissingInput);
                let mut pods = BTreeSet::new();
                for (_, st) in &peers {
                    let pv = View::new(st, t, w);
                    pods.extend(pods_of(&super::vllm::groups(&pv)));
                    tokens = match (tokens, Self::generation_rate(&pv, Keep::ALL)) {
                        (Ok(a), Ok(b)) => Ok(a + b),
                        (Err(_), Ok(b)) => Ok(b),
                        (Ok(a), Err(_)) => Ok(a),
                        (Err(a), Err(b)) => Err(a.max_pri(b)),
                    };
                }
                let here: Vec<Gpu> = self.gpus(t).into_iter().filter(|g| node.is_none() || g.node == node).collect();
                let (serving, idle) = classify(here, &pods);
                let label_node = node.clone().or_else(|| {
                    let nodes: BTreeSet<&Option<String>> = serving.iter().map(|g| &g.node).collect();
                    (nodes.len() == 1).then(|| nodes.into_iter().next().cloned().flatten()).flatten()
                });
                let labels: LabelPairs = label_node.iter().map(|n| ("node".to_string(), n.clone())).collect();
                if let Some(idle) = idle {
                    let mut watts = Ok(0.0);
                    for g in &idle {
                        watts = match (watts, g.watts(t, w)) {
                            (Ok(a), Ok(b)) => Ok(a + b),
                            (Err(e), _) | (_, Err(e)) => Err(e),
                        };
                    }
                    out.put("infertel_gpu_idle_watts", labels.clone(), watts);
                }
                jobs.push((labels, tokens, serving));
            }
            Join::Pod => {
                let all = self.gpus(t);
                let mut by_pod: BTreeMap<(String, String), ()> = BTreeMap::new();
                for (_, g) in groups {
                    match (get(g, "namespace"), get(g, "pod")) {
                        (Some(ns), Some(pod)) => {
                            by_pod.insert((ns, pod), ());
                        }
                        _ => out.skipped.push((NAME, Skip::MissingInput)),
                    }
                }
                // One series per pod: data-parallel engines of a pod share
                // its GPUs, so their tokens add before the division.
                for (ns, pod) in by_pod.into_keys() {
                    let (n2, p2) = (ns.clone(), pod.clone());
                    let keep =
                        move |l: &Labels| l.get("namespace") == Some(n2.as_str()) && l.get("pod") == Some(p2.as_str());
                    let rate = Self::generation_rate(v, Keep::when(&keep));
                    let p = (ns.clone(), pod.clone());
                    let gpus = all.iter().filter(|g| g.pods.contains(&p)).cloned().collect();
                    jobs.push((vec![("namespace".into(), ns), ("pod".into(), pod)], rate, gpus));
                }
            }
            Join::Map(map) => {
                if !map.contains_key(&*key.instance) {
                    out.skipped.push((NAME, Skip::MissingInput));
                    return;
                }
                let rate = Self::generation_rate(v, Keep::ALL);
                jobs.push((vec![("instance".into(), key.instance.to_string())], rate, self.serving_gpus(key, t)));
            }
        }
        for (labels, tokens, gpus) in jobs {
            if gpus.is_empty() {
                out.skipped.push((NAME, Skip::MissingInput));
                continue;
            }
            let mut watts = Ok(0.0);
            for g in &gpus {
                watts = match (watts, g.watts(t, w)) {
                    (Ok(a), Ok(b)) => Ok(a + b),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
            }
            out.put(NAME, labels, ratio(tokens, watts));
        }
    }
}
