//! Go (RE2) regular-expression compatibility for the `regex` crate.
//!
//! Prometheus compiles relabel regexes with Go's `regexp` package. The `regex`
//! crate implements nearly the same language, but a few constructs mean
//! different things, so patterns are rewritten here before compiling:
//!
//! * Go's Perl classes `\d \w \s` (and negations) and `\b \B` are ASCII-only;
//!   the `regex` crate makes them Unicode-aware by default. They are rewritten
//!   to explicit ASCII classes so that `\w+` does not suddenly match `é`.
//! * Inside a character class Go treats `[` (not starting `[:name:]`), `&&`,
//!   `~~` and `--` literally; the `regex` crate reads them as nested classes and
//!   set operations. They are escaped.
//! * Go treats a `{` that does not start a valid repetition as a literal, and
//!   `\<`/`\>` as literal `<`/`>`; the `regex` crate errors or reads word
//!   boundaries.
//! * `\Q...\E` (Go quoting) does not exist in the `regex` crate; the quoted text
//!   is escaped.
//! * Constructs Go 1.19 (what Prometheus 2.42 is built with) rejects are
//!   rejected too, so a config that Prometheus refuses is refused here:
//!   `(?<name>...)`, the `x`, `u` and `R` flags, unknown escapes, repetition
//!   counts above 1000.

/// The suffix a repeated group name gets (see `translate_group_flags`).
pub(crate) const DUP: &str = "__go_dup_";

/// A group's name as written in the Go pattern.
pub(crate) fn original_name(n: &str) -> &str {
    match n.rfind(DUP) {
        Some(p) if n[p + DUP.len()..].chars().all(|c| c.is_ascii_digit()) => &n[..p],
        _ => n,
    }
}

/// Go's `\s`: `[\t\n\f\r ]` (no `\v`).
const SPACE: &str = r"\t\n\x0C\r ";
const DIGIT: &str = "0-9";
const WORD: &str = "0-9A-Za-z_";

/// Rewrites a Go regular expression into an equivalent `regex`-crate pattern.
/// The error text says what Go would have objected to.
pub(crate) fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut i = 0;
    let mut in_class = false;
    let mut names: Vec<String> = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            i = translate_escape(&chars, i, in_class, &mut out)?;
            continue;
        }
        if in_class {
            match c {
                ']' => {
                    in_class = false;
                    out.push(']');
                }
                '[' => {
                    // `[:alpha:]` keeps its meaning; any other `[` is a literal in Go.
                    if chars.get(i + 1) == Some(&':')
                        && let Some(end) = find_posix_end(&chars, i + 2)
                    {
                        out.extend(&chars[i..=end]);
                        i = end + 1;
                        continue;
                    }
                    out.push_str(r"\[");
                }
                '&' | '~' => {
                    out.push('\\');
                    out.push(c);
                }
                '-' => {
                    // A `-` right after another `-` would form the `--` set
                    // difference operator in the regex crate; Go reads a literal.
                    if i > 0 && chars[i - 1] == '-' {
                        out.push_str(r"\-");
                    } else {
                        out.push('-');
                    }
                }
                _ => out.push(c),
            }
            i += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push('[');
                i += 1;
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                // A `]` first in a class is a literal in both dialects; escape it
                // so the scanner above does not mistake it for the end.
                if chars.get(i) == Some(&']') {
                    out.push_str(r"\]");
                    i += 1;
                }
            }
            '(' => {
                out.push('(');
                i += 1;
                if chars.get(i) == Some(&'?') {
                    i = translate_group_flags(&chars, i, &mut out, &mut names)?;
                }
            }
            '{' => match parse_repeat(&chars, i) {
                Some((end, min, max)) => {
                    if min > 1000 || max.is_some_and(|m| m > 1000) {
                        return Err(format!("invalid repeat count: `{}`", chars[i..=end].iter().collect::<String>()));
                    }
                    out.extend(&chars[i..=end]);
                    i = end + 1;
                }
                None => {
                    out.push_str(r"\{");
                    i += 1;
                }
            },
            '}' => {
                out.push_str(r"\}");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Handles the escape starting at `chars[i] == '\\'`; returns the next index.
fn translate_escape(chars: &[char], i: usize, in_class: bool, out: &mut String) -> Result<usize, String> {
    let Some(&c) = chars.get(i + 1) else {
        return Err("trailing backslash at end of expression".into());
    };
    let mut next = i + 2;
    match c {
        'd' | 'D' | 'w' | 'W' | 's' | 'S' => {
            let set = match c.to_ascii_lowercase() {
                'd' => DIGIT,
                'w' => WORD,
                _ => SPACE,
            };
            let negated = c.is_ascii_uppercase();
            match (in_class, negated) {
                // Nested classes are fine inside a regex-crate class.
                (true, false) => out.push_str(set),
                (true, true) | (false, true) => {
                    out.push_str("[^");
                    out.push_str(set);
                    out.push(']');
                }
                (false, false) => {
                    out.push('[');
                    out.push_str(set);
                    out.push(']');
                }
            }
        }
        'b' | 'B' if !in_class => {
            out.push_str(if c == 'b' { r"(?-u:\b)" } else { r"(?-u:\B)" });
        }
        'A' | 'z' if !in_class => {
            out.push('\\');
            out.push(c);
        }
        'Q' if !in_class => {
            // Everything up to `\E` (or the end) is literal.
            let mut j = next;
            while j < chars.len() {
                if chars[j] == '\\' && chars.get(j + 1) == Some(&'E') {
                    break;
                }
                push_literal(chars[j], out);
                j += 1;
            }
            next = if j < chars.len() { j + 2 } else { j };
        }
        'a' => out.push_str(r"\x07"),
        'f' | 'n' | 'r' | 't' | 'v' => {
            out.push('\\');
            out.push(c);
        }
        'x' => {
            // `\xHH` or `\x{H...}`: same syntax in both dialects; copy it
            // verbatim so the braces are not taken for a repeat.
            out.push_str(r"\x");
            if chars.get(next) == Some(&'{') {
                while next < chars.len() {
                    out.push(chars[next]);
                    next += 1;
                    if chars[next - 1] == '}' {
                        break;
                    }
                }
            } else {
                for _ in 0..2 {
                    if let Some(&h) = chars.get(next) {
                        out.push(h);
                        next += 1;
                    }
                }
            }
        }
        'p' | 'P' => {
            out.push('\\');
            out.push(c);
            // Copy `{Name}` verbatim so the braces are not taken for a repeat.
            if chars.get(next) == Some(&'{') {
                while next < chars.len() {
                    out.push(chars[next]);
                    next += 1;
                    if chars[next - 1] == '}' {
                        break;
                    }
                }
            } else if let Some(&n) = chars.get(next) {
                out.push(n);
                next += 1;
            }
        }
        '0'..='7' => {
            // Go: octal escapes; a lone `\1`..`\7` would be a backreference,
            // which RE2 does not support.
            let followed_by_octal = chars.get(next).is_some_and(|d| ('0'..='7').contains(d));
            if c != '0' && !followed_by_octal {
                return Err(format!("invalid escape sequence: `\\{c}`"));
            }
            let mut value = c as u32 - '0' as u32;
            for _ in 1..3 {
                match chars.get(next) {
                    Some(d @ '0'..='7') => {
                        value = value * 8 + (*d as u32 - '0' as u32);
                        next += 1;
                    }
                    _ => break,
                }
            }
            out.push_str(&format!(r"\x{{{value:X}}}"));
        }
        // Go: any ASCII character but a letter or digit escapes to itself
        // (`\ `, `\_`, `\-`).
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => push_literal(c, out),
        c => return Err(format!("invalid escape sequence: `\\{c}`")),
    }
    Ok(next)
}

/// Pushes `c` as a literal that means the same inside and outside a class.
fn push_literal(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() || !c.is_ascii() {
        out.push(c);
    } else {
        out.push_str(&format!(r"\x{{{:X}}}", c as u32));
    }
}

/// Handles `(?` at `chars[i] == '?'`; returns the index after what it copied.
fn translate_group_flags(chars: &[char], i: usize, out: &mut String, names: &mut Vec<String>) -> Result<usize, String> {
    match chars.get(i + 1) {
        Some('P') => {
            // `(?P<name>`: supported by both. `(?P=name)` (backreference) is not.
            if chars.get(i + 2) != Some(&'<') {
                return Err("invalid or unsupported Perl syntax: `(?P`".into());
            }
            let start = i + 3;
            let end = (start..chars.len()).find(|&j| chars[j] == '>').ok_or("invalid named capture: `(?P<`")?;
            let name: String = chars[start..end].iter().collect();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("invalid named capture: `(?P<{name}>`"));
            }
            // Go allows a name on several groups (`${name}` is the first of
            // them that matched); the regex crate does not: later ones get
            // a suffix that `expand` reads through.
            let n = names.iter().filter(|x| **x == name).count();
            out.push_str("?P<");
            out.push_str(&name);
            if n > 0 {
                out.push_str(&format!("{DUP}{n}"));
            }
            out.push('>');
            names.push(name);
            Ok(end + 1)
        }
        Some(':') => {
            out.push_str("?:");
            Ok(i + 2)
        }
        _ => {
            // Flags `(?flags)` or `(?flags:`; Go knows only i, m, s, U.
            let mut j = i + 1;
            while j < chars.len() && chars[j] != ')' && chars[j] != ':' {
                if !matches!(chars[j], 'i' | 'm' | 's' | 'U' | '-') {
                    return Err(format!(
                        "invalid or unsupported Perl syntax: `(?{}`",
                        chars[i + 1..=j].iter().collect::<String>()
                    ));
                }
                j += 1;
            }
            out.push('?');
            out.extend(&chars[i + 1..j]);
            Ok(j)
        }
    }
}

/// `[:name:]` inside a class: index of the closing `]`, if well formed.
fn find_posix_end(chars: &[char], start: usize) -> Option<usize> {
    let mut j = start;
    while j + 1 < chars.len() {
        if chars[j] == ':' && chars[j + 1] == ']' {
            return Some(j + 1);
        }
        if !chars[j].is_ascii_alphabetic() && chars[j] != '^' {
            return None;
        }
        j += 1;
    }
    None
}

/// Parses `{n}`, `{n,}` or `{n,m}` at `chars[i] == '{'` the way Go does:
/// returns (index of `}`, n, m) or None when Go would read a literal `{`.
fn parse_repeat(chars: &[char], i: usize) -> Option<(usize, u32, Option<u32>)> {
    let mut j = i + 1;
    let min = parse_int(chars, &mut j)?;
    let max = if chars.get(j) == Some(&',') {
        j += 1;
        if chars.get(j) == Some(&'}') { None } else { Some(parse_int(chars, &mut j)?) }
    } else {
        Some(min)
    };
    (chars.get(j) == Some(&'}')).then_some((j, min, max))
}

fn parse_int(chars: &[char], j: &mut usize) -> Option<u32> {
    let start = *j;
    while chars.get(*j).is_some_and(|c| c.is_ascii_digit()) {
        *j += 1;
    }
    if *j == start {
        return None;
    }
    // Go disallows leading zeros ("01") in repeat counts: reads a literal.
    if *j - start > 1 && chars[start] == '0' {
        return None;
    }
    // Saturate rather than overflow; anything this big fails the 1000 check.
    Some(chars[start..*j].iter().fold(0u32, |acc, c| acc.saturating_mul(10).saturating_add(*c as u32 - '0' as u32)))
}

#[cfg(test)]
mod tests {
    use super::translate;
    use regex::Regex;

    fn full(p: &str) -> Regex {
        Regex::new(&translate(&format!("^(?:{p})$")).expect("translate")).expect("compile")
    }

    #[test]
    fn perl_classes_are_ascii() {
        assert!(!full(r"\w+").is_match("é"));
        assert!(full(r"\W").is_match("é"));
        assert!(!full(r"\d").is_match("٣"));
        assert!(full(r"[\w.]+").is_match("a_b.c9"));
        assert!(!full(r"[\w.]+").is_match("aé"));
        assert!(full(r"[^\d]").is_match("x"));
        assert!(full(r"a\sb").is_match("a\tb"));
        assert!(!full(r"a\sb").is_match("a\u{0B}b"));
        assert!(full(r".*\bfoo\b.*").is_match("x foo y"));
    }

    #[test]
    fn literal_brackets_braces_and_set_ops() {
        assert!(full(r"[[a]+").is_match("[a["));
        assert!(full(r"[a&&b]+").is_match("a&b"));
        assert!(full(r"[a~~b]+").is_match("~"));
        assert!(full(r"a{").is_match("a{"));
        assert!(full(r"a{,5}").is_match("a{,5}"));
        assert!(full(r"a{2}").is_match("aa"));
        assert!(full(r"[[:alpha:]]+").is_match("abc"));
        assert!(full(r"\<x\>").is_match("<x>"));
        assert!(full(r"\Q.*\E").is_match(".*"));
        assert!(!full(r"\Q.*\E").is_match("ab"));
        assert!(full(r"\101").is_match("A"));
        assert!(full(r"\p{Greek}+").is_match("αβ"));
        assert!(full(r"\x{1F600}\x41").is_match("\u{1F600}A"));
    }

    #[test]
    fn escaped_space_and_repeated_group_names() {
        // Go 1.19's regexp/syntax: an escaped ASCII non-alphanumeric is itself.
        assert!(full(r"GET\ /v1").is_match("GET /v1"));
        assert!(full(r"a\_b").is_match("a_b"));
        // A name on two groups compiles (the regex crate alone refuses it).
        let re = full(r"(?P<m>GET) .*|(?P<m>POST) .*");
        assert!(re.is_match("POST /x"));
        assert!(translate("(?P<>a)").is_err());
        assert!(translate("(?P<a-b>a)").is_err());
    }

    #[test]
    fn rejects_what_go_rejects() {
        for p in [r"(?<n>a)", r"(?x)a", r"\1", r"a{1001}", r"\e", r"(?P=n)"] {
            assert!(translate(p).is_err(), "{p}");
        }
    }
}
