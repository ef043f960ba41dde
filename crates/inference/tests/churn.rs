//! The engine's state does not grow with target churn: a target that
//! vanished is forgotten once none of its samples is within the retention
//! (window + 60 s) of the newest sample seen.

use infertel_inference::{Engine, Settings};
use infertel_model::{Labels, Sample, Series};

fn scrape(instance: &str, ts: i64) -> Vec<Series> {
    ["vllm:num_requests_running", "vllm:num_requests_waiting"]
        .iter()
        .map(|n| Series {
            labels: Labels::from_pairs([
                ("__name__", *n),
                ("job", "vllm"),
                ("instance", instance),
                ("model_name", "m"),
            ]),
            samples: infertel_model::samples![Sample { timestamp_ms: ts, value: 1.0 }],
        })
        .collect()
}

#[test]
fn vanished_targets_are_forgotten_after_the_retention() {
    let mut e = Engine::new(Settings::default());
    // 200 pods, each scraped for 30 s (every 5 s), then replaced.
    let mut t = 0;
    for pod in 0..200 {
        for _ in 0..6 {
            t += 5_000;
            e.ingest(&scrape(&format!("10.0.{}.{}:8000", pod / 250, pod % 250), t));
            // A long-lived target scraped throughout.
            e.ingest(&scrape("10.9.9.9:8000", t));
        }
        assert!(
            e.tracked_targets() <= 2 + 1 + (120_000 + 60_000) / 30_000,
            "pod {pod}: {} targets kept",
            e.tracked_targets()
        );
    }
    // Default window 1m, waiting_sustained 2m: retention 3 min = 6 pods of 30 s.
    let kept = e.tracked_targets();
    assert!(kept >= 2, "the long-lived target and the current pod are kept: {kept}");
    assert!(kept <= 9, "only targets seen within the retention are kept: {kept}");
    // The long-lived target is still there.
    assert!(e.targets().any(|k| &*k.instance == "10.9.9.9:8000"));
}

/// Looking for vanished targets reads every target's state, so it runs once
/// per second of scrape time, not per batch; a vanished target is still
/// forgotten within a second of its retention running out, whatever the
/// other targets' scrape times (jittered, several per second).
#[test]
fn a_vanished_target_is_forgotten_within_a_second_of_its_retention() {
    let mut e = Engine::new(Settings::default());
    let retention = 180_000; // window 1m, waiting_sustained 2m, + 60 s
    let gone_at = 10_037;
    e.ingest(&scrape("10.0.0.1:8000", gone_at));
    // Three targets scraped every second, each with its own offset and a
    // few ms of jitter, as scrape loops stamp them.
    let mut forgotten = None;
    for s in 0..200 {
        for (k, offset) in [(2, 113), (3, 521), (4, 877)] {
            let t = s * 1000 + offset + (s * 7 + k * 3) % 11;
            e.ingest(&scrape(&format!("10.0.0.{k}:8000"), t));
            let kept = e.targets().any(|x| &*x.instance == "10.0.0.1:8000");
            if t - gone_at <= retention {
                assert!(kept, "forgotten at {t}, within its retention");
            } else if !kept && forgotten.is_none() {
                forgotten = Some(t);
            }
        }
    }
    let f = forgotten.expect("the vanished target is forgotten");
    assert!(f - gone_at - retention <= 1000, "forgotten {} ms after its retention", f - gone_at - retention);
}
