//! Derived series and `report` on inputs shaped like real deployments:
//! scrape stamps jittered by a few ms (a scrape loop stamps at wake-up),
//! several replicas, data-parallel engines, dcgm-exporter's per-pod copies of
//! a shared GPU, its 30 s field refresh, failed scrapes. Every expected value
//! is computed by hand in the test from the inputs it writes, never by the
//! code under test.

use infertel_inference::report;
use infertel_inference::{Engine, Evaluation, Join, Settings, Skip, TargetKey};
use infertel_model::{Labels, Sample, Series, stale_nan};

const T0: i64 = 1_785_192_900_000;

/// A few ms of deterministic jitter, as a real scrape loop's stamps have:
/// -5..=5 ms, a different value 8 scrapes (120 s at 15 s) apart, so no stamp
/// falls exactly a whole number of minutes after another.
fn jitter(k: i64) -> i64 {
    (k * 10 + 3).rem_euclid(11) - 5
}

#[test]
fn jitter_never_repeats_two_minutes_later() {
    assert!((0..100).all(|k| jitter(k) != jitter(k + 8) && jitter(k).abs() <= 5));
}

fn series(name: &str, labels: &[(&str, &str)], t: i64, v: f64) -> Series {
    let mut l: Vec<(&str, &str)> = labels.to_vec();
    l.push(("__name__", name));
    Series { labels: Labels::from_pairs(l), samples: infertel_model::samples![Sample { timestamp_ms: t, value: v }] }
}

fn value(ev: &Evaluation, name: &str, label: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<f64> = ev
        .derived
        .iter()
        .filter(|d| d.name == name && label.iter().all(|(k, v)| d.label(k) == Some(v)))
        .map(|d| d.value)
        .collect();
    assert!(hits.len() <= 1, "{name} {label:?}: {} samples with these labels", hits.len());
    hits.first().copied()
}

fn key(job: &str, instance: &str) -> TargetKey {
    TargetKey { job: job.into(), instance: instance.into() }
}

/// One vLLM engine's counters after `secs` seconds at the given rates.
struct Vllm<'a> {
    instance: &'a str,
    engine: &'a str,
    pod: Option<&'a str>,
    gen_per_s: f64,
    prompt_per_s: f64,
    cached_share: f64,
    waiting: f64,
}

impl<'a> Vllm<'a> {
    /// Engine 0, no pod, 10 prompt tokens/s, half cached, no queue.
    fn at(instance: &'a str, gen_per_s: f64) -> Self {
        Vllm { instance, engine: "0", pod: None, gen_per_s, prompt_per_s: 10.0, cached_share: 0.5, waiting: 0.0 }
    }

    fn scrape(&self, t: i64, secs: f64) -> Vec<Series> {
        let mut l = vec![("engine", self.engine), ("instance", self.instance), ("job", "vllm"), ("model_name", "m")];
        if let Some(p) = self.pod {
            l.push(("namespace", "llm"));
            l.push(("pod", p));
        }
        // A large base, as a long-running server's counters have.
        let base = 1.0e6;
        vec![
            series("vllm:generation_tokens_total", &l, t, base + self.gen_per_s * secs),
            series("vllm:prompt_tokens_total", &l, t, base + self.prompt_per_s * secs),
            series("vllm:prompt_tokens_cached_total", &l, t, base + self.prompt_per_s * self.cached_share * secs),
            series("vllm:prefix_cache_queries_total", &l, t, base + self.prompt_per_s * secs),
            series("vllm:prefix_cache_hits_total", &l, t, base + self.prompt_per_s * self.cached_share * secs),
            series("vllm:kv_cache_usage_perc", &l, t, 0.1),
            series("vllm:num_requests_waiting", &l, t, self.waiting),
        ]
    }
}

/// One GPU's dcgm-exporter series; `pods` gives one copy per sharing pod
/// (dcgm-exporter with --kubernetes-virtual-gpus), none for an unmapped GPU.
fn gpu(uuid: &str, host: &str, pods: &[&str], t: i64, watts: f64, energy_mj: f64, dram: f64) -> Vec<Series> {
    let copies: Vec<Option<&str>> = if pods.is_empty() { vec![None] } else { pods.iter().map(|p| Some(*p)).collect() };
    let mut out = Vec::new();
    for pod in copies {
        let mut l = vec![("Hostname", host), ("UUID", uuid), ("gpu", "0"), ("instance", host), ("job", "dcgm")];
        if let Some(p) = pod {
            l.push(("namespace", "llm"));
            l.push(("pod", p));
        }
        out.push(series("DCGM_FI_DEV_POWER_USAGE", &l, t, watts));
        out.push(series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", &l, t, energy_mj));
        out.push(series("DCGM_FI_DEV_FB_USED", &l, t, 20_000.0));
        out.push(series("DCGM_FI_DEV_FB_FREE", &l, t, 4_000.0));
        out.push(series("DCGM_FI_PROF_DRAM_ACTIVE", &l, t, dram));
        out.push(series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", &l, t, 0.1));
    }
    out
}

/// Finding 1: with jittered stamps no sample falls exactly at t − 120 s; the
/// sample in force then decides, so a queue that never empties fires in
/// every evaluation once two minutes of history exist.
#[test]
fn sustained_waiting_fires_with_jittered_scrapes() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm { waiting: 3.0, ..Vllm::at("a:8000", 100.0) };
    let mut fired = 0;
    let mut evaluated = 0;
    for k in 0..40 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        // From the 10th scrape on, 2 min 15 s of history: t − 120 s has a sample before it.
        if k >= 9 {
            evaluated += 1;
            let ev = e.evaluate(&key("vllm", "a:8000"), t);
            if value(&ev, "infertel_scale_signal", &[]) == Some(1.0) {
                fired += 1;
            }
        }
    }
    assert_eq!((fired, evaluated), (evaluated, 31), "every evaluation with 2 min of waiting > 0 fires");
}

/// Finding 2: the report's figures are the fleet's, not the first target's;
/// one row per instance; the worst instance is named.
#[test]
fn report_figures_are_the_fleets() {
    let mut e = Engine::new(Settings::default());
    let a = Vllm { prompt_per_s: 200.0, cached_share: 0.1, ..Vllm::at("a:8000", 479.0) };
    let b = Vllm { prompt_per_s: 200.0, cached_share: 0.6, ..Vllm::at("b:8000", 1000.0) };
    let mut end = 0;
    for k in 0..5 {
        let ta = T0 + k * 15_000 + jitter(k);
        let tb = T0 + k * 15_000 + jitter(k + 3);
        e.ingest(&a.scrape(ta, (ta - T0) as f64 / 1000.0));
        e.ingest(&b.scrape(tb, (tb - T0) as f64 / 1000.0));
        end = ta.max(tb);
    }
    let r = report::build(&mut e, end);
    let m = &r.measurements;
    // sum(rate(gen)): 479 + 1000; sum(rate(cached)) / sum(rate(prompt)):
    // (20 + 120) / 400 = 35 %.
    assert!((m["generation_tokens_per_second"] - 1479.0).abs() < 1e-6, "{}", m["generation_tokens_per_second"]);
    assert!((m["prompt_tokens_cached_ratio"] - 0.35).abs() < 1e-9, "{}", m["prompt_tokens_cached_ratio"]);
    assert_eq!(r.instances.len(), 2);
    let cached: Vec<f64> = r.instances.iter().map(|i| i.measurements["prompt_tokens_cached_ratio"]).collect();
    assert!((cached[0] - 0.1).abs() < 1e-9 && (cached[1] - 0.6).abs() < 1e-9, "{cached:?}");
    let rec = r.recommendations.iter().find(|x| x.id == "standardize_prompt_prefix").expect("35% < 70%");
    assert!(rec.text.contains("35.0%"), "cites the fleet figure: {}", rec.text);
    assert!(rec.text.contains("vllm/a:8000 10.0%") && rec.text.contains("vllm/b:8000 60.0%"), "{}", rec.text);
    assert!(r.verdicts.iter().any(|v| v.scope == "fleet"));
    assert!(r.verdicts.iter().any(|v| v.scope.starts_with("worst instance vllm/")));
}

/// Finding 3: `join: pod` with data-parallel engines of one pod: one sample
/// per pod, the engines' tokens added before dividing by the pod's GPUs.
#[test]
fn pod_join_gives_one_sample_per_pod() {
    let mut e = Engine::new(Settings { join: Join::Pod, ..Settings::default() });
    let engines = ["0", "1"].map(|en| Vllm { engine: en, pod: Some("vllm-0"), ..Vllm::at("a:8000", 500.0) });
    let mut end = 0;
    for k in 0..5 {
        let t = T0 + k * 15_000 + jitter(k);
        let secs = (t - T0) as f64 / 1000.0;
        let mut batch = Vec::new();
        for en in &engines {
            batch.extend(en.scrape(t, secs));
        }
        e.ingest(&batch);
        let mut g = gpu("GPU-a", "node-1", &["vllm-0"], t + 1, 240.0, 0.0, 0.4);
        g.extend(gpu("GPU-b", "node-1", &["vllm-0"], t + 1, 240.0, 0.0, 0.4));
        e.ingest(&g);
        end = t + 1;
    }
    e.evaluate(&key("dcgm", "node-1"), end);
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    let n = ev.derived.iter().filter(|d| d.name == "infertel_tokens_per_watt").count();
    assert_eq!(n, 1, "one sample for the pod");
    let got = value(&ev, "infertel_tokens_per_watt", &[("pod", "vllm-0")]).unwrap();
    // (500 + 500) tok/s over 2 × 240 W; the energy counter does not move, so mean power.
    assert!((got - 1000.0 / 480.0).abs() < 1e-6, "{got}");
}

/// Finding 4: DCGM refreshes its energy counter every 30 s; scraped every
/// 15 s, a steady 240 W must read 240 W in every evaluation.
#[test]
fn tokens_per_joule_is_steady_under_dcgm_refresh() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm::at("a:8000", 1627.5);
    // DCGM's update times: every 30 s from an arbitrary phase.
    let refreshed_mj = |t: i64| {
        let last_update = (t - T0 - 7_000).div_euclid(30_000) * 30_000 + 7_000;
        5.0e9 + 240.0 * last_update as f64
    };
    let mut values = Vec::new();
    for k in 0..24 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        e.ingest(&gpu("GPU-a", "node-1", &[], t + 2, 240.0, refreshed_mj(t + 2), 0.4));
        if k >= 6 {
            e.evaluate(&key("dcgm", "node-1"), t + 2);
            let ev = e.evaluate(&key("vllm", "a:8000"), t + 2);
            values.push(value(&ev, "infertel_tokens_per_watt", &[]).expect("tokens per watt"));
        }
    }
    let want = 1627.5 / 240.0;
    for x in &values {
        assert!((x / want - 1.0).abs() < 0.02, "{x} vs {want}: {values:?}");
    }
}

/// Finding 4, DCGM 4.6.1: the energy counter in joules.
#[test]
fn energy_in_joules_from_dcgm_4_6_1() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..9 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        let l = [("UUID", "GPU-a"), ("gpu", "0"), ("instance", "node-1"), ("job", "dcgm")];
        // 200 W as joules, updated on every scrape; the power gauge says 999
        // W so that using it would show.
        e.ingest(&[
            series("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", &l, t + 1, 1.0e7 + 200.0 * (t + 1 - T0) as f64 / 1000.0),
            series("DCGM_FI_DEV_POWER_USAGE", &l, t + 1, 999.0),
        ]);
        end = t + 1;
    }
    e.evaluate(&key("dcgm", "node-1"), end);
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    let got = value(&ev, "infertel_tokens_per_watt", &[]).unwrap();
    assert!((got - 480.0 / 200.0).abs() < 1e-3, "{got}");
}

/// Finding 5: a failed scrape (up 0, a marker on every other series) does not
/// blank the derived series. Counter 1000, 1500, marker, 2500, 3000 at 0, 15,
/// 30, 45, 60 s: the increase between the samples in a 60 s window, over
/// the time between them, is 500/15, 1500/45 and 2000/60 = 33.3 tokens/s at
/// 30, 45 and 60 s (PromQL's extrapolating rate() says 20.8 at 30 s; see the
/// Prometheus test in tests/inference.rs).
#[test]
fn failed_scrape_does_not_blank_derived_series() {
    let mut e = Engine::new(Settings::default());
    let l = [("engine", "0"), ("instance", "a:8000"), ("job", "vllm"), ("model_name", "m")];
    let up = [("instance", "a:8000"), ("job", "vllm")];
    let mut got = Vec::new();
    for (k, v) in [Some(1000.0), Some(1500.0), None, Some(2500.0), Some(3000.0)].into_iter().enumerate() {
        let t = T0 + k as i64 * 15_000;
        let batch = match v {
            Some(v) => vec![series("up", &up, t, 1.0), series("vllm:generation_tokens_total", &l, t, v)],
            None => vec![series("up", &up, t, 0.0), series("vllm:generation_tokens_total", &l, t, stale_nan())],
        };
        e.ingest(&batch);
        let ev = e.evaluate(&key("vllm", "a:8000"), t);
        got.push(value(&ev, "infertel_generation_tokens_per_second", &[]));
        assert!(ev.stale.is_empty() || k < 2, "nothing goes stale at {k}: {:?}", ev.stale);
    }
    let want = [None, Some(500.0 / 15.0), Some(500.0 / 15.0), Some(1500.0 / 45.0), Some(2000.0 / 60.0)];
    assert_eq!(got, want);
}

/// Finding 6: a GPU shared by two pods appears twice; it counts once.
#[test]
fn shared_gpu_is_counted_once() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..5 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        e.ingest(&gpu("GPU-a", "node-1", &["vllm-0", "vllm-1"], t + 1, 240.0, 0.0, 0.3));
        end = t + 1;
    }
    let d = e.evaluate(&key("dcgm", "node-1"), end);
    // DRAM 0.3 per copy: summed it would read 0.6 ≥ 0.5 and flip memory_bound.
    assert_eq!(value(&d, "infertel_memory_bound", &[("UUID", "GPU-a")]), Some(0.0));
    assert!((value(&d, "infertel_vram_used_ratio", &[("UUID", "GPU-a")]).unwrap() - 20_000.0 / 24_000.0).abs() < 1e-12);
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    assert!((value(&ev, "infertel_tokens_per_watt", &[]).unwrap() - 2.0).abs() < 1e-9, "480 tok/s over one 240 W GPU");
}

/// Finding 7: `join: node` divides by the GPUs of the engine's node that
/// serve it; a GPU allocated to another pod is idle power, reported apart.
#[test]
fn node_join_uses_the_engines_node() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm { pod: Some("vllm-0"), ..Vllm::at("a:8000", 480.0) };
    let mut end = 0;
    for k in 0..5 {
        let t = T0 + k * 15_000 + jitter(k);
        let mut s = v.scrape(t, (t - T0) as f64 / 1000.0);
        // The discovery relabeling's node label on every series of the target.
        for x in &mut s {
            let mut l: Vec<(String, String)> =
                x.labels.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect();
            l.push(("node".into(), "node-1".into()));
            x.labels = Labels::from_pairs(l.iter().map(|(a, b)| (a.as_str(), b.as_str())));
        }
        e.ingest(&s);
        let mut g = gpu("GPU-a", "node-1", &["vllm-0"], t + 1, 240.0, 0.0, 0.4);
        g.extend(gpu("GPU-b", "node-1", &["trainer-0"], t + 1, 100.0, 0.0, 0.4));
        e.ingest(&g);
        // Another node's GPU, scraped by the same agent: not this engine's.
        e.ingest(&gpu("GPU-c", "node-2", &[], t + 1, 300.0, 0.0, 0.4));
        end = t + 1;
    }
    for dk in ["node-1", "node-2"] {
        e.evaluate(&key("dcgm", dk), end);
    }
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    assert!((value(&ev, "infertel_tokens_per_watt", &[("node", "node-1")]).unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(value(&ev, "infertel_gpu_idle_watts", &[("node", "node-1")]), Some(100.0));
}

/// Finding 9: a 300 ms objective inside the (0.25, 0.5] bucket: the buckets
/// bound the share within it; the verdict is given only where the bounds agree.
#[test]
fn objective_inside_a_bucket() {
    // (share ≤ 0.25 s, share ≤ 0.5 s) → expected ok and bounds.
    for (le25, le50, want) in [(0.90, 1.0, None), (0.96, 1.0, Some(1.0)), (0.80, 0.90, Some(0.0))] {
        // 70 s: five 15 s scrapes, whatever the jitter.
        let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
        let l = |le: &'static str| {
            [("engine", "0"), ("instance", "a:8000"), ("job", "vllm"), ("le", le), ("model_name", "m")]
        };
        let mut end = 0;
        for k in 0..5 {
            let t = T0 + k * 15_000 + jitter(k);
            let n = 100.0 * k as f64; // 100 requests per scrape
            let name = "vllm:time_to_first_token_seconds_bucket";
            e.ingest(&[
                series(name, &l("0.1"), t, n * 0.5),
                series(name, &l("0.25"), t, n * le25),
                series(name, &l("0.5"), t, n * le50),
                series(name, &l("+Inf"), t, n),
            ]);
            end = t;
        }
        let ev = e.evaluate(&key("vllm", "a:8000"), end);
        let obj = [("objective", "ttft_p95")];
        let lower = value(&ev, "infertel_slo_share_within", &[obj[0], ("bound", "lower")]).unwrap();
        let upper = value(&ev, "infertel_slo_share_within", &[obj[0], ("bound", "upper")]).unwrap();
        assert!((lower - le25).abs() < 1e-9 && (upper - le50).abs() < 1e-9, "{lower} {upper}");
        assert_eq!(value(&ev, "infertel_slo_ok", &obj), want);
        if want.is_none() {
            assert!(ev.skipped.contains(&("infertel_slo_ok", Skip::Indeterminate)));
            let r = report::build(&mut e, end);
            let v = r.verdicts.iter().find(|v| v.objective == "ttft_p95" && v.scope == "fleet").unwrap();
            assert_eq!(v.verdict, "INDETERMINATE");
            let (lo, hi) = v.share_within.unwrap();
            assert!((lo - 0.9).abs() < 1e-9 && hi == 1.0, "{lo} {hi}");
            assert!(v.note.contains("250 ms or 500 ms"), "{}", v.note);
            assert!(r.to_table().contains("INDETERMINATE"));
        }
    }
}

/// Finding 10: a child seen in the last scrape only (one sample) does not
/// void the ratio: it counts from its first sample (0 in the window).
#[test]
fn label_child_in_the_last_scrape_only() {
    // 70 s: five 15 s scrapes, whatever the jitter.
    let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
    let l = |r: &'static str| {
        [("engine", "0"), ("finished_reason", r), ("instance", "a:8000"), ("job", "vllm"), ("model_name", "m")]
    };
    let mut end = 0;
    for k in 0..5i64 {
        let t = T0 + k * 15_000 + jitter(k);
        let mut b = vec![series("vllm:request_success_total", &l("stop"), t, 1000.0 + 90.0 * k as f64)];
        if k == 4 {
            b.push(series("vllm:request_success_total", &l("error"), t, 3.0));
        }
        e.ingest(&b);
        end = t;
    }
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    assert_eq!(value(&ev, "infertel_error_abort_ratio", &[]), Some(0.0));
    assert_eq!(value(&ev, "infertel_finished_ratio", &[("finished_reason", "stop")]), Some(1.0));
}

/// Finding 10: a `finished_reason` child first seen mid-window counts from 0
/// at its `_created` time, else from its first sample; it never voids the
/// ratio, and its rate is over the window's span, not its own (2 errors in
/// its 15 s must not read as 8 over the minute). The median is `p50`.
#[test]
fn label_child_born_mid_window() {
    for with_created in [true, false] {
        // 70 s: five 15 s scrapes, whatever the jitter.
        let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
        let base = [("engine", "0"), ("instance", "a:8000"), ("job", "vllm"), ("model_name", "m")];
        let with = |r: &'static str| {
            let mut v = base.to_vec();
            v.push(("finished_reason", r));
            v
        };
        let mut end = 0;
        for k in 0..5i64 {
            let t = T0 + k * 15_000 + jitter(k);
            let mut b = vec![series("vllm:request_success_total", &with("stop"), t, 1000.0 + 90.0 * k as f64)];
            if k >= 3 {
                // First error seen at k=3 with 4 errors already, 6 at k=4.
                b.push(series("vllm:request_success_total", &with("error"), t, if k == 3 { 4.0 } else { 6.0 }));
                if with_created {
                    let born = (T0 + 2 * 15_000 + 7_000) as f64 / 1000.0;
                    b.push(series("vllm:request_success_created", &with("error"), t, born));
                }
            }
            e.ingest(&b);
            end = t;
        }
        let ev = e.evaluate(&key("vllm", "a:8000"), end);
        // stop: 360 over the window; error: 6 from 0 at its creation, or 2
        // from its first sample.
        let errors = if with_created { 6.0 } else { 2.0 };
        let got = value(&ev, "infertel_error_abort_ratio", &[]).expect("not voided");
        assert!((got - errors / (360.0 + errors)).abs() < 1e-9, "{with_created}: {got}");
    }
}

#[test]
fn the_median_is_p50() {
    let mut e = Engine::new(Settings::default());
    let l =
        |le: &'static str| [("engine", "0"), ("instance", "a:8000"), ("job", "vllm"), ("le", le), ("model_name", "m")];
    for k in 0..3 {
        let t = T0 + k * 15_000;
        let n = 10.0 * k as f64;
        e.ingest(&[
            series("vllm:time_to_first_token_seconds_bucket", &l("0.1"), t, n),
            series("vllm:time_to_first_token_seconds_bucket", &l("+Inf"), t, n),
        ]);
    }
    let r = report::build(&mut e, T0 + 30_000);
    assert!(r.measurements.contains_key("ttft_seconds_p50"), "{:?}", r.measurements.keys());
    assert!(!r.measurements.contains_key("ttft_seconds_p5"));
}

/// The article's triad per GPU, each shared GPU once; and every derived
/// series the engine emits has a catalog entry (HELP, unit).
#[test]
fn gpu_activity_triad_and_catalog() {
    let mut e = Engine::new(Settings::default());
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..5 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        let mut g = gpu("GPU-a", "node-1", &["vllm-0", "vllm-1"], t + 1, 240.0, 0.0, 0.804);
        for pod in ["vllm-0", "vllm-1"] {
            let l = [
                ("Hostname", "node-1"),
                ("UUID", "GPU-a"),
                ("gpu", "0"),
                ("instance", "node-1"),
                ("job", "dcgm"),
                ("namespace", "llm"),
                ("pod", pod),
            ];
            g.push(series("DCGM_FI_DEV_GPU_UTIL", &l, t + 1, 100.0));
            g.push(series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &l, t + 1, 0.998));
        }
        e.ingest(&g);
        end = t + 1;
    }
    let d = e.evaluate(&key("dcgm", "node-1"), end);
    let act = |a: &str| value(&d, "infertel_gpu_activity_ratio", &[("activity", a)]);
    assert_eq!(
        (act("util"), act("graphics"), act("dram"), act("tensor")),
        (Some(1.0), Some(0.998), Some(0.804), Some(0.1))
    );
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    for x in d.derived.iter().chain(&ev.derived) {
        assert!(infertel_inference::catalog::def(x.name).is_some(), "{} has no catalog entry", x.name);
    }
}

/// Client disconnects where the HTTP layer records them (499): a share of
/// all requests per handler; the 499 child first seen mid-window counts
/// from its first sample.
#[test]
fn http_client_aborts_from_499() {
    // 70 s: five 15 s scrapes, whatever the jitter.
    let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
    let l = |status: &'static str| {
        [
            ("handler", "/v1/chat/completions"),
            ("instance", "a:8000"),
            ("job", "vllm"),
            ("method", "POST"),
            ("status", status),
        ]
    };
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..5i64 {
        let t = T0 + k * 15_000 + jitter(k);
        let mut b = v.scrape(t, (t - T0) as f64 / 1000.0);
        b.push(series("http_requests_total", &l("200"), t, 500.0 + 95.0 * k as f64));
        if k >= 1 {
            b.push(series("http_requests_total", &l("499"), t, 1.0 + 5.0 * (k - 1) as f64));
        }
        e.ingest(&b);
        end = t;
    }
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    // 200: 380 over the window; 499: 15 from its first sample.
    let got = value(&ev, "infertel_http_client_abort_ratio", &[("handler", "/v1/chat/completions")]).unwrap();
    assert!((got - 15.0 / 395.0).abs() < 1e-9, "{got}");
    let err = value(&ev, "infertel_http_error_ratio", &[("handler", "/v1/chat/completions")]).unwrap();
    assert!((err - 15.0 / 395.0).abs() < 1e-9, "499 is a 4xx: {err}");
}

/// Several handlers, each its own ratio of its own children: a 5xx child
/// born mid-window counts from its first sample, a handler seen in one
/// scrape only has no rate yet (skipped as a first window), and the other
/// handlers' children do not leak into a handler's ratio.
#[test]
fn http_error_ratio_per_handler_of_its_own_children() {
    let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
    let l = |handler: &'static str, status: &'static str| {
        [("handler", handler), ("instance", "a:8000"), ("job", "vllm"), ("method", "POST"), ("status", status)]
    };
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..5i64 {
        let t = T0 + k * 15_000 + jitter(k);
        let mut b = v.scrape(t, (t - T0) as f64 / 1000.0);
        let x = k as f64;
        b.push(series("http_requests_total", &l("/v1/chat/completions", "200"), t, 1_000.0 + 100.0 * x));
        if k >= 2 {
            b.push(series("http_requests_total", &l("/v1/chat/completions", "500"), t, 3.0 + 2.0 * (x - 2.0)));
        }
        b.push(series("http_requests_total", &l("/v1/completions", "200"), t, 50.0 + 10.0 * x));
        b.push(series("http_requests_total", &l("/v1/completions", "404"), t, x));
        if k == 4 {
            b.push(series("http_requests_total", &l("/health", "200"), t, 7.0));
        }
        e.ingest(&b);
        end = t;
    }
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    let ratio = |h| value(&ev, "infertel_http_error_ratio", &[("handler", h)]);
    // chat: 400 answered 200, 500s from 3 to 7 (4); completions: 40 and 4.
    let chat = ratio("/v1/chat/completions").expect("chat");
    assert!((chat - 4.0 / 404.0).abs() < 1e-12, "{chat}");
    let completions = ratio("/v1/completions").expect("completions");
    assert!((completions - 4.0 / 44.0).abs() < 1e-12, "{completions}");
    assert_eq!(ratio("/health"), None);
    assert!(ev.skipped.contains(&("infertel_http_error_ratio", Skip::FirstWindow)), "{:?}", ev.skipped);
    assert_eq!(ev.derived.iter().filter(|d| d.name == "infertel_http_error_ratio").count(), 2);
}

/// Finding 10 (memory-bound evidence) and finding 7 with the agent's node:
/// the engine has no `node` label, the agent runs on node-1
/// (`K8S_NODE_NAME`), it also scrapes node-2's GPU. `report` quotes the
/// DRAM/tensor means and power of node-1's GPU only.
#[test]
fn report_quotes_the_joined_gpus() {
    let mut e = Engine::new(Settings { node_name: Some("node-1".into()), ..Settings::default() });
    let v = Vllm::at("a:8000", 480.0);
    let mut end = 0;
    for k in 0..5 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&v.scrape(t, (t - T0) as f64 / 1000.0));
        e.ingest(&gpu("GPU-a", "node-1", &[], t + 1, 240.0, 0.0, 0.804));
        e.ingest(&gpu("GPU-c", "node-2", &[], t + 1, 60.0, 0.0, 0.02));
        end = t + 1;
    }
    let r = report::build(&mut e, end);
    let m = &r.measurements;
    assert_eq!(m["dram_active_mean"], 0.804, "node-2's idle GPU is not averaged in");
    assert_eq!(m["gpu_watts"], 240.0);
    assert!((m["tokens_per_watt"] - 2.0).abs() < 1e-9);
    assert_eq!(m["memory_bound"], 1.0);
    let ev = e.evaluate(&key("vllm", "a:8000"), end);
    assert!((value(&ev, "infertel_tokens_per_watt", &[("node", "node-1")]).unwrap() - 2.0).abs() < 1e-9);
}

/// The article's other figures, by hand from the counters written: requests
/// per minute, per-request token means, requested max_tokens, preemptions,
/// speculative decoding; and `finished_reason="length"` read against
/// `request_params_max_tokens`: 40 generated tokens per request against a
/// requested 1,000 means the context limit was hit, not max_tokens.
#[test]
fn article_figures_and_which_length_limit() {
    let mut e = Engine::new(Settings { window_ms: 70_000, ..Settings::default() });
    let l = [("engine", "0"), ("instance", "a:8000"), ("job", "vllm"), ("model_name", "m")];
    let with = |k: &'static str, v: &'static str| {
        let mut x = l.to_vec();
        x.push((k, v));
        x
    };
    let mut end = 0;
    for k in 0..5i64 {
        let t = T0 + k * 15_000 + jitter(k);
        let f = k as f64; // per 15 s scrape: 30 requests, 12 of them at length
        e.ingest(&[
            series("vllm:e2e_request_latency_seconds_count", &l, t, 9000.0 + 30.0 * f),
            series("vllm:e2e_request_latency_seconds_sum", &l, t, 9000.0 + 45.0 * f),
            series("vllm:request_generation_tokens_sum", &l, t, 5.0e5 + 1200.0 * f),
            series("vllm:request_prompt_tokens_sum", &l, t, 7.0e5 + 6000.0 * f),
            series("vllm:request_prompt_tokens_count", &l, t, 9000.0 + 30.0 * f),
            series("vllm:request_params_max_tokens_sum", &l, t, 9.0e6 + 30_000.0 * f),
            series("vllm:request_params_max_tokens_count", &l, t, 9000.0 + 30.0 * f),
            series("vllm:request_success_total", &with("finished_reason", "length"), t, 3000.0 + 12.0 * f),
            series("vllm:request_success_total", &with("finished_reason", "stop"), t, 6000.0 + 18.0 * f),
            series("vllm:num_preemptions_total", &l, t, 50.0 + 1.5 * f),
            series("vllm:spec_decode_num_drafts_total", &l, t, 1.0e4 + 100.0 * f),
            series("vllm:spec_decode_num_draft_tokens_total", &l, t, 3.0e4 + 300.0 * f),
            series("vllm:spec_decode_num_accepted_tokens_total", &l, t, 2.0e4 + 210.0 * f),
            series("vllm:generation_tokens_total", &l, t, 1.0e6 + 1200.0 * f),
            series("vllm:kv_cache_usage_perc", &l, t, 0.2),
        ]);
        end = t;
    }
    let r = report::build(&mut e, end);
    let m = &r.measurements;
    let close = |k: &str, v: f64| assert!((m[k] - v).abs() < 1e-9 * v.abs().max(1.0), "{k}: {} vs {v}", m[k]);
    // Rates over the sampled span (jittered: not exactly 60 s).
    let span = (end - (T0 + jitter(0))) as f64 / 1000.0;
    close("requests_per_minute", 120.0 / span * 60.0);
    close("preemptions_per_minute", 6.0 / span * 60.0);
    close("generation_tokens_per_request_mean", 40.0);
    close("prompt_tokens_per_request_mean", 200.0);
    close("max_tokens_per_request_mean", 1000.0);
    close("spec_decode_acceptance_ratio", 0.7);
    close("spec_decode_mean_acceptance_length", 3.1);
    close("finished_ratio_length", 0.4);
    let rec = r.recommendations.iter().find(|x| x.id == "raise_max_tokens").expect("40% at length");
    assert!(rec.text.contains("max_model_len"), "{}", rec.text);
    assert!(rec.text.contains("raising max_tokens will not help"), "{}", rec.text);
}

/// DCGM 4.6.1's framebuffer ratio where used/free are not exported.
#[test]
fn vram_from_fb_used_ratio() {
    let mut e = Engine::new(Settings::default());
    let l = [("UUID", "GPU-a"), ("gpu", "0"), ("instance", "node-1"), ("job", "dcgm")];
    for k in 0..3 {
        let t = T0 + k * 15_000 + jitter(k);
        e.ingest(&[series("DCGM_FI_DEV_FB_USED_RATIO", &l, t, 0.91), series("DCGM_FI_DEV_POWER_USAGE", &l, t, 200.0)]);
    }
    let d = e.evaluate(&key("dcgm", "node-1"), T0 + 30_000 + jitter(2));
    assert_eq!(value(&d, "infertel_vram_used_ratio", &[]), Some(0.91));
}
