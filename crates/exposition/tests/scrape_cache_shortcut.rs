//! The scrape cache's shortcut (`parse_as_prometheus_known`) against the
//! full parser, on bodies others wrote: every Prometheus 2.42 oracle case,
//! every real capture, and mutations of them that a target could send on a
//! later scrape (values changed, labels reordered, bytes appended to the
//! label set, a tab for a space, a raw newline in a label value).
//!
//! For each pair (an earlier body whose raw keys the caller learned, a
//! later body), parsing the later body with the shortcut must give what the
//! full parser gives: the same `Ok`/`Err` (the same message), and per
//! sample the same value bits, timestamp and line, and for a line read in
//! full the same name, labels, family and type; a sample whose name and
//! labels were skipped must be one whose key was learned from a line with
//! exactly the name and labels the full parser reads now.
//!
//! Each pair is parsed three ways: with a plain lookup; with guesses as the
//! scrape cache makes them (the line after the last one found, in the
//! earlier body's order); and with wrong guesses (two lines further on),
//! which must be refused, or be right after all, without changing the
//! result.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use infertel_exposition::{Exposition, Format, Guess, KnownLines, parse_as_prometheus, parse_as_prometheus_known};

/// A series as the full parser read it: its name, then its labels.
type Labels = Vec<(String, String)>;

fn owned(e: &Exposition<'_>, s: &infertel_exposition::ParsedSample<'_>) -> Labels {
    std::iter::once(("__name__".to_string(), s.name.to_string()))
        .chain(e.labels(s).iter().map(|(n, v)| (n.to_string(), v.to_string())))
        .collect()
}

/// The earlier body's lines in order, answering as the scrape cache does:
/// by key, and with a guess for the line after the last one found (or,
/// `skip` lines further on, a wrong one).
struct Guesser<'l> {
    learned: &'l HashMap<u128, Labels>,
    order: Vec<(u128, usize)>,
    next: usize,
    skip: usize,
    taken: usize,
}

impl<'l> Guesser<'l> {
    fn new(earlier: &[u8], learned: &'l HashMap<u128, Labels>, skip: usize) -> Self {
        let mut order = Vec::new();
        if let Ok(e) = parse_as_prometheus_known(earlier, Format::PrometheusText, &mut |_: u128| None) {
            for s in &e.samples {
                if let Some(k) = s.raw_key
                    && !order.iter().any(|&(o, _)| o == k)
                {
                    order.push((k, s.raw_len as usize));
                }
            }
        }
        Guesser { learned, order, next: 0, skip, taken: 0 }
    }
}

impl KnownLines for Guesser<'_> {
    fn find(&mut self, raw_key: u128) -> Option<u128> {
        self.learned.get(&raw_key)?;
        self.next = self.order.iter().position(|&(k, _)| k == raw_key).map_or(0, |i| i + 1);
        Some(raw_key)
    }

    fn guess(&mut self) -> Option<Guess> {
        let &(raw_key, raw_len) = self.order.get(self.next + self.skip)?;
        Some(Guess { raw_len, raw_key, answer: raw_key })
    }

    fn confirm(&mut self, g: &Guess) {
        // A guess two lines on is taken only where it is right after all
        // (the later body left lines out); the results say whether it was.
        self.taken += 1;
        self.find(g.raw_key);
    }
}

/// The raw keys of `body`'s lines, each with the labels the full parser read.
fn learn(body: &[u8]) -> HashMap<u128, Labels> {
    let mut out = HashMap::new();
    if let Ok(e) = parse_as_prometheus_known(body, Format::PrometheusText, &mut |_: u128| None) {
        for s in &e.samples {
            assert!(s.known.is_none());
            if let Some(k) = s.raw_key {
                let labels = owned(&e, s);
                if let Some(prev) = out.insert(k, labels.clone()) {
                    assert_eq!(prev, labels, "one raw key, two label sets");
                }
            }
        }
    }
    out
}

/// Parses `later` with the keys learned from `earlier`, the three ways;
/// returns how many samples took the shortcut (the same each way) and how
/// many of them by a guess.
fn check(earlier: &[u8], later: &[u8], what: &str) -> (usize, usize) {
    let learned = learn(earlier);
    let plain =
        compare(&learned, later, &mut |k: u128| learned.contains_key(&k).then_some(k), &format!("{what}, looked up"));
    let mut guesser = Guesser::new(earlier, &learned, 0);
    let guessed = compare(&learned, later, &mut guesser, &format!("{what}, guessed"));
    let mut wrong = Guesser::new(earlier, &learned, 2);
    let refused = compare(&learned, later, &mut wrong, &format!("{what}, guessed wrong"));
    assert_eq!((plain, plain), (guessed, refused), "{what}: as many shortcuts each way");
    (plain, guesser.taken)
}

fn compare(learned: &HashMap<u128, Labels>, later: &[u8], known: &mut dyn KnownLines, what: &str) -> usize {
    let full = parse_as_prometheus(later, Format::PrometheusText);
    let fast = parse_as_prometheus_known(later, Format::PrometheusText, known);
    let (full, fast) = match (full, fast) {
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "{what}: different errors");
            return 0;
        }
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => panic!("{what}: full parser {:?}, shortcut {:?}", a.map(|_| ()), b.map(|_| ())),
    };
    assert_eq!(full.samples.len(), fast.samples.len(), "{what}");
    assert_eq!(full.families, fast.families, "{what}");
    let mut hits = 0;
    for (a, b) in full.samples.iter().zip(&fast.samples) {
        assert_eq!(a.value.to_bits(), b.value.to_bits(), "{what}: {}", a.name);
        assert_eq!((a.timestamp_ms, a.line), (b.timestamp_ms, b.line), "{what}");
        match b.known {
            Some(k) => {
                hits += 1;
                assert!(fast.labels(b).is_empty() && b.name.is_empty(), "{what}: a known line's name and labels");
                assert_eq!((b.family, b.kind), (None, infertel_exposition::MetricType::Unknown), "{what}");
                assert_eq!(learned[&k], owned(&full, a), "{what}: line {} took another series' labels", a.line);
                assert_eq!(b.raw_key, Some(k), "{what}");
            }
            None => {
                assert_eq!(owned(&full, a), owned(&fast, b), "{what}");
                assert_eq!((a.family, a.kind), (b.family, b.kind), "{what}");
            }
        }
    }
    hits
}

fn oracle_bodies() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("oracle").join("cases");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("oracle cases")
        .map(|e| e.expect("entry").path())
        .map(|p| (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), std::fs::read(&p).expect("case")))
        .collect();
    v.sort();
    assert!(v.len() > 150, "the oracle cases are there");
    v
}

fn real_fixtures() -> Vec<(String, Vec<u8>)> {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/real");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("shared/fixtures/real")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "prom"))
        .map(|p| {
            (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), std::fs::read(&p).expect("fixture"))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 9, "the real captures are there");
    v
}

/// Later scrapes of `body` as a target could send them.
fn mutations(body: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let text = String::from_utf8_lossy(body).into_owned();
    let lines: Vec<&str> = text.split('\n').collect();
    let map = |f: &dyn Fn(&str) -> String| lines.iter().map(|l| f(l)).collect::<Vec<_>>().join("\n").into_bytes();
    let sample = |l: &str| !l.is_empty() && !l.starts_with('#');
    vec![
        ("same", body.to_vec()),
        // New values: the last token of every sample line.
        (
            "values",
            map(&|l| match l.rsplit_once(' ') {
                Some((head, _)) if sample(l) => format!("{head} 7.5"),
                _ => l.to_string(),
            }),
        ),
        // A `}` after the label set: the shortcut must not read past it.
        (
            "brace after",
            map(&|l| if sample(l) && l.contains('}') { l.replacen("} ", "}} ", 1) } else { l.to_string() }),
        ),
        // A tab between name and labels or value.
        ("tab", map(&|l| if sample(l) { l.replacen(' ', "\t", 1) } else { l.to_string() })),
        // Label order reversed (a different spelling of the same series).
        (
            "reordered",
            map(&|l| {
                let (Some(open), Some(close)) = (l.find('{'), l.rfind('}')) else { return l.to_string() };
                if !sample(l) || l[open..close].contains('\\') || l[open..close].contains("\",\"") {
                    return l.to_string();
                }
                let mut parts: Vec<&str> = l[open + 1..close].split("\",").collect();
                let n = parts.len();
                if n < 2 {
                    return l.to_string();
                }
                let fixed: Vec<String> = parts
                    .drain(..)
                    .enumerate()
                    .map(|(i, p)| if i + 1 < n { format!("{p}\"") } else { p.to_string() })
                    .rev()
                    .collect();
                format!("{}{{{}}}{}", &l[..open], fixed.join(","), &l[close + 1..])
            }),
        ),
        // A raw newline inside the first label value (2.42 accepts it).
        ("newline in value", map(&|l| if sample(l) { l.replacen("=\"", "=\"a\nb", 1) } else { l.to_string() })),
        // A value with a `}` in it, then the line's own labels.
        ("brace in value", map(&|l| if sample(l) { l.replacen("=\"", "=\"}", 1) } else { l.to_string() })),
    ]
}

#[test]
fn shortcut_reads_every_oracle_case_and_its_mutations_as_the_full_parser() {
    let bodies = oracle_bodies();
    for (name, body) in &bodies {
        for (m, later) in mutations(body) {
            check(body, &later, &format!("{name} then {m}"));
            check(&later, body, &format!("{name} after {m}"));
        }
    }
    // Keys learned from one case, used on every other: a key must never
    // lend its labels to another line.
    for (a, body_a) in &bodies {
        for (b, body_b) in bodies.iter().take(40) {
            check(body_a, body_b, &format!("{b} with the keys of {a}"));
        }
    }
}

#[test]
fn shortcut_takes_every_line_of_a_real_capture_seen_before() {
    for (name, body) in real_fixtures() {
        let full = parse_as_prometheus(&body, Format::PrometheusText).expect("fixture parses");
        let (hits, guessed) = check(&body, &body, &name);
        assert_eq!(hits, full.samples.len(), "{name}: every line was seen before");
        // Every line is guessed, but a line that repeats an earlier line's
        // series (found by key) and the line after it.
        let keyed = parse_as_prometheus_known(&body, Format::PrometheusText, &mut |_: u128| None).expect("parses");
        let distinct = keyed.samples.iter().filter_map(|s| s.raw_key).collect::<std::collections::HashSet<_>>().len();
        assert!(guessed + 2 * (hits - distinct) >= hits, "{name}: {guessed} of {hits} lines guessed");
        for (m, later) in mutations(&body) {
            let (hits, guessed) = check(&body, &later, &format!("{name} then {m}"));
            match m {
                // Only the values changed: every line takes the shortcut,
                // and all but the first by a guess.
                "same" | "values" => {
                    assert_eq!(hits, full.samples.len(), "{name} then {m}");
                    assert!(guessed + 2 * (hits - distinct) >= hits, "{name} then {m}: {guessed} guessed");
                }
                // Every labelled line is new bytes.
                "brace in value" | "newline in value" => {
                    let unlabelled = full.samples.iter().filter(|s| full.labels(s).is_empty()).count();
                    assert!(hits <= unlabelled, "{name} then {m}: {hits} hits")
                }
                _ => {}
            }
        }
    }
}

#[test]
fn a_known_line_with_bad_bytes_after_its_labels_fails_as_before() {
    let earlier = b"a{b=\"x\"} 1\nc 2\n";
    for later in [
        &b"a{b=\"x\"}} 1\n"[..],
        b"a{b=\"x\"} 1}\n",
        b"a{b=\"x\"} 1 2 3\n",
        b"a{b=\"x\"} 1\r\n",
        b"a{b=\"x\"}\n",
        b"c\n",
        b"c 1e400\n",
        b"a{b=\"x\"} 1 -5\n",
    ] {
        let full = parse_as_prometheus(later, Format::PrometheusText);
        assert!(full.is_err(), "{:?} is refused by the full parser", String::from_utf8_lossy(later));
        check(earlier, later, &String::from_utf8_lossy(later));
    }
    // Accepted oddities next to a known name: `c-1 2` is `c`, value -1, at
    // 2 ms (2.42 needs no blank before the value); the bytes before the
    // value differ from the known `c`, so the full parser reads it.
    for later in [&b"c-1 2\n"[..], b"c\t2\n", b"c  2\n", b"a{b=\"x\",} 1\n"] {
        assert!(parse_as_prometheus(later, Format::PrometheusText).is_ok());
        check(earlier, later, &String::from_utf8_lossy(later));
    }
}
