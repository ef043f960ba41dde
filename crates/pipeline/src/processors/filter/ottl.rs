//! OTTL conditions, the subset filter configs use: paths (`name`, `type`,
//! `unit`, `description`, `aggregation_temporality`, `is_monotonic`,
//! `attributes["k"]`, `resource.attributes["k"]`, `value_double`,
//! `value_int`, with or without their `resource.` / `metric.` /
//! `datapoint.` context prefix), literals (strings, numbers, `true`,
//! `false`, `nil`, `METRIC_DATA_TYPE_*`, `AGGREGATION_TEMPORALITY_*`), the
//! comparisons `==`, `!=`, `<`,
//! `<=`, `>`, `>=`, `and`, `or`, `not`, parentheses and the converters
//! `IsMatch`, `HasAttrKeyOnDatapoint` and `HasAttrOnDatapoint`.
//!
//! Comparisons follow OTTL's `compare.go`: values of different types are
//! never equal (`!=` is true, the orderings false); `nil` equals only
//! `nil`; strings order bytewise; integers and floats compare as numbers;
//! booleans only compare for (in)equality. Anything else (another
//! function, arithmetic, an editor) is refused when the config is loaded,
//! naming it.

use crate::processors::pdata::DataType;
use regex::Regex;

/// Where a condition is evaluated: once per resource (target), per metric
/// or per data point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Resource,
    Metric,
    Datapoint,
}

impl Context {
    pub fn as_str(self) -> &'static str {
        match self {
            Context::Resource => "resource",
            Context::Metric => "metric",
            Context::Datapoint => "datapoint",
        }
    }

    pub fn parse(s: &str) -> Option<Context> {
        match s {
            "resource" => Some(Context::Resource),
            "metric" => Some(Context::Metric),
            "datapoint" => Some(Context::Datapoint),
            _ => None,
        }
    }
}

/// The context a `metric_conditions` string is evaluated in, inferred from
/// its paths' prefixes as contrib infers it: the lowest context named
/// (`datapoint.` below `metric.` below `resource.`); the metric-context
/// functions need the metric context.
pub fn infer_context(src: &str) -> Result<Context, String> {
    let toks = lex(src)?;
    let mut lowest: Option<Context> = None;
    let rank = |c: Context| match c {
        Context::Resource => 0,
        Context::Metric => 1,
        Context::Datapoint => 2,
    };
    for (i, t) in toks.iter().enumerate() {
        let named = match t {
            Tok::Ident(id) if toks.get(i + 1) == Some(&Tok::Dot) && (i == 0 || toks[i - 1] != Tok::Dot) => {
                Context::parse(id)
            }
            Tok::Ident(id) if id == "HasAttrKeyOnDatapoint" || id == "HasAttrOnDatapoint" => Some(Context::Metric),
            _ => None,
        };
        if let Some(c) = named
            && lowest.is_none_or(|l| rank(c) > rank(l))
        {
            lowest = Some(c);
        }
    }
    lowest.ok_or_else(|| {
        "no path names its context: write metric.name, datapoint.attributes[\"k\"] or resource.attributes[\"k\"]"
            .to_string()
    })
}

#[derive(Clone, Debug)]
pub enum Path {
    Name,
    Type,
    Unit,
    Description,
    Attribute(String),
    ResourceAttribute(String),
    ValueDouble,
    ValueInt,
    AggregationTemporality,
    IsMonotonic,
}

#[derive(Clone, Debug)]
pub enum Operand {
    Path(Path),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Nil,
    IsMatch(Box<Operand>, Regex),
    HasAttrKey(String),
    HasAttr(String, String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug)]
pub enum Condition {
    Or(Vec<Condition>),
    And(Vec<Condition>),
    Not(Box<Condition>),
    Compare(Operand, Op, Operand),
    /// A boolean operand on its own (`IsMatch(...)`, `true`).
    Truth(Operand),
}

/// A value a path or literal evaluates to.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Str(std::borrow::Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Nil,
}

/// What a condition reads from the series (or metric) it is evaluated on.
pub trait Subject {
    fn path(&self, p: &Path) -> Value<'_>;
    fn has_attr_key(&self, key: &str) -> bool;
    fn has_attr(&self, key: &str, value: &str) -> bool;
}

impl Condition {
    pub fn eval(&self, s: &dyn Subject) -> bool {
        match self {
            Condition::Or(v) => v.iter().any(|c| c.eval(s)),
            Condition::And(v) => v.iter().all(|c| c.eval(s)),
            Condition::Not(c) => !c.eval(s),
            Condition::Compare(a, op, b) => compare(&operand(a, s), *op, &operand(b, s)),
            Condition::Truth(o) => operand(o, s) == Value::Bool(true),
        }
    }

    /// True when the condition reads the sample value (its verdict cannot be
    /// remembered per series).
    pub fn reads_value(&self) -> bool {
        self.any_operand(&|o| matches!(o, Operand::Path(Path::ValueDouble | Path::ValueInt)))
    }

    /// True when the condition looks at other points of its metric.
    pub fn reads_points(&self) -> bool {
        self.any_operand(&|o| matches!(o, Operand::HasAttrKey(_) | Operand::HasAttr(..)))
    }

    fn any_operand(&self, f: &dyn Fn(&Operand) -> bool) -> bool {
        fn walk(o: &Operand, f: &dyn Fn(&Operand) -> bool) -> bool {
            f(o) || matches!(o, Operand::IsMatch(t, _) if walk(t, f))
        }
        match self {
            Condition::Or(v) | Condition::And(v) => v.iter().any(|c| c.any_operand(f)),
            Condition::Not(c) => c.any_operand(f),
            Condition::Compare(a, _, b) => walk(a, f) || walk(b, f),
            Condition::Truth(o) => walk(o, f),
        }
    }
}

/// The OTTL enums this build knows, as the numbers OTTL compares.
fn enum_value(s: &str) -> Option<i64> {
    if let Some(t) = DataType::from_enum(s) {
        return Some(t.code());
    }
    match s {
        "AGGREGATION_TEMPORALITY_UNSPECIFIED" => Some(0),
        "AGGREGATION_TEMPORALITY_DELTA" => Some(1),
        "AGGREGATION_TEMPORALITY_CUMULATIVE" => Some(2),
        _ => None,
    }
}

fn operand<'a>(o: &'a Operand, s: &'a dyn Subject) -> Value<'a> {
    match o {
        Operand::Path(p) => s.path(p),
        Operand::Str(v) => Value::Str(v.as_str().into()),
        Operand::Int(i) => Value::Int(*i),
        Operand::Float(f) => Value::Float(*f),
        Operand::Bool(b) => Value::Bool(*b),
        Operand::Nil => Value::Nil,
        Operand::IsMatch(target, re) => Value::Bool(match operand(target, s) {
            Value::Str(v) => re.is_match(&v),
            Value::Int(i) => re.is_match(&i.to_string()),
            Value::Float(f) => re.is_match(&format_float(f)),
            Value::Bool(b) => re.is_match(if b { "true" } else { "false" }),
            Value::Nil => false,
        }),
        Operand::HasAttrKey(k) => Value::Bool(s.has_attr_key(k)),
        Operand::HasAttr(k, v) => Value::Bool(s.has_attr(k, v)),
    }
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`, as IsMatch converts floats.
fn format_float(f: f64) -> String {
    if f.is_finite() && f == f.trunc() && f.abs() < 1e21 { format!("{f:.0}") } else { format!("{f}") }
}

pub fn compare(a: &Value<'_>, op: Op, b: &Value<'_>) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (a, b) {
        (Value::Nil, Value::Nil) => Some(Ordering::Equal),
        (Value::Str(x), Value::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Int(x), Value::Float(y)) => (*x as f64).partial_cmp(y),
        (Value::Float(x), Value::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    };
    match (ord, op) {
        (None, Op::Ne) => true,
        (None, _) => false,
        (Some(o), Op::Eq) => o == Ordering::Equal,
        (Some(o), Op::Ne) => o != Ordering::Equal,
        (Some(o), Op::Lt) => o == Ordering::Less,
        (Some(o), Op::Le) => o != Ordering::Greater,
        (Some(o), Op::Gt) => o == Ordering::Greater,
        (Some(o), Op::Ge) => o != Ordering::Less,
    }
}

// ---------------------------------------------------------------- lexing

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    Op(Op),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Dot,
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'(' => (out.push(Tok::LParen), i += 1).1,
            b')' => (out.push(Tok::RParen), i += 1).1,
            b'[' => (out.push(Tok::LBracket), i += 1).1,
            b']' => (out.push(Tok::RBracket), i += 1).1,
            b',' => (out.push(Tok::Comma), i += 1).1,
            b'.' => (out.push(Tok::Dot), i += 1).1,
            b'=' | b'!' | b'<' | b'>' => {
                let two = b.get(i + 1) == Some(&b'=');
                let op = match (c, two) {
                    (b'=', true) => Op::Eq,
                    (b'!', true) => Op::Ne,
                    (b'<', true) => Op::Le,
                    (b'>', true) => Op::Ge,
                    (b'<', false) => Op::Lt,
                    (b'>', false) => Op::Gt,
                    _ => {
                        return Err(format!(
                            "unexpected {:?} at column {} (comparisons are ==, !=, <, <=, >, >=)",
                            c as char,
                            i + 1
                        ));
                    }
                };
                out.push(Tok::Op(op));
                i += if two { 2 } else { 1 };
            }
            b'"' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    let Some(ch) = src[j..].chars().next() else {
                        return Err(format!("string starting at column {} is not closed", i + 1));
                    };
                    j += ch.len_utf8();
                    match ch {
                        '"' => break,
                        '\\' => {
                            let Some(e) = src[j..].chars().next() else {
                                return Err(format!("string starting at column {} is not closed", i + 1));
                            };
                            j += e.len_utf8();
                            match e {
                                '"' => s.push('"'),
                                '\\' => s.push('\\'),
                                'n' => s.push('\n'),
                                't' => s.push('\t'),
                                'r' => s.push('\r'),
                                // Go's strconv.Unquote would refuse the
                                // others; OTTL keeps them, backslash and all,
                                // which regexes rely on (`"\\d"` and `"\d"`).
                                other => {
                                    s.push('\\');
                                    s.push(other);
                                }
                            }
                        }
                        other => s.push(other),
                    }
                }
                out.push(Tok::Str(s));
                i = j;
            }
            b'0'..=b'9' | b'-' | b'+' => {
                let start = i;
                i += 1;
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'e' || b[i] == b'E') {
                    i += 1;
                }
                let text = &src[start..i];
                if text == "-" || text == "+" {
                    return Err(format!(
                        "arithmetic ({text:?} at column {}) is not supported in conditions",
                        start + 1
                    ));
                }
                if let Ok(n) = text.parse::<i64>() {
                    out.push(Tok::Int(n));
                } else if let Ok(f) = text.parse::<f64>() {
                    out.push(Tok::Float(f));
                } else {
                    return Err(format!("{text:?} at column {} is not a number", start + 1));
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push(Tok::Ident(src[start..i].to_string()));
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(format!("unexpected {ch:?} at column {}", i + 1));
            }
        }
    }
    Ok(out)
}

// --------------------------------------------------------------- parsing

/// The converters this build evaluates, for error messages.
pub const FUNCTIONS: &[&str] = &["IsMatch", "HasAttrKeyOnDatapoint", "HasAttrOnDatapoint"];

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    ctx: Context,
}

/// Parses one condition for `ctx`. The error says what is wrong and, for an
/// unsupported function or path, what this build has instead.
pub fn parse(src: &str, ctx: Context) -> Result<Condition, String> {
    let toks = lex(src)?;
    if toks.is_empty() {
        return Err("empty condition".into());
    }
    let mut p = Parser { toks, pos: 0, ctx };
    let c = p.or()?;
    if p.pos < p.toks.len() {
        return Err(format!("unexpected {} after the condition", p.describe()));
    }
    Ok(c)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of condition".into(),
            Some(Tok::Ident(s)) => format!("{s:?}"),
            Some(Tok::Str(s)) => format!("string {s:?}"),
            Some(t) => format!("{t:?}"),
        }
    }

    fn keyword(&mut self, k: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(s)) if s == k) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: Tok, what: &str) -> Result<(), String> {
        if self.peek() == Some(&t) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected {what}, found {}", self.describe()))
        }
    }

    fn or(&mut self) -> Result<Condition, String> {
        let mut v = vec![self.and()?];
        while self.keyword("or") {
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Condition::Or(v) })
    }

    fn and(&mut self) -> Result<Condition, String> {
        let mut v = vec![self.unary()?];
        while self.keyword("and") {
            v.push(self.unary()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Condition::And(v) })
    }

    fn unary(&mut self) -> Result<Condition, String> {
        if self.keyword("not") {
            return Ok(Condition::Not(Box::new(self.unary()?)));
        }
        if self.peek() == Some(&Tok::LParen) {
            self.pos += 1;
            let c = self.or()?;
            self.expect(Tok::RParen, "\")\"")?;
            return Ok(c);
        }
        let a = self.operand()?;
        if let Some(Tok::Op(op)) = self.peek().cloned() {
            self.pos += 1;
            let b = self.operand()?;
            return Ok(Condition::Compare(a, op, b));
        }
        match a {
            Operand::Bool(_) | Operand::IsMatch(..) | Operand::HasAttrKey(_) | Operand::HasAttr(..) => {
                Ok(Condition::Truth(a))
            }
            other => Err(format!("{other:?} is not a condition: compare it with ==, !=, <, <=, > or >=")),
        }
    }

    fn string_arg(&mut self, f: &str) -> Result<String, String> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(s),
            _ => {
                self.pos -= 1;
                Err(format!("{f}: expected a string literal, found {}", self.describe()))
            }
        }
    }

    fn operand(&mut self) -> Result<Operand, String> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(Operand::Str(s)),
            Some(Tok::Int(i)) => Ok(Operand::Int(i)),
            Some(Tok::Float(f)) => Ok(Operand::Float(f)),
            Some(Tok::Ident(id)) => {
                if self.peek() == Some(&Tok::LParen) {
                    self.pos += 1;
                    return self.call(&id);
                }
                match id.as_str() {
                    "true" => return Ok(Operand::Bool(true)),
                    "false" => return Ok(Operand::Bool(false)),
                    "nil" => return Ok(Operand::Nil),
                    _ => {}
                }
                if let Some(v) = enum_value(&id) {
                    return Ok(Operand::Int(v));
                }
                if id.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
                    return Err(format!(
                        "unknown enum {id:?} (this build knows METRIC_DATA_TYPE_* and AGGREGATION_TEMPORALITY_*)"
                    ));
                }
                self.path(id).map(Operand::Path)
            }
            _ => {
                self.pos -= 1;
                Err(format!("expected a path, literal or function, found {}", self.describe()))
            }
        }
    }

    fn call(&mut self, f: &str) -> Result<Operand, String> {
        let o = match f {
            "IsMatch" => {
                let target = self.operand()?;
                self.expect(Tok::Comma, "\",\" between IsMatch's arguments")?;
                let pattern = self.string_arg("IsMatch")?;
                let translated =
                    infertel_relabel::go_regex(&pattern).map_err(|e| format!("IsMatch: pattern {pattern:?}: {e}"))?;
                Operand::IsMatch(Box::new(target), translated)
            }
            "HasAttrKeyOnDatapoint" | "HasAttrOnDatapoint" if self.ctx != Context::Metric => {
                return Err(format!("{f} is a metric-context function: put the condition under metrics.metric"));
            }
            "HasAttrKeyOnDatapoint" => Operand::HasAttrKey(self.string_arg(f)?),
            "HasAttrOnDatapoint" => {
                let k = self.string_arg(f)?;
                self.expect(Tok::Comma, "\",\" between HasAttrOnDatapoint's arguments")?;
                Operand::HasAttr(k, self.string_arg(f)?)
            }
            other => {
                return Err(format!(
                    "OTTL function {other:?} is not supported in filter conditions by this build (it has {})",
                    FUNCTIONS.join(", ")
                ));
            }
        };
        self.expect(Tok::RParen, &format!("\")\" closing {f}"))?;
        Ok(o)
    }

    fn key(&mut self) -> Result<String, String> {
        self.expect(Tok::LBracket, "[\"key\"] after attributes")?;
        let k = self.string_arg("attributes")?;
        self.expect(Tok::RBracket, "\"]\"")?;
        Ok(k)
    }

    fn path(&mut self, first: String) -> Result<Path, String> {
        let mut parts = vec![first];
        while self.peek() == Some(&Tok::Dot) {
            self.pos += 1;
            match self.next() {
                Some(Tok::Ident(s)) => parts.push(s),
                _ => {
                    self.pos -= 1;
                    return Err(format!("expected a name after \".\", found {}", self.describe()));
                }
            }
        }
        let mut p: Vec<&str> = parts.iter().map(String::as_str).collect();
        // The context prefix is optional where it names this context (or,
        // below it, the metric or resource the point belongs to).
        let metric_field = |f: &str| {
            matches!(f, "name" | "type" | "unit" | "description" | "aggregation_temporality" | "is_monotonic")
        };
        let ctx = self.ctx;
        match (ctx, p.as_slice()) {
            (Context::Metric, ["metric", f]) if metric_field(f) => p.remove(0),
            (Context::Datapoint, ["datapoint", ..]) => p.remove(0),
            (Context::Resource, ["resource", "attributes"]) => p.remove(0),
            _ => "",
        };
        let metric_path = |f: &str| match f {
            "name" => Some(Path::Name),
            "type" => Some(Path::Type),
            "unit" => Some(Path::Unit),
            "description" => Some(Path::Description),
            "aggregation_temporality" => Some(Path::AggregationTemporality),
            "is_monotonic" => Some(Path::IsMonotonic),
            _ => None,
        };
        let path = match (ctx, p.as_slice()) {
            (Context::Metric | Context::Datapoint, ["resource", "attributes"])
            | (Context::Resource, ["attributes"]) => Path::ResourceAttribute(self.key()?),
            (Context::Metric, [f]) | (Context::Datapoint, ["metric", f]) if metric_path(f).is_some() => {
                metric_path(f).unwrap_or(Path::Name)
            }
            (Context::Datapoint, ["attributes"]) => Path::Attribute(self.key()?),
            (Context::Datapoint, ["value_double"]) => Path::ValueDouble,
            (Context::Datapoint, ["value_int"]) => Path::ValueInt,
            (Context::Datapoint, [f]) if metric_field(f) => {
                return Err(format!("{f:?} is a metric field: in a datapoint condition write metric.{f}"));
            }
            (Context::Metric, ["attributes"]) => {
                return Err(
                    "a metric has no attributes: use HasAttrOnDatapoint, or put the condition under metrics.datapoint"
                        .into(),
                );
            }
            _ => {
                return Err(format!(
                    "path {:?} is not supported in a {} condition (this build reads {})",
                    parts.join("."),
                    ctx.as_str(),
                    match ctx {
                        Context::Resource => "attributes[\"k\"]",
                        Context::Metric =>
                            "name, type, unit, description, aggregation_temporality, is_monotonic, resource.attributes[\"k\"]",
                        Context::Datapoint =>
                            "attributes[\"k\"], metric.name, metric.type, metric.unit, metric.description, resource.attributes[\"k\"], value_double, value_int",
                    }
                ));
            }
        };
        if self.peek() == Some(&Tok::LBracket) {
            return Err("indexing into an attribute value is not supported".into());
        }
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    struct S(&'static [(&'static str, &'static str)], f64, DataType);
    impl Subject for S {
        fn path(&self, p: &Path) -> Value<'_> {
            let get = |k: &str| self.0.iter().find(|(n, _)| *n == k).map(|(_, v)| Value::Str(Cow::Borrowed(*v)));
            match p {
                Path::Name => get("__name__").unwrap_or(Value::Nil),
                Path::Type => Value::Int(self.2.code()),
                Path::AggregationTemporality => Value::Nil,
                Path::IsMonotonic => Value::Nil,
                Path::Unit | Path::Description => Value::Str("".into()),
                Path::Attribute(k) | Path::ResourceAttribute(k) => get(k).unwrap_or(Value::Nil),
                Path::ValueDouble => Value::Float(self.1),
                Path::ValueInt => Value::Int(0),
            }
        }
        fn has_attr_key(&self, key: &str) -> bool {
            self.0.iter().any(|(n, _)| *n == key)
        }
        fn has_attr(&self, key: &str, value: &str) -> bool {
            self.0.iter().any(|(n, v)| *n == key && *v == value)
        }
    }

    const DP: S =
        S(&[("__name__", "vllm:num_requests_running"), ("model_name", "llama"), ("code", "200")], 3.0, DataType::Gauge);

    fn dp(src: &str) -> bool {
        parse(src, Context::Datapoint).unwrap_or_else(|e| panic!("{src}: {e}")).eval(&DP)
    }

    #[test]
    fn comparisons_follow_ottl() {
        assert!(dp(r#"attributes["model_name"] == "llama""#));
        assert!(dp(r#"metric.name == "vllm:num_requests_running" and value_double > 2"#));
        assert!(!dp(r#"value_double > 3"#));
        assert!(dp(r#"value_double >= 3"#));
        assert!(dp(r#"value_double == 3"#), "int literal against a double");
        // A label is a string: it is never equal to a number.
        assert!(!dp(r#"attributes["code"] == 200"#));
        assert!(dp(r#"attributes["code"] != 200"#));
        assert!(!dp(r#"attributes["code"] < 300"#));
        // Strings order bytewise.
        assert!(dp(r#"attributes["code"] < "3""#));
        assert!(dp(r#"attributes["missing"] == nil"#));
        assert!(!dp(r#"attributes["missing"] != nil"#));
        assert!(dp(r#"not (attributes["code"] == "500" or attributes["code"] == "404")"#));
        assert!(dp(r#"attributes["code"] == "500" or attributes["model_name"] == "llama" and value_double == 3"#));
        assert!(!dp(r#"(attributes["code"] == "500" or attributes["model_name"] == "llama") and value_double == 4"#));
        assert!(dp(r#"metric.type == METRIC_DATA_TYPE_GAUGE"#));
        assert!(!dp(r#"metric.type == METRIC_DATA_TYPE_SUM"#));
        assert!(dp(r#"datapoint.attributes["model_name"] == "llama""#));
        assert!(dp(r#"true"#));
        assert!(dp(r#"true > false"#), "booleans order false < true");
        assert!(dp(r#"attributes["missing"] >= nil"#));
    }

    #[test]
    fn metric_conditions_infer_their_context() {
        assert_eq!(infer_context(r#"metric.name == "x""#), Ok(Context::Metric));
        assert_eq!(infer_context(r#"metric.name == "x" and datapoint.attributes["a"] == "b""#), Ok(Context::Datapoint));
        assert_eq!(infer_context(r#"resource.attributes["service.name"] == "vllm""#), Ok(Context::Resource));
        assert_eq!(infer_context(r#"HasAttrKeyOnDatapoint("a")"#), Ok(Context::Metric));
        assert!(infer_context(r#"name == "x""#).is_err());
        let r = parse(r#"resource.attributes["service.name"] == "vllm""#, Context::Resource).expect("resource");
        assert!(!r.eval(&DP));
    }

    #[test]
    fn is_match_is_go_unanchored() {
        assert!(dp(r#"IsMatch(metric.name, "^vllm:")"#));
        assert!(dp(r#"IsMatch(metric.name, "requests")"#));
        assert!(!dp(r#"IsMatch(metric.name, "^requests")"#));
        assert!(!dp(r#"IsMatch(attributes["missing"], ".*")"#));
        assert!(dp(r#"IsMatch(attributes["code"], "\\d+")"#));
        assert!(dp(r#"not IsMatch(metric.name, "^sglang:")"#));
    }

    #[test]
    fn metric_context_functions() {
        let m = |src: &str| parse(src, Context::Metric).unwrap_or_else(|e| panic!("{src}: {e}")).eval(&DP);
        assert!(m(r#"HasAttrKeyOnDatapoint("model_name")"#));
        assert!(!m(r#"HasAttrKeyOnDatapoint("gpu")"#));
        assert!(m(r#"HasAttrOnDatapoint("code", "200")"#));
        assert!(m(r#"name == "vllm:num_requests_running" and type == METRIC_DATA_TYPE_GAUGE"#));
        assert!(m(r#"metric.name == "vllm:num_requests_running""#));
        // A gauge has no temporality (nil), so it is not delta.
        assert!(!m(r#"aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA"#));
    }

    #[test]
    fn what_is_not_supported_is_named() {
        let err = |src: &str, ctx| parse(src, ctx).expect_err(src);
        assert!(err(r#"Len(name) > 3"#, Context::Metric).contains("\"Len\" is not supported"));
        assert!(err(r#"name == "x""#, Context::Datapoint).contains("write metric.name"));
        assert!(err(r#"attributes["a"] == "x""#, Context::Metric).contains("metric has no attributes"));
        assert!(err(r#"HasAttrKeyOnDatapoint("a")"#, Context::Datapoint).contains("metric-context"));
        assert!(err(r#"span.name == "x""#, Context::Datapoint).contains("not supported"));
        assert!(err(r#"name == "x" and"#, Context::Metric).contains("end of condition"));
        assert!(err(r#"name = "x""#, Context::Metric).contains("comparisons are"));
        assert!(err(r#"name == "x"#, Context::Metric).contains("not closed"));
        assert!(err(r#"METRIC_DATA_TYPE_FOO == type"#, Context::Metric).contains("unknown enum"));
        assert!(err(r#"IsMatch(name, "(")"#, Context::Metric).contains("pattern"));
        assert!(err(r#"name"#, Context::Metric).contains("is not a condition"));
    }
}
