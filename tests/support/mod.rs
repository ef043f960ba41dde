//! Shared harness for the end-to-end tests: free loopback ports, real
//! Prometheus and VictoriaMetrics processes (stopped by PID on drop), an
//! in-process HTTP server for scrape targets, and the `infertel` binary run
//! as a child process.
#![allow(dead_code)]

pub mod elasticsearch;
pub mod nginx;
pub mod otlp;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Starts a server on a port [`free_port`] picked, until one is ours. The
/// port is free when picked but not held, so another process (another
/// test's server, started at the same time) may bind it first: the server
/// then exits, and a readiness check alone could be answered by whoever
/// holds the port, leaving the test to query a stranger that later goes
/// away. So a try counts only while its process runs and `is_ours(port)`
/// (the server says it runs with this test's files); a lost race starts
/// over on another port, at most five times.
pub fn spawn_on_free_port(
    name: &str,
    command: impl Fn(u16) -> Command,
    log: impl Fn(u32) -> PathBuf,
    is_ours: impl Fn(u16) -> bool,
) -> (Proc, u16) {
    let mut logs = Vec::new();
    for attempt in 1..=5 {
        let port = free_port();
        let mut proc = Proc::spawn(name, &mut command(port), log(attempt));
        let up = wait_until(&format!("{name} ready on port {port}"), Duration::from_secs(30), || {
            if matches!(proc.child.try_wait(), Ok(Some(_))) {
                return Some(false);
            }
            is_ours(port).then_some(true)
        });
        if up {
            return (proc, port);
        }
        logs.push(format!("port {port}: {}", proc.log_text()));
    }
    panic!("{name} exited before it served on five free ports in turn:\n{}", logs.join("\n"))
}

/// Prometheus on `port` is ready and runs with the config file `cfg`.
fn prometheus_serves(port: u16, cfg: &Path) -> bool {
    let url = format!("http://127.0.0.1:{port}");
    matches!(http_get(&format!("{url}/-/ready")), Ok((200, _)))
        && http_get(&format!("{url}/api/v1/status/flags")).is_ok_and(|(code, body)| {
            code == 200
                && serde_json::from_str::<serde_json::Value>(&body)
                    .is_ok_and(|v| v["data"]["config.file"].as_str() == Some(&*cfg.display().to_string()))
        })
}

/// The shared/ folder beside the repository (or $INFERTEL_SHARED).
pub fn shared_dir() -> PathBuf {
    if let Ok(p) = std::env::var("INFERTEL_SHARED") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn infertel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_infertel"))
}

/// Fails the test with a clear message when a required program is missing:
/// the test command installs them, so a missing one is a setup bug.
pub fn require(program: &str) -> PathBuf {
    // Debian puts dnsmasq and nginx in /usr/sbin, which a non-login PATH may lack.
    let path = std::env::var("PATH").unwrap_or_default() + ":/usr/sbin:/sbin";
    for dir in path.split(':') {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!("{program} is not installed: run the test command from the README (scripts/test.sh installs it)");
}

/// A child process killed (and reaped) on drop.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Proc {
        let f = std::fs::File::create(&log).expect("create log file");
        let child = cmd
            .stdout(Stdio::from(f.try_clone().expect("dup log")))
            .stderr(Stdio::from(f))
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc { name: name.into(), child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait (up to `timeout`) for a clean exit; returns the code.
    pub fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        let _ = Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn http_get(url: &str) -> Result<(u16, String), String> {
    let out = Command::new("curl")
        .args(["-s", "-m", "10", "-w", "\n%{http_code}", url])
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = s.rsplit_once('\n').ok_or("no status")?;
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A real Prometheus (Debian's 2.42) on a free loopback port.
pub struct Prometheus {
    pub proc: Proc,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Prometheus {
    /// `scrape_configs_yaml` is the YAML list under `scrape_configs:` (may be empty).
    pub fn start(scrape_configs_yaml: &str) -> Prometheus {
        let bin = require("prometheus");
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg =
            format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape_configs_yaml}\n");
        let cfg_path = dir.path().join("prometheus.yml");
        std::fs::write(&cfg_path, cfg).expect("write prometheus.yml");
        let (proc, port) = spawn_on_free_port(
            "prometheus",
            |port| {
                let mut cmd = Command::new(&bin);
                cmd.arg(format!("--config.file={}", cfg_path.display()))
                    .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                    .arg("--web.enable-remote-write-receiver")
                    .arg("--log.level=warn");
                cmd
            },
            |attempt| {
                dir.path().join(if attempt == 1 {
                    "prometheus.log".into()
                } else {
                    format!("prometheus-{attempt}.log")
                })
            },
            |port| prometheus_serves(port, &cfg_path),
        );
        Prometheus { proc, port, dir }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.url())
    }

    /// Stops the server (SIGTERM, then wait), keeping its data directory and port.
    pub fn stop(&mut self) {
        assert!(self.proc.terminate(Duration::from_secs(30)).is_some(), "prometheus did not stop");
    }

    /// Starts it again on the same port and data directory.
    pub fn restart(&mut self) {
        let mut cmd = Command::new(require("prometheus"));
        cmd.arg(format!("--config.file={}", self.dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", self.dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--web.enable-remote-write-receiver")
            .arg("--log.level=warn");
        self.proc = Proc::spawn("prometheus", &mut cmd, self.dir.path().join("prometheus-restart.log"));
        let cfg_path = self.dir.path().join("prometheus.yml");
        wait_until("prometheus ready again", Duration::from_secs(60), || {
            prometheus_serves(self.port, &cfg_path).then_some(())
        });
    }

    /// Every raw sample of the series matching `selector` over the last `range`: (labels, values).
    pub fn raw(&self, selector: &str, range: &str) -> Vec<(BTreeMap<String, String>, Vec<f64>)> {
        let q = format!("{selector}[{range}]");
        let (code, body) =
            http_get(&format!("{}/api/v1/query?query={}", self.url(), urlencode(&q))).unwrap_or((0, String::new()));
        assert_eq!(code, 200, "prometheus query {q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("prometheus JSON");
        v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
                    .unwrap_or_default();
                let values =
                    r["values"].as_array().cloned().unwrap_or_default().iter().map(|p| json_f64(&p[1])).collect();
                (labels, values)
            })
            .collect()
    }

    /// Instant query; returns (labels, value text) per series.
    pub fn query(&self, q: &str) -> Vec<(BTreeMap<String, String>, String)> {
        let url = format!("{}/api/v1/query?query={}", self.url(), urlencode(q));
        let (code, body) = http_get(&url).unwrap_or((0, String::new()));
        assert_eq!(code, 200, "prometheus query {q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("prometheus JSON");
        v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
                    .unwrap_or_default();
                (labels, r["value"][1].as_str().unwrap_or("").to_string())
            })
            .collect()
    }
}

/// A real VictoriaMetrics (Debian's package) on a free loopback port.
pub struct Victoria {
    pub proc: Proc,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Victoria {
    pub fn start() -> Victoria {
        let bin = require("victoria-metrics");
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let (proc, port) = spawn_on_free_port(
            "victoria-metrics",
            |port| {
                let mut cmd = Command::new(&bin);
                cmd.arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                    .arg(format!("-storageDataPath={}", data.display()))
                    .arg("-retentionPeriod=100y")
                    .arg("-search.latencyOffset=0s")
                    .arg("-search.disableCache")
                    .arg("-loggerLevel=WARN");
                cmd
            },
            |attempt| dir.path().join(if attempt == 1 { "vm.log".into() } else { format!("vm-{attempt}.log") }),
            // Its `/flags` page lists the flags it was started with.
            |port| {
                matches!(http_get(&format!("http://127.0.0.1:{port}/health")), Ok((200, _)))
                    && http_get(&format!("http://127.0.0.1:{port}/flags"))
                        .is_ok_and(|(code, body)| code == 200 && body.contains(&data.display().to_string()))
            },
        );
        Victoria { proc, port, dir }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.url())
    }

    /// Stops the server (SIGTERM, then wait), keeping its data directory and port.
    pub fn stop(&mut self) {
        assert!(self.proc.terminate(Duration::from_secs(30)).is_some(), "victoria-metrics did not stop");
    }

    /// Starts it again on the same port and data directory.
    pub fn restart(&mut self) {
        let mut cmd = Command::new(require("victoria-metrics"));
        cmd.arg(format!("-httpListenAddr=127.0.0.1:{}", self.port))
            .arg(format!("-storageDataPath={}", self.dir.path().join("data").display()))
            .arg("-retentionPeriod=100y")
            .arg("-search.latencyOffset=0s")
            .arg("-search.disableCache")
            .arg("-loggerLevel=WARN");
        self.proc = Proc::spawn("victoria-metrics", &mut cmd, self.dir.path().join("vm-2.log"));
        wait_until("victoria-metrics ready again", Duration::from_secs(60), || {
            matches!(http_get(&format!("{}/health", self.url())), Ok((200, _))).then_some(())
        });
    }

    /// Every raw sample of the series matching `selector`: (labels, values).
    pub fn export(&self, selector: &str) -> Vec<(BTreeMap<String, String>, Vec<f64>)> {
        let _ = http_get(&format!("{}/internal/force_flush", self.url()));
        let (code, body) = http_get(&format!("{}/api/v1/export?match[]={}", self.url(), urlencode(selector)))
            .unwrap_or((0, String::new()));
        assert_eq!(code, 200, "victoria export {selector}: {body}");
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("VM export JSON line");
                let labels = v["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
                    .unwrap_or_default();
                let values = v["values"].as_array().cloned().unwrap_or_default().iter().map(json_f64).collect();
                (labels, values)
            })
            .collect()
    }
}

fn json_f64(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        serde_json::Value::String(s) => parse_prom_float(s),
        _ => f64::NAN,
    }
}

pub fn parse_prom_float(s: &str) -> f64 {
    match s {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().unwrap_or(f64::NAN),
    }
}

pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// What a scrape target serves: content type and body, changeable at run time.
#[derive(Clone)]
pub struct Page {
    pub content_type: String,
    pub body: Vec<u8>,
}

/// An HTTP server on a free port with one page per path, on its own thread.
pub struct Targets {
    pub addr: SocketAddr,
    pages: Arc<Mutex<BTreeMap<String, Page>>>,
    delays: Arc<Mutex<BTreeMap<String, Duration>>>,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    counters: Arc<Mutex<BTreeMap<String, (String, usize)>>>,
    /// The last request's headers per path (names in lower case).
    headers: Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>>,
    _rt: std::thread::JoinHandle<()>,
}

impl Targets {
    pub fn start() -> Targets {
        let pages: Arc<Mutex<BTreeMap<String, Page>>> = Arc::default();
        let hits: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let delays: Arc<Mutex<BTreeMap<String, Duration>>> = Arc::default();
        let counters: Arc<Mutex<BTreeMap<String, (String, usize)>>> = Arc::default();
        let headers: Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>> = Arc::default();
        let std_listener = TcpListener::bind("127.0.0.1:0").expect("bind targets");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let (p, h, d, c, hd) = (pages.clone(), hits.clone(), delays.clone(), counters.clone(), headers.clone());
        let rt = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app =
                    axum::Router::new().fallback(move |uri: axum::http::Uri, req_headers: axum::http::HeaderMap| {
                        let (p, h, d, c, hd) = (p.clone(), h.clone(), d.clone(), c.clone(), hd.clone());
                        async move {
                            let path = uri.path().to_string();
                            let seen: BTreeMap<String, String> = req_headers
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                                .collect();
                            hd.lock().unwrap().insert(path.clone(), seen);
                            let hit = {
                                let mut h = h.lock().unwrap();
                                let e = h.entry(path.clone()).or_default();
                                *e += 1;
                                *e
                            };
                            let counter = c.lock().unwrap().get(&path).cloned();
                            if let Some((name, n)) = counter {
                                let mut body = format!("# TYPE {name} counter\n");
                                for i in 0..n {
                                    body.push_str(&format!(
                                        "{name}{{series=\"{i:04}\",pad=\"{}\"}} {hit}\n",
                                        "p".repeat(40)
                                    ));
                                }
                                return axum::response::Response::builder()
                                    .header("content-type", TEXT_004)
                                    .body(axum::body::Body::from(body))
                                    .unwrap();
                            }
                            let delay = d.lock().unwrap().get(&path).copied();
                            if let Some(delay) = delay {
                                tokio::time::sleep(delay).await;
                            }
                            match p.lock().unwrap().get(&path).cloned() {
                                Some(page) => axum::response::Response::builder()
                                    .header("content-type", page.content_type)
                                    .body(axum::body::Body::from(page.body))
                                    .unwrap(),
                                None => axum::response::Response::builder()
                                    .status(404)
                                    .body(axum::body::Body::from("not found"))
                                    .unwrap(),
                            }
                        }
                    });
                let _ = axum::serve(listener, app).await;
            });
        });
        Targets { addr, pages, delays, hits, counters, headers, _rt: rt }
    }

    /// Makes `path` serve `n` series of counter `name` whose value is the
    /// number of the request (1 for the first scrape): what must arrive
    /// downstream is then known exactly.
    pub fn set_counter(&self, path: &str, name: &str, n: usize) {
        self.counters.lock().unwrap().insert(path.into(), (name.into(), n));
    }

    /// Makes `path` answer only after `delay`.
    pub fn set_delay(&self, path: &str, delay: Duration) {
        self.delays.lock().unwrap().insert(path.into(), delay);
    }

    pub fn set(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) {
        self.pages.lock().unwrap().insert(path.into(), Page { content_type: content_type.into(), body: body.into() });
    }

    /// The headers of the last request for `path`.
    pub fn last_headers(&self, path: &str) -> BTreeMap<String, String> {
        self.headers.lock().unwrap().get(path).cloned().unwrap_or_default()
    }

    pub fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

pub const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Runs `infertel run` with the given config text.
pub struct Agent {
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    pub telemetry_port: u16,
}

impl Agent {
    /// `config` may use `{{TELEMETRY}}` for the self-metrics address.
    pub fn start(config: &str) -> Agent {
        Agent::start_with_env(config, &[])
    }

    /// As [`Agent::start`], with extra environment variables for the process.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Agent {
        Agent::start_with(config, env, &[])
    }

    /// As [`Agent::start`], with extra environment variables and extra
    /// arguments after `run --config FILE` (e.g. `--watch-config`).
    pub fn start_with(config: &str, env: &[(&str, &str)], args: &[&str]) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        let telemetry_port = free_port();
        let cfg = config.replace("{{TELEMETRY}}", &format!("127.0.0.1:{telemetry_port}"));
        let path = dir.path().join("infertel.yaml");
        std::fs::write(&path, cfg).expect("write config");
        let mut cmd = Command::new(infertel_bin());
        cmd.arg("run").arg("--config").arg(&path).args(args).env("RUST_LOG", "info");
        cmd.envs(env.iter().copied());
        let proc = Proc::spawn("infertel", &mut cmd, dir.path().join("infertel.log"));
        let mut a = Agent { proc, dir, telemetry_port };
        wait_until("infertel self-metrics endpoint", Duration::from_secs(20), || {
            if let Ok(Some(st)) = a.proc.child.try_wait() {
                panic!("infertel exited with {st} before serving:\n{}", a.proc.log_text());
            }
            matches!(http_get(&a.metrics_url()), Ok((200, _))).then_some(())
        });
        a
    }

    /// The config file the agent runs on (rewrite it, then [`Agent::reload`]).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("infertel.yaml")
    }

    /// Writes a new config (`{{TELEMETRY}}` filled in as at start).
    pub fn write_config(&self, config: &str) {
        let cfg = config.replace("{{TELEMETRY}}", &format!("127.0.0.1:{}", self.telemetry_port));
        std::fs::write(self.config_path(), cfg).expect("rewrite config");
    }

    /// Sends SIGHUP: the agent reloads its config file.
    pub fn reload(&self) {
        let st = Command::new("kill").arg("-HUP").arg(self.proc.pid().to_string()).status().expect("kill -HUP");
        assert!(st.success(), "kill -HUP failed");
    }

    /// Resident set size of the agent process, in bytes (VmRSS of /proc/PID/status).
    pub fn rss_bytes(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.proc.pid())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    }

    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.telemetry_port)
    }

    /// Sum of the agent's own metric `name` over series whose labels contain all of `filter`.
    pub fn self_metric(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.self_metrics().sum(name, filter)
    }

    /// One read of the agent's own metrics, for comparing several values
    /// taken at the same moment.
    pub fn self_metrics(&self) -> SelfMetrics {
        let (_, body) = http_get(&self.metrics_url()).unwrap_or((0, String::new()));
        let exp = infertel_exposition::parse(body.as_bytes(), infertel_exposition::Format::PrometheusText)
            .expect("self-metrics parse");
        SelfMetrics(
            exp.samples
                .iter()
                .map(|s| {
                    (
                        s.name.to_string(),
                        exp.labels(s).iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                        s.value,
                    )
                })
                .collect(),
        )
    }
}

/// A snapshot of the agent's own metrics.
pub struct SelfMetrics(pub Vec<(String, BTreeMap<String, String>, f64)>);

impl SelfMetrics {
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && filter.iter().all(|(k, v)| l.get(*k).is_some_and(|x| x == v)))
            .map(|(_, _, v)| v)
            .sum()
    }
}

/// One remote-write request as a scripted receiver saw it.
#[derive(Clone, Debug)]
pub struct Received {
    pub index: usize,
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub series: Vec<infertel_model::Series>,
}

/// Decides, per request index (0-based), the status to answer and how long
/// to wait before answering.
pub type Script = Arc<dyn Fn(usize) -> (u16, Duration) + Send + Sync>;

/// Like [`Script`], also seeing the series the request carries (an empty
/// slice for an exporter's probe).
pub type ContentScript = Arc<dyn Fn(usize, &[infertel_model::Series]) -> (u16, Duration) + Send + Sync>;

/// Like [`ContentScript`], also seeing the request's headers (names in
/// lower case).
pub type HeaderScript =
    Arc<dyn Fn(usize, &BTreeMap<String, String>, &[infertel_model::Series]) -> (u16, Duration) + Send + Sync>;

/// A remote-write receiver whose answers a test scripts; it decodes every
/// body with the real codec and records what arrived.
pub struct RwReceiver {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Received>>>,
    _rt: std::thread::JoinHandle<()>,
}

impl RwReceiver {
    pub fn start(script: Script) -> RwReceiver {
        Self::start_with(Arc::new(move |i, _| script(i)))
    }

    pub fn start_with(script: ContentScript) -> RwReceiver {
        Self::start_with_headers(Arc::new(move |i, _, series| script(i, series)))
    }

    pub fn start_with_headers(script: HeaderScript) -> RwReceiver {
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let std_listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let l = log.clone();
        let rt = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = axum::Router::new().route(
                    "/api/v1/write",
                    axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
                        let (l, counter, script) = (l.clone(), counter.clone(), script.clone());
                        async move {
                            let index = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let req = infertel_remote_write::decode(&body).expect("a decodable remote-write body");
                            let (series, _) = infertel_remote_write::to_model(&req);
                            let headers: BTreeMap<String, String> = headers
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                                .collect();
                            let (status, delay) = script(index, &headers, &series);
                            l.lock().unwrap().push(Received { index, status, headers, series });
                            tokio::time::sleep(delay).await;
                            axum::http::StatusCode::from_u16(status)
                                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
                        }
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        RwReceiver { addr, log, _rt: rt }
    }

    pub fn url(&self) -> String {
        format!("http://{}/api/v1/write", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }
}

/// Per `series` label of counter `metric`, the values (NaN and stale markers
/// left out, sorted) of the requests a [`RwReceiver`] accepted, and how many
/// samples (series, timestamp) arrived more than once.
pub fn accepted_counter_values(r: &[Received], metric: &str) -> (BTreeMap<String, Vec<u64>>, usize) {
    let mut m: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut dups = 0;
    for x in r.iter().filter(|x| x.status / 100 == 2) {
        for s in &x.series {
            for p in &s.samples {
                if !seen.insert((s.labels.to_string(), p.timestamp_ms)) {
                    eprintln!("duplicate in request {}: {} @{} = {}", x.index, s.labels, p.timestamp_ms, p.value);
                    dups += 1;
                    continue;
                }
                if let Some(id) = s.labels.get("series")
                    && s.labels.metric_name() == metric
                    && !p.value.is_nan()
                {
                    m.entry(id.to_string()).or_default().push(p.value as u64);
                }
            }
        }
    }
    for v in m.values_mut() {
        v.sort_unstable();
    }
    (m, dups)
}
