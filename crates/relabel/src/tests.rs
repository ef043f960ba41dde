//! Unit tests: one group per action plus validation.

use super::*;

fn cfg(yaml: &str) -> RelabelConfig {
    serde_yaml::from_str(yaml).expect("yaml")
}

fn run(yaml_rules: &str, input: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    let configs: Vec<RelabelConfig> = serde_yaml::from_str(yaml_rules).expect("yaml");
    let r = Relabeler::new(&configs).expect("valid");
    r.process(&Labels::from_pairs(input.iter().copied()))
        .map(|l| l.iter().map(|l| (l.name.to_string(), l.value.to_string())).collect())
}

fn pairs(p: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    let mut v: Vec<(String, String)> = p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    v.sort();
    Some(v)
}

const BASE: &[(&str, &str)] =
    &[("__name__", "vllm:num_requests_running"), ("model_name", "Llama-3"), ("instance", "h:8000")];

#[test]
fn defaults_and_case_insensitive_action() {
    let c = cfg("target_label: x");
    assert_eq!(c.separator, ";");
    assert_eq!(c.regex, "(.*)");
    assert_eq!(c.replacement, "$1");
    assert_eq!(c.action, Action::Replace);
    assert_eq!(cfg("action: LabelMap\nregex: a").action, Action::LabelMap);
    assert!(serde_yaml::from_str::<RelabelConfig>("action: frobnicate").is_err());
    assert!(serde_yaml::from_str::<RelabelConfig>("target: x").is_err(), "unknown fields are refused");
}

#[test]
fn no_rules_returns_input() {
    let r = Relabeler::new(&[]).unwrap();
    assert!(r.is_empty());
    let l = Labels::from_pairs(BASE.iter().copied());
    assert_eq!(r.process(&l), Some(l));
}

#[test]
fn replace_basic_and_missing_sources_join_empty() {
    let out = run("- source_labels: [model_name, missing, instance]\n  separator: '|'\n  target_label: joined", BASE);
    assert_eq!(out.unwrap().iter().find(|(n, _)| n == "joined").unwrap().1, "Llama-3||h:8000");
}

#[test]
fn replace_regex_no_match_leaves_labels() {
    let out = run(
        "- source_labels: [model_name]\n  regex: 'Mistral.*'\n  target_label: family\n  replacement: mistral",
        BASE,
    );
    assert_eq!(out, pairs(BASE));
}

#[test]
fn replace_empty_result_deletes_target() {
    let out = run("- source_labels: [missing]\n  target_label: model_name", BASE);
    assert_eq!(out, pairs(&[BASE[0], BASE[2]]));
    let out = run(
        "- source_labels: [model_name]\n  regex: 'Llama-(\\d*)x?'\n  target_label: model_name\n  replacement: '$1'",
        &[("model_name", "Llama-x")],
    );
    assert_eq!(out, pairs(&[]));
}

#[test]
fn replace_fast_path_sets_literal() {
    // Empty source value + default regex: Prometheus sets the replacement as is.
    let out = run("- target_label: env\n  replacement: prod", BASE).unwrap();
    assert!(out.contains(&("env".into(), "prod".into())));
}

#[test]
fn replace_templated_target_and_invalid_expansion_is_skipped() {
    let out = run(
        "- source_labels: [model_name]\n  regex: '(\\w+)-(\\d+)'\n  target_label: 'm_${1}'\n  replacement: 'v$2'",
        BASE,
    )
    .unwrap();
    assert!(out.contains(&("m_Llama".into(), "v3".into())));
    // `${1}` expands to "3x" -> "3x" is not a valid label name: no change.
    let out = run("- source_labels: [v]\n  regex: '(.*)'\n  target_label: '${1}'", &[("v", "3x")]);
    assert_eq!(out, pairs(&[("v", "3x")]));
}

#[test]
fn go_dollar_1x_is_a_named_group() {
    let out = run("- source_labels: [v]\n  regex: '(.*)'\n  target_label: t\n  replacement: '$1x'", &[("v", "a")]);
    assert_eq!(out, pairs(&[("v", "a")]), "$1x expands to empty, which deletes t");
    let out = run("- source_labels: [v]\n  regex: '(.*)'\n  target_label: t\n  replacement: '${1}x'", &[("v", "a")]);
    assert_eq!(out, pairs(&[("t", "ax"), ("v", "a")]));
}

#[test]
fn regex_is_anchored() {
    let out = run("- source_labels: [v]\n  regex: 'b'\n  action: keep", &[("v", "abc")]);
    assert_eq!(out, None);
    let out = run("- source_labels: [v]\n  regex: 'a|abc'\n  action: keep", &[("v", "abc")]);
    assert!(out.is_some(), "anchoring wraps the whole alternation");
}

#[test]
fn keep_and_drop() {
    assert!(run("- source_labels: [__name__]\n  regex: 'vllm:.*'\n  action: keep", BASE).is_some());
    assert!(run("- source_labels: [__name__]\n  regex: 'DCGM_.*'\n  action: keep", BASE).is_none());
    assert!(run("- source_labels: [__name__]\n  regex: 'vllm:.*'\n  action: drop", BASE).is_none());
    // A missing label is "", which the default regex matches.
    assert!(run("- source_labels: [missing]\n  action: drop", BASE).is_none());
    assert!(run("- source_labels: [missing]\n  regex: '.+'\n  action: keep", BASE).is_none());
}

#[test]
fn keepequal_dropequal() {
    let input = &[("a", "x"), ("b", "x"), ("c", "y")];
    assert!(run("- source_labels: [a]\n  target_label: b\n  action: keepequal", input).is_some());
    assert!(run("- source_labels: [a]\n  target_label: c\n  action: keepequal", input).is_none());
    assert!(run("- source_labels: [a]\n  target_label: b\n  action: dropequal", input).is_none());
    // Missing target equals an empty join.
    assert!(run("- source_labels: [missing]\n  target_label: nope\n  action: keepequal", input).is_some());
    // Multiple sources join with the separator.
    assert!(
        run("- source_labels: [a, c]\n  target_label: j\n  action: keepequal", &[("a", "1"), ("c", "2"), ("j", "1;2")])
            .is_some()
    );
}

#[test]
fn hashmod_matches_prometheus() {
    // md5("foo") = acbd18db4cc2f85cedef654fccc4a4d8; last 8 bytes 0xedef654fccc4a4d8.
    assert_eq!(hashmod("foo", u64::MAX), 0xedef654fccc4a4d8);
    assert_eq!(hashmod("foo", 1000), 0xedef654fccc4a4d8u64 % 1000);
    let out =
        run("- source_labels: [v]\n  modulus: 8\n  target_label: shard\n  action: hashmod", &[("v", "foo")]).unwrap();
    assert_eq!(out[0], ("shard".into(), (0xedef654fccc4a4d8u64 % 8).to_string()));
}

#[test]
fn labelmap_with_groups() {
    let input = &[("__meta_kubernetes_pod_label_app", "vllm"), ("__meta_kubernetes_pod_label_tier", "gpu"), ("x", "1")];
    let out = run("- regex: '__meta_kubernetes_pod_label_(.+)'\n  action: labelmap", input).unwrap();
    assert!(out.contains(&("app".into(), "vllm".into())));
    assert!(out.contains(&("tier".into(), "gpu".into())));
    assert_eq!(out.len(), 5, "labelmap copies, it does not move");
    // Later (in name order) sources win when two map to the same name.
    let out = run("- regex: '(a|b)_x'\n  replacement: 'y'\n  action: labelmap", &[("a_x", "1"), ("b_x", "2")]).unwrap();
    assert!(out.contains(&("y".into(), "2".into())));
}

#[test]
fn labeldrop_labelkeep() {
    let out = run("- regex: 'instance|model_.*'\n  action: labeldrop", BASE);
    assert_eq!(out, pairs(&[BASE[0]]));
    let out = run("- regex: '__name__|model_.*'\n  action: labelkeep", BASE);
    assert_eq!(out, pairs(&[BASE[0], BASE[1]]));
}

#[test]
fn tmp_labels_pattern() {
    let rules = "
- source_labels: [model_name]
  regex: '([^-]+)-.*'
  target_label: __tmp_family
- source_labels: [__tmp_family, instance]
  regex: 'Llama;(.*):.*'
  target_label: host
- regex: '__tmp_.*'
  action: labeldrop
";
    let out = run(rules, BASE).unwrap();
    assert!(out.contains(&("host".into(), "h".into())));
    assert!(!out.iter().any(|(n, _)| n.starts_with("__tmp")));
}

#[test]
fn lowercase_uppercase() {
    let out = run("- source_labels: [v]\n  target_label: lo\n  action: lowercase\n- source_labels: [v]\n  target_label: up\n  action: uppercase", &[("v", "Straße-İ")]).unwrap();
    assert!(out.contains(&("lo".into(), "straße-i".into())));
    assert!(out.contains(&("up".into(), "STRAßE-İ".into())));
}

#[test]
fn unchanged_set_is_returned_as_is() {
    let l = Labels::from_pairs(BASE.iter().copied());
    let r = Relabeler::new(&[cfg("source_labels: [__name__]\nregex: 'vllm:.*'\naction: keep")]).unwrap();
    assert_eq!(r.process(&l), Some(l));
}

#[test]
fn validation_errors_name_the_field() {
    let err = |y: &str| cfg(y).compile().unwrap_err();
    let field = |e: RelabelError| match e {
        RelabelError::InvalidField { field, .. } => field,
        RelabelError::Regex { .. } => "regex",
        RelabelError::InRule { .. } => "in-rule",
    };
    assert_eq!(field(err("action: replace")), "target_label");
    assert_eq!(field(err("action: hashmod\ntarget_label: x")), "modulus");
    assert_eq!(field(err("target_label: '0bad'")), "target_label");
    assert_eq!(field(err("target_label: 'a-b'")), "target_label");
    assert_eq!(field(err("target_label: '$1-'")), "target_label");
    assert!(cfg("target_label: 'x_${1}'").compile().is_ok());
    assert_eq!(field(err("action: lowercase\ntarget_label: x\nreplacement: y")), "replacement");
    assert_eq!(field(err("action: keepequal\ntarget_label: x\nregex: 'a'")), "regex");
    assert_eq!(field(err("action: dropequal\ntarget_label: x\nseparator: ','")), "separator");
    assert_eq!(field(err("action: labeldrop\nregex: a\ntarget_label: x")), "target_label");
    assert_eq!(field(err("action: labelkeep\nregex: a\nsource_labels: [x]")), "source_labels");
    assert_eq!(field(err("action: labelmap\nregex: a\nreplacement: 'a-$1'")), "replacement");
    assert_eq!(field(err("source_labels: ['a-b']\ntarget_label: x")), "source_labels");
    assert_eq!(field(err("regex: '(a'\ntarget_label: x")), "regex");
    assert_eq!(field(err("regex: '(?<n>a)'\ntarget_label: x")), "regex");
    let e = Relabeler::new(&[cfg("target_label: x"), cfg("action: drop\nregex: '['")]).unwrap_err();
    assert!(matches!(e, RelabelError::InRule { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("regex"), "{e}");
}

#[test]
fn steps_show_each_rule_and_stop_where_the_set_is_dropped() {
    let configs: Vec<RelabelConfig> = serde_yaml::from_str(
        "- {target_label: team, replacement: infra}\n- {regex: model_name, action: labeldrop}\n- {source_labels: [team], regex: infra, action: drop}\n- {target_label: never, replacement: x}\n",
    )
    .expect("yaml");
    let r = Relabeler::new(&configs).expect("valid");
    let input = Labels::from_pairs(BASE.iter().copied());
    let steps = r.steps(&input);
    // The last rule is never reached: the third dropped the set.
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].output.as_ref().and_then(|l| l.get("team")), Some("infra"));
    assert!(steps[0].changed);
    assert_eq!(steps[1].action, Action::LabelDrop);
    assert_eq!(steps[1].output.as_ref().map(|l| l.get("model_name")), Some(None));
    assert_eq!((steps[2].index, steps[2].action, steps[2].output.is_none()), (2, Action::Drop, true));
    // Agrees with process().
    assert_eq!(r.process(&input), None);
    let keep = Relabeler::new(&configs[..2]).expect("valid");
    assert_eq!(keep.steps(&input).last().and_then(|s| s.output.clone()), keep.process(&input));
    // A rule that matches nothing leaves the set as it was.
    let noop = Relabeler::new(&[cfg("{source_labels: [absent], regex: x, action: drop}")]).expect("valid");
    let s = noop.steps(&input);
    assert_eq!((s.len(), s[0].changed, s[0].output.as_ref()), (1, false, Some(&input)));
}
