//! Golden numbers from the reference article, a counter reset, a target that
//! disappears, a version switch, the first window, and the power join.

use infertel_inference::article::{self, VllmState};
use infertel_inference::scrape::{series_from_text, stale_all};
use infertel_inference::{Engine, Evaluation, Join, Settings, Skip, TargetKey};

const T0: i64 = 1_785_192_900_000; // 2026-07-27 22:55:00 UTC
const MIN: i64 = 60_000;

fn vkey() -> TargetKey {
    TargetKey { job: "vllm".into(), instance: "10.0.1.23:8000".into() }
}
fn dkey() -> TargetKey {
    TargetKey { job: "dcgm".into(), instance: "10.0.1.23:9400".into() }
}

fn feed(e: &mut Engine, key: &TargetKey, body: &str, t: i64) {
    e.ingest(&series_from_text(body, t, &key.job, &key.instance).unwrap());
}

fn value(ev: &Evaluation, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    ev.derived.iter().find(|d| d.name == name && label.is_none_or(|(k, v)| d.label(k) == Some(v))).map(|d| d.value)
}

#[track_caller]
fn close(got: Option<f64>, want: f64) {
    let g = got.unwrap_or_else(|| panic!("missing value, want {want}"));
    assert!((g - want).abs() <= 1e-9 * want.abs().max(1.0), "got {g}, want {want}");
}

/// Two scrapes 60 s apart of vLLM and dcgm, evaluated at the second.
fn article_pair(generated: f64, energy: bool) -> (Engine, Evaluation, Evaluation) {
    let mut e = Engine::new(Settings::default());
    for (i, t) in [T0, T0 + MIN].into_iter().enumerate() {
        let step = i as f64;
        let d = if energy { article::dcgm(step, false) } else { article::dcgm_without_energy(step) };
        feed(&mut e, &dkey(), &d, t);
        feed(
            &mut e,
            &vkey(),
            &article::vllm(VllmState { step, generated_per_window: generated, ..Default::default() }),
            t,
        );
    }
    let dv = e.evaluate(&dkey(), T0 + MIN);
    let vv = e.evaluate(&vkey(), T0 + MIN);
    (e, vv, dv)
}

#[test]
fn article_latency_split_prefix_cache_batching_and_throughput() {
    let (_, v, _) = article_pair(28_746.0, true);
    let phase = |p| value(&v, "infertel_request_phase_seconds", Some(("phase", p)));
    close(phase("queue"), 0.000_01);
    close(phase("prefill"), 0.037_98);
    close(phase("decode"), 1.664_69);
    close(phase("e2e"), 1.715_18);
    assert_eq!(format!("{:.2}", phase("queue").unwrap() * 1000.0), "0.01");
    assert_eq!(format!("{:.2}", phase("prefill").unwrap() * 1000.0), "37.98");
    assert_eq!(format!("{:.2}", phase("decode").unwrap() * 1000.0), "1664.69");
    let share = value(&v, "infertel_decode_share", None).unwrap();
    assert_eq!(format!("{:.0}", share * 100.0), "97");
    close(Some(share), 166.469 / 171.518);
    close(value(&v, "infertel_prompt_tokens_cached_ratio", None), 0.325);
    close(value(&v, "infertel_prefix_cache_hit_ratio", None), 0.325);
    close(value(&v, "infertel_tokens_per_iteration", None), 10.36);
    close(value(&v, "infertel_generation_tokens_per_second", None), 479.1);
    close(value(&v, "infertel_prompt_tokens_per_second", None), 5_000.0 / 60.0);
    assert_eq!(format!("{:.2}", value(&v, "infertel_generation_to_prompt_ratio", None).unwrap()), "2.09");
    close(value(&v, "infertel_finished_ratio", Some(("finished_reason", "length"))), 0.39);
    close(value(&v, "infertel_error_abort_ratio", None), 0.0);
    close(value(&v, "infertel_http_error_ratio", Some(("handler", "/v1/chat/completions"))), 0.01);
    close(value(&v, "infertel_kv_cache_usage_ratio", None), 0.00255);
    // TTFT p95: rank 95 of 100 in (0.06, 0.08] holding 26 → 0.06 + 0.02·25/26.
    close(value(&v, "infertel_time_to_first_token_seconds", Some(("quantile", "0.95"))), 0.06 + 0.02 * 25.0 / 26.0);
    close(
        value(&v, "infertel_inter_token_latency_seconds", Some(("quantile", "0.95"))),
        0.01 + 0.015 * 9_500.0 / 9_800.0,
    );
    // Verdicts: all four objectives pass, as in the article.
    for obj in ["ttft_p95", "itl_p95", "queue", "error_abort_ratio"] {
        assert_eq!(value(&v, "infertel_slo_ok", Some(("objective", obj))), Some(1.0), "{obj}");
    }
    close(value(&v, "infertel_slo_measured", Some(("objective", "queue"))), 0.000_01);
    assert_eq!(value(&v, "infertel_scale_signal", None), Some(0.0));
    // Identifying labels of the source.
    let d = v.derived.iter().find(|d| d.name == "infertel_decode_share").unwrap();
    assert_eq!(d.label("model_name"), Some("Qwen/Qwen2.5-3B-Instruct"));
    assert_eq!(d.label("engine"), Some("0"));
    assert_eq!(d.label("job"), Some("vllm"));
    assert_eq!(d.label("instance"), Some("10.0.1.23:8000"));
}

#[test]
fn article_gpu_side_vram_and_memory_bound() {
    let (_, _, d) = article_pair(28_746.0, true);
    let vram = value(&d, "infertel_vram_used_ratio", None).unwrap();
    close(Some(vram), 21_483.0 / (21_483.0 + 1_352.0));
    assert_eq!(format!("{:.1}", vram * 100.0), "94.1");
    assert_eq!(value(&d, "infertel_memory_bound", None), Some(1.0));
    let g = d.derived.iter().find(|x| x.name == "infertel_vram_used_ratio").unwrap();
    assert_eq!(g.label("UUID"), Some("GPU-5e1d3c7a-0b7e-4c3e-9a51-000000000a10"));
    assert_eq!(g.label("gpu"), Some("0"));
}

#[test]
fn tokens_per_watt_from_power_and_from_energy_counter() {
    // 1,627.5 tok/s at 240 W (32 concurrent requests in the article).
    for energy in [false, true] {
        let (_, v, _) = article_pair(97_650.0, energy);
        let tpw = value(&v, "infertel_tokens_per_watt", None).unwrap();
        close(Some(tpw), 1_627.5 / 240.0);
        assert_eq!(format!("{tpw:.2}"), "6.78", "energy counter: {energy}");
        let d = v.derived.iter().find(|x| x.name == "infertel_tokens_per_watt").unwrap();
        assert_eq!(d.label("node"), Some("ip-10-0-1-23"));
    }
}

#[test]
fn tensor_parallel_engine_sums_power_of_its_gpus() {
    let mut e = Engine::new(Settings::default());
    for (i, t) in [T0, T0 + MIN].into_iter().enumerate() {
        let one = article::dcgm_without_energy(i as f64);
        let two =
            one.replace("gpu=\"0\"", "gpu=\"1\"").replace("000000000a10", "000000000a11").replace("nvidia0", "nvidia1");
        // Both GPUs in one exposition, as dcgm-exporter prints them.
        let body: String =
            one.lines().chain(two.lines().filter(|l| !l.starts_with('#'))).map(|l| format!("{l}\n")).collect();
        feed(&mut e, &dkey(), &body, t);
        feed(
            &mut e,
            &vkey(),
            &article::vllm(VllmState { step: i as f64, generated_per_window: 97_650.0, ..Default::default() }),
            t,
        );
    }
    e.evaluate(&dkey(), T0 + MIN);
    let v = e.evaluate(&vkey(), T0 + MIN);
    close(value(&v, "infertel_tokens_per_watt", None), 1_627.5 / 480.0);
}

#[test]
fn pod_and_map_joins() {
    let pod_labels = |b: &str| {
        b.replace(
            "DCGM_FI_DRIVER_VERSION=\"580.95.05\"",
            "DCGM_FI_DRIVER_VERSION=\"580.95.05\",namespace=\"claims\",pod=\"vllm-0\"",
        )
    };
    for join in [
        Join::Pod,
        Join::Map(
            [("10.0.1.23:8000".to_string(), vec!["GPU-5e1d3c7a-0b7e-4c3e-9a51-000000000a10".to_string()])].into(),
        ),
    ] {
        let mut e = Engine::new(Settings { join: join.clone(), ..Settings::default() });
        for (i, t) in [T0, T0 + MIN].into_iter().enumerate() {
            feed(&mut e, &dkey(), &pod_labels(&article::dcgm_without_energy(i as f64)), t);
            let mut s = series_from_text(
                &article::vllm(VllmState { step: i as f64, generated_per_window: 97_650.0, ..Default::default() }),
                t,
                "vllm",
                "10.0.1.23:8000",
            )
            .unwrap();
            // Service discovery puts the pod's labels on the vLLM target.
            for x in &mut s {
                x.labels = x.labels.with("pod", "vllm-0").with("namespace", "claims");
            }
            e.ingest(&s);
        }
        e.evaluate(&dkey(), T0 + MIN);
        let v = e.evaluate(&vkey(), T0 + MIN);
        let d = v
            .derived
            .iter()
            .find(|x| x.name == "infertel_tokens_per_watt")
            .unwrap_or_else(|| panic!("{join:?}: {:?}", v.skipped));
        close(Some(d.value), 1_627.5 / 240.0);
        match join {
            Join::Pod => assert_eq!((d.label("pod"), d.label("namespace")), (Some("vllm-0"), Some("claims"))),
            _ => assert_eq!(d.label("instance"), Some("10.0.1.23:8000")),
        }
    }
}

#[test]
fn first_window_emits_no_rates_and_counts_why() {
    let mut e = Engine::new(Settings::default());
    feed(&mut e, &vkey(), &article::vllm(VllmState::default()), T0);
    let v = e.evaluate(&vkey(), T0);
    for d in &v.derived {
        assert!(d.value.is_finite(), "{d:?}");
        assert!(
            ["infertel_kv_cache_usage_ratio", "infertel_target_schema_info", "infertel_scale_signal"].contains(&d.name),
            "only gauges on the first scrape, got {d:?}"
        );
    }
    assert!(v.skipped.contains(&("infertel_generation_tokens_per_second", Skip::FirstWindow)));
    assert!(v.skipped.contains(&("infertel_decode_share", Skip::FirstWindow)));
}

#[test]
fn idle_window_is_zero_over_zero_and_emits_nothing() {
    let mut e = Engine::new(Settings::default());
    for t in [T0, T0 + MIN] {
        feed(&mut e, &vkey(), &article::vllm(VllmState::default()), t); // step 0 twice: nothing moved
    }
    let v = e.evaluate(&vkey(), T0 + MIN);
    assert_eq!(value(&v, "infertel_decode_share", None), None);
    assert!(v.skipped.contains(&("infertel_decode_share", Skip::ZeroDenominator)));
    assert!(v.skipped.contains(&("infertel_time_to_first_token_seconds", Skip::ZeroDenominator)));
    assert_eq!(value(&v, "infertel_generation_tokens_per_second", None), Some(0.0), "a rate of 0 is a measurement");
    assert!(v.derived.iter().all(|d| d.value.is_finite()));
}

#[test]
fn counter_reset_mid_window_is_corrected() {
    let mut e = Engine::new(Settings::default());
    feed(&mut e, &vkey(), &article::vllm(VllmState::default()), T0);
    // vLLM restarts: counters begin again from zero, half a window of work done.
    feed(&mut e, &vkey(), &article::vllm(VllmState { step: 0.5, reset: true, ..Default::default() }), T0 + 30_000);
    feed(&mut e, &vkey(), &article::vllm(VllmState { step: 1.0, reset: true, ..Default::default() }), T0 + MIN);
    let v = e.evaluate(&vkey(), T0 + MIN);
    // Prometheus' correction: after the reset the counter counts from 0, so
    // the window's increase is the post-reset value: one window of work.
    close(value(&v, "infertel_generation_tokens_per_second", None), 479.1);
    close(value(&v, "infertel_request_phase_seconds", Some(("phase", "decode"))), 1.664_69);
    close(value(&v, "infertel_prompt_tokens_cached_ratio", None), 0.325);
}

/// What the receiver sends when discovery drops the vLLM target whose last
/// scrape was `last`: a staleness marker at `t` on every series, `up`
/// included.
fn dropped(last: &[infertel_model::Series], t: i64) -> Vec<infertel_model::Series> {
    let mut markers = stale_all(last, t);
    markers.push(infertel_model::Series {
        labels: infertel_model::Labels::from_pairs([
            ("__name__", "up"),
            ("instance", "10.0.1.23:8000"),
            ("job", "vllm"),
        ]),
        samples: infertel_model::samples![infertel_model::Sample {
            timestamp_ms: t,
            value: infertel_model::stale_nan()
        }],
    });
    markers
}

#[test]
fn target_that_disappears_gets_stale_derived_series() {
    let (mut e, v, _) = article_pair(28_746.0, true);
    assert!(v.stale.is_empty());
    let emitted: Vec<_> = v.derived.iter().map(|d| (d.name, d.labels.clone())).collect();
    let last = series_from_text(
        &article::vllm(VllmState { step: 1.0, ..Default::default() }),
        T0 + MIN,
        "vllm",
        "10.0.1.23:8000",
    )
    .unwrap();
    e.ingest(&dropped(&last, T0 + MIN + 15_000));
    assert!(e.due(&vkey(), T0 + MIN + 15_000, 60_000), "a target that went away is evaluated at once");
    let gone = e.evaluate(&vkey(), T0 + MIN + 15_000);
    assert!(gone.derived.is_empty(), "{:?}", gone.derived);
    let mut stale = gone.stale.clone();
    stale.sort();
    let mut want = emitted.clone();
    want.sort();
    assert_eq!(stale, want, "every derived series of the target goes stale");
    // And only once.
    let again = e.evaluate(&vkey(), T0 + MIN + 30_000);
    assert!(again.stale.is_empty());
}

/// The label set of `name` with `labels`, built here from the pairs.
fn expected_set(name: &str, labels: &[(String, String)]) -> infertel_model::Labels {
    let mut pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.push(("__name__", name));
    infertel_model::Labels::from_pairs(pairs)
}

/// Each derived value comes with its label set (its labels and
/// `__name__`); a series emitted again by the next evaluation has the very
/// set it had (built once, one identity downstream), and a series going
/// stale carries the set it was emitted with.
#[test]
fn derived_series_keep_their_label_sets_across_evaluations() {
    let (mut e, first, _) = article_pair(28_746.0, true);
    assert_eq!(first.series.len(), first.derived.len());
    assert!(first.derived.len() > 20, "{} derived", first.derived.len());
    for (d, l) in first.derived.iter().zip(&first.series) {
        assert_eq!(*l, expected_set(d.name, &d.labels), "{}", d.name);
    }
    feed(&mut e, &vkey(), &article::vllm(VllmState { step: 1.25, ..Default::default() }), T0 + 75_000);
    let second = e.evaluate(&vkey(), T0 + 75_000);
    let mut kept = 0;
    for (d, l) in second.derived.iter().zip(&second.series) {
        assert_eq!(*l, expected_set(d.name, &d.labels), "{}", d.name);
        if let Some(i) = first.derived.iter().position(|x| x.name == d.name && x.labels == d.labels) {
            assert!(infertel_model::Labels::ptr_eq(l, &first.series[i]), "{} built again", d.name);
            kept += 1;
        }
    }
    assert!(kept > 20, "{kept} series emitted by both evaluations");
    // A target gone: every series it emitted goes stale with its set.
    let last = series_from_text(
        &article::vllm(VllmState { step: 1.25, ..Default::default() }),
        T0 + 75_000,
        "vllm",
        "10.0.1.23:8000",
    )
    .unwrap();
    e.ingest(&dropped(&last, T0 + 90_000));
    let gone = e.evaluate(&vkey(), T0 + 90_000);
    assert!(!gone.stale.is_empty());
    assert_eq!(gone.stale.len(), gone.stale_series.len());
    for ((name, labels), l) in gone.stale.iter().zip(&gone.stale_series) {
        assert_eq!(*l, expected_set(name, labels), "{name}");
        let i = second.derived.iter().position(|x| x.name == *name && x.labels == *labels).expect("emitted before");
        assert!(infertel_model::Labels::ptr_eq(l, &second.series[i]), "{name} built again");
    }
}

#[test]
fn one_input_going_stale_stales_only_what_it_feeds() {
    let (mut e, _, _) = article_pair(28_746.0, true);
    let body = article::vllm(VllmState { step: 1.25, ..Default::default() });
    let kept: String =
        body.lines().filter(|l| !l.contains("vllm:prefix_cache_hits")).map(|l| format!("{l}\n")).collect();
    let mut s = series_from_text(&kept, T0 + 75_000, "vllm", "10.0.1.23:8000").unwrap();
    let gone = series_from_text(&body, T0 + 75_000, "vllm", "10.0.1.23:8000")
        .unwrap()
        .into_iter()
        .filter(|x| x.labels.metric_name() == "vllm:prefix_cache_hits_total");
    s.extend(stale_all(&gone.collect::<Vec<_>>(), T0 + 75_000));
    e.ingest(&s);
    let v = e.evaluate(&vkey(), T0 + 75_000);
    let names: Vec<&str> = v.stale.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["infertel_prefix_cache_hit_ratio"]);
    // Its marker is not a sample (as in a range vector): the series is left
    // with one sample in the window, too few for a rate.
    assert!(v.skipped.contains(&("infertel_prefix_cache_hit_ratio", Skip::FirstWindow)));
    assert!(v.derived.iter().any(|d| d.name == "infertel_prompt_tokens_cached_ratio"), "other series keep going");
}

#[test]
fn version_switch_between_scrapes_is_logged_and_derivation_follows() {
    let mut e = Engine::new(Settings::default());
    feed(&mut e, &vkey(), &article::vllm(VllmState::default()), T0);
    let first = e.evaluate(&vkey(), T0);
    let ev = first.schema_event.expect("first scrape logs the schema");
    assert_eq!(ev.schema.as_str(), "vllm-v1-0.16+");
    assert!(ev.previous.is_none());
    // Downgrade to a 0.9–0.11 build (old and new names), counters continue.
    let old = article::vllm(VllmState { step: 1.0, ..Default::default() })
        .replace("vllm:prompt_tokens_cached_total", "vllm:ignored_total")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        + "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"} 0.00255\n";
    // As the receiver does: the vanished series get a staleness marker.
    let before = series_from_text(&article::vllm(VllmState::default()), T0, "vllm", "10.0.1.23:8000").unwrap();
    let mut s = series_from_text(&old, T0 + MIN, "vllm", "10.0.1.23:8000").unwrap();
    let vanished: Vec<_> = before.into_iter().filter(|b| !s.iter().any(|x| x.labels == b.labels)).collect();
    s.extend(stale_all(&vanished, T0 + MIN));
    e.ingest(&s);
    let v = e.evaluate(&vkey(), T0 + MIN);
    let ev = v.schema_event.clone().expect("a changed schema is logged again");
    assert_eq!(ev.schema.as_str(), "vllm-v1-0.9-0.11");
    assert_eq!(ev.previous.map(|s| s.as_str()), Some("vllm-v1-0.16+"));
    let info = v.derived.iter().find(|d| d.name == "infertel_target_schema_info").unwrap();
    assert_eq!(info.label("schema"), Some("vllm-v1-0.9-0.11"));
    assert!(
        v.stale.iter().any(|(n, l)| *n == "infertel_target_schema_info"
            && l.iter().any(|(k, x)| k == "schema" && x == "vllm-v1-0.16+"))
    );
    // Before 0.16 the cached share comes from prefix_cache_hits / prompt_tokens.
    close(value(&v, "infertel_prompt_tokens_cached_ratio", None), 0.325);
    assert!(e.evaluate(&vkey(), T0 + MIN).schema_event.is_none(), "logged once");
}

#[test]
fn dcgm_46_renames_feed_the_same_gauges() {
    let mut e = Engine::new(Settings::default());
    for (i, t) in [T0, T0 + MIN].into_iter().enumerate() {
        feed(&mut e, &dkey(), &article::dcgm(i as f64, true), t);
        feed(
            &mut e,
            &vkey(),
            &article::vllm(VllmState { step: i as f64, generated_per_window: 97_650.0, ..Default::default() }),
            t,
        );
    }
    let d = e.evaluate(&dkey(), T0 + MIN);
    assert_eq!(d.schema_event.as_ref().map(|s| s.schema.as_str()), Some("dcgm-4.6"));
    assert_eq!(value(&d, "infertel_memory_bound", None), Some(1.0));
    let v = e.evaluate(&vkey(), T0 + MIN);
    close(value(&v, "infertel_tokens_per_watt", None), 1_627.5 / 240.0);
}
