//! What a run shows while it runs: a bar per scenario naming the step under way, the operations
//! done so far and the time left, and one line per scenario as it finishes, so that a run cut
//! short still says what it measured. When stderr is not a terminal, one plain line per step.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinHandle;

/// How often the bar moves while a step runs.
const TICK: Duration = Duration::from_millis(200);

/// Where a scenario stands.
#[derive(Debug)]
struct State {
    /// The step under way.
    step: String,
    /// Steps begun, the current one included.
    steps: u64,
    /// Operations of the steps done.
    operations: u64,
    /// Measured time of the steps done, in ms.
    done_ms: u64,
    /// When the current step began, and its measured time.
    step_started: Instant,
    step_ms: u64,
}

impl State {
    /// Measured time so far: the steps done and the current one up to its length.
    fn position(&self) -> u64 {
        let current = u64::try_from(self.step_started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.done_ms.saturating_add(current.min(self.step_ms))
    }

    fn message(&self) -> String {
        format!("{}, {} ops", self.step, self.operations)
    }
}

/// The progress of one scenario: started with its expected measured time, moved on by each
/// step, ended by [`Progress::finish`].
#[derive(Debug)]
pub struct Progress {
    scenario: String,
    started: Instant,
    total_ms: u64,
    state: Arc<StdMutex<State>>,
    /// The bar and the task that moves it, on a terminal only.
    bar: Option<(ProgressBar, JoinHandle<()>)>,
}

impl Progress {
    /// Starts the progress of `scenario`, whose steps measure for `expected` in all (the time
    /// left is computed from it, and from the pace so far).
    pub fn new(scenario: &str, expected: Duration) -> Progress {
        let total_ms = u64::try_from(expected.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let state = Arc::new(StdMutex::new(State {
            step: "starting".to_owned(),
            steps: 0,
            operations: 0,
            done_ms: 0,
            step_started: Instant::now(),
            step_ms: 0,
        }));
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| start_bar(scenario, total_ms, Arc::clone(&state)));
        Progress {
            scenario: scenario.to_owned(),
            started: Instant::now(),
            total_ms,
            state,
            bar,
        }
    }

    /// Begins a step that measures for `window`: the previous step counts as done.
    pub fn step(&self, what: &str, window: Duration) {
        let line = self.update(|state| {
            state.done_ms = state.done_ms.saturating_add(state.step_ms);
            state.steps += 1;
            state.step = what.to_owned();
            state.step_started = Instant::now();
            state.step_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        });
        if self.bar.is_none() {
            if let Some(line) = line {
                eprintln!("{line}");
            }
        }
    }

    /// Counts operations done by the steps.
    pub fn add_operations(&self, operations: u64) {
        self.update(|state| state.operations += operations);
    }

    /// Applies `change` and redraws; returns the plain line of the new state.
    fn update(&self, change: impl FnOnce(&mut State)) -> Option<String> {
        let mut state = self.state.lock().ok()?;
        change(&mut state);
        if let Some((bar, _)) = &self.bar {
            bar.set_message(state.message());
            bar.set_position(state.position());
        }
        Some(format!(
            "[{} step {}] {}, {}",
            self.scenario,
            state.steps,
            state.message(),
            self.time_left(state.position())
        ))
    }

    /// The time left at this pace: wall time so far over measured time so far.
    fn time_left(&self, position: u64) -> String {
        if position == 0 {
            return format!("about {} s of measuring", self.total_ms / 1000);
        }
        // Wall time per measured time: set-up and installs between the windows count too.
        let pace = self.started.elapsed().as_millis() as f64 / position as f64;
        let left_ms = self.total_ms.saturating_sub(position) as f64 * pace;
        format!("about {:.0} s left", left_ms / 1000.0)
    }

    /// Ends the bar and prints the scenario's one-line summary with its duration.
    pub fn finish(self, summary: &str) {
        if let Some((bar, ticker)) = &self.bar {
            ticker.abort();
            bar.finish_and_clear();
        }
        eprintln!(
            "{} done in {:.0} s: {summary}",
            self.scenario,
            self.started.elapsed().as_secs_f64()
        );
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // A scenario that fails leaves no bar behind its error.
        if let Some((bar, ticker)) = &self.bar {
            ticker.abort();
            bar.finish_and_clear();
        }
    }
}

/// The bar of `scenario`, and a task that moves it through each step's window.
fn start_bar(
    scenario: &str,
    total_ms: u64,
    state: Arc<StdMutex<State>>,
) -> (ProgressBar, JoinHandle<()>) {
    let bar = ProgressBar::new(total_ms);
    bar.set_style(
        ProgressStyle::with_template("{prefix} {bar:30} {elapsed_precise} (eta {eta}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(scenario.to_owned());
    let moved = bar.clone();
    let ticker = tokio::spawn(async move {
        loop {
            if let Ok(state) = state.lock() {
                moved.set_position(state.position());
                moved.set_message(state.message());
            }
            tokio::time::sleep(TICK).await;
        }
    });
    (bar, ticker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_counts_fully_once_the_next_begins() {
        let mut state = State {
            step: "a".to_owned(),
            steps: 1,
            operations: 7,
            done_ms: 1_000,
            step_started: Instant::now(),
            step_ms: 60_000,
        };
        // The current step counts only as far as it went.
        assert!(state.position() < 2_000);
        if let Some(earlier) = Instant::now().checked_sub(Duration::from_secs(120)) {
            state.step_started = earlier;
            assert_eq!(state.position(), 61_000);
        }
        assert_eq!(state.message(), "a, 7 ops");
    }
}
