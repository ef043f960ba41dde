//! The independent OTLP receiver (`tests/otlp_receiver.py`, official
//! opentelemetry-proto Python package) run on free loopback ports, and a
//! flat view of what it decoded.

use super::{Proc, free_port, repo_dir, wait_until};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub struct OtlpReceiver {
    pub proc: Proc,
    pub grpc_port: u16,
    pub http_port: u16,
    pub dir: tempfile::TempDir,
}

/// One decoded request.
#[derive(Clone, Debug)]
pub struct OtlpRequest {
    pub transport: String,
    pub path: String,
    pub encoding: String,
    pub headers: serde_json::Value,
    pub time: f64,
    pub reply: serde_json::Value,
    pub body: serde_json::Value,
    pub error: Option<String>,
}

/// One data point with everything around it.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub resource: BTreeMap<String, String>,
    pub scope: String,
    pub metric: String,
    pub description: String,
    pub prometheus_type: String,
    /// gauge, sum, histogram, summary
    pub kind: String,
    pub monotonic: bool,
    pub cumulative: bool,
    pub attrs: BTreeMap<String, String>,
    pub value: Option<f64>,
    pub start: u64,
    pub time: u64,
    pub flags: u64,
    pub count: u64,
    pub sum: Option<f64>,
    pub bounds: Vec<f64>,
    pub bucket_counts: Vec<u64>,
    pub quantiles: Vec<(f64, f64)>,
}

fn num(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            s => s.parse().ok(),
        },
        _ => None,
    }
}

fn u(v: &serde_json::Value) -> u64 {
    num(v).map(|f| f as u64).unwrap_or(0)
}

fn attrs(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or("").to_string(),
                        kv["value"]["string_value"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl OtlpRequest {
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for rm in self.body["resource_metrics"].as_array().cloned().unwrap_or_default() {
            let resource = attrs(&rm["resource"]["attributes"]);
            for sm in rm["scope_metrics"].as_array().cloned().unwrap_or_default() {
                let scope = sm["scope"]["name"].as_str().unwrap_or("").to_string();
                for m in sm["metrics"].as_array().cloned().unwrap_or_default() {
                    let md = attrs(&m["metadata"]);
                    let (kind, data) = ["gauge", "sum", "histogram", "summary"]
                        .iter()
                        .find_map(|k| m.get(*k).map(|d| (k.to_string(), d.clone())))
                        .unwrap_or(("none".into(), serde_json::Value::Null));
                    for p in data["data_points"].as_array().cloned().unwrap_or_default() {
                        out.push(Point {
                            resource: resource.clone(),
                            scope: scope.clone(),
                            metric: m["name"].as_str().unwrap_or("").to_string(),
                            description: m["description"].as_str().unwrap_or("").to_string(),
                            prometheus_type: md.get("prometheus.type").cloned().unwrap_or_default(),
                            kind: kind.clone(),
                            monotonic: data["is_monotonic"].as_bool().unwrap_or(false),
                            cumulative: data["aggregation_temporality"].as_str()
                                == Some("AGGREGATION_TEMPORALITY_CUMULATIVE"),
                            attrs: attrs(&p["attributes"]),
                            value: p.get("as_double").and_then(num).or_else(|| p.get("as_int").and_then(num)),
                            start: u(&p["start_time_unix_nano"]),
                            time: u(&p["time_unix_nano"]),
                            flags: u(&p["flags"]),
                            count: u(&p["count"]),
                            sum: p.get("sum").and_then(num),
                            bounds: p["explicit_bounds"]
                                .as_array()
                                .map(|a| a.iter().filter_map(num).collect())
                                .unwrap_or_default(),
                            bucket_counts: p["bucket_counts"]
                                .as_array()
                                .map(|a| a.iter().map(u).collect())
                                .unwrap_or_default(),
                            quantiles: p["quantile_values"]
                                .as_array()
                                .map(|a| {
                                    a.iter()
                                        .map(|q| {
                                            (
                                                q.get("quantile").and_then(num).unwrap_or(0.0),
                                                q.get("value").and_then(num).unwrap_or(0.0),
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default(),
                        });
                    }
                }
            }
        }
        out
    }
}

impl OtlpReceiver {
    /// `script`: the JSON list of scripted replies (see the Python file).
    pub fn start(script: &str) -> OtlpReceiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let (grpc_port, http_port) = (free_port(), free_port());
        let proc = Self::spawn(script, grpc_port, http_port, dir.path());
        OtlpReceiver { proc, grpc_port, http_port, dir }
    }

    fn spawn(script: &str, grpc_port: u16, http_port: u16, dir: &Path) -> Proc {
        let mut cmd = Command::new("python3");
        cmd.arg(repo_dir().join("tests/otlp_receiver.py"))
            .arg("--grpc-port")
            .arg(grpc_port.to_string())
            .arg("--http-port")
            .arg(http_port.to_string())
            .arg("--out")
            .arg(dir)
            .arg("--script")
            .arg(script);
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let mut proc = Proc::spawn("otlp_receiver", &mut cmd, dir.join("receiver.log"));
        wait_until("OTLP receiver ready", Duration::from_secs(30), || {
            if let Ok(Some(st)) = proc.child.try_wait() {
                panic!(
                    "otlp_receiver.py exited with {st} (scripts/test.sh installs its Python packages):\n{}",
                    proc.log_text()
                );
            }
            ready.exists().then_some(())
        });
        proc
    }

    /// Stops the receiver (an outage); [`OtlpReceiver::start_again`] brings
    /// it back on the same ports, appending to the same request log.
    pub fn stop(&mut self) {
        self.proc.terminate(Duration::from_secs(10));
    }

    pub fn start_again(&mut self) {
        self.proc = Self::spawn("[]", self.grpc_port, self.http_port, self.dir.path());
    }

    pub fn grpc_endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.grpc_port)
    }

    pub fn http_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    pub fn requests(&self) -> Vec<OtlpRequest> {
        let text = std::fs::read_to_string(self.dir.path().join("requests.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| OtlpRequest {
                transport: v["transport"].as_str().unwrap_or("").into(),
                path: v["path"].as_str().unwrap_or("").into(),
                encoding: v["encoding"].as_str().unwrap_or("").into(),
                headers: v["headers"].clone(),
                time: v["time"].as_f64().unwrap_or(0.0),
                reply: v["reply"].clone(),
                body: v["body"].clone(),
                error: v["error"].as_str().map(String::from),
            })
            .collect()
    }
}
