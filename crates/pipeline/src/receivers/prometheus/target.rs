//! How a discovered address becomes a scrape target, as Prometheus 2.42's
//! `PopulateLabels` does it: default `job`, `__scheme__`, `__metrics_path__`,
//! `__scrape_interval__`, `__scrape_timeout__` and `__param_*` labels,
//! `relabel_configs`, a default port, `__meta_*` removal, `instance`
//! defaulting to the address, then the URL from the `__` labels.

use super::config::{GlobalConfig, ScrapeConfig};
use super::discovery::TargetGroup;
use crate::primitives::Duration;
use crate::primitives::duration::parse_duration;
use infertel_model::{Label, Labels};
use infertel_relabel::Relabeler;
use std::collections::BTreeMap;

/// A target ready to scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The labels discovery gave (with the job's defaults), before
    /// `relabel_configs`: what the status page shows as discovered.
    pub discovered: Labels,
    /// Every label after relabeling, `__`-prefixed ones included: the
    /// target's identity.
    pub all_labels: Labels,
    /// The labels attached to scraped series: `job`, `instance` and any
    /// other non-`__` labels.
    pub labels: Labels,
    pub url: String,
    pub interval: std::time::Duration,
    pub timeout: std::time::Duration,
}

impl Target {
    pub fn job(&self) -> &str {
        self.labels.get("job").unwrap_or("")
    }
    pub fn instance(&self) -> &str {
        self.labels.get("instance").unwrap_or("")
    }
    /// Stable hash that spreads scrapes over the interval.
    pub fn hash(&self) -> u64 {
        self.all_labels.stable_hash()
            ^ self.url.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    }
}

/// Outcome of turning one discovered address into a target.
#[derive(Debug, PartialEq)]
pub enum Populated {
    Target(Target),
    /// Dropped by `relabel_configs` (not an error); the labels it was
    /// discovered with.
    Dropped(Labels),
}

fn has_port(addr: &str) -> bool {
    // "[::1]:80", "host:80" have a port; "[::1]" and "host" do not.
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(_, p)| p.starts_with(':'));
    }
    addr.matches(':').count() == 1
}

pub fn populate(
    address: &str,
    group: &TargetGroup,
    sc: &ScrapeConfig,
    global: &GlobalConfig,
    relabel: &Relabeler,
) -> Result<Populated, String> {
    let interval = Duration(sc.interval(global));
    let timeout = Duration(sc.timeout(global));
    let mut m: BTreeMap<String, String> = group.labels.clone();
    m.insert("__address__".into(), address.to_string());
    let defaults = [
        ("job", sc.job_name.clone()),
        ("__scrape_interval__", interval.to_string()),
        ("__scrape_timeout__", timeout.to_string()),
        ("__metrics_path__", sc.metrics_path.clone()),
        ("__scheme__", sc.scheme.clone()),
    ];
    for (k, v) in defaults {
        if m.get(k).is_none_or(|x| x.is_empty()) {
            m.insert(k.into(), v);
        }
    }
    for (k, v) in &sc.params {
        if let Some(first) = v.first() {
            m.insert(format!("__param_{k}"), first.clone());
        }
    }
    let pre = Labels::from_vec(m.into_iter().map(|(k, v)| Label::new(k, v)).collect());
    let Some(lset) = relabel.process(&pre) else { return Ok(Populated::Dropped(pre)) };
    let mut addr = lset.get("__address__").unwrap_or("").to_string();
    if addr.is_empty() {
        return Err(format!("target {address:?}: no __address__ after relabeling"));
    }
    let scheme = lset.get("__scheme__").unwrap_or("http").to_string();
    if !has_port(&addr) {
        match scheme.as_str() {
            "http" | "" => addr.push_str(":80"),
            "https" => addr.push_str(":443"),
            s => return Err(format!("target {address:?}: invalid scheme {s:?}")),
        }
    }
    if addr.contains('/') || addr.contains(' ') {
        return Err(format!("target {address:?}: {addr:?} is not a valid host:port"));
    }
    let interval = match lset.get("__scrape_interval__") {
        Some(s) => parse_duration(s).map_err(|e| format!("target {address:?}: __scrape_interval__: {e}"))?,
        None => interval.get(),
    };
    let timeout = match lset.get("__scrape_timeout__") {
        Some(s) => parse_duration(s).map_err(|e| format!("target {address:?}: __scrape_timeout__: {e}"))?,
        None => timeout.get(),
    };
    if interval.is_zero() || timeout > interval {
        return Err(format!(
            "target {address:?}: scrape timeout {timeout:?} must be > 0 and <= the interval {interval:?}"
        ));
    }
    let mut all: Vec<Label> = lset.iter().filter(|l| !l.name.starts_with("__meta_")).cloned().collect();
    all.retain(|l| &*l.name != "__address__");
    all.push(Label::new("__address__", addr.as_str()));
    if lset.get("instance").is_none() {
        all.push(Label::new("instance", addr.as_str()));
    }
    let all_labels = Labels::from_vec(all);
    let labels = Labels::from_vec(all_labels.iter().filter(|l| !l.name.starts_with("__")).cloned().collect());

    // URL: scheme://address/metrics_path?params, with __param_* overriding.
    let mut params: BTreeMap<String, Vec<String>> = sc.params.clone();
    for l in all_labels.iter() {
        if let Some(k) = l.name.strip_prefix("__param_") {
            match params.get_mut(k) {
                Some(v) if !v.is_empty() => v[0] = l.value.to_string(),
                _ => {
                    params.insert(k.to_string(), vec![l.value.to_string()]);
                }
            }
        }
    }
    let path = all_labels.get("__metrics_path__").unwrap_or("/metrics");
    let mut url = url::Url::parse(&format!("{scheme}://{addr}"))
        .map_err(|e| format!("target {address:?}: invalid URL {scheme}://{addr}: {e}"))?;
    url.set_path(path);
    if !params.is_empty() {
        let mut q = url.query_pairs_mut();
        for (k, vs) in &params {
            for v in vs {
                q.append_pair(k, v);
            }
        }
    }
    Ok(Populated::Target(Target { discovered: pre, all_labels, labels, url: url.to_string(), interval, timeout }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_relabel::RelabelConfig;

    fn sc(yaml: &str) -> ScrapeConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn group(t: &str) -> TargetGroup {
        TargetGroup {
            source: "t".into(),
            targets: vec![t.into()],
            labels: [("env".to_string(), "prod".to_string())].into(),
        }
    }

    #[test]
    fn defaults_instance_job_url() {
        let s = sc("job_name: vllm\nparams: {format: [prometheus]}\n");
        let g = GlobalConfig::default();
        let Populated::Target(t) =
            populate("127.0.0.1:8000", &group("x"), &s, &g, &Relabeler::new(&[]).unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!(t.labels.to_string(), r#"{env="prod",instance="127.0.0.1:8000",job="vllm"}"#);
        assert_eq!(t.url, "http://127.0.0.1:8000/metrics?format=prometheus");
        assert_eq!(t.interval, std::time::Duration::from_secs(60));
        assert_eq!(t.timeout, std::time::Duration::from_secs(10));
    }

    #[test]
    fn default_port_and_relabel_drop() {
        let s = sc("job_name: j\nscheme: https\n");
        let g = GlobalConfig::default();
        let Populated::Target(t) = populate("gpu-node", &group("x"), &s, &g, &Relabeler::new(&[]).unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!(t.instance(), "gpu-node:443");
        let drop: Vec<RelabelConfig> =
            serde_yaml::from_str("- {source_labels: [env], regex: prod, action: drop}").unwrap();
        let Populated::Dropped(d) = populate("h:1", &group("x"), &s, &g, &Relabeler::new(&drop).unwrap()).unwrap()
        else {
            panic!("dropped")
        };
        assert_eq!(d.get("env"), Some("prod"));
        assert_eq!(d.get("__address__"), Some("h:1"));
    }

    #[test]
    fn relabel_sets_path_and_address() {
        let s = sc("job_name: j\n");
        let rc: Vec<RelabelConfig> = serde_yaml::from_str(
            "- {target_label: __metrics_path__, replacement: /custom}\n- {source_labels: [__address__], regex: '(.*):1', target_label: __address__, replacement: '${1}:2'}\n",
        )
        .unwrap();
        let Populated::Target(t) =
            populate("h:1", &group("x"), &s, &GlobalConfig::default(), &Relabeler::new(&rc).unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!(t.url, "http://h:2/custom");
        assert_eq!(t.instance(), "h:2");
    }
}
