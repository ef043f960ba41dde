//! Renders the simulator as vLLM's OpenAI server prints `/metrics`.
//!
//! Mirrors vLLM 0.23 (the article's version; V1 engine, current names) as
//! exposed by Python `prometheus_client` 0.0.4 text: labels sorted by name,
//! counters declared `<name>_total` with a separate `<name>_created` gauge
//! family after them, histograms as `_bucket…`, `_count`, `_sum`, then
//! `_created`, every value through `floatToGoString`. The family order, HELP
//! texts and the python/process collectors follow the v0.17 capture in
//! `shared/fixtures/real`; relative to 0.17, 0.20 added
//! `num_requests_waiting_by_reason` and removed `prompt_tokens_recomputed`.

use std::fmt::Write as _;

use crate::engine::{FINISHED_REASONS, Simulator};
use crate::fmt::{escape_label, py_value};
use crate::hist::Histogram;

type Labels = Vec<(&'static str, String)>;

/// Text writer that keeps `prometheus_client`'s conventions in one place.
struct Writer {
    out: String,
    start: f64,
    created_seq: u32,
}

fn label_str(labels: &[(&str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut sorted: Vec<_> = labels.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let body: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
    format!("{{{}}}", body.join(","))
}

impl Writer {
    fn header(&mut self, name: &str, help: &str, typ: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {typ}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], v: f64) {
        let _ = writeln!(self.out, "{name}{} {}", label_str(labels), py_value(v));
    }

    /// `time.time()` when the child was created: the server's start plus the
    /// few microseconds registration takes, so every series differs a little.
    fn next_created(&mut self) -> f64 {
        self.created_seq += 1;
        self.start + 1.27e-5 * f64::from(self.created_seq)
    }

    fn created_family(&mut self, base: &str, help: &str, children: &[(Labels, f64)]) {
        if children.is_empty() {
            return;
        }
        self.header(&format!("{base}_created"), help, "gauge");
        for (l, c) in children {
            self.sample(&format!("{base}_created"), l, *c);
        }
    }

    fn gauge(&mut self, name: &str, help: &str, series: &[(Labels, f64)]) {
        self.header(name, help, "gauge");
        for (l, v) in series {
            self.sample(name, l, *v);
        }
    }

    /// A counter whose children were created at start-up.
    fn counter(&mut self, base: &str, help: &str, series: &[(Labels, f64)]) {
        let with_created: Vec<_> = series.iter().map(|(l, v)| (l.clone(), *v, self.next_created())).collect();
        self.counter_at(base, help, &with_created);
    }

    fn counter_at(&mut self, base: &str, help: &str, series: &[(Labels, f64, f64)]) {
        let total = format!("{base}_total");
        self.header(&total, help, "counter");
        for (l, v, _) in series {
            self.sample(&total, l, *v);
        }
        let created: Vec<_> = series.iter().map(|(l, _, c)| (l.clone(), *c)).collect();
        self.created_family(base, help, &created);
    }

    fn histogram(&mut self, name: &str, help: &str, children: &[(Labels, &Histogram)]) {
        let with_created: Vec<_> = children.iter().map(|(l, h)| (l.clone(), *h, self.next_created())).collect();
        self.histogram_at(name, help, &with_created);
    }

    fn histogram_at(&mut self, name: &str, help: &str, children: &[(Labels, &Histogram, f64)]) {
        self.header(name, help, "histogram");
        for (l, h, _) in children {
            for (le, c) in h.cumulative() {
                let mut bl = l.clone();
                bl.push(("le", py_value(le)));
                self.sample(&format!("{name}_bucket"), &bl, c as f64);
            }
            self.sample(&format!("{name}_count"), l, h.count as f64);
            self.sample(&format!("{name}_sum"), l, h.sum);
        }
        let created: Vec<_> = children.iter().map(|(l, _, c)| (l.clone(), *c)).collect();
        self.created_family(name, help, &created);
    }

    fn summary_at(&mut self, name: &str, help: &str, children: &[(Labels, f64, f64, f64)]) {
        self.header(name, help, "summary");
        for (l, count, sum, _) in children {
            self.sample(&format!("{name}_count"), l, *count);
            self.sample(&format!("{name}_sum"), l, *sum);
        }
        let created: Vec<_> = children.iter().map(|(l, _, _, c)| (l.clone(), *c)).collect();
        self.created_family(name, help, &created);
    }
}

const CHAT: &str = "/v1/chat/completions";

pub(crate) fn render(sim: &Simulator) -> String {
    let mut w = Writer { out: String::with_capacity(96 * 1024), start: sim.start, created_seq: 0 };
    let s = &sim.stats;
    let n = sim.finished_requests;
    let e = || -> Labels { vec![("engine", "0".to_string()), ("model_name", sim.cfg.model_name.clone())] };
    let one = |v: f64| vec![(e(), v)];

    // --- prometheus_client default collectors (gc, platform, process) ---
    let gens =
        |a: [f64; 3]| -> Vec<(Labels, f64)> { (0..3).map(|g| (vec![("generation", g.to_string())], a[g])).collect() };
    let nf = n as f64;
    let gc_collected = [14250.0 + (nf * 91.0).floor(), 2120.0 + (nf * 13.0).floor(), 303.0 + (nf / 4.0).floor()];
    let gc_collections = [1301.0 + (nf / 2.0).floor(), 118.0 + (nf / 22.0).floor(), 9.0 + (nf / 250.0).floor()];
    w.header("python_gc_objects_collected_total", "Objects collected during gc", "counter");
    for (l, v) in gens(gc_collected) {
        w.sample("python_gc_objects_collected_total", &l, v);
    }
    w.header("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", "counter");
    for (l, v) in gens([0.0; 3]) {
        w.sample("python_gc_objects_uncollectable_total", &l, v);
    }
    w.header("python_gc_collections_total", "Number of times this generation was collected", "counter");
    for (l, v) in gens(gc_collections) {
        w.sample("python_gc_collections_total", &l, v);
    }
    w.gauge(
        "python_info",
        "Python platform information",
        &[(
            vec![
                ("implementation", "CPython".into()),
                ("major", "3".into()),
                ("minor", "12".into()),
                ("patchlevel", "13".into()),
                ("version", "3.12.13".into()),
            ],
            1.0,
        )],
    );
    let in_flight = sim.in_flight() as f64;
    w.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", &[(vec![], 9_035_190_272.0)]);
    w.gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        &[(vec![], 1_126_473_728.0 + 65_536.0 * in_flight)],
    );
    // Linux reports the start time in clock ticks (1/100 s) since boot, and
    // the API server process starts ~77 s before the engine is serving.
    let proc_start = ((sim.start - 77.0) * 100.0).round() / 100.0;
    w.gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        &[(vec![], proc_start)],
    );
    w.header("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter");
    w.sample("process_cpu_seconds_total", &[], (sim.cpu_seconds * 100.0).round() / 100.0);
    w.gauge("process_open_fds", "Number of open file descriptors.", &[(vec![], 48.0 + in_flight)]);
    w.gauge("process_max_fds", "Maximum number of open file descriptors.", &[(vec![], 1_048_576.0)]);

    // --- vLLM engine metrics (vllm/v1/metrics/loggers.py order) ---
    let mfu = "(for Model Flops Utilization calculations).";
    // Always registered since 0.17, stay 0 unless --enable-mfu-metrics.
    w.counter(
        "vllm:estimated_flops_per_gpu",
        &format!("Estimated number of floating point operations per GPU {mfu}"),
        &one(0.0),
    );
    w.counter(
        "vllm:estimated_read_bytes_per_gpu",
        &format!("Estimated number of bytes read from memory per GPU {mfu}"),
        &one(0.0),
    );
    w.counter(
        "vllm:estimated_write_bytes_per_gpu",
        &format!("Estimated number of bytes written to memory per GPU {mfu}"),
        &one(0.0),
    );
    w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", &one(sim.running() as f64));
    w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", &one(sim.waiting() as f64));
    // Not in the v0.17 capture; HELP text reconstructed, not copied.
    let by_reason = |r: &str, v: f64| {
        let mut l = e();
        l.push(("reason", r.to_string()));
        (l, v)
    };
    w.gauge(
        "vllm:num_requests_waiting_by_reason",
        "Number of requests waiting to be processed, by reason.",
        &[by_reason("capacity", sim.waiting() as f64), by_reason("deferred", 0.0)],
    );
    let sleep = |st: &str, v: f64| {
        let mut l = e();
        l.push(("sleep_state", st.to_string()));
        (l, v)
    };
    w.gauge(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        &[sleep("awake", 1.0), sleep("weights_offloaded", 0.0), sleep("discard_all", 0.0)],
    );
    w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", &one(sim.kv_cache_usage()));
    w.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        &one(s.prefix_queries),
    );
    w.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", &one(s.prefix_hits));
    w.counter(
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        &one(0.0),
    );
    w.counter(
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        &one(0.0),
    );
    w.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", &one(0.0));
    w.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", &one(0.0));
    w.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", &one(s.preemptions));
    w.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", &one(s.prompt_tokens));
    let src = |name: &str, v: f64| {
        let mut l = e();
        l.push(("source", name.to_string()));
        (l, v)
    };
    w.counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        &[
            src("local_compute", s.prompt_local_compute),
            src("local_cache_hit", s.prompt_local_cache_hit),
            src("external_kv_transfer", 0.0),
        ],
    );
    w.counter(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        &one(s.prompt_local_cache_hit),
    );
    w.counter("vllm:generation_tokens", "Number of generation tokens processed.", &one(s.generation_tokens));
    let reasons: Vec<_> = FINISHED_REASONS
        .iter()
        .zip(s.success)
        .map(|(r, v)| {
            let mut l = e();
            l.push(("finished_reason", r.to_string()));
            (l, v)
        })
        .collect();
    w.counter("vllm:request_success", "Count of successfully processed requests.", &reasons);
    fn h(l: Labels, hist: &Histogram) -> Vec<(Labels, &Histogram)> {
        vec![(l, hist)]
    }
    w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", &h(e(), &s.request_prompt_tokens));
    w.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        &h(e(), &s.request_generation_tokens),
    );
    w.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        &h(e(), &s.iteration_tokens),
    );
    w.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        &h(e(), &s.request_max_num_generation_tokens),
    );
    w.histogram("vllm:request_params_n", "Histogram of the n request parameter.", &h(e(), &s.request_params_n));
    w.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        &h(e(), &s.request_params_max_tokens),
    );
    w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &h(e(), &s.ttft));
    w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &h(e(), &s.itl));
    w.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        &h(e(), &s.tpot),
    );
    w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &h(e(), &s.e2e));
    w.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &h(e(), &s.queue),
    );
    w.histogram(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        &h(e(), &s.inference),
    );
    w.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        &h(e(), &s.prefill),
    );
    w.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        &h(e(), &s.decode),
    );
    w.histogram(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        &h(e(), &s.prefill_kv_computed),
    );
    // Label set as in the v0.17 capture; only the values are ours.
    let cache_cfg: Labels = vec![
        ("block_size", crate::engine::BLOCK_SIZE.to_string()),
        ("cache_dtype", "auto".into()),
        ("calculate_kv_scales", "False".into()),
        ("cpu_kvcache_space_bytes", "None".into()),
        ("cpu_offload_gb", "0".into()),
        ("cpu_offload_params", "set()".into()),
        ("enable_prefix_caching", "True".into()),
        ("engine", "0".into()),
        ("gpu_memory_utilization", "0.9".into()),
        ("is_attention_free", "False".into()),
        ("kv_cache_memory_bytes", "None".into()),
        ("kv_offloading_backend", "native".into()),
        ("kv_offloading_size", "None".into()),
        ("kv_sharing_fast_prefill", "False".into()),
        ("mamba_block_size", "None".into()),
        ("mamba_cache_dtype", "auto".into()),
        ("mamba_cache_mode", "none".into()),
        ("mamba_page_size_padded", "None".into()),
        ("mamba_ssm_cache_dtype", "auto".into()),
        ("num_cpu_blocks", "None".into()),
        ("num_gpu_blocks", sim.kv_blocks_total.to_string()),
        ("num_gpu_blocks_override", "None".into()),
        ("prefix_caching_hash_algo", "sha256".into()),
        ("sliding_window", "None".into()),
        ("swap_space", "4.0".into()),
    ];
    w.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", &[(cache_cfg, 1.0)]);

    // --- prometheus-fastapi-instrumentator (HELP texts end with a space) ---
    let hl = |status: &str| -> Labels {
        vec![("handler", CHAT.into()), ("method", "POST".into()), ("status", status.into())]
    };
    let reqs: Vec<_> = sim.http.requests.iter().map(|c| (hl(c.status), c.value, c.created)).collect();
    w.counter_at("http_requests", "Total number of requests by method, status and handler.", &reqs);
    let handler = || -> Labels { vec![("handler", CHAT.into())] };
    let summary = |x: Option<(f64, f64, f64)>| -> Vec<(Labels, f64, f64, f64)> {
        x.map(|(c, s, t)| vec![(handler(), c, s, t)]).unwrap_or_default()
    };
    w.summary_at(
        "http_request_size_bytes",
        "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
        &summary(sim.http.request_size),
    );
    w.summary_at(
        "http_response_size_bytes",
        "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
        &summary(sim.http.response_size),
    );
    // The unlabelled histogram exists from start-up, created a bit after the
    // engine metrics (the API server registers it when the app is built).
    w.histogram_at(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
        &[(vec![], &sim.http.highr, sim.start + 0.278)],
    );
    let lowr: Vec<_> = sim
        .http
        .lowr
        .iter()
        .map(|(h, c)| (vec![("handler", CHAT.to_string()), ("method", "POST".to_string())], h, *c))
        .collect();
    w.histogram_at(
        "http_request_duration_seconds",
        "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
        &lowr,
    );
    w.out
}
