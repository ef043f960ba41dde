//! `${env:VAR}`, `${env:VAR:-default}`, `${VAR}` and the `$$` escape, expanded
//! in the file's text before YAML parsing (so positions in error messages are
//! the user's). A variable that is not set expands to "" with a warning, as
//! in the Collector; `$` followed by anything else (`$1` in relabel
//! replacements) is kept as written.

use super::ConfigIssue;

pub fn expand(origin: &str, text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> (String, Vec<ConfigIssue>) {
    let mut out = String::with_capacity(text.len());
    let mut warnings = Vec::new();
    let mut line = 1usize;
    let mut col = 1usize;
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        for c in rest[..pos].chars() {
            if c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if tail.starts_with("$$") {
            out.push('$');
            rest = &tail[2..];
            col += 2;
            continue;
        }
        if tail.starts_with("${") {
            if let Some(end) = tail.find('}') {
                let inner = &tail[2..end];
                let spec = inner.strip_prefix("env:").unwrap_or(inner);
                let (name, default) = match spec.split_once(":-") {
                    Some((n, d)) => (n, Some(d)),
                    None => (spec, None),
                };
                let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if valid && (inner.starts_with("env:") || !inner.contains(':')) {
                    match (lookup(name), default) {
                        (Some(v), None) => out.push_str(&v),
                        (Some(v), Some(d)) => out.push_str(if v.is_empty() { d } else { &v }),
                        (None, Some(d)) => out.push_str(d),
                        (None, None) => warnings.push(ConfigIssue {
                            origin: origin.into(),
                            line: Some(line),
                            column: Some(col),
                            path: String::new(),
                            message: format!("environment variable {name} is not set; ${{{inner}}} expands to \"\""),
                        }),
                    }
                    col += end + 1;
                    rest = &tail[end + 1..];
                    continue;
                }
            }
        }
        out.push('$');
        col += 1;
        rest = &tail[1..];
    }
    out.push_str(rest);
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(n: &str) -> Option<String> {
        match n {
            "KEY" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_env_forms() {
        let (s, w) = expand("f", "a: ${env:KEY}\nb: ${KEY}\nc: ${env:NOPE:-dflt}\nd: $$HOME\ne: $1\nf: ${env:EMPTY:-x}", &env);
        assert_eq!(s, "a: s3cret\nb: s3cret\nc: dflt\nd: $HOME\ne: $1\nf: x");
        assert!(w.is_empty());
    }

    #[test]
    fn missing_var_warns_with_position() {
        let (s, w) = expand("f.yaml", "x: 1\ny: ${env:MISSING}", &env);
        assert_eq!(s, "x: 1\ny: ");
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].line, w[0].column), (Some(2), Some(4)));
    }
}
