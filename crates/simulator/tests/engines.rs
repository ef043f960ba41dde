//! The simulator speaking as SGLang, TGI, llama.cpp, trtllm-serve and
//! Dynamo's frontend: the page keeps the template's families, HELP and
//! TYPE lines in order (the exposition written from each server's source),
//! its counters grow by what the simulated engine did between two renders,
//! and every histogram stays cumulative with `+Inf` equal to `_count`.

use infertel_simulator::{ServerKind, SimConfig, Simulator};
use std::collections::BTreeMap;

const T0: f64 = 1_774_011_461.287;

fn template(kind: ServerKind) -> String {
    let file = match kind {
        ServerKind::Sglang => "sglang.prom",
        ServerKind::Tgi => "tgi.prom",
        ServerKind::Llamacpp => "llamacpp.prom",
        ServerKind::Trtllm => "trtllm-serve.prom",
        ServerKind::Dynamo => "dynamo-frontend.prom",
        ServerKind::Vllm => unreachable!(),
    };
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/engines").join(file),
    )
    .unwrap()
}

/// (series text before the value, value) of every sample line.
fn samples(page: &str) -> Vec<(String, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (s, v) = l.rsplit_once(' ').unwrap();
            (s.to_string(), v.parse::<f64>().unwrap_or_else(|_| panic!("{l}")))
        })
        .collect()
}

fn value(page: &str, series_prefix: &str) -> f64 {
    samples(page).into_iter().find(|(s, _)| s.starts_with(series_prefix)).unwrap_or_else(|| panic!("{series_prefix}")).1
}

const KINDS: [ServerKind; 5] =
    [ServerKind::Sglang, ServerKind::Tgi, ServerKind::Llamacpp, ServerKind::Trtllm, ServerKind::Dynamo];

#[test]
fn each_server_keeps_its_template_and_its_counters_follow_the_engine() {
    for kind in KINDS {
        let mut sim = Simulator::new(SimConfig { server: kind, concurrency: 12.0, ..SimConfig::default() }, T0);
        sim.advance_to(T0 + 30.0);
        let a = sim.render_server();
        sim.advance_to(T0 + 90.0);
        let b = sim.render_server();
        let t = template(kind);
        // The same lines in the same order; only values differ.
        let meta = |p: &str| p.lines().filter(|l| l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(meta(&a), meta(&t), "{kind:?}: HELP and TYPE as the template");
        let names = |p: &str| samples(p).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        assert_eq!(names(&b), names(&t), "{kind:?}: the template's series, in order");
        // Counters never go down; the generated-token counter grows by
        // what the engine generated (the one number every server has).
        let (sa, sb) = (samples(&a), samples(&b));
        for ((s, x), (_, y)) in sa.iter().zip(sb.iter()) {
            let counter = s.contains("_total") || s.contains("_bucket") || s.contains("_count") || s.contains("_sum");
            if counter {
                assert!(y >= x, "{kind:?}: {s} went from {x} to {y}");
            }
        }
        let gen_counter = match kind {
            ServerKind::Sglang => "sglang:generation_tokens_total{",
            ServerKind::Tgi => "tgi_request_generated_tokens_sum",
            ServerKind::Llamacpp => "llamacpp:tokens_predicted_total",
            ServerKind::Trtllm => "trtllm_generation_tokens_total{",
            ServerKind::Dynamo => "dynamo_frontend_output_tokens_total{",
            ServerKind::Vllm => unreachable!(),
        };
        let grew = value(&b, gen_counter) - value(&a, gen_counter);
        // vLLM's page of the same engine counts the same tokens: as they are
        // generated (Dynamo's frontend, per chunk, as vLLM), or when the
        // request finishes (SGLang, trtllm-serve, llama.cpp, TGI's
        // per-request histogram), as vLLM's request_generation_tokens does.
        let vllm_name = if kind == ServerKind::Dynamo {
            "vllm:generation_tokens_total{"
        } else {
            "vllm:request_generation_tokens_sum{"
        };
        let mut vllm = Simulator::new(SimConfig { concurrency: 12.0, ..SimConfig::default() }, T0);
        vllm.advance_to(T0 + 30.0);
        let va = value(&vllm.render_vllm(), vllm_name);
        vllm.advance_to(T0 + 90.0);
        let vb = value(&vllm.render_vllm(), vllm_name);
        let want = vb - va;
        assert!(want > 1_000.0, "the engine generated tokens: {want}");
        if kind == ServerKind::Llamacpp {
            // Six significant digits, as llama.cpp prints.
            assert!((grew - want).abs() <= 20.0, "{kind:?}: {grew} vs {want}");
        } else {
            assert_eq!(grew, want, "{kind:?}");
        }
        // Histograms: cumulative, +Inf = _count, per child.
        let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut counts: BTreeMap<String, f64> = BTreeMap::new();
        for (s, v) in &sb {
            if let Some((name, rest)) = s.split_once("_bucket{") {
                let le_part = rest.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                let le = if le_part == "+Inf" { f64::INFINITY } else { le_part.parse().unwrap() };
                let child = format!("{name}|{}", rest.replace(&format!("le=\"{le_part}\""), ""));
                buckets.entry(child).or_default().push((le, *v));
            } else if let Some((name, rest)) = s.split_once("_count") {
                counts.insert(format!("{name}|{}", rest.trim_start_matches('{').trim_end_matches('}')), *v);
            }
        }
        for (child, mut b) in buckets {
            b.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap());
            assert!(b.windows(2).all(|w| w[0].1 <= w[1].1), "{kind:?}: {child} not cumulative: {b:?}");
            let inf = b.last().unwrap();
            assert!(inf.0.is_infinite(), "{kind:?}: {child} has +Inf");
            let key = child.replace(",}", "}").replace("{,", "{");
            let n = counts.iter().find(|(k, _)| {
                let norm = |x: &str| {
                    x.replace(['{', '}'], "")
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect::<std::collections::BTreeSet<_>>()
                };
                let (kn, kl) = k.split_once('|').unwrap();
                let (cn, cl) = key.split_once('|').unwrap();
                kn == cn && norm(kl) == norm(cl)
            });
            if let Some((_, n)) = n {
                assert_eq!(inf.1, *n, "{kind:?}: {child} +Inf = _count");
            }
        }
    }
}
