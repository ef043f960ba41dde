//! The JSON API: `/api/v1/targets` in Prometheus' shape (so tools that read
//! Prometheus' targets API work), `/api/v1/series_trace`, and the JSON of
//! the exporter and inference pages. The rows here also feed the pages.

use super::html::rfc3339;
use super::server::Ctx;
use crate::status::targets::{Pool, TargetStatus};
use crate::status::trace::Fate;
use infertel_model::Labels;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

fn labels_json(l: &Labels) -> Value {
    Value::Object(l.iter().map(|x| (x.name.to_string(), Value::String(x.value.to_string()))).collect())
}

/// The pool name shown: the job, prefixed with the receiver when two
/// receivers have a job of that name.
pub fn pool_name(pools: &[Arc<Pool>], p: &Pool) -> String {
    if pools.iter().filter(|x| x.job == p.job).count() > 1 {
        format!("{}/{}", p.receiver, p.job)
    } else {
        p.job.clone()
    }
}

fn active_json(pool: &str, t: &TargetStatus) -> Value {
    let l = t.last();
    json!({
        "discoveredLabels": labels_json(&t.discovered),
        "labels": labels_json(&t.labels),
        "scrapePool": pool,
        "scrapeUrl": t.url,
        "globalUrl": t.url,
        "lastError": l.error,
        "lastErrorReason": l.reason,
        "lastScrape": l.at.map(rfc3339).unwrap_or_else(|| "0001-01-01T00:00:00Z".into()),
        "lastScrapeDuration": l.duration.as_secs_f64(),
        "lastSamplesScraped": l.samples,
        "lastSamplesPostMetricRelabeling": l.post_relabel,
        "lastSeriesAdded": l.series_added,
        "health": l.health.as_str(),
        "scrapeInterval": crate::primitives::Duration(t.interval).to_string(),
        "scrapeTimeout": crate::primitives::Duration(t.timeout).to_string(),
    })
}

/// `/api/v1/targets?state=active|dropped|any&scrapePool=NAME`.
pub fn targets(ctx: &Ctx, q: &HashMap<String, String>) -> Value {
    let state = q.get("state").map(String::as_str).unwrap_or("any");
    let pools = ctx.board.targets.pools();
    let want = |p: &Pool| q.get("scrapePool").is_none_or(|n| *n == pool_name(&pools, p));
    let mut active = Vec::new();
    let mut dropped = Vec::new();
    let mut counts = serde_json::Map::new();
    for p in pools.iter().filter(|p| want(p)) {
        let name = pool_name(&pools, p);
        if state == "any" || state == "active" {
            active.extend(p.active().iter().map(|t| active_json(&name, t)));
        }
        let (d, more) = p.dropped();
        counts.insert(name.clone(), json!(d.len() + more));
        if state == "any" || state == "dropped" {
            dropped.extend(d.iter().map(|l| json!({"discoveredLabels": labels_json(l), "scrapePool": name})));
        }
    }
    json!({"status": "success", "data": {"activeTargets": active, "droppedTargets": dropped, "droppedTargetCounts": counts}})
}

fn fate_json(f: &Fate) -> Value {
    json!({
        "target": f.target,
        "scrapedAs": f.scraped_as,
        "forwardedAs": f.forwarded_as,
        "scrape": f.scrape.as_ref().map(|s| s.describe()),
        "kept": f.scrape.as_ref().map(|s| s.kept()),
        "lastValue": if f.value.is_finite() { json!(f.value) } else { Value::Null },
        "lastSeen": rfc3339(f.at),
        "scrapes": f.scrapes,
        "exporters": f.exporters.iter().map(|(id, e)| (id.clone(), json!({
            "state": e.state.as_str(), "detail": e.detail, "at": rfc3339(e.at), "deliveredSamples": e.delivered,
            "lastDelivered": e.last_delivered.map(rfc3339),
        }))).collect::<serde_json::Map<_, _>>(),
    })
}

/// `/api/v1/series_trace?match=SELECTOR`: opens (or keeps open) the trace
/// and returns what it has seen so far.
pub fn series_trace(ctx: &Ctx, q: &HashMap<String, String>) -> Value {
    let Some(m) = q.get("match") else {
        return json!({"status": "error", "error": "match=SELECTOR is required, for example match=vllm:num_requests_running{model_name=\"m\"}"});
    };
    match ctx.board.tracer.open(m) {
        Err(e) => json!({"status": "error", "error": e}),
        Ok(t) => json!({
            "status": "success",
            "data": {
                "match": t.text,
                "since": rfc3339(t.since),
                "truncated": t.overflowed(),
                "series": t.fates().iter().map(fate_json).collect::<Vec<_>>(),
            }
        }),
    }
}

/// One exporter as the page and the API show it.
pub struct ExporterRow {
    pub id: String,
    pub endpoint: String,
    pub up: bool,
    pub startup: Option<String>,
    pub paused_because: Option<String>,
    pub last_status: Option<(SystemTime, String, String)>,
    pub queue_samples: f64,
    pub queue_bytes: f64,
    pub oldest_age_s: f64,
    pub held: f64,
    pub sent: f64,
    pub failed_requests: BTreeMap<String, f64>,
    pub dropped: BTreeMap<String, f64>,
    pub duplicates: f64,
}

pub fn exporter_rows(ctx: &Ctx) -> Vec<ExporterRow> {
    let t = &ctx.telemetry;
    let by = |family: &str, id: &str, key: &str| {
        let mut m = BTreeMap::new();
        t.for_each(family, |labels, v| {
            let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, x)| x.as_str());
            if get("exporter") == Some(id) {
                *m.entry(get(key).unwrap_or("").to_string()).or_insert(0.0) += v;
            }
        });
        m
    };
    let mut rows: Vec<ExporterRow> = ctx
        .readiness
        .exporters()
        .iter()
        .map(|e| {
            let id = e.exporter.as_str();
            let v = |name: &str| t.sum(name, &[("exporter", id)]);
            ExporterRow {
                id: id.to_string(),
                endpoint: e.endpoint.clone(),
                up: e.is_up(),
                startup: e.startup().map(|r| r.line()),
                paused_because: (!e.is_up())
                    .then(|| e.last_failure().map(|r| r.line()).unwrap_or_else(|| "endpoint down".into())),
                last_status: e.last_response().map(|r| (r.at, r.status, r.body)),
                queue_samples: v("infertel_exporter_queue_samples"),
                queue_bytes: v("infertel_exporter_queue_bytes"),
                oldest_age_s: v("infertel_exporter_queue_oldest_age_seconds"),
                held: v("infertel_exporter_held_samples"),
                sent: v("infertel_exporter_sent_samples_total"),
                failed_requests: by("infertel_exporter_failed_requests_total", id, "status"),
                dropped: by("infertel_exporter_dropped_samples_total", id, "reason"),
                duplicates: v("infertel_exporter_duplicate_samples_total"),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

pub fn exporters(ctx: &Ctx, _q: &HashMap<String, String>) -> Value {
    let rows: Vec<Value> = exporter_rows(ctx)
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "endpoint": r.endpoint, "up": r.up, "startupCheck": r.startup, "pausedBecause": r.paused_because,
                "lastResponse": r.last_status.as_ref().map(|(at, s, b)| json!({"at": rfc3339(*at), "status": s, "body": b})),
                "queueSamples": r.queue_samples, "queueBytes": r.queue_bytes, "queueOldestAgeSeconds": r.oldest_age_s,
                "heldSamples": r.held, "sentSamples": r.sent, "failedRequests": r.failed_requests,
                "droppedSamples": r.dropped, "duplicateSamples": r.duplicates,
            })
        })
        .collect();
    let (ready, why) = ctx.readiness.check();
    json!({"status": "success", "data": {"ready": ready, "readiness": why.trim(), "exporters": rows}})
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub fn inference(ctx: &Ctx, _q: &HashMap<String, String>) -> Value {
    let history = ctx.board.history.derived();
    let procs: Vec<Value> = ctx
        .board
        .inference()
        .iter()
        .map(|(id, p)| {
            let report: Value = serde_json::from_str(&p.report(now_ms()).to_json()).unwrap_or(Value::Null);
            let series: Vec<Value> = history
                .iter()
                .filter(|(k, _)| k.processor == *id)
                .map(|(k, pts)| json!({"target": k.target, "name": k.name, "labels": k.labels, "points": pts}))
                .collect();
            json!({"processor": id, "report": report, "history": series})
        })
        .collect();
    json!({"status": "success", "data": {"processors": procs}})
}
