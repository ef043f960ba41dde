//! Delta streams made cumulative, as the Collector's `deltatocumulative`
//! processor (which Prometheus runs for `otlp-deltatocumulative`) does: per
//! stream (its series identity), each delta point adds to the running
//! total; a point not after the last one seen is out of order and refused;
//! a histogram whose bounds change starts again from its point. A stream
//! not seen for `max_stale` is forgotten, and at most `max_streams` are
//! remembered: past that, a new stream's points are refused, so the state
//! stays bounded whatever a client sends.

use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Total {
    Number(f64),
    Histogram { bounds: Vec<f64>, counts: Vec<u64>, count: u64, sum: f64 },
}

struct Stream {
    total: Total,
    last_ms: i64,
    seen_ms: i64,
}

pub struct Deltas {
    streams: HashMap<u64, Stream>,
    max_stale_ms: i64,
    max_streams: usize,
    swept_ms: i64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    OutOfOrder,
    Limit,
}

impl Deltas {
    pub fn new(max_stale_ms: i64, max_streams: usize) -> Deltas {
        Deltas { streams: HashMap::new(), max_stale_ms, max_streams, swept_ms: 0 }
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    fn sweep(&mut self, now_ms: i64) {
        if now_ms - self.swept_ms < 1000 {
            return;
        }
        self.swept_ms = now_ms;
        let cutoff = now_ms - self.max_stale_ms;
        self.streams.retain(|_, s| s.seen_ms >= cutoff);
    }

    /// Adds the delta `point` (at `ts_ms`) to stream `key`; the running total.
    pub fn add(&mut self, key: u64, ts_ms: i64, point: Total, now_ms: i64) -> Result<Total, Refused> {
        self.sweep(now_ms);
        let full = self.streams.len() >= self.max_streams;
        match self.streams.get_mut(&key) {
            Some(s) => {
                if ts_ms <= s.last_ms {
                    return Err(Refused::OutOfOrder);
                }
                s.total = match (&s.total, point) {
                    (Total::Number(a), Total::Number(b)) => Total::Number(a + b),
                    (
                        Total::Histogram { bounds, counts, count, sum },
                        Total::Histogram { bounds: nb, counts: nc, count: ncount, sum: nsum },
                    ) if *bounds == nb && counts.len() == nc.len() => Total::Histogram {
                        counts: counts.iter().zip(&nc).map(|(a, b)| a + b).collect(),
                        bounds: nb,
                        count: count + ncount,
                        sum: sum + nsum,
                    },
                    // A changed layout (or kind) starts the stream again.
                    (_, p) => p,
                };
                s.last_ms = ts_ms;
                s.seen_ms = now_ms;
                Ok(s.total.clone())
            }
            None if full => Err(Refused::Limit),
            None => {
                self.streams.insert(key, Stream { total: point.clone(), last_ms: ts_ms, seen_ms: now_ms });
                Ok(point)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_add_up_per_stream_and_are_forgotten() {
        let mut d = Deltas::new(300_000, 2);
        // Prometheus' TestOTLPDelta: deltas 0, 1, 2 read as 0, 1, 3.
        let got: Vec<Total> = [0.0, 1.0, 2.0]
            .iter()
            .enumerate()
            .map(|(i, v)| d.add(1, 1000 * (i as i64 + 1), Total::Number(*v), 0).unwrap())
            .collect();
        assert_eq!(got, vec![Total::Number(0.0), Total::Number(1.0), Total::Number(3.0)]);
        assert_eq!(d.add(1, 2000, Total::Number(5.0), 0), Err(Refused::OutOfOrder));
        d.add(2, 1000, Total::Number(1.0), 0).unwrap();
        assert_eq!(d.add(3, 1000, Total::Number(1.0), 0), Err(Refused::Limit));
        // Past max_stale, stream 1 starts again from its point.
        assert_eq!(d.add(1, 400_000, Total::Number(2.0), 400_000).unwrap(), Total::Number(2.0));
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn histograms_add_bucket_by_bucket_until_the_bounds_change() {
        let mut d = Deltas::new(300_000, 10);
        let h =
            |b: Vec<f64>, c: Vec<u64>, sum: f64| Total::Histogram { count: c.iter().sum(), bounds: b, counts: c, sum };
        d.add(7, 1, h(vec![1.0, 2.0], vec![1, 0, 2], 5.0), 0).unwrap();
        let t = d.add(7, 2, h(vec![1.0, 2.0], vec![0, 3, 1], 4.0), 0).unwrap();
        assert_eq!(t, h(vec![1.0, 2.0], vec![1, 3, 3], 9.0));
        let t = d.add(7, 3, h(vec![5.0], vec![1, 1], 6.0), 0).unwrap();
        assert_eq!(t, h(vec![5.0], vec![1, 1], 6.0));
    }
}
