//! Prometheus text format 0.0.4, accepted and rejected the way a Prometheus
//! 2.42 scrape does (`promlex.l` + `promparse.go` + the scrape loop's label
//! checks). The expected results were recorded from the real binary: see
//! `oracle/` and `tests/text_edge_cases.rs`.
//!
//! Where 2.42 is lenient we are too: blank and whitespace-only lines, a
//! missing final newline, trailing whitespace, a trailing comma in braces, no
//! comma between labels, unknown escapes kept as written, a raw newline inside
//! a label value, no space between the name (or `}`) and the value. Where it
//! fails the scrape we return an error: CR before a line end, a sign or
//! fraction in a timestamp, duplicate label names, `__name__` in braces,
//! whitespace before a sample's name, `1e400`, OpenMetrics-only TYPE words.
//!
//! Deliberate differences from 2.42:
//! * the family of a sample is resolved by name once the whole body is read
//!   (2.42 carries the last TYPE forward to untyped samples, and dcgm-exporter
//!   prints all metadata before any sample);
//! * the quoted UTF-8 name syntax of Prometheus 3 (`{"my.metric",a="b"}`,
//!   `"label.name"="v"`, `# TYPE "my.metric" counter`) is accepted.
//!
//! A NUL byte where a line starts ends the body without error, as in 2.42
//! (its lexer reads NUL as end of input).

use std::borrow::Cow;
// Keys come from the scraped body: a seeded hasher, so a target cannot
// craft colliding names (foldhash is as fast as Fx on short keys).
use foldhash::HashMap;

use infertel_model::MetricType;

use crate::error::ParseError;
use crate::float::{decimal_prefix, parse_go_float, parse_ms_timestamp};
use crate::lexer::{is_metric_start, scan_label_name, scan_metric_name, scan_quoted, unescape};
use crate::{Exposition, Family, Guess, KnownLines, Label, ParsedSample};

/// What the caller knows of raw series keys (see `parse_as_prometheus_known`).
pub(crate) type Known<'k> = &'k mut dyn KnownLines;

pub(crate) fn parse<'a>(body: &'a [u8], known: Option<Known<'_>>) -> Result<Exposition<'a>, ParseError> {
    parse_into(body, known, Exposition::default())
}

/// [`parse`] into `out`'s vectors (empty, lent by `Buffers`).
pub(crate) fn parse_into<'a>(
    body: &'a [u8],
    known: Option<Known<'_>>,
    out: Exposition<'a>,
) -> Result<Exposition<'a>, ParseError> {
    // One validation pass over the whole body (fast on ASCII) instead of one
    // per token; tokens then are slices of a `str` (their boundaries are
    // ASCII bytes, so always char boundaries). An invalid body falls back to
    // per-token checks, which say where the bad byte is. With the scrape
    // cache's shortcut most lines are not read as text at all: the tokens
    // that are (metadata, new lines) are checked one by one.
    let text = if known.is_some() { None } else { std::str::from_utf8(body).ok() };
    let mut p = Parser { buf: body, text, pos: 0, line: 1, line_start: 0, out, by_name: HashMap::default(), known };
    // Size the outputs once: one sample per line at most, and a handful of
    // labels each, instead of growing (and copying) from empty every scrape.
    let lines = memchr::memchr_iter(b'\n', body).count() + 1;
    p.out.samples.reserve(lines);
    // With the scrape cache's shortcut most lines keep no labels.
    p.out.labels.reserve(if p.known.is_some() { lines / 8 } else { lines * 4 });
    p.run()?;
    p.resolve_families();
    Ok(p.out)
}

struct Parser<'a, 'k> {
    buf: &'a [u8],
    /// The body as text, when it is valid UTF-8 as a whole.
    text: Option<&'a str>,
    pos: usize,
    line: usize,
    line_start: usize,
    out: Exposition<'a>,
    by_name: HashMap<Cow<'a, str>, u32>,
    known: Option<Known<'k>>,
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

impl<'a> Parser<'a, '_> {
    fn err(&self, at: usize, reason: impl Into<String>) -> ParseError {
        ParseError::new(self.line, at.saturating_sub(self.line_start) + 1, reason)
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn skip_blanks(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.pos += 1;
        }
    }

    fn describe(&self, at: usize) -> String {
        match self.buf.get(at) {
            None => "end of input".to_string(),
            Some(b'\n') => "end of line".to_string(),
            Some(&b) if b.is_ascii_graphic() || b == b' ' => format!("{:?}", b as char),
            Some(&b) => format!("byte 0x{b:02x}"),
        }
    }

    fn str_at(&self, start: usize, end: usize) -> Result<&'a str, ParseError> {
        if let Some(s) = self.text.and_then(|t| t.get(start..end)) {
            return Ok(s);
        }
        std::str::from_utf8(&self.buf[start..end]).map_err(|_| self.err(start, "invalid UTF-8"))
    }

    /// Consumes the end of a line: `\n` or the end of the body.
    fn end_line(&mut self, what: &str) -> Result<(), ParseError> {
        match self.peek() {
            None => Ok(()),
            Some(b'\n') => {
                self.pos += 1;
                self.line += 1;
                self.line_start = self.pos;
                Ok(())
            }
            Some(_) => Err(self.err(self.pos, format!("{what}, got {}", self.describe(self.pos)))),
        }
    }

    fn run(&mut self) -> Result<(), ParseError> {
        loop {
            let start = self.pos;
            self.skip_blanks();
            match self.peek() {
                None => return Ok(()),
                // 2.42's lexer reads NUL at the start of a token as end of input.
                Some(0) => return Ok(()),
                Some(b'\n') => self.end_line("")?,
                Some(b'#') => self.comment()?,
                Some(b) if is_metric_start(b) || b == b'{' => {
                    if self.pos != start {
                        // 2.42 keeps the blanks as part of the metric name, and the
                        // scrape then fails on the invalid name.
                        return Err(self.err(start, "whitespace before a metric name"));
                    }
                    self.sample()?;
                }
                Some(_) => {
                    return Err(
                        self.err(self.pos, format!("{} is not a valid start of a line", self.describe(self.pos)))
                    );
                }
            }
        }
    }

    /// `#…`: `# HELP`, `# TYPE`, or a comment that is skipped.
    fn comment(&mut self) -> Result<(), ParseError> {
        self.pos += 1;
        let after_hash = self.pos;
        self.skip_blanks();
        let rest = &self.buf[self.pos..];
        let keyword = if self.pos == after_hash {
            None
        } else if rest.starts_with(b"HELP") && rest.get(4).copied().is_some_and(is_blank) {
            Some(true)
        } else if rest.starts_with(b"TYPE") && rest.get(4).copied().is_some_and(is_blank) {
            Some(false)
        } else {
            None
        };
        let Some(is_help) = keyword else {
            self.skip_to_line_end();
            return self.end_line("");
        };
        self.pos += 4;
        self.skip_blanks();
        let name = self.metadata_name(if is_help { "HELP" } else { "TYPE" })?;
        // Everything after the name is the text, less one separator byte
        // (whatever byte it is: that is what 2.42 does).
        let text_start = self.pos;
        self.skip_to_line_end();
        let text = if self.pos > text_start { &self.buf[text_start + 1..self.pos] } else { &[][..] };
        let family = self.family_index(name);
        if is_help {
            let text = std::str::from_utf8(text).map_err(|_| self.err(text_start, "HELP text is not valid UTF-8"))?;
            self.out.families[family as usize].help = Some(help_unescape(text));
        } else {
            let kind = match text {
                b"counter" => MetricType::Counter,
                b"gauge" => MetricType::Gauge,
                b"histogram" => MetricType::Histogram,
                b"summary" => MetricType::Summary,
                b"untyped" => MetricType::Unknown,
                _ => {
                    return Err(
                        self.err(text_start + 1, format!("invalid metric type {:?}", String::from_utf8_lossy(text)))
                    );
                }
            };
            // Last TYPE wins, as in 2.42's metadata.
            self.out.families[family as usize].kind = kind;
        }
        self.end_line("")
    }

    fn skip_to_line_end(&mut self) {
        self.pos += memchr::memchr(b'\n', &self.buf[self.pos..]).unwrap_or(self.buf.len() - self.pos);
    }

    /// The name in a `# HELP`/`# TYPE` line: legacy, or quoted (our extension).
    fn metadata_name(&mut self, keyword: &str) -> Result<Cow<'a, str>, ParseError> {
        if self.peek() == Some(b'"') {
            return self.quoted_name();
        }
        let end = scan_metric_name(self.buf, self.pos);
        if end == self.pos {
            return Err(
                self.err(self.pos, format!("expected metric name after {keyword}, got {}", self.describe(self.pos)))
            );
        }
        let name = self.str_at(self.pos, end)?;
        self.pos = end;
        Ok(Cow::Borrowed(name))
    }

    /// A quoted UTF-8 name (metric or label) at `pos`.
    fn quoted_name(&mut self) -> Result<Cow<'a, str>, ParseError> {
        let q = scan_quoted(self.buf, self.pos, false).map_err(|at| self.err(at, "unterminated quoted name"))?;
        let raw = self.str_at(q.start, q.end)?;
        if raw.is_empty() {
            return Err(self.err(self.pos, "empty quoted name"));
        }
        self.pos = q.next;
        Ok(if q.escaped { unescape(raw, true) } else { Cow::Borrowed(raw) })
    }

    fn family_index(&mut self, name: Cow<'a, str>) -> u32 {
        if let Some(&i) = self.by_name.get(&*name) {
            return i;
        }
        let i = self.out.families.len() as u32;
        self.by_name.insert(name.clone(), i);
        self.out.families.push(Family::new(name));
        i
    }

    fn sample(&mut self) -> Result<(), ParseError> {
        let line = self.line;
        let name_start = self.pos;
        // The scrape cache's shortcut: a series the caller knows by its raw
        // bytes needs only its value read. The label set ends at the last
        // `}` of the line: in a line the parser accepts nothing after the
        // set can hold one (a value is a float, a timestamp digits). A line
        // with a raw newline in a label value is cut inside that value here,
        // so its bytes up to a `}` have an unclosed quote, are no accepted
        // series' text, and so no known key: the full parser reads it.
        let mut raw_key = None;
        if self.known.is_some() && self.peek() != Some(b'{') {
            // The line the caller guesses comes next (the series that
            // followed the last one found, last time).
            if let Some(g) = self.known.as_mut().and_then(|k| k.guess())
                && self.take_guess(line, g)
            {
                if let Some(k) = self.known.as_mut() {
                    k.confirm(&g);
                }
                return Ok(());
            }
            // The name ends at `{` or a space: a known line's name is all
            // metric characters (anything else, `foo-1` or a tab, makes an
            // unknown key here and the full parser reads the line).
            let rest = &self.buf[name_start..];
            let this_line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
            let name_len = memchr::memchr3(b'{', b' ', b'\t', this_line).unwrap_or(this_line.len());
            let name_end = name_start + name_len;
            let mut j = name_len;
            while this_line.get(j).copied().is_some_and(is_blank) {
                j += 1;
            }
            let series_end = if this_line.get(j) == Some(&b'{') {
                memchr::memrchr(b'}', this_line).map(|close| name_start + close + 1)
            } else {
                Some(name_end)
            };
            if let Some(end) = series_end {
                let key = crate::series_key(&self.buf[name_start..end]);
                raw_key = Some((key, end - name_start));
                if let Some(known) = self.known.as_mut().and_then(|k| k.find(key)) {
                    self.pos = end;
                    let labels = self.out.labels.len();
                    return self.rest_of_sample(line, Cow::Borrowed(""), labels, raw_key, Some(known));
                }
            }
        }
        let mut name: Option<Cow<'a, str>> = None;
        let mut series_end = name_start;
        if self.peek() != Some(b'{') {
            let end = scan_metric_name(self.buf, self.pos);
            name = Some(Cow::Borrowed(self.str_at(self.pos, end)?));
            self.pos = end;
            series_end = end;
            self.skip_blanks();
        }
        let labels_start = self.out.labels.len();
        if self.peek() == Some(b'{') {
            self.pos += 1;
            self.labels(&mut name)?;
            series_end = self.pos;
        }
        let Some(name) = name else {
            self.out.labels.truncate(labels_start);
            return Err(self.err(name_start, "sample has no metric name"));
        };
        self.check_labels(labels_start, name_start)?;
        // The key the shortcut would compute for these bytes: none for a
        // `{"quoted.name"}` line or a label value with a raw newline (the
        // shortcut never reads those).
        if self.known.is_some() && raw_key.is_none() && self.line == line && self.buf[name_start] != b'{' {
            raw_key = Some((crate::series_key(&self.buf[name_start..series_end]), series_end - name_start));
        }
        self.rest_of_sample(line, name, labels_start, raw_key, None)
    }

    /// Reads the line at `pos` as the guessed series if it is one: its first
    /// `raw_len` bytes have the guessed key, a blank follows, and the rest
    /// reads as a value and timestamp. Otherwise leaves everything as it
    /// was (the line is then read without the guess, and any error is the
    /// full parser's). The guessed bytes are those of a line the parser
    /// accepted, so they hold no newline and end where the full reading of
    /// this line would end the series: the rest of an accepted line holds no
    /// `}`.
    fn take_guess(&mut self, line: usize, g: Guess) -> bool {
        let start = self.pos;
        let Some(end) = start.checked_add(g.raw_len) else { return false };
        if !self.buf.get(end).copied().is_some_and(is_blank) || crate::series_key(&self.buf[start..end]) != g.raw_key {
            return false;
        }
        let line_start = self.line_start;
        self.pos = end;
        let labels = self.out.labels.len();
        match self.rest_of_sample(line, Cow::Borrowed(""), labels, Some((g.raw_key, g.raw_len)), Some(g.answer)) {
            Ok(()) => true,
            Err(_) => {
                (self.pos, self.line, self.line_start) = (start, line, line_start);
                false
            }
        }
    }

    /// A sample line after its labels: value, optional timestamp, line end.
    fn rest_of_sample(
        &mut self,
        line: usize,
        name: Cow<'a, str>,
        labels_start: usize,
        raw_key: Option<(u128, usize)>,
        known: Option<u128>,
    ) -> Result<(), ParseError> {
        self.skip_blanks();
        // Value token: `[^{ \t\n]+` (NUL also ends it).
        let ends_value = |b: u8| matches!(b, b'{' | b' ' | b'\t' | b'\n' | 0);
        let vstart = self.pos;
        // The common case in one pass: a plain decimal, then the token's end.
        let value = match decimal_prefix(&self.buf[vstart..]) {
            Some((v, n)) if self.buf.get(vstart + n).is_none_or(|&b| ends_value(b)) => {
                self.pos = vstart + n;
                v
            }
            _ => {
                while self.peek().is_some_and(|b| !ends_value(b)) {
                    self.pos += 1;
                }
                if self.pos == vstart {
                    return Err(
                        self.err(self.pos, format!("expected value after metric, got {}", self.describe(self.pos)))
                    );
                }
                parse_go_float(&self.buf[vstart..self.pos]).map_err(|e| {
                    self.err(
                        vstart,
                        format!(
                            "{} while parsing {:?}",
                            e.as_str(),
                            String::from_utf8_lossy(&self.buf[vstart..self.pos])
                        ),
                    )
                })?
            }
        };
        self.skip_blanks();
        let mut timestamp_ms = None;
        if self.peek().is_some_and(|b| b.is_ascii_digit()) {
            let tstart = self.pos;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.pos += 1;
            }
            let ts = parse_ms_timestamp(&self.buf[tstart..self.pos])
                .map_err(|e| self.err(tstart, format!("timestamp: {}", e.as_str())))?;
            timestamp_ms = Some(ts);
            self.skip_blanks();
            self.end_line("expected end of line after timestamp")?;
        } else {
            self.end_line("expected timestamp or end of line")?;
        }
        let labels_end = self.out.labels.len();
        self.out.samples.push(ParsedSample {
            name,
            value,
            timestamp_ms,
            family: None,
            kind: MetricType::Unknown,
            line: line as u32,
            raw_key: raw_key.map(|(k, _)| k),
            raw_len: raw_key.map_or(0, |(_, n)| u32::try_from(n).unwrap_or(u32::MAX)),
            known,
            labels: labels_start as u32..labels_end as u32,
        });
        Ok(())
    }

    /// Label pairs after `{` up to and including `}`, as 2.42's `parseLVals`:
    /// blanks anywhere between tokens, an optional comma after each pair
    /// (so a trailing comma and a missing comma both pass), no empty pair.
    fn labels(&mut self, name: &mut Option<Cow<'a, str>>) -> Result<(), ParseError> {
        loop {
            self.skip_blanks();
            let at = self.pos;
            let label_name: Cow<'a, str> = match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'"') => {
                    let quoted = self.quoted_name()?;
                    self.skip_blanks();
                    if matches!(self.peek(), Some(b',' | b'}')) {
                        // A quoted string not followed by `=` is the metric name.
                        if name.is_some() {
                            return Err(self.err(at, "metric name given twice"));
                        }
                        *name = Some(quoted);
                        if self.peek() == Some(b',') {
                            self.pos += 1;
                        }
                        continue;
                    }
                    quoted
                }
                _ => {
                    let end = scan_label_name(self.buf, self.pos);
                    if end == self.pos {
                        return Err(self.err(at, format!("expected label name, got {}", self.describe(at))));
                    }
                    let n = self.str_at(self.pos, end)?;
                    self.pos = end;
                    Cow::Borrowed(n)
                }
            };
            self.skip_blanks();
            if self.peek() != Some(b'=') {
                return Err(self.err(self.pos, format!("expected '=', got {}", self.describe(self.pos))));
            }
            self.pos += 1;
            self.skip_blanks();
            if self.peek() != Some(b'"') {
                return Err(self.err(self.pos, format!("expected label value, got {}", self.describe(self.pos))));
            }
            let q = scan_quoted(self.buf, self.pos, true).map_err(|e| self.err(e, "unterminated label value"))?;
            let raw = match self.text.and_then(|t| t.get(q.start..q.end)) {
                Some(r) => r,
                None => std::str::from_utf8(&self.buf[q.start..q.end])
                    .map_err(|_| self.err(q.start, "invalid UTF-8 label value"))?,
            };
            let value = if q.escaped { unescape(raw, true) } else { Cow::Borrowed(raw) };
            self.pos = q.next;
            if q.newlines > 0 {
                // 2.42 accepts a raw newline inside a label value; keep line numbers right.
                self.line += q.newlines;
                self.line_start = q.start + raw.rfind('\n').map_or(0, |i| i + 1);
            }
            self.out.labels.push((label_name, value));
            self.skip_blanks();
            if self.peek() == Some(b',') {
                self.pos += 1;
            }
        }
    }

    /// The checks 2.42's scrape loop and TSDB append apply to a label set:
    /// `__name__` may not be given in braces, and a label name may not repeat
    /// (a name that has an empty value somewhere is deleted as a whole first).
    fn check_labels(&mut self, start: usize, at: usize) -> Result<(), ParseError> {
        let labels = &self.out.labels[start..];
        if labels.iter().any(|(n, _)| n == "__name__") {
            return Err(self.err(at, "__name__ label inside braces"));
        }
        if labels.len() < 2 {
            return Ok(());
        }
        // Sorted by name, repeats are neighbours: linear after the sort, so a
        // hostile line with tens of thousands of labels costs n log n, not n².
        let mut order: Vec<u32> = (0..labels.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| labels[a as usize].0.cmp(&labels[b as usize].0));
        let mut dup: Option<&str> = None;
        let mut dup_with_empty = false;
        let mut i = 0;
        while i < order.len() {
            let name = &labels[order[i] as usize].0;
            let mut j = i + 1;
            while j < order.len() && labels[order[j] as usize].0 == *name {
                j += 1;
            }
            if j - i > 1 {
                if order[i..j].iter().any(|&k| labels[k as usize].1.is_empty()) {
                    dup_with_empty = true;
                } else if dup.is_none() {
                    dup = Some(name);
                }
            }
            i = j;
        }
        if let Some(n) = dup {
            return Err(self.err(at, format!("label name {n:?} is not unique")));
        }
        if dup_with_empty {
            // 2.42 deletes every label of a name that has an empty value; keep
            // one empty occurrence so consumers drop the name the same way.
            let mut kept: Vec<Label<'a>> = Vec::new();
            let mut at_name: HashMap<Cow<'a, str>, usize> = HashMap::default();
            for (n, v) in self.out.labels.drain(start..) {
                if let Some(&k) = at_name.get(&n) {
                    if v.is_empty() {
                        kept[k].1 = v;
                    }
                    continue;
                }
                at_name.insert(n.clone(), kept.len());
                kept.push((n, v));
            }
            self.out.labels.extend(kept);
        }
        Ok(())
    }

    /// Ties each sample to its family by name: `x` itself; `x_bucket` for a
    /// histogram `x`; `x_sum`/`x_count` for a histogram or summary `x`;
    /// `x_total` for a counter `x`. Anything else is untyped.
    fn resolve_families(&mut self) {
        if self.out.families.is_empty() {
            return;
        }
        let families = &self.out.families;
        let by_name = &self.by_name;
        // Consecutive samples usually share a name (one series per label set).
        let mut prev: Option<(Cow<'a, str>, Option<u32>)> = None;
        for s in &mut self.out.samples {
            if s.known.is_some() {
                // Not read: the caller knows the series.
                continue;
            }
            let found = match &prev {
                Some((n, f)) if *n == s.name => *f,
                _ => {
                    let f = resolve(&s.name, families, by_name);
                    prev = Some((s.name.clone(), f));
                    f
                }
            };
            s.family = found;
            s.kind = found.map_or(MetricType::Unknown, |i| families[i as usize].kind);
        }
    }
}

fn resolve(name: &str, families: &[Family<'_>], by_name: &HashMap<Cow<'_, str>, u32>) -> Option<u32> {
    if let Some(&i) = by_name.get(name) {
        return Some(i);
    }
    let base_of = |suffix: &str, kinds: &[MetricType]| -> Option<u32> {
        let base = name.strip_suffix(suffix)?;
        let &i = by_name.get(base)?;
        kinds.contains(&families[i as usize].kind).then_some(i)
    };
    use MetricType::*;
    base_of("_bucket", &[Histogram, GaugeHistogram])
        .or_else(|| base_of("_sum", &[Histogram, Summary]))
        .or_else(|| base_of("_count", &[Histogram, Summary]))
        .or_else(|| base_of("_total", &[Counter]))
}

/// HELP text as 2.42 unescapes it: only `\\` and `\n`; `\"` and any other
/// escape stay as written.
fn help_unescape(text: &str) -> Cow<'_, str> {
    unescape(text, false)
}
