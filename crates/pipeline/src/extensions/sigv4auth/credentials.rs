//! Where `sigv4auth`'s credentials come from, in the order the AWS SDKs'
//! default chain looks: the environment, a web-identity token (exchanged at
//! STS with `AssumeRoleWithWebIdentity`), the shared credentials file; then,
//! with `assume_role.arn`, `AssumeRole` with those. Temporary credentials
//! are kept until five minutes before they expire; static ones are read
//! again every minute, so a rotated file or secret is picked up.

use super::SigV4Config;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// When temporary credentials expire.
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, secret redacted)", self.access_key_id)
    }
}

#[derive(Default)]
pub struct Cache(tokio::sync::Mutex<Option<(Credentials, Instant)>>);

/// How the environment is read (tests pass their own).
pub type Env<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

impl Cache {
    pub async fn get(&self, cfg: &SigV4Config) -> Result<Credentials, String> {
        let mut slot = self.0.lock().await;
        if let Some((c, at)) = slot.as_ref() {
            let fresh = match c.expires {
                Some(e) => SystemTime::now() + Duration::from_secs(300) < e,
                None => at.elapsed() < Duration::from_secs(60),
            };
            if fresh {
                return Ok(c.clone());
            }
        }
        let c = resolve(cfg, &|k| std::env::var(k).ok().filter(|v| !v.is_empty())).await?;
        *slot = Some((c.clone(), Instant::now()));
        Ok(c)
    }
}

/// The chain, then `assume_role`.
pub async fn resolve(cfg: &SigV4Config, env: Env<'_>) -> Result<Credentials, String> {
    let base = base(cfg, env).await?;
    match cfg.assume_role.as_ref().filter(|a| !a.arn.is_empty()) {
        None => Ok(base),
        Some(a) => {
            let region = if a.sts_region.is_empty() { cfg.region.as_str() } else { a.sts_region.as_str() };
            let session = if a.session_name.is_empty() { "infertel" } else { a.session_name.as_str() };
            assume_role(&base, &a.arn, session, region, env).await
        }
    }
}

async fn base(cfg: &SigV4Config, env: Env<'_>) -> Result<Credentials, String> {
    if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Ok(Credentials {
            access_key_id: id,
            secret_access_key: secret,
            session_token: env("AWS_SESSION_TOKEN"),
            expires: None,
        });
    }
    if let (Some(file), Some(role)) = (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
        let token = std::fs::read_to_string(&file)
            .map_err(|e| format!("sigv4auth: AWS_WEB_IDENTITY_TOKEN_FILE {file}: {e}"))?;
        let session = env("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "infertel".into());
        let region = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")).unwrap_or_else(|| cfg.region.clone());
        return web_identity(token.trim(), &role, &session, &region, env).await;
    }
    let path = match env("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => std::path::PathBuf::from(p),
        None => match env("HOME") {
            Some(h) => std::path::Path::new(&h).join(".aws/credentials"),
            None => return Err(no_credentials()),
        },
    };
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
    match std::fs::read_to_string(&path) {
        Ok(text) => profile_credentials(&text, &profile).ok_or_else(|| {
            format!("sigv4auth: {}: no aws_access_key_id/aws_secret_access_key in profile [{profile}]", path.display())
        }),
        Err(_) => Err(no_credentials()),
    }
}

fn no_credentials() -> String {
    "sigv4auth: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (EKS IRSA), or a shared credentials file (~/.aws/credentials, AWS_SHARED_CREDENTIALS_FILE)".into()
}

/// A profile of an INI credentials file.
pub fn profile_credentials(text: &str, profile: &str) -> Option<Credentials> {
    let mut current = String::new();
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('#') || l.starts_with(';') || l.is_empty() {
            continue;
        }
        if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            current = name.trim().trim_start_matches("profile ").trim().to_string();
            continue;
        }
        if current != profile {
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some(Credentials { access_key_id: id?, secret_access_key: secret?, session_token: token, expires: None })
}

fn sts_endpoint(region: &str, env: Env<'_>) -> String {
    env("AWS_ENDPOINT_URL_STS")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"))
        .trim_end_matches('/')
        .to_string()
}

fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
}

fn client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| format!("sigv4auth: {e}"))
}

async fn web_identity(
    token: &str,
    role: &str,
    session: &str,
    region: &str,
    env: Env<'_>,
) -> Result<Credentials, String> {
    let body = form(&[
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role),
        ("RoleSessionName", session),
        ("WebIdentityToken", token),
    ]);
    let url = format!("{}/", sts_endpoint(region, env));
    let resp = client()?
        .post(&url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("sigv4auth: STS {url}: {e}"))?;
    read_sts(resp, "AssumeRoleWithWebIdentity").await
}

async fn assume_role(
    base: &Credentials,
    arn: &str,
    session: &str,
    region: &str,
    env: Env<'_>,
) -> Result<Credentials, String> {
    let body =
        form(&[("Action", "AssumeRole"), ("Version", "2011-06-15"), ("RoleArn", arn), ("RoleSessionName", session)]);
    let url = format!("{}/", sts_endpoint(region, env));
    let ct = "application/x-www-form-urlencoded";
    let signed = super::sign_with(
        base,
        region,
        "sts",
        "POST",
        &url,
        &[("content-type", ct)],
        body.as_bytes(),
        SystemTime::now(),
    )?;
    let mut req = client()?.post(&url).header("Content-Type", ct);
    for (k, v) in signed {
        req = req.header(k, v);
    }
    let resp = req.body(body).send().await.map_err(|e| format!("sigv4auth: STS {url}: {e}"))?;
    read_sts(resp, "AssumeRole").await
}

fn tag<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim())
}

async fn read_sts(resp: reqwest::Response, action: &str) -> Result<Credentials, String> {
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("sigv4auth: STS {action}: {e}"))?;
    if !status.is_success() {
        let code = tag(&text, "Code").unwrap_or("");
        let msg = tag(&text, "Message").unwrap_or(text.as_str());
        return Err(format!("sigv4auth: STS {action}: HTTP {status} {code}: {msg}"));
    }
    let get = |n: &str| {
        tag(&text, n).map(str::to_string).ok_or_else(|| format!("sigv4auth: STS {action}: no {n} in the answer"))
    };
    Ok(Credentials {
        access_key_id: get("AccessKeyId")?,
        secret_access_key: get("SecretAccessKey")?,
        session_token: Some(get("SessionToken")?),
        expires: tag(&text, "Expiration").and_then(parse_time),
    })
}

/// `2026-12-02T17:00:00Z` (fractional seconds allowed).
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs).ok().map(|s| UNIX_EPOCH + Duration::from_secs(s))
}
