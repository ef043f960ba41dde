//! The pages' shared parts: layout and navigation, escaping, times, and
//! the SVG charts drawn on the server (no script, no external asset).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Every page stays under this (without images): a budget the tests check.
pub const PAGE_BUDGET: usize = 100 * 1024;

const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/targets", "Targets"),
    ("/service-discovery", "Service discovery"),
    ("/relabel", "Relabel"),
    ("/series", "Series"),
    ("/exporters", "Exporters"),
    ("/inference", "Inference"),
    ("/config", "Config"),
];

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
header{background:#1f2a37;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}\
header a{color:#cfe3ff;text-decoration:none}header a.on{color:#fff;font-weight:600;text-decoration:underline}\
header b{margin-right:12px}main{padding:12px 16px}table{border-collapse:collapse;background:#fff;margin:8px 0 16px;width:100%}\
th,td{border:1px solid #d8dde3;padding:4px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#eef1f4}\
code,pre{font:12px/1.35 ui-monospace,monospace}pre{background:#fff;border:1px solid #d8dde3;padding:8px;overflow:auto}\
.up,.PASS,.delivered,.kept{color:#0a7a2f;font-weight:600}.down,.FAIL,.rejected,.dropped{color:#b3261e;font-weight:600}\
.unknown,.INDETERMINATE,.held,.queued{color:#8a5a00;font-weight:600}.muted{color:#66707a}\
.flow{display:flex;align-items:center;gap:8px;flex-wrap:wrap;margin:8px 0 16px}.box{background:#fff;border:1px solid #9fb3c8;border-radius:6px;padding:6px 10px;min-width:140px}\
.arrow{font-size:20px;color:#66707a}.err{background:#fdecea}.charts{display:flex;flex-wrap:wrap;gap:12px}\
.chart{background:#fff;border:1px solid #d8dde3;padding:6px;width:300px;overflow-wrap:anywhere}.chart code{font-size:11px}form{margin:8px 0}input[type=text],textarea,select{font:13px ui-monospace,monospace}";

/// HTML-escapes text (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Percent-encodes a query parameter value.
pub fn url_param(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// A whole page: `path` marks the navigation entry; `refresh` (seconds)
/// reloads it without script.
pub fn page(title: &str, path: &str, refresh: Option<u64>, body: &str) -> String {
    let mut o = String::with_capacity(body.len() + 4096);
    o.push_str("<!doctype html><html lang=en><head><meta charset=utf-8>");
    o.push_str("<meta name=viewport content=\"width=device-width,initial-scale=1\">");
    if let Some(r) = refresh {
        let _ = write!(o, "<meta http-equiv=refresh content=\"{r}\">");
    }
    let _ =
        write!(o, "<title>{} · infertel</title><style>{STYLE}</style></head><body><header><b>infertel</b>", esc(title));
    for (href, name) in NAV {
        let on = if *href == path { " class=on" } else { "" };
        let _ = write!(o, "<a href=\"{href}\"{on}>{name}</a>");
    }
    let _ = write!(o, "</header><main><h1>{}</h1>{body}</main></body></html>", esc(title));
    o
}

/// `12 s ago`, `3 min ago`.
pub fn ago(t: Option<SystemTime>) -> String {
    let Some(t) = t else { return "never".into() };
    let d = SystemTime::now().duration_since(t).unwrap_or_default();
    format!("{} ago", human(d))
}

pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// RFC 3339 in UTC with milliseconds, as Prometheus' API writes times.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// A number for people: integers plainly, others with 3 significant digits.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// A small line chart of `points` (ms, value) as inline SVG.
pub fn chart(title: &str, points: &[(i64, f64)]) -> String {
    let (w, h, pad) = (300.0, 90.0, 4.0);
    let mut o = String::new();
    let last = points.last().map(|p| num(p.1)).unwrap_or_else(|| "–".into());
    let _ = write!(
        o,
        "<div class=chart><div><code>{}</code><br><b>{}</b></div><svg width=300 height=90 viewBox=\"0 0 300 90\" role=img aria-label=\"{}\">",
        esc(title),
        esc(&last),
        esc(title)
    );
    let finite: Vec<(i64, f64)> = points.iter().copied().filter(|p| p.1.is_finite()).collect();
    if finite.len() >= 2 {
        let (t0, t1) = (finite[0].0, finite[finite.len() - 1].0);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for p in &finite {
            lo = lo.min(p.1);
            hi = hi.max(p.1);
        }
        if hi - lo < 1e-12 {
            // A flat line: drawn in the middle of a range around its value.
            let d = if lo.abs() > 1e-12 { lo.abs() * 0.1 } else { 1.0 };
            hi = lo + d;
            lo -= d;
        }
        let x = |t: i64| pad + (t - t0) as f64 / (t1 - t0).max(1) as f64 * (w - 2.0 * pad);
        let y = |v: f64| h - pad - (v - lo) / (hi - lo) * (h - 2.0 * pad);
        o.push_str("<polyline fill=none stroke=\"#2563eb\" stroke-width=1.5 points=\"");
        for p in &finite {
            let _ = write!(o, "{:.1},{:.1} ", x(p.0), y(p.1));
        }
        let _ = write!(
            o,
            "\"/><text x=4 y=12 font-size=10 fill=\"#66707a\">{}</text><text x=4 y=86 font-size=10 fill=\"#66707a\">{}</text>",
            esc(&num(hi)),
            esc(&num(lo))
        );
    } else {
        o.push_str("<text x=8 y=48 font-size=12 fill=\"#66707a\">waiting for a second value</text>");
    }
    o.push_str("</svg></div>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_dates_and_charts() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(url_param("up{job=\"a b\"}"), "up%7Bjob%3D%22a%20b%22%7D");
        // 2026-12-02T04:32:37Z is 1796185957 s after the epoch (date -d).
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_millis(1_796_185_957_250)), "2026-12-02T04:32:37.250Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        let c = chart("x", &[(0, 1.0), (1000, 3.0), (2000, f64::NAN)]);
        assert!(c.contains("<polyline") && c.contains("<b>NaN</b>"), "{c}");
        assert!(chart("x", &[(0, 1.0)]).contains("waiting"));
    }
}
