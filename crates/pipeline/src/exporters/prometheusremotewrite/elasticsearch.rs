//! Elasticsearch's answers to remote write, read as its source writes them
//! (`x-pack/plugin/prometheus`, `PrometheusRemoteWriteTransportAction`).
//!
//! Every sample is a document created with `op_type=create` in a
//! time-series data stream, so a sample Elasticsearch already stored fails
//! with `CONFLICT`. Any item failure makes the whole answer 400 (429 when
//! an item was throttled), with a body such as
//!
//! ```text
//! Prometheus remote write request partially failed: 3 of 10 samples failed.
//! Index [metrics-generic.prometheus-default] returned status [CONFLICT] for 3 documents. Sample error: ...
//! ```
//!
//! A retry after a timeout, or a replay after a crash, of samples already
//! stored therefore comes back 400: those samples are delivered, not
//! rejected.

/// The failures an Elasticsearch partial-failure body reports.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PartialFailure {
    /// Samples in the request, when the body says ("3 of 10").
    pub total: Option<usize>,
    /// Samples Elasticsearch had already stored (status `CONFLICT`).
    pub conflicts: usize,
    /// Samples that failed for any other status, and the first such status.
    pub others: usize,
    pub other_status: Option<String>,
}

/// Parses the body of a 400 or 429; `None` when it is not Elasticsearch's
/// partial-failure answer. The header's failure count also covers samples
/// dropped for a missing `__name__` (a line of their own, no status), so
/// the failures that are not CONFLICT are the header's count less the
/// conflicts.
pub fn parse(body: &str) -> Option<PartialFailure> {
    const HEAD: &str = "remote write request partially failed:";
    const STATUS: &str = "returned status [";
    let head = body.find(HEAD)?;
    let mut f = PartialFailure::default();
    // "<failed> of <total> samples failed."
    let mut words = body[head + HEAD.len()..].split_whitespace();
    let failed = match (words.next(), words.next(), words.next()) {
        (Some(failed), Some("of"), Some(total)) => {
            f.total = total.parse().ok();
            failed.parse::<usize>().ok()
        }
        _ => None,
    };
    // "Index [<index>] returned status [<STATUS>] for <n> documents. ..."
    let mut listed_others = 0;
    let mut rest = body;
    while let Some(i) = rest.find(STATUS) {
        rest = &rest[i + STATUS.len()..];
        let Some(end) = rest.find(']') else { break };
        let status = &rest[..end];
        let n = rest[end..]
            .strip_prefix("] for ")
            .and_then(|x| x.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok());
        let Some(n) = n else { continue };
        if status == "CONFLICT" {
            f.conflicts += n;
        } else {
            listed_others += n;
            f.other_status.get_or_insert_with(|| status.to_string());
        }
    }
    f.others = match failed {
        Some(failed) => failed.saturating_sub(f.conflicts).max(listed_others),
        None => listed_others,
    };
    if f.others > listed_others && f.other_status.is_none() {
        f.other_status = Some("missing __name__".into());
    }
    (failed.is_some() || f.conflicts + f.others > 0).then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_and_other_failures() {
        let body = "Prometheus remote write request partially failed: 5 of 10 samples failed.\n\
            Index [metrics-generic.prometheus-default] returned status [CONFLICT] for 3 documents. Sample error: [version conflict, document already exists (current version [1])]\n\
            Index [metrics-generic.prometheus-default] returned status [BAD_REQUEST] for 2 documents. Sample error: [failed to parse field [labels.x]]\n";
        let f = parse(body).unwrap();
        assert_eq!(
            f,
            PartialFailure { total: Some(10), conflicts: 3, others: 2, other_status: Some("BAD_REQUEST".into()) }
        );
        let only = "Prometheus remote write request partially failed: 4 of 4 samples failed.\n\
            Index [metrics-vllm.prometheus-inference] returned status [CONFLICT] for 4 documents. Sample error: ...";
        assert_eq!(parse(only).unwrap().conflicts, 4);
        let unnamed = "Prometheus remote write request partially failed: 3 of 9 samples failed.\n\
            1 sample(s) dropped due to missing __name__ label\n\
            Index [metrics-generic.prometheus-default] returned status [CONFLICT] for 2 documents. Sample error: ...\n";
        let f = parse(unnamed).unwrap();
        assert_eq!((f.conflicts, f.others, f.total), (2, 1, Some(9)));
        assert_eq!(parse("out of order sample"), None);
        assert_eq!(parse("<html>400 Bad Request</html>"), None);
    }
}
