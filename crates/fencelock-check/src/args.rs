//! What a worker process is told on its command line, which the checker writes and the worker
//! parses back.

use std::time::Duration;

use crate::fault::Fault;
use crate::strategy::Strategy;

/// What a worker is told on its command line (`fencelock-check worker ...`).
#[derive(Clone, Debug, clap::Args)]
pub struct WorkerArgs {
    /// The lock strategy.
    #[arg(long)]
    pub strategy: Strategy,
    /// The fault of this run.
    #[arg(long)]
    pub fault: Fault,
    /// The lock's servers (one, or five for RedLock).
    #[arg(long, value_delimiter = ',', required = true)]
    pub lock_urls: Vec<String>,
    /// The protected resource's server.
    #[arg(long)]
    pub resource_url: String,
    /// The service the sentinels monitor, when `lock_urls` are sentinels.
    #[arg(long)]
    pub service: Option<String>,
    /// The lock's name.
    #[arg(long)]
    pub name: String,
    /// The lease, in milliseconds.
    #[arg(long)]
    pub lease_ms: u64,
    /// How long one acquire attempt waits, in milliseconds.
    #[arg(long)]
    pub acquire_timeout_ms: u64,
    /// The time between a section's read and its write, and between two sections, in
    /// milliseconds.
    #[arg(long)]
    pub work_ms: u64,
    /// When to start, in `CLOCK_MONOTONIC` nanoseconds.
    #[arg(long)]
    pub start_ns: u64,
    /// When to stop taking the lock, in `CLOCK_MONOTONIC` nanoseconds.
    #[arg(long)]
    pub end_ns: u64,
    /// When this worker's fault is due, in `CLOCK_MONOTONIC` nanoseconds: it lands in the first
    /// section entered from then on.
    #[arg(long)]
    pub fault_at_ns: Option<u64>,
    /// How many locks the worker takes at once, one lane each: `name`, then `name:1`, ...
    #[arg(long, default_value_t = 1)]
    pub lanes: usize,
}

impl WorkerArgs {
    /// The arguments that make `fencelock-check worker` parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "worker".to_owned(),
            format!("--strategy={}", self.strategy),
            format!("--fault={}", self.fault),
            format!("--lock-urls={}", self.lock_urls.join(",")),
            format!("--resource-url={}", self.resource_url),
            format!("--name={}", self.name),
            format!("--lease-ms={}", self.lease_ms),
            format!("--acquire-timeout-ms={}", self.acquire_timeout_ms),
            format!("--work-ms={}", self.work_ms),
            format!("--start-ns={}", self.start_ns),
            format!("--end-ns={}", self.end_ns),
            format!("--lanes={}", self.lanes),
        ];
        if let Some(service) = &self.service {
            args.push(format!("--service={service}"));
        }
        if let Some(at) = self.fault_at_ns {
            args.push(format!("--fault-at-ns={at}"));
        }
        args
    }

    /// The lease.
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    pub(crate) fn work(&self) -> Duration {
        Duration::from_millis(self.work_ms)
    }

    /// How many lanes the worker runs: at least one.
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.max(1)
    }

    /// The lock name of lane `lane`: the run's name for the first, so that a run of one lane
    /// locks exactly that name.
    pub(crate) fn lane_name(&self, lane: usize) -> String {
        if lane == 0 {
            self.name.clone()
        } else {
            format!("{}:{lane}", self.name)
        }
    }
}
