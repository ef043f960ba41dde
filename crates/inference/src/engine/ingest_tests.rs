//! Tests of `ingest.rs`: the shortcut for repeated scrapes and the fast
//! path for interned label sets against the full ingest.

use super::*;
use crate::engine::Settings;
use infertel_model::Sample;

thread_local! {
    /// Batches ingested by the shortcut (see [`Repeat`]).
    pub(super) static REPEATS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Turns the shortcut off, for a reference.
    pub(super) static FULL_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Everything ingest keeps of a target that evaluation reads, by
/// content: the samples within the retention of each input series by
/// name and labels (as readers see them: from each one's cutoff on),
/// the families, schema, node and liveness.
fn state(e: &Engine) -> Vec<String> {
    let mut out = Vec::new();
    for (k, st) in e.targets.iter() {
        out.push(format!(
            "{k:?} families={:?} engine={} detected={:?} newest={} gone={} node={:?}",
            st.families, st.engine_label, st.detected, st.newest_ms, st.gone, st.node
        ));
        for (name, m) in &st.series {
            let keep = if wire(name).is_some_and(|w| w.long) { e.retention_ms() } else { e.short_retention_ms() };
            for (l, c) in m {
                let v: Vec<(i64, u64)> = st
                    .rows
                    .samples(c, st.rows.since(st.newest_ms - keep))
                    .map(|x| (x.timestamp_ms, x.value.to_bits()))
                    .collect();
                out.push(format!("{} {l:?} {v:?}", name.0));
            }
        }
    }
    out.sort();
    out
}

/// Fails at the first scrape after which the shortcut's state (`short`)
/// differs from the full ingest's (`full`), naming it and the first line.
fn assert_same_states(full: &[Vec<String>], short: &[Vec<String>], what: &str) {
    assert_eq!(full.len(), short.len(), "{what}");
    for (k, (a, b)) in full.iter().zip(short).enumerate() {
        let first = a.iter().zip(b).find(|(x, y)| x != y);
        assert!(a.len() == b.len() && first.is_none(), "state after scrape {k} ({what}): {first:?}");
    }
}

/// Scrapes that repeat the last one take the shortcut, and leave the
/// state the full ingest leaves: through a series that goes away for
/// longer than the retention (so the entries after it move), a stale
/// marker, a failed scrape (`up 0`, markers for the rest), a scrape
/// with two samples of a series, and evaluations that trim.
/// Memory stays bounded: a target never holds more rows than the
/// retention.
#[test]
fn repeats_take_the_shortcut_and_leave_the_state_a_full_ingest_leaves() {
    let names = [
        ("vllm:generation_tokens_total", ""),
        ("vllm:prompt_tokens_total", ""),
        ("vllm:e2e_request_latency_seconds_count", ""),
        ("vllm:e2e_request_latency_seconds_sum", ""),
        ("vllm:num_requests_waiting", ""),
        ("vllm:kv_cache_usage_perc", ""),
        ("vllm:time_to_first_token_seconds_bucket", "0.1"),
        ("vllm:time_to_first_token_seconds_bucket", "1"),
        ("vllm:time_to_first_token_seconds_bucket", "+Inf"),
        ("process_cpu_seconds_total", ""),
        ("up", ""),
    ];
    let labels = |i: usize| {
        let (n, le) = names[i];
        let mut v = vec![("__name__", n), ("instance", "a"), ("job", "v"), ("node", "n1")];
        if n.starts_with("vllm:") {
            v.extend([("engine", "0"), ("model_name", "m")]);
        }
        if !le.is_empty() {
            v.push(("le", le));
        }
        Labels::from_pairs(v)
    };
    let interned: Vec<Labels> = (0..names.len()).map(labels).collect();
    let run = |fresh: bool, full_only: bool| {
        REPEATS.with(|r| r.set(0));
        FULL_ONLY.with(|f| f.set(full_only));
        let mut e = Engine::new(Settings { window_ms: 10_000, ..Settings::default() });
        let mut states = Vec::new();
        let mut derived = Vec::new();
        for k in 0..400i64 {
            // Jittered, as a scrape loop's times are.
            let t = 100_000 + k * 1000 + (k * 37) % 11;
            let failed = k == 250;
            let batch: Vec<Series> = (0..names.len())
                // The 0.1 bucket is gone from 50 s to 200 s, beyond the
                // retention (70 s here).
                .filter(|&i| !(i == 6 && (50..200).contains(&k)))
                .map(|i| {
                    let v = if failed && names[i].0 != "up" || (k == 150 && i == 1) {
                        infertel_model::stale_nan()
                    } else if names[i].0 == "up" {
                        if failed { 0.0 } else { 1.0 }
                    } else {
                        (k * (i as i64 + 1)) as f64
                    };
                    let mut samples = infertel_model::samples![Sample { timestamp_ms: t, value: v }];
                    if k == 300 && i == 0 {
                        samples.insert(0, Sample { timestamp_ms: t - 500, value: v - 1.0 });
                    }
                    // `up` is built anew on every scrape, as the receiver does.
                    let fresh = fresh || names[i].0 == "up";
                    Series { labels: if fresh { labels(i) } else { interned[i].clone() }, samples }
                })
                .collect();
            let touched = e.ingest(&batch);
            states.push(state(&e));
            // The longest retention's rows (1 s apart), no more; a column
            // per input series and a margin for the next ones.
            for st in e.targets.values() {
                let (rows, stride) = st.rows.shape();
                assert!(rows as i64 <= e.retention_ms() / 1000 + 1, "{rows} rows held");
                let columns: usize = st.series.values().map(|m| m.entries.len()).sum();
                assert!(stride <= columns + columns / 8 + 8, "{stride} values a row for {columns} series");
            }
            // Seldom enough that expired rows are dropped by ingest, and
            // series left without samples by evaluation's trim.
            if k % 40 == 0 {
                for (key, t) in touched {
                    let ev = e.evaluate(&key, t);
                    let mut d: Vec<_> =
                        ev.derived.iter().map(|d| (d.name, d.labels.clone(), d.value.to_bits())).collect();
                    d.sort();
                    derived.push(d);
                }
            }
        }
        (states, derived, REPEATS.with(|r| r.get()))
    };
    let (full, full_derived, none) = run(false, true);
    assert_eq!(none, 0);
    assert!(full_derived.iter().any(|d| d.iter().any(|(n, _, _)| *n == "infertel_generation_tokens_per_second")));
    // Interned label sets, and label sets built anew on every scrape
    // (equal, not the same).
    for fresh in [false, true] {
        let (short, short_derived, repeats) = run(fresh, false);
        // All but the scrapes that change something, and the one after each.
        assert!(repeats > 380, "{repeats} of 400 scrapes took the shortcut (fresh: {fresh})");
        assert_same_states(&full, &short, &format!("fresh: {fresh}"));
        assert_eq!(full_derived, short_derived, "fresh: {fresh}");
    }
    FULL_ONLY.with(|f| f.set(false));
}

/// The fast path (the same interned label sets as the last scrape) and
/// the slow path (fresh label sets every scrape) derive the same values,
/// also when series appear, vanish and change order between scrapes.
#[test]
fn interned_and_fresh_label_sets_derive_the_same() {
    let names = [
        ("vllm:generation_tokens_total", ""),
        ("vllm:prompt_tokens_total", ""),
        ("vllm:e2e_request_latency_seconds_count", ""),
        ("vllm:e2e_request_latency_seconds_sum", ""),
        ("vllm:request_queue_time_seconds_sum", ""),
        ("vllm:kv_cache_usage_perc", ""),
        ("vllm:time_to_first_token_seconds_bucket", "0.1"),
        ("vllm:time_to_first_token_seconds_bucket", "1"),
        ("vllm:time_to_first_token_seconds_bucket", "+Inf"),
        ("process_cpu_seconds_total", ""),
    ];
    let labels = |i: usize| {
        let (n, le) = names[i];
        let mut v = vec![("__name__", n), ("engine", "0"), ("instance", "a"), ("job", "v"), ("model_name", "m")];
        if !le.is_empty() {
            v.push(("le", le));
        }
        Labels::from_pairs(v)
    };
    let interned: Vec<Labels> = (0..names.len()).map(labels).collect();
    let run = |fresh: bool| {
        let mut e = Engine::new(Settings { window_ms: 10_000, ..Settings::default() });
        let mut out = Vec::new();
        for k in 0..30i64 {
            let t = 100_000 + k * 1000;
            let mut order: Vec<usize> = (0..names.len()).collect();
            if k % 7 == 3 {
                order.reverse();
            }
            if k % 5 == 2 {
                order.retain(|i| *i != 1);
            }
            let batch: Vec<Series> = order
                .iter()
                .map(|&i| Series {
                    labels: if fresh { labels(i) } else { interned[i].clone() },
                    samples: infertel_model::samples![Sample { timestamp_ms: t, value: (k * (i as i64 + 1)) as f64 }],
                })
                .collect();
            let touched = e.ingest(&batch);
            for (key, t) in touched {
                let ev = e.evaluate(&key, t);
                out.push(ev.derived.iter().map(|d| (d.name, d.labels.clone(), d.value.to_bits())).collect::<Vec<_>>());
            }
        }
        out
    };
    let (a, b) = (run(false), run(true));
    assert_eq!(a.len(), 30);
    assert!(a.iter().any(|d| d.iter().any(|(n, _, _)| *n == "infertel_generation_tokens_per_second")));
    let sorted = |mut v: Vec<_>| {
        v.sort();
        v
    };
    for (x, y) in a.into_iter().zip(b) {
        assert_eq!(sorted(x), sorted(y));
    }
}

/// A scrape with as many series as the last one but not the same ones, in
/// that order, is not a repeat: two series swapped, one replaced by
/// another, one label set built anew (equal, so still a repeat), in a
/// jittered run of mostly repeated scrapes. After every scrape the state
/// is the one the full ingest leaves.
#[test]
fn a_scrape_of_the_same_length_with_other_series_is_not_taken_for_a_repeat() {
    let names = [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:request_success_total",
    ];
    let labels = |i: usize, engine: &str| {
        Labels::from_pairs([
            ("__name__", names[i]),
            ("engine", engine),
            ("instance", "a"),
            ("job", "v"),
            ("model_name", "m"),
        ])
    };
    // Engines 0 and 1 of each name; a scrape holds 8 of the 16.
    let pool: Vec<Labels> = (0..16).map(|k| labels(k % 8, if k < 8 { "0" } else { "1" })).collect();
    let run = |full_only: bool| {
        REPEATS.with(|r| r.set(0));
        FULL_ONLY.with(|f| f.set(full_only));
        let mut next = super::super::rows::tests::xorshift(0x51ed_270b_9a3e_44c1);
        let mut e = Engine::new(Settings { window_ms: 10_000, ..Settings::default() });
        let mut order: Vec<usize> = (0..8).collect();
        let mut states = Vec::new();
        for k in 0..600i64 {
            let t = 100_000 + k * 1000 + (next() % 23) as i64;
            let mut fresh = None;
            match next() % 8 {
                0 => {
                    let i = (next() % 7) as usize;
                    order.swap(i, i + 1);
                }
                1 => {
                    // Another series in the place of one, the count unchanged.
                    let i = (next() % 8) as usize;
                    let spare = (0..16).filter(|x| !order.contains(x)).nth((next() % 8) as usize);
                    if let Some(s) = spare {
                        order[i] = s;
                    }
                }
                2 => fresh = Some((next() % 8) as usize),
                _ => {}
            }
            let batch: Vec<Series> = order
                .iter()
                .enumerate()
                .map(|(at, &p)| Series {
                    labels: if fresh == Some(at) {
                        labels(p % 8, if p < 8 { "0" } else { "1" })
                    } else {
                        pool[p].clone()
                    },
                    samples: infertel_model::samples![Sample { timestamp_ms: t, value: (k * 16 + p as i64) as f64 }],
                })
                .collect();
            e.ingest(&batch);
            states.push(state(&e));
        }
        (states, REPEATS.with(|r| r.get()))
    };
    let (full, none) = run(true);
    assert_eq!(none, 0);
    let (short, repeats) = run(false);
    FULL_ONLY.with(|f| f.set(false));
    // About half the scrapes change nothing, and the one after a change
    // sets the shortcut up again.
    assert!(repeats > 150, "{repeats} of 600 scrapes took the shortcut");
    assert_same_states(&full, &short, "");
}

/// The target of a batch is found by the address of its first label set
/// (`Engine::firsts`), a hint that may be wrong: two targets scraped in
/// turn, with jitter, whose hints are now and then pointed at the other
/// target's slot, at a slot no target holds, or dropped. After every scrape
/// the state is the one the full ingest leaves, and most scrapes still
/// take the shortcut.
#[test]
fn a_wrong_hint_for_the_target_costs_a_full_ingest_not_a_wrong_state() {
    let names = [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
    ];
    let set = |i: usize, instance: &str| {
        Labels::from_pairs([("__name__", names[i]), ("engine", "0"), ("instance", instance), ("job", "v")])
    };
    let sets: Vec<Vec<Labels>> =
        ["a:8000", "b:8000"].iter().map(|inst| (0..names.len()).map(|i| set(i, inst)).collect()).collect();
    let keys = [TargetKey::new("v", "a:8000"), TargetKey::new("v", "b:8000")];
    let run = |full_only: bool| {
        REPEATS.with(|r| r.set(0));
        FULL_ONLY.with(|f| f.set(full_only));
        let mut next = super::super::rows::tests::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut e = Engine::new(Settings { window_ms: 10_000, ..Settings::default() });
        let mut states = Vec::new();
        for k in 0..400i64 {
            let target = (k % 2) as usize;
            let t = 100_000 + (k / 2) * 1000 + target as i64 * 500 + (next() % 37) as i64;
            if next().is_multiple_of(6) {
                let addr = sets[target][0].addr();
                match next() % 3 {
                    0 => {
                        if let Some(other) = e.targets.slot(&keys[1 - target]) {
                            e.firsts.insert(addr, other);
                        }
                    }
                    1 => {
                        // A slot no target holds.
                        e.firsts.insert(addr, 7);
                    }
                    _ => {
                        e.firsts.remove(&addr);
                    }
                }
            }
            let batch: Vec<Series> = sets[target]
                .iter()
                .enumerate()
                .map(|(i, l)| Series {
                    labels: l.clone(),
                    samples: infertel_model::samples![Sample { timestamp_ms: t, value: (k * 8 + i as i64) as f64 }],
                })
                .collect();
            e.ingest(&batch);
            states.push(state(&e));
        }
        (states, REPEATS.with(|r| r.get()))
    };
    let (full, none) = run(true);
    assert_eq!(none, 0);
    let (short, repeats) = run(false);
    FULL_ONLY.with(|f| f.set(false));
    assert!(repeats > 250, "{repeats} of 400 scrapes took the shortcut");
    assert_same_states(&full, &short, "");
}

/// Only the histograms whose buckets a figure reads keep their `_bucket`
/// series; the others keep `_sum` and `_count`, which their figures read.
#[test]
fn only_the_buckets_read_are_kept() {
    for (name, kept) in [
        ("vllm:time_to_first_token_seconds_bucket", true),
        ("vllm:inter_token_latency_seconds_bucket", true),
        ("vllm:time_per_output_token_seconds_bucket", true),
        ("vllm:e2e_request_latency_seconds_bucket", true),
        ("nv_inference_first_response_histogram_ms_bucket", true),
        ("vllm:request_queue_time_seconds_bucket", false),
        ("vllm:request_queue_time_seconds_sum", true),
        ("vllm:request_queue_time_seconds_count", true),
        ("vllm:request_decode_time_seconds_bucket", false),
        ("vllm:iteration_tokens_total_bucket", false),
        ("vllm:iteration_tokens_total_count", true),
        ("vllm:request_prompt_tokens_bucket", false),
        ("vllm:request_params_max_tokens_bucket", false),
        ("vllm:request_params_max_tokens_sum", true),
    ] {
        assert_eq!(wire(name).map(|w| w.kept), Some(kept), "{name}");
    }
}
