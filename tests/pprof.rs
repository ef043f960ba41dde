//! The `pprof` extension on the real binary, read by Go's own `go tool
//! pprof` (Debian's golang-go): a CPU profile taken while the agent
//! scrapes names infertel's functions and covers the seconds asked; one
//! profile runs at a time; the heap profile's in-use total is compared
//! with glibc's own count of bytes in use (mallinfo2, which the
//! memory_limiter reports) and names the code that holds the series; a
//! reload to `save_to_file` keeps the port and writes the whole run's CPU
//! profile at shutdown.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::*;

const SERIES: usize = 20_000;

fn config(target: &str, pprof_port: u16, file_out: &Path, save_to_file: &str) -> String {
    format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 200ms, scrape_timeout: 200ms}}
      scrape_configs:
        - job_name: m
          metrics_path: /m
          static_configs: [{{targets: ['{target}']}}]
processors:
  memory_limiter: {{check_interval: 200ms, limit_mib: 4000}}
exporters:
  file: {{path: {out}}}
extensions:
  pprof:
    endpoint: 127.0.0.1:{pprof_port}
    block_profile_fraction: 0
    {save_to_file}
service:
  extensions: [pprof]
  shutdown_timeout: 5s
  pipelines:
    metrics: {{receivers: [prometheus], processors: [memory_limiter], exporters: [file]}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
        out = file_out.display()
    )
}

/// `go tool pprof ARGS FILE`: its standard output (it must succeed).
fn go_pprof(args: &[&str], file: &Path) -> String {
    let go = require("go");
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(go)
        .arg("tool")
        .arg("pprof")
        .args(args)
        .arg(file)
        .env("HOME", home.path())
        .env("PPROF_TMPDIR", home.path())
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "go tool pprof failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Downloads `url` to `file` with curl; the status code.
fn download(url: &str, file: &Path, timeout_s: u32) -> u16 {
    let out = Command::new("curl")
        .args(["-s", "-m", &timeout_s.to_string(), "-o"])
        .arg(file)
        .args(["-w", "%{http_code}", url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

/// `Total samples = 12.5MB` (or `Duration: 3.01s`) from pprof's header.
fn header_value(text: &str, key: &str) -> String {
    let at = text.find(key).unwrap_or_else(|| panic!("{key} not in:\n{text}"));
    text[at + key.len()..].split([' ', ',', '\n']).next().unwrap_or_default().to_string()
}

fn bytes(s: &str) -> f64 {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().unwrap_or_else(|_| panic!("not a size: {s}"));
    n * match unit {
        "B" | "" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => panic!("unit {other}"),
    }
}

/// A Go duration as pprof prints it: `4.01s`, `850ms`, `1m2.5s`.
fn seconds(s: &str) -> f64 {
    let bad = || panic!("not a Go duration: {s}");
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse::<f64>().unwrap_or_else(|_| bad()) / 1000.0;
    }
    let (m, rest) = match s.split_once('m') {
        Some((m, rest)) => (m.parse::<f64>().unwrap_or_else(|_| bad()), rest),
        None => (0.0, s),
    };
    let secs = rest.strip_suffix('s').map_or(0.0, |x| x.parse::<f64>().unwrap_or_else(|_| bad()));
    m * 60.0 + secs
}

#[test]
fn go_tool_pprof_reads_cpu_and_heap_profiles_and_save_to_file_writes_the_run() {
    require("go");
    let t = Targets::start();
    t.set_counter("/m", "pprof_load_total", SERIES);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let out = dir.path().join("metrics.jsonl");
    let agent = Agent::start(&config(&t.addr.to_string(), port, &out, ""));
    let base = format!("http://127.0.0.1:{port}/debug/pprof");
    wait_until("a few scrapes", Duration::from_secs(30), || (t.hits("/m") >= 5).then_some(()));

    // The index, and a Go-only profile refused by name.
    let (code, index) = http_get(&format!("{base}/")).unwrap();
    assert_eq!(code, 200);
    assert!(index.contains("profile?seconds=30") && index.contains("heap"), "{index}");
    let (code, body) = http_get(&format!("{base}/goroutine")).unwrap();
    assert_eq!(code, 404);
    assert!(body.contains("Go runtime profile"), "{body}");
    let (code, _) = http_get(&format!("{base}/profile?seconds=abc")).unwrap();
    assert_eq!(code, 400);

    // A 4 s CPU profile while the agent scrapes 20,000 series 5 times a
    // second; meanwhile a second one is refused.
    let cpu = dir.path().join("cpu.pb.gz");
    let taking = {
        let (url, cpu) = (format!("{base}/profile?seconds=4"), cpu.clone());
        std::thread::spawn(move || download(&url, &cpu, 30))
    };
    std::thread::sleep(Duration::from_millis(800));
    let (code, body) = http_get(&format!("{base}/profile?seconds=1")).unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("already being taken"), "{body}");
    assert_eq!(taking.join().unwrap(), 200);
    let top = go_pprof(&["-top", "-nodecount=400"], &cpu);
    assert!(top.contains("Type: cpu"), "{top}");
    let took = seconds(&header_value(&top, "Duration: "));
    assert!((3.9..6.0).contains(&took), "asked 4 s, profiled {took} s:\n{top}");
    let cpu_total = header_value(&top, "Total samples = ");
    assert!(top.contains("infertel_exposition::") || top.contains("infertel_pipeline::"), "{top}");
    let traces = go_pprof(&["-traces"], &cpu);
    assert!(traces.contains("infertel_pipeline::receivers::prometheus::"), "no scrape stack:\n{traces}");
    assert!(!traces.contains("perf_signal_handler"), "the profiler's own frames are trimmed");

    // The heap: its in-use estimate against glibc's own count.
    // glibc's count is read before the heap profile is taken: symbolizing
    // a profile loads the binary's debug info for a moment (freed after).
    std::thread::sleep(Duration::from_secs(1));
    let used = agent.self_metric("infertel_processor_memory_limiter_used_bytes", &[]);
    let heap = dir.path().join("heap.pb.gz");
    assert_eq!(download(&format!("{base}/heap"), &heap, 30), 200);
    let top = go_pprof(&["-sample_index=inuse_space", "-top", "-nodecount=400"], &heap);
    assert!(top.contains("Type: inuse_space"), "{top}");
    let inuse = bytes(&header_value(&top, "Total samples = "));
    eprintln!("heap: profile in use {inuse:.0} B; glibc in use {used:.0} B; cpu {cpu_total} over {took} s");
    // glibc counts whole chunks (a header and rounding to 16 bytes per
    // block: a 24-byte label is a 32-byte chunk) and everything allocated
    // before the extension started; the sampled estimate counts requested
    // bytes since then, within its sampling error (about 8% at 170
    // samples); the batches in flight differ between the two reads. Seen
    // here: 0.72 to 1.04 of glibc's count. A sampler that never forgot a
    // freed block would be far above (gigabytes are allocated in the run),
    // one that sampled nothing far below.
    assert!(inuse <= used * 1.5, "profile {inuse} > glibc {used}");
    assert!(inuse >= used * 0.3, "profile {inuse} far below glibc {used}");
    let cum = go_pprof(&["-sample_index=inuse_space", "-top", "-cum", "-nodecount=400"], &heap);
    assert!(cum.contains("infertel_pipeline::receivers::prometheus::"), "{cum}");
    let allocs = dir.path().join("allocs.pb.gz");
    assert_eq!(download(&format!("{base}/allocs"), &allocs, 30), 200);
    let a = go_pprof(&["-top"], &allocs);
    assert!(a.contains("Type: alloc_space"), "allocs shows allocated bytes first: {a}");
    assert!(bytes(&header_value(&a, "Total samples = ")) > inuse, "more allocated than in use");
    let (code, cmdline) = http_get(&format!("{base}/cmdline")).unwrap();
    assert_eq!(code, 200);
    assert!(cmdline.contains("run\0--config"), "{cmdline:?}");

    // Reload to save_to_file: the same port, now busy with the whole run.
    let saved = dir.path().join("run.pprof");
    agent.write_config(&config(&t.addr.to_string(), port, &out, &format!("save_to_file: {}", saved.display())));
    let started_before = agent.proc.log_text().matches("starting cpu profiler").count();
    agent.reload();
    wait_until("the reload", Duration::from_secs(20), || agent.proc.log_text().contains("reloaded").then_some(()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        // Refused while the whole run is being profiled.
        let (code, _) = http_get(&format!("{base}/profile?seconds=1")).unwrap_or((0, String::new()));
        if code == 500 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "reload to save_to_file not applied:\n{}", agent.proc.log_text());
    }
    // The profiler takes a moment to start (it symbolizes once, longer in
    // a debug build and under load): once it has, 2 s of run are sampled.
    wait_until("the whole-run profiler to start", Duration::from_secs(60), || {
        (agent.proc.log_text().matches("starting cpu profiler").count() > started_before).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let mut agent = agent;
    assert_eq!(agent.proc.terminate(Duration::from_secs(20)), Some(0), "{}", agent.proc.log_text());
    assert!(saved.is_file(), "save_to_file written at shutdown:\n{}", agent.proc.log_text());
    let top = go_pprof(&["-top", "-nodecount=400"], &saved);
    assert!(top.contains("Type: cpu"), "{top}");
    assert!(seconds(&header_value(&top, "Duration: ")) >= 1.0, "{top}\n{}", agent.proc.log_text());
    assert!(top.contains("infertel_"), "{top}");
    assert!(agent.proc.log_text().contains("CPU profile of the run written to"), "{}", agent.proc.log_text());
}
