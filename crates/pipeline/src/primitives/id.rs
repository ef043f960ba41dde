//! Component ids: `type[/name]`, as in the OpenTelemetry Collector.

use std::fmt;

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId {
    pub kind: String,
    pub name: Option<String>,
}

impl ComponentId {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, name) = match s.split_once('/') {
            Some((k, n)) => (k, Some(n)),
            None => (s, None),
        };
        let valid_kind = !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid_kind {
            return Err(format!("invalid component id {s:?}: the type must be letters, digits or '_'"));
        }
        if let Some(n) = name
            && (n.is_empty() || n.contains('/') || n.chars().any(char::is_whitespace))
        {
            return Err(format!(
                "invalid component id {s:?}: the name after '/' must be non-empty, without '/' or spaces"
            ));
        }
        Ok(ComponentId { kind: kind.to_string(), name: name.map(str::to_string) })
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{}/{}", self.kind, n),
            None => f.write_str(&self.kind),
        }
    }
}

impl fmt::Debug for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parse_ids() {
        let id = ComponentId::parse("prometheus/vllm").unwrap();
        assert_eq!(id.kind, "prometheus");
        assert_eq!(id.name.as_deref(), Some("vllm"));
        assert_eq!(id.to_string(), "prometheus/vllm");
        assert!(ComponentId::parse("").is_err());
        assert!(ComponentId::parse("a/").is_err());
        assert!(ComponentId::parse("a b").is_err());
    }
}
