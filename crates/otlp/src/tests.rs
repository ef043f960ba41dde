use super::*;
use infertel_model::{Label, Sample, stale_nan};
use opentelemetry_proto::tonic::metrics::v1::metric::Data as D;

/// Parses exposition text the way the receiver does: series with job and
/// instance added, all at `ts_ms`, plus the family metadata.
fn scrape(text: &str, ts_ms: i64) -> (Vec<Series>, Vec<Metadata>) {
    let exp = infertel_exposition::parse(text.as_bytes(), infertel_exposition::Format::PrometheusText).unwrap();
    let series = exp
        .samples
        .iter()
        .map(|s| {
            let mut l: Vec<Label> = exp.labels(s).iter().map(|(n, v)| Label::new(&**n, &**v)).collect();
            l.push(Label::new(METRIC_NAME, &*s.name));
            l.push(Label::new("job", "vllm"));
            l.push(Label::new("instance", "10.0.0.1:8000"));
            Series {
                labels: Labels::from_vec(l),
                samples: infertel_model::samples![Sample { timestamp_ms: ts_ms, value: s.value }],
            }
        })
        .collect();
    let md = exp
        .families
        .iter()
        .map(|f| Metadata {
            family: (*f.name).into(),
            kind: f.kind,
            help: f.help.as_deref().unwrap_or("").into(),
            unit: f.unit.as_deref().unwrap_or("").into(),
        })
        .collect();
    (series, md)
}

fn metrics(req: &ExportMetricsServiceRequest) -> Vec<&Metric> {
    req.resource_metrics.iter().flat_map(|r| &r.scope_metrics).flat_map(|s| &s.metrics).collect()
}

fn find<'a>(req: &'a ExportMetricsServiceRequest, name: &str) -> &'a Metric {
    metrics(req).into_iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no metric {name}"))
}

fn attr(kvs: &[KeyValue], k: &str) -> Option<String> {
    kvs.iter().find(|x| x.key == k).and_then(|x| match &x.value.as_ref()?.value {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    })
}

const VLLM: &str = r#"# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 100.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{model_name="m"} 1.7e+09
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# HELP vllm:e2e_request_latency_seconds Latency.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_sum{model_name="m"} 12.5
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7.0
vllm:e2e_request_latency_seconds_count{model_name="m"} 7.0
# HELP vllm:e2e_request_latency_seconds_created Latency.
# TYPE vllm:e2e_request_latency_seconds_created gauge
vllm:e2e_request_latency_seconds_created{model_name="m"} 1.6e+09
"#;

#[test]
fn classify_follows_families_and_suffixes() {
    let (_, md) = scrape(VLLM, 1);
    let mut st = MetadataStore::default();
    st.update(&md);
    assert_eq!(st.classify("vllm:prompt_tokens_total").role, Role::Value);
    assert_eq!(st.classify("vllm:prompt_tokens_total").kind, MetricType::Counter);
    let c = st.classify("vllm:prompt_tokens_created");
    assert_eq!((c.family.as_str(), c.role), ("vllm:prompt_tokens_total", Role::Created));
    let c = st.classify("vllm:e2e_request_latency_seconds_bucket");
    assert_eq!(
        (c.family.as_str(), c.kind, c.role),
        ("vllm:e2e_request_latency_seconds", MetricType::Histogram, Role::Bucket)
    );
    assert_eq!(st.classify("vllm:e2e_request_latency_seconds_created").role, Role::Created);
    assert_eq!(st.classify("vllm:e2e_request_latency_seconds_count").role, Role::Count);
    assert_eq!(st.classify("nothing_known").kind, MetricType::Unknown);
    // A plain gauge whose name ends in _created stays a gauge.
    st.update(&[Metadata { family: "x_created".into(), kind: MetricType::Gauge, help: "".into(), unit: "".into() }]);
    assert_eq!(st.classify("x_created").role, Role::Value);
}

#[test]
fn otel_mapping_of_counter_gauge_histogram_with_created() {
    let (series, md) = scrape(VLLM, 1_700_000_000_000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let mut c = Converter::new(Naming::Otel, false);
    let req = c.convert(&series, &st, &TargetInfo::default()).unwrap();
    assert_eq!(req.resource_metrics.len(), 1);
    let r = req.resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(attr(&r.attributes, "service.name").as_deref(), Some("vllm"));
    assert_eq!(attr(&r.attributes, "service.instance.id").as_deref(), Some("10.0.0.1:8000"));
    let scope = req.resource_metrics[0].scope_metrics[0].scope.as_ref().unwrap();
    assert_eq!(scope.name, "infertel");
    let names: Vec<&str> = metrics(&req).iter().map(|m| m.name.as_str()).collect();
    assert!(
        !names.iter().any(|n| n.ends_with("_created")),
        "created gauges used as start times are not forwarded: {names:?}"
    );
    assert_eq!(names.len(), 3, "{names:?}");

    let m = find(&req, "vllm:prompt_tokens_total");
    assert_eq!(m.description, "Number of prefill tokens processed.");
    assert_eq!(attr(&m.metadata, "prometheus.type").as_deref(), Some("counter"));
    let Some(D::Sum(s)) = &m.data else { panic!("counter is a sum") };
    assert!(s.is_monotonic);
    assert_eq!(s.aggregation_temporality, AggregationTemporality::Cumulative as i32);
    let p = &s.data_points[0];
    assert_eq!(p.start_time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(p.time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(p.value, Some(number_data_point::Value::AsDouble(100.0)));
    assert_eq!(attr(&p.attributes, "model_name").as_deref(), Some("m"));
    assert_eq!(attr(&p.attributes, "job"), None, "job is a resource attribute");

    let Some(D::Gauge(g)) = &find(&req, "vllm:num_requests_running").data else { panic!("gauge") };
    assert_eq!(g.data_points[0].start_time_unix_nano, 0);

    let Some(D::Histogram(h)) = &find(&req, "vllm:e2e_request_latency_seconds").data else { panic!("histogram") };
    let p = &h.data_points[0];
    assert_eq!(p.explicit_bounds, vec![0.5, 1.0]);
    assert_eq!(p.bucket_counts, vec![2, 3, 2]);
    assert_eq!(p.count, 7);
    assert_eq!(p.sum, Some(12.5));
    assert_eq!(p.start_time_unix_nano, 1_600_000_000_000_000_000);
    assert_eq!(attr(&p.attributes, "le"), None);
}

#[test]
fn start_time_is_first_seen_and_moves_on_reset() {
    let text = "# TYPE c_total counter\nc_total 10\n";
    let mut st = MetadataStore::default();
    let mut c = Converter::new(Naming::Otel, false);
    let point = |c: &mut Converter, st: &mut MetadataStore, v: f64, ts: i64| {
        let (mut s, md) = scrape(text, ts);
        st.update(&md);
        s[0].samples[0].value = v;
        let req = c.convert(&s, st, &TargetInfo::default()).unwrap();
        let Some(D::Sum(sum)) = &find(&req, "c_total").data else { panic!() };
        sum.data_points[0].clone()
    };
    assert_eq!(point(&mut c, &mut st, 10.0, 1000).start_time_unix_nano, 1_000_000_000);
    assert_eq!(point(&mut c, &mut st, 15.0, 2000).start_time_unix_nano, 1_000_000_000);
    // Reset: the start moves to just after the last point before it.
    assert_eq!(point(&mut c, &mut st, 2.0, 3000).start_time_unix_nano, 2_001_000_000);
    assert_eq!(point(&mut c, &mut st, 4.0, 4000).start_time_unix_nano, 2_001_000_000);
    // Stale: flagged, no value, stream forgotten.
    let p = point(&mut c, &mut st, stale_nan(), 5000);
    assert_eq!(p.flags, NO_RECORDED_VALUE);
    assert_eq!(p.value, None);
    assert_eq!(point(&mut c, &mut st, 1.0, 6000).start_time_unix_nano, 6_000_000_000);
}

#[test]
fn histogram_rules_no_count_dropped_no_sum_unset_stale_flagged() {
    let text = "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 3\nh_count 3\n# TYPE g histogram\ng_bucket{le=\"1\"} 1\ng_sum 4\n";
    let (s, md) = scrape(text, 1000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let mut c = Converter::new(Naming::Otel, false);
    let req = c.convert(&s, &st, &TargetInfo::default()).unwrap();
    assert!(metrics(&req).iter().all(|m| m.name != "g"), "no _count: dropped");
    let Some(D::Histogram(h)) = &find(&req, "h").data else { panic!() };
    assert_eq!(h.data_points[0].sum, None);
    assert_eq!(h.data_points[0].bucket_counts, vec![1, 2]);
    // Staleness on every series of the histogram.
    let stale: Vec<Series> = s
        .iter()
        .filter(|x| x.labels.metric_name().starts_with("h_"))
        .map(|x| Series {
            labels: x.labels.clone(),
            samples: infertel_model::samples![Sample { timestamp_ms: 2000, value: stale_nan() }],
        })
        .collect();
    let req = c.convert(&stale, &st, &TargetInfo::default()).unwrap();
    let Some(D::Histogram(h)) = &find(&req, "h").data else { panic!() };
    assert_eq!(h.data_points[0].flags, NO_RECORDED_VALUE);
    assert_eq!(h.data_points[0].count, 0);
}

#[test]
fn summary_mapping() {
    let text = "# HELP s S.\n# TYPE s summary\ns{quantile=\"0.5\"} 1\ns{quantile=\"0.9\"} 2\ns_count 3\n# TYPE t summary\nt{quantile=\"0.5\"} 1\nt_count 1\nt_sum 9\n# TYPE u summary\nu_sum 1\n";
    let (s, md) = scrape(text, 1000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let req = Converter::new(Naming::Otel, false).convert(&s, &st, &TargetInfo::default()).unwrap();
    let Some(D::Summary(sm)) = &find(&req, "s").data else { panic!() };
    let p = &sm.data_points[0];
    assert_eq!((p.count, p.sum), (3, 0.0), "no _sum: sum = 0");
    assert_eq!(
        p.quantile_values.iter().map(|q| (q.quantile, q.value)).collect::<Vec<_>>(),
        vec![(0.5, 1.0), (0.9, 2.0)]
    );
    let Some(D::Summary(t)) = &find(&req, "t").data else { panic!() };
    assert_eq!(t.data_points[0].sum, 9.0);
    assert!(metrics(&req).iter().all(|m| m.name != "u"), "no _count: dropped");
}

#[test]
fn target_info_becomes_resource() {
    let text = "# TYPE target_info gauge\ntarget_info{k8s_pod_name=\"p\"} 1\n# TYPE g gauge\ng 1\n";
    let (s, md) = scrape(text, 1000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let mut ti = TargetInfo::default();
    ti.update(&s);
    let req = Converter::new(Naming::Otel, false).convert(&s, &st, &ti).unwrap();
    assert_eq!(metrics(&req).len(), 1);
    let r = req.resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(attr(&r.attributes, "k8s_pod_name").as_deref(), Some("p"));
}

#[test]
fn trim_metric_suffixes_like_the_collector() {
    assert_eq!(trim_suffixes("vllm:prompt_tokens_total", MetricType::Counter, ""), "vllm:prompt_tokens");
    assert_eq!(trim_suffixes("http_seconds_total", MetricType::Counter, "seconds"), "http");
    assert_eq!(trim_suffixes("x_total", MetricType::Gauge, ""), "x_total");
    assert_eq!(trim_suffixes("_total", MetricType::Counter, ""), "_total");
    assert_eq!(
        trim_suffixes("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", MetricType::Counter, ""),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    );
    let (s, md) = scrape(VLLM, 1000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let req = Converter::new(Naming::Otel, true).convert(&s, &st, &TargetInfo::default()).unwrap();
    find(&req, "vllm:prompt_tokens");
}

#[test]
fn preserve_mode_one_metric_per_series_name() {
    let (series, md) = scrape(VLLM, 1_700_000_000_000);
    let mut st = MetadataStore::default();
    st.update(&md);
    let mut c = Converter::new(Naming::Preserve, false);
    let req = c.convert(&series, &st, &TargetInfo::default()).unwrap();
    let mut names: Vec<&str> = metrics(&req).iter().map(|m| m.name.as_str()).collect();
    names.sort();
    let mut want: Vec<&str> = series.iter().map(|s| s.labels.metric_name()).collect();
    want.sort();
    want.dedup();
    assert_eq!(names, want);
    let sum = |n: &str| match &find(&req, n).data {
        Some(D::Sum(s)) => Some((s.is_monotonic, s.data_points.clone())),
        _ => None,
    };
    assert!(sum("vllm:prompt_tokens_total").unwrap().0);
    assert!(sum("vllm:e2e_request_latency_seconds_bucket").unwrap().0);
    assert!(sum("vllm:e2e_request_latency_seconds_count").unwrap().0);
    assert!(!sum("vllm:e2e_request_latency_seconds_sum").unwrap().0);
    assert!(sum("vllm:prompt_tokens_created").is_none(), "created is a gauge");
    assert!(matches!(find(&req, "vllm:num_requests_running").data, Some(D::Gauge(_))));
    let m = find(&req, "vllm:e2e_request_latency_seconds_bucket");
    assert_eq!(attr(&m.metadata, "prometheus.type").as_deref(), Some("histogram"));
    let (_, pts) = sum("vllm:e2e_request_latency_seconds_bucket").unwrap();
    assert_eq!(pts.len(), 3);
    assert!(
        pts.iter()
            .all(|p| attr(&p.attributes, "job").as_deref() == Some("vllm") && attr(&p.attributes, "le").is_some())
    );
    assert!(pts.iter().all(|p| p.start_time_unix_nano == 1_600_000_000_000_000_000), "start from _created");
    let (_, pts) = sum("vllm:prompt_tokens_total").unwrap();
    assert_eq!(pts[0].start_time_unix_nano, 1_700_000_000_000_000_000);
}

#[test]
fn plans_for_names_command() {
    let (_, md) = scrape(VLLM, 1);
    let mut st = MetadataStore::default();
    st.update(&md);
    let p = plan(
        &st,
        Naming::Otel,
        false,
        "vllm:e2e_request_latency_seconds_bucket",
        &["__name__", "le", "model_name", "job"],
    );
    assert_eq!((p.name.as_str(), p.otlp_type.as_str()), ("vllm:e2e_request_latency_seconds", "histogram"));
    assert_eq!(p.attributes, vec!["model_name"]);
    let p = plan(
        &st,
        Naming::Preserve,
        false,
        "vllm:e2e_request_latency_seconds_bucket",
        &["__name__", "le", "model_name", "job"],
    );
    assert_eq!((p.name.as_str(), p.otlp_type.as_str()), ("vllm:e2e_request_latency_seconds_bucket", "sum(monotonic)"));
    assert!(plan(&st, Naming::Otel, false, "vllm:prompt_tokens_created", &[]).otlp_type.starts_with("dropped"));
}

#[test]
fn ucum_units() {
    assert_eq!(ucum_unit("seconds"), "s");
    assert_eq!(ucum_unit("bytes"), "By");
    assert_eq!(ucum_unit("furlongs"), "furlongs");
}

/// Series with explicit timestamps never get stale markers: their
/// start-time state must still be forgotten once they are gone, or it grows
/// with series churn.
#[test]
fn start_time_state_of_unseen_streams_is_forgotten() {
    let mut conv = Converter::new(Naming::Otel, false);
    let mut store = MetadataStore::default();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // 100 generations of 10 churning counters each (with `_created`).
    for g in 0..100 {
        let mut text = String::from("# TYPE req counter\n");
        for i in 0..10 {
            text.push_str(&format!("req_total{{pod=\"p{g}-{i}\"}} 5 1000\n"));
            text.push_str(&format!("req_created{{pod=\"p{g}-{i}\"}} 1 1000\n"));
        }
        let (series, md) = scrape(&text, 1000);
        store.update(&md);
        conv.convert(&series, &store, &TargetInfo::default()).unwrap();
    }
    assert_eq!(conv.tracked(), 1000);
    assert_eq!(conv.created_tracked(), 1000);
    // Not yet forgotten before FORGET_AFTER_MS.
    conv.forget_unseen(now + FORGET_AFTER_MS / 2);
    assert_eq!(conv.tracked(), 1000);
    // Forgotten after it.
    conv.forget_unseen(now + FORGET_AFTER_MS + 60_000);
    assert_eq!(conv.tracked(), 0);
    assert_eq!(conv.created_tracked(), 0);
    // A stream seen again starts anew.
    let (series, _) = scrape("# TYPE req counter\nreq_total{pod=\"x\"} 7 2000\n", 2000);
    conv.convert(&series, &store, &TargetInfo::default()).unwrap();
    assert_eq!(conv.tracked(), 1);
}
