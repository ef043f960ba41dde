//! What every network exporter shares, as the Collector's `exporterhelper`:
//! the sending queue and its consumers (`queue.rs`), the on-disk queue
//! (`persistent.rs`), the startup probes and their verdicts (`probe.rs`),
//! and the shared config pieces: retries, queue settings, TLS, auth
//! references (`shared.rs`). An exporter is its own folder beside this one
//! (`config`, `request_builder`, `service`, `sink`) and uses these.

pub mod persistent;
pub mod probe;
pub mod queue;
pub mod shared;
