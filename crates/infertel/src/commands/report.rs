//! `infertel report`: samples vLLM and dcgm-exporter for a window (or reads
//! recorded scrapes with `--replay`), then prints the verdicts against the
//! objectives and the recommendations the numbers support.
//!
//! Replay layout: `DIR/<job>/<instance>/<unix seconds>.prom` (one folder per
//! target: several replicas of one job are several instance folders),
//! `DIR/<job>/<unix seconds>.prom` (instance `replay`), or `DIR/<unix
//! seconds>.prom` for a single target (job `replay`). Fractional seconds are
//! allowed. `--record DIR` writes the first layout while sampling live.

use crate::cli::{LogArgs, ReportFormat};
use crate::exit;
use infertel_inference::report;
use infertel_inference::scrape::series_from_text;
use infertel_inference::{Engine, Settings};
use infertel_pipeline::config::duration::parse_duration;
use infertel_pipeline::processors::ProcessorConfig;
use infertel_pipeline::receivers::ReceiverConfig;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct ReportArgs {
    pub config: Option<PathBuf>,
    pub urls: Vec<String>,
    pub window: String,
    pub interval: String,
    pub format: ReportFormat,
    pub replay: Option<PathBuf>,
    pub record: Option<PathBuf>,
}

struct Target {
    job: String,
    instance: String,
    url: String,
}

fn parse_ts(stem: &str) -> Option<i64> {
    let v: f64 = stem.parse().ok()?;
    Some(if v > 1e11 { v as i64 } else { (v * 1000.0).round() as i64 })
}

/// One recorded scrape.
struct Recorded {
    job: String,
    instance: String,
    ts: i64,
    body: String,
}

fn subdirs(d: &Path) -> Result<Vec<PathBuf>, String> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(d)
        .map_err(|e| format!("{}: {e}", d.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    Ok(v)
}

fn name_of(p: &Path) -> String {
    p.file_name().and_then(|s| s.to_str()).unwrap_or("replay").to_string()
}

/// Every recorded scrape, oldest first.
fn read_replay(dir: &Path) -> Result<Vec<Recorded>, String> {
    let mut out = Vec::new();
    let mut visit = |job: &str, instance: &str, d: &Path| -> Result<(), String> {
        for e in std::fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.extension().is_some_and(|x| x == "prom") {
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                let ts = parse_ts(stem).ok_or_else(|| format!("{}: name it <unix seconds>.prom", p.display()))?;
                let body = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                out.push(Recorded { job: job.to_string(), instance: instance.to_string(), ts, body });
            }
        }
        Ok(())
    };
    visit("replay", "replay", dir)?;
    for d in subdirs(dir)? {
        let job = name_of(&d);
        visit(&job, "replay", &d)?;
        for i in subdirs(&d)? {
            visit(&job, &name_of(&i), &i)?;
        }
    }
    out.sort_by(|a, b| (a.ts, &a.job, &a.instance).cmp(&(b.ts, &b.job, &b.instance)));
    if out.is_empty() {
        return Err(format!("{}: no <unix seconds>.prom files", dir.display()));
    }
    Ok(out)
}

fn targets_from_config(path: &Path) -> Result<(Vec<Target>, Option<Settings>, Option<Duration>), u8> {
    let loaded = super::load_file(path)?;
    let mut targets = Vec::new();
    let mut interval = None;
    for (_, rc) in &loaded.config.receivers.0 {
        let ReceiverConfig::Prometheus(p) = rc else { continue };
        interval.get_or_insert(p.config.global.scrape_interval.get());
        for sc in &p.config.scrape_configs {
            let scheme = if sc.scheme.is_empty() { "http" } else { sc.scheme.as_str() };
            let mpath = if sc.metrics_path.is_empty() { "/metrics" } else { sc.metrics_path.as_str() };
            for st in &sc.static_configs {
                for t in &st.targets {
                    targets.push(Target {
                        job: sc.job_name.clone(),
                        instance: t.clone(),
                        url: format!("{scheme}://{t}{mpath}"),
                    });
                }
            }
        }
    }
    let settings = loaded.config.processors.0.iter().find_map(|(_, p)| match p {
        ProcessorConfig::Inference(c) => Some(c.settings()),
        _ => None,
    });
    Ok((targets, settings, interval))
}

fn target_from_url(u: &str) -> Target {
    let rest = u.split("://").nth(1).unwrap_or(u);
    let instance = rest.split('/').next().unwrap_or(rest).to_string();
    // The job is named after what the first scrape shows (vllm or dcgm).
    Target { job: String::new(), instance, url: u.to_string() }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn progress(done: Duration, total: Duration) {
    let f = (done.as_secs_f64() / total.as_secs_f64()).clamp(0.0, 1.0);
    let width = 30;
    let filled = (f * width as f64).round() as usize;
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\rsampling [{}{}] {:>3.0}% {:>4}s/{}s",
        "#".repeat(filled),
        ".".repeat(width - filled),
        f * 100.0,
        done.as_secs(),
        total.as_secs()
    );
    let _ = err.flush();
}

pub async fn report(log: &LogArgs, a: ReportArgs) -> u8 {
    crate::logging::init(log, "warn", false);
    let window = match parse_duration(&a.window) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: --window {:?}: {e}", a.window);
            return exit::USAGE;
        }
    };
    let mut settings = Settings::default();
    let mut engine;
    let end_ms;
    if let Some(dir) = &a.replay {
        let scrapes = match read_replay(dir) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: --replay {e}");
                return exit::FAILURE;
            }
        };
        let first = scrapes[0].ts;
        end_ms = scrapes[scrapes.len() - 1].ts;
        // The whole recording is the window unless --window was given shorter.
        settings.window_ms = (end_ms - first).min(window.as_millis() as i64).max(1);
        engine = Engine::new(settings);
        for r in &scrapes {
            match series_from_text(&r.body, r.ts, &r.job, &r.instance) {
                Ok(s) => {
                    engine.ingest(&s);
                }
                Err(e) => {
                    eprintln!("error: {}/{}/{}/{}: {e}", dir.display(), r.job, r.instance, r.ts);
                    return exit::FAILURE;
                }
            }
        }
    } else {
        let mut interval = match parse_duration(&a.interval) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("error: --interval {:?}: {e}", a.interval);
                return exit::USAGE;
            }
        };
        let mut targets: Vec<Target> = a.urls.iter().map(|u| target_from_url(u)).collect();
        let name_job = |body: &str| {
            if body.contains("vllm:") {
                "vllm"
            } else if body.contains("DCGM_FI_") {
                "dcgm"
            } else {
                "target"
            }
        };
        if let Some(c) = &a.config {
            match targets_from_config(c) {
                Ok((t, s, _)) => {
                    targets.extend(t);
                    if let Some(s) = s {
                        settings = s;
                    }
                }
                Err(code) => return code,
            }
        }
        if targets.is_empty() {
            eprintln!("error: nothing to sample: give --config FILE, --url URL or --replay DIR");
            return exit::USAGE;
        }
        if interval > window / 2 {
            interval = window / 2;
        }
        let client = match infertel_pipeline::http::build_client(&Default::default(), Some(Duration::from_secs(10))) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::FAILURE;
            }
        };
        settings.window_ms = window.as_millis() as i64;
        engine = Engine::new(settings);
        let start = Instant::now();
        let mut last: i64;
        loop {
            let ts = now_ms();
            for t in targets.iter_mut() {
                match client.get(&t.url).send().await.and_then(|r| r.error_for_status()) {
                    Ok(r) => match r.text().await {
                        Ok(body) => {
                            if t.job.is_empty() {
                                t.job = name_job(&body).to_string();
                            }
                            if let Some(dir) = &a.record {
                                let d = dir.join(&t.job).join(t.instance.replace(['/', ':'], "_"));
                                let _ = std::fs::create_dir_all(&d);
                                let _ = std::fs::write(d.join(format!("{:.3}.prom", ts as f64 / 1000.0)), &body);
                            }
                            match series_from_text(&body, ts, &t.job, &t.instance) {
                                Ok(s) => {
                                    engine.ingest(&s);
                                }
                                Err(e) => eprintln!("\nwarning: {}: {e}", t.url),
                            }
                        }
                        Err(e) => eprintln!("\nwarning: {}: {e}", t.url),
                    },
                    Err(e) => eprintln!("\nwarning: {}: {}", t.url, infertel_pipeline::http::describe_error(&e)),
                }
            }
            last = ts;
            let done = start.elapsed();
            progress(done, window);
            if done >= window {
                break;
            }
            tokio::time::sleep(interval.min(window - done)).await;
        }
        eprintln!();
        end_ms = last;
    }
    let r = report::build(&mut engine, end_ms);
    let text = match a.format {
        ReportFormat::Table => r.to_table(),
        ReportFormat::Markdown => r.to_markdown(),
        ReportFormat::Json => r.to_json() + "\n",
    };
    print!("{text}");
    exit::OK
}
