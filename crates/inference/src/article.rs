//! The reference article's measurements as pairs of scrapes: counters whose
//! increases over 60 s give exactly the numbers in its tables (A10G,
//! Qwen2.5-3B-Instruct, vLLM 0.23). Golden tests and the recorded
//! `report --replay` fixture are built from these.
//!
//! Per 60 s window: 100 finished requests; Δqueue_sum 0.001 s (0.01 ms per
//! request), Δprefill_sum 3.798 s (37.98 ms), Δdecode_sum 166.469 s
//! (1,664.69 ms), Δe2e_sum 171.518 s (1,715.18 ms; decode share 97.06 %);
//! 1,625 of 5,000 prompt tokens cached (32.5 %); 10,360 tokens in 1,000
//! iterations (10.36); 28,746 generated tokens (479.1 tok/s); FB 21,483 MiB
//! used, 1,352 MiB free (94.1 %); 240 W (14,400,000 mJ per 60 s).

/// Counter state of the vLLM side at one scrape.
#[derive(Clone, Copy, Debug)]
pub struct VllmState {
    /// Scrapes since the start (0, 1, ...): counters advance by one window each.
    pub step: f64,
    /// Generated tokens per window (28,746 → 479.1 tok/s; 97,650 → 1,627.5).
    pub generated_per_window: f64,
    /// Requests waiting (gauge).
    pub waiting: f64,
    pub running: f64,
    pub kv_usage: f64,
    /// Counter offset: a restarted vLLM starts over from 0 (`reset = true`).
    pub reset: bool,
}

impl Default for VllmState {
    fn default() -> Self {
        VllmState {
            step: 0.0,
            generated_per_window: 28_746.0,
            waiting: 0.0,
            running: 8.0,
            kv_usage: 0.00255,
            reset: false,
        }
    }
}

const E: &str = "engine=\"0\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"";

fn hist(
    out: &mut String,
    name: &str,
    bounds: &[f64],
    per_bucket: &[f64],
    base: f64,
    k: f64,
    sum_base: f64,
    sum_per: f64,
) {
    // `per_bucket[i]` observations per window land in bucket i (non-cumulative).
    out.push_str(&format!("# HELP {name} {name}\n# TYPE {name} histogram\n"));
    let mut cum = 0.0;
    let total: f64 = per_bucket.iter().sum();
    for (i, b) in bounds.iter().enumerate() {
        cum += per_bucket.get(i).copied().unwrap_or(0.0);
        // A large base in every bucket keeps Prometheus' extrapolation
        // identical across buckets (no zero-clamping), so quantiles of its
        // rates equal ours exactly.
        out.push_str(&format!("{name}_bucket{{{E},le=\"{b:?}\"}} {}\n", base + cum * k));
    }
    out.push_str(&format!("{name}_bucket{{{E},le=\"+Inf\"}} {}\n", base + total * k));
    out.push_str(&format!("{name}_count{{{E}}} {}\n", base + total * k));
    out.push_str(&format!("{name}_sum{{{E}}} {}\n", sum_base + sum_per * k));
}

/// vLLM 0.23 `/metrics` (the families the derivations read).
pub fn vllm(s: VllmState) -> String {
    let k = s.step;
    let b = |x: f64| if s.reset { 0.0 } else { x };
    let mut o = String::new();
    let mut counter = |name: &str, labels: &str, base: f64, per: f64| {
        o.push_str(&format!("# HELP {name} {name}\n# TYPE {name} counter\n{name}{{{labels}}} {}\n", b(base) + per * k));
    };
    counter("vllm:prompt_tokens_total", E, 1_000_000.0, 5_000.0);
    counter("vllm:prompt_tokens_cached_total", E, 300_000.0, 1_625.0);
    counter("vllm:prefix_cache_queries_total", E, 1_000_000.0, 5_000.0);
    counter("vllm:prefix_cache_hits_total", E, 300_000.0, 1_625.0);
    counter("vllm:generation_tokens_total", E, 2_000_000.0, s.generated_per_window);
    o.push_str("# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n");
    for (reason, per) in [("stop", 61.0), ("length", 39.0), ("abort", 0.0), ("error", 0.0), ("repetition", 0.0)] {
        o.push_str(&format!(
            "vllm:request_success_total{{{E},finished_reason=\"{reason}\"}} {}\n",
            b(10_000.0) + per * k
        ));
    }
    o.push_str(&format!("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{E}}} {}\n", s.running));
    o.push_str(&format!("# HELP vllm:num_requests_waiting x\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{E}}} {}\n", s.waiting));
    o.push_str(&format!("# HELP vllm:kv_cache_usage_perc x\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{E}}} {}\n", s.kv_usage));
    let lat = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0];
    let base = b(100_000.0);
    hist(
        &mut o,
        "vllm:e2e_request_latency_seconds",
        &lat,
        &[0.0, 0.0, 0.0, 0.0, 20.0, 70.0, 10.0],
        base,
        k,
        b(171_518.0),
        171.518,
    );
    hist(&mut o, "vllm:request_queue_time_seconds", &lat, &[100.0], base, k, b(1.0), 0.001);
    hist(&mut o, "vllm:request_prefill_time_seconds", &lat, &[100.0], base, k, b(3_798.0), 3.798);
    hist(
        &mut o,
        "vllm:request_decode_time_seconds",
        &lat,
        &[0.0, 0.0, 0.0, 0.0, 25.0, 70.0, 5.0],
        base,
        k,
        b(166_469.0),
        166.469,
    );
    hist(
        &mut o,
        "vllm:request_inference_time_seconds",
        &lat,
        &[0.0, 0.0, 0.0, 0.0, 22.0, 70.0, 8.0],
        base,
        k,
        b(170_267.0),
        170.267,
    );
    hist(
        &mut o,
        "vllm:time_to_first_token_seconds",
        &[0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5],
        &[0.0, 10.0, 60.0, 26.0, 4.0],
        base,
        k,
        b(5_081.0),
        5.081,
    );
    hist(
        &mut o,
        "vllm:inter_token_latency_seconds",
        &[0.01, 0.025, 0.05, 0.075, 0.1],
        &[0.0, 9_800.0, 200.0],
        base,
        k,
        b(162_300.0),
        162.3,
    );
    hist(
        &mut o,
        "vllm:iteration_tokens_total",
        &[1.0, 8.0, 16.0, 32.0],
        &[0.0, 300.0, 700.0],
        base,
        k,
        b(10_360_000.0),
        10_360.0,
    );
    hist(
        &mut o,
        "vllm:request_prompt_tokens",
        &[10.0, 20.0, 50.0, 100.0],
        &[0.0, 0.0, 60.0, 40.0],
        base,
        k,
        b(4_960_000.0),
        4_960.0,
    );
    hist(
        &mut o,
        "vllm:request_generation_tokens",
        &[50.0, 100.0, 200.0],
        &[0.0, 30.0, 70.0],
        base,
        k,
        b(10_360_000.0),
        10_360.0,
    );
    o.push_str("# HELP http_requests_total Total number of requests by method, status and handler.\n# TYPE http_requests_total counter\n");
    for (status, per) in [("2xx", 99.0), ("4xx", 1.0)] {
        o.push_str(&format!(
            "http_requests_total{{handler=\"/v1/chat/completions\",method=\"POST\",status=\"{status}\"}} {}\n",
            b(10_000.0) + per * k
        ));
    }
    o
}

/// dcgm-exporter `/metrics` for the article's A10G: 240 W, 21,483 MiB used,
/// 1,352 MiB free, DRAM active 0.804, tensor 0.166, GPU_UTIL 100.
pub fn dcgm(step: f64, dcgm46: bool) -> String {
    let l = "gpu=\"0\",UUID=\"GPU-5e1d3c7a-0b7e-4c3e-9a51-000000000a10\",pci_bus_id=\"00000000:00:1E.0\",device=\"nvidia0\",modelName=\"NVIDIA A10G\",Hostname=\"ip-10-0-1-23\",DCGM_FI_DRIVER_VERSION=\"580.95.05\"";
    let n = |classic: &'static str, renamed: &'static str| if dcgm46 { renamed } else { classic };
    let mut o = String::new();
    let mut f = |name: &str, typ: &str, v: String| {
        o.push_str(&format!("# HELP {name} {name}\n# TYPE {name} {typ}\n{name}{{{l}}} {v}\n"))
    };
    f(n("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"), "gauge", "100".into());
    f("DCGM_FI_DEV_FB_FREE", "gauge", "1352".into());
    f("DCGM_FI_DEV_FB_USED", "gauge", "21483".into());
    f(n("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS"), "gauge", "240.000000".into());
    f("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", format!("{}", 9_000_000_000.0 + 14_400_000.0 * step));
    f(n("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"), "gauge", "0.998000".into());
    f(n("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"), "gauge", "0.166000".into());
    f(n("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO"), "gauge", "0.804000".into());
    o
}

/// The same GPU without the energy counter (power gauge only).
pub fn dcgm_without_energy(step: f64) -> String {
    dcgm(step, false).lines().filter(|l| !l.contains("TOTAL_ENERGY")).map(|l| format!("{l}\n")).collect()
}
