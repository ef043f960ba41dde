//! What the inference crate's tests share: a second scrape made from a
//! first by advancing chosen samples.

/// The second scrape: each sample advanced by `delta(name, labels)` (for a
/// histogram's buckets the caller adds to every bucket from the one the
/// observations land in, so they stay cumulative); comments and other
/// samples as they are.
pub fn advance(body: &str, delta: &dyn Fn(&str, &str) -> Option<f64>) -> String {
    body.lines()
        .map(|l| {
            if l.starts_with('#') || l.is_empty() {
                return format!("{l}\n");
            }
            let (series, value) = l.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            let labels = series.strip_prefix(name).unwrap_or("");
            match (delta(name, labels), value.parse::<f64>()) {
                (Some(d), Ok(v)) => format!("{series} {}\n", v + d),
                _ => format!("{l}\n"),
            }
        })
        .collect()
}
