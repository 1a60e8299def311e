//! How a cell runs: the knobs every cell of a matrix shares, and one cell's configuration, with
//! what follows from it (its lease, how long an acquire waits, how long a stall lasts).

use std::path::PathBuf;
use std::time::Duration;

use crate::fault::Fault;
use crate::handoff::HANDOFF_LEASE;
use crate::rng::Rng;
use crate::strategy::{Deployment, Strategy};

/// The knobs shared by every cell of a matrix.
#[derive(Clone, Debug)]
pub struct MatrixOptions {
    /// Worker processes per cell.
    pub workers: usize,
    /// How long workers take the lock in each cell.
    pub duration: Duration,
    /// The lease.
    pub lease: Duration,
    /// The time between a section's read and its write, and between two sections.
    pub work: Duration,
    /// Faults per cell.
    pub faults: usize,
    /// Locks each worker takes at once, one lane each, each lane with a counter of its own.
    pub lanes: usize,
    /// The seed: of a matrix, the one every cell's own seed is drawn from; of a
    /// [`CellConfig`], the cell's own, which its fault plan is drawn from.
    pub seed: u64,
    /// The `fencelock-check` executable that workers run.
    pub worker_exe: PathBuf,
}

impl MatrixOptions {
    /// The configuration of the cell `strategy` × `fault`, with its own seed.
    pub fn cell(&self, strategy: Strategy, fault: Fault) -> CellConfig {
        let position = Strategy::ALL
            .iter()
            .position(|&s| s == strategy)
            .unwrap_or(0)
            * 16
            + Fault::ALL.iter().position(|&f| f == fault).unwrap_or(0);
        CellConfig {
            strategy,
            fault,
            options: MatrixOptions {
                seed: Rng::new(self.seed ^ position as u64).next_u64(),
                ..self.clone()
            },
        }
    }
}

/// How to run one strategy under one fault.
#[derive(Clone, Debug)]
pub struct CellConfig {
    /// The lock strategy.
    pub strategy: Strategy,
    /// The fault.
    pub fault: Fault,
    /// The knobs of the matrix, with this cell's own seed, the seed of its fault plan. Naive
    /// locks round the lease to whole seconds for `EX` and `EXPIRE`; Sentinel deployments use
    /// at least [`SENTINEL_LEASE`] (see [`CellConfig::lease`]).
    pub options: MatrixOptions,
}

/// The shortest lease on a Sentinel deployment: longer than a failover takes here (the
/// sentinels call a master down after 500 ms, and one failover attempt is bounded by 2 s), so
/// that a lock can outlive a failover at all.
pub const SENTINEL_LEASE: Duration = Duration::from_secs(10);

impl CellConfig {
    /// The lease the run uses.
    pub fn lease(&self) -> Duration {
        if self.strategy.deployment() == Deployment::Sentinel {
            self.options.lease.max(SENTINEL_LEASE)
        } else if self.fault.idles() {
            self.options.lease.max(HANDOFF_LEASE)
        } else {
            self.options.lease
        }
    }

    /// How long one acquire attempt waits: long enough to outlast a dead holder's lease and a
    /// few sections, so that a give-up means the lock was not coming back.
    pub fn acquire_timeout(&self) -> Duration {
        // A waiter stopped three leases under pubsub-delay must still be waiting once resumed.
        if self.fault == Fault::PubsubDelay {
            self.lease() * 6
        } else {
            self.lease() * 3
        }
    }

    /// How long a paused worker stays stopped, and how long a slow section sleeps.
    pub fn stall(&self) -> Duration {
        self.lease() * 5 / 2
    }
}
