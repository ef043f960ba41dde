//! Behavioural tests: the dynamics tell the article's story and the
//! expositions look exactly like the real captures.

use std::collections::HashMap;

use infertel_simulator::{SimConfig, Simulator};

const T0: f64 = 1_774_011_461.287;

/// One parsed sample: family metadata is checked separately.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    raw_value: String,
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    // Values here never contain `",` so a simple split is enough.
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest.find("=\"").expect("label has =\"");
        let name = rest[..eq].to_string();
        let after = &rest[eq + 2..];
        let mut end = 0;
        let bytes = after.as_bytes();
        while bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        out.push((name, after[..end].to_string()));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    out
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample has a value");
            let (name, labels) = match series.find('{') {
                Some(i) => (&series[..i], parse_labels(&series[i + 1..series.len() - 1])),
                None => (series, Vec::new()),
            };
            let v = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {l}")),
            };
            Sample { name: name.into(), labels, value: v, raw_value: value.into() }
        })
        .collect()
}

fn key(s: &Sample) -> String {
    let l: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}{{{}}}", s.name, l.join(","))
}

fn values(text: &str) -> HashMap<String, f64> {
    parse(text).iter().map(|s| (key(s), s.value)).collect()
}

/// Sum of all series of `name` (across label sets).
fn total(text: &str, name: &str) -> f64 {
    parse(text).iter().filter(|s| s.name == name).map(|s| s.value).sum()
}

/// `# TYPE` of every family.
fn types(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (n, t) = l.split_once(' ').expect("TYPE name type");
            (n.to_string(), t.to_string())
        })
        .collect()
}

/// The family a sample belongs to, given the declared families.
fn family_of<'a>(name: &str, fams: &'a HashMap<String, String>) -> Option<(&'a str, &'a str)> {
    if let Some((n, t)) = fams.get_key_value(name) {
        return Some((n, t));
    }
    for suf in ["_bucket", "_count", "_sum"] {
        if let Some(base) = name.strip_suffix(suf)
            && let Some((n, t)) = fams.get_key_value(base)
            && (t == "histogram" || t == "summary")
        {
            return Some((n, t));
        }
    }
    None
}

fn sim(concurrency: f64) -> Simulator {
    Simulator::new(SimConfig { concurrency, ..SimConfig::default() }, T0)
}

#[test]
fn counters_and_histograms_never_go_back() {
    let mut s = sim(8.0);
    let mut t = T0;
    let mut prev_v: HashMap<String, f64> = HashMap::new();
    let mut prev_d: HashMap<String, f64> = HashMap::new();
    let plan = [8.0, 32.0, 0.0, 16.0, 3.0, 40.0];
    for i in 0..240 {
        if i % 40 == 0 {
            s.set_concurrency(plan[i / 40]);
        }
        // Irregular scrape cadence, including sub-step and long gaps.
        t += [0.004, 1.0, 15.0, 0.37, 30.0, 2.5][i % 6];
        s.advance_to(t);
        let v = s.render_vllm();
        let d = s.render_dcgm();
        for (text, prev) in [(&v, &mut prev_v), (&d, &mut prev_d)] {
            let fams = types(text);
            for smp in parse(text) {
                let (fam, typ) = family_of(&smp.name, &fams).expect("declared family");
                let cumulative = typ == "counter"
                    || ((typ == "histogram" || typ == "summary") && fam != smp.name)
                    || smp.name.ends_with("_created");
                let k = key(&smp);
                if cumulative && let Some(p) = prev.get(&k) {
                    assert!(smp.value >= *p, "{k} went from {p} to {}", smp.value);
                    if smp.name.ends_with("_created") {
                        assert_eq!(smp.value, *p, "{k} changed");
                    }
                }
                prev.insert(k, smp.value);
            }
        }
    }
    assert!(prev_v.values().any(|v| *v > 0.0));
}

#[test]
fn histogram_invariants_hold() {
    let mut s = sim(24.0);
    s.advance_to(T0 + 300.0);
    let text = s.render_vllm();
    let fams = types(&text);
    let samples = parse(&text);
    let mut checked = 0;
    for (fam, typ) in &fams {
        if typ != "histogram" {
            continue;
        }
        // Group by label set without `le`.
        let mut groups: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
        for smp in samples.iter().filter(|x| x.name == format!("{fam}_bucket")) {
            let le = smp.labels.iter().find(|(k, _)| k == "le").expect("le").1.clone();
            let rest: Vec<_> = smp.labels.iter().filter(|(k, _)| k != "le").cloned().collect();
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
            groups.entry(format!("{rest:?}")).or_default().push((le, smp.value));
        }
        for (labels, buckets) in groups {
            assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0), "{fam}: le not ascending");
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{fam}: counts not monotone");
            let (le, inf) = *buckets.last().unwrap();
            assert_eq!(le, f64::INFINITY, "{fam}: last bucket is +Inf");
            let count = samples
                .iter()
                .find(|x| x.name == format!("{fam}_count") && format!("{:?}", x.labels) == labels)
                .expect("count")
                .value;
            assert_eq!(inf, count, "{fam}: +Inf != _count");
            checked += 1;
        }
    }
    assert!(checked >= 17, "only {checked} histograms checked");
    assert!(total(&text, "vllm:e2e_request_latency_seconds_count") > 100.0);
}

/// Mean of a histogram between two renders.
fn delta_mean(a: &str, b: &str, name: &str) -> f64 {
    let ds = total(b, &format!("{name}_sum")) - total(a, &format!("{name}_sum"));
    let dc = total(b, &format!("{name}_count")) - total(a, &format!("{name}_count"));
    assert!(dc > 0.0, "{name}: no observations");
    ds / dc
}

#[test]
fn overload_queues_and_raises_queue_time_and_ttft() {
    let run = |c: f64| {
        let mut s = sim(c);
        s.advance_to(T0 + 120.0);
        let a = s.render_vllm();
        let mut waiting_seen = 0.0_f64;
        for i in 1..=60 {
            s.advance_to(T0 + 120.0 + 10.0 * f64::from(i));
            waiting_seen = waiting_seen.max(s.waiting() as f64);
            assert!(s.running() <= 16, "running above capacity");
        }
        let b = s.render_vllm();
        let w = total(&b, "vllm:num_requests_waiting");
        (
            waiting_seen,
            w,
            delta_mean(&a, &b, "vllm:request_queue_time_seconds"),
            delta_mean(&a, &b, "vllm:time_to_first_token_seconds"),
        )
    };
    let (max_w8, _, q8, ttft8) = run(8.0);
    let (max_w32, w32, q32, ttft32) = run(32.0);
    assert_eq!(max_w8, 0.0);
    assert!(max_w32 > 0.0 && w32 > 0.0, "no queue at 32 over capacity 16");
    assert!(q8 < 0.001, "queue time at 8 = {q8}");
    assert!(q32 > 1.0 && q32 > 1000.0 * q8, "queue {q8} -> {q32}");
    assert!(ttft32 > 10.0 * ttft8, "ttft {ttft8} -> {ttft32}");
    // Below capacity TTFT still rises a little with batch size.
    let (_, _, _, ttft14) = run(14.0);
    assert!(ttft14 > ttft8, "ttft {ttft8} -> {ttft14}");
}

#[test]
fn article_workload_reproduces_the_measurements() {
    let mut s = Simulator::new(SimConfig::article_workload(), T0);
    s.advance_to(T0 + 60.0);
    let a = s.render_vllm();
    s.advance_to(T0 + 420.0);
    let b = s.render_vllm();
    let d = s.render_dcgm();
    let decode = total(&b, "vllm:request_decode_time_seconds_sum") - total(&a, "vllm:request_decode_time_seconds_sum");
    let e2e = total(&b, "vllm:e2e_request_latency_seconds_sum") - total(&a, "vllm:e2e_request_latency_seconds_sum");
    let share = decode / e2e;
    assert!((share - 0.97).abs() <= 0.02, "decode share {share}");
    let ms = |n: &str| delta_mean(&a, &b, n) * 1000.0;
    let (queue, prefill, ttft, itl) = (
        ms("vllm:request_queue_time_seconds"),
        ms("vllm:request_prefill_time_seconds"),
        ms("vllm:time_to_first_token_seconds"),
        ms("vllm:inter_token_latency_seconds"),
    );
    assert!(queue < 0.05, "queue {queue} ms (article 0.01)");
    assert!((prefill - 37.98).abs() < 8.0, "prefill {prefill} ms (article 37.98)");
    assert!((ttft - 51.0).abs() < 10.0, "ttft {ttft} ms (article 51)");
    assert!((itl - 16.0).abs() < 2.0, "itl {itl} ms (article 16)");
    let decode_ms = ms("vllm:request_decode_time_seconds");
    assert!((decode_ms - 1664.69).abs() < 150.0, "decode {decode_ms} ms (article 1664.69)");
    let gen_rate = (total(&b, "vllm:generation_tokens_total") - total(&a, "vllm:generation_tokens_total")) / 360.0;
    assert!((gen_rate - 479.1).abs() < 30.0, "generated {gen_rate} tok/s (article 479.1)");
    let per_iter = delta_mean(&a, &b, "vllm:iteration_tokens_total");
    assert!((per_iter - 10.36).abs() < 1.0, "tokens/iteration {per_iter} (article 10.36)");
    // dcgm: saturated but memory bound.
    let dv = values(&d);
    let get = |n: &str| dv.iter().find(|(k, _)| k.starts_with(&format!("{n}{{"))).map(|(_, v)| *v).unwrap();
    assert_eq!(get("DCGM_FI_DEV_GPU_UTIL"), 100.0);
    assert!(get("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") < 0.2);
    assert!(get("DCGM_FI_PROF_DRAM_ACTIVE") > 0.7);
    let (used, free) = (get("DCGM_FI_DEV_FB_USED"), get("DCGM_FI_DEV_FB_FREE"));
    assert_eq!((used, free), (21483.0, 1352.0));
}

#[test]
fn decode_dominates_with_default_long_answers() {
    let mut s = sim(8.0);
    s.advance_to(T0 + 60.0);
    let a = s.render_vllm();
    s.advance_to(T0 + 600.0);
    let b = s.render_vllm();
    let share =
        delta_mean(&a, &b, "vllm:request_decode_time_seconds") / delta_mean(&a, &b, "vllm:e2e_request_latency_seconds");
    assert!(share > 0.95 && share < 1.0, "decode share {share}");
}

#[test]
fn prefix_cache_hit_ratio_follows_config() {
    for reuse in [0.325, 0.6, 0.0] {
        let cfg = SimConfig { prefix_reuse: reuse, output_tokens_mean: 200.0, ..SimConfig::default() };
        let mut s = Simulator::new(cfg, T0);
        s.advance_to(T0 + 600.0);
        let t = s.render_vllm();
        let q = total(&t, "vllm:prefix_cache_queries_total");
        let h = total(&t, "vllm:prefix_cache_hits_total");
        assert!(q > 10_000.0);
        assert!((h / q - reuse).abs() < 0.015, "reuse {reuse}: ratio {}", h / q);
        assert_eq!(total(&t, "vllm:prompt_tokens_cached_total"), h);
        assert_eq!(total(&t, "vllm:prompt_tokens_total"), q);
        assert_eq!(total(&t, "vllm:prompt_tokens_by_source_total"), q);
    }
}

#[test]
fn kv_usage_rises_with_concurrency_to_about_0_6_at_capacity() {
    let avg_kv = |c: f64| {
        let mut s = sim(c);
        s.advance_to(T0 + 120.0);
        let mut acc = 0.0;
        for i in 1..=300 {
            s.advance_to(T0 + 120.0 + 2.0 * f64::from(i));
            acc += s.kv_cache_usage();
        }
        acc / 300.0
    };
    let (k4, k16) = (avg_kv(4.0), avg_kv(16.0));
    assert!(k4 < k16, "kv {k4} -> {k16}");
    assert!((k16 - 0.6).abs() < 0.12, "kv at capacity {k16}");
}

#[test]
fn energy_counter_integrates_power() {
    let mut s = sim(16.0);
    s.advance_to(T0 + 60.0);
    let energy = |s: &Simulator| {
        let d = s.render_dcgm();
        (total(&d, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), total(&d, "DCGM_FI_DEV_POWER_USAGE"))
    };
    let (e0, p0) = energy(&s);
    s.advance_to(T0 + 360.0);
    let (e1, p1) = energy(&s);
    let expected = (p0 + p1) / 2.0 * 300.0 * 1000.0;
    assert!(((e1 - e0) / expected - 1.0).abs() < 0.02, "ΔE {} vs P·Δt {expected}", e1 - e0);
    assert!((p1 - 240.0).abs() < 10.0, "power at capacity {p1}");
    // Idle: power drops, energy keeps counting at the idle rate.
    s.set_concurrency(0.0);
    s.advance_to(T0 + 600.0);
    let (e2, p2) = energy(&s);
    s.advance_to(T0 + 900.0);
    let (e3, p3) = energy(&s);
    assert!(p2 < 100.0 && (p3 - p2).abs() < 1.0);
    assert!(((e3 - e2) / (p3 * 300.0 * 1000.0) - 1.0).abs() < 0.01);
    let util = total(&s.render_dcgm(), "DCGM_FI_DEV_GPU_UTIL");
    assert_eq!(util, 0.0);
}

#[test]
fn same_seed_same_output_and_engine_ignores_scrape_cadence() {
    let mut a = sim(12.0);
    let mut b = sim(12.0);
    let mut c = sim(12.0);
    for i in 1..=300 {
        a.advance_to(T0 + f64::from(i));
        b.advance_to(T0 + f64::from(i));
    }
    c.advance_to(T0 + 300.0);
    assert_eq!(a.render_vllm(), b.render_vllm());
    assert_eq!(a.render_dcgm(), b.render_dcgm());
    // Scrape timing changes only float rounding in the integrated gauges,
    // never what the engine did.
    let engine = |s: &Simulator| -> Vec<String> {
        s.render_vllm().lines().filter(|l| l.starts_with("vllm:")).map(String::from).collect()
    };
    assert_eq!(engine(&a), engine(&c));
    let other = Simulator::new(SimConfig { concurrency: 12.0, seed: 7, ..SimConfig::default() }, T0);
    let mut other = other;
    other.advance_to(T0 + 300.0);
    assert_ne!(engine(&other), engine(&c));
}

/// Checks the vLLM exposition against the style of the real v0.17 capture.
fn check_vllm_style(text: &str) {
    let mut helps: HashMap<&str, &str> = HashMap::new();
    let mut declared: HashMap<String, String> = HashMap::new();
    let mut last_type: Option<String> = None;
    let mut created_families = 0;
    let mut with_samples: std::collections::HashSet<String> = Default::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (n, h) = rest.split_once(' ').expect("HELP name text");
            helps.insert(n, h);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (n, t) = rest.split_once(' ').unwrap();
            assert!(helps.contains_key(n), "TYPE before HELP for {n}");
            assert!(["counter", "gauge", "histogram", "summary"].contains(&t), "{line}");
            if t == "counter" {
                assert!(n.ends_with("_total"), "counter TYPE without _total: {n}");
            }
            if n.ends_with("_created") {
                assert_eq!(t, "gauge");
                created_families += 1;
            }
            declared.insert(n.to_string(), t.to_string());
            last_type = Some(n.to_string());
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment {line}");
        let smp = &parse(line)[0];
        let fam = last_type.as_deref().expect("sample before any TYPE");
        let (f, _) = family_of(&smp.name, &declared).unwrap_or_else(|| panic!("undeclared: {line}"));
        assert_eq!(f, fam, "sample outside its family block: {line}");
        with_samples.insert(f.to_string());
        let name_ok = smp
            .name
            .chars()
            .enumerate()
            .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()));
        assert!(name_ok, "bad name {}", smp.name);
        // Python floats: always a fractional part or an exponent.
        let v = &smp.raw_value;
        assert!(v.contains('.') || v.contains('e') || v == "+Inf", "value without fraction: {line}");
        let names: Vec<&str> = smp.labels.iter().map(|(k, _)| k.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "labels not sorted: {line}");
        if smp.name.starts_with("vllm:") && smp.name != "vllm:cache_config_info" {
            assert!(names.contains(&"engine") && names.contains(&"model_name"), "{line}");
        }
    }
    // Every counter and histogram with children has its _created companion
    // (labelled HTTP families have none until their first request).
    for (n, t) in declared.iter().filter(|(n, _)| with_samples.contains(*n)) {
        let base = match t.as_str() {
            "counter" if !n.starts_with("python_") && !n.starts_with("process_") => {
                n.strip_suffix("_total").unwrap().to_string()
            }
            "histogram" | "summary" => n.clone(),
            _ => continue,
        };
        assert!(declared.contains_key(&format!("{base}_created")), "no _created for {n}");
    }
    assert!(created_families > 25, "{created_families} _created families");
}

#[test]
fn vllm_exposition_matches_real_capture_style() {
    let mut s = sim(20.0);
    s.advance_to(T0 + 90.0);
    let text = s.render_vllm();
    check_vllm_style(&text);
    for needle in [
        "# TYPE vllm:iteration_tokens_total histogram",
        "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"}",
        "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"Qwen/Qwen2.5-3B-Instruct\"}",
        "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"2000.0\",model_name=",
        "http_requests_total{handler=\"/v1/chat/completions\",method=\"POST\",status=\"2xx\"}",
        "http_request_duration_seconds_bucket{handler=\"/v1/chat/completions\",le=\"0.1\",method=\"POST\"}",
        "process_max_fds 1.048576e+06\n",
        "process_virtual_memory_bytes 9.035190272e+09\n",
        "# HELP http_request_size_bytes Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. \n",
        "vllm:num_requests_waiting_by_reason{engine=\"0\",model_name=\"Qwen/Qwen2.5-3B-Instruct\",reason=\"capacity\"} 4.0\n",
    ] {
        assert!(text.contains(needle), "missing {needle:?}");
    }
    // The wire must never carry retired names.
    for gone in ["vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds", "prompt_tokens_recomputed"] {
        assert!(!text.contains(gone), "{gone} present");
    }
    // Before any request only the HELP/TYPE of the labelled HTTP families exist.
    let fresh = Simulator::new(SimConfig { concurrency: 0.0, ..SimConfig::default() }, T0).render_vllm();
    check_vllm_style(&fresh);
    assert!(fresh.contains("# TYPE http_requests_total counter\n# HELP http_request_size_bytes"));
    assert!(!fresh.contains("http_requests_created"));
}

#[test]
fn dcgm_exposition_matches_real_capture_style() {
    let cfg = SimConfig { gpu_count: 2, ..SimConfig::default() };
    let mut s = Simulator::new(cfg, T0);
    s.advance_to(T0 + 30.0);
    let text = s.render_dcgm();
    let lines: Vec<&str> = text.lines().collect();
    // HELP, TYPE, then one sample per GPU, field after field.
    assert_eq!(lines.len() % 4, 0);
    let mut fields = 0;
    for chunk in lines.chunks(4) {
        let name = chunk[0].strip_prefix("# HELP ").unwrap().split(' ').next().unwrap();
        assert!(chunk[1].starts_with(&format!("# TYPE {name} ")));
        let typ = chunk[1].rsplit(' ').next().unwrap();
        assert!(typ == "gauge" || typ == "counter");
        assert!(!name.ends_with("_total") && !name.contains("_created"));
        for (i, l) in chunk[2..].iter().enumerate() {
            assert!(l.starts_with(&format!("{name}{{gpu=\"{i}\",UUID=\"GPU-")), "{l}");
            assert!(l.contains(&format!(",device=\"nvidia{i}\",modelName=\"NVIDIA A10G\",Hostname=\"")));
            assert!(l.contains(",container=\"\","));
            assert!(l.ends_with(&format!("namespace=\"\",pod=\"\",pod_uid=\"\"}} {}", l.rsplit(' ').next().unwrap())));
            assert!(!l.contains(", "), "no space after commas: {l}");
            let v = l.rsplit(' ').next().unwrap();
            if name.starts_with("DCGM_FI_PROF_") && !name.contains("PCIE") || name == "DCGM_FI_DEV_POWER_USAGE" {
                let (_, frac) = v.split_once('.').expect("%f value");
                assert_eq!(frac.len(), 6, "{l}");
            } else {
                assert!(v.parse::<i64>().is_ok(), "%d value: {l}");
            }
        }
        fields += 1;
    }
    assert_eq!(fields, 24);
    let v = values(&text);
    for (k, val) in &v {
        if k.starts_with("DCGM_FI_PROF_") && !k.contains("PCIE") {
            assert!((0.0..=1.0).contains(val), "{k} = {val}");
        }
        if k.starts_with("DCGM_FI_DEV_GPU_UTIL") {
            assert!((0.0..=100.0).contains(val));
        }
    }
    assert!(text.contains("err_code=\"0\",err_msg=\"No Error\",namespace=\"\""));
}

/// Plain HTTP/1.1 GET over a TCP stream; returns (status line, headers, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(String, String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8(buf).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Ok((status.to_string(), headers.to_ascii_lowercase(), body.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_metrics_over_http() {
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let srv = infertel_simulator::serve(SimConfig::default(), any, any).await.expect("bind");
    assert_ne!(srv.vllm_addr.port(), 0);
    assert_ne!(srv.dcgm_addr.port(), srv.vllm_addr.port());

    let (status, headers, body) = http_get(srv.vllm_addr, "/metrics").await.unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(headers.contains("content-type: text/plain; version=0.0.4; charset=utf-8"), "{headers}");
    assert!(body.contains("# TYPE vllm:num_requests_running gauge"));
    // Body may be chunked; the checker works line by line on the exposition.
    if !headers.contains("transfer-encoding: chunked") {
        check_vllm_style(&body);
    }

    let (status, _, body) = http_get(srv.dcgm_addr, "/metrics").await.unwrap();
    assert!(status.starts_with("HTTP/1.1 200"));
    assert!(body.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""));

    let (status, _, _) = http_get(srv.vllm_addr, "/nope").await.unwrap();
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");

    // Wall-clock time moves the simulator: the counters grow between scrapes.
    srv.set_concurrency(16.0);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, _, body) = http_get(srv.vllm_addr, "/metrics").await.unwrap();
    assert!(total(&body, "vllm:generation_tokens_total") > 0.0);
    assert_eq!(srv.simulator().lock().unwrap().config().concurrency, 16.0);

    let addr = srv.vllm_addr;
    srv.shutdown();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(http_get(addr, "/metrics").await.is_err(), "still serving after shutdown");
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let srv = infertel_simulator::serve(SimConfig::default(), any, any).await.unwrap();
    let addr = srv.dcgm_addr;
    assert!(http_get(addr, "/metrics").await.is_ok());
    drop(srv);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(http_get(addr, "/metrics").await.is_err(), "still serving after drop");
}
