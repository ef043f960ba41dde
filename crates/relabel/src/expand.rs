//! Go's `Regexp.Expand` template expansion, which Prometheus uses for
//! `replacement` and `target_label`.
//!
//! The rules differ from the `regex` crate's `Captures::expand` in ways that
//! change results, so they are reimplemented rather than delegated:
//! * a name is the longest run of letters, digits and `_` after `$`, so
//!   `$1x` refers to the group *named* `1x` (usually absent, so empty), not
//!   group 1 followed by `x`; write `${1}x` for that;
//! * `$$` is a literal `$`; a `$` not followed by a valid name (or an
//!   unclosed `${`) is copied literally;
//! * numbers with a leading zero (`$01`) or more than 8 digits are names;
//! * a group that did not participate expands to nothing.

use regex::{Captures, Regex};

/// Appends the expansion of `template` to `dst`.
pub(crate) fn expand(dst: &mut String, template: &str, re: &Regex, caps: &Captures<'_>) {
    let mut rest = template;
    while let Some(pos) = rest.find('$') {
        dst.push_str(&rest[..pos]);
        rest = &rest[pos + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            dst.push('$');
            rest = after;
            continue;
        }
        let Some((name, num, after)) = extract(rest) else {
            // Malformed reference: the `$` is plain text.
            dst.push('$');
            continue;
        };
        rest = after;
        match num {
            Some(n) => {
                if let Some(m) = caps.get(n) {
                    dst.push_str(m.as_str());
                }
            }
            None => {
                let found = re.capture_names().enumerate().find_map(|(i, n)| {
                    if n.map(crate::goregex::original_name) == Some(name) { caps.get(i) } else { None }
                });
                if let Some(m) = found {
                    dst.push_str(m.as_str());
                }
            }
        }
    }
    dst.push_str(rest);
}

/// True when `template` contains a `$` and so may expand to something else.
pub(crate) fn has_var(template: &str) -> bool {
    template.contains('$')
}

/// Go's `extract`: parses `name` or `{name}` at the start of `s`; returns the
/// name, its group number when it is one, and the remaining text.
fn extract(s: &str) -> Option<(&str, Option<usize>, &str)> {
    let (brace, body) = match s.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, s),
    };
    // Go: unicode.IsLetter || unicode.IsDigit || '_'. Rust's `is_alphabetic`
    // is slightly wider than Go's IsLetter (it includes letter-like marks and
    // numerals); only exotic template names could notice.
    let end = body
        .char_indices()
        .find(|&(_, c)| !(c.is_alphabetic() || c.is_numeric() || c == '_'))
        .map_or(body.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let name = &body[..end];
    let mut rest = &body[end..];
    if brace {
        rest = rest.strip_prefix('}')?;
    }
    Some((name, group_number(name), rest))
}

/// Go's rule: all ASCII digits, below 1e8 before the last digit, and no
/// leading zero unless the name is exactly "0".
fn group_number(name: &str) -> Option<usize> {
    let mut num: usize = 0;
    for b in name.bytes() {
        if !b.is_ascii_digit() || num >= 100_000_000 {
            return None;
        }
        num = num * 10 + usize::from(b - b'0');
    }
    if name.len() > 1 && name.starts_with('0') {
        return None;
    }
    Some(num)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pattern: &str, input: &str, template: &str) -> String {
        let re = Regex::new(pattern).unwrap();
        let caps = re.captures(input).unwrap();
        let mut out = String::new();
        expand(&mut out, template, &re, &caps);
        out
    }

    #[test]
    fn a_repeated_name_is_the_first_group_that_matched() {
        let re = Regex::new(&crate::goregex::translate(r"^(?:(?P<m>GET) .*|(?P<m>POST) .*)$").unwrap()).unwrap();
        for (input, want) in [("GET /a", "GET"), ("POST /b", "POST")] {
            let caps = re.captures(input).unwrap();
            let mut out = String::new();
            expand(&mut out, "${m}", &re, &caps);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn go_expand_rules() {
        let p = r"^(?:(a)(b)(?P<name>c)(x)?)$";
        assert_eq!(run(p, "abc", "$1"), "a");
        assert_eq!(run(p, "abc", "${1}x"), "ax");
        assert_eq!(run(p, "abc", "$1x"), "", "Go reads $1x as the group named 1x");
        assert_eq!(run(p, "abc", "$2-$name"), "b-c");
        assert_eq!(run(p, "abc", "${name}_"), "c_");
        assert_eq!(run(p, "abc", "$name_"), "", "name_ is one name");
        assert_eq!(run(p, "abc", "$$1"), "$1");
        assert_eq!(run(p, "abc", "$-"), "$-");
        assert_eq!(run(p, "abc", "${1"), "${1");
        assert_eq!(run(p, "abc", "$"), "$");
        assert_eq!(run(p, "abc", "$4"), "", "unmatched optional group");
        assert_eq!(run(p, "abc", "$9"), "", "no such group");
        assert_eq!(run(p, "abc", "$01"), "", "leading zero makes it a name");
        assert_eq!(run(p, "abc", "$0"), "abc");
        assert_eq!(run(p, "abc", "x$é"), "x", "unicode letters form names");
    }
}
