//! A component's reference to an authenticator extension
//! (`auth: {authenticator: basicauth/x}`), as the Collector writes it.

use serde::Deserialize;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct AuthRef {
    pub authenticator: String,
}
