//! A Prometheus server's configuration file (`prometheus.yml`) run as it
//! is, as Prometheus in agent mode runs it: its `global` and scrape jobs
//! become the `prometheus` receiver, each `remote_write` entry a
//! `prometheusremotewrite` exporter with Prometheus' keys mapped onto the
//! exporter's (and auth onto `basicauth`/`bearertokenauth` extensions), all
//! in one `metrics` pipeline. `rule_files`, `alerting` and `storage` are
//! ignored with a warning each; what infertel cannot do is an error naming
//! the key and its line; keys that would have no effect are warnings.

use super::{ConfigIssue, locate};
use serde_yaml::{Mapping, Value};

/// True for a file whose top level is a Prometheus configuration.
pub fn is_prometheus_file(m: &Mapping) -> bool {
    let has = |k: &str| m.contains_key(Value::String(k.into()));
    ["scrape_configs", "global", "remote_write", "scrape_config_files"].iter().any(|k| has(k))
        && !["receivers", "exporters", "service", "processors", "extensions"].iter().any(|k| has(k))
}

struct Ctx<'a> {
    origin: &'a str,
    text: &'a str,
    errors: Vec<ConfigIssue>,
    warnings: Vec<ConfigIssue>,
}

impl Ctx<'_> {
    fn issue(&self, anchor: &str, key: &str, path: String, message: String) -> ConfigIssue {
        let (line, column) = locate(self.text, anchor, &format!("{key}:"));
        ConfigIssue { origin: self.origin.into(), line, column, path, message }
    }
    fn error(&mut self, anchor: &str, key: &str, path: String, message: impl Into<String>) {
        let i = self.issue(anchor, key, path, message.into());
        self.errors.push(i);
    }
    fn warn(&mut self, anchor: &str, key: &str, path: String, message: impl Into<String>) {
        let i = self.issue(anchor, key, path, message.into());
        self.warnings.push(i);
    }
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(s(k), v);
    }
    Value::Mapping(m)
}

/// An id's name part from a queue's `name` (or its index).
fn id_name(name: Option<&str>, index: usize) -> String {
    match name.filter(|n| !n.is_empty()) {
        Some(n) => n.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect(),
        None => index.to_string(),
    }
}

/// The pipeline config that runs `root` (a Prometheus file) as Prometheus
/// agent mode would; `warnings` gains what is ignored.
/// `metrics_address` is where infertel serves its own `/metrics` (a
/// Prometheus file has no place for it: `$INFERTEL_METRICS_ADDRESS`, else
/// the default 127.0.0.1:8888).
pub fn translate(
    origin: &str,
    text: &str,
    root: &Value,
    warnings: &mut Vec<ConfigIssue>,
    metrics_address: Option<String>,
) -> Result<Value, Vec<ConfigIssue>> {
    let mut cx = Ctx { origin, text, errors: Vec::new(), warnings: Vec::new() };
    let Some(top) = root.as_mapping() else { return Ok(root.clone()) };
    let mut receiver = top.clone();
    for key in ["rule_files", "alerting", "storage"] {
        if receiver.remove(s(key)).is_some() {
            cx.warn("", key, key.into(), "ignored: infertel evaluates no rules and sends no alerts");
        }
    }
    if receiver.remove(s("remote_read")).is_some() {
        cx.error("", "remote_read", "remote_read".into(), "infertel does not read from remote storage: remove it");
    }
    for key in ["tracing", "otlp", "runtime"] {
        if receiver.remove(s(key)).is_some() {
            cx.warn("", key, key.into(), "ignored: a Prometheus server setting with no meaning for an agent");
        }
    }
    let rw = receiver.remove(s("remote_write"));
    let entries: Vec<Value> = match rw {
        Some(Value::Sequence(v)) => v,
        Some(Value::Null) | None => Vec::new(),
        Some(_) => {
            cx.error("", "remote_write", "remote_write".into(), "must be a list of remote-write endpoints");
            Vec::new()
        }
    };
    if entries.is_empty() && cx.errors.is_empty() {
        cx.error(
            "",
            "scrape_configs",
            String::new(),
            "this Prometheus configuration has no remote_write: nothing would leave the agent; add a remote_write entry (url: http://prometheus:9090/api/v1/write), or use the file as receivers.prometheus.config in a pipeline config (see config/prometheus.yaml)",
        );
    }
    let mut exporters = Mapping::new();
    let mut extensions = Mapping::new();
    let mut ids = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let Some(e) = e.as_mapping() else {
            cx.error("", "remote_write", format!("remote_write[{i}]"), "each entry is a mapping with at least url");
            continue;
        };
        let name = e.get(s("name")).and_then(Value::as_str);
        let id = format!("prometheusremotewrite/{}", id_name(name, i));
        if ids.contains(&id) {
            cx.error(
                "remote_write:",
                "name",
                format!("remote_write[{i}].name"),
                format!("two remote_write entries map to exporter {id}: give them distinct names"),
            );
            continue;
        }
        if let Some((x, exts)) = exporter(&mut cx, i, &id, e) {
            for (k, v) in exts {
                extensions.insert(s(&k), v);
            }
            exporters.insert(s(&id), x);
            ids.push(id);
        }
    }
    warnings.append(&mut cx.warnings);
    if !cx.errors.is_empty() {
        return Err(cx.errors);
    }
    let ext_ids: Vec<Value> = extensions.keys().cloned().collect();
    let mut service = map(vec![(
        "pipelines",
        map(vec![(
            "metrics",
            map(vec![
                ("receivers", Value::Sequence(vec![s("prometheus")])),
                ("exporters", Value::Sequence(ids.iter().map(|i| s(i)).collect())),
            ]),
        )]),
    )]);
    if let Value::Mapping(m) = &mut service {
        if !ext_ids.is_empty() {
            m.insert(s("extensions"), Value::Sequence(ext_ids));
        }
        if let Some(a) = metrics_address {
            m.insert(s("telemetry"), map(vec![("metrics", map(vec![("address", s(&a))]))]));
        }
    }
    let mut out = vec![
        ("receivers", map(vec![("prometheus", map(vec![("config", Value::Mapping(receiver))]))])),
        ("exporters", Value::Mapping(exporters)),
    ];
    if !extensions.is_empty() {
        out.push(("extensions", Value::Mapping(extensions)));
    }
    out.push(("service", service));
    Ok(map(out))
}

/// One `remote_write` entry as an exporter (and the auth extension it
/// needs); `None` after an error.
fn exporter(cx: &mut Ctx, i: usize, id: &str, e: &Mapping) -> Option<(Value, Vec<(String, Value)>)> {
    let path = |k: &str| format!("remote_write[{i}].{k}");
    let mut x = Mapping::new();
    let mut exts = Vec::new();
    let ok_before = cx.errors.len();
    // Prometheus' defaults where they differ from the exporter's.
    x.insert(s("timeout"), s("30s"));
    x.insert(s("send_metadata"), Value::Bool(true));
    // Prometheus starts and keeps retrying when the endpoint is down.
    x.insert(s("startup_check"), s("warn"));
    let mut retry =
        map(vec![("max_elapsed_time", s("0s")), ("initial_interval", s("30ms")), ("max_interval", s("5s"))]);
    let mut queue = Mapping::new();
    let mut tls = Mapping::new();
    let mut auth: Option<Value> = None;
    for (k, v) in e {
        let Some(k) = k.as_str() else { continue };
        match k {
            "url" => {
                x.insert(s("endpoint"), v.clone());
            }
            "name" => {}
            "remote_timeout" => {
                x.insert(s("timeout"), v.clone());
            }
            "headers" | "write_relabel_configs" | "proxy_url" | "follow_redirects" | "enable_http2" => {
                x.insert(s(k), v.clone());
            }
            "basic_auth" => {
                let b = v.as_mapping().cloned().unwrap_or_default();
                let mut ca = Mapping::new();
                for (bk, bv) in &b {
                    match bk.as_str() {
                        Some(f @ ("username" | "password" | "password_file")) => {
                            ca.insert(s(f), bv.clone());
                        }
                        Some(other) => cx.error(
                            "remote_write:",
                            other,
                            path(&format!("basic_auth.{other}")),
                            "unknown basic_auth key",
                        ),
                        None => {}
                    }
                }
                auth = Some(map(vec![("client_auth", Value::Mapping(ca))]));
                exts.push((format!("basicauth/{}", id.trim_start_matches("prometheusremotewrite/")), auth.clone()?));
            }
            "authorization" | "bearer_token" | "bearer_token_file" => {
                let mut t = Mapping::new();
                if k == "authorization" {
                    let a = v.as_mapping().cloned().unwrap_or_default();
                    t.insert(s("scheme"), a.get(s("type")).cloned().unwrap_or_else(|| s("Bearer")));
                    for (ak, av) in &a {
                        match ak.as_str() {
                            Some("type") => {}
                            Some("credentials") => {
                                t.insert(s("token"), av.clone());
                            }
                            Some("credentials_file") => {
                                t.insert(s("filename"), av.clone());
                            }
                            Some(other) => cx.error(
                                "remote_write:",
                                other,
                                path(&format!("authorization.{other}")),
                                "unknown authorization key",
                            ),
                            None => {}
                        }
                    }
                } else {
                    t.insert(s("scheme"), s("Bearer"));
                    t.insert(s(if k == "bearer_token" { "token" } else { "filename" }), v.clone());
                }
                if auth.is_some() {
                    cx.error("remote_write:", k, path(k), "set one of basic_auth, authorization, bearer_token(_file)");
                }
                auth = Some(Value::Mapping(t.clone()));
                exts.push((
                    format!("bearertokenauth/{}", id.trim_start_matches("prometheusremotewrite/")),
                    Value::Mapping(t),
                ));
            }
            "tls_config" => {
                for (tk, tv) in v.as_mapping().cloned().unwrap_or_default() {
                    match tk.as_str() {
                        Some(f @ ("ca_file" | "cert_file" | "key_file" | "insecure_skip_verify")) => {
                            tls.insert(s(f), tv.clone());
                        }
                        Some("server_name") => {
                            tls.insert(s("server_name_override"), tv.clone());
                        }
                        Some(f @ ("min_version" | "max_version")) => cx.warn(
                            "remote_write:",
                            f,
                            path(&format!("tls_config.{f}")),
                            "not applied to remote write yet: TLS 1.2 and 1.3 are both offered",
                        ),
                        Some(other @ ("ca" | "cert" | "key")) => cx.error(
                            "remote_write:",
                            other,
                            path(&format!("tls_config.{other}")),
                            format!("inline PEM is not supported: write it to a file and set {other}_file"),
                        ),
                        Some(other) => cx.error(
                            "remote_write:",
                            other,
                            path(&format!("tls_config.{other}")),
                            "unknown tls_config key",
                        ),
                        None => {}
                    }
                }
            }
            "queue_config" => {
                for (qk, qv) in v.as_mapping().cloned().unwrap_or_default() {
                    let qk = qk.as_str().unwrap_or("");
                    let qp = path(&format!("queue_config.{qk}"));
                    match qk {
                        "max_shards" => {
                            // infertel's consumers are a fixed number: at most
                            // ten, fewer when the file asks for fewer shards.
                            let n = qv.as_u64().unwrap_or(10).clamp(1, 10);
                            queue.insert(s("num_consumers"), Value::Number(n.into()));
                        }
                        "batch_send_deadline" => {
                            queue.insert(s("flush_timeout"), qv.clone());
                        }
                        "min_backoff" => {
                            if let Value::Mapping(r) = &mut retry {
                                r.insert(s("initial_interval"), qv.clone());
                            }
                        }
                        "max_backoff" => {
                            if let Value::Mapping(r) = &mut retry {
                                r.insert(s("max_interval"), qv.clone());
                            }
                        }
                        "retry_on_http_429" => {
                            if qv.as_bool() == Some(false) {
                                cx.warn("queue_config:", qk, qp, "no effect: infertel always retries a 429, honouring Retry-After");
                            }
                        }
                        "capacity" | "min_shards" | "max_samples_per_send" | "sample_age_limit" => cx.warn(
                            "queue_config:",
                            qk,
                            qp,
                            "no effect: infertel's queue holds sending_queue.queue_size batches per exporter and cuts requests at max_batch_size_bytes (3 MB uncompressed)",
                        ),
                        other => cx.error("queue_config:", other, qp, "unknown queue_config key"),
                    }
                }
            }
            "metadata_config" => {
                for (mk, mv) in v.as_mapping().cloned().unwrap_or_default() {
                    match mk.as_str() {
                        Some("send") => {
                            x.insert(s("send_metadata"), mv.clone());
                        }
                        Some(f @ ("send_interval" | "max_samples_per_send")) => cx.warn(
                            "metadata_config:",
                            f,
                            path(&format!("metadata_config.{f}")),
                            "no effect: metadata goes with the samples, refreshed once a minute per target",
                        ),
                        Some(other) => cx.error(
                            "metadata_config:",
                            other,
                            path(&format!("metadata_config.{other}")),
                            "unknown metadata_config key",
                        ),
                        None => {}
                    }
                }
            }
            "send_exemplars" => {
                if v.as_bool() == Some(true) {
                    cx.warn("remote_write:", k, path(k), "no effect: infertel does not send exemplars");
                }
            }
            "round_robin_dns" | "no_proxy" | "proxy_from_environment" | "proxy_connect_header" => {
                cx.warn("remote_write:", k, path(k), "no effect in infertel (set proxy_url for a proxy)");
            }
            "send_native_histograms" => {
                if v.as_bool() == Some(true) {
                    cx.error(
                        "remote_write:",
                        k,
                        path(k),
                        "infertel sends classic histograms only (no native histograms): remove it or set it to false",
                    );
                }
            }
            "protobuf_message" => {
                if v.as_str().is_some_and(|m| m != "prometheus.WriteRequest") {
                    cx.error("remote_write:", k, path(k), "infertel speaks remote write 1.0 (prometheus.WriteRequest); remote write 2.0 is not supported: remove it");
                }
            }
            "sigv4" | "azuread" | "google_iam" | "oauth2" => {
                cx.error("remote_write:", k, path(k), format!("{k} authentication is not supported yet: front the endpoint with a proxy that signs, or use basic_auth, authorization or bearer_token"));
            }
            other => cx.error(
                "remote_write:",
                other,
                path(other),
                "unknown remote_write key (Prometheus 2.42+ keys are accepted; see the README's \"From Prometheus\")",
            ),
        }
    }
    if !x.contains_key(s("endpoint")) {
        cx.error("remote_write:", "remote_write", format!("remote_write[{i}]"), "url is required");
    }
    if auth.is_some()
        && let Some((name, _)) = exts.last()
    {
        x.insert(s("auth"), map(vec![("authenticator", s(name))]));
    }
    if !tls.is_empty() {
        x.insert(s("tls"), Value::Mapping(tls));
    }
    if !queue.is_empty() {
        x.insert(s("sending_queue"), Value::Mapping(queue));
    }
    x.insert(s("retry_on_failure"), retry);
    (cx.errors.len() == ok_before).then_some((Value::Mapping(x), exts))
}
