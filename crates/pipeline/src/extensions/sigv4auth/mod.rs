//! Extension `sigv4auth`, as contrib's: signs each remote-write request with
//! AWS Signature Version 4 (`aws-sigv4`), for Amazon Managed Service for
//! Prometheus. `region` (required), `service` (default `aps`),
//! `assume_role` (`arn`, `sts_region`, `session_name`).
//!
//! Credentials come as the AWS SDKs find them (`credentials.rs`): the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`), a web-identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`
//! with `AWS_ROLE_ARN`, as EKS' IRSA sets them), then the shared credentials
//! file (`AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`, profile
//! `AWS_PROFILE` or `default`); with `assume_role.arn`, those credentials
//! assume the role. STS is called at `AWS_ENDPOINT_URL_STS` (or
//! `AWS_ENDPOINT_URL`) when set, as the SDKs do, else the region's endpoint.

pub mod credentials;

use serde::Deserialize;
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Debug, Deserialize, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct AssumeRole {
    #[serde(default)]
    pub arn: String,
    #[serde(default)]
    pub sts_region: String,
    #[serde(default)]
    pub session_name: String,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SigV4Config {
    #[serde(default)]
    pub region: String,
    #[serde(default = "aps")]
    pub service: String,
    #[serde(default)]
    pub assume_role: Option<AssumeRole>,
    /// The credentials in use, shared by the exporters that name this
    /// extension (not configuration).
    #[serde(skip)]
    pub cache: Arc<credentials::Cache>,
}

impl std::fmt::Debug for SigV4Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Config")
            .field("region", &self.region)
            .field("service", &self.service)
            .field("assume_role", &self.assume_role)
            .finish()
    }
}

impl PartialEq for SigV4Config {
    fn eq(&self, o: &Self) -> bool {
        self.region == o.region && self.service == o.service && self.assume_role == o.assume_role
    }
}

fn aps() -> String {
    "aps".into()
}

impl SigV4Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.region.is_empty() {
            return Err(
                "sigv4auth: region is required (the Amazon Managed Prometheus workspace's region, e.g. us-east-1)"
                    .into(),
            );
        }
        if self.service.is_empty() {
            return Err("sigv4auth: service must not be empty (aps for Amazon Managed Prometheus)".into());
        }
        if let Some(a) = &self.assume_role
            && !a.arn.is_empty()
            && !a.arn.starts_with("arn:")
        {
            return Err(format!(
                "sigv4auth: assume_role.arn {:?} is not an ARN (arn:aws:iam::ACCOUNT:role/NAME)",
                a.arn
            ));
        }
        Ok(())
    }

    /// The headers that sign a request (`Authorization`, `X-Amz-Date`, and
    /// `X-Amz-Security-Token` for temporary credentials).
    pub async fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        let creds = self.cache.get(self).await?;
        sign_with(&creds, &self.region, &self.service, method, url, headers, body, SystemTime::now())
    }
}

/// Signs with `creds` at `time`: what [`SigV4Config::sign`] does once the
/// credentials are known (the AWS test suite's vectors check this).
#[allow(clippy::too_many_arguments)]
pub fn sign_with(
    creds: &credentials::Credentials,
    region: &str,
    service: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(String, String)>, String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity: aws_smithy_runtime_api::client::identity::Identity = aws_credential_types::Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.clone(),
        creds.session_token.clone(),
        None,
        "infertel-sigv4auth",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("sigv4auth: {e}"))?
        .into();
    let request = SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body))
        .map_err(|e| format!("sigv4auth: {e}"))?;
    let (instructions, _) = sign(request, &params).map_err(|e| format!("sigv4auth: {e}"))?.into_parts();
    Ok(instructions.headers().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

#[cfg(test)]
mod tests;
