//! Processor `attributes`, as contrib's `attributesprocessor` for metrics:
//! `actions` (insert, update, upsert, delete, hash, extract, convert; see
//! `actions.rs`) edit each series' data point attributes, its labels other
//! than `__name__`, `job`, `instance` and a point's `le`/`quantile` (see
//! `pdata.rs`), for the series `include` selects and `exclude` does not.

use crate::consumer::Consumer;
use crate::processors::actions::{self, ActionConfig};
use crate::processors::matching::{MatchConfig, Matcher};
use crate::processors::rewrite::{Rewrite, Scope};
use crate::telemetry::Telemetry;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AttributesConfig {
    #[serde(default)]
    pub actions: Vec<ActionConfig>,
    #[serde(default, deserialize_with = "crate::processors::matching::deserialize_match")]
    pub include: Option<MatchConfig>,
    #[serde(default, deserialize_with = "crate::processors::matching::deserialize_match")]
    pub exclude: Option<MatchConfig>,
}

/// Keys an attributes action cannot write: they are not point attributes.
fn reserved(key: &str) -> Option<&'static str> {
    match &*crate::processors::pdata::attribute_label(key) {
        "__name__" => Some("the metric name is not an attribute: rename with metric_relabel_configs"),
        "job" | "instance" => Some(
            "job and instance are the target's resource (service.name, service.instance.id): use the resource processor",
        ),
        _ => None,
    }
}

impl AttributesConfig {
    /// Errors as `(key relative to the processor, message)`.
    pub fn check(&self) -> Result<(Vec<actions::Action>, Option<Matcher>, Option<Matcher>), (String, String)> {
        if self.actions.is_empty() {
            return Err(("actions".into(), "missing required field \"actions\"".into()));
        }
        let list = actions::compile(&self.actions)?;
        for (i, a) in list.iter().enumerate() {
            if let Some(why) = reserved(&a.key) {
                return Err((format!("actions[{i}].key"), format!("{:?}: {why}", a.key)));
            }
        }
        let m = |c: &Option<MatchConfig>, k: &str| -> Result<Option<Matcher>, (String, String)> {
            c.as_ref()
                .map(|c| {
                    Matcher::compile(c, true)
                        .map_err(|(p, e)| (if p.is_empty() { k.to_string() } else { format!("{k}.{p}") }, e))
                })
                .transpose()
        };
        Ok((list, m(&self.include, "include")?, m(&self.exclude, "exclude")?))
    }

    pub fn build(&self, id: String, next: Arc<dyn Consumer>, telemetry: &Telemetry) -> Result<Arc<Rewrite>, String> {
        let (list, include, exclude) = self.check().map_err(|(k, e)| format!("{k}: {e}"))?;
        Ok(Rewrite::new(id, Scope::Point, list, include, exclude, next, telemetry))
    }
}
