//! Go's `strings.ToLower` / `strings.ToUpper`, used by the `lowercase` and
//! `uppercase` actions.
//!
//! Go maps rune by rune with the *simple* Unicode case mappings; Rust's
//! `str::to_lowercase`/`to_uppercase` use the *full* mappings (`ß` → `SS`,
//! `İ` → `i̇`) and a context rule for the Greek final sigma. To produce what
//! Prometheus produces, map per char and fall back to the simple mapping
//! where the full one has several chars.

/// Go `strings.ToLower`.
pub(crate) fn go_to_lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let mut it = c.to_lowercase();
        match (it.next(), it.next()) {
            (Some(l), None) => out.push(l),
            // Only U+0130 (İ) has a multi-char full lowercase; its simple
            // lowercase is `i`.
            _ => out.push(if c == '\u{130}' { 'i' } else { c }),
        }
    }
    out
}

/// Go `strings.ToUpper`.
pub(crate) fn go_to_upper(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_uppercase();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let mut it = c.to_uppercase();
        match (it.next(), it.next()) {
            (Some(u), None) => out.push(u),
            _ => out.push(simple_upper_of_multi(c)),
        }
    }
    out
}

/// Simple uppercase of a char whose full uppercase has several chars. For
/// most (ß, ŉ, ǰ, ligatures, Greek with breathing and accent) there is no
/// simple mapping, so the char stays; the Greek small letters with
/// ypogegrammeni map to their titlecase forms.
fn simple_upper_of_multi(c: char) -> char {
    let u = c as u32;
    let mapped = match u {
        0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => u + 8,
        0x1FB3 => 0x1FBC,
        0x1FC3 => 0x1FCC,
        0x1FF3 => 0x1FFC,
        _ => u,
    };
    char::from_u32(mapped).unwrap_or(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_case_mapping_like_go() {
        assert_eq!(go_to_lower("ABC-Déf"), "abc-déf");
        assert_eq!(go_to_lower("İSTANBUL"), "istanbul");
        assert_eq!(go_to_lower("ΟΔΟΣ"), "οδοσ", "no final-sigma rule in Go");
        assert_eq!(go_to_lower("ǅ"), "ǆ");
        assert_eq!(go_to_upper("straße"), "STRAßE");
        assert_eq!(go_to_upper("ﬀ"), "ﬀ");
        assert_eq!(go_to_upper("ᾳ"), "ᾼ");
        assert_eq!(go_to_upper("ᾀ"), "ᾈ");
        assert_eq!(go_to_upper("ǅ"), "Ǆ");
        assert_eq!(go_to_upper("abc"), "ABC");
    }
}
