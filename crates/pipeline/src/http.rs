//! HTTP clients for scrapes and exports: rustls with the ring provider (no
//! aws-lc, no OpenSSL), system roots or a configured CA, client
//! certificates, a server-name override and an explicit insecure mode.

pub use crate::primitives::tls::{ServerTls, TlsSettings};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

/// The User-Agent every request carries.
pub fn user_agent() -> String {
    format!("infertel/{}", env!("CARGO_PKG_VERSION"))
}

/// Installs the ring crypto provider once per process; reqwest panics
/// without one when built with `rustls-no-provider`.
pub fn ensure_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client built from files that may not be there yet (a CA or client
/// certificate mounted after the start): built when first needed, and again
/// at each use until it can be, as Prometheus reads its files when used.
/// Until then each use gets the reason; the files are read once they build.
pub struct LazyClient {
    build: Box<dyn Fn() -> Result<reqwest::Client, String> + Send + Sync>,
    slot: std::sync::RwLock<Result<reqwest::Client, String>>,
    what: String,
}

impl LazyClient {
    /// `what` names the component in the log line of the first success
    /// after a failure.
    pub fn new(
        what: String,
        build: impl Fn() -> Result<reqwest::Client, String> + Send + Sync + 'static,
    ) -> LazyClient {
        let first = build();
        LazyClient { build: Box::new(build), slot: std::sync::RwLock::new(first), what }
    }

    /// The client (a cheap handle), or why there is none yet.
    pub fn get(&self) -> Result<reqwest::Client, String> {
        if let Ok(c) = &*self.slot.read().unwrap_or_else(|p| p.into_inner()) {
            return Ok(c.clone());
        }
        let built = (self.build)();
        if built.is_ok() {
            tracing::info!(component = %self.what, "the TLS files can be read now: the client is built");
        }
        let mut slot = self.slot.write().unwrap_or_else(|p| p.into_inner());
        *slot = built;
        slot.clone()
    }

    /// Why the client cannot be built now, if it cannot.
    pub fn error(&self) -> Option<String> {
        self.slot.read().unwrap_or_else(|p| p.into_inner()).as_ref().err().cloned()
    }
}

/// The protocol versions `min`..=`max` allow, of the two rustls speaks.
fn protocol_versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let rank = |v: &str, key: &str| match v {
        "TLS10" => Ok(10),
        "TLS11" => Ok(11),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        other => Err(format!("{key}: {other:?} is not a TLS version (TLS10, TLS11, TLS12 or TLS13)")),
    };
    let lo = min.map(|v| rank(v, "min_version")).transpose()?.unwrap_or(12);
    let hi = max.map(|v| rank(v, "max_version")).transpose()?.unwrap_or(13);
    let mut out = Vec::new();
    if lo <= 12 && hi >= 12 {
        out.push(&rustls::version::TLS12);
    }
    if lo <= 13 && hi >= 13 {
        out.push(&rustls::version::TLS13);
    }
    if out.is_empty() {
        return Err(format!(
            "min_version {} / max_version {}: no protocol left (infertel speaks TLS 1.2 and 1.3)",
            min.unwrap_or("unset"),
            max.unwrap_or("unset")
        ));
    }
    Ok(out)
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut &data[..]).collect();
    let certs = certs.map_err(|e| format!("{what} {}: not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{what} {}: no PEM certificate found", path.display()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read key_file {}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut &data[..])
        .map_err(|e| format!("key_file {}: not valid PEM: {e}", path.display()))?
        .ok_or_else(|| format!("key_file {}: no private key found", path.display()))
}

impl TlsSettings {
    /// Checks the files exist and parse, without building a client.
    pub fn validate(&self) -> Result<(), String> {
        self.client_config().map(|_| ())
    }

    /// The files named that are not there now, as (key, path).
    pub fn missing_files(&self) -> Vec<(&'static str, PathBuf)> {
        [("ca_file", &self.ca_file), ("cert_file", &self.cert_file), ("key_file", &self.key_file)]
            .into_iter()
            .filter_map(|(k, p)| p.as_ref().filter(|p| !p.exists()).map(|p| (k, p.clone())))
            .collect()
    }

    /// What a config can be refused for: the files that are there must
    /// parse; a file not there yet is read when used, as Prometheus reads
    /// it (a pod's secrets are mounted where the config is not validated),
    /// and only the keys are checked now.
    pub fn validate_present(&self) -> Result<(), String> {
        if self.missing_files().is_empty() {
            return self.validate();
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("cert_file and key_file go together".into());
        }
        protocol_versions(self.min_version.as_deref(), self.max_version.as_deref()).map(|_| ())
    }

    fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        ensure_crypto_provider();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = protocol_versions(self.min_version.as_deref(), self.max_version.as_deref())?;
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| format!("TLS setup: {e}"))?;
        let verifier: Arc<dyn ServerCertVerifier> = if self.insecure_skip_verify {
            Arc::new(NoVerify(provider.clone()))
        } else {
            let mut roots = RootCertStore::empty();
            match &self.ca_file {
                Some(ca) => {
                    for c in read_certs(ca, "ca_file")? {
                        roots.add(c).map_err(|e| format!("ca_file {}: {e}", ca.display()))?;
                    }
                }
                None => {
                    let native = rustls_native_certs::load_native_certs();
                    for c in native.certs {
                        let _ = roots.add(c);
                    }
                    if roots.is_empty() {
                        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                    }
                }
            }
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| format!("TLS roots: {e}"))?;
            match &self.server_name {
                Some(n) if !n.is_empty() => {
                    let name = ServerName::try_from(n.clone()).map_err(|e| format!("server_name {n:?}: {e}"))?;
                    Arc::new(OverrideName { inner, name })
                }
                _ => inner,
            }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        let mut cfg = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => builder
                .with_client_auth_cert(read_certs(c, "cert_file")?, read_key(k)?)
                .map_err(|e| format!("client certificate {}: {e}", c.display()))?,
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("cert_file and key_file must be set together".into()),
        };
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

/// Builds a client; `timeout` bounds each whole request.
pub fn build_client(tls: &TlsSettings, timeout: Option<Duration>) -> Result<reqwest::Client, String> {
    build_client_with(tls, timeout, &ClientOptions::default())
}

/// Prometheus' HTTP client options (`proxy_url`, `follow_redirects`,
/// `enable_http2`), where a component has them.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub proxy_url: Option<String>,
    pub follow_redirects: bool,
    pub enable_http2: bool,
    /// Honour HTTP_PROXY/HTTPS_PROXY/NO_PROXY (exporters, as the
    /// Collector's Go client does); scrapes only with
    /// `proxy_from_environment`, as Prometheus.
    pub env_proxy: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { proxy_url: None, follow_redirects: true, enable_http2: true, env_proxy: true }
    }
}

pub fn build_client_with(
    tls: &TlsSettings,
    timeout: Option<Duration>,
    opts: &ClientOptions,
) -> Result<reqwest::Client, String> {
    ensure_crypto_provider();
    let mut b = reqwest::Client::builder()
        .user_agent(user_agent())
        .tls_backend_preconfigured(tls.client_config()?)
        .pool_idle_timeout(Duration::from_secs(90));
    if let Some(t) = timeout
        && !t.is_zero()
    {
        b = b.timeout(t);
    }
    if let Some(p) = opts.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        b = b.proxy(reqwest::Proxy::all(p).map_err(|e| format!("proxy_url {p:?}: {e}"))?);
    } else if !opts.env_proxy {
        b = b.no_proxy();
    }
    if !opts.follow_redirects {
        b = b.redirect(reqwest::redirect::Policy::none());
    }
    if !opts.enable_http2 {
        b = b.http1_only();
    }
    b.build().map_err(|e| format!("HTTP client: {e}"))
}

/// Verifies the chain as usual but against a configured name instead of
/// the URL's host (`server_name` / `server_name_override`).
#[derive(Debug)]
struct OverrideName {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for OverrideName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, &self.name, ocsp, now)
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `insecure_skip_verify: true`: accepts any certificate, still checks the
/// handshake signatures so the session is at least consistent.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Reads a secret file (password_file, credentials_file, token filename),
/// trimming the trailing newline editors and `kubectl create secret` add.
/// A TLS server configuration from a PEM certificate chain and key (the
/// agent's own servers: the status page).
pub fn server_config(cert_file: &Path, key_file: &Path) -> Result<rustls::ServerConfig, String> {
    ensure_crypto_provider();
    let certs = read_certs(cert_file, "cert_file")?;
    let key = read_key(key_file)?;
    let mut c = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file/key_file: {e}"))?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(c)
}

pub fn read_secret_file(path: &Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

/// The chain of causes of a reqwest error in one line ("error sending
/// request: connection refused"), since its Display alone hides the cause.
pub fn describe_error(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() { "timeout".to_string() } else { e.to_string() };
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        src = c.source();
    }
    s
}

/// Serves `app` over TLS on `l` until the task is aborted (the agent's own
/// servers: the status page, the prometheus exporter); `what` names the
/// server in logs.
pub async fn serve_tls(
    what: &'static str,
    l: tokio::net::TcpListener,
    app: axum::Router,
    cfg: std::sync::Arc<rustls::ServerConfig>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    loop {
        let (tcp, peer) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("{what}: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!("{what}: TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    }
}
