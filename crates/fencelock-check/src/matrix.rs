//! Runs of many cells, their verdicts and the table that reports them.

use std::fmt::Write as _;
use std::time::Duration;

use crate::cell::{run_cell, CellResult};
use crate::claim::Claim;
use crate::config::{CellConfig, MatrixOptions};
use crate::error::Result;
use crate::fault::Fault;
use crate::rng::Rng;
use crate::strategy::Strategy;
use indicatif::{ProgressBar, ProgressStyle};

/// Every strategy under every fault that applies to it.
pub fn full_matrix() -> Vec<(Strategy, Fault)> {
    Strategy::ALL
        .iter()
        .flat_map(|&s| {
            Fault::ALL
                .iter()
                .filter(move |f| f.applies_to(s))
                .map(move |&f| (s, f))
        })
        .collect()
}

/// The cells of the short mode: each naive lock under the fault its seed says breaks it, and
/// each fencelock guarantee under the faults that test it.
pub fn short_matrix() -> Vec<(Strategy, Fault)> {
    vec![
        (Strategy::ExistsThenSet, Fault::None),
        (Strategy::SetnxExpire, Fault::Kill),
        (Strategy::SetnxGetset, Fault::Slow),
        (Strategy::SetNxExConstant, Fault::Slow),
        (Strategy::TokenNoRenewal, Fault::Slow),
        (Strategy::FencelockMutex, Fault::Kill),
        (Strategy::FencelockMutex, Fault::Slow),
        (Strategy::FencelockMutex, Fault::RestartAof),
        (Strategy::FencelockMutexFenced, Fault::Pause),
        (Strategy::FencelockFairFenced, Fault::Pause),
        (Strategy::FencelockMutexFenced, Fault::Partition),
        (Strategy::FencelockRedlockFenced, Fault::MinorityPause),
        (Strategy::FencelockSentinel, Fault::Failover),
        (Strategy::FencelockSentinelWait, Fault::Failover),
        (Strategy::FencelockMutex, Fault::EvictVolatile),
        (Strategy::FencelockMutexFenced, Fault::EvictVolatile),
        (Strategy::FencelockMutex, Fault::MemoryFull),
        (Strategy::FencelockClusterWait, Fault::ClusterKillMaster),
        (Strategy::FencelockMutexFenced, Fault::ClockForwardLease),
        (Strategy::FencelockMutex, Fault::SingleUrlFailover),
        (Strategy::FencelockMutexFenced, Fault::PubsubDelay),
        (Strategy::FencelockMutex, Fault::LateReply),
        (Strategy::FencelockMutexFenced, Fault::PatternTap),
        (Strategy::FencelockFairFenced, Fault::HalfOpenWaiter),
        (Strategy::FencelockMutex, Fault::FrozenWaiter),
        (Strategy::FencelockFairFenced, Fault::PubsubKill),
    ]
}

/// How a cell came out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The expectation held: fencelock kept its claim, or the naive lock failed as the seeds say.
    Holds,
    /// The expectation failed: a fencelock violation, or a naive lock the checker did not catch.
    Broken,
    /// Nothing is claimed for this cell.
    Unchecked,
    /// The fault was planned but never happened, so the cell shows nothing about it.
    FaultMissed,
    /// A worker ended in a way nobody asked for.
    WorkerFailed(String),
}

impl Verdict {
    /// The verdict on `result`.
    pub fn of(result: &CellResult) -> Verdict {
        if let Some(failure) = result.worker_failures.first() {
            return Verdict::WorkerFailed(failure.clone());
        }
        if result.fault != Fault::None && result.measurement.faults == 0 {
            return Verdict::FaultMissed;
        }
        match Claim::of(result.strategy, result.fault).holds(&result.measurement) {
            Some(true) => Verdict::Holds,
            Some(false) => Verdict::Broken,
            None => Verdict::Unchecked,
        }
    }

    /// Whether the cell passes: its expectation held, or there was none.
    pub fn passes(&self) -> bool {
        matches!(self, Verdict::Holds | Verdict::Unchecked)
    }

    fn label(&self, claim: Claim) -> String {
        let fencelock_claim = matches!(
            claim,
            Claim::Exclusive | Claim::Fenced | Claim::Live | Claim::InOrder
        );
        match self {
            Verdict::Holds if fencelock_claim => "holds".into(),
            Verdict::Holds if claim == Claim::DocumentedLoss => "loses, as documented".into(),
            Verdict::Holds => "fails, as the seeds say".into(),
            Verdict::Broken if fencelock_claim => "**VIOLATED**".into(),
            Verdict::Broken => format!("**not caught** in {MAX_RUNS} runs"),
            Verdict::Unchecked => "-".into(),
            Verdict::FaultMissed => "**fault missed**".into(),
            Verdict::WorkerFailed(why) => format!("**worker failed**: {why}"),
        }
    }
}

/// How often at most a cell that must show a failure is run before it counts as not caught.
pub const MAX_RUNS: usize = 8;

/// Runs `cells` one after the other, reporting each on stderr as it finishes, under a progress
/// bar when stderr is a terminal.
///
/// A cell that must show a failure ([`Claim::expects_failure`]) and did not is run again with
/// the next seed drawn from its own, up to [`MAX_RUNS`] runs: its verdict then does not depend
/// on the seed's luck. Its row reports the run that showed the failure (or the last one) and
/// how many runs it took. A fencelock claim is judged on one run: a violation in any run is one.
///
/// # Errors
///
/// As [`run_cell`] does.
pub fn run_matrix(cells: &[(Strategy, Fault)], options: &MatrixOptions) -> Result<Vec<CellResult>> {
    let progress = Progress::new(cells.len());
    let mut results = Vec::with_capacity(cells.len());
    for &(strategy, fault) in cells {
        progress.start(strategy, fault);
        let result = run_until_shown(&options.cell(strategy, fault))?;
        progress.finish(&result, row(&result).trim_end());
        results.push(result);
    }
    progress.done();
    Ok(results)
}

/// Runs one cell; again, with the next seed, while it must show a failure and has not.
fn run_until_shown(config: &CellConfig) -> Result<CellResult> {
    let expects_failure = Claim::of(config.strategy, config.fault).expects_failure();
    let mut seeds = Rng::new(config.options.seed);
    let mut config = config.clone();
    let mut runs = 0;
    loop {
        let mut result = run_cell(&config)?;
        runs += 1;
        result.runs = runs;
        if !expects_failure || Verdict::of(&result) == Verdict::Holds || runs == MAX_RUNS {
            return Ok(result);
        }
        config.options.seed = seeds.next_u64();
    }
}

/// The progress of a matrix on stderr: a bar with the cell running, the sections so far and the
/// time left (hidden when stderr is not a terminal), and a summary line per finished cell.
struct Progress {
    bar: ProgressBar,
    sections: std::cell::Cell<usize>,
}

impl Progress {
    fn new(cells: usize) -> Progress {
        let bar = ProgressBar::new(cells as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} cells, eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(500));
        Progress {
            bar,
            sections: std::cell::Cell::new(0),
        }
    }

    fn start(&self, strategy: Strategy, fault: Fault) {
        self.bar.set_message(format!(
            "{} sections so far; running {strategy} x {fault}",
            self.sections.get()
        ));
    }

    fn finish(&self, result: &CellResult, summary: &str) {
        self.sections
            .set(self.sections.get() + result.measurement.sections);
        // A hidden bar (stderr not a terminal) prints nothing, not even lines above it.
        if self.bar.is_hidden() {
            eprintln!("{summary}");
        } else {
            self.bar.println(summary);
        }
        self.bar.inc(1);
    }

    fn done(&self) {
        self.bar.finish_and_clear();
    }
}

/// The header of the table [`table`] prints.
pub const TABLE_HEADER: &str = "| strategy | fault | faults | sections | overlaps | lost updates \
| stale writes accepted | refused | fences back | availability | entered after a kill \
| unheld grants | longest idle (ms) | out of turn | claim | verdict |\n\
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n";

/// The results as a Markdown table, one row per cell.
pub fn table(results: &[CellResult]) -> String {
    let mut out = TABLE_HEADER.to_owned();
    for result in results {
        out.push_str(&row(result));
    }
    out
}

fn row(result: &CellResult) -> String {
    let m = &result.measurement;
    let verdict = Verdict::of(result);
    let mut verdict_label = verdict.label(Claim::of(result.strategy, result.fault));
    if result.runs > 1 && verdict == Verdict::Holds {
        // The row is the run that showed the failure: say which.
        verdict_label.push_str(&format!(" (in run {})", result.runs));
    }
    let verdict = verdict_label;
    let mut line = String::new();
    let _ = writeln!(
        line,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {} | {} |",
        result.strategy,
        result.fault,
        m.faults,
        m.sections,
        m.overlaps,
        m.lost_updates,
        m.stale_writes,
        m.refused,
        m.fences_back,
        m.availability() * 100.0,
        m.entered_after_crash
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        m.unheld_grants,
        m.longest_idle_ms,
        m.out_of_turn,
        Claim::of(result.strategy, result.fault),
        verdict,
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_matrix_holds_every_applicable_pair_once() {
        let cells = full_matrix();
        assert!(cells.iter().all(|(s, f)| f.applies_to(*s)));
        let mut unique = cells.clone();
        unique.sort_by_key(|(s, f)| (s.name(), f.name()));
        unique.dedup();
        assert_eq!(unique.len(), cells.len());
        assert!(short_matrix().iter().all(|c| cells.contains(c)));
    }

    #[test]
    fn every_short_cell_asserts_something() {
        for (strategy, fault) in short_matrix() {
            let claim = Claim::of(strategy, fault);
            assert!(
                !matches!(claim, Claim::NotClaimed | Claim::Measured),
                "{strategy} × {fault} checks nothing"
            );
        }
    }
}
