//! Helpers for integration tests that span several OS processes.
//!
//! A test target declared with `harness = false` acts both as orchestrator
//! and as worker: `main` first asks [`worker_role`] whether it was started as
//! a worker, and otherwise runs its scenarios with [`run_scenarios`].
//!
//! The orchestrator starts copies of itself with [`Workers::spawn`] and talks
//! to them in lines: it reads what each prints on stdout ([`Workers::next_event`],
//! [`Workers::expect_from_all`], [`Workers::collect_until`]) and writes to their
//! stdin ([`Workers::send`], [`Workers::broadcast`]); [`Workers::start_together`]
//! and [`start_barrier`] make a start barrier of the two. A worker answers with
//! [`say`], [`say_all`] and [`hear`], and reads its configuration with
//! [`env_var`], [`env_parse`] and [`worker_index`]. Every wait takes a
//! deadline, and dropping [`Workers`] kills and reaps every worker still
//! running, so a failed assertion leaves no process behind.
//!
//! Workers can stamp critical sections with [`monotonic_nanos`], which is
//! comparable across processes, and the orchestrator checks the collected
//! intervals with [`check_no_overlap`].
//!
//! A test that builds programs to run (the examples, say) starts `cargo` with [`cargo`].
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//!
//! use fencelock_testkit::check_no_overlap;
//! use fencelock_testkit::process::{
//!     env_parse, monotonic_nanos, run_scenarios, say, say_all, start_barrier, worker_role,
//!     Workers, DONE,
//! };
//!
//! /// Worker: waits for the start, then reports `ROUNDS` critical sections.
//! fn contender() {
//!     let rounds: usize = env_parse("ROUNDS");
//!     start_barrier();
//!     // Take the lock around each section here.
//!     let sections = (0..rounds).map(|_| {
//!         let enter = monotonic_nanos();
//!         let exit = monotonic_nanos();
//!         format!("{enter} {exit}")
//!     });
//!     say_all(sections);
//!     say(DONE);
//! }
//!
//! fn contenders() {
//!     let mut workers = Workers::spawn("contender", 3, &[("ROUNDS", "10".to_owned())]);
//!     workers.start_together(Instant::now() + Duration::from_secs(30));
//!     let deadline = Instant::now() + Duration::from_secs(60);
//!     let mut intervals = Vec::new();
//!     workers.collect_until(DONE, deadline, |_worker, line| {
//!         let (enter, exit) = line.split_once(' ').expect("ENTER EXIT");
//!         let parse = |n: &str| n.parse::<u64>().expect("nanoseconds");
//!         intervals.push((parse(enter), parse(exit)));
//!     });
//!     workers.reap_all_successful(deadline);
//!     assert_eq!(intervals.len(), 30);
//!     check_no_overlap(&mut intervals).expect("one holder at a time");
//! }
//!
//! fn main() {
//!     if let Some(role) = worker_role() {
//!         match role.as_str() {
//!             "contender" => contender(),
//!             other => panic!("unknown worker role {other}"),
//!         }
//!         return;
//!     }
//!     run_scenarios(&[("contenders", contenders)]);
//! }
//! ```

use std::env;
use std::fmt::Display;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::process::ExitStatusExt;
use std::panic;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::time::{clock_gettime, ClockId};

/// Environment variable telling a spawned test binary which role to play.
pub const WORKER_ENV: &str = "FENCELOCK_TESTKIT_WORKER";

/// Environment variable carrying a worker's index among the [`Workers`]
/// spawned with it; read it with [`worker_index`].
pub const WORKER_INDEX_ENV: &str = "FENCELOCK_TESTKIT_WORKER_INDEX";

/// What a worker prints once it is set up and waits at the start barrier
/// ([`start_barrier`]).
pub const READY: &str = "READY";

/// What the orchestrator sends to let workers past the start barrier
/// ([`Workers::start_together`]).
pub const GO: &str = "GO";

/// What a worker prints after its last report: the usual `last` line of
/// [`Workers::collect_until`].
pub const DONE: &str = "DONE";

/// How long dropping [`Workers`] waits for the killed workers to exit.
const DROP_REAP_LIMIT: Duration = Duration::from_secs(5);
/// How often a wait for a worker's exit looks again.
const REAP_POLL: Duration = Duration::from_millis(5);

/// A `cargo` command to start from a test or a task that cargo runs: the `cargo` that runs this
/// process (`CARGO`, else the one on the path), without the variables cargo sets for the
/// program it runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, …).
///
/// Build scripts that read those variables are rebuilt whenever their values change, and so
/// is everything built on them (ring's build script reads `CARGO_MANIFEST_DIR` and
/// `CARGO_PKG_*`, and most of the workspace depends on ring): a build started with them set
/// would rebuild that much, and so would the next build started from a shell.
///
/// # Examples
///
/// ```no_run
/// let status = fencelock_testkit::process::cargo()
///     .args(["build", "--quiet", "--examples"])
///     .status()
///     .expect("cargo runs");
/// assert!(status.success());
/// ```
pub fn cargo() -> Command {
    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if SET_FOR_A_RUNNING_PROGRAM.contains(&name) || name.starts_with("CARGO_PKG_") {
            cargo.env_remove(name);
        }
    }
    cargo
}

/// What cargo sets for a program it runs besides `CARGO_PKG_*` (`CARGO` itself it sets for
/// every build script anyway).
const SET_FOR_A_RUNNING_PROGRAM: [&str; 8] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// If this process was started as a worker by [`spawn_worker`] or
/// [`Workers::spawn`], returns `Some(role)` (the string passed there), else
/// `None`.
pub fn worker_role() -> Option<String> {
    env::var(WORKER_ENV).ok()
}

/// Spawns the current executable as a worker playing `role`, with the extra
/// environment variables `envs`. Its stdout is piped (read results from it),
/// stderr is inherited (panics show up in the test output), stdin is null.
///
/// For workers that take part in a protocol of lines, use [`Workers`]; use
/// [`worker_command`] to pass arguments or change stdio.
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

// ---------------------------------------------------------------------------------------------
// Orchestrator side
// ---------------------------------------------------------------------------------------------

/// What the orchestrator reads from its workers' stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Worker `.0` printed the line `.1` (without its line ending).
    Line(usize, String),
    /// Worker `.0` closed its stdout, which it does by exiting.
    Closed(usize),
}

/// Worker processes of the current executable, all in one role, spoken to in
/// lines: their stdin is piped for [`send`](Self::send) and
/// [`broadcast`](Self::broadcast), and their stdout is read line by line on
/// one thread per worker, so that no worker ever blocks on a full pipe.
/// Stderr is inherited, so a worker's panic shows in the test output.
///
/// Workers are numbered from 0 in the order they were spawned; each finds its
/// number with [`worker_index`].
///
/// Every method that waits takes a deadline and panics when it passes, so a
/// hung worker fails its scenario instead of stalling the test binary.
/// Dropping the value kills (`SIGKILL`) and reaps every worker still
/// running, also while a failed assertion unwinds: no process is left behind
/// to hold locks or keep hammering Redis.
#[derive(Debug)]
#[must_use = "dropping Workers kills every worker"]
pub struct Workers {
    role: String,
    children: Vec<Child>,
    events: Receiver<Event>,
}

impl Workers {
    /// Spawns `count` copies of the current executable playing `role`, each
    /// with the environment variables `envs` and its own
    /// [`WORKER_INDEX_ENV`].
    ///
    /// # Panics
    ///
    /// If a worker cannot be spawned; the ones spawned before it are killed
    /// and reaped.
    pub fn spawn(role: &str, count: usize, envs: &[(&str, String)]) -> Workers {
        let commands = (0..count).map(|i| {
            let mut command = worker_command(role, envs);
            command.env(WORKER_INDEX_ENV, i.to_string());
            command
        });
        Workers::spawn_commands(role, commands)
    }

    /// Spawns each of `commands` as a worker, numbered in order: other programs than the
    /// current executable (an example binary, a command-line tool) spoken to in lines in the
    /// same way. Their stdin and stdout are piped; stderr is left as each command has it.
    ///
    /// # Panics
    ///
    /// If a command cannot be spawned; the ones spawned before it are killed and reaped.
    pub fn spawn_commands(role: &str, commands: impl IntoIterator<Item = Command>) -> Workers {
        let (sender, events) = mpsc::channel();
        let mut workers = Workers {
            role: role.to_owned(),
            children: Vec::new(),
            events,
        };
        for (i, mut command) in commands.into_iter().enumerate() {
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot spawn {role} worker {i} ({command:?}): {e}"));
            let stdout = child.stdout.take().expect("worker stdout is piped");
            // Owned by `workers` before anything else can fail, so that Drop reaps it.
            workers.children.push(child);
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(Event::Line(i, line)).is_err() {
                        // The orchestrator is gone; nobody reads any more.
                        return;
                    }
                }
                let _ = sender.send(Event::Closed(i));
            });
        }
        workers
    }

    /// The process id of worker `index`, e.g. to signal it.
    ///
    /// # Panics
    ///
    /// If there is no worker `index`.
    pub fn pid(&self, index: usize) -> u32 {
        self.child(index).id()
    }

    /// The next line any worker printed, or the next closed output, in the
    /// order they came.
    ///
    /// # Panics
    ///
    /// If nothing comes before `deadline`, or every worker's output is
    /// already closed and read.
    pub fn next_event(&self, deadline: Instant) -> Event {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} workers: no output before the deadline", self.role)
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{} workers: every output pipe closed", self.role)
            }
        }
    }

    /// Waits until every worker printed `expected`, in any order: the start
    /// barrier (`READY`) or any other step all workers reach.
    ///
    /// # Panics
    ///
    /// If a worker prints anything else first, prints `expected` twice,
    /// closes its output, or `deadline` passes.
    pub fn expect_from_all(&self, expected: &str, deadline: Instant) {
        let mut pending = vec![true; self.children.len()];
        while pending.contains(&true) {
            match self.next_event(deadline) {
                Event::Line(i, line) if line == expected && pending[i] => pending[i] = false,
                Event::Line(i, line) => panic!(
                    "{} worker {i} printed {line:?} while waiting for {expected:?}",
                    self.role
                ),
                Event::Closed(i) => panic!(
                    "{} worker {i} closed its output before {expected:?}",
                    self.role
                ),
            }
        }
    }

    /// The start barrier, orchestrator side: waits until every worker printed
    /// [`READY`] (see [`start_barrier`]), then sends them all [`GO`]. Workers
    /// set up at their own pace (process start, connections), and none starts
    /// its workload before all are ready, so the first ones do not run
    /// uncontended.
    ///
    /// # Panics
    ///
    /// As [`expect_from_all`](Self::expect_from_all) and
    /// [`broadcast`](Self::broadcast) do.
    pub fn start_together(&mut self, deadline: Instant) {
        self.expect_from_all(READY, deadline);
        self.broadcast(GO);
    }

    /// Reads every worker's output to its end, handing each line to
    /// `on_line(worker, line)`, until each worker printed `last` and then
    /// closed its output: the way to collect what workers report before they
    /// exit. `last` itself is not handed on.
    ///
    /// Reap the workers afterwards, e.g. with
    /// [`reap_all_successful`](Self::reap_all_successful), to check how they
    /// exited.
    ///
    /// # Panics
    ///
    /// If a worker closes its output without printing `last`, prints anything
    /// after it, or `deadline` passes.
    pub fn collect_until(
        &self,
        last: &str,
        deadline: Instant,
        mut on_line: impl FnMut(usize, String),
    ) {
        let mut finished = vec![false; self.children.len()];
        let mut open = self.children.len();
        while open > 0 {
            match self.next_event(deadline) {
                Event::Line(i, line) if finished[i] => {
                    panic!("{} worker {i} printed {line:?} after {last:?}", self.role)
                }
                Event::Line(i, line) if line == last => finished[i] = true,
                Event::Line(i, line) => on_line(i, line),
                Event::Closed(i) if finished[i] => open -= 1,
                Event::Closed(i) => {
                    panic!("{} worker {i} closed its output before {last:?}", self.role)
                }
            }
        }
    }

    /// Reads what the workers printed since the last read, without waiting,
    /// and fails if a line starts with `refused` (such as a holder reporting
    /// its lock `LOST`). Other lines are dropped.
    ///
    /// # Panics
    ///
    /// On a line starting with `refused`, and on a worker that closed its
    /// output: it was expected to be alive, or its closing would go unread by
    /// later waits.
    pub fn refuse_line(&self, refused: &str) {
        loop {
            match self.events.try_recv() {
                Ok(Event::Line(i, line)) => assert!(
                    !line.starts_with(refused),
                    "{} worker {i} printed {line:?}",
                    self.role
                ),
                Ok(Event::Closed(i)) => {
                    panic!("{} worker {i} closed its output", self.role)
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
    }

    /// Writes `line` and a line ending to worker `index`'s stdin.
    ///
    /// # Panics
    ///
    /// If there is no worker `index` or the write fails (the worker is gone).
    pub fn send(&mut self, index: usize, line: &str) {
        let (role, child) = self.role_and_child(index);
        let stdin = child.stdin.as_mut().expect("worker stdin is piped");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to {role} worker {index}: {e}"));
    }

    /// Writes `line` to every worker's stdin, in order: the start signal
    /// (`GO`) after [`expect_from_all`](Self::expect_from_all), or a stop.
    ///
    /// # Panics
    ///
    /// If a write fails.
    pub fn broadcast(&mut self, line: &str) {
        for i in 0..self.children.len() {
            self.send(i, line);
        }
    }

    /// Kills worker `index` with `SIGKILL`, without waiting for it to exit:
    /// [`reap`](Self::reap) it to get its status.
    ///
    /// # Panics
    ///
    /// If there is no worker `index` or the signal cannot be sent.
    pub fn kill(&mut self, index: usize) {
        let (role, child) = self.role_and_child(index);
        child
            .kill()
            .unwrap_or_else(|e| panic!("cannot kill {role} worker {index}: {e}"));
    }

    /// Freezes worker `index` with `SIGSTOP`, as a long GC pause or a
    /// suspended VM would: its timers and connections stand still until
    /// [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// If there is no worker `index`, it was already reaped, or the signal cannot be sent.
    pub fn pause(&mut self, index: usize) {
        self.signal(index, Signal::SIGSTOP);
    }

    /// Undoes [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If there is no worker `index`, it was already reaped, or the signal cannot be sent.
    pub fn resume(&mut self, index: usize) {
        self.signal(index, Signal::SIGCONT);
    }

    /// Sends worker `index` `SIGTERM`, as a service manager or Kubernetes does to stop a
    /// process, without waiting for it to exit: [`reap`](Self::reap) it to get its status.
    ///
    /// # Panics
    ///
    /// If there is no worker `index`, it was already reaped, or the signal cannot be sent.
    pub fn terminate(&mut self, index: usize) {
        self.signal(index, Signal::SIGTERM);
    }

    fn signal(&mut self, index: usize, sig: Signal) {
        let (role, child) = self.role_and_child(index);
        // A reaped child's pid may belong to another process by now.
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "{role} worker {index} has already exited"
        );
        signal::kill(crate::server::pid_of(child), sig)
            .unwrap_or_else(|e| panic!("cannot send {sig:?} to {role} worker {index}: {e}"));
    }

    /// Waits for worker `index` to exit, looking every few milliseconds
    /// until `deadline`, and returns how it exited.
    ///
    /// # Panics
    ///
    /// If the worker still runs at `deadline` (it is killed when the
    /// `Workers` are dropped), or its status cannot be read.
    pub fn reap(&mut self, index: usize, deadline: Instant) -> ExitStatus {
        let (role, child) = self.role_and_child(index);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => thread::sleep(REAP_POLL),
                Ok(None) => panic!("{role} worker {index} still runs at its deadline"),
                Err(e) => panic!("cannot wait for {role} worker {index}: {e}"),
            }
        }
    }

    /// Reaps worker `index`, which [`kill`](Self::kill) ended, and fails
    /// unless `SIGKILL` is what ended it.
    ///
    /// # Panics
    ///
    /// If the worker exited in another way or still runs at `deadline`.
    pub fn reap_killed(&mut self, index: usize, deadline: Instant) {
        let status = self.reap(index, deadline);
        assert_eq!(
            status.signal(),
            Some(Signal::SIGKILL as i32),
            "{} worker {index} did not die of SIGKILL: {status}",
            self.role
        );
    }

    /// Reaps every worker, in order, and fails unless each exited
    /// successfully.
    ///
    /// # Panics
    ///
    /// If a worker exited unsuccessfully or still runs at `deadline`.
    pub fn reap_all_successful(&mut self, deadline: Instant) {
        for i in 0..self.children.len() {
            let status = self.reap(i, deadline);
            assert!(
                status.success(),
                "{} worker {i} failed: {status}",
                self.role
            );
        }
    }

    fn child(&self, index: usize) -> &Child {
        self.children
            .get(index)
            .unwrap_or_else(|| panic!("no {} worker {index}", self.role))
    }

    /// Worker `index` and the role, borrowed apart so that panic messages can name the role.
    fn role_and_child(&mut self, index: usize) -> (&str, &mut Child) {
        let role = self.role.as_str();
        let child = self
            .children
            .get_mut(index)
            .unwrap_or_else(|| panic!("no {role} worker {index}"));
        (role, child)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // No panics here: this also runs while a failed assertion unwinds, and a second panic
        // would abort the test binary.
        for child in &mut self.children {
            // `Child::kill` never signals a child already reaped, so a recycled pid is safe.
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
        }
        // Killed all at once above, so one bound covers them all.
        let deadline = Instant::now() + DROP_REAP_LIMIT;
        for child in &mut self.children {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(REAP_POLL);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Worker side
// ---------------------------------------------------------------------------------------------

/// This worker's number among the [`Workers`] spawned with it, from 0.
///
/// # Panics
///
/// If the process was not started by [`Workers::spawn`].
pub fn worker_index() -> usize {
    env_parse(WORKER_INDEX_ENV)
}

/// The environment variable `name`, which the orchestrator set.
///
/// # Panics
///
/// If it is not set or not Unicode.
pub fn env_var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| panic!("worker started without {name}"))
}

/// The environment variable `name`, parsed: a count, a duration in
/// milliseconds, a port.
///
/// # Panics
///
/// If it is not set or does not parse as a `T`.
pub fn env_parse<T: FromStr>(name: &str) -> T {
    let value = env_var(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value:?} is not a {}", std::any::type_name::<T>()))
}

/// Prints one line to the orchestrator and flushes it at once, so that it
/// arrives while the worker goes on.
///
/// # Panics
///
/// If stdout is closed.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .expect("write to the orchestrator");
}

/// Prints many lines to the orchestrator in one buffered write, flushed at
/// the end: for the results a worker reports after its workload, when
/// printing them one by one would slow it down.
///
/// # Panics
///
/// If stdout is closed.
pub fn say_all(lines: impl IntoIterator<Item = impl Display>) {
    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in lines {
        writeln!(out, "{line}").expect("write to the orchestrator");
    }
    out.flush().expect("write to the orchestrator");
}

/// The start barrier, worker side: prints [`READY`], then blocks until the
/// orchestrator sends [`GO`] (see [`Workers::start_together`]).
///
/// # Panics
///
/// As [`say`] and [`hear`] do.
pub fn start_barrier() {
    say(READY);
    hear(GO);
}

/// Reads one line from the orchestrator, blocking until it comes, and checks
/// that it is `expected`, such as the start signal `GO`.
///
/// The wait is bounded by the orchestrator: it sends the line, or its
/// [`Workers`] are dropped and kill this worker, or it exits and this read
/// sees the end of stdin.
///
/// # Panics
///
/// If another line comes, or stdin ends first.
pub fn hear(expected: &str) {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("read from the orchestrator");
    assert_eq!(
        line.trim(),
        expected,
        "the orchestrator went away before {expected}"
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios, clock and overlap
// ---------------------------------------------------------------------------------------------

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
