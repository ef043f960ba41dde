//! The config primitives every component's config is made of: durations
//! and sizes as users write them (`duration.rs`), component ids
//! (`id.rs`), TLS blocks (`tls.rs`), authenticator references (`auth.rs`), the dispatch each section uses to build a component's config
//! from its type (`ComponentKind`), and listen addresses. A leaf: it knows
//! no component and no section, so component configs depend on it and the
//! top-level config (`config/mod.rs`), which aggregates the sections, sits
//! above them all.

pub mod auth;
pub mod duration;
pub mod id;
pub mod tls;

pub use auth::AuthRef;
pub use duration::{ByteSize, Duration};
pub use id::ComponentId;
pub use tls::{ExporterTls, ServerTls, TlsSettings};

use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;

/// Implemented by each section's config enum (`ReceiverConfig`, ...): builds
/// the typed config for one component type.
pub trait ComponentKind: Sized {
    /// "receiver", "processor", ...
    const SECTION: &'static str;
    /// The component types this build knows, for error messages.
    const KNOWN: &'static [&'static str];
    fn deserialize_kind<'de, D: Deserializer<'de>>(kind: &str, d: D) -> Result<Self, D::Error>;
}

/// Deserializes `null` (e.g. `batch:` with nothing after it) as the default.
pub fn or_default<'de, T, D>(d: D) -> Result<T, D::Error>
where
    T: Deserialize<'de> + Default,
    D: Deserializer<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A server's `host:port` (`localhost` read as 127.0.0.1, as the agent's
/// servers bind loopback for it; `:port`, as Go writes every interface,
/// read as 0.0.0.0); the error reads `"VALUE": why (write
/// host:port)` for the caller to put its key in front.
pub fn listen_addr(endpoint: &str) -> Result<SocketAddr, String> {
    // Go's `:port` (every interface), as Collector configs write it.
    let every = endpoint.starts_with(':').then(|| format!("0.0.0.0{endpoint}"));
    every
        .as_deref()
        .unwrap_or(endpoint)
        .replace("localhost:", "127.0.0.1:")
        .parse::<SocketAddr>()
        .map_err(|e| format!("{endpoint:?}: {e} (write host:port)"))
}
