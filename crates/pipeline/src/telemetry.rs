//! The agent's own metrics (`infertel_*`), served as Prometheus text at
//! `service.telemetry.metrics.address`. A tiny registry: components ask for a
//! handle once (at build time) and update atomics on the hot path.
//!
//! The same registry can also be pushed over OTLP
//! (`service.telemetry.metrics.readers`, see [`crate::self_otlp`]): a bridge
//! subscribes to every series ([`Telemetry::subscribe`]) and reads counters
//! and gauges at collection time ([`Telemetry::for_each`]); histograms feed a
//! sink ([`Histogram::set_sink`]) on every observation.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A monotonically increasing count.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (stored as f64 bits).
#[derive(Default, Debug)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    pub fn add(&self, d: f64) {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let new = (f64::from_bits(cur) + d).to_bits();
            match self.0.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }
}

/// Where a histogram's observations also go (the OTLP bridge's SDK histogram).
pub type HistogramSink = Box<dyn Fn(f64) + Send + Sync>;

/// A histogram with fixed bounds.
pub struct Histogram {
    bounds: Vec<f64>,
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum: Gauge,
    sink: OnceLock<HistogramSink>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram").field("bounds", &self.bounds).field("count", &self.count()).finish()
    }
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Histogram {
            bounds: bounds.to_vec(),
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: Gauge::default(),
            sink: OnceLock::new(),
        }
    }
    /// The bucket upper bounds (inclusive, as Prometheus `le`).
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }
    /// Sends every later observation to `sink` too (set once; later calls
    /// are ignored).
    pub fn set_sink(&self, sink: HistogramSink) {
        let _ = self.sink.set(sink);
    }
    pub fn observe(&self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&self.buckets) {
            if v <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.add(v);
        if let Some(s) = self.sink.get() {
            s(v);
        }
    }
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Bounds for request durations, in seconds.
pub const DURATION_BOUNDS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Debug)]
enum Metric {
    Counter(Arc<Counter>),
    Gauge(Arc<Gauge>),
    Histogram(Arc<Histogram>),
}

struct Family {
    help: &'static str,
    kind: &'static str,
    series: BTreeMap<Vec<(String, String)>, Metric>,
}

/// What a new series is, as told to [`Telemetry::subscribe`]rs.
pub enum SeriesKind<'a> {
    Counter,
    Gauge,
    Histogram(&'a Arc<Histogram>),
}

/// A new series: family name, help, labels, kind.
pub struct NewSeries<'a> {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'a [(String, String)],
    pub kind: SeriesKind<'a>,
}

type Hook = Arc<dyn Fn(&NewSeries<'_>) + Send + Sync>;

/// The registry. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Telemetry {
    families: Arc<Mutex<BTreeMap<&'static str, Family>>>,
    hooks: Arc<Mutex<Vec<Hook>>>,
    /// What the status page reads, written by the same components.
    status: Arc<crate::status::StatusBoard>,
}

fn key(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl Telemetry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The process' status board (targets, traces, history).
    pub fn status(&self) -> &Arc<crate::status::StatusBoard> {
        &self.status
    }

    fn with_family<R>(
        &self,
        name: &'static str,
        help: &'static str,
        kind: &'static str,
        f: impl FnOnce(&mut Family) -> R,
    ) -> R {
        let mut g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let fam = g.entry(name).or_insert_with(|| Family { help, kind, series: BTreeMap::new() });
        f(fam)
    }

    /// Tells the hooks about a new series; called without the registry lock
    /// held, so a hook may register SDK instruments whose callbacks read
    /// the registry.
    fn announce(&self, s: &NewSeries<'_>) {
        let hooks: Vec<Hook> = self.hooks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for h in hooks {
            h(s);
        }
    }

    pub fn counter(&self, name: &'static str, help: &'static str, labels: &[(&str, &str)]) -> Arc<Counter> {
        let k = key(labels);
        let (c, new) = self.with_family(name, help, "counter", |f| {
            let new = !f.series.contains_key(&k);
            match f.series.entry(k.clone()).or_insert_with(|| Metric::Counter(Arc::default())) {
                Metric::Counter(c) => (c.clone(), new),
                _ => (Arc::default(), false),
            }
        });
        if new {
            self.announce(&NewSeries { name, help, labels: &k, kind: SeriesKind::Counter });
        }
        c
    }

    pub fn gauge(&self, name: &'static str, help: &'static str, labels: &[(&str, &str)]) -> Arc<Gauge> {
        let k = key(labels);
        let (g, new) = self.with_family(name, help, "gauge", |f| {
            let new = !f.series.contains_key(&k);
            match f.series.entry(k.clone()).or_insert_with(|| Metric::Gauge(Arc::default())) {
                Metric::Gauge(c) => (c.clone(), new),
                _ => (Arc::default(), false),
            }
        });
        if new {
            self.announce(&NewSeries { name, help, labels: &k, kind: SeriesKind::Gauge });
        }
        g
    }

    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        bounds: &[f64],
    ) -> Arc<Histogram> {
        let k = key(labels);
        let (h, new) = self.with_family(name, help, "histogram", |f| {
            let new = !f.series.contains_key(&k);
            match f.series.entry(k.clone()).or_insert_with(|| Metric::Histogram(Arc::new(Histogram::new(bounds)))) {
                Metric::Histogram(h) => (h.clone(), new),
                _ => (Arc::new(Histogram::new(bounds)), false),
            }
        });
        if new {
            self.announce(&NewSeries { name, help, labels: &k, kind: SeriesKind::Histogram(&h) });
        }
        h
    }

    /// Calls `hook` for every series registered so far, then for every new
    /// one as it is registered.
    pub fn subscribe(&self, hook: impl Fn(&NewSeries<'_>) + Send + Sync + 'static) {
        let hook: Hook = Arc::new(hook);
        self.hooks.lock().unwrap_or_else(|p| p.into_inner()).push(hook.clone());
        enum Snap {
            Counter,
            Gauge,
            Histogram(Arc<Histogram>),
        }
        type Existing = Vec<(&'static str, &'static str, Vec<(String, String)>, Snap)>;
        let existing: Existing = {
            let g = self.families.lock().unwrap_or_else(|p| p.into_inner());
            g.iter()
                .flat_map(|(name, f)| {
                    f.series.iter().map(move |(k, m)| {
                        let s = match m {
                            Metric::Counter(_) => Snap::Counter,
                            Metric::Gauge(_) => Snap::Gauge,
                            Metric::Histogram(h) => Snap::Histogram(h.clone()),
                        };
                        (*name, f.help, k.clone(), s)
                    })
                })
                .collect()
        };
        for (name, help, labels, s) in &existing {
            let kind = match s {
                Snap::Counter => SeriesKind::Counter,
                Snap::Gauge => SeriesKind::Gauge,
                Snap::Histogram(h) => SeriesKind::Histogram(h),
            };
            hook(&NewSeries { name, help, labels, kind });
        }
    }

    /// Calls `f` with the labels and current value of every counter or
    /// gauge series of family `name` (histograms are skipped).
    pub fn for_each(&self, name: &str, mut f: impl FnMut(&[(String, String)], f64)) {
        let g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let Some(fam) = g.get(name) else { return };
        for (k, m) in &fam.series {
            match m {
                Metric::Counter(c) => f(k, c.get() as f64),
                Metric::Gauge(c) => f(k, c.get()),
                Metric::Histogram(_) => {}
            }
        }
    }

    /// Forgets one series (a target that went away).
    pub fn remove(&self, name: &'static str, labels: &[(&str, &str)]) {
        let mut g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = g.get_mut(name) {
            f.series.remove(&key(labels));
        }
    }

    /// Current value of a counter or gauge series, for tests and `demo`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        match g.get(name)?.series.get(&key(labels))? {
            Metric::Counter(c) => Some(c.get() as f64),
            Metric::Gauge(c) => Some(c.get()),
            Metric::Histogram(h) => Some(h.count() as f64),
        }
    }

    /// Sum over all series of a family whose labels include `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        let g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = g.get(name) else { return 0.0 };
        f.series
            .iter()
            .filter(|(k, _)| filter.iter().all(|(n, v)| k.iter().any(|(kn, kv)| kn == n && kv == v)))
            .map(|(_, m)| match m {
                Metric::Counter(c) => c.get() as f64,
                Metric::Gauge(c) => c.get(),
                Metric::Histogram(h) => h.count() as f64,
            })
            .sum()
    }

    /// Prometheus text exposition 0.0.4 of everything registered.
    pub fn render(&self) -> String {
        let g = self.families.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        for (name, f) in g.iter() {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind);
            for (labels, m) in &f.series {
                match m {
                    Metric::Counter(c) => {
                        let _ = writeln!(out, "{name}{} {}", fmt_labels(labels, None), c.get());
                    }
                    Metric::Gauge(c) => {
                        let _ = writeln!(out, "{name}{} {}", fmt_labels(labels, None), fmt_f64(c.get()));
                    }
                    Metric::Histogram(h) => {
                        for (b, c) in h.bounds.iter().zip(&h.buckets) {
                            let le = fmt_f64(*b);
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {}",
                                fmt_labels(labels, Some(&le)),
                                c.load(Ordering::Relaxed)
                            );
                        }
                        let _ = writeln!(out, "{name}_bucket{} {}", fmt_labels(labels, Some("+Inf")), h.count());
                        let _ = writeln!(out, "{name}_sum{} {}", fmt_labels(labels, None), fmt_f64(h.sum.get()));
                        let _ = writeln!(out, "{name}_count{} {}", fmt_labels(labels, None), h.count());
                    }
                }
            }
        }
        // No configured secret in any label value (an endpoint, a header).
        crate::secrets::scrub_exposition(&out).into_owned()
    }
}

use infertel_exposition::format_value as fmt_f64;

fn fmt_labels(labels: &[(String, String)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut s = String::from("{");
    let mut first = true;
    let mut push = |k: &str, v: &str| {
        if !first {
            s.push(',');
        }
        first = false;
        s.push_str(k);
        s.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '"' => s.push_str("\\\""),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
    };
    for (k, v) in labels {
        push(k, v);
    }
    if let Some(le) = le {
        push("le", le);
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_histograms() {
        let t = Telemetry::new();
        t.counter("infertel_x_total", "X.", &[("exporter", "a\"b")]).add(3);
        t.gauge("infertel_g", "G.", &[]).set(1.5);
        let h = t.histogram("infertel_h_seconds", "H.", &[("exporter", "e")], &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        let s = t.render();
        assert!(s.contains("infertel_x_total{exporter=\"a\\\"b\"} 3\n"), "{s}");
        assert!(s.contains("infertel_g 1.5\n"));
        assert!(s.contains("infertel_h_seconds_bucket{exporter=\"e\",le=\"0.1\"} 1\n"));
        assert!(s.contains("infertel_h_seconds_bucket{exporter=\"e\",le=\"+Inf\"} 2\n"));
        assert!(s.contains("infertel_h_seconds_count{exporter=\"e\"} 2\n"));
        assert_eq!(t.value("infertel_x_total", &[("exporter", "a\"b")]), Some(3.0));
    }
}
