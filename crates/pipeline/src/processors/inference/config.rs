//! Config of processor `inference`.

use crate::primitives::Duration;
use infertel_inference as inf;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceConfig {
    /// Rates, ratios and quantiles are taken over this window (≥ 2 samples).
    pub window: Duration,
    /// Each target's derived series are evaluated at most once per interval
    /// (on its first scrape in each new multiple of it); default a quarter
    /// of `window`; `0s` evaluates on every scrape.
    pub evaluation_interval: Option<Duration>,
    /// `node` (default), `pod`, or `{map: {<vllm instance>: [<GPU UUID>, ...]}}`.
    pub join: JoinConfig,
    pub objectives: ObjectivesConfig,
    pub scale: ScaleConfig,
    pub memory_bound: MemoryBoundConfig,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        InferenceConfig {
            window: Duration::from_millis(60_000),
            evaluation_interval: None,
            join: JoinConfig::Mode("node".into()),
            objectives: ObjectivesConfig::default(),
            scale: ScaleConfig::default(),
            memory_bound: MemoryBoundConfig::default(),
        }
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum JoinConfig {
    Mode(String),
    Map { map: BTreeMap<String, Vec<String>> },
}

impl Default for JoinConfig {
    fn default() -> Self {
        JoinConfig::Mode("node".into())
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ObjectivesConfig {
    pub ttft_p95: Duration,
    pub itl_p95: Duration,
    pub queue_time_max: Duration,
    pub error_abort_ratio: f64,
}

impl Default for ObjectivesConfig {
    fn default() -> Self {
        ObjectivesConfig {
            ttft_p95: Duration::from_millis(300),
            itl_p95: Duration::from_millis(50),
            queue_time_max: Duration::from_millis(1),
            error_abort_ratio: 0.005,
        }
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ScaleConfig {
    pub kv_cache_usage: f64,
    pub waiting_sustained: Duration,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        ScaleConfig { kv_cache_usage: 0.6, waiting_sustained: Duration::from_millis(120_000) }
    }
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryBoundConfig {
    pub dram_active_min: f64,
    pub tensor_active_max: f64,
}

impl Default for MemoryBoundConfig {
    fn default() -> Self {
        MemoryBoundConfig { dram_active_min: 0.5, tensor_active_max: 0.3 }
    }
}

impl InferenceConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.window.get().as_millis() < 1000 {
            return Err("window must be at least 1s (two scrapes must fit in it)".into());
        }
        if let Some(e) = self.evaluation_interval
            && e.get() > self.window.get()
        {
            return Err("evaluation_interval must not exceed window (derived series would skip samples)".into());
        }
        if let JoinConfig::Mode(m) = &self.join
            && m != "node"
            && m != "pod"
        {
            return Err(format!("join must be node, pod or {{map: {{<vllm instance>: [<GPU UUID>...]}}}}, not {m:?}"));
        }
        for (k, v) in [
            ("objectives.error_abort_ratio", self.objectives.error_abort_ratio),
            ("scale.kv_cache_usage", self.scale.kv_cache_usage),
            ("memory_bound.dram_active_min", self.memory_bound.dram_active_min),
            ("memory_bound.tensor_active_max", self.memory_bound.tensor_active_max),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{k} is a ratio between 0 and 1, got {v}"));
            }
        }
        Ok(())
    }

    pub fn settings(&self) -> inf::Settings {
        let ms = |d: Duration| d.get().as_millis() as i64;
        let secs = |d: Duration| d.get().as_secs_f64();
        inf::Settings {
            window_ms: ms(self.window),
            evaluation_interval_ms: self.evaluation_interval.map_or(ms(self.window) / 4, ms),
            join: match &self.join {
                JoinConfig::Mode(m) if m == "pod" => inf::Join::Pod,
                JoinConfig::Mode(_) => inf::Join::Node,
                JoinConfig::Map { map } => inf::Join::Map(map.clone()),
            },
            objectives: inf::Objectives {
                ttft_p95: secs(self.objectives.ttft_p95),
                itl_p95: secs(self.objectives.itl_p95),
                queue_time_max: secs(self.objectives.queue_time_max),
                error_abort_ratio: self.objectives.error_abort_ratio,
            },
            scale: inf::Scale {
                kv_cache_usage: self.scale.kv_cache_usage,
                waiting_sustained_ms: ms(self.scale.waiting_sustained),
            },
            memory_bound: inf::MemoryBound {
                dram_active_min: self.memory_bound.dram_active_min,
                tensor_active_max: self.memory_bound.tensor_active_max,
            },
            // The DaemonSet's downward API sets it; engines and GPUs without
            // a `node` label of their own are taken to run here.
            node_name: std::env::var("K8S_NODE_NAME").ok().filter(|n| !n.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    fn config(window: &str, global: &str, job: &str) -> String {
        format!(
            "receivers:\n  prometheus:\n    config:\n      global: {{{global}}}\n      scrape_configs:\n        - job_name: vllm\n          {job}\n          static_configs: [{{targets: ['127.0.0.1:8000']}}]\n        - job_name: dcgm\n          static_configs: [{{targets: ['127.0.0.1:9400']}}]\nprocessors:\n  inference:\n    {window}\nexporters:\n  prometheusremotewrite:\n    endpoint: http://127.0.0.1:9090/api/v1/write\nservice:\n  pipelines:\n    metrics:\n      receivers: [prometheus]\n      processors: [inference]\n      exporters: [prometheusremotewrite]\n"
        )
    }

    /// The default window (1m) with Prometheus' default interval (1m): about
    /// half the evaluations would see one sample, so it is refused, naming
    /// both durations, the job and the fix.
    #[test]
    fn window_must_hold_two_scrapes_of_the_slowest_job() {
        let err = load_str("c.yaml", &config("{}", "", "scrape_interval: 1m"), &|_| None).err().expect("refused");
        let e = err.errors.iter().find(|e| e.path == "processors.inference.window").expect("window error");
        assert!(e.message.contains("window 1m") && e.message.contains("(1m of job \"vllm\""), "{}", e.message);
        assert!(e.message.contains("at least 2m"), "{}", e.message);
        assert!(e.line.is_some(), "names the line");
        // The slowest job decides: 15 s globally, 45 s for vllm.
        let err = load_str("c.yaml", &config("window: 1m", "scrape_interval: 15s", "scrape_interval: 45s"), &|_| None)
            .err()
            .expect("refused");
        assert!(err.errors.iter().any(|e| e.message.contains("at least 1m30s")), "{:?}", err.errors);
        for ok in [("window: 2m", "scrape_interval: 1m"), ("window: 30s", "scrape_interval: 15s")] {
            let text = config(ok.0, ok.1, "");
            assert!(load_str("c.yaml", &text, &|_| None).is_ok(), "{ok:?}");
        }
    }
}
