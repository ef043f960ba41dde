//! `${env:VAR}`, `${env:VAR:-default}`, `${VAR}` and the `$$` escape, expanded
//! in the file's text before YAML parsing (so positions in error messages are
//! the user's). A variable that is not set expands to "" with a warning, as
//! in the Collector. Kept as written: `$` followed by anything else, `${1}`
//! (a relabel group reference in a pasted Prometheus config: environment
//! variable names never start with a digit), and everything inside YAML
//! comments (the Collector expands values only).

use super::ConfigIssue;

/// Byte offset where a YAML comment starts on `line`, if any: a `#` at the
/// start or after whitespace, outside quotes.
fn comment_start(line: &str) -> Option<usize> {
    let b = line.as_bytes();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if double => i += 1,
            b'"' if !single => double = !double,
            b'\'' if !double => single = !single,
            b'#' if !single && !double && (i == 0 || b[i - 1] == b' ' || b[i - 1] == b'\t') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

pub fn expand(origin: &str, text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> (String, Vec<ConfigIssue>) {
    let mut out = String::with_capacity(text.len());
    let mut warnings = Vec::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let (value, comment) = line.split_at(comment_start(line).unwrap_or(line.len()));
        expand_line(origin, value, i + 1, lookup, &mut out, &mut warnings);
        out.push_str(comment);
    }
    (out, warnings)
}

fn expand_line(
    origin: &str,
    text: &str,
    line: usize,
    lookup: &dyn Fn(&str) -> Option<String>,
    out: &mut String,
    warnings: &mut Vec<ConfigIssue>,
) {
    let mut col = 1usize;
    let mut rest = text;
    // A relabel `replacement` is Prometheus syntax: `${1}`, `${name}` (a
    // named group) and `$$` (a literal `$`) mean what they mean there, as
    // Prometheus' own config loading leaves them; only `${env:VAR}` expands.
    let replacement = is_replacement_line(text);
    while let Some(pos) = rest.find('$') {
        col += rest[..pos].chars().count();
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if replacement && !tail.starts_with("${env:") {
            out.push('$');
            col += 1;
            rest = &tail[1..];
            continue;
        }
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
            col += 2;
            continue;
        }
        if tail.starts_with("${")
            && let Some(end) = tail.find('}')
        {
            let inner = &tail[2..end];
            let spec = inner.strip_prefix("env:").unwrap_or(inner);
            let (name, default) = match spec.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (spec, None),
            };
            let valid = !name.is_empty()
                && !name.as_bytes()[0].is_ascii_digit()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if valid && (inner.starts_with("env:") || !inner.contains(':')) {
                let value = match (lookup(name), default) {
                    (Some(v), None) => v,
                    (Some(v), Some(d)) => {
                        if v.is_empty() {
                            d.to_string()
                        } else {
                            v
                        }
                    }
                    (None, Some(d)) => d.to_string(),
                    (None, None) => {
                        warnings.push(ConfigIssue {
                            origin: origin.into(),
                            line: Some(line),
                            column: Some(col),
                            path: String::new(),
                            message: format!("environment variable {name} is not set; ${{{inner}}} expands to \"\""),
                        });
                        String::new()
                    }
                };
                // The Collector expands values after parsing, so a reference
                // that is a whole plain scalar and expands to nothing is the
                // empty string, not YAML's null.
                let before = out.trim_end_matches([' ', '\t']);
                let after = tail[end + 1..].trim_start_matches([' ', '\t']);
                let dash_item =
                    before.strip_suffix('-').is_some_and(|b| b.is_empty() || b.ends_with([' ', '\t', '\n']));
                let whole = (before.ends_with([':', '[', ',', '{']) || dash_item)
                    && (after.is_empty() || after.starts_with(['\n', '\r', ',', '}', ']', '#']));
                if value.is_empty() && whole {
                    out.push_str("\"\"");
                } else {
                    out.push_str(&value);
                }
                col += end + 1;
                rest = &tail[end + 1..];
                continue;
            }
        }
        out.push('$');
        col += 1;
        rest = &tail[1..];
    }
    out.push_str(rest);
}

/// A line holding a relabel rule's `replacement` key (block or flow style).
fn is_replacement_line(line: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    t.starts_with("replacement:") || line.contains(" replacement:") || line.contains("{replacement:")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cluster: ${env:UNSET}` is `cluster: ""` (a string), as the
    /// Collector reads it; inside a longer scalar nothing is added.
    #[test]
    fn an_empty_whole_value_is_the_empty_string() {
        let env = |k: &str| (k == "EMPTY").then(String::new);
        let (s, w) = expand(
            "f",
            "a: ${env:UNSET}\nb: [${EMPTY}, x]\nc: pre-${env:UNSET}-post\nd: {k: ${UNSET}}\ne: x-${UNSET}\n  - ${UNSET}\n",
            &env,
        );
        assert_eq!(s, "a: \"\"\nb: [\"\", x]\nc: pre--post\nd: {k: \"\"}\ne: x-\n  - \"\"\n");
        assert_eq!(w.len(), 5);
    }

    /// Prometheus leaves a replacement's `${name}`, `${1}` and `$$` alone;
    /// so does the expansion (only `${env:...}` expands there).
    #[test]
    fn relabel_replacements_keep_prometheus_syntax() {
        let env = |k: &str| (k == "KEY").then(|| "v".to_string());
        let (s, w) = expand(
            "f",
            "    replacement: '${service}-$$1-${1}'\n  - {source_labels: [a], regex: '(?P<x>.*)', replacement: '${x}:${env:KEY}'}\nother: $$HOME ${KEY}\n",
            &env,
        );
        assert_eq!(
            s,
            "    replacement: '${service}-$$1-${1}'\n  - {source_labels: [a], regex: '(?P<x>.*)', replacement: '${x}:v'}\nother: $HOME v\n"
        );
        assert!(w.is_empty(), "no warning for a capture group: {w:?}");
    }

    fn env(n: &str) -> Option<String> {
        match n {
            "KEY" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_env_forms() {
        let (s, w) =
            expand("f", "a: ${env:KEY}\nb: ${KEY}\nc: ${env:NOPE:-dflt}\nd: $$HOME\ne: $1\nf: ${env:EMPTY:-x}", &env);
        assert_eq!(s, "a: s3cret\nb: s3cret\nc: dflt\nd: $HOME\ne: $1\nf: x");
        assert!(w.is_empty());
    }

    #[test]
    fn group_references_and_comments_are_kept() {
        let (s, w) = expand("f", "r: '${1}:9100' # ${env:KEY} $$ ${NOPE}\nq: \"a # ${env:KEY}\" # x\n", &env);
        assert_eq!(s, "r: '${1}:9100' # ${env:KEY} $$ ${NOPE}\nq: \"a # s3cret\" # x\n");
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn missing_var_warns_with_position() {
        let (s, w) = expand("f.yaml", "x: 1\ny: ${env:MISSING}", &env);
        // The whole value: the empty string, as the Collector reads it.
        assert_eq!(s, "x: 1\ny: \"\"");
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].line, w[0].column), (Some(2), Some(4)));
    }
}
