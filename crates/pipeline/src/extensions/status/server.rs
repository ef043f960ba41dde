//! Serving the status page: the listener (plain or TLS), authentication
//! through a `basicauth`/`bearertokenauth` extension, the routes, the
//! security headers (nothing loads from anywhere but the page itself),
//! and the sampler that keeps the counters the overview's rates need.

use super::StatusConfig;
use crate::extensions::ExtensionConfig;
use crate::extensions::health_check::Readiness;
use crate::status::StatusBoard;
use crate::telemetry::Telemetry;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// What the handlers read.
pub struct Ctx {
    pub board: Arc<StatusBoard>,
    pub telemetry: Telemetry,
    pub readiness: Arc<Readiness>,
    /// Served as `zpages` (the Collector's name).
    pub zpages: bool,
    pub auth: Option<ExtensionConfig>,
}

/// How often the overview's counters are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

pub type Params = Query<HashMap<String, String>>;

/// The status extension as configured: its address, TLS and authenticator.
pub struct StatusServer {
    pub cfg: StatusConfig,
    pub zpages: bool,
    pub auth: Option<ExtensionConfig>,
}

impl StatusServer {
    /// Every `status`/`zpages` extension listed in `service.extensions`.
    pub fn from_config(
        listed: &[String],
        extensions: &BTreeMap<String, ExtensionConfig>,
    ) -> Result<Vec<StatusServer>, String> {
        let mut out: Vec<StatusServer> = Vec::new();
        for name in listed {
            if let Some(ExtensionConfig::Status(c, zpages)) = extensions.get(name) {
                let auth = match &c.auth {
                    None => None,
                    Some(a) => {
                        let e = extensions.get(&a.authenticator).ok_or_else(|| {
                            format!("extension {name}: auth.authenticator {:?} is not defined", a.authenticator)
                        })?;
                        if !listed.contains(&a.authenticator) {
                            return Err(format!(
                                "extension {name}: auth.authenticator {:?} must also be listed in service.extensions",
                                a.authenticator
                            ));
                        }
                        if !e.is_authenticator() {
                            return Err(format!(
                                "extension {name}: {:?} is not a basicauth or bearertokenauth extension",
                                a.authenticator
                            ));
                        }
                        if let ExtensionConfig::BasicAuth(b) = e
                            && b.htpasswd.is_none()
                        {
                            return Err(format!(
                                "extension {name}: {} has no htpasswd: a server needs the users it admits (htpasswd.inline or htpasswd.file)",
                                a.authenticator
                            ));
                        }
                        Some(e.clone())
                    }
                };
                let server = StatusServer { cfg: c.clone(), zpages: *zpages, auth };
                let addr = server.cfg.socket_addr()?;
                if let Some(other) = out.iter().find(|o| o.cfg.socket_addr().is_ok_and(|a| a == addr && a.port() != 0))
                {
                    return Err(format!(
                        "extension {name}: endpoint {addr} is also the endpoint of another status/zpages extension ({}): give each its own",
                        other.cfg.endpoint
                    ));
                }
                out.push(server);
            }
        }
        Ok(out)
    }

    /// A key that changes when the server must be rebound.
    pub fn key(&self) -> String {
        format!("{:?}{}{:?}", self.cfg, self.zpages, self.auth)
    }

    pub async fn bind(&self) -> Result<tokio::net::TcpListener, String> {
        let a = self.cfg.socket_addr()?;
        tokio::net::TcpListener::bind(a)
            .await
            .map_err(|e| format!("extensions.status.endpoint {a}: cannot listen: {e}"))
    }

    /// Serves on `l` until the task is aborted (plus the sampler).
    pub fn serve(&self, l: tokio::net::TcpListener, telemetry: Telemetry, readiness: Arc<Readiness>) -> JoinHandle<()> {
        let tls = match &self.cfg.tls {
            None => None,
            Some(t) => match crate::http::server_config(&t.cert_file, &t.key_file) {
                Ok(c) => Some(Arc::new(c)),
                Err(e) => {
                    tracing::error!("status: tls: {e}: the status page is not served");
                    return tokio::spawn(async {});
                }
            },
        };
        let ctx = Arc::new(Ctx {
            board: telemetry.status().clone(),
            telemetry,
            readiness,
            zpages: self.zpages,
            auth: self.auth.clone(),
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(
            "status: the status page at {scheme}://{}/",
            l.local_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        let app = router(ctx.clone());
        // One task: aborting it (a reload, the shutdown) stops the sampler too.
        tokio::spawn(async move {
            let serving = async move {
                match tls {
                    None => {
                        if let Err(e) = axum::serve(l, app).await {
                            tracing::error!("status page stopped: {e}");
                        }
                    }
                    Some(cfg) => crate::http::serve_tls("status", l, app, cfg).await,
                }
            };
            tokio::select! {
                _ = serving => {}
                _ = sample(ctx) => {}
            }
        })
    }
}

/// Samples the counters the overview turns into rates.
async fn sample(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tick.tick().await;
        ctx.board.history.sample_counters(counters(&ctx.telemetry));
    }
}

/// The totals the overview shows as rates, by `kind/component[/reason]`.
pub fn counters(t: &Telemetry) -> BTreeMap<String, f64> {
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    let mut add = |family: &str, kind: &str, by: &str, reason: bool| {
        t.for_each(family, |labels, v| {
            let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, x)| x.as_str()).unwrap_or("");
            let mut key = format!("{kind}/{}", get(by));
            if reason {
                key.push('/');
                key.push_str(get("reason"));
            }
            *m.entry(key).or_default() += v;
        });
    };
    add("infertel_receiver_scraped_samples_total", "in", "receiver", false);
    add("infertel_receiver_dropped_samples_total", "rdrop", "receiver", true);
    add("infertel_exporter_sent_samples_total", "out", "exporter", false);
    add("infertel_exporter_dropped_samples_total", "drop", "exporter", true);
    m
}

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn json(v: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// Every response: no asset from elsewhere, no framing, no caching.
async fn headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

async fn authenticate(State(ctx): State<Arc<Ctx>>, req: Request, next: Next) -> Response {
    let Some(a) = &ctx.auth else { return next.run(req).await };
    let name = match a {
        ExtensionConfig::BearerTokenAuth(c) => c.header.as_str(),
        _ => "authorization",
    };
    let given = req.headers().get(name).and_then(|v| v.to_str().ok());
    match a.admits(given) {
        Ok(true) => next.run(req).await,
        Ok(false) => {
            let challenge = match a {
                ExtensionConfig::BasicAuth(_) => "Basic realm=\"infertel status\"",
                _ => "Bearer",
            };
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)], "unauthorized\n").into_response()
        }
        Err(e) => {
            tracing::error!("status: authenticator: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "the authenticator cannot check credentials (see the agent's log)\n")
                .into_response()
        }
    }
}

/// The routes.
pub fn router(ctx: Arc<Ctx>) -> axum::Router {
    use super::{api, pages};
    macro_rules! page {
        ($f:path) => {
            get(|State(c): State<Arc<Ctx>>, Query(q): Params| async move { html($f(&c, &q)) })
        };
    }
    macro_rules! api {
        ($f:path) => {
            get(|State(c): State<Arc<Ctx>>, Query(q): Params| async move { json($f(&c, &q)) })
        };
    }
    axum::Router::new()
        .route("/", page!(pages::overview))
        .route("/targets", page!(pages::targets))
        .route("/service-discovery", page!(pages::service_discovery))
        .route("/relabel", page!(pages::relabel))
        .route("/series", page!(pages::series))
        .route("/exporters", page!(pages::exporters))
        .route("/inference", page!(pages::inference))
        .route("/config", page!(pages::config))
        .route("/debug/servicez", page!(pages::overview))
        .route("/debug/pipelinez", page!(pages::overview))
        .route("/debug/extensionz", page!(pages::extensionz))
        .route("/api/v1/targets", api!(api::targets))
        .route("/api/v1/series_trace", api!(api::series_trace))
        .route("/api/v1/exporters", api!(api::exporters))
        .route("/api/v1/inference", api!(api::inference))
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), authenticate))
        .layer(axum::middleware::from_fn(headers))
        .with_state(ctx)
}
