//! Real `/metrics` captures from vLLM and dcgm-exporter
//! (`shared/fixtures/real/*.prom`, provenance in its SOURCES.md) must parse
//! as text 0.0.4 with the expected sample counts, types and values.

use std::path::{Path, PathBuf};

use infertel_exposition::{Exposition, Format, MetricType, parse};

fn fixtures() -> PathBuf {
    match std::env::var_os("INFERTEL_SHARED") {
        Some(shared) => PathBuf::from(shared).join("fixtures/real"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/real"),
    }
}

/// The `.prom` files of the fixtures folder, sorted.
fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".prom"))
        .collect();
    names.sort();
    names
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn sample<'e>(e: &'e Exposition<'_>, name: &str) -> &'e infertel_exposition::ParsedSample<'e> {
    e.samples.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no sample {name}"))
}

#[test]
fn every_fixture_parses_with_expected_counts() {
    // Sample counts = non-comment, non-blank lines of each file.
    let expected = [
        ("dcgm-exporter-2.x-nvidia-docs-a100-mig-partial.prom", 21),
        ("dcgm-exporter-kops-l4.prom", 23),
        ("dcgm-exporter-lke-rtx4000ada-k8s-pod-labels.prom", 25),
        ("dcgm-exporter-upcloud-l40s.prom", 23),
        ("dcgm-exporter-vks-vgpu-grid-a100.prom", 11),
        ("vllm-v0.17-cncf-k8s-ai-conformance-kops.prom", 395),
        ("vllm-v0.5-v0engine-datadog-integrations-core.prom", 120),
        ("vllm-v0.6.4-v0engine-vllm-docs-truncated.prom", 9),
        ("vllm-v0.7-v0engine-aibrix-docs.prom", 29),
    ];
    let on_disk = fixture_names();
    assert_eq!(on_disk, expected.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>());
    for (name, count) in expected {
        let body = read(name);
        let e = parse(&body, Format::PrometheusText).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(e.samples.len(), count, "{name}");
        // Every declared family with samples types all of its samples.
        for s in &e.samples {
            if let Some(f) = s.family {
                assert_eq!(s.kind, e.families[f as usize].kind, "{name}: {}", s.name);
            }
        }
    }
}

#[test]
fn vllm_v017_types_and_values() {
    let body = read("vllm-v0.17-cncf-k8s-ai-conformance-kops.prom");
    let e = parse(&body, Format::PrometheusText).unwrap();
    let b = sample(&e, "vllm:request_prompt_tokens_bucket");
    assert_eq!(b.kind, MetricType::Histogram);
    assert_eq!(e.families[b.family.unwrap() as usize].name, "vllm:request_prompt_tokens");
    let labels = e.labels(b);
    assert!(labels.iter().any(|(n, v)| n == "le" && v == "1.0"), "le kept as written: {labels:?}");
    assert_eq!(sample(&e, "vllm:request_prompt_tokens_sum").kind, MetricType::Histogram);
    assert_eq!(sample(&e, "vllm:request_prompt_tokens_count").kind, MetricType::Histogram);
    let ok = sample(&e, "vllm:request_success_total");
    assert_eq!(ok.kind, MetricType::Counter);
    assert_eq!(e.families[ok.family.unwrap() as usize].name, "vllm:request_success_total");
    assert_eq!(sample(&e, "vllm:num_requests_running").kind, MetricType::Gauge);
    let created = sample(&e, "vllm:estimated_flops_per_gpu_created");
    assert_eq!(created.kind, MetricType::Gauge);
    assert_eq!(created.value, 1.7740114612872875e9);
    // Truncated capture: the last family is declared but has no samples.
    assert!(e.families.iter().any(|f| f.name == "http_request_duration_seconds" && f.kind == MetricType::Histogram));
}

#[test]
fn dcgm_metadata_first_and_values() {
    let body = read("dcgm-exporter-kops-l4.prom");
    let e = parse(&body, Format::PrometheusText).unwrap();
    assert_eq!(e.families.len(), 23);
    assert!(e.samples.iter().all(|s| s.family.is_some()), "every dcgm sample has a declared family");
    let energy = sample(&e, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION");
    assert_eq!(energy.kind, MetricType::Counter);
    assert_eq!(energy.value, 4742776.0);
    let l = e.labels(energy);
    assert_eq!(l.iter().find(|(n, _)| n == "DCGM_FI_DRIVER_VERSION").unwrap().1, "580.105.08");

    let body = read("dcgm-exporter-lke-rtx4000ada-k8s-pod-labels.prom");
    let e = parse(&body, Format::PrometheusText).unwrap();
    let xid = sample(&e, "DCGM_FI_DEV_XID_ERRORS");
    assert_eq!(xid.kind, MetricType::Gauge);
    let l = e.labels(xid);
    assert_eq!(l.iter().find(|(n, _)| n == "err_msg").unwrap().1, "No Error");
    assert_eq!(l.iter().find(|(n, _)| n == "pod_uid").unwrap().1, "");
}

#[test]
fn mig_partial_is_all_untyped() {
    let body = read("dcgm-exporter-2.x-nvidia-docs-a100-mig-partial.prom");
    let e = parse(&body, Format::PrometheusText).unwrap();
    assert!(e.families.is_empty());
    assert!(e.samples.iter().all(|s| s.kind == MetricType::Unknown && s.family.is_none()));
    assert_eq!(sample(&e, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").value, 0.929260);
    let mig =
        e.samples.iter().find(|s| e.labels(s).iter().any(|(n, v)| n == "GPU_I_PROFILE" && v == "1g.5gb")).unwrap();
    assert_eq!(mig.name, "DCGM_FI_DEV_XID_ERRORS");
    assert_eq!(mig.line, 19);
}

#[test]
fn dcgm_blank_sentinel() {
    // None of the captures happens to hold dcgm's "blank" sentinel; the value
    // must still come through as the nearest f64, never as an integer error.
    let e = parse(
        b"# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"0\"} 9223372036854775794\n",
        Format::PrometheusText,
    )
    .unwrap();
    assert_eq!(e.samples[0].value, 9223372036854775794_f64);
    assert_eq!(e.samples[0].kind, MetricType::Counter);
}

/// A scrape loop parses body after body into the buffers of the one before
/// (`Buffers`): every real capture, in turn, larger and smaller ones mixed,
/// parses to what a fresh parse gives, and the sample table stays in one
/// allocation once it is large enough.
#[test]
fn buffers_reused_across_bodies_give_what_a_fresh_parse_gives() {
    use infertel_exposition::{Buffers, parse_as_prometheus_known, parse_as_prometheus_known_in};
    let mut names = fixture_names();
    let largest = "vllm-v0.17-cncf-k8s-ai-conformance-kops.prom".to_string();
    // The largest first, so that every later parse fits its table.
    names.retain(|n| *n != largest);
    names.insert(0, largest);
    let mut buffers = Buffers::default();
    let mut table: Option<*const u8> = None;
    for round in 0..2 {
        for name in &names {
            let body = read(name);
            let fresh = parse_as_prometheus_known(&body, Format::PrometheusText, &mut |_: u128| None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let reused = parse_as_prometheus_known_in(&body, Format::PrometheusText, &mut |_: u128| None, &mut buffers)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(reused, fresh, "{name}, round {round}");
            let at = reused.samples.as_ptr().cast::<u8>();
            match table {
                None => table = Some(at),
                Some(t) => assert_eq!(t, at, "{name}: the sample table was allocated anew"),
            }
            buffers.recycle(reused);
        }
    }
}

/// A body past `Buffers::KEEP_LINES` lines is parsed, but its tables are
/// not kept: the next parse starts afresh (and is still right).
#[test]
fn buffers_do_not_keep_a_huge_body_s_tables() {
    use infertel_exposition::{Buffers, parse_as_prometheus_known_in};
    let mut huge = String::new();
    for i in 0..Buffers::KEEP_LINES + 10 {
        huge.push_str(&format!("x{{i=\"{i}\"}} {i}\n"));
    }
    let mut buffers = Buffers::default();
    let e = parse_as_prometheus_known_in(huge.as_bytes(), Format::PrometheusText, &mut |_: u128| None, &mut buffers)
        .expect("parses");
    assert_eq!(e.samples.len(), Buffers::KEEP_LINES + 10);
    buffers.recycle(e);
    let body = read("dcgm-exporter-kops-l4.prom");
    let e =
        parse_as_prometheus_known_in(&body, Format::PrometheusText, &mut |_: u128| None, &mut buffers).expect("parses");
    assert!(e.samples.capacity() < Buffers::KEEP_LINES, "the huge table was kept");
    assert_eq!(e.samples.len(), 23);
}
