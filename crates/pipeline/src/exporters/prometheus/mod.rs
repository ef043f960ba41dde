//! Exporter `prometheus`, as contrib's `prometheusexporter`: a pull
//! endpoint serving the latest value of every series that reached it, for a
//! Prometheus (or anything that scrapes) to collect.
//!
//! - `store.rs`: the latest sample per series, staleness and expiration;
//! - `exposition.rs`: the text format or OpenMetrics page;
//! - `server.rs`: the listener, shared across reloads;
//! - `config.rs`: the keys.
//!
//! Samples served are the ones received: names, labels and values as the
//! pipeline made them, with `namespace` and `const_labels` applied when
//! written. A series whose name is not a legacy Prometheus name cannot be
//! written unquoted; it is left out and counted in
//! `infertel_exporter_prometheus_skipped_series_total{exporter}`.

pub mod config;
pub mod exposition;
pub mod server;
pub mod store;

use crate::consumer::{BoxFuture, Consumer};
use crate::telemetry::{Counter, Gauge, Telemetry};
use config::PrometheusConfig;
use infertel_model::Batch;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the exporter and its server share.
pub struct Shared {
    pub id: String,
    pub cfg: PrometheusConfig,
    store: Mutex<store::Store>,
    expired: Arc<Counter>,
    skipped: Arc<Counter>,
    served: Arc<Gauge>,
}

impl Shared {
    /// Starts from `prev`'s values (a reload that changed the exporter).
    fn take_over(&self, prev: &Shared) {
        let old = prev.store.lock().unwrap_or_else(|p| p.into_inner());
        let mut new = self.store.lock().unwrap_or_else(|p| p.into_inner());
        new.series = old.series.clone();
        new.metadata = old.metadata.clone();
    }

    fn page(&self, openmetrics: bool) -> String {
        let mut st = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let gone = st.expire(self.cfg.metric_expiration.get(), Instant::now());
        if gone > 0 {
            self.expired.add(gone as u64);
            tracing::debug!(exporter = %self.id, "{gone} series not updated within metric_expiration are no longer served");
        }
        let o = exposition::Options {
            namespace: &self.cfg.namespace,
            const_labels: &self.cfg.const_labels,
            send_timestamps: self.cfg.send_timestamps,
            openmetrics,
        };
        let (page, skipped) = exposition::render(&st, &o);
        self.served.set(st.series.len().saturating_sub(skipped) as f64);
        if skipped > 0 {
            self.skipped.add(skipped as u64);
        }
        page
    }
}

pub struct PrometheusExporter {
    shared: Arc<Shared>,
    /// Keeps the server up while this exporter is in the graph.
    _endpoint: Option<Arc<server::Endpoint>>,
}

impl PrometheusExporter {
    /// Builds the exporter; with `serve`, binds (or joins) its endpoint.
    pub fn new(id: String, cfg: PrometheusConfig, telemetry: &Telemetry, serve: bool) -> Result<Arc<Self>, String> {
        cfg.validate()?;
        let labels = [("exporter", id.as_str())];
        let shared = Arc::new(Shared {
            expired: telemetry.counter(
                "infertel_exporter_prometheus_expired_series_total",
                "Series the prometheus exporter stopped serving because they were not updated within metric_expiration.",
                &labels,
            ),
            skipped: telemetry.counter(
                "infertel_exporter_prometheus_skipped_series_total",
                "Series left out of the prometheus exporter's page because their name cannot be written unquoted (counted per page served).",
                &labels,
            ),
            served: telemetry.gauge(
                "infertel_exporter_prometheus_series",
                "Series on the prometheus exporter's page when it was last served.",
                &labels,
            ),
            id,
            cfg,
            store: Mutex::new(store::Store::default()),
        });
        let endpoint = if serve { Some(server::Endpoint::attach(&shared)?) } else { None };
        Ok(Arc::new(PrometheusExporter { shared, _endpoint: endpoint }))
    }
}

impl Consumer for PrometheusExporter {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        self.shared.store.lock().unwrap_or_else(|p| p.into_inner()).apply(&batch, Instant::now());
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ServerTls;
    use infertel_model::{Labels, Sample, Series};

    fn testdata(f: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/testdata").join(f)
    }

    fn cfg(endpoint: String, tls: Option<ServerTls>) -> PrometheusConfig {
        serde_yaml::from_str::<PrometheusConfig>(&format!("endpoint: {endpoint}"))
            .map(|c| PrometheusConfig { tls, ..c })
            .unwrap()
    }

    fn free() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    #[tokio::test]
    async fn serves_over_tls_and_the_last_one_on_an_endpoint_answers() {
        crate::http::ensure_crypto_provider();
        let t = Telemetry::new();
        let addr = free();
        let tls = Some(ServerTls { cert_file: testdata("client.pem"), key_file: testdata("client-key.pem") });
        let a = PrometheusExporter::new("prometheus".into(), cfg(addr.clone(), tls.clone()), &t, true).unwrap();
        let s = Series {
            labels: Labels::from_pairs([("__name__", "x"), ("k", "v")]),
            samples: infertel_model::samples![Sample { timestamp_ms: 1, value: 2.5 }],
        };
        a.consume(Batch { series: vec![s], metadata: vec![] }).await;
        let c = reqwest::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
        let body = c.get(format!("https://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "# TYPE x untyped\nx{k=\"v\"} 2.5\n");
        // A successor on the same endpoint (a reload) joins the listener and
        // starts from the values; when it goes, the first one answers again.
        let mut c2 = cfg(addr.clone(), tls);
        c2.namespace = "ns".into();
        let b = PrometheusExporter::new("prometheus".into(), c2, &t, true).unwrap();
        let body = c.get(format!("https://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "# TYPE ns_x untyped\nns_x{k=\"v\"} 2.5\n");
        drop(b);
        let body = c.get(format!("https://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
        assert!(body.starts_with("# TYPE x untyped"), "{body}");
        // The last one gone, the port is free again.
        drop(a);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(std::net::TcpListener::bind(&addr).is_ok(), "{addr} still bound");
    }

    #[test]
    fn endpoint_is_required_and_a_dry_build_binds_nothing() {
        let c: PrometheusConfig = serde_yaml::from_str("namespace: x").unwrap();
        assert!(c.validate().unwrap_err().starts_with("endpoint: required"));
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = l.local_addr().unwrap().to_string();
        assert!(PrometheusExporter::new("p".into(), cfg(taken, None), &Telemetry::new(), false).is_ok());
    }
}
