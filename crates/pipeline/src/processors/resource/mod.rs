//! Processor `resource`, as contrib's `resourceprocessor`: `attributes` (the
//! same actions as the `attributes` processor, see `actions.rs`) edit each
//! series' resource, its target. `service.name` is the `job` label,
//! `service.instance.id` the `instance` label, and any other key a label of
//! its own on every series of the target (`k8s.cluster.name` →
//! `k8s_cluster_name`), as the Collector's remote write sends resource
//! attributes with `resource_to_telemetry_conversion` (see `pdata.rs`).

use crate::consumer::Consumer;
use crate::processors::actions::{self, ActionConfig};
use crate::processors::rewrite::{Rewrite, Scope};
use crate::telemetry::Telemetry;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    #[serde(default)]
    pub attributes: Vec<ActionConfig>,
}

impl ResourceConfig {
    /// Errors as `(key relative to the processor, message)`.
    pub fn check(&self) -> Result<Vec<actions::Action>, (String, String)> {
        if self.attributes.is_empty() {
            return Err(("attributes".into(), "missing required field \"attributes\"".into()));
        }
        let list = actions::compile(&self.attributes).map_err(|(k, e)| (k.replacen("actions", "attributes", 1), e))?;
        for (i, a) in list.iter().enumerate() {
            if crate::processors::pdata::resource_label(&a.key) == "__name__" {
                return Err((format!("attributes[{i}].key"), "the metric name is not a resource attribute".into()));
            }
        }
        Ok(list)
    }

    pub fn build(&self, id: String, next: Arc<dyn Consumer>, telemetry: &Telemetry) -> Result<Arc<Rewrite>, String> {
        let list = self.check().map_err(|(k, e)| format!("{k}: {e}"))?;
        Ok(Rewrite::new(id, Scope::Resource, list, None, None, next, telemetry))
    }
}
