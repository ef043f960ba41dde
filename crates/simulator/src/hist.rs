//! Cumulative histograms with vLLM's and the instrumentator's bucket lists.

/// `time_to_first_token` buckets (vLLM `buckets.py`).
pub const TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
/// `inter_token_latency` buckets (ITL and per-request TPOT).
pub const ITL: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// `request_latency` buckets (e2e, queue, inference, prefill, decode).
pub const REQUEST_LATENCY: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// `iteration_tokens` buckets.
pub const ITERATION_TOKENS: &[f64] =
    &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
/// `request_params_n` buckets.
pub const PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// prometheus-fastapi-instrumentator `http_request_duration_highr_seconds`.
pub const HTTP_HIGHR: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
];
/// prometheus-fastapi-instrumentator `http_request_duration_seconds`.
pub const HTTP_LOWR: &[f64] = &[0.1, 0.5, 1.0];

/// vLLM `build_1_2_5_buckets(max_model_len)`: 1, 2, 5, 10, 20, 50, … ≤ max.
pub fn one_two_five(max: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = 1.0;
    'outer: loop {
        for m in [1.0, 2.0, 5.0] {
            let v = m * exp;
            if v > max {
                break 'outer;
            }
            out.push(v);
        }
        exp *= 10.0;
    }
    out
}

/// A histogram as `prometheus_client` keeps it: per-bucket counts (not
/// cumulative; cumulated when rendered), plus sum and count.
#[derive(Debug, Clone)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    counts: Vec<u64>, // one per bound, plus +Inf
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &[f64]) -> Self {
        Histogram { bounds: bounds.to_vec(), counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// `(le, cumulative count)` pairs, `+Inf` last.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        let mut out = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            out.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), acc));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_max_model_len() {
        assert_eq!(one_two_five(4096.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]);
        assert_eq!(one_two_five(8192.0).last(), Some(&5000.0));
    }

    #[test]
    fn cumulative_counts() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.cumulative(), vec![(1.0, 2), (2.0, 3), (f64::INFINITY, 4)]);
        assert_eq!(h.count, 4);
    }
}
