//! Latency statistics: nearest-rank percentiles over a sample of run times.

/// Summary of a latency sample, in milliseconds.
#[derive(Debug, Clone)]
pub struct Stats {
    pub min: f64,
    pub mean: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// The nearest-rank `q`-quantile (0 < q ≤ 1) of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Stats {
    /// Statistics of `samples` (any order).
    pub fn of(samples: &[f64]) -> Stats {
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
        Stats {
            min: s.first().copied().unwrap_or(f64::NAN),
            mean,
            p25: percentile(&s, 0.25),
            median: percentile(&s, 0.5),
            p75: percentile(&s, 0.75),
            p90: percentile(&s, 0.9),
            p95: percentile(&s, 0.95),
            p99: percentile(&s, 0.99),
            max: s.last().copied().unwrap_or(f64::NAN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&v, 1.0), 20.0);
        let s = Stats::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let s = Stats::of(&v);
        assert_eq!((s.p25, s.p75, s.p90, s.p99), (5.0, 15.0, 18.0, 20.0));
        assert_eq!(s.mean, 10.5);
        assert!(Stats::of(&[]).median.is_nan());
    }
}
