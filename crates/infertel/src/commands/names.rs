//! `infertel names --config FILE [--target URL|FILE]`: a dry run that
//! scrapes once (or reads a file) and prints, per exporter of every
//! pipeline, each metric's final name, type and labels as that exporter
//! sends them, and warns where a backend will misread them:
//! Elasticsearch's remote-write endpoint types a series as a counter only
//! by a case-sensitive `_total`/`_sum`/`_count`/`_bucket` suffix, so a
//! counter such as dcgm-exporter's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`
//! lands there as a gauge. Nothing is sent anywhere.

use crate::cli::LogArgs;
use crate::exit;
use infertel_model::{Metadata, MetricType};
use infertel_otlp::{MetadataStore, Naming, plan};
use infertel_pipeline::config::ComponentId;
use infertel_pipeline::exporters::ExporterConfig;
use infertel_pipeline::processors::ProcessorConfig;
use infertel_pipeline::receivers::ReceiverConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What one scrape said: series names with their label names, and metadata.
struct Scraped {
    source: String,
    series: BTreeMap<String, BTreeSet<String>>,
    store: MetadataStore,
}

async fn fetch(src: &str) -> Result<(Vec<u8>, Option<String>), String> {
    if src.starts_with("http://") || src.starts_with("https://") {
        let client =
            infertel_pipeline::http::build_client(&Default::default(), Some(std::time::Duration::from_secs(10)))?;
        let resp = client
            .get(src)
            .header("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
            .send()
            .await
            .map_err(|e| format!("{src}: {}", infertel_pipeline::http::describe_error(&e)))?;
        if !resp.status().is_success() {
            return Err(format!("{src}: HTTP {}", resp.status()));
        }
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).map(String::from);
        let body = resp.bytes().await.map_err(|e| format!("{src}: {e}"))?;
        Ok((body.to_vec(), ct))
    } else {
        std::fs::read(src).map(|b| (b, None)).map_err(|e| format!("{src}: {e}"))
    }
}

fn digest(source: String, body: &[u8], ct: Option<&str>) -> Result<Scraped, String> {
    let format = infertel_exposition::Format::from_content_type(ct);
    let exp = infertel_exposition::parse(body, format).map_err(|e| format!("{source}: parse error: {e}"))?;
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &exp.samples {
        let e = series.entry(s.name.to_string()).or_default();
        for (n, v) in exp.labels(s) {
            if !v.is_empty() {
                e.insert(n.to_string());
            }
        }
        e.insert("job".into());
        e.insert("instance".into());
    }
    let md: Vec<Metadata> = exp
        .families
        .iter()
        .map(|f| Metadata {
            family: (*f.name).into(),
            kind: f.kind,
            help: f.help.as_deref().unwrap_or("").into(),
            unit: f.unit.as_deref().unwrap_or("").into(),
        })
        .collect();
    let mut store = MetadataStore::default();
    store.update(&md);
    Ok(Scraped { source, series, store })
}

/// Elasticsearch's remote-write endpoint infers counters from these
/// case-sensitive suffixes only.
fn es_counter_suffix(name: &str) -> bool {
    ["_total", "_sum", "_count", "_bucket"].iter().any(|s| name.ends_with(s))
}

fn labels(v: &[String]) -> String {
    if v.is_empty() { "-".into() } else { v.join(",") }
}

pub async fn names(log: &LogArgs, path: &Path, target: Option<&str>) -> u8 {
    crate::logging::init(log, "warn", false);
    let loaded = match super::load_file(path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let cfg = loaded.config;
    let mut sources: Vec<String> = Vec::new();
    match target {
        Some(t) => sources.push(t.to_string()),
        None => {
            for (_, rc) in &cfg.receivers.0 {
                let ReceiverConfig::Prometheus(p) = rc else { continue };
                for sc in &p.config.scrape_configs {
                    for st in &sc.static_configs {
                        for t in &st.targets {
                            let scheme = if sc.scheme.is_empty() { "http" } else { sc.scheme.as_str() };
                            sources.push(format!("{scheme}://{t}{}", sc.metrics_path));
                        }
                    }
                }
            }
        }
    }
    if sources.is_empty() {
        eprintln!("error: no static targets in the config; pass --target URL or --target FILE");
        return exit::USAGE;
    }
    let mut scraped = Vec::new();
    for s in sources {
        match fetch(&s).await.and_then(|(b, ct)| digest(s.clone(), &b, ct.as_deref())) {
            Ok(x) => scraped.push(x),
            Err(e) => {
                eprintln!("error: {e}");
                return exit::FAILURE;
            }
        }
    }
    let mut warnings = 0;
    for (pname, p) in &cfg.service.pipelines {
        let preserve = p.processors.iter().any(|r| {
            ComponentId::parse(r)
                .ok()
                .and_then(|id| cfg.processors.get(&id))
                .is_some_and(|c| matches!(c, ProcessorConfig::PreserveNames(_)))
        });
        for e in &p.exporters {
            let Some(ec) = ComponentId::parse(e).ok().and_then(|id| cfg.exporters.get(&id)) else {
                continue;
            };
            for sc in &scraped {
                let (mode, rows): (&str, Vec<(String, String, String, Vec<String>)>) = match ec {
                    ExporterConfig::Otlp(_) | ExporterConfig::OtlpHttp(_) | ExporterConfig::File(_) => {
                        let trim = match ec {
                            ExporterConfig::Otlp(c) => c.trim_metric_suffixes,
                            ExporterConfig::OtlpHttp(c) => c.trim_metric_suffixes,
                            _ => false,
                        };
                        let naming = if preserve { Naming::Preserve } else { Naming::Otel };
                        let mut out: BTreeMap<String, (String, BTreeSet<String>, Vec<String>)> = BTreeMap::new();
                        for (name, ls) in &sc.series {
                            let l: Vec<&str> = ls.iter().map(String::as_str).collect();
                            let mut pl = plan(&sc.store, naming, trim, name, &l);
                            // The spec drops a histogram or summary without `_count`.
                            let fam = sc.store.classify(name).family;
                            if matches!(pl.otlp_type.as_str(), "histogram" | "summary")
                                && !sc.series.contains_key(&format!("{fam}_count"))
                            {
                                pl.otlp_type = format!("dropped: {} without {fam}_count", pl.otlp_type);
                            }
                            let e = out
                                .entry(pl.name.clone())
                                .or_insert_with(|| (pl.otlp_type.clone(), BTreeSet::new(), pl.resource.clone()));
                            e.1.extend(pl.attributes);
                            if pl.otlp_type.starts_with("dropped") {
                                e.0 = pl.otlp_type;
                            }
                        }
                        let mode = if preserve {
                            "OTLP, preserve_names: one metric per Prometheus series name"
                        } else {
                            "OTLP, OTel mapping"
                        };
                        (
                            mode,
                            out.into_iter()
                                .map(|(n, (t, a, r))| {
                                    (
                                        n,
                                        t,
                                        if r.is_empty() {
                                            String::new()
                                        } else {
                                            format!("resource: {}", r.join(", "))
                                        },
                                        a.into_iter().collect(),
                                    )
                                })
                                .collect(),
                        )
                    }
                    ExporterConfig::PrometheusRemoteWrite(_)
                    | ExporterConfig::Debug(_)
                    | ExporterConfig::Prometheus(_) => {
                        let rows = sc
                            .series
                            .iter()
                            .map(|(n, ls)| {
                                let c = sc.store.classify(n);
                                (n.clone(), c.kind.as_str().to_string(), String::new(), ls.iter().cloned().collect())
                            })
                            .collect();
                        ("Prometheus names as scraped", rows)
                    }
                };
                println!("pipeline {pname} → exporter {e} ({mode}) ← {}", sc.source);
                let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(10).min(60);
                for (name, t, extra, attrs) in &rows {
                    println!(
                        "  {name:<w$}  {t:<16} labels: {}{}",
                        labels(attrs),
                        if extra.is_empty() { String::new() } else { format!("  {extra}") }
                    );
                }
                if let ExporterConfig::PrometheusRemoteWrite(rw) = ec
                    && rw.endpoint.contains("/_prometheus/")
                {
                    for (name, _, _, _) in &rows {
                        let c = sc.store.classify(name);
                        if c.kind == MetricType::Counter && !es_counter_suffix(name) {
                            warnings += 1;
                            println!(
                                "  warning: {name} is a counter, but Elasticsearch's remote-write endpoint types series only by a case-sensitive _total/_sum/_count/_bucket suffix: it will be stored as a gauge (rate() and counter-reset handling will not apply). Send it over OTLP, or rename it with metric_relabel_configs."
                            );
                        }
                    }
                }
                println!();
            }
        }
    }
    println!("{warnings} warning{}", if warnings == 1 { "" } else { "s" });
    exit::OK
}
