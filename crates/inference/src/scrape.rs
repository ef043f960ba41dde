//! A scrape body as the receiver would forward it: parsed, `job` and
//! `instance` attached, every sample at the scrape time. Used by
//! `infertel report` (live and `--replay`) and by tests.

use infertel_model::{Label, Labels, METRIC_NAME, Sample, Series};

pub fn series_from_text(body: &str, ts_ms: i64, job: &str, instance: &str) -> Result<Vec<Series>, String> {
    let exp = infertel_exposition::parse(body.as_bytes(), infertel_exposition::Format::PrometheusText)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(exp.samples.len());
    for s in &exp.samples {
        let mut v: Vec<Label> = exp.labels(s).iter().map(|(k, x)| Label::new(k.as_ref(), x.as_ref())).collect();
        v.push(Label::new(METRIC_NAME, s.name.as_ref()));
        v.push(Label::new("job", job));
        v.push(Label::new("instance", instance));
        out.push(Series {
            labels: Labels::from_vec(v),
            samples: infertel_model::samples![Sample { timestamp_ms: s.timestamp_ms.unwrap_or(ts_ms), value: s.value }],
        });
    }
    Ok(out)
}

/// Stale markers for every series of a previous scrape (a target that went away).
pub fn stale_all(previous: &[Series], ts_ms: i64) -> Vec<Series> {
    previous
        .iter()
        .map(|s| Series {
            labels: s.labels.clone(),
            samples: infertel_model::samples![Sample { timestamp_ms: ts_ms, value: infertel_model::stale_nan() }],
        })
        .collect()
}
