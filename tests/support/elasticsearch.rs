//! A fake Elasticsearch remote-write endpoint, built from Elasticsearch's
//! own source because no real one can run here: `x-pack/plugin/prometheus`,
//! `PrometheusRemoteWriteRestAction` (routes, text bodies) and
//! `PrometheusRemoteWriteTransportAction` (elastic/elasticsearch, read at
//! b10e4501). What it reproduces:
//!
//! * `POST /_prometheus/api/v1/write`, `/_prometheus/metrics/{dataset}/api/v1/write`,
//!   `/_prometheus/metrics/{dataset}/{namespace}/api/v1/write`;
//! * each sample one document created with `op_type=create`: a sample whose
//!   (labels, timestamp) is already stored fails with `CONFLICT`;
//! * no failure: 204; any failure: 400 (429 when one was throttled) with the
//!   body `Prometheus remote write request partially failed: F of T samples
//!   failed.` and one line per index and status
//!   `Index [metrics-<dataset>.prometheus-<namespace>] returned status [CONFLICT]
//!   for N documents. Sample error: ...`;
//! * a series without `__name__` is not indexed and counts as failed;
//! * non-finite values (NaN, so staleness markers too) are dropped without a
//!   word, as Elasticsearch's docs state for this endpoint;
//! * scripted faults: a delay before answering (the document is stored
//!   first, as a bulk request that outlives the client's timeout), 429 with
//!   `Retry-After`, and 413 above a body size (Elasticsearch answers 413 when
//!   the expanded request exceeds `http.max_protobuf_expanded_content_length`).

use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the fake answers a request with, by request index (0-based).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    None,
    /// Store the samples, then answer only after this long.
    Delay(Duration),
    /// Store nothing, answer 429 with `Retry-After: <seconds>`.
    Throttle(u64),
}

pub type FaultScript = Arc<dyn Fn(usize) -> Fault + Send + Sync>;

#[derive(Default)]
pub struct Store {
    /// (labels as text, timestamp) of every stored document.
    pub docs: HashSet<(String, i64)>,
    /// Stored values per (labels as text), in arrival order.
    pub values: BTreeMap<String, Vec<(i64, f64)>>,
    /// Statuses answered, in order.
    pub answers: Vec<u16>,
    pub conflicts: usize,
    pub dropped_nan: usize,
}

pub struct FakeElasticsearch {
    pub addr: SocketAddr,
    pub store: Arc<Mutex<Store>>,
    _rt: std::thread::JoinHandle<()>,
}

impl FakeElasticsearch {
    /// `max_body`: answer 413 to a (compressed) body above this many bytes.
    pub fn start(script: FaultScript, max_body: Option<usize>) -> FakeElasticsearch {
        let store: Arc<Mutex<Store>> = Arc::default();
        let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let std_listener = TcpListener::bind("127.0.0.1:0").expect("bind fake elasticsearch");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let st = store.clone();
        let rt = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let handler = move |params: axum::extract::RawPathParams, body: bytes::Bytes| {
                    let parts: BTreeMap<String, String> =
                        params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                    let (st, counter, script) = (st.clone(), counter.clone(), script.clone());
                    async move {
                        let index = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let dataset = parts.get("dataset").cloned().unwrap_or_else(|| "generic".into());
                        let namespace = parts.get("namespace").cloned().unwrap_or_else(|| "default".into());
                        let fault = script(index);
                        let reply = |st: &Arc<Mutex<Store>>, code: u16, text: String, extra: Option<(&'static str, String)>| {
                            st.lock().unwrap().answers.push(code);
                            let mut r = axum::response::Response::builder()
                                .status(code)
                                .header("content-type", "text/plain; charset=UTF-8");
                            if let Some((k, v)) = extra {
                                r = r.header(k, v);
                            }
                            r.body(axum::body::Body::from(text)).unwrap()
                        };
                        if max_body.is_some_and(|m| body.len() > m) {
                            return reply(&st, 413, "request entity too large".into(), None);
                        }
                        if let Fault::Throttle(secs) = fault {
                            return reply(&st, 429, String::new(), Some(("retry-after", secs.to_string())));
                        }
                        let Ok(req) = infertel_remote_write::decode(&body) else {
                            return reply(&st, 400, String::new(), None);
                        };
                        let (series, _) = infertel_remote_write::to_model(&req);
                        let total: usize = series.iter().map(|s| s.samples.len()).sum();
                        if total == 0 {
                            return reply(&st, 204, String::new(), None);
                        }
                        let (mut conflicts, mut missing_name) = (0usize, 0usize);
                        {
                            let mut s = st.lock().unwrap();
                            for x in &series {
                                if x.labels.get("__name__").is_none() {
                                    missing_name += x.samples.len();
                                    continue;
                                }
                                let key = x.labels.to_string();
                                for p in &x.samples {
                                    if !p.value.is_finite() {
                                        s.dropped_nan += 1;
                                        continue;
                                    }
                                    if !s.docs.insert((key.clone(), p.timestamp_ms)) {
                                        conflicts += 1;
                                        continue;
                                    }
                                    s.values.entry(key.clone()).or_default().push((p.timestamp_ms, p.value));
                                }
                            }
                            s.conflicts += conflicts;
                        }
                        if let Fault::Delay(d) = fault {
                            tokio::time::sleep(d).await;
                        }
                        let failures = conflicts + missing_name;
                        if failures == 0 {
                            return reply(&st, 204, String::new(), None);
                        }
                        let mut text = format!(
                            "Prometheus remote write request partially failed: {failures} of {total} samples failed.\n"
                        );
                        if missing_name > 0 {
                            text.push_str(&format!("{missing_name} sample(s) dropped due to missing __name__ label\n"));
                        }
                        if conflicts > 0 {
                            text.push_str(&format!(
                                "Index [metrics-{dataset}.prometheus-{namespace}] returned status [CONFLICT] for {conflicts} documents. Sample error: [version conflict, document already exists (current version [1])]\n"
                            ));
                        }
                        reply(&st, 400, text, None)
                    }
                };
                let app = axum::Router::new()
                    .route("/_prometheus/api/v1/write", axum::routing::post(handler.clone()))
                    .route("/_prometheus/metrics/{dataset}/api/v1/write", axum::routing::post(handler.clone()))
                    .route("/_prometheus/metrics/{dataset}/{namespace}/api/v1/write", axum::routing::post(handler));
                let _ = axum::serve(listener, app).await;
            });
        });
        FakeElasticsearch { addr, store, _rt: rt }
    }

    pub fn url(&self, dataset: &str, namespace: &str) -> String {
        format!("http://{}/_prometheus/metrics/{dataset}/{namespace}/api/v1/write", self.addr)
    }
}
