//! Helpers for integration tests that span several OS processes.
//!
//! A test target declared with `harness = false` acts both as orchestrator
//! and as worker: `main` first asks [`worker_role`] whether it was started by
//! [`spawn_worker`], and otherwise runs its scenarios with [`run_scenarios`].
//! Workers can stamp critical sections with [`monotonic_nanos`], which is
//! comparable across processes, and the orchestrator checks the collected
//! intervals with [`check_no_overlap`].
//!
//! ```no_run
//! use relock_testkit::process::{run_scenarios, spawn_worker, worker_role};
//!
//! fn contenders() {
//!     let workers: Vec<_> = (0..3)
//!         .map(|i| spawn_worker("contender", &[("WORKER_ID", i.to_string())]))
//!         .collect();
//!     for worker in workers {
//!         let out = worker.wait_with_output().expect("worker output");
//!         assert!(out.status.success());
//!     }
//! }
//!
//! fn main() {
//!     if let Some(role) = worker_role() {
//!         match role.as_str() {
//!             "contender" => { /* take the lock, print the interval */ }
//!             other => panic!("unknown worker role {other}"),
//!         }
//!         return;
//!     }
//!     run_scenarios(&[("contenders", contenders)]);
//! }
//! ```

use std::env;
use std::io::Write;
use std::panic;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use nix::time::{clock_gettime, ClockId};

/// Environment variable telling a spawned test binary which role to play.
pub const WORKER_ENV: &str = "RELOCK_TESTKIT_WORKER";

/// If this process was started as a worker by [`spawn_worker`], returns
/// `Some(role)` (the string passed there), else `None`.
pub fn worker_role() -> Option<String> {
    env::var(WORKER_ENV).ok()
}

/// Spawns the current executable as a worker playing `role`, with the extra
/// environment variables `envs`. Its stdout is piped (read results from it),
/// stderr is inherited (panics show up in the test output), stdin is null.
///
/// Use [`worker_command`] instead to pass arguments or change stdio.
///
/// # Panics
///
/// If the current executable cannot be determined or spawned.
pub fn spawn_worker(role: &str, envs: &[(&str, String)]) -> Child {
    let mut cmd = worker_command(role, envs);
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot spawn worker {role:?} ({cmd:?}): {e}"))
}

/// The [`Command`] that [`spawn_worker`] runs, for callers that need to add
/// arguments or redirect output before spawning it.
///
/// # Panics
///
/// If the current executable cannot be determined.
pub fn worker_command(role: &str, envs: &[(&str, String)]) -> Command {
    let exe = env::current_exe().expect("cannot determine the current test executable");
    let mut cmd = Command::new(exe);
    cmd.env(WORKER_ENV, role)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// Runs named scenarios the way libtest runs tests, then exits the process.
///
/// Each scenario runs in turn on the calling thread; a panic marks it
/// `FAILED` without stopping the others. Output and the closing line match
/// libtest's, so tooling that reads `cargo test` output understands it:
///
/// ```text
/// test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.23s
/// ```
///
/// Command-line arguments are read like libtest's: a free argument is a
/// substring filter (several may be given), `--exact` makes filters match
/// whole names, `--skip PATTERN` excludes names, `--list` only lists them,
/// and other flags are ignored. The exit code is 101 if any scenario
/// failed, 0 otherwise.
pub fn run_scenarios(scenarios: &[(&str, fn())]) -> ! {
    let args = Args::parse(env::args().skip(1));
    let selected: Vec<&(&str, fn())> = scenarios
        .iter()
        .filter(|(name, _)| args.selects(name))
        .collect();
    let filtered_out = scenarios.len() - selected.len();

    if args.list {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        if !args.terse {
            println!();
            println!("{} tests, 0 benchmarks", selected.len());
        }
        flush_and_exit(0);
    }

    let started = Instant::now();
    println!();
    println!(
        "running {} test{}",
        selected.len(),
        if selected.len() == 1 { "" } else { "s" }
    );
    let mut failed = Vec::new();
    for (name, scenario) in &selected {
        let _ = std::io::stdout().flush();
        let outcome = panic::catch_unwind(*scenario);
        if outcome.is_ok() {
            println!("test {name} ... ok");
        } else {
            println!("test {name} ... FAILED");
            failed.push(*name);
        }
    }
    let passed = selected.len() - failed.len();
    if !failed.is_empty() {
        println!();
        println!("failures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!();
    println!(
        "test result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; \
         {filtered_out} filtered out; finished in {:.2}s",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    println!();
    flush_and_exit(if failed.is_empty() { 0 } else { 101 });
}

fn flush_and_exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

#[derive(Debug, Default)]
struct Args {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
    terse: bool,
    ignored_only: bool,
}

impl Args {
    fn parse(args: impl IntoIterator<Item = String>) -> Self {
        let mut parsed = Args::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--exact" => parsed.exact = true,
                "--list" => parsed.list = true,
                "--ignored" => parsed.ignored_only = true,
                "--skip" => parsed.skips.extend(args.next()),
                "--format" => parsed.terse = args.next().as_deref() == Some("terse"),
                "--format=terse" => parsed.terse = true,
                // libtest flags that take a separate value, which must not be
                // mistaken for a filter.
                "--test-threads" | "--color" | "--logfile" | "--shuffle-seed" | "-Z" => {
                    let _ = args.next();
                }
                flag if flag.starts_with('-') => {}
                filter => parsed.filters.push(filter.to_owned()),
            }
        }
        parsed
    }

    fn selects(&self, name: &str) -> bool {
        // No scenario is ignored, so asking for ignored ones selects none.
        if self.ignored_only {
            return false;
        }
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skips.iter().any(matches)
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`, which every process on the machine
/// shares (unlike [`Instant`], whose values cannot be compared across
/// processes). Use it to timestamp critical sections in different workers.
///
/// # Panics
///
/// If the clock cannot be read, which does not happen on Linux.
pub fn monotonic_nanos() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime(CLOCK_MONOTONIC)");
    let secs = u64::try_from(now.tv_sec()).expect("CLOCK_MONOTONIC is before boot");
    let nanos = u64::try_from(now.tv_nsec()).expect("negative nanoseconds from clock_gettime");
    secs * 1_000_000_000 + nanos
}

/// Checks that no two `(start, end)` intervals overlap, e.g. critical
/// sections recorded by different lock holders. Sorts `intervals` by start
/// and reports the first adjacent pair where the next one starts before the
/// previous one ends; touching intervals (`next.start == prev.end`) are fine.
///
/// After sorting by start, any overlap implies an overlap between
/// neighbours, so checking neighbours is enough.
///
/// # Errors
///
/// A message naming the offending pair, or an interval whose end precedes
/// its start.
pub fn check_no_overlap(intervals: &mut [(u64, u64)]) -> Result<(), String> {
    if let Some(&(start, end)) = intervals.iter().find(|(s, e)| e < s) {
        return Err(format!("interval ({start}, {end}) ends before it starts"));
    }
    intervals.sort_unstable();
    for pair in intervals.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if next.0 < prev.1 {
            return Err(format!(
                "intervals overlap: ({}, {}) and ({}, {}) share {} ns",
                prev.0,
                prev.1,
                next.0,
                next.1,
                prev.1.min(next.1) - next.0
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        Args::parse(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn filters_like_libtest() {
        let a = args(&["--nocapture", "--test-threads", "1", "lock"]);
        assert!(a.selects("two_locks"));
        assert!(!a.selects("renewal"));

        let a = args(&["--exact", "lock"]);
        assert!(a.selects("lock"));
        assert!(!a.selects("two_locks"));

        let a = args(&["--skip", "slow"]);
        assert!(a.selects("fast"));
        assert!(!a.selects("slow_one"));

        assert!(args(&[]).selects("anything"));
        assert!(!args(&["--ignored"]).selects("anything"));
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_nanos();
        let b = monotonic_nanos();
        assert!(b >= a);
    }
}
