//! Fuzz target: any byte sequence must give Ok or Err in both formats, never a
//! panic, and the labels of every sample must be reachable.
#![no_main]

use infertel_exposition::{Format, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for format in [Format::PrometheusText, Format::OpenMetrics] {
        if let Ok(e) = parse(data, format) {
            for s in &e.samples {
                let _ = e.labels(s).len();
                if let Some(f) = s.family {
                    assert!((f as usize) < e.families.len());
                }
            }
        }
    }
});
