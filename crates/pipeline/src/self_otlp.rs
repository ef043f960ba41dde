//! The agent's own metrics pushed over OTLP, as the Collector does with
//! `service.telemetry.metrics.readers`: each `periodic` reader is an
//! `opentelemetry_sdk` `PeriodicReader` (on the tokio runtime) around an
//! `opentelemetry-otlp` `MetricExporter` (gRPC through tonic, or
//! HTTP/protobuf through our rustls+ring reqwest client).
//!
//! The registry in [`crate::telemetry`] stays the source of truth; the
//! bridge mirrors it with the same metric names and label sets as the
//! Prometheus endpoint:
//! - counters become `ObservableCounter<u64>` (monotonic cumulative Sum),
//!   gauges `ObservableGauge<f64>`; their callbacks read the registry at
//!   collection time, so OTLP and `/metrics` agree up to one interval;
//! - histograms: the SDK has no observable histogram, so each registry
//!   histogram gets a parallel SDK `Histogram<f64>` with the same bucket
//!   bounds, fed by every `Histogram::observe` (the registry series and the
//!   SDK histogram see the same observations from the moment the bridge is
//!   attached, which is before the pipeline starts).
//!
//! The resource carries `service.name=infertel` and `service.version`. The
//! readers are set up once per process (like the self-metrics endpoint they
//! live across config reloads) and flushed on exit by [`SelfOtlp::shutdown`].

use crate::primitives::duration::Duration;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

/// One entry of `service.telemetry.metrics.readers`.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricReaderConfig {
    pub periodic: Option<PeriodicReaderConfig>,
    pub pull: Option<PullReaderConfig>,
}

/// `pull:` the Collector's shape for serving its own metrics to a scraper:
/// `pull: {exporter: {prometheus: {host, port}}}` is where infertel serves
/// its `/metrics` (the same endpoint as `service.telemetry.metrics.address`).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PullReaderConfig {
    pub exporter: PullExporterConfig,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PullExporterConfig {
    pub prometheus: Option<PrometheusPullConfig>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PrometheusPullConfig {
    /// Default `localhost`.
    #[serde(default = "localhost")]
    pub host: String,
    pub port: u16,
    /// The Collector's naming switches for its own metrics: accepted;
    /// infertel's own names have no scope, type or unit suffixes to drop.
    #[serde(default)]
    pub without_scope_info: bool,
    #[serde(default)]
    pub without_type_suffix: bool,
    #[serde(default)]
    pub without_units: bool,
    /// Accepted; the resource is served as `target_info`.
    #[serde(default)]
    pub with_resource_constant_labels: Option<ResourceConstantLabels>,
}

#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct ResourceConstantLabels {
    #[serde(default)]
    pub included: Vec<String>,
    #[serde(default)]
    pub excluded: Vec<String>,
}

fn localhost() -> String {
    "localhost".into()
}

impl PrometheusPullConfig {
    /// `host:port`, bracketing an IPv6 host.
    pub fn endpoint(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The address the pull reader (if any) serves on.
pub fn pull_endpoint(readers: &[MetricReaderConfig]) -> Option<String> {
    readers.iter().find_map(|r| r.pull.as_ref()?.exporter.prometheus.as_ref().map(|p| p.endpoint()))
}

/// `periodic:` a push reader.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PeriodicReaderConfig {
    /// Time between exports; an integer is milliseconds (the Collector's
    /// spelling), text a duration (`60s`). Default 60s.
    #[serde(default = "default_interval", deserialize_with = "ms_or_duration")]
    pub interval: Duration,
    /// Bound on one collect+export. Default 30s.
    #[serde(default = "default_reader_timeout", deserialize_with = "ms_or_duration")]
    pub timeout: Duration,
    pub exporter: PushExporterConfig,
}

/// `exporter:` of a periodic reader.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PushExporterConfig {
    pub otlp: Option<OtlpPushConfig>,
}

/// `exporter.otlp:`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct OtlpPushConfig {
    /// `grpc` or `http/protobuf`.
    pub protocol: String,
    /// gRPC: `http://host:4317` (scheme optional: `insecure` decides).
    /// HTTP: `http://host:4318/v1/metrics`; a URL without a path gets
    /// `/v1/metrics` appended.
    pub endpoint: String,
    /// Request headers (gRPC metadata): a map, or the Collector's list of
    /// `{name, value}`.
    #[serde(default)]
    pub headers: Headers,
    /// Plain text when the endpoint has no scheme (default false: https).
    #[serde(default)]
    pub insecure: bool,
    /// `gzip` or `none` (default none).
    #[serde(default)]
    pub compression: Option<String>,
    /// Per-export timeout; an integer is milliseconds. Default 10s.
    #[serde(default = "default_export_timeout", deserialize_with = "ms_or_duration")]
    pub timeout: Duration,
    /// `cumulative` (default) or `delta`.
    #[serde(default)]
    pub temporality_preference: Option<String>,
}

/// Headers as a map or as a list of `{name, value}`.
#[derive(Debug, Clone, Default)]
pub struct Headers(pub BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Pair {
            name: String,
            value: String,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum H {
            Map(BTreeMap<String, String>),
            List(Vec<Pair>),
        }
        match Option::<H>::deserialize(d)? {
            None => Ok(Headers::default()),
            Some(H::Map(m)) => Ok(Headers(m)),
            Some(H::List(l)) => Ok(Headers(l.into_iter().map(|p| (p.name, p.value)).collect())),
        }
    }
}

fn default_interval() -> Duration {
    Duration::from_secs(60)
}
fn default_reader_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_export_timeout() -> Duration {
    Duration::from_secs(10)
}

/// An integer is milliseconds (as in the Collector's config); text is a
/// duration such as `15s`.
fn ms_or_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        Ms(u64),
        Text(String),
    }
    match V::deserialize(d)? {
        V::Ms(ms) => Ok(Duration::from_millis(ms)),
        V::Text(s) => crate::primitives::duration::parse_duration(&s).map(Duration).map_err(serde::de::Error::custom),
    }
}

/// Checks the readers; the error names the offending key.
pub fn validate(readers: &[MetricReaderConfig]) -> Result<(), String> {
    for (i, r) in readers.iter().enumerate() {
        let at = format!("service.telemetry.metrics.readers[{i}]");
        if let Some(pull) = &r.pull {
            if r.periodic.is_some() {
                return Err(format!("{at}: a reader is periodic or pull, not both"));
            }
            if pull.exporter.prometheus.is_none() {
                return Err(format!("{at}.pull.exporter: needs prometheus (host, port)"));
            }
            if readers[..i].iter().any(|o| o.pull.is_some()) {
                return Err(format!("{at}: infertel serves its own metrics on one endpoint: one pull reader"));
            }
            continue;
        }
        let Some(p) = &r.periodic else {
            return Err(format!("{at}: needs a periodic or a pull reader"));
        };
        if p.interval.get().is_zero() {
            return Err(format!("{at}.periodic.interval must be positive"));
        }
        let Some(o) = &p.exporter.otlp else {
            return Err(format!("{at}.periodic.exporter: needs otlp"));
        };
        let at = format!("{at}.periodic.exporter.otlp");
        if !matches!(o.protocol.as_str(), "grpc" | "http/protobuf") {
            return Err(format!("{at}.protocol {:?}: use grpc or http/protobuf", o.protocol));
        }
        if o.endpoint.is_empty() {
            return Err(format!("{at}.endpoint is required"));
        }
        endpoint_url(o).map_err(|e| format!("{at}.endpoint: {e}"))?;
        if !matches!(o.compression.as_deref(), None | Some("none" | "gzip" | "")) {
            return Err(format!("{at}.compression {:?}: use gzip or none", o.compression.as_deref().unwrap_or("")));
        }
        if !matches!(o.temporality_preference.as_deref(), None | Some("cumulative" | "delta")) {
            return Err(format!(
                "{at}.temporality_preference {:?}: use cumulative or delta",
                o.temporality_preference.as_deref().unwrap_or("")
            ));
        }
    }
    Ok(())
}

/// The URL the exporter sends to.
fn endpoint_url(o: &OtlpPushConfig) -> Result<String, String> {
    let mut s = o.endpoint.clone();
    if !s.contains("://") {
        s = format!("{}://{s}", if o.insecure { "http" } else { "https" });
    }
    let mut u = url::Url::parse(&s).map_err(|e| format!("{:?}: {e}", o.endpoint))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("{:?}: scheme must be http or https", o.endpoint));
    }
    if o.protocol == "http/protobuf" && (u.path().is_empty() || u.path() == "/") {
        u.set_path("/v1/metrics");
        return Ok(u.to_string());
    }
    if o.protocol == "grpc" {
        // tonic wants scheme://authority only.
        return Ok(s.trim_end_matches('/').to_string());
    }
    Ok(u.to_string())
}

/// The running readers; [`SelfOtlp::shutdown`] flushes them.
pub struct SelfOtlp {
    provider: SdkMeterProvider,
}

fn attrs(labels: &[(String, String)]) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect()
}

/// Mirrors `telemetry` into `meter` (see the module docs).
fn bridge(telemetry: &crate::Telemetry, meter: Meter) {
    let seen: Arc<Mutex<HashSet<&'static str>>> = Arc::default();
    let histograms: Arc<Mutex<BTreeMap<&'static str, opentelemetry::metrics::Histogram<f64>>>> = Arc::default();
    let t = telemetry.clone();
    telemetry.subscribe(move |s| {
        use crate::telemetry::SeriesKind;
        let first = seen.lock().unwrap_or_else(|p| p.into_inner()).insert(s.name);
        let name = s.name;
        match &s.kind {
            SeriesKind::Counter if first => {
                let t = t.clone();
                meter
                    .u64_observable_counter(name)
                    .with_description(s.help)
                    .with_callback(move |o| t.for_each(name, |l, v| o.observe(v as u64, &attrs(l))))
                    .build();
            }
            SeriesKind::Gauge if first => {
                let t = t.clone();
                meter
                    .f64_observable_gauge(name)
                    .with_description(s.help)
                    .with_callback(move |o| t.for_each(name, |l, v| o.observe(v, &attrs(l))))
                    .build();
            }
            SeriesKind::Histogram(h) => {
                let sdk = histograms
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(name)
                    .or_insert_with(|| {
                        meter.f64_histogram(name).with_description(s.help).with_boundaries(h.bounds().to_vec()).build()
                    })
                    .clone();
                let a = attrs(s.labels);
                h.set_sink(Box::new(move |v| sdk.record(v, &a)));
            }
            _ => {}
        }
    });
}

impl SelfOtlp {
    /// Builds the meter provider with one periodic reader per entry and
    /// bridges `telemetry` into it.
    /// Must run inside the tokio runtime. `None` when there are no readers.
    pub fn start(
        readers: &[MetricReaderConfig],
        resource_attrs: &[(String, String)],
        telemetry: &crate::Telemetry,
    ) -> Result<Option<SelfOtlp>, String> {
        validate(readers)?;
        if !readers.iter().any(|r| r.periodic.is_some()) {
            return Ok(None);
        }
        let resource = Resource::builder_empty()
            .with_attributes(resource_attrs.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
            .build();
        // One provider with every reader (as the Collector does): one bridge,
        // so each registry histogram feeds one SDK histogram that all
        // readers collect.
        let mut builder = SdkMeterProvider::builder().with_resource(resource);
        for r in readers {
            let Some(p) = &r.periodic else { continue };
            let Some(o) = &p.exporter.otlp else { continue };
            let exporter = Counted::new(build_exporter(o)?, o, telemetry);
            let reader = opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .with_interval(p.interval.get())
            .with_timeout(p.timeout.get())
            .build();
            builder = builder.with_reader(reader);
            tracing::info!(
                protocol = %o.protocol,
                endpoint = %endpoint_url(o).unwrap_or_default(),
                interval = %p.interval,
                "pushing self-metrics over OTLP"
            );
        }
        let provider = builder.build();
        bridge(telemetry, provider.meter("infertel"));
        Ok(Some(SelfOtlp { provider }))
    }

    /// Exports what is pending and stops the readers (blocks: call it from
    /// `spawn_blocking`).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(StdDuration::from_secs(10)) {
            tracing::warn!("self-metrics OTLP readers shutdown: {e}");
        }
    }
}

/// The exporter, counting its exports in
/// `infertel_self_telemetry_exports_total{endpoint, result}` and logging a
/// warning when it starts failing (the SDK's own logs are off) and an info
/// line when it recovers.
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    endpoint: String,
    ok: Arc<crate::telemetry::Counter>,
    failed: Arc<crate::telemetry::Counter>,
    failing: std::sync::atomic::AtomicBool,
}

impl Counted {
    fn new(inner: opentelemetry_otlp::MetricExporter, o: &OtlpPushConfig, t: &crate::Telemetry) -> Counted {
        // A label: never the userinfo or a credential in the query.
        let endpoint = crate::exporters::probe::redact_url(&endpoint_url(o).unwrap_or_else(|_| o.endpoint.clone()));
        const NAME: &str = "infertel_self_telemetry_exports_total";
        const HELP: &str =
            "Exports of the agent's own metrics over OTLP (service.telemetry.metrics.readers), by result.";
        Counted {
            inner,
            ok: t.counter(NAME, HELP, &[("endpoint", &endpoint), ("result", "success")]),
            failed: t.counter(NAME, HELP, &[("endpoint", &endpoint), ("result", "failure")]),
            endpoint,
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl opentelemetry_sdk::metrics::exporter::PushMetricExporter for Counted {
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        use std::sync::atomic::Ordering;
        let r = self.inner.export(metrics).await;
        match &r {
            Ok(()) => {
                self.ok.inc();
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(endpoint = %self.endpoint, "self-metrics OTLP export recovered");
                }
            }
            Err(e) => {
                self.failed.inc();
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(endpoint = %self.endpoint, "self-metrics OTLP export failed: {e}");
                } else {
                    tracing::debug!(endpoint = %self.endpoint, "self-metrics OTLP export failed: {e}");
                }
            }
        }
        r
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: StdDuration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

fn build_exporter(o: &OtlpPushConfig) -> Result<opentelemetry_otlp::MetricExporter, String> {
    let url = endpoint_url(o)?;
    let temporality = match o.temporality_preference.as_deref() {
        Some("delta") => opentelemetry_sdk::metrics::Temporality::Delta,
        _ => opentelemetry_sdk::metrics::Temporality::Cumulative,
    };
    let gzip = o.compression.as_deref() == Some("gzip");
    let built = if o.protocol == "grpc" {
        let mut md = tonic::metadata::MetadataMap::new();
        for (k, v) in &o.headers.0 {
            let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|e| format!("header {k:?}: {e}"))?;
            let val = v.parse().map_err(|e| format!("header {k:?}: {e}"))?;
            md.insert(key, val);
        }
        let mut b = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(url.clone())
            .with_timeout(o.timeout.get())
            .with_metadata(md)
            .with_temporality(temporality);
        if gzip {
            b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
        }
        if url.starts_with("https://") {
            b = b.with_tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots());
        }
        b.build()
    } else {
        let client = crate::http::build_client(&crate::http::TlsSettings::default(), None)?;
        let mut b = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(o.timeout.get())
            .with_http_client(client)
            .with_headers(o.headers.0.clone().into_iter().collect())
            .with_temporality(temporality);
        if gzip {
            b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
        }
        b.build()
    };
    built.map_err(|e| format!("self-metrics OTLP exporter: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Vec<MetricReaderConfig> {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn collector_shape_parses_with_ms_ints_and_durations() {
        let r = parse(
            "- periodic:\n    interval: 5000\n    exporter:\n      otlp:\n        protocol: grpc\n        endpoint: localhost:4317\n        insecure: true\n        headers:\n          - {name: x-tenant, value: a}\n- periodic:\n    interval: 2s\n    exporter:\n      otlp: {protocol: http/protobuf, endpoint: 'http://h:4318', timeout: 500ms, headers: {k: v}}\n",
        );
        validate(&r).unwrap();
        let a = r[0].periodic.as_ref().unwrap();
        assert_eq!(a.interval.get(), StdDuration::from_secs(5));
        let o = a.exporter.otlp.as_ref().unwrap();
        assert_eq!(endpoint_url(o).unwrap(), "http://localhost:4317");
        assert_eq!(o.headers.0.get("x-tenant").map(String::as_str), Some("a"));
        let b = r[1].periodic.as_ref().unwrap();
        assert_eq!(b.interval.get(), StdDuration::from_secs(2));
        let o = b.exporter.otlp.as_ref().unwrap();
        assert_eq!(o.timeout.get(), StdDuration::from_millis(500));
        assert_eq!(endpoint_url(o).unwrap(), "http://h:4318/v1/metrics");
    }

    #[test]
    fn bad_readers_are_refused_with_their_path() {
        let e = validate(&parse("- periodic: {exporter: {otlp: {protocol: thrift, endpoint: x}}}")).unwrap_err();
        assert!(e.contains("readers[0].periodic.exporter.otlp.protocol"), "{e}");
        let e = validate(&parse("- periodic: {exporter: {otlp: {protocol: grpc, endpoint: ''}}}")).unwrap_err();
        assert!(e.contains("endpoint is required"), "{e}");
        let e = validate(&parse("- periodic: {exporter: {otlp: {protocol: grpc, endpoint: h, compression: lz4}}}"))
            .unwrap_err();
        assert!(e.contains("compression"), "{e}");
        assert!(serde_yaml::from_str::<Vec<MetricReaderConfig>>("- pull: {}").is_err());
    }

    #[test]
    fn bridge_announces_existing_and_new_series_once() {
        let t = crate::Telemetry::new();
        t.counter("infertel_a_total", "A.", &[("x", "1")]).add(2);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        t.subscribe(move |s| s2.lock().unwrap().push((s.name, s.labels.to_vec())));
        t.counter("infertel_a_total", "A.", &[("x", "1")]).add(1);
        t.counter("infertel_a_total", "A.", &[("x", "2")]).add(1);
        let h = t.histogram("infertel_h", "H.", &[], &[1.0]);
        let got = std::sync::Arc::new(Mutex::new(Vec::new()));
        let g2 = got.clone();
        h.set_sink(Box::new(move |v| g2.lock().unwrap().push(v)));
        h.observe(0.5);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(*got.lock().unwrap(), vec![0.5]);
        let mut vals = Vec::new();
        t.for_each("infertel_a_total", |l, v| vals.push((l[0].1.clone(), v)));
        assert_eq!(vals, vec![("1".to_string(), 3.0), ("2".to_string(), 1.0)]);
    }
}
