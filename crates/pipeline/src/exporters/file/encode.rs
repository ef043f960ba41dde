//! One request as the bytes the file holds: OTLP JSON (protobuf's JSON
//! mapping, as `opentelemetry-proto` serialises it) or binary protobuf;
//! zstd per message when asked; then framed as contrib frames it (a line,
//! or a 4-byte big-endian length before the message).
//!
//! Protobuf's JSON mapping writes NaN and infinities as the strings
//! `"NaN"`, `"Infinity"` and `"-Infinity"`; serde_json cannot write a
//! non-finite float at all (it writes `null`, which a reader takes as "no
//! value"). So those values are swapped for sentinel subnormals before
//! serialising and the sentinels' text for the strings after. A scraped
//! value equal, bit for bit, to one of the three smallest subnormals would
//! read back as NaN or an infinity.

use infertel_otlp::opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use infertel_otlp::opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;

const SENTINELS: [(u64, &str); 3] = [(1, "\"NaN\""), (2, "\"Infinity\""), (3, "\"-Infinity\"")];

fn sentinel(v: &mut f64) -> bool {
    let bits = if v.is_nan() {
        1
    } else if *v == f64::INFINITY {
        2
    } else if *v == f64::NEG_INFINITY {
        3
    } else {
        return false;
    };
    *v = f64::from_bits(bits);
    true
}

/// Replaces non-finite values with sentinels; whether there were any.
fn mark_non_finite(req: &mut ExportMetricsServiceRequest) -> bool {
    let mut any = false;
    let mut opt = |v: &mut Option<f64>| {
        if let Some(x) = v {
            any |= sentinel(x);
        }
    };
    let mut found = false;
    for rm in &mut req.resource_metrics {
        for sm in &mut rm.scope_metrics {
            for m in &mut sm.metrics {
                match &mut m.data {
                    Some(metric::Data::Gauge(g)) => {
                        for p in &mut g.data_points {
                            if let Some(number_data_point::Value::AsDouble(x)) = &mut p.value {
                                found |= sentinel(x);
                            }
                        }
                    }
                    Some(metric::Data::Sum(s)) => {
                        for p in &mut s.data_points {
                            if let Some(number_data_point::Value::AsDouble(x)) = &mut p.value {
                                found |= sentinel(x);
                            }
                        }
                    }
                    Some(metric::Data::Histogram(h)) => {
                        for p in &mut h.data_points {
                            opt(&mut p.sum);
                            opt(&mut p.min);
                            opt(&mut p.max);
                        }
                    }
                    Some(metric::Data::Summary(s)) => {
                        for p in &mut s.data_points {
                            found |= sentinel(&mut p.sum);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    any || found
}

fn json(req: &ExportMetricsServiceRequest) -> Result<Vec<u8>, String> {
    let mut req = req.clone();
    let marked = mark_non_finite(&mut req);
    let text = serde_json::to_string(&req).map_err(|e| format!("OTLP JSON: {e}"))?;
    if !marked {
        return Ok(text.into_bytes());
    }
    let mut text = text;
    for (bits, word) in SENTINELS {
        let written = serde_json::to_string(&f64::from_bits(bits)).map_err(|e| e.to_string())?;
        text = text.replace(&written, word);
    }
    Ok(text.into_bytes())
}

/// The bytes to append for `req`.
pub fn record(req: &ExportMetricsServiceRequest, cfg: &super::config::FileConfig) -> Result<Vec<u8>, String> {
    let body = if cfg.format == "proto" { req.encode_to_vec() } else { json(req)? };
    let body = if cfg.compression == "zstd" {
        zstd::bulk::compress(&body, 0).map_err(|e| format!("zstd: {e}"))?
    } else {
        body
    };
    if cfg.framed() {
        let len = u32::try_from(body.len()).map_err(|_| "a request over 4 GiB cannot be framed".to_string())?;
        let mut out = Vec::with_capacity(body.len() + 4);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    } else {
        let mut out = body;
        out.push(b'\n');
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infertel_otlp::opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    };

    #[test]
    fn non_finite_values_are_protobufs_json_strings() {
        let point = |v: f64| NumberDataPoint {
            value: Some(number_data_point::Value::AsDouble(v)),
            time_unix_nano: 1,
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "g".into(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![
                                point(f64::NAN),
                                point(f64::INFINITY),
                                point(f64::NEG_INFINITY),
                                point(2.5),
                            ],
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let text = String::from_utf8(json(&req).unwrap()).unwrap();
        assert!(text.contains(r#""asDouble":"NaN""#), "{text}");
        assert!(text.contains(r#""asDouble":"Infinity""#), "{text}");
        assert!(text.contains(r#""asDouble":"-Infinity""#), "{text}");
        assert!(text.contains(r#""asDouble":2.5"#), "{text}");
        assert!(text.contains(r#""timeUnixNano":"1""#), "{text}");
    }
}
