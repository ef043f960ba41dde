//! `infertel demo`: starts the simulator on loopback, runs the embedded
//! default pipeline (`config/demo.yaml`) against it and shows, refreshing,
//! what flows: targets and their health, series and samples per second, and
//! a few live values. A newcomer sees the agent work with one command.

use crate::cli::LogArgs;
use crate::exit;
use infertel_model::{Batch, is_stale_nan};
use infertel_pipeline::config::duration::parse_duration;
use infertel_pipeline::{BoxFuture, Consumer, Service, Telemetry};
use infertel_simulator::{SimConfig, serve};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub const DEMO_CONFIG: &str = include_str!("../../../../config/demo.yaml");

#[derive(Default)]
struct TargetState {
    up: f64,
    duration: f64,
    samples: f64,
}

#[derive(Default)]
struct View {
    targets: BTreeMap<(String, String), TargetState>,
    /// metric name → (timestamp ms, summed value) of the last scrapes; rates
    /// span them all, since some counters (prefix queries) move only when a
    /// request is admitted.
    values: BTreeMap<String, Vec<(i64, f64)>>,
    samples_total: u64,
    series_seen: std::collections::HashSet<u64>,
}

/// Sees everything the receivers emit; `.1` the raw names shown.
struct Tap(Mutex<View>, Vec<&'static str>);

/// The simulated server's own names for what the screen shows: running,
/// waiting, KV-pool usage and the generated-tokens counter.
fn server_names(e: infertel_simulator::ServerKind) -> [&'static str; 4] {
    use infertel_simulator::ServerKind as E;
    match e {
        E::Vllm => [
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:generation_tokens_total",
        ],
        E::Sglang => {
            ["sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:generation_tokens_total"]
        }
        E::Tgi => ["tgi_batch_current_size", "tgi_queue_size", "", "tgi_request_generated_tokens_sum"],
        E::Llamacpp => {
            ["llamacpp:requests_processing", "llamacpp:requests_deferred", "", "llamacpp:tokens_predicted_total"]
        }
        E::Trtllm => [
            "trtllm_num_requests_running",
            "trtllm_num_requests_waiting",
            "trtllm_kv_cache_utilization",
            "trtllm_generation_tokens_total",
        ],
        E::Dynamo => [
            "dynamo_frontend_inflight_requests",
            "dynamo_frontend_queued_requests",
            "",
            "dynamo_frontend_output_tokens_total",
        ],
    }
}

const WINDOW: usize = 30;

const SHOWN: &[&str] = &[
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
];

impl Consumer for Tap {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.samples_total += batch.sample_count() as u64;
        let mut sums: BTreeMap<&str, (i64, f64)> = BTreeMap::new();
        for s in &batch.series {
            let Some(p) = s.samples.last() else { continue };
            if is_stale_nan(p.value) {
                continue;
            }
            v.series_seen.insert(s.labels.stable_hash());
            let name = s.labels.metric_name();
            let key =
                || (s.labels.get("job").unwrap_or("").to_string(), s.labels.get("instance").unwrap_or("").to_string());
            match name {
                "up" => v.targets.entry(key()).or_default().up = p.value,
                "scrape_duration_seconds" => v.targets.entry(key()).or_default().duration = p.value,
                "scrape_samples_scraped" => v.targets.entry(key()).or_default().samples = p.value,
                n if SHOWN.contains(&n) || self.1.contains(&n) => {
                    let known = SHOWN.iter().chain(self.1.iter()).find(|x| **x == n).copied().unwrap_or("");
                    let e = sums.entry(known).or_insert((p.timestamp_ms, 0.0));
                    e.1 += p.value;
                }
                _ => {}
            }
        }
        for (name, point) in sums {
            let h = v.values.entry(name.to_string()).or_default();
            h.push(point);
            if h.len() > WINDOW {
                h.remove(0);
            }
        }
        Box::pin(async {})
    }
}

impl View {
    fn last(&self, n: &str) -> Option<f64> {
        self.values.get(n).and_then(|h| h.last()).map(|p| p.1)
    }
    fn rate(&self, n: &str) -> Option<f64> {
        let h = self.values.get(n)?;
        let (first, last) = (h.first()?, h.last()?);
        if last.0 <= first.0 {
            return None;
        }
        Some((last.1 - first.1) / ((last.0 - first.0) as f64 / 1000.0))
    }
    fn delta(&self, n: &str) -> Option<f64> {
        let h = self.values.get(n)?;
        (h.len() >= 2).then(|| h[h.len() - 1].1 - h[0].1)
    }
}

fn fmt_opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "…".into())
}

fn render(
    v: &View,
    elapsed: Duration,
    rate: f64,
    telemetry_addr: &str,
    status_url: &str,
    engine: infertel_simulator::ServerKind,
) -> String {
    let mut s = String::new();
    let [running, waiting, kv, generation] = server_names(engine);
    s.push_str(&format!(
        "infertel demo — simulated {} + dcgm-exporter on loopback — {:.0}s — Ctrl-C to stop\n\n",
        engine.as_str(),
        elapsed.as_secs_f64()
    ));
    if !status_url.is_empty() {
        s.push_str(&format!("status page: {status_url}  (targets, series fate, exporters, inference)\n\n"));
    }
    s.push_str("TARGETS\n");
    s.push_str(&format!("  {:<6} {:<22} {:<5} {:>10} {:>9}\n", "job", "instance", "up", "scrape", "samples"));
    for ((job, inst), t) in &v.targets {
        s.push_str(&format!(
            "  {:<6} {:<22} {:<5} {:>8.1}ms {:>9}\n",
            job,
            inst,
            if t.up == 1.0 { "UP" } else { "DOWN" },
            t.duration * 1000.0,
            t.samples
        ));
    }
    s.push_str(&format!(
        "\nFLOW\n  series seen {}   samples total {}   samples/s {:.0}\n",
        v.series_seen.len(),
        v.samples_total,
        rate
    ));
    let hit = match (v.delta("vllm:prefix_cache_hits_total"), v.delta("vllm:prefix_cache_queries_total")) {
        (Some(h), Some(q)) if q > 0.0 => Some(h / q),
        _ => None,
    };
    let vram = match (v.last("DCGM_FI_DEV_FB_USED"), v.last("DCGM_FI_DEV_FB_FREE")) {
        (Some(u), Some(f)) if u + f > 0.0 => Some(u / (u + f)),
        _ => None,
    };
    s.push_str("\nLIVE VALUES\n");
    s.push_str(&format!("  {running:<30} {}\n", fmt_opt(v.last(running), |x| format!("{x:.0}"))));
    s.push_str(&format!("  {waiting:<30} {}\n", fmt_opt(v.last(waiting), |x| format!("{x:.0}"))));
    if !kv.is_empty() {
        s.push_str(&format!(
            "  {kv:<30} {}  (KV block pool, not VRAM)\n",
            fmt_opt(v.last(kv), |x| format!("{:.1}%", x * 100.0))
        ));
    }
    s.push_str(&format!("  generation tokens/s            {}\n", fmt_opt(v.rate(generation), |x| format!("{x:.1}"))));
    if engine == infertel_simulator::ServerKind::Vllm {
        s.push_str(&format!("  prefix cache hit ratio         {}\n", fmt_opt(hit, |x| format!("{:.1}%", x * 100.0))));
    }
    s.push_str(&format!(
        "  DCGM_FI_DEV_GPU_UTIL           {}  (busy, not efficient)\n",
        fmt_opt(v.last("DCGM_FI_DEV_GPU_UTIL"), |x| format!("{x:.0}%"))
    ));
    s.push_str(&format!(
        "  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE {}\n",
        fmt_opt(v.last("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), |x| format!("{x:.3}"))
    ));
    s.push_str(&format!("  VRAM used (FB_USED/(USED+FREE)) {}\n", fmt_opt(vram, |x| format!("{:.1}%", x * 100.0))));
    s.push_str(&format!(
        "  DCGM_FI_DEV_POWER_USAGE        {}\n",
        fmt_opt(v.last("DCGM_FI_DEV_POWER_USAGE"), |x| format!("{x:.0} W"))
    ));
    s.push_str(&format!("\nagent self-metrics: http://{telemetry_addr}/metrics\n"));
    s
}

pub async fn demo(
    log: &LogArgs,
    duration: Option<String>,
    concurrency: f64,
    interval: String,
    engine: infertel_simulator::ServerKind,
) -> u8 {
    crate::logging::init(log, "warn", false);
    let stop_after = match duration.as_deref().map(parse_duration).transpose() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: --duration: {e}");
            return exit::USAGE;
        }
    };
    if let Err(e) = parse_duration(&interval) {
        eprintln!("error: --interval: {e}");
        return exit::USAGE;
    }
    let loopback = "127.0.0.1:0".parse().expect("literal address");
    let sim = match serve(SimConfig { concurrency, server: engine, ..SimConfig::default() }, loopback, loopback).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the simulator on loopback: {e}");
            return exit::FAILURE;
        }
    };
    let (vllm, dcgm) = (sim.vllm_addr.to_string(), sim.dcgm_addr.to_string());
    // The status page on its usual port when it is free (a bookmark works),
    // on any free loopback port otherwise; INFERTEL_DEMO_STATUS chooses.
    let status_addr = std::env::var("INFERTEL_DEMO_STATUS").unwrap_or_else(|_| {
        if std::net::TcpListener::bind("127.0.0.1:55679").is_ok() {
            "127.0.0.1:55679".into()
        } else {
            "127.0.0.1:0".into()
        }
    });
    let lookup = |n: &str| -> Option<String> {
        match n {
            "INFERTEL_DEMO_VLLM" => Some(vllm.clone()),
            "INFERTEL_DEMO_DCGM" => Some(dcgm.clone()),
            "INFERTEL_DEMO_INTERVAL" => Some(interval.clone()),
            "INFERTEL_DEMO_TELEMETRY" => Some("127.0.0.1:0".into()),
            "INFERTEL_DEMO_STATUS" => Some(status_addr.clone()),
            _ => None,
        }
    };
    let loaded = match infertel_pipeline::load_str("embedded demo config", DEMO_CONFIG, &lookup) {
        Ok(l) => l,
        Err(refused) => {
            super::print_issues("error", &refused.errors);
            return exit::FAILURE;
        }
    };
    let tap = Arc::new(Tap(
        Mutex::new(View::default()),
        server_names(engine).into_iter().filter(|n| !n.is_empty()).collect(),
    ));
    let mut service = match Service::build(loaded.config, Telemetry::new(), Some(tap.clone())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: embedded demo config: {e}");
            return exit::FAILURE;
        }
    };
    let listener = match service.bind_telemetry().await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILURE;
        }
    };
    let telemetry_addr = listener.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()).unwrap_or_default();
    let status_url = match service.bind_status().await {
        Ok(a) => a.first().map(|a| format!("http://{a}/")).unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILURE;
        }
    };
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(service.run(listener, rx));
    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut last = (Instant::now(), 0u64);
    let signal = super::shutdown_signal();
    tokio::pin!(signal);
    loop {
        let tick = tokio::time::sleep(Duration::from_secs(1));
        tokio::select! {
            _ = &mut signal => break,
            _ = tick => {}
        }
        let screen = {
            let v = tap.0.lock().unwrap_or_else(|p| p.into_inner());
            let dt = last.0.elapsed().as_secs_f64().max(1e-3);
            let rate = (v.samples_total - last.1) as f64 / dt;
            last = (Instant::now(), v.samples_total);
            render(&v, start.elapsed(), rate, &telemetry_addr, &status_url, engine)
        };
        let mut out = std::io::stdout().lock();
        if tty {
            let _ = write!(out, "\x1b[2J\x1b[H");
        } else {
            let _ = writeln!(out, "----");
        }
        let _ = write!(out, "{screen}");
        let _ = out.flush();
        if stop_after.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
    }
    let _ = tx.send(true);
    let _ = task.await;
    sim.shutdown();
    exit::OK
}
