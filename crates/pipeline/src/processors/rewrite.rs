//! The stage `attributes` and `resource` share: rewrite each series' labels
//! with an action list, once per series (remembered by label set, see
//! `series_cache.rs`), and pass the batch on.
//!
//! Two series an action list makes equal (say, deleting the only label that
//! told them apart) would reach a backend as two values for one series at
//! one time, which Prometheus refuses as a duplicate; the later one is
//! dropped here instead, counted in
//! `infertel_processor_dropped_samples_total{processor,reason="duplicate_series"}`
//! and logged once per metric name.

use super::actions::{self, Action, Attributes};
use super::matching::Matcher;
use super::pdata::{self, MetricView};
use super::series_cache::SeriesCache;
use crate::consumer::{BoxFuture, Consumer};
use crate::telemetry::{Counter, Telemetry};
use infertel_model::{Batch, Label, Labels, METRIC_NAME, Metadata};
use infertel_otlp::MetadataStore;
use rustc_hash::FxHashSet;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Which attribute map the actions edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Data point attributes (`attributes` processor).
    Point,
    /// The target's resource (`resource` processor).
    Resource,
}

/// A series' labels seen as one scope's attribute map.
struct LabelMap {
    labels: Vec<(String, String)>,
    scope: Scope,
    point_label: Option<&'static str>,
}

impl LabelMap {
    fn label_of<'k>(&self, key: &'k str) -> Option<std::borrow::Cow<'k, str>> {
        let l = match self.scope {
            Scope::Point => pdata::attribute_label(key),
            Scope::Resource => pdata::resource_label(key),
        };
        let usable = match self.scope {
            Scope::Point => pdata::is_attribute(&l, self.point_label),
            Scope::Resource => l != METRIC_NAME && Some(&*l) != self.point_label,
        };
        usable.then_some(l)
    }
}

impl Attributes for LabelMap {
    fn get(&self, key: &str) -> Option<String> {
        if self.scope == Scope::Resource && matches!(key, "server.address" | "server.port") {
            let instance = self.labels.iter().find(|(n, _)| n == "instance")?;
            return pdata::server_attribute(&instance.1, key).map(str::to_string);
        }
        let l = self.label_of(key)?;
        self.labels.iter().find(|(n, _)| *n == *l).map(|(_, v)| v.clone())
    }
    fn set(&mut self, key: &str, value: String) {
        let Some(l) = self.label_of(key) else { return };
        match self.labels.iter_mut().find(|(n, _)| *n == *l) {
            Some(slot) => slot.1 = value,
            None => self.labels.push((l.into_owned(), value)),
        }
    }
    fn remove(&mut self, key: &str) {
        let Some(l) = self.label_of(key) else { return };
        self.labels.retain(|(n, _)| *n != *l);
    }
    fn keys(&self) -> Vec<String> {
        self.labels
            .iter()
            .filter(|(n, _)| match self.scope {
                Scope::Point => pdata::is_attribute(n, self.point_label),
                Scope::Resource => n != METRIC_NAME && Some(n.as_str()) != self.point_label,
            })
            .map(|(n, _)| match (self.scope, n.as_str()) {
                (Scope::Resource, "job") => "service.name".to_string(),
                (Scope::Resource, "instance") => "service.instance.id".to_string(),
                _ => n.clone(),
            })
            .collect()
    }
}

pub struct Rewrite {
    id: String,
    scope: Scope,
    actions: Vec<Action>,
    include: Option<Matcher>,
    exclude: Option<Matcher>,
    next: Arc<dyn Consumer>,
    /// The new label set of a series, or `None` when it is unchanged.
    memo: SeriesCache<Option<Labels>>,
    metadata: Mutex<MetadataStore>,
    duplicates: Arc<Counter>,
    logged: Mutex<BTreeSet<String>>,
}

impl Rewrite {
    pub fn new(
        id: String,
        scope: Scope,
        actions: Vec<Action>,
        include: Option<Matcher>,
        exclude: Option<Matcher>,
        next: Arc<dyn Consumer>,
        telemetry: &Telemetry,
    ) -> Arc<Self> {
        let duplicates = telemetry.counter(
            "infertel_processor_dropped_samples_total",
            "Samples a processor dropped, by reason.",
            &[("processor", &id), ("reason", "duplicate_series")],
        );
        Arc::new(Rewrite {
            id,
            scope,
            actions,
            include,
            exclude,
            next,
            memo: SeriesCache::default(),
            metadata: Mutex::new(MetadataStore::default()),
            duplicates,
            logged: Mutex::default(),
        })
    }

    /// The labels `actions` make of `labels` (`None`: unchanged).
    fn rewrite(&self, labels: &Labels, metric: &MetricView) -> Option<Labels> {
        if self.include.as_ref().is_some_and(|m| !m.matches(labels, metric))
            || self.exclude.as_ref().is_some_and(|m| m.matches(labels, metric))
        {
            return None;
        }
        let mut map = LabelMap {
            labels: labels.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect(),
            scope: self.scope,
            point_label: metric.point_label,
        };
        actions::apply(&self.actions, &mut map);
        let out = Labels::from_vec(map.labels.into_iter().map(|(n, v)| Label::new(n, v)).collect());
        (out != *labels).then_some(out)
    }

    fn note_metadata(&self, md: &[Metadata]) {
        if md.is_empty() {
            return;
        }
        let mut store = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        if md.iter().any(|m| store.get(&m.family) != Some(m)) {
            store.update(md);
            // A family's type decides which label a point keeps (`le`,
            // `quantile`) and what include/exclude see.
            self.memo.clear();
        }
    }

    fn process(&self, mut batch: Batch) -> Batch {
        self.note_metadata(&batch.metadata);
        let store = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        let mut memo = self.memo.lock();
        let mut changed = false;
        for s in &mut batch.series {
            let new = memo.get_or(&s.labels, || self.rewrite(&s.labels, &pdata::metric_of(&s.labels, &store)));
            if let Some(l) = new {
                s.labels = l;
                changed = true;
            }
        }
        drop(memo);
        drop(store);
        if changed {
            self.drop_duplicates(&mut batch);
        }
        batch
    }

    fn drop_duplicates(&self, batch: &mut Batch) {
        let mut seen: FxHashSet<(Labels, i64)> = FxHashSet::default();
        let mut dropped: Vec<String> = Vec::new();
        batch.series.retain(|s| {
            let first = s.samples.first().map_or(i64::MIN, |x| x.timestamp_ms);
            if seen.insert((s.labels.clone(), first)) {
                true
            } else {
                self.duplicates.add(s.samples.len() as u64);
                dropped.push(s.labels.metric_name().to_string());
                false
            }
        });
        if dropped.is_empty() {
            return;
        }
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        for name in dropped {
            if logged.len() < 1000 && logged.insert(name.clone()) {
                tracing::warn!(
                    processor = %self.id,
                    metric = %name,
                    "the actions made two series of {name} equal; the later one's samples are dropped (counted in infertel_processor_dropped_samples_total)"
                );
            }
        }
    }
}

impl Consumer for Rewrite {
    fn consume(&self, batch: Batch) -> BoxFuture<'_, ()> {
        let out = self.process(batch);
        Box::pin(async move { self.next.consume(out).await })
    }
}
