//! Parse throughput on a real vLLM capture and on a generated 1,000-series
//! dcgm-like body, in both formats. Run: `cargo bench -p infertel-exposition`.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use infertel_exposition::{Format, parse};

fn shared() -> PathBuf {
    match std::env::var_os("INFERTEL_SHARED") {
        Some(s) => PathBuf::from(s),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
}

/// 1,000 series: 50 families of 20 series each, dcgm-style labels, metadata first.
fn generated(om: bool) -> Vec<u8> {
    let mut s = String::new();
    for f in 0..50 {
        s.push_str(&format!(
            "# HELP DCGM_FI_DEV_FIELD_{f} Field number {f} (in units).\n# TYPE DCGM_FI_DEV_FIELD_{f} gauge\n"
        ));
        for g in 0..20 {
            s.push_str(&format!(
                "DCGM_FI_DEV_FIELD_{f}{{gpu=\"{g}\",UUID=\"GPU-34319582-d595-d1c7-d1d2-{g:012}\",device=\"nvidia{g}\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"node-{g}\",container=\"vllm\",namespace=\"inference\",pod=\"vllm-{g}\"}} {}.{:06}\n",
                f * 1000 + g,
                g * 37
            ));
        }
    }
    if om {
        s.push_str("# EOF\n");
    }
    s.into_bytes()
}

fn bench(c: &mut Criterion) {
    let vllm = std::fs::read(shared().join("fixtures/real/vllm-v0.17-cncf-k8s-ai-conformance-kops.prom"))
        .expect("vLLM fixture");
    let gen_text = generated(false);
    let gen_om = generated(true);
    let inputs: [(&str, &[u8], Format); 3] = [
        ("vllm-v0.17-text", &vllm, Format::PrometheusText),
        ("generated-1000-text", &gen_text, Format::PrometheusText),
        ("generated-1000-openmetrics", &gen_om, Format::OpenMetrics),
    ];
    let mut group = c.benchmark_group("parse");
    for (name, body, format) in inputs {
        let n = parse(body, format).expect("bench input parses").samples.len();
        eprintln!("{name}: {} bytes, {n} samples", body.len());
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| b.iter(|| parse(black_box(body), format).map(|e| e.samples.len())));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
