//! OpenMetrics 1.0 text format, validated strictly: exact whitespace, `# EOF`
//! required and last, and every cross-line rule of the spec (family grouping,
//! metadata placement, suffixes per type, histogram bucket order and totals,
//! value ranges per type, exemplar placement and size, timestamps that do not
//! go backwards). The behaviour follows the OpenMetrics project's parser test
//! suite (`shared/conformance/openmetrics`, 211 cases) and, where the spec
//! leaves room, the reference parser those cases were written against
//! (Python `prometheus_client`).
//!
//! Each rejection carries a short, stable rule name in [`ParseError::rule`].

use foldhash::HashSet;
use std::borrow::Cow;

use infertel_model::MetricType;

use crate::error::ParseError;
use crate::float::{parse_om_number, parse_om_timestamp, seconds_to_ms};
use crate::lexer::{is_metric_char, scan_label_name, scan_metric_name, scan_quoted, unescape};
use crate::{Exposition, Family, Label, ParsedSample};

/// The rules of the spec Prometheus 2.42's OpenMetrics parser does not
/// enforce (it checks syntax, `# EOF`, the UNIT suffix and exemplar
/// placement, and reads the rest as written); a scrape applies only the
/// others, so what Prometheus stores is stored.
const NOT_IN_PROMETHEUS: &[&str] = &[
    "metadata-before-samples",
    "repeated-metadata",
    "name-clash",
    "unit-not-allowed",
    "counter-total-suffix",
    "info-suffix",
    "stateset-label",
    "summary-quantile",
    "bucket-le",
    "bucket-value-integer",
    "count-value-integer",
    "grouping-contiguous",
    "timestamp-presence",
    "timestamps-backwards",
    "stateset-value",
    "info-value",
    "quantile-value-negative",
    "counter-like-nan",
    "counter-like-negative",
    "exemplar-too-long",
];

pub(crate) fn parse(body: &[u8]) -> Result<Exposition<'_>, ParseError> {
    parse_with(body, false)
}

/// As a Prometheus 2.42 scrape reads it: the rules in [`NOT_IN_PROMETHEUS`]
/// are not applied (histograms are not checked either).
pub(crate) fn parse_as_prometheus(body: &[u8]) -> Result<Exposition<'_>, ParseError> {
    parse_with(body, true)
}

fn parse_with(body: &[u8], lenient: bool) -> Result<Exposition<'_>, ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let at = e.valid_up_to();
        let line = body[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        let col = at - body[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        ParseError::rule(line, col, "utf8", "body is not valid UTF-8")
    })?;
    let mut p = Parser { out: Exposition::default(), cur: None, seen_names: HashSet::default(), line: 0, lenient };
    let content = text.strip_suffix('\n').unwrap_or(text);
    let mut eof = false;
    // An empty body has no lines at all (it is missing `# EOF`, not blank).
    let lines = if text.is_empty() { None } else { Some(content.split('\n')) };
    for (i, line) in lines.into_iter().flatten().enumerate() {
        p.line = i + 1;
        if eof {
            return Err(p.fail(1, "text-after-eof", "text after # EOF"));
        }
        if line == "# EOF" {
            eof = true;
        } else if line.is_empty() {
            return Err(p.fail(1, "blank-line", "empty line"));
        } else if line.starts_with('#') {
            p.metadata(line)?;
        } else {
            p.sample(line)?;
        }
    }
    p.finish_family()?;
    if !eof {
        return Err(p.fail(1, "eof-required", "missing # EOF at the end"));
    }
    Ok(p.out)
}

/// Sample-name suffixes that belong to a family of each type.
fn suffixes(kind: MetricType) -> &'static [&'static str] {
    match kind {
        MetricType::Counter => &["_total", "_created"],
        MetricType::Summary => &["", "_count", "_sum", "_created"],
        MetricType::Histogram => &["_count", "_sum", "_bucket", "_created"],
        MetricType::GaugeHistogram => &["_gcount", "_gsum", "_bucket"],
        MetricType::Info => &["_info"],
        MetricType::Gauge | MetricType::StateSet | MetricType::Unknown => &[""],
    }
}

/// The family whose samples are being read.
struct Current<'a> {
    name: &'a str,
    /// `None` until a TYPE line (a family with only HELP/UNIT is `unknown`).
    kind: Option<MetricType>,
    help: bool,
    unit: Option<&'a str>,
    /// Index into `families` when declared by metadata.
    family: Option<u32>,
    has_samples: bool,
    /// Samples that count for the histogram checks (repeats dropped).
    checked: Vec<usize>,
    group: Option<String>,
    group_ts: Option<f64>,
    group_series: HashSet<String>,
    seen_groups: HashSet<String>,
}

impl<'a> Current<'a> {
    fn new(name: &'a str, family: Option<u32>) -> Self {
        Current {
            name,
            kind: None,
            help: false,
            unit: None,
            family,
            has_samples: false,
            checked: Vec::new(),
            group: None,
            group_ts: None,
            group_series: HashSet::default(),
            seen_groups: HashSet::default(),
        }
    }

    fn kind(&self) -> MetricType {
        self.kind.unwrap_or(MetricType::Unknown)
    }

    fn allows(&self, sample: &str) -> bool {
        match self.kind {
            None => sample == self.name,
            Some(k) => sample.strip_prefix(self.name).is_some_and(|s| suffixes(k).contains(&s)),
        }
    }
}

struct Parser<'a> {
    out: Exposition<'a>,
    cur: Option<Current<'a>>,
    seen_names: HashSet<String>,
    line: usize,
    /// Prometheus' reading: the rules it does not enforce are not errors.
    lenient: bool,
}

/// A broken rule: an error, unless the parse is lenient and Prometheus does
/// not enforce the rule.
fn broken(
    lenient: bool,
    line: usize,
    column: usize,
    rule: &'static str,
    reason: impl Into<String>,
) -> Result<(), ParseError> {
    if lenient && NOT_IN_PROMETHEUS.contains(&rule) {
        return Ok(());
    }
    Err(ParseError::rule(line, column, rule, reason))
}

/// A parsed sample line before it is stored.
struct Line<'a> {
    name: &'a str,
    labels: Vec<Label<'a>>,
    value: f64,
    ts: Option<f64>,
    exemplar: bool,
}

/// Group key of a label set without the label `skip`: sorted and length-prefixed
/// so that no label value can forge another set's key.
fn group_key(labels: &[Label<'_>], skip: Option<&str>) -> String {
    use std::fmt::Write;
    let mut v: Vec<&Label<'_>> = labels.iter().filter(|(n, _)| Some(n.as_ref()) != skip).collect();
    v.sort_unstable();
    let mut key = String::with_capacity(labels.iter().map(|(n, v)| n.len() + v.len() + 8).sum());
    for (n, val) in v {
        let _ = write!(key, "{}:{}{}:{}", n.len(), n, val.len(), val);
    }
    key
}

fn get<'b>(labels: &'b [Label<'_>], name: &str) -> Option<&'b str> {
    labels.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_ref())
}

/// A value that is an integer (a bucket or a count).
fn is_integral(v: f64) -> bool {
    v.is_finite() && v.fract() == 0.0
}

impl<'a> Parser<'a> {
    fn fail(&self, column: usize, rule: &'static str, reason: impl Into<String>) -> ParseError {
        ParseError::rule(self.line, column, rule, reason)
    }

    /// `# HELP name text`, `# TYPE name type`, `# UNIT name unit`, with single spaces.
    fn metadata(&mut self, line: &'a str) -> Result<(), ParseError> {
        let Some(rest) = line.strip_prefix("# ") else {
            return Err(self.fail(1, "comment-syntax", "only # HELP, # TYPE, # UNIT and # EOF may start with #"));
        };
        let (keyword, rest) = match rest.split_at_checked(5) {
            Some((k @ ("HELP " | "TYPE " | "UNIT "), r)) => (&k[..4], r),
            _ => {
                return Err(self.fail(3, "comment-syntax", "only # HELP, # TYPE, # UNIT and # EOF may start with #"));
            }
        };
        let end = scan_metric_name(rest.as_bytes(), 0);
        if end == 0 {
            return Err(self.fail(8, "metric-name", format!("expected a metric name after {keyword}")));
        }
        let name = &rest[..end];
        let Some(text) = rest[end..].strip_prefix(' ') else {
            return Err(self.fail(
                8 + end,
                "metadata-syntax",
                format!("expected one space and a value after {keyword} {name}"),
            ));
        };
        let same = self.cur.as_ref().is_some_and(|c| c.name == name);
        let (lenient, line_no) = (self.lenient, self.line);
        if same && self.cur.as_ref().is_some_and(|c| c.has_samples) {
            broken(lenient, line_no, 1, "metadata-before-samples", format!("{keyword} for {name} after its samples"))?;
        }
        if !same {
            self.finish_family()?;
            let idx = self.out.families.len() as u32;
            self.out.families.push(Family::new(Cow::Borrowed(name)));
            self.cur = Some(Current::new(name, Some(idx)));
        }
        let col = 9 + end;
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        let fam = cur.family.map_or(0, |i| i as usize);
        match keyword {
            "HELP" => {
                if cur.help {
                    // Prometheus: the last HELP wins.
                    broken(lenient, line_no, 1, "repeated-metadata", format!("second HELP for {name}"))?;
                }
                cur.help = true;
                self.out.families[fam].help = Some(unescape(text, true));
            }
            "TYPE" => {
                if cur.kind.is_some() {
                    broken(lenient, line_no, 1, "repeated-metadata", format!("second TYPE for {name}"))?;
                }
                let kind = match text {
                    "counter" => MetricType::Counter,
                    "gauge" => MetricType::Gauge,
                    "histogram" => MetricType::Histogram,
                    "gaugehistogram" => MetricType::GaugeHistogram,
                    "summary" => MetricType::Summary,
                    "info" => MetricType::Info,
                    "stateset" => MetricType::StateSet,
                    "unknown" => MetricType::Unknown,
                    _ => {
                        return Err(ParseError::rule(
                            line_no,
                            col,
                            "metric-type",
                            format!("invalid metric type {text:?}"),
                        ));
                    }
                };
                cur.kind = Some(kind);
                self.out.families[fam].kind = kind;
            }
            _ => {
                if cur.unit.is_some() {
                    broken(lenient, line_no, 1, "repeated-metadata", format!("second UNIT for {name}"))?;
                }
                if !text.bytes().all(is_metric_char) {
                    return Err(ParseError::rule(line_no, col, "unit-syntax", format!("invalid unit {text:?}")));
                }
                cur.unit = Some(text);
                self.out.families[fam].unit = Some(Cow::Borrowed(text));
            }
        }
        Ok(())
    }

    /// Checks that need the whole family: names that clash with earlier
    /// families, UNIT as a name suffix, histogram consistency.
    fn finish_family(&mut self) -> Result<(), ParseError> {
        let Some(cur) = self.cur.take() else {
            return Ok(());
        };
        let kind = cur.kind();
        let own = suffixes(kind);
        let extra: &[&str] = if own.contains(&"") { &[] } else { &[""] };
        for suffix in own.iter().chain(extra) {
            let n = format!("{}{}", cur.name, suffix);
            if self.seen_names.contains(&n) {
                broken(
                    self.lenient,
                    self.line,
                    1,
                    "name-clash",
                    format!("family {} clashes with an earlier family on {n} (or is not contiguous)", cur.name),
                )?;
            }
            self.seen_names.insert(n);
        }
        if let Some(unit) = cur.unit.filter(|u| !u.is_empty()) {
            if !cur.name.ends_with(&format!("_{unit}")) {
                return Err(self.fail(1, "unit-suffix", format!("family {} does not end in _{unit}", cur.name)));
            }
            if matches!(kind, MetricType::Info | MetricType::StateSet) {
                broken(
                    self.lenient,
                    self.line,
                    1,
                    "unit-not-allowed",
                    format!("{} may not have a unit", kind.as_str()),
                )?;
            }
        }
        if matches!(kind, MetricType::Histogram | MetricType::GaugeHistogram) && !self.lenient {
            self.check_histogram(&cur)?;
        }
        Ok(())
    }

    fn check_histogram(&self, cur: &Current<'a>) -> Result<(), ParseError> {
        #[derive(Default)]
        struct G {
            count: Option<f64>,
            bucket: Option<f64>,
            value: f64,
            negative_buckets: bool,
            sum: bool,
            gsum: bool,
            negative_gsum: bool,
        }
        let check = |g: &G| -> Result<(), ParseError> {
            if g.bucket != Some(f64::INFINITY) {
                return Err(self.fail(1, "histogram-inf-bucket", format!("{}: +Inf bucket missing", cur.name)));
            }
            if g.count.is_some_and(|c| c != g.value) {
                return Err(self.fail(
                    1,
                    "histogram-count-matches-inf",
                    format!("{}: count differs from the +Inf bucket", cur.name),
                ));
            }
            if (g.sum || g.gsum) && g.count.is_none() {
                return Err(self.fail(1, "histogram-count-with-sum", format!("{}: _sum without _count", cur.name)));
            }
            if !(g.sum || g.gsum) && g.count.is_some() {
                return Err(self.fail(1, "histogram-sum-with-count", format!("{}: _count without _sum", cur.name)));
            }
            if g.negative_buckets && g.sum {
                return Err(self.fail(
                    1,
                    "histogram-negative-buckets-sum",
                    format!("{}: _sum with negative buckets", cur.name),
                ));
            }
            if !g.negative_buckets && g.negative_gsum {
                return Err(self.fail(
                    1,
                    "histogram-negative-gsum",
                    format!("{}: negative _gsum without negative buckets", cur.name),
                ));
            }
            Ok(())
        };
        let mut group: Option<(String, Option<i64>, Option<f64>)> = None;
        let mut g = G::default();
        for &i in &cur.checked {
            let s = &self.out.samples[i];
            let labels = self.out.labels(s);
            let suffix = &s.name[cur.name.len()..];
            if suffix.is_empty() {
                continue;
            }
            let key = group_key(labels, (suffix == "_bucket").then_some("le"));
            let ts = s.timestamp_ms;
            let changed = match &group {
                Some((k, t, _)) => *k != key || *t != ts,
                None => true,
            };
            if changed {
                if group.is_some() {
                    check(&g)?;
                }
                g = G::default();
            }
            group = Some((key, ts, None));
            match suffix {
                "_bucket" => {
                    let le = get(labels, "le").and_then(|v| parse_om_number(v.as_bytes()).ok()).unwrap_or(f64::NAN);
                    if le < 0.0 {
                        g.negative_buckets = true;
                    }
                    if g.bucket.is_some_and(|b| le <= b) {
                        return Err(self.fail(
                            1,
                            "histogram-buckets-sorted",
                            format!("{}: buckets out of order", cur.name),
                        ));
                    }
                    if s.value < g.value {
                        return Err(self.fail(
                            1,
                            "histogram-buckets-cumulative",
                            format!("{}: bucket values decrease", cur.name),
                        ));
                    }
                    g.bucket = Some(le);
                    g.value = s.value;
                }
                "_count" | "_gcount" => g.count = Some(s.value),
                "_sum" => g.sum = true,
                "_gsum" => {
                    g.gsum = true;
                    if s.value < 0.0 {
                        g.negative_gsum = true;
                    }
                }
                _ => {}
            }
        }
        if group.is_some() {
            check(&g)?;
        }
        Ok(())
    }

    fn sample(&mut self, line: &'a str) -> Result<(), ParseError> {
        let l = self.sample_line(line)?;
        // Prometheus reads `foo 1` under `# TYPE foo counter` as foo, a counter.
        let allowed = self.cur.as_ref().is_some_and(|c| {
            c.allows(l.name)
                || (self.lenient && c.name == l.name && matches!(c.kind, Some(MetricType::Counter | MetricType::Info)))
        });
        if !allowed {
            if let Some(c) = &self.cur {
                if c.name == l.name && c.kind == Some(MetricType::Counter) {
                    return Err(self.fail(
                        1,
                        "counter-total-suffix",
                        format!("counter sample {} needs the _total suffix", l.name),
                    ));
                }
                if c.name == l.name && c.kind == Some(MetricType::Info) {
                    return Err(self.fail(1, "info-suffix", format!("info sample {} needs the _info suffix", l.name)));
                }
            }
            self.finish_family()?;
            self.cur = Some(Current::new(l.name, None));
            if let Some(c) = self.cur.as_mut() {
                c.kind = Some(MetricType::Unknown);
            }
        }
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        let name = cur.name;
        let kind = cur.kind();
        let suffix = &l.name[name.len()..];
        let (lenient, line_no) = (self.lenient, self.line);
        let fail = |rule: &'static str, reason: String| ParseError::rule(line_no, 1, rule, reason);
        let check = |rule: &'static str, reason: String| broken(lenient, line_no, 1, rule, reason);

        let mut skip: Option<&str> = None;
        match kind {
            MetricType::StateSet => {
                if get(&l.labels, name).is_none() {
                    check("stateset-label", format!("stateset sample without a {name} label"))?;
                }
                skip = Some(name);
            }
            MetricType::Summary if suffix.is_empty() => {
                let q = get(&l.labels, "quantile").map(|q| (q, parse_om_number(q.as_bytes())));
                match q {
                    Some((text, Ok(q))) if (0.0..=1.0).contains(&q) && !(q.is_infinite() && text != "+Inf") => {}
                    _ => {
                        check("summary-quantile", "quantile label missing or not in [0, 1]".into())?;
                    }
                }
                skip = Some("quantile");
            }
            MetricType::Histogram | MetricType::GaugeHistogram if suffix == "_bucket" => {
                let le = get(&l.labels, "le").map(|t| (t, parse_om_number(t.as_bytes())));
                match le {
                    Some((t, Ok(v))) if !(v.is_nan() || v.is_infinite() && t != "+Inf") => {}
                    _ => {
                        check("bucket-le", "bucket le label missing, NaN or not canonical".into())?;
                    }
                }
                if !is_integral(l.value) {
                    check("bucket-value-integer", "bucket value must be an integer".into())?;
                }
                skip = Some("le");
            }
            _ => {}
        }
        if matches!(suffix, "_count" | "_gcount")
            && matches!(kind, MetricType::Histogram | MetricType::GaugeHistogram | MetricType::Summary)
            && !is_integral(l.value)
        {
            check("count-value-integer", "count must be an integer".into())?;
        }

        // Grouping: a family's label sets must each be contiguous, and within
        // one their timestamps must all be present or all absent, and not decrease.
        let key = if kind == MetricType::Info { String::new() } else { group_key(&l.labels, skip) };
        let same_group = cur.group.as_ref() == Some(&key);
        if cur.group.is_some() && !same_group && cur.seen_groups.contains(&key) {
            check("grouping-contiguous", format!("label set of {name} is not contiguous"))?;
        }
        if same_group {
            if l.ts.is_none() != cur.group_ts.is_none() {
                check("timestamp-presence", "timestamps present on only part of a group".into())?;
            }
            if let (Some(prev), Some(ts)) = (cur.group_ts, l.ts)
                && prev > ts
                && kind != MetricType::Info
            {
                check("timestamps-backwards", "timestamp went backwards within a group".into())?;
            }
        } else {
            cur.group_series.clear();
        }
        let series_id = format!("{}\u{0}{}", l.name, group_key(&l.labels, None));
        let repeat = l.ts == cur.group_ts && cur.group_series.contains(&series_id);
        cur.group_series.insert(series_id);
        cur.group_ts = l.ts;
        cur.seen_groups.insert(key.clone());
        cur.group = Some(key);

        match kind {
            MetricType::StateSet if l.value != 0.0 && l.value != 1.0 => {
                check("stateset-value", "stateset values must be 0 or 1".into())?;
            }
            MetricType::Info if l.value != 1.0 => {
                check("info-value", "info values must be 1".into())?;
            }
            MetricType::Summary if suffix.is_empty() && l.value < 0.0 => {
                check("quantile-value-negative", "quantile values may not be negative".into())?;
            }
            _ => {}
        }
        if matches!(suffix, "_total" | "_sum" | "_count" | "_bucket" | "_gcount" | "_gsum") && l.value.is_nan() {
            check("counter-like-nan", format!("{suffix} may not be NaN"))?;
        }
        if matches!(suffix, "_total" | "_sum" | "_count" | "_bucket" | "_gcount") && l.value < 0.0 {
            check("counter-like-negative", format!("{suffix} may not be negative"))?;
        }
        if l.exemplar {
            let ok = if lenient {
                // Prometheus: by the sample's name alone.
                l.name.ends_with("_bucket") || l.name.ends_with("_total")
            } else {
                (matches!(kind, MetricType::Histogram | MetricType::GaugeHistogram) && l.name.ends_with("_bucket"))
                    || (kind == MetricType::Counter && l.name.ends_with("_total"))
            };
            if !ok {
                return Err(fail(
                    "exemplar-placement",
                    "exemplars are only allowed on counter _total and histogram _bucket samples".into(),
                ));
            }
        }

        cur.has_samples = true;
        let index = self.out.samples.len();
        if !repeat {
            cur.checked.push(index);
        }
        let family = cur.family;
        let start = self.out.labels.len() as u32;
        self.out.labels.extend(l.labels);
        self.out.samples.push(ParsedSample {
            name: Cow::Borrowed(l.name),
            value: l.value,
            timestamp_ms: l.ts.map(seconds_to_ms),
            family,
            kind: if family.is_some() { kind } else { MetricType::Unknown },
            line: self.line as u32,
            raw_key: None,
            raw_len: 0,
            known: None,
            labels: start..self.out.labels.len() as u32,
        });
        Ok(())
    }

    /// `name[{labels}] value[ timestamp][ # {labels} value[ timestamp]]`.
    fn sample_line(&self, line: &'a str) -> Result<Line<'a>, ParseError> {
        let b = line.as_bytes();
        let end = scan_metric_name(b, 0);
        if end == 0 {
            return Err(self.fail(1, "metric-name", "expected a metric name"));
        }
        let name = &line[..end];
        let mut pos = end;
        let mut labels = Vec::new();
        if b.get(pos) == Some(&b'{') {
            pos = self.label_set(line, pos, &mut labels, "label-syntax")?;
        }
        let (value, next) = self.token(line, pos, "value-syntax")?;
        let value = parse_om_number(value.as_bytes())
            .map_err(|_| self.fail(pos + 2, "value-syntax", format!("invalid value {value:?}")))?;
        pos = next;
        let mut ts = None;
        if b.get(pos) == Some(&b' ') && b.get(pos + 1) != Some(&b'#') {
            let (t, next) = self.token(line, pos, "timestamp-syntax")?;
            ts = Some(
                parse_om_timestamp(t.as_bytes())
                    .map_err(|_| self.fail(pos + 2, "timestamp-syntax", format!("invalid timestamp {t:?}")))?,
            );
            pos = next;
        }
        let mut exemplar = false;
        if pos < b.len() {
            if !line[pos..].starts_with(" # {") {
                return Err(self.fail(pos + 1, "sample-syntax", "unexpected text after the sample"));
            }
            exemplar = true;
            let mut ex = Vec::new();
            pos = self.label_set(line, pos + 3, &mut ex, "exemplar-syntax")?;
            let chars: usize = ex.iter().map(|(n, v)| n.chars().count() + v.chars().count()).sum();
            if chars > 128 {
                broken(
                    self.lenient,
                    self.line,
                    pos,
                    "exemplar-too-long",
                    format!("exemplar labels have {chars} code points (at most 128)"),
                )?;
            }
            let (v, next) = self.token(line, pos, "exemplar-syntax")?;
            parse_om_number(v.as_bytes())
                .map_err(|_| self.fail(pos + 2, "exemplar-syntax", format!("invalid exemplar value {v:?}")))?;
            pos = next;
            if pos < b.len() {
                let (t, next) = self.token(line, pos, "exemplar-syntax")?;
                parse_om_timestamp(t.as_bytes())
                    .map_err(|_| self.fail(pos + 2, "exemplar-syntax", format!("invalid exemplar timestamp {t:?}")))?;
                if next != b.len() {
                    return Err(self.fail(next + 1, "exemplar-syntax", "unexpected text after the exemplar"));
                }
            }
        }
        Ok(Line { name, labels, value, ts, exemplar })
    }

    /// One space then a non-empty token up to the next space or the end.
    fn token(&self, line: &'a str, pos: usize, rule: &'static str) -> Result<(&'a str, usize), ParseError> {
        if line.as_bytes().get(pos) != Some(&b' ') {
            return Err(self.fail(pos + 1, rule, "expected a single space"));
        }
        let start = pos + 1;
        let end = line[start..].find(' ').map_or(line.len(), |i| start + i);
        if end == start {
            return Err(self.fail(start + 1, rule, "expected a value"));
        }
        Ok((&line[start..end], end))
    }

    /// `{name="value",…}` at `pos` (no spaces, no trailing comma, no repeats);
    /// returns the position after `}`.
    fn label_set(
        &self,
        line: &'a str,
        pos: usize,
        out: &mut Vec<Label<'a>>,
        rule: &'static str,
    ) -> Result<usize, ParseError> {
        let b = line.as_bytes();
        let mut i = pos + 1;
        if b.get(i) == Some(&b'}') {
            return Ok(i + 1);
        }
        let mut seen: HashSet<Cow<'a, str>> = HashSet::default();
        loop {
            let end = scan_label_name(b, i);
            if end == i {
                return Err(self.fail(i + 1, rule, "expected a label name"));
            }
            let name = &line[i..end];
            if name == "__name__" {
                return Err(self.fail(i + 1, rule, "__name__ may not be a label"));
            }
            // A set for long label lists: a hostile line must not cost n².
            let repeated = if out.len() < 16 {
                out.iter().any(|(n, _)| n == name)
            } else {
                if seen.is_empty() {
                    seen.extend(out.iter().map(|(n, _)| n.clone()));
                }
                !seen.insert(Cow::Borrowed(name))
            };
            if repeated {
                return Err(self.fail(i + 1, "duplicate-label", format!("label {name} repeated")));
            }
            if b.get(end) != Some(&b'=') || b.get(end + 1) != Some(&b'"') {
                return Err(self.fail(end + 1, rule, "expected =\" after a label name"));
            }
            let q = scan_quoted(b, end + 1, false).map_err(|at| self.fail(at + 1, rule, "unterminated label value"))?;
            let raw = &line[q.start..q.end];
            out.push((Cow::Borrowed(name), if q.escaped { unescape(raw, true) } else { Cow::Borrowed(raw) }));
            match b.get(q.next) {
                Some(b'}') => return Ok(q.next + 1),
                Some(b',') if b.get(q.next + 1) != Some(&b'}') => i = q.next + 1,
                _ => {
                    return Err(self.fail(q.next + 1, rule, "expected , or } after a label value"));
                }
            }
        }
    }
}
