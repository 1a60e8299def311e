//! `fencelock-check`: a fault-injecting safety checker for locks on Redis.
//!
//! It runs a lock strategy with several worker **processes** under an injected fault, records
//! what happened, and checks the history. Each worker loops for a bounded time: acquire, a
//! critical section that increments a counter in a Redis of its own by a non-atomic
//! read-modify-write, release. Every worker reports each step ([`event::Event`]) on the
//! machine's monotonic clock, which all processes share; the checker merges the reports and
//! counts, per run ([`history::Measurement`]): sections completed, **overlaps** (two holders at
//! once), **lost updates** (increments the final counter does not show), **stale writes
//! accepted** (writes that landed after a later holder had read) and acquire availability.
//!
//! The strategies ([`strategy::Strategy`]) are the seeds' naive locks, issuing exactly the
//! commands the seeds describe, and fencelock's `Mutex` (without and with fencing), `FairMutex`,
//! `RwLock` (writers with readers), `Semaphore`, `ReentrantMutex` and `MultiMutex` (fenced),
//! RedLock over 5 masters, and `Mutex` through Sentinel and on a Cluster without and with
//! waiting for the replica. The faults ([`fault::Fault`]) are a holder killed (SIGKILL), a holder paused
//! (SIGSTOP) longer than its lease, a section slower than the lease, a holder cut off from the
//! lock's servers by a proxy ([`fencelock_testkit::Proxy`]), the lock's Redis restarted
//! without and with `appendfsync always`, for RedLock a minority of masters killed, paused or
//! restarted, for Sentinel a failover to a replica that missed the latest grant, and the lock's
//! Redis's wall clock stepped or running fast (libfaketime, [`fencelock_testkit::FakedClock`]),
//! and the faults that go after a release's handoff ([`handoff`]): a single-address client
//! through a failover, pub/sub messages arriving late, a pattern subscription that counts as a
//! receiver for a dead waiter, a waiter cut off or frozen with its place in line, pub/sub
//! connections killed before releases, and replies coming back after the lease they grant.
//! Under those the checker also reads each grant back from the lock's Redis (**unheld
//! grants**), measures the **longest idle** time of the lock while a worker able to take it
//! waited, and, for a fair lock, the sections served **out of turn**.
//! Their schedule is drawn from a printed, settable seed ([`fault::FaultPlan`]) and bounded in
//! count and time.
//!
//! A worker may take several lock names at once (`--lanes`), one task per name, each name
//! protecting a counter of its own; each name's history is checked on its own. The soak mode
//! ([`soak`]) runs fencelock's primitives that way, round after round under faults drawn from the
//! seed, until a number of critical sections or a time bound.
//!
//! ```text
//! fencelock-check full  [--seed N] [--workers 4] [--duration 6000] [--lease 1000] [--out FILE]
//! fencelock-check short [--seed N]
//! fencelock-check run --strategy fencelock-mutex-fenced --fault pause [--seed N] [--lanes 1]
//! fencelock-check soak [--sections 1000000] [--minutes 60] [--seed N] [--out fencelock-soak]
//! ```
//!
//! Each cell's verdict compares the measurement with what fencelock's documentation claims, or
//! with the failure the seeds describe ([`claim::Claim`]); the exit code is 0 when every cell
//! passes, 1 when one does not, 2 when a run could not be made.
//!
//! What follows is this crate's `docs/safety.md`: the measured table, and what each guarantee
//! assumes.
//!
#![doc = include_str!("../docs/safety.md")]

pub mod args;
pub mod cell;
pub mod claim;
pub mod config;
pub mod error;
pub mod event;
pub mod fault;
pub mod handoff;
pub mod history;
pub mod lock;
pub mod matrix;
pub mod resource;
pub mod rng;
pub mod soak;
pub mod strategy;
pub mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};

pub use cell::{run_cell, CellResult};
pub use claim::Claim;
pub use config::{CellConfig, MatrixOptions};
pub use error::{CheckError, Result};
pub use fault::Fault;
pub use matrix::{full_matrix, run_matrix, short_matrix, table, Verdict};
pub use strategy::Strategy;

/// Runs lock strategies with many worker processes under injected faults and checks the
/// histories.
#[derive(Debug, Parser)]
#[command(name = "fencelock-check", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every strategy under every fault that applies to it; prints the Markdown table.
    Full(RunArgs),
    /// The reduced matrix that CI runs: the seeds' failures and fencelock's claims.
    Short(RunArgs),
    /// fencelock's primitives under faults drawn continuously, over many names, until a number
    /// of critical sections or a time bound; writes the totals to a results file.
    Soak(SoakArgs),
    /// One strategy under one fault.
    Run {
        /// The lock strategy.
        #[arg(long)]
        strategy: Strategy,
        /// The fault.
        #[arg(long)]
        fault: Fault,
        #[command(flatten)]
        run: RunArgs,
    },
    /// A worker process (started by the checker itself).
    #[command(hide = true)]
    Worker(args::WorkerArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The seed of the fault schedule (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker processes per cell.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// How long workers take the lock in each cell, in milliseconds.
    #[arg(long, default_value_t = 6000)]
    duration: u64,
    /// The lease, in milliseconds (naive locks round it to whole seconds).
    #[arg(long, default_value_t = 1000)]
    lease: u64,
    /// The time between a section's read and its write, and between sections, in milliseconds.
    #[arg(long, default_value_t = 5)]
    work: u64,
    /// Faults per cell (faults inside workers: at most one per worker).
    #[arg(long, default_value_t = 2)]
    faults: usize,
    /// Lock names each worker takes at once, each protecting a counter of its own.
    #[arg(long, default_value_t = 1)]
    lanes: usize,
    /// Also write the table to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SoakArgs {
    /// The critical sections to reach, over every strategy.
    #[arg(long, default_value_t = 1_000_000)]
    sections: usize,
    /// The time bound, in minutes.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// The seed every round is drawn from (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker processes per round.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Lock names each worker takes at once.
    #[arg(long, default_value_t = 8)]
    lanes: usize,
    /// How long each round runs, in milliseconds.
    #[arg(long, default_value_t = 6000)]
    round: u64,
    /// The lease, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    lease: u64,
    /// The time between a section's read and its write, and between sections, in milliseconds.
    #[arg(long, default_value_t = 1)]
    work: u64,
    /// Only these strategies (default: every one the soak runs).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<Strategy>,
    /// The results file, written as PATH.md and PATH.json.
    #[arg(long, default_value_os_t = soak::default_out())]
    out: PathBuf,
}

impl SoakArgs {
    fn options(&self) -> Result<soak::SoakOptions> {
        if self.workers < 2 || self.lanes == 0 || self.lease < 1000 {
            return Err(CheckError::Usage(
                "at least 2 workers, 1 lane and a 1000 ms lease".into(),
            ));
        }
        let strategies = if self.strategies.is_empty() {
            soak::SOAK_STRATEGIES.to_vec()
        } else {
            self.strategies.clone()
        };
        Ok(soak::SoakOptions {
            sections: self.sections,
            time_bound: Duration::from_secs(self.minutes.saturating_mul(60)),
            strategies,
            round: MatrixOptions {
                workers: self.workers,
                duration: Duration::from_millis(self.round),
                lease: Duration::from_millis(self.lease),
                work: Duration::from_millis(self.work),
                faults: 1,
                lanes: self.lanes,
                seed: self.seed.unwrap_or_else(clock_seed),
                worker_exe: std::env::current_exe()?,
            },
        })
    }
}

/// A seed from the wall clock, for runs not given one.
fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl RunArgs {
    fn options(&self) -> Result<MatrixOptions> {
        if self.workers < 2 {
            return Err(CheckError::Usage("at least 2 workers contend".into()));
        }
        if self.lease < 1000 {
            return Err(CheckError::Usage(
                "the lease is at least 1000 ms: the naive locks count it in seconds".into(),
            ));
        }
        let seed = self.seed.unwrap_or_else(clock_seed);
        Ok(MatrixOptions {
            workers: self.workers,
            duration: Duration::from_millis(self.duration),
            lease: Duration::from_millis(self.lease),
            work: Duration::from_millis(self.work),
            faults: self.faults,
            lanes: self.lanes.max(1),
            seed,
            worker_exe: std::env::current_exe()?,
        })
    }
}

/// The command line's entry point: parses the arguments, runs, and maps the outcome to the
/// exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("fencelock-check: {e}");
            ExitCode::from(2)
        }
    }
}

/// The sources this build of the checker measures, as its build script hashed them.
pub fn measured() -> fencelock_sources::Stamp {
    fencelock_sources::Stamp::new(env!("FENCELOCK_SOURCES_DIGEST"), fencelock_sources::CHECK)
}

/// What `--out` writes of a matrix: which sources it measured, then its table.
fn matrix_file(table: &str) -> String {
    format!("{}\n\n{table}", measured().line())
}

/// Runs a soak, writes its results and prints them.
fn run_soak(args: &SoakArgs) -> Result<bool> {
    let options = args.options()?;
    eprintln!(
        "fencelock-check soak: seed {}, {} sections or {} min, {} workers x {} names, {} ms rounds",
        options.round.seed,
        options.sections,
        args.minutes,
        options.round.workers,
        options.round.lanes,
        args.round
    );
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = soak::soak(&options, command)?;
    report.write(&args.out)?;
    println!("{}", report.markdown());
    Ok(report.passes())
}

/// Runs what `cli` asks for; `Ok(false)` when a cell did not pass.
///
/// # Errors
///
/// When a run could not be made: bad options, a worker that cannot be spawned, a Redis that
/// cannot be reached.
pub fn run(cli: Cli) -> Result<bool> {
    let (cells, args) = match cli.command {
        Command::Worker(args) => return worker::run(&args).map(|()| true),
        Command::Full(args) => (full_matrix(), args),
        Command::Short(args) => (short_matrix(), args),
        Command::Soak(args) => return run_soak(&args),
        Command::Run {
            strategy,
            fault,
            run,
        } => (vec![(strategy, fault)], run),
    };
    let options = args.options()?;
    eprintln!(
        "fencelock-check: seed {}, {} workers, {} ms per cell, lease {} ms, {} faults per cell",
        options.seed,
        options.workers,
        options.duration.as_millis(),
        options.lease.as_millis(),
        options.faults
    );
    eprint!("{}", matrix::TABLE_HEADER);
    let results = run_matrix(&cells, &options)?;
    let table = table(&results);
    println!("{table}");
    if let Some(path) = &args.out {
        std::fs::write(path, matrix_file(&table))?;
    }
    Ok(results.iter().all(|r| Verdict::of(r).passes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_written_to_a_file_says_which_sources_it_measured() {
        let file = matrix_file(matrix::TABLE_HEADER);
        let stamp = fencelock_sources::Stamp::of_markdown(&file).expect("a sources line");
        assert_eq!(stamp.paths, fencelock_sources::CHECK);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(stamp.matches(&root), Ok(()));
        assert!(file.ends_with(matrix::TABLE_HEADER), "{file}");
    }
}
