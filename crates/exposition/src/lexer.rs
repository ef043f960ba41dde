//! Byte-level pieces shared by both parsers: name character classes, quoted
//! strings, and unescaping that only allocates when an escape is present.

use std::borrow::Cow;

// One table lookup per byte instead of a chain of range compares: name
// scanning runs over every byte of every series.
const METRIC_START: u8 = 1;
const METRIC_CHAR: u8 = 2;
const LABEL_START: u8 = 4;
const LABEL_CHAR: u8 = 8;

const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        let alpha = c.is_ascii_alphabetic();
        let digit = c.is_ascii_digit();
        let mut v = 0;
        if alpha || c == b'_' || c == b':' {
            v |= METRIC_START | METRIC_CHAR;
        }
        if digit {
            v |= METRIC_CHAR | LABEL_CHAR;
        }
        if alpha || c == b'_' {
            v |= LABEL_START | LABEL_CHAR;
        }
        t[b] = v;
        b += 1;
    }
    t
};

/// `[a-zA-Z_:]`: first character of a metric name.
pub(crate) fn is_metric_start(b: u8) -> bool {
    CLASS[b as usize] & METRIC_START != 0
}

/// `[a-zA-Z0-9_:]`.
pub(crate) fn is_metric_char(b: u8) -> bool {
    CLASS[b as usize] & METRIC_CHAR != 0
}

/// `[a-zA-Z_]`: first character of a label name (no colon, unlike metric names).
pub(crate) fn is_label_start(b: u8) -> bool {
    CLASS[b as usize] & LABEL_START != 0
}

/// `[a-zA-Z0-9_]`.
pub(crate) fn is_label_char(b: u8) -> bool {
    CLASS[b as usize] & LABEL_CHAR != 0
}

/// End of the run of bytes from `pos` matching `f`.
pub(crate) fn scan_while(buf: &[u8], pos: usize, f: impl Fn(u8) -> bool) -> usize {
    match buf.get(pos..) {
        Some(rest) => pos + rest.iter().position(|&b| !f(b)).unwrap_or(rest.len()),
        None => pos,
    }
}

/// End of a legacy metric name starting at `pos` (`pos` itself when there is none).
pub(crate) fn scan_metric_name(buf: &[u8], pos: usize) -> usize {
    match buf.get(pos) {
        Some(&b) if is_metric_start(b) => scan_while(buf, pos + 1, is_metric_char),
        _ => pos,
    }
}

/// End of a label name starting at `pos` (`pos` itself when there is none).
pub(crate) fn scan_label_name(buf: &[u8], pos: usize) -> usize {
    match buf.get(pos) {
        Some(&b) if is_label_start(b) => scan_while(buf, pos + 1, is_label_char),
        _ => pos,
    }
}

/// A double-quoted string found by [`scan_quoted`].
pub(crate) struct Quoted {
    /// Range of the content, without the quotes.
    pub start: usize,
    pub end: usize,
    /// Position just after the closing quote.
    pub next: usize,
    /// Whether a backslash occurs inside (so unescaping may allocate).
    pub escaped: bool,
    /// Raw newlines inside (Prometheus 2.42 lets a label value span lines).
    pub newlines: usize,
}

/// Scans a double-quoted string whose opening quote is at `pos`. A backslash
/// takes the next byte with it, except a newline (Prometheus' lexer rule
/// `\"(\\.|[^\\"])*\"`, where `.` excludes newline). Raw newlines are allowed
/// only when `allow_newline`. Returns the position of the offending byte (or
/// the end of input) on error.
pub(crate) fn scan_quoted(buf: &[u8], pos: usize, allow_newline: bool) -> Result<Quoted, usize> {
    debug_assert_eq!(buf.get(pos), Some(&b'"'));
    let start = pos + 1;
    let mut i = start;
    let mut escaped = false;
    let mut newlines = 0;
    loop {
        // Jump to the next byte that matters; label values are mostly plain.
        match memchr::memchr3(b'"', b'\\', b'\n', &buf[i..]) {
            None => return Err(buf.len()),
            Some(off) => i += off,
        }
        match buf[i] {
            b'"' => {
                return Ok(Quoted { start, end: i, next: i + 1, escaped, newlines });
            }
            b'\\' => {
                escaped = true;
                match buf.get(i + 1) {
                    None => return Err(i + 1),
                    Some(b'\n') => return Err(i + 1),
                    Some(_) => i += 2,
                }
            }
            _ if !allow_newline => return Err(i),
            _ => {
                newlines += 1;
                i += 1;
            }
        }
    }
}

/// Unescapes `\\`, `\n` and (when `quote`) `\"`, left to right; any other
/// backslash is kept as written together with the character after it, and so
/// is a lone trailing backslash. Borrows when nothing changes.
pub(crate) fn unescape(raw: &str, quote: bool) -> Cow<'_, str> {
    let bytes = raw.as_bytes();
    let Some(first) = bytes.iter().position(|&b| b == b'\\') else {
        return Cow::Borrowed(raw);
    };
    let mut out = String::with_capacity(raw.len());
    out.push_str(&raw[..first]);
    let mut rest = &raw[first..];
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.as_bytes().first() {
            Some(b'\\') => out.push('\\'),
            Some(b'n') => out.push('\n'),
            Some(b'"') if quote => out.push('"'),
            Some(_) => {
                // Unknown escape: keep the backslash; the next character is
                // copied as ordinary text on the next round.
                out.push('\\');
                rest = after;
                continue;
            }
            None => {
                out.push('\\');
                rest = after;
                break;
            }
        }
        rest = &after[1..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_rules() {
        assert!(matches!(unescape("plain", true), Cow::Borrowed("plain")));
        assert_eq!(unescape(r#"q\"q"#, true), "q\"q");
        assert_eq!(unescape(r#"q\"q"#, false), "q\\\"q");
        assert_eq!(unescape(r"s\\s", true), "s\\s");
        assert_eq!(unescape(r"n\nn", true), "n\nn");
        assert_eq!(unescape(r"z\z", true), "z\\z");
        assert_eq!(unescape(r"\\n", true), "\\n");
        assert_eq!(unescape(r"end\", true), "end\\");
        assert_eq!(unescape(r"\é", true), "\\é");
    }

    #[test]
    fn quoted_strings() {
        let q = scan_quoted(br#""a\"b" rest"#, 0, false).unwrap();
        assert_eq!((q.start, q.end, q.next, q.escaped), (1, 5, 6, true));
        assert!(scan_quoted(b"\"abc", 0, false).is_err());
        assert!(scan_quoted(b"\"a\nb\"", 0, false).is_err());
        assert_eq!(scan_quoted(b"\"a\nb\"", 0, true).unwrap().newlines, 1);
        assert!(scan_quoted(b"\"a\\\nb\"", 0, true).is_err());
        assert!(scan_quoted(b"\"a\\", 0, true).is_err());
    }
}

#[cfg(test)]
mod class_tests {
    use super::*;

    #[test]
    fn classes_match_the_grammar() {
        for b in 0..=255u8 {
            let (a, d) = (b.is_ascii_alphabetic(), b.is_ascii_digit());
            assert_eq!(is_metric_start(b), a || b == b'_' || b == b':', "{b}");
            assert_eq!(is_metric_char(b), a || d || b == b'_' || b == b':', "{b}");
            assert_eq!(is_label_start(b), a || b == b'_', "{b}");
            assert_eq!(is_label_char(b), a || d || b == b'_', "{b}");
        }
    }
}
