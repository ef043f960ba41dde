//! The figures of many targets together, for `report`: the fleet (every
//! engine of every inference-server target, summed as the article's PromQL
//! sums them), the fleet of each server kind, and one row per instance,
//! each with the GPUs the join gives it.

use super::gpu::Gpu;
use super::rates::{Measures, Rates};
use super::{Engine, MemoryBound, TargetKey};
use crate::schema;
use crate::window::Skip;
use std::collections::BTreeMap;

/// One inference-server target's figures.
#[derive(Clone, Debug)]
pub struct Row {
    pub target: TargetKey,
    /// `vllm`, `sglang`, ...
    pub server: Option<&'static str>,
    /// Engine groups summed (data-parallel engines, models).
    pub engines: usize,
    pub measures: Measures,
}

#[derive(Clone, Debug)]
pub struct Fleet {
    pub measures: Measures,
    pub rows: Vec<Row>,
    /// Physical GPUs joined to the fleet's engines.
    pub gpus: usize,
    /// The fleet of each inference server (`vllm`, `sglang`, ...): its
    /// targets' inputs summed as the whole fleet's are.
    pub servers: BTreeMap<&'static str, Measures>,
}

/// GPU figures over `gpus` (each once), with `generation` tokens/s for
/// tokens per joule.
fn gpu_measures(m: &mut Measures, gpus: &[&Gpu], t: i64, w: i64, mb: &MemoryBound) {
    if gpus.is_empty() {
        return;
    }
    let mean = |input: &schema::Input| -> Option<f64> {
        let v: Vec<f64> = gpus.iter().filter_map(|g| g.mean(input, t, w)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let put = |m: &mut Measures, k: &'static str, v: Option<f64>| {
        if let Some(v) = v {
            m.put(k, Ok(v));
        }
    };
    put(m, "gpu_util_percent_mean", mean(&schema::GPU_UTIL));
    let dram = mean(&schema::DRAM_ACTIVE);
    let tensor = mean(&schema::TENSOR_ACTIVE);
    put(m, "dram_active_mean", dram);
    put(m, "tensor_active_mean", tensor);
    put(m, "gr_engine_active_mean", mean(&schema::GR_ENGINE_ACTIVE));
    put(m, "sm_active_mean", mean(&schema::SM_ACTIVE));
    put(m, "sm_occupancy_mean", mean(&schema::SM_OCCUPANCY));
    put(m, "gpu_power_watts_mean", mean(&schema::POWER));
    if let (Some(d), Some(tn)) = (dram, tensor) {
        m.put("memory_bound", Ok(if d >= mb.dram_active_min && tn <= mb.tensor_active_max { 1.0 } else { 0.0 }));
    }
    let (used, free) = (mean(&schema::FB_USED), mean(&schema::FB_FREE));
    match (used, free) {
        (Some(u), Some(f)) if u + f > 0.0 => m.put("vram_used_ratio", Ok(u / (u + f))),
        _ => put(m, "vram_used_ratio", mean(&schema::FB_USED_RATIO)),
    }
    let mut watts = Ok(0.0);
    for g in gpus {
        watts = match (watts, g.watts(t, w)) {
            (Ok(a), Ok(b)) => Ok(a + b),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    m.put("gpu_watts", watts);
    let tpw = match (m.get_result("generation_tokens_per_second"), watts) {
        (Ok(g), Ok(w)) if w > 0.0 => Ok(g / w),
        (Ok(_), Ok(_)) => Err(Skip::ZeroDenominator),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    m.put("tokens_per_watt", tpw);
}

impl Engine {
    /// The fleet's figures, each server's, and one row per instance at `t`.
    pub fn fleet(&self, t: i64) -> Fleet {
        let w = self.settings.window_ms;
        let o = &self.settings.objectives;
        let mb = &self.settings.memory_bound;
        let mut total = Rates::default();
        let mut by_server: BTreeMap<&'static str, Rates> = BTreeMap::new();
        let mut rows = Vec::new();
        let mut fleet_gpus: BTreeMap<String, Gpu> = BTreeMap::new();
        let keys: Vec<TargetKey> = self.targets.keys().cloned().collect();
        for key in keys {
            let Some(rates) = self.target_rates(&key, t) else { continue };
            total.add(&rates);
            let server = self.schema(&key).and_then(|s| s.source().inference_server());
            if let Some(sv) = server {
                by_server.entry(sv).or_default().add(&rates);
            }
            let mut m = rates.measures(o);
            let gpus = self.serving_gpus(&key, t);
            gpu_measures(&mut m, &gpus.iter().collect::<Vec<_>>(), t, w, mb);
            for g in gpus {
                fleet_gpus.entry(g.id.clone()).or_insert(g);
            }
            rows.push(Row { target: key, server, engines: rates.engines, measures: m });
        }
        let mut measures = total.measures(o);
        let gpus: Vec<&Gpu> = fleet_gpus.values().collect();
        gpu_measures(&mut measures, &gpus, t, w, mb);
        let servers = by_server.into_iter().map(|(k, r)| (k, r.measures(o))).collect();
        Fleet { measures, rows, gpus: gpus.len(), servers }
    }
}
