//! What drives the `prometheus` receiver: per scrape config, discover
//! targets, turn them into [`Target`]s, and keep exactly one
//! [`ScrapeLoop`] running per live target, stopping loops (which send stale
//! markers) when a target disappears from discovery; at shutdown the loops
//! stop without markers (see [`Stop`]); when a reload replaces the receiver
//! they hand their state over (`handover.rs`) and the new receiver ends the
//! targets it no longer has.

use super::config::{GlobalConfig, PrometheusConfig, ScrapeConfig};
use super::discovery::dns::DnsSd;
use super::discovery::file::FileSd;
use super::discovery::http::HttpSd;
use super::discovery::kubernetes::KubernetesDiscovery;
use super::discovery::static_groups;
use super::handover::{self, Handover};
use super::scrape::{JobSettings, ScrapeAuth, ScrapeLoop, Stop};
use super::target::{Populated, Target, populate};
use crate::consumer::Consumer;
use crate::processors::memory_limiter::Backpressure;
use crate::status::targets::TargetStatus;
use crate::telemetry::Telemetry;
use infertel_model::{Label, Labels};
use infertel_relabel::Relabeler;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct PrometheusReceiver {
    pub id: String,
    pub config: PrometheusConfig,
    /// The memory limiters downstream: while one refuses, scrapes are skipped.
    pub backpressure: Backpressure,
    /// Shared by every receiver of the process, across reloads.
    pub handover: Arc<Handover>,
}

struct Running {
    stop: watch::Sender<Stop>,
    handle: JoinHandle<()>,
}

fn job_settings(
    receiver: &str,
    sc: &ScrapeConfig,
    g: &GlobalConfig,
    status: Arc<crate::status::StatusBoard>,
) -> Result<JobSettings, String> {
    let limits = sc.limits(g);
    let auth = ScrapeAuth::from_parts(
        sc.basic_auth.as_ref(),
        sc.authorization.as_ref(),
        sc.bearer_token.as_deref(),
        sc.bearer_token_file.as_deref(),
    );
    Ok(JobSettings {
        receiver: receiver.to_string(),
        honor_labels: sc.honor_labels,
        honor_timestamps: sc.honor_timestamps,
        sample_limit: limits.sample,
        label_limit: limits.label,
        label_name_length_limit: limits.label_name_length,
        label_value_length_limit: limits.label_value_length,
        body_size_limit: limits.body_size,
        extra_scrape_metrics: false,
        accept: sc.accept(g),
        compression: sc.enable_compression,
        direct_http: sc.proxy_url.as_deref().is_none_or(str::is_empty) && !sc.proxy_from_environment,
        headers: sc.http_headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        fallback_openmetrics: sc.fallback_scrape_protocol.as_deref().is_some_and(|p| p.starts_with("OpenMetrics")),
        metric_relabel: Relabeler::new(&sc.metric_relabel_configs).map_err(|e| e.to_string())?,
        external_labels: g.external_labels.iter().map(|(k, v)| Label::new(k.as_str(), v.as_str())).collect(),
        auth,
        interner: Default::default(),
        forced_error: Default::default(),
        status,
    })
}

impl PrometheusReceiver {
    pub fn new(id: String, config: PrometheusConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(PrometheusReceiver { id, config, backpressure: Backpressure::default(), handover: Arc::default() })
    }

    /// Runs every job until `stop` leaves [`Stop::Running`]; returns once all
    /// loops ended, each as `stop` says: [`Stop::Shutdown`] without markers,
    /// [`Stop::Handover`] handing its state over, [`Stop::TargetGone`] (the
    /// receiver left the configuration) with markers.
    pub async fn run(self, next: Arc<dyn Consumer>, telemetry: Telemetry, stop: watch::Receiver<Stop>) {
        let g = Arc::new(self.config.config.global.clone());
        // Loops of jobs this configuration no longer has: ended now.
        let jobs_now: Vec<String> = self.config.config.scrape_configs.iter().map(|s| s.job_name.clone()).collect();
        let gone = self.handover.unclaimed(&self.id, |job| jobs_now.iter().any(|j| j == job));
        handover::end_unclaimed(gone, next.as_ref(), super::scrape::now_ms()).await;
        let mut jobs = Vec::new();
        let extra = self.config.report_extra_scrape_metrics;
        for sc in self.config.config.scrape_configs {
            let (id, g, next, telemetry, stop) =
                (self.id.clone(), g.clone(), next.clone(), telemetry.clone(), stop.clone());
            let (bp, ho) = (self.backpressure.clone(), self.handover.clone());
            jobs.push(tokio::spawn(async move { run_job(id, sc, g, extra, next, bp, ho, telemetry, stop).await }));
        }
        for j in jobs {
            let _ = j.await;
        }
    }
}

/// How long a job with Kubernetes discovery waits for its first target list
/// before ending the handed-over targets it has not claimed (static and
/// file targets are known at once).
const CLAIM_GRACE: Duration = Duration::from_secs(30);

#[allow(clippy::too_many_arguments)]
async fn run_job(
    receiver: String,
    sc: ScrapeConfig,
    g: Arc<GlobalConfig>,
    extra_scrape_metrics: bool,
    next: Arc<dyn Consumer>,
    backpressure: Backpressure,
    handover: Arc<Handover>,
    telemetry: Telemetry,
    mut stop: watch::Receiver<Stop>,
) {
    let job = match job_settings(&receiver, &sc, &g, telemetry.status().clone()) {
        Ok(j) => Arc::new(JobSettings { extra_scrape_metrics, ..j }),
        Err(e) => {
            tracing::error!(receiver = %receiver, job = %sc.job_name, "cannot start job: {e}");
            return;
        }
    };
    let relabel = match Relabeler::new(&sc.relabel_configs) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(receiver = %receiver, job = %sc.job_name, "relabel_configs: {e}");
            return;
        }
    };
    // Files the client reads (CA, client certificate) may appear after the
    // start (secrets mounted late): until they can be read, each scrape
    // fails with the reason and tries again.
    let (tls, options) = (sc.tls_config.settings(), sc.client_options());
    let client = Arc::new(crate::http::LazyClient::new(format!("job {}", sc.job_name), move || {
        crate::http::build_client_with(&tls, None, &options).map_err(|e| format!("tls_config: {e}"))
    }));
    if let Some(e) = client.error() {
        tracing::error!(receiver = %receiver, job = %sc.job_name, "{e}: each scrape of the job fails until it can be read");
    }
    let target_errors = telemetry.counter(
        "infertel_receiver_target_errors_total",
        "Discovered targets that could not be turned into a scrape target (bad address, bad labels, file_sd read errors).",
        &[("receiver", &receiver), ("job", &sc.job_name)],
    );
    let refresh = sc.file_sd_configs.iter().map(|f| f.refresh_interval.get()).min();
    let mut running: HashMap<(Labels, String), Running> = HashMap::new();
    // What the status page shows of this job.
    let pool = telemetry.status().targets.open(
        &receiver,
        &sc.job_name,
        sc.relabel_configs.clone(),
        sc.metric_relabel_configs.clone(),
    );
    let mut statuses: HashMap<(Labels, String), Arc<TargetStatus>> = HashMap::new();
    // Kubernetes discovery runs in the background and wakes this loop on change.
    let k8s_changed = Arc::new(tokio::sync::Notify::new());
    let discovery_errors = |mechanism: &str| {
        telemetry.counter(
            "infertel_receiver_discovery_errors_total",
            "Service-discovery failures (API unreachable, watch or lookup errors, bad answers, bad credentials); known targets are kept.",
            &[("receiver", &receiver), ("job", &sc.job_name), ("mechanism", mechanism)],
        )
    };
    let k8s_errors = discovery_errors("kubernetes");
    // file_sd: watched files wake this loop (and refresh_interval as a fallback).
    let files_changed = Arc::new(tokio::sync::Notify::new());
    let mut file_sds: Vec<FileSd> = Vec::new();
    for f in &sc.file_sd_configs {
        let (fsd, err) = FileSd::new(f.clone(), files_changed.clone());
        if let Some(e) = err {
            tracing::warn!(receiver = %receiver, job = %sc.job_name, "{e}");
        }
        file_sds.push(fsd);
    }
    // http_sd: fetched when due, in this loop.
    let http_errors = discovery_errors("http");
    let mut http_sds: Vec<HttpSd> = Vec::new();
    for h in &sc.http_sd_configs {
        match HttpSd::new(h.clone()) {
            Ok(x) => http_sds.push(x),
            Err(e) => {
                http_errors.inc();
                tracing::error!(receiver = %receiver, job = %sc.job_name, "http_sd {}: {e}", crate::exporters::probe::redact_url(&h.url));
            }
        }
    }
    // dns_sd: looked up when due, in this loop.
    let dns_errors = discovery_errors("dns");
    let mut dns_sds: Vec<DnsSd> = Vec::new();
    for d in &sc.dns_sd_configs {
        match DnsSd::new(d.clone()) {
            Ok(x) => dns_sds.push(x),
            Err(e) => {
                dns_errors.inc();
                tracing::error!(receiver = %receiver, job = %sc.job_name, "dns_sd {:?}: {e}", d.names);
            }
        }
    }
    // Discovery stops with the job, whatever the reason.
    let (disc_stop_tx, disc_stop) = watch::channel(false);
    let k8s: Vec<KubernetesDiscovery> = sc
        .kubernetes_sd_configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            KubernetesDiscovery::spawn(
                c.clone(),
                i,
                sc.job_name.clone(),
                k8s_changed.clone(),
                k8s_errors.clone(),
                disc_stop.clone(),
            )
        })
        .collect();
    // Targets handed over by the receiver this one replaced and not claimed
    // by a loop of this job are ended once discovery had its chance.
    let claim_by = tokio::time::Instant::now() + if k8s.is_empty() { Duration::ZERO } else { CLAIM_GRACE };
    let mut claimed = false;
    loop {
        let mut groups = static_groups(&sc);
        for d in &k8s {
            groups.extend(d.groups());
        }
        for h in &mut http_sds {
            let (g, err) = h.refresh().await;
            if let Some(e) = err {
                http_errors.inc();
                tracing::warn!(receiver = %receiver, job = %sc.job_name, "{e}");
            }
            groups.extend(g);
        }
        for d in &mut dns_sds {
            let (g, errors) = d.refresh().await;
            for e in errors {
                dns_errors.inc();
                tracing::warn!(receiver = %receiver, job = %sc.job_name, "{e}");
            }
            groups.extend(g);
        }
        for fsd in &mut file_sds {
            let (g, errors) = fsd.refresh();
            for e in errors {
                target_errors.inc();
                tracing::warn!(receiver = %receiver, job = %sc.job_name, "{e}");
            }
            groups.extend(g);
        }
        let mut targets: Vec<Target> = Vec::new();
        let mut dropped: Vec<Labels> = Vec::new();
        for grp in &groups {
            for addr in &grp.targets {
                match populate(addr, grp, &sc, &g, &relabel) {
                    Ok(Populated::Target(t)) => {
                        if !targets.iter().any(|x| x.all_labels == t.all_labels && x.url == t.url) {
                            targets.push(t);
                        }
                    }
                    Ok(Populated::Dropped(d)) => dropped.push(d),
                    Err(e) => {
                        target_errors.inc();
                        tracing::warn!(receiver = %receiver, job = %sc.job_name, source = %grp.source, "{e}");
                    }
                }
            }
        }
        // Over target_limit every target of the job fails its scrapes (up 0,
        // error "target_limit exceeded"), as in Prometheus; they recover
        // once discovery is back under the limit.
        let target_limit = sc.limits(&g).target;
        let over = target_limit > 0 && targets.len() as u64 > target_limit;
        {
            let mut forced = job.forced_error.write().unwrap_or_else(|p| p.into_inner());
            if over && forced.is_none() {
                tracing::error!(
                    receiver = %receiver, job = %sc.job_name,
                    "target_limit exceeded: {} targets discovered, limit {}: every target of the job fails until the job is back under it", targets.len(), target_limit
                );
                target_errors.add(targets.len() as u64 - target_limit);
            }
            *forced =
                over.then(|| format!("target_limit exceeded ({} targets, limit {})", targets.len(), target_limit));
        }
        // Stop loops whose target went away, start loops for new targets.
        let keys: Vec<(Labels, String)> = targets.iter().map(|t| (t.all_labels.clone(), t.url.clone())).collect();
        let gone: Vec<(Labels, String)> = running.keys().filter(|k| !keys.contains(k)).cloned().collect();
        for k in gone {
            statuses.remove(&k);
            if let Some(r) = running.remove(&k) {
                let _ = r.stop.send(Stop::TargetGone);
                let _ = r.handle.await;
            }
        }
        pool.set_targets(
            targets
                .iter()
                .zip(&keys)
                .map(|(t, k)| statuses.entry(k.clone()).or_insert_with(|| TargetStatus::new(t)).clone())
                .collect(),
            dropped,
        );
        for (t, k) in targets.into_iter().zip(keys) {
            if running.contains_key(&k) {
                continue;
            }
            let status = statuses.get(&k).cloned().unwrap_or_else(|| TargetStatus::new(&t));
            tracing::info!(receiver = %receiver, job = %t.job(), instance = %t.instance(), url = %t.url, "scraping target every {:?}", t.interval);
            let (tx, rx) = watch::channel(Stop::Running);
            let resume = handover.take(&ScrapeLoop::key(&receiver, &t));
            let l = ScrapeLoop {
                resume,
                target: t,
                job: job.clone(),
                client: client.clone(),
                next: next.clone(),
                backpressure: backpressure.clone(),
                telemetry: telemetry.clone(),
                handover: handover.clone(),
                status,
                report_labels: Vec::new(),
            };
            running.insert(k, Running { stop: tx, handle: tokio::spawn(l.run(rx)) });
        }
        if !claimed && tokio::time::Instant::now() >= claim_by {
            claimed = true;
            let gone = handover.unclaimed(&receiver, |job| job != sc.job_name);
            if !gone.is_empty() {
                tracing::info!(receiver = %receiver, job = %sc.job_name, "reload: {} target(s) no longer configured: their series end (staleness markers)", gone.len());
            }
            super::handover::end_unclaimed(gone, next.as_ref(), super::scrape::now_ms()).await;
        }
        let mut wait = refresh.unwrap_or(Duration::from_secs(u32::MAX as u64));
        for due in http_sds.iter().map(|h| h.next_due).chain(dns_sds.iter().map(|d| d.next_due)) {
            wait = wait.min(due.saturating_duration_since(tokio::time::Instant::now()));
        }
        if !claimed {
            wait = wait.min(claim_by.saturating_duration_since(tokio::time::Instant::now()));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = k8s_changed.notified() => {
                // A rollout changes many objects at once: take them together.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ = files_changed.notified() => {
                // Editors write a file in several steps: read it once they are done.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r = stop.changed() => if r.is_err() { break },
        }
        if *stop.borrow() != Stop::Running {
            break;
        }
    }
    // The loops end as the receiver does: no markers at shutdown, state
    // handed over at a reload, markers when the receiver was removed.
    let how = match *stop.borrow() {
        Stop::Running => Stop::Shutdown,
        s => s,
    };
    for (_, r) in running.drain() {
        let _ = r.stop.send(how);
        let _ = r.handle.await;
    }
    let _ = disc_stop_tx.send(true);
    for d in k8s {
        d.join().await;
    }
    telemetry.status().targets.close(&pool);
}
