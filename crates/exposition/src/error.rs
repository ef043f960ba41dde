//! The one error type both parsers return.

/// Why a body was rejected, and where.
///
/// `line` and `column` are 1-based; `column` counts bytes. For an OpenMetrics
/// rule that spans lines (bucket order, `# EOF`, …) the position is the line
/// where the violation was detected and `rule` names the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}:{column}: {reason}{}", rule_suffix(*.rule))]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub reason: String,
    /// Short stable name of the OpenMetrics rule that was broken
    /// (`"eof-required"`, `"counter-total-suffix"`, …); `None` for the 0.0.4
    /// format and for plain syntax errors.
    pub rule: Option<&'static str>,
}

fn rule_suffix(rule: Option<&'static str>) -> String {
    match rule {
        Some(r) => format!(" (OpenMetrics rule: {r})"),
        None => String::new(),
    }
}

impl ParseError {
    pub(crate) fn new(line: usize, column: usize, reason: impl Into<String>) -> Self {
        ParseError { line, column, reason: reason.into(), rule: None }
    }

    pub(crate) fn rule(line: usize, column: usize, rule: &'static str, reason: impl Into<String>) -> Self {
        ParseError { line, column, reason: reason.into(), rule: Some(rule) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_format() {
        assert_eq!(ParseError::new(3, 7, "bad").to_string(), "line 3:7: bad");
        assert_eq!(
            ParseError::rule(1, 1, "eof-required", "no # EOF").to_string(),
            "line 1:1: no # EOF (OpenMetrics rule: eof-required)"
        );
    }
}
