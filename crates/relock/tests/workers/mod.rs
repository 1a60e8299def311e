//! Worker processes for the multi-process tests: spawning copies of the test binary in a
//! role, reading their output line by line, talking to them through stdin, and killing and
//! reaping every one of them on every path.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use relock_testkit::process::worker_command;

/// How long a worker gets to exit once it is done or killed.
pub const REAP_LIMIT: Duration = Duration::from_secs(5);

/// A line a worker printed, or the end of its output.
pub enum Event {
    Line(usize, String),
    Closed(usize),
}

/// Worker processes whose stdout is read line by line on threads, so that no worker blocks on
/// a full pipe. Dropping it kills and reaps every worker still running: a failed assertion must
/// not leave processes behind that hold locks or keep hammering Redis.
pub struct Workers {
    role: String,
    children: Vec<Child>,
    events: mpsc::Receiver<Event>,
}

impl Workers {
    pub fn spawn(role: &str, count: usize, envs: &[(&str, String)]) -> Workers {
        let (sender, events) = mpsc::channel();
        let mut workers = Workers {
            role: role.to_owned(),
            children: Vec::with_capacity(count),
            events,
        };
        for i in 0..count {
            let mut child = worker_command(role, envs)
                .stdin(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot spawn worker {i} ({role}): {e}"));
            let stdout = child.stdout.take().expect("worker stdout is piped");
            // Pushed before anything else can fail, so that Drop reaps it.
            workers.children.push(child);
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(Event::Line(i, line)).is_err() {
                        return;
                    }
                }
                let _ = sender.send(Event::Closed(i));
            });
        }
        workers
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

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

    /// Waits until every worker printed `expected`, in any order; any other output first is a
    /// failure.
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

    /// Fails if a worker has printed anything since the last read.
    pub fn expect_silence(&self) {
        if let Ok(Event::Line(i, line)) = self.events.try_recv() {
            panic!("{} worker {i} printed {line:?}", self.role);
        }
    }

    /// Writes one line to worker `index`'s stdin.
    pub fn send(&mut self, index: usize, line: &str) {
        let stdin = self.children[index]
            .stdin
            .as_mut()
            .expect("worker stdin is piped");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to worker {index}: {e}"));
    }

    pub fn broadcast(&mut self, line: &str) {
        for i in 0..self.children.len() {
            self.send(i, line);
        }
    }

    pub fn kill(&mut self, index: usize) {
        self.children[index]
            .kill()
            .unwrap_or_else(|e| panic!("cannot kill worker {index}: {e}"));
    }

    /// Waits for worker `index` to exit, polling until `deadline`.
    pub fn reap(&mut self, index: usize, deadline: Instant) -> ExitStatus {
        let child = &mut self.children[index];
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => panic!("{} worker {index} still runs at its deadline", self.role),
                Err(e) => panic!("cannot wait for {} worker {index}: {e}", self.role),
            }
        }
    }

    /// Reaps every worker and fails unless each exited successfully.
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
}

impl Drop for Workers {
    fn drop(&mut self) {
        // No panics here: this also runs while a failed assertion unwinds.
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(Some(_))) {
                continue;
            }
            let _ = child.kill();
            let deadline = Instant::now() + REAP_LIMIT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// A multi-threaded runtime for a worker or the orchestrator.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker started without {name}"))
}

pub fn env_count(name: &str) -> usize {
    let value = env_var(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value:?} is not a count"))
}

/// Prints one line to the orchestrator, at once.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .expect("write to the orchestrator");
}

/// Reads one line from the orchestrator and checks it is `expected`.
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
