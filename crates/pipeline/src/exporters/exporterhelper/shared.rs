//! Config blocks every network exporter shares, in the Collector's shape:
//! `retry_on_failure` and `sending_queue`, and the backoff they drive
//! (`tls` and `auth` are primitives: `crate::primitives::{tls, auth}`).

use crate::primitives::Duration;
use serde::Deserialize;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub enabled: bool,
    pub initial_interval: Duration,
    pub max_interval: Duration,
    /// Give up on a batch after this long; 0 = never. Unset: 5 minutes for
    /// an in-memory queue; with `sending_queue.storage`, never (retry until
    /// delivered, as Prometheus and vmagent do: the disk budget decides
    /// what is dropped, oldest first, counted). See [`RetryConfig::for_queue`].
    pub max_elapsed_time: Option<Duration>,
    pub multiplier: f64,
    pub randomization_factor: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            enabled: true,
            initial_interval: Duration::from_millis(50),
            max_interval: Duration::from_secs(30),
            max_elapsed_time: None,
            multiplier: 1.5,
            randomization_factor: 0.5,
        }
    }
}

impl RetryConfig {
    /// The limit after which a batch is given up (zero: never).
    pub fn max_elapsed(&self) -> std::time::Duration {
        self.max_elapsed_time.map_or(std::time::Duration::from_secs(300), |d| d.get())
    }

    /// Resolves an unset `max_elapsed_time` for the queue it serves: never
    /// give up with a persistent queue, 5 minutes in memory.
    pub fn for_queue(mut self, persistent: bool) -> Self {
        if self.max_elapsed_time.is_none() && persistent {
            self.max_elapsed_time = Some(Duration::from_millis(0));
        }
        self
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.enabled && self.initial_interval.get().is_zero() {
            return Err("retry_on_failure.initial_interval must be greater than 0".into());
        }
        if self.initial_interval > self.max_interval {
            return Err("retry_on_failure.initial_interval must not exceed max_interval".into());
        }
        if self.multiplier < 1.0 {
            return Err("retry_on_failure.multiplier must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.randomization_factor) {
            return Err("retry_on_failure.randomization_factor must be between 0 and 1".into());
        }
        Ok(())
    }

    /// The wait before attempt `n` (n = 1 is the first retry), with jitter.
    pub fn backoff(&self, n: u32) -> std::time::Duration {
        let base = self.initial_interval.get().as_secs_f64() * self.multiplier.powi(n.saturating_sub(1) as i32);
        let capped = base.min(self.max_interval.get().as_secs_f64());
        let r = self.randomization_factor;
        let jitter = 1.0 - r + 2.0 * r * rand::random::<f64>();
        std::time::Duration::from_secs_f64((capped * jitter).min(self.max_interval.get().as_secs_f64()))
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    pub enabled: bool,
    /// Parallel senders; series are sharded across them by label hash so one
    /// series' samples always go out in order.
    pub num_consumers: usize,
    /// Batches held in memory, over all consumers (without `storage`).
    pub queue_size: usize,
    /// A `file_storage` extension id: the queue lives on disk, survives
    /// restarts and crashes, and is bounded by the extension's `max_bytes`.
    pub storage: Option<String>,
    /// How long a consumer woken by new data waits for more before it
    /// sends, so one request carries many scrapes; 0 sends at once.
    pub flush_timeout: crate::primitives::Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            enabled: true,
            num_consumers: 5,
            queue_size: 1000,
            storage: None,
            flush_timeout: crate::primitives::Duration::from_millis(200),
        }
    }
}

impl QueueConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.enabled && self.num_consumers == 0 {
            return Err("sending_queue.num_consumers must be at least 1".into());
        }
        if self.enabled && self.queue_size == 0 {
            return Err("sending_queue.queue_size must be at least 1".into());
        }
        Ok(())
    }
}

/// Parses `Retry-After`: seconds or an HTTP date.
pub fn retry_after(v: &str) -> Option<std::time::Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(std::time::Duration::from_secs(s));
    }
    let t = httpdate::parse_http_date(v).ok()?;
    Some(t.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let r = RetryConfig { randomization_factor: 0.0, ..Default::default() };
        assert_eq!(r.backoff(1).as_millis(), 50);
        assert_eq!(r.backoff(2).as_millis(), 75);
        assert_eq!(r.backoff(100), std::time::Duration::from_secs(30));
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after("3"), Some(std::time::Duration::from_secs(3)));
        let future = httpdate::fmt_http_date(std::time::SystemTime::now() + std::time::Duration::from_secs(100));
        let d = retry_after(&future).unwrap();
        assert!(d.as_secs() >= 98 && d.as_secs() <= 100, "{d:?}");
        assert_eq!(retry_after("soon"), None);
    }
}
