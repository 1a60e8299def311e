//! Latency distributions, kept in microseconds by `hdrhistogram`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency distribution from 1 µs to 1 hour, three significant digits.
#[derive(Clone, Debug)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

/// The figures quoted from a [`Latencies`], in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// How many were recorded.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty distribution.
    pub fn new() -> Latencies {
        let histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .expect("1 µs .. 1 h at 3 significant digits are valid bounds");
        Latencies { histogram }
    }

    /// Records one latency (saturating at an hour).
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(micros.max(1));
    }

    /// Adds another distribution to this one.
    pub fn merge(&mut self, other: &Latencies) {
        let _ = self.histogram.add(&other.histogram);
    }

    /// Count, mean, p50, p99 and max.
    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        let ms = |micros: u64| micros as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: ms(h.value_at_quantile(0.5)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_in_milliseconds() {
        let mut l = Latencies::new();
        for m in 1..=100 {
            l.record(Duration::from_millis(m));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.max_ms - 100.0).abs() < 0.1, "{s:?}");
    }
}
