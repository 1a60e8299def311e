//! The record of who held a contended lock when, and what it says about handoffs: the same
//! analysis for fencelock and for every peer, whatever language the peer's workers run in.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::latency::{Latencies, LatencySummary};

/// One grant of the lock: who, and when it was acquired and released, in nanoseconds on one
/// monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The worker that held the lock.
    pub worker: usize,
    /// When its acquire returned.
    pub acquired_ns: u64,
    /// When it began to release.
    pub released_ns: u64,
}

/// What the grants of one contended run say.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HandoffStats {
    /// Workers that took part.
    pub workers: usize,
    /// Grants in the measured window.
    pub acquires: u64,
    /// Grants to a different worker than the previous holder.
    pub handoffs: u64,
    /// `handoffs / (acquires - 1)`: the share of acquires, after the first, that changed hands.
    pub switch_rate: f64,
    /// Handoffs per second of the window.
    pub handoffs_per_sec: f64,
    /// Acquires per second of the window.
    pub acquires_per_sec: f64,
    /// From a release to the next holder's acquire, for handoffs only.
    pub latency: LatencySummary,
    /// Fewest acquires by one worker.
    pub min_per_worker: u64,
    /// Most acquires by one worker.
    pub max_per_worker: u64,
    /// Grants that began before the previous one was released: must be 0.
    pub overlaps: u64,
}

/// Analyses the grants of `workers` workers over a window of `window`.
pub fn analyse(grants: &mut [Grant], workers: usize, window: Duration) -> HandoffStats {
    grants.sort_by_key(|g| g.acquired_ns);
    let mut latencies = Latencies::new();
    let mut per_worker: BTreeMap<usize, u64> = (0..workers).map(|w| (w, 0)).collect();
    let mut handoffs = 0;
    let mut overlaps = 0;
    for (i, grant) in grants.iter().enumerate() {
        *per_worker.entry(grant.worker).or_insert(0) += 1;
        let Some(previous) = i.checked_sub(1).and_then(|p| grants.get(p)) else {
            continue;
        };
        if grant.acquired_ns < previous.released_ns {
            overlaps += 1;
        }
        if grant.worker != previous.worker {
            handoffs += 1;
            latencies.record(Duration::from_nanos(
                grant.acquired_ns.saturating_sub(previous.released_ns),
            ));
        }
    }
    let acquires = grants.len() as u64;
    let secs = window.as_secs_f64().max(f64::MIN_POSITIVE);
    HandoffStats {
        workers,
        acquires,
        handoffs,
        switch_rate: if acquires > 1 {
            handoffs as f64 / (acquires - 1) as f64
        } else {
            0.0
        },
        handoffs_per_sec: handoffs as f64 / secs,
        acquires_per_sec: acquires as f64 / secs,
        latency: latencies.summary(),
        min_per_worker: per_worker.values().copied().min().unwrap_or(0),
        max_per_worker: per_worker.values().copied().max().unwrap_or(0),
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(worker: usize, acquired_ns: u64, released_ns: u64) -> Grant {
        Grant {
            worker,
            acquired_ns,
            released_ns,
        }
    }

    #[test]
    fn handoffs_count_changes_of_holder() {
        let mut grants = vec![
            grant(0, 0, 1_000_000),
            grant(0, 1_100_000, 2_000_000),
            grant(1, 2_500_000, 3_000_000),
        ];
        let s = analyse(&mut grants, 3, Duration::from_secs(1));
        assert_eq!((s.acquires, s.handoffs, s.overlaps), (3, 1, 0));
        assert_eq!((s.min_per_worker, s.max_per_worker), (0, 2));
        assert!((s.latency.p50_ms - 0.5).abs() < 0.01, "{s:?}");
        assert!((s.switch_rate - 0.5).abs() < 1e-9);
    }
}
