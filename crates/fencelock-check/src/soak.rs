//! Soak mode: fencelock's primitives one after the other, each under faults drawn continuously
//! from every kind that applies to it, over many lock names at once, until a number of
//! critical sections or a time bound. Each round is a run of [`run_cell`] with a fault drawn
//! from the seed, its history checked as the full matrix checks one; the totals per strategy
//! and fault go to a results file (Markdown and JSON).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencelock_sources::Stamp;
use fencelock_testkit::FakedClock;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::cell::{run_cell, CellResult};
use crate::claim::Claim;
use crate::config::MatrixOptions;
use crate::error::Result;
use crate::fault::Fault;
use crate::history::Measurement;
use crate::matrix::Verdict;
use crate::rng::Rng;
use crate::strategy::Strategy;

/// The strategies a soak runs, in order: each of fencelock's primitives, fenced where fencing is
/// what fencelock claims under a stalled holder, and the replicated deployments with their safe
/// options.
pub const SOAK_STRATEGIES: [Strategy; 9] = [
    Strategy::FencelockMutexFenced,
    Strategy::FencelockFairFenced,
    Strategy::FencelockRwlockFenced,
    Strategy::FencelockSemaphoreFenced,
    Strategy::FencelockReentrantFenced,
    Strategy::FencelockMultiFenced,
    Strategy::FencelockRedlockFenced,
    Strategy::FencelockSentinelWait,
    Strategy::FencelockClusterWait,
];

/// What a soak runs, and for how long.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// The critical sections to reach, over every strategy.
    pub sections: usize,
    /// The time bound, over every strategy.
    pub time_bound: Duration,
    /// The strategies, each given an equal share of `sections` and `time_bound`.
    pub strategies: Vec<Strategy>,
    /// The knobs of each round (its `duration`, workers, lanes, lease...) and the seed every
    /// round's fault and plan are drawn from.
    pub round: MatrixOptions,
}

/// The totals of one strategy under one fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SoakRow {
    /// The strategy's name.
    pub strategy: String,
    /// The fault's name.
    pub fault: String,
    /// What fencelock claims there.
    pub claim: String,
    /// Rounds run.
    pub rounds: usize,
    /// The rounds' measurements, added up.
    pub measurement: Measurement,
    /// Rounds whose claim did not hold: fencelock violations.
    pub violations: usize,
    /// Rounds whose planned fault never happened.
    pub faults_missed: usize,
    /// Rounds where a worker ended in a way nobody asked for, with the first reason seen.
    pub worker_failures: Vec<String>,
    /// The seeds of the rounds that violated the claim, to rerun them with `fencelock-check run`.
    pub violating_seeds: Vec<u64>,
}

/// What a soak measured, with what it takes to reproduce it.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    /// The seed every round was drawn from.
    pub seed: u64,
    /// The command line.
    pub command: String,
    /// The machine: cores, memory, kernel, Redis.
    pub machine: String,
    /// The commit, as `git describe` gives it.
    pub commit: String,
    /// The sources the checker measures (the lock path and the checker) and their digest as
    /// it was built: what the figures check compares with today's tree.
    pub sources: Stamp,
    /// When the soak started, in seconds since the Unix epoch.
    pub started_unix: u64,
    /// How long it ran, in seconds.
    pub elapsed_secs: f64,
    /// The sections it aimed for.
    pub target_sections: usize,
    /// The knobs of every round, as `fencelock-check run` takes them.
    pub knobs: String,
    /// The totals, per strategy and fault.
    pub rows: Vec<SoakRow>,
}

impl SoakReport {
    /// Critical sections completed in all.
    pub fn sections(&self) -> usize {
        self.rows.iter().map(|r| r.measurement.sections).sum()
    }

    /// Sections per second of wall time.
    pub fn throughput(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.sections() as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }

    /// Whether no round violated a claim and every worker ended as asked.
    pub fn passes(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.violations == 0 && r.worker_failures.is_empty())
    }

    /// The report as Markdown: what ran, then one row per strategy and fault.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# fencelock-check soak\n");
        let _ = writeln!(out, "- command: `{}`", self.command);
        let _ = writeln!(out, "- seed: {}", self.seed);
        let _ = writeln!(out, "- commit: `{}`", self.commit);
        let _ = writeln!(out, "- {}", self.sources.line());
        let _ = writeln!(out, "- machine: {}", self.machine);
        let _ = writeln!(
            out,
            "- {} sections (target {}) in {:.0} s: {:.0} sections/s\n",
            self.sections(),
            self.target_sections,
            self.elapsed_secs,
            self.throughput()
        );
        out.push_str(
            "| strategy | fault | rounds | faults | sections | overlaps | lost updates | stale \
             writes accepted | refused | fences back | availability | claim | violations |\n\
             |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|\n",
        );
        for row in &self.rows {
            let m = &row.measurement;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1}% | {} | {} |",
                row.strategy,
                row.fault,
                row.rounds,
                m.faults,
                m.sections,
                m.overlaps,
                m.lost_updates,
                m.stale_writes,
                m.refused,
                m.fences_back,
                m.availability() * 100.0,
                row.claim,
                row.violations,
            );
        }
        for row in self.rows.iter().filter(|r| !r.worker_failures.is_empty()) {
            let _ = writeln!(
                out,
                "\n{} × {}: a worker ended in a way nobody asked for: {}.",
                row.strategy,
                row.fault,
                row.worker_failures.join("; ")
            );
        }
        for row in self.rows.iter().filter(|r| r.violations > 0) {
            let _ = writeln!(
                out,
                "\n{} × {} violated its claim with seeds {:?}: `fencelock-check run --strategy {} \
                 --fault {} --seed SEED {}` runs such a round again.",
                row.strategy, row.fault, row.violating_seeds, row.strategy, row.fault, self.knobs
            );
        }
        out
    }

    /// Writes `PATH.md` and `PATH.json`.
    ///
    /// # Errors
    ///
    /// When a file cannot be written.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path.with_extension("md"), self.markdown())?;
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| crate::error::CheckError::Worker(format!("report: {e}")))?;
        std::fs::write(path.with_extension("json"), json)?;
        Ok(())
    }
}

/// The faults a soak draws from for `strategy`: every one that applies to it, the clock's only
/// where libfaketime can run a server, and none of the handoff faults, whose scenarios (a waiter
/// stopped behind a holder of the same name, sections held long in a window) are written for one
/// name per worker: the matrix runs them.
pub fn soak_faults(strategy: Strategy) -> Vec<Fault> {
    let clock = FakedClock::available();
    Fault::ALL
        .iter()
        .copied()
        .filter(|f| f.applies_to(strategy) && (clock || !f.is_clock()) && !f.is_handoff())
        .collect()
}

/// Runs the soak.
///
/// # Errors
///
/// As [`run_cell`] does.
pub fn soak(options: &SoakOptions, command: String) -> Result<SoakReport> {
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let strategies = options.strategies.len().max(1);
    let sections_share = options.sections.div_ceil(strategies);
    let time_share = options.time_bound / u32::try_from(strategies).unwrap_or(u32::MAX);
    let mut rng = Rng::new(options.round.seed);
    let mut rows: BTreeMap<(usize, usize), SoakRow> = BTreeMap::new();
    let progress = soak_bar(options.sections);
    let mut done = 0;
    for (index, &strategy) in options.strategies.iter().enumerate() {
        let faults = soak_faults(strategy);
        let strategy_started = Instant::now();
        let mut strategy_total = Measurement::default();
        let mut strategy_violations = 0;
        while strategy_total.sections < sections_share
            && strategy_started.elapsed() < time_share
            && started.elapsed() < options.time_bound
        {
            let fault = faults[(rng.next_u64() % faults.len() as u64) as usize];
            // The round is the cell `fencelock-check run` makes of this seed and these knobs.
            let round = MatrixOptions {
                seed: rng.next_u64(),
                ..options.round.clone()
            };
            let config = round.cell(strategy, fault);
            progress.set_message(format!("{strategy} x {fault}"));
            let result = run_cell(&config)?;
            done += result.measurement.sections;
            progress.set_position(done as u64);
            strategy_total.add(&result.measurement);
            let position = Fault::ALL.iter().position(|&f| f == fault).unwrap_or(0);
            let row = rows.entry((index, position)).or_default();
            strategy_violations += record(row, &result, round.seed);
        }
        let summary = format!(
            "{strategy}: {} sections, {} faults, {} overlaps, {} lost updates, {} stale writes \
             accepted, {} refused, {:.1}% available, {} violations, in {:.0} s",
            strategy_total.sections,
            strategy_total.faults,
            strategy_total.overlaps,
            strategy_total.lost_updates,
            strategy_total.stale_writes,
            strategy_total.refused,
            strategy_total.availability() * 100.0,
            strategy_violations,
            strategy_started.elapsed().as_secs_f64()
        );
        if progress.is_hidden() {
            eprintln!("{summary}");
        } else {
            progress.println(summary);
        }
    }
    progress.finish_and_clear();
    Ok(SoakReport {
        seed: options.round.seed,
        command,
        machine: machine(),
        commit: commit(),
        sources: crate::measured(),
        started_unix,
        elapsed_secs: started.elapsed().as_secs_f64(),
        target_sections: options.sections,
        knobs: knobs(&options.round),
        rows: rows.into_values().collect(),
    })
}

/// Adds one round to its row; returns 1 when it violated its claim.
fn record(row: &mut SoakRow, result: &CellResult, seed: u64) -> usize {
    let claim = Claim::of(result.strategy, result.fault);
    row.strategy = result.strategy.name().to_owned();
    row.fault = result.fault.name().to_owned();
    row.claim = claim.label().to_owned();
    row.rounds += 1;
    row.measurement.add(&result.measurement);
    match Verdict::of(result) {
        Verdict::Broken => {
            row.violations += 1;
            row.violating_seeds.push(seed);
            1
        }
        Verdict::FaultMissed => {
            row.faults_missed += 1;
            0
        }
        Verdict::WorkerFailed(why) => {
            row.worker_failures.push(why);
            0
        }
        _ => 0,
    }
}

/// The options of `fencelock-check run` that give a round these knobs.
fn knobs(round: &MatrixOptions) -> String {
    format!(
        "--workers {} --lanes {} --duration {} --lease {} --work {} --faults {}",
        round.workers,
        round.lanes,
        round.duration.as_millis(),
        round.lease.as_millis(),
        round.work.as_millis(),
        round.faults
    )
}

fn soak_bar(sections: usize) -> ProgressBar {
    let bar = ProgressBar::new(sections as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} sections, {per_sec}, eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// Cores, memory, kernel and the Redis under test, as far as this machine tells them.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or_else(|| "? GiB".to_owned(), |kib| format!("{} GiB", kib >> 20));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "?".to_owned(), |k| k.trim().to_owned());
    format!(
        "{cores} cores, {memory}, Linux {kernel}, {}",
        fencelock_testkit::server_version()
    )
}

/// The commit the checker was built from, as `git describe --always --dirty` says.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |out| String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
}

/// Where the results go when no path is given: `fencelock-soak.md` and `fencelock-soak.json`.
pub fn default_out() -> PathBuf {
    PathBuf::from("fencelock-soak")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soak_report_says_which_sources_it_measured() {
        let report = SoakReport {
            seed: 7,
            command: "fencelock-check soak".to_owned(),
            machine: "2 cores".to_owned(),
            commit: "0000000".to_owned(),
            sources: crate::measured(),
            started_unix: 0,
            elapsed_secs: 1.0,
            target_sections: 10,
            knobs: String::new(),
            rows: Vec::new(),
        };
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let json = serde_json::to_value(&report).expect("JSON");
        let today = fencelock_sources::digest(&root, fencelock_sources::CHECK).expect("a digest");
        assert_eq!(json["sources"]["digest"].as_str(), Some(today.as_str()));
        let stamp = Stamp::of_markdown(&report.markdown()).expect("a sources line");
        assert_eq!(stamp, report.sources);
        assert_eq!(stamp.matches(&root), Ok(()));
    }
}
