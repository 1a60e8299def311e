//! What a worker reports, one JSON object per line on its stdout, flushed as it happens so that
//! a worker killed with SIGKILL has already told everything up to its death.
//!
//! Times are nanoseconds of `CLOCK_MONOTONIC`, which every process on the machine shares, so
//! sections of different workers can be compared.

use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One step of a worker's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The worker holds the lock and enters its critical section, with the grant's fence for
    /// strategies that have one.
    Enter {
        /// When the lock was held.
        t: u64,
        /// The fencing token, for fenced strategies.
        fence: Option<u64>,
    },
    /// The critical section read the protected counter (`value`), or the resource refused the
    /// read because it had seen a higher fence (`None`).
    Read {
        /// When the request was sent.
        sent: u64,
        /// When the reply came.
        done: u64,
        /// The counter, or `None` when the read was refused.
        value: Option<i64>,
    },
    /// The critical section wrote the counter back, and the resource accepted it or not.
    Write {
        /// When the request was sent.
        sent: u64,
        /// When the reply came.
        done: u64,
        /// Whether the resource stored it.
        accepted: bool,
    },
    /// The worker left its critical section; the release follows.
    Exit {
        /// When the last access to the resource was done.
        t: u64,
    },
    /// An acquire attempt ended without the lock: its timeout ran out or the lock's Redis
    /// failed it.
    GaveUp {
        /// When it gave up.
        t: u64,
        /// Why, for the log.
        reason: String,
    },
    /// The worker stops itself (SIGSTOP) now; the checker resumes it later.
    Pause {
        /// When it stopped.
        t: u64,
    },
    /// The critical section now sleeps longer than the lease.
    Slow {
        /// When the sleep began.
        t: u64,
    },
    /// The worker asks to be cut off from the lock's servers now; the checker heals the link
    /// later.
    Cut {
        /// When it asked.
        t: u64,
    },
    /// The worker kills itself (SIGKILL) now, holding the lock.
    Crash {
        /// When it died.
        t: u64,
    },
}

impl Event {
    /// Parses one line a worker printed.
    ///
    /// # Errors
    ///
    /// When the line is not an event.
    pub fn parse(line: &str) -> Result<Event, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// `d` in nanoseconds, the unit of event times and of the monotonic instants workers are given.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Where a worker writes its events: stdout, one line each, flushed at once.
#[derive(Debug, Default)]
pub struct EventLog;

impl EventLog {
    /// Writes `event` as one line and flushes it.
    ///
    /// # Errors
    ///
    /// When stdout is closed: the checker is gone and the worker should stop.
    pub fn emit(&mut self, event: &Event) -> std::io::Result<()> {
        let line = serde_json::to_string(event)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_a_line() {
        let events = [
            Event::Enter {
                t: 1,
                fence: Some(7),
            },
            Event::Read {
                sent: 2,
                done: 3,
                value: None,
            },
            Event::GaveUp {
                t: 4,
                reason: "timeout".into(),
            },
        ];
        for event in events {
            let line = serde_json::to_string(&event).expect("serializes");
            assert!(!line.contains('\n'));
            assert_eq!(Event::parse(&line).expect("parses"), event);
        }
        assert!(Event::parse("{\"ev\":\"nonsense\"}").is_err());
    }
}
