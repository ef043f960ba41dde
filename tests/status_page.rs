//! The status page end to end, in a real headless browser (Debian's
//! `chromium`): an agent scrapes the simulator (vLLM + dcgm behind the
//! inference processor), a target that answers 404 and a target that
//! `relabel_configs` drops; `metric_relabel_configs` drops a label and a
//! series; one exporter writes into a real Prometheus, another to a
//! receiver that answers 403. Each page is loaded by Chromium (its rendered
//! DOM read back with `--dump-dom`, a screenshot saved under the test's
//! tmp dir), and the test asserts what a person would look for on it: the
//! failing target's error, the rule that dropped a target and a series,
//! the 403 explained, PASS/FAIL rows, a delivered series. Chromium runs
//! with a proxy that records every request sent to it; Chrome sends only
//! non-loopback requests to a proxy, so the recording must stay empty: no
//! request leaves loopback. Page sizes stay under the budget.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// The pages' size budget (without images), as `extensions/status/html.rs` states it.
const PAGE_BUDGET: usize = 100 * 1024;

/// A proxy that answers nothing and records the first line of every request.
fn recording_proxy() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let port = l.local_addr().expect("addr").port();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 1024];
            let n = c.read(&mut buf).unwrap_or(0);
            let first = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_string();
            // Chromium opens spare connections to its proxy ahead of need;
            // one that carries no request asks for nothing.
            if !first.is_empty() {
                s.lock().unwrap().push(first);
            }
            let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (port, seen)
}

struct Browser {
    bin: PathBuf,
    proxy: u16,
    profile: tempfile::TempDir,
    shots: PathBuf,
}

impl Browser {
    fn args(&self) -> Vec<String> {
        [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-client-side-phishing-detection",
            "--disable-domain-reliability",
            "--no-pings",
            "--disable-breakpad",
            "--safebrowsing-disable-auto-update",
            "--disable-features=AutofillServerCommunication,NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter,DialMediaRouteProvider,CertificateTransparencyComponentUpdater,DnsOverHttps",
            "--hide-scrollbars",
            "--window-size=1280,1000",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("--proxy-server=http://127.0.0.1:{}", self.proxy),
            format!("--user-data-dir={}", self.profile.path().display()),
        ])
        .collect()
    }

    /// The page's DOM as the browser rendered it.
    fn dom(&self, url: &str) -> String {
        let out = Command::new(&self.bin).args(self.args()).args(["--dump-dom", url]).output().expect("run chromium");
        let dom = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            dom.contains("</html>"),
            "chromium rendered nothing for {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dom
    }

    fn screenshot(&self, url: &str, name: &str) {
        let path = self.shots.join(format!("{name}.png"));
        let out = Command::new(&self.bin)
            .args(self.args())
            .arg(format!("--screenshot={}", path.display()))
            .arg(url)
            .output()
            .expect("run chromium");
        let png = std::fs::read(&path).unwrap_or_default();
        assert!(png.starts_with(b"\x89PNG"), "no screenshot of {url}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Text without tags and entities, for assertions on what a person reads.
fn text(dom: &str) -> String {
    let mut o = String::new();
    let mut in_tag = false;
    // The stylesheet is not text a person reads.
    let dom = match (dom.find("<style>"), dom.find("</style>")) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &dom[..a], &dom[b..]),
        _ => dom.to_string(),
    };
    for c in dom.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                o.push(' ');
            }
            c if !in_tag => o.push(c),
            _ => {}
        }
    }
    let o =
        o.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&#39;", "'").replace("&amp;", "&");
    o.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_page_in_a_real_browser() {
    let chromium = require("chromium");
    let prom = Prometheus::start("");
    let forbidden = RwReceiver::start(Arc::new(|_| (403, Duration::ZERO)));
    let targets = Targets::start();
    let (vllm, dcgm) = (free_port(), free_port());
    let sim_dir = tempfile::tempdir().unwrap();
    let mut sim_cmd = Command::new(infertel_bin());
    sim_cmd.args([
        "simulate",
        "--vllm",
        &format!("127.0.0.1:{vllm}"),
        "--dcgm",
        &format!("127.0.0.1:{dcgm}"),
        "--concurrency",
        "16",
    ]);
    let mut sim = Proc::spawn("simulate", &mut sim_cmd, sim_dir.path().join("log"));
    wait_until("simulator", Duration::from_secs(20), || {
        matches!(http_get(&format!("http://127.0.0.1:{vllm}/metrics")), Ok((200, _))).then_some(())
    });
    let status_port = free_port();
    let cfg = format!(
        r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
      scrape_configs:
        - job_name: vllm
          static_configs:
            - targets: ["127.0.0.1:{vllm}"]
            - targets: ["127.0.0.1:{vllm}"]
              labels: {{tier: canary}}
          relabel_configs:
            - {{source_labels: [tier], regex: canary, action: drop}}
          metric_relabel_configs:
            - {{regex: engine, action: labeldrop}}
            - {{source_labels: [__name__], regex: "vllm:cache_config_info", action: drop}}
        - job_name: dcgm
          static_configs: [{{targets: ["127.0.0.1:{dcgm}"]}}]
        - job_name: broken
          static_configs: [{{targets: ["{broken}"]}}]
          metrics_path: /no-such-path
processors:
  inference: {{window: 20s, evaluation_interval: 1s}}
exporters:
  prometheusremotewrite/prom:
    endpoint: {prom}
  prometheusremotewrite/forbidden:
    endpoint: {forbidden}
    startup_check: warn
extensions:
  status:
    endpoint: 127.0.0.1:{status_port}
service:
  extensions: [status]
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
  pipelines:
    metrics:
      receivers: [prometheus]
      processors: [inference]
      exporters: [prometheusremotewrite/prom, prometheusremotewrite/forbidden]
"#,
        broken = targets.addr,
        prom = prom.write_url(),
        forbidden = forbidden.url(),
    );
    let agent = Agent::start(&cfg);
    let base = format!("http://127.0.0.1:{status_port}");
    // Scrapes, evaluations and deliveries happen before the pages are read.
    wait_until("data in Prometheus", Duration::from_secs(60), || {
        let r = prom.query("vllm:num_requests_running");
        (!r.is_empty()).then_some(())
    });
    // The trace is opened now: scrapes and requests from here on note it.
    let selector = "vllm:num_requests_running";
    let (code, _) = http_get(&format!("{base}/api/v1/series_trace?match={}", urlencode(selector))).unwrap();
    assert_eq!(code, 200);
    let dropped_sel = "vllm:cache_config_info";
    http_get(&format!("{base}/api/v1/series_trace?match={}", urlencode(dropped_sel))).unwrap();
    wait_until("the trace sees a delivery to Prometheus and a hold on the 403", Duration::from_secs(60), || {
        let (_, body) = http_get(&format!("{base}/api/v1/series_trace?match={}", urlencode(selector))).ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let s = v["data"]["series"].as_array()?.first()?.clone();
        let ex = &s["exporters"];
        (ex["prometheusremotewrite/prom"]["deliveredSamples"].as_u64() > Some(0)
            && ex["prometheusremotewrite/forbidden"]["state"] == "held")
            .then_some(())
    });
    wait_until("a verdict", Duration::from_secs(60), || {
        let (_, body) = http_get(&format!("{base}/api/v1/inference")).ok()?;
        (body.contains("\"PASS\"") || body.contains("\"FAIL\"")).then_some(())
    });

    // The overview's rates need two samples of the counters (every 5 s).
    wait_until("rates on the overview", Duration::from_secs(30), || {
        let (_, body) = http_get(&format!("{base}/")).ok()?;
        let t = text(&body);
        let rate =
            |k: &str| t.split(k).nth(1).and_then(|r| r.split("/s").next()).and_then(|n| n.trim().parse::<f64>().ok());
        (rate("in:").is_some_and(|r| r > 0.0) && rate("out:").is_some_and(|r| r > 0.0)).then_some(())
    });
    let (proxy, proxied) = recording_proxy();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let b = Browser { bin: chromium, proxy, profile: tempfile::tempdir().unwrap(), shots: shots.clone() };

    // The check is not vacuous: a page that loads an asset from elsewhere
    // is seen by the proxy.
    targets.set(
        "/control.html",
        "text/html",
        "<!doctype html><html><body><img src=\"http://assets.example.invalid/x.png\">control</body></html>",
    );
    b.dom(&format!("http://{}/control.html", targets.addr));
    wait_until("the control's request at the proxy", Duration::from_secs(10), || {
        proxied.lock().unwrap().iter().any(|r| r.contains("assets.example.invalid")).then_some(())
    });
    proxied.lock().unwrap().clear();

    // Overview: the pipeline with its components, and why it is not ready.
    let t = text(&b.dom(&format!("{base}/")));
    for want in
        ["Pipeline metrics", "receiver prometheus", "processor inference", "exporter prometheusremotewrite/prom"]
    {
        assert!(t.contains(want), "overview lacks {want:?}: {t}");
    }
    assert!(t.contains("not ready") && t.contains("prometheusremotewrite/forbidden: paused"), "{t}");
    assert!(t.contains("in: ") && t.contains("out: ") && t.contains("/s"), "live rates: {t}");

    // Targets: the 404 target's error, the healthy ones up; the filter.
    let t = text(&b.dom(&format!("{base}/targets")));
    assert!(t.contains("broken") && t.contains("http_status") && t.contains("404"), "{t}");
    assert!(t.contains(&format!("http://127.0.0.1:{vllm}/metrics")) && t.contains(" up "), "{t}");
    let t = text(&b.dom(&format!("{base}/targets?state=down")));
    assert!(
        t.contains("404") && !t.contains(&format!("http://127.0.0.1:{vllm}/metrics")),
        "the filter keeps only the down target: {t}"
    );

    // Service discovery: the dropped canary and the rule that dropped it.
    let t = text(&b.dom(&format!("{base}/service-discovery")));
    assert!(t.contains("tier=\"canary\"") && t.contains("dropped by relabel_configs rule #1"), "{t}");

    // Relabel: metric_relabel_configs stepped for a typed series: rule 1
    // drops the label, rule 2 drops the series.
    let line = format!("vllm:cache_config_info{{engine=\"0\",block_size=\"16\"}} 1");
    let t = text(&b.dom(&format!("{base}/relabel?pool=vllm&labels={}", urlencode(&line))));
    assert!(t.contains("metric_relabel_configs") && t.contains("changed") && t.contains("dropped"), "{t}");
    assert!(t.contains("labeldrop"), "the rule is shown: {t}");
    // relabel_configs of a target, from its discovered labels.
    let t = text(
        &b.dom(&format!("{base}/relabel?pool=vllm&target={}", urlencode(&format!("http://127.0.0.1:{vllm}/metrics")))),
    );
    assert!(t.contains("relabel_configs for") && t.contains("unchanged") && t.contains("__address__"), "{t}");

    // Series: kept, delivered to Prometheus, held by the 403 with the reason;
    // the dropped series and its rule.
    let t = text(&b.dom(&format!("{base}/series?match={}", urlencode(selector))));
    assert!(t.contains("kept: forwarded to the pipeline"), "{t}");
    // Delivered to Prometheus (the newest sample may be queued meanwhile).
    assert!(
        t.contains("prometheusremotewrite/prom : delivered")
            || (t.contains("prometheusremotewrite/prom : queued") && t.contains("samples delivered, the last")),
        "{t}"
    );
    assert!(t.contains("prometheusremotewrite/forbidden : held") && t.contains("403"), "{t}");
    // metric_relabel_configs rule #1 dropped the engine label: scraped with
    // it, forwarded without.
    let (_, body) = http_get(&format!("{base}/api/v1/series_trace?match={}", urlencode(selector))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let f = &v["data"]["series"][0];
    assert!(f["scrapedAs"].as_str().unwrap().contains("engine=\"0\""), "{f}");
    assert!(!f["forwardedAs"].as_str().unwrap().contains("engine="), "{f}");
    let t = text(&b.dom(&format!("{base}/series?match={}", urlencode(dropped_sel))));
    assert!(t.contains("dropped by metric_relabel_configs rule #2 (action drop)"), "{t}");

    // Exporters: the 403 explained, the healthy one's last answer.
    let t = text(&b.dom(&format!("{base}/exporters")));
    assert!(t.contains("forbidden") && t.contains("HTTP 403") && t.contains("paused"), "{t}");
    assert!(t.contains("HTTP 204"), "Prometheus' answer: {t}");

    // Inference: the verdict table, charts drawn as SVG, recommendations.
    let dom = b.dom(&format!("{base}/inference"));
    let t = text(&dom);
    assert!(t.contains("SLO verdicts") && (t.contains("PASS") || t.contains("FAIL")), "{t}");
    assert!(t.contains("ttft_p95") && t.contains("Recommendations"), "{t}");
    assert!(dom.contains("<svg") && dom.contains("<polyline"), "a chart with a line");

    // Config: effective, secrets redacted (none here), the scrape configs there.
    let t = text(&b.dom(&format!("{base}/config")));
    assert!(t.contains("job_name: \"broken\"") && t.contains("evaluation_interval"), "{t}");

    // Collector paths.
    let t = text(&b.dom(&format!("{base}/debug/extensionz")));
    assert!(t.contains("status"), "{t}");

    for (path, name) in [
        ("/targets", "targets"),
        ("/inference", "inference"),
        ("/exporters", "exporters"),
        (&*format!("/series?match={}", urlencode(selector)), "series"),
    ] {
        b.screenshot(&format!("{base}{path}"), name);
    }
    // Chromium's own services (sign-in, the search page, network time),
    // which it contacts whatever page it shows, are not the pages' doing.
    let own = [
        "accounts.google.com:443",
        "www.google.com:443",
        "clients2.google.com/time/",
        "content-autofill.googleapis.com:443",
        // Its updater, which newer builds run despite --disable-component-update.
        "update.googleapis.com",
    ];
    let left: Vec<String> =
        proxied.lock().unwrap().iter().filter(|r| !own.iter().any(|o| r.contains(o))).cloned().collect();
    assert!(left.is_empty(), "requests left loopback: {left:?}");

    // Page sizes, and the headers that keep assets at home.
    for path in ["/", "/targets", "/service-discovery", "/relabel?pool=vllm", "/exporters", "/inference", "/config"] {
        let out = Command::new("curl").args(["-s", "-D", "-", &format!("{base}{path}")]).output().unwrap();
        let all = String::from_utf8_lossy(&out.stdout).to_string();
        let (head, body) = all.split_once("\r\n\r\n").unwrap_or(("", ""));
        assert!(body.len() < PAGE_BUDGET, "{path}: {} bytes", body.len());
        assert!(head.to_ascii_lowercase().contains("content-security-policy: default-src 'none'"), "{path}: {head}");
        assert!(
            !body.contains("http://") || !body.replace(&format!("http://127.0.0.1:"), "").contains("http://"),
            "{path} links outside loopback"
        );
        assert!(!body.contains("https://"), "{path} links outside");
    }

    // Prometheus' targets API shape.
    let (_, body) = http_get(&format!("{base}/api/v1/targets")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success");
    let active = v["data"]["activeTargets"].as_array().unwrap();
    let broken = active.iter().find(|t| t["scrapePool"] == "broken").expect("the broken target");
    assert_eq!(broken["health"], "down");
    assert!(broken["lastError"].as_str().unwrap().contains("404"), "{broken}");
    assert!(broken["scrapeUrl"].as_str().unwrap().ends_with("/no-such-path"));
    let up = active.iter().find(|t| t["scrapePool"] == "vllm").expect("vllm target");
    assert_eq!(up["health"], "up");
    assert_eq!(up["labels"]["job"], "vllm");
    assert_eq!(up["discoveredLabels"]["__address__"], format!("127.0.0.1:{vllm}"));
    assert!(up["lastScrape"].as_str().unwrap().ends_with('Z') && up["lastScrapeDuration"].as_f64().unwrap() > 0.0);
    let dropped = v["data"]["droppedTargets"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0]["discoveredLabels"]["tier"], "canary");
    assert_eq!(v["data"]["droppedTargetCounts"]["vllm"], 1);

    eprintln!("screenshots in {}", shots.display());
    drop(agent);
    sim.terminate(Duration::from_secs(10));
}

/// A reload that moves the page and adds a job: the new endpoint serves the
/// running agent's state (ready, the new job), the old one is closed; a
/// refused reload leaves the running configuration on `/config`.
#[test]
fn the_page_follows_a_reload() {
    let targets = Targets::start();
    targets.set("/a", TEXT_004, "a_total 1\n");
    targets.set("/b", TEXT_004, "b_total 1\n");
    let rx = RwReceiver::start(Arc::new(|_| (204, Duration::ZERO)));
    let cfg = |port: u16, with_b: bool| {
        let b = if with_b {
            format!(
                "\n        - {{job_name: b, metrics_path: /b, static_configs: [{{targets: ['{}']}}]}}",
                targets.addr
            )
        } else {
            String::new()
        };
        format!(
            r#"
receivers:
  prometheus:
    config:
      global: {{scrape_interval: 500ms, scrape_timeout: 400ms}}
      scrape_configs:
        - {{job_name: a, metrics_path: /a, static_configs: [{{targets: ['{t}']}}]}}{b}
exporters:
  prometheusremotewrite: {{endpoint: "{rw}"}}
extensions:
  status: {{endpoint: "127.0.0.1:{port}"}}
service:
  extensions: [status]
  pipelines: {{metrics: {{receivers: [prometheus], exporters: [prometheusremotewrite]}}}}
  telemetry: {{metrics: {{address: "{{{{TELEMETRY}}}}"}}}}
"#,
            t = targets.addr,
            rw = rx.url(),
        )
    };
    let (p1, p2) = (free_port(), free_port());
    let agent = Agent::start(&cfg(p1, false));
    let ready = |port: u16| {
        wait_until("ready on the overview", Duration::from_secs(20), || {
            let (code, body) = http_get(&format!("http://127.0.0.1:{port}/")).ok()?;
            (code == 200 && body.contains("class=up>ready")).then_some(())
        })
    };
    ready(p1);
    agent.write_config(&cfg(p2, true));
    agent.reload();
    ready(p2);
    wait_until("job b on the moved page", Duration::from_secs(20), || {
        let (_, body) = http_get(&format!("http://127.0.0.1:{p2}/api/v1/targets")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let a = v["data"]["activeTargets"].as_array()?;
        a.iter().any(|t| t["scrapePool"] == "b" && t["health"] == "up").then_some(())
    });
    wait_until("the old endpoint closed", Duration::from_secs(10), || {
        matches!(http_get(&format!("http://127.0.0.1:{p1}/")), Ok((0, _)) | Err(_)).then_some(())
    });
    // A refused reload: the page keeps what runs.
    agent.write_config("receivers: {nonsense: {}}\n");
    agent.reload();
    std::thread::sleep(Duration::from_secs(2));
    let (_, body) = http_get(&format!("http://127.0.0.1:{p2}/config")).unwrap();
    assert!(body.contains("job_name: &quot;b&quot;"), "{body}");
    ready(p2);
}
