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
        /// Whether the hold is shared (a reader's): shared holds may overlap each other.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        shared: bool,
        /// When the acquire that got the lock began: the grant came between then and `t`.
        #[serde(default)]
        asked: u64,
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
    /// The worker begins an acquire: it waits for the lock from now until it enters or gives up.
    Ask {
        /// When the acquire began.
        t: u64,
    },
    /// The holder had the lock's Redis close every pub/sub connection (`CLIENT KILL TYPE
    /// pubsub`), and releases next.
    KillPubsub {
        /// When the kill was sent.
        t: u64,
    },
    /// Right after the worker entered, the lock's Redis showed its name held under another
    /// fence, or not held: the worker holds a grant that Redis never wrote, or no longer has.
    Unheld {
        /// When the worker read the lock back.
        t: u64,
    },
    /// Written by the checker, not the worker: the worker can take no part from now on (it was
    /// killed, stopped, or cut off from the lock's servers while it waited).
    Out {
        /// When the checker did it.
        t: u64,
    },
    /// Written by the checker: the worker stopped by [`Event::Out`] was resumed, or its links
    /// healed.
    Back {
        /// When the checker did it.
        t: u64,
    },
}

/// An event on one of a worker's lanes, as a line carries it.
#[derive(Serialize, Deserialize)]
struct LaneEvent<'a> {
    /// The lane (the lock's name) the event is about; 0 when a worker has one.
    #[serde(default)]
    lane: usize,
    #[serde(flatten)]
    event: std::borrow::Cow<'a, Event>,
}

impl Event {
    /// Parses one line a worker printed: the lane it is about, and the event.
    ///
    /// # Errors
    ///
    /// When the line is not an event.
    pub fn parse(line: &str) -> Result<(usize, Event), serde_json::Error> {
        let parsed: LaneEvent<'_> = serde_json::from_str(line)?;
        Ok((parsed.lane, parsed.event.into_owned()))
    }
}

/// `d` in nanoseconds, the unit of event times and of the monotonic instants workers are given.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Where a worker writes the events of one of its lanes: stdout, one line each, flushed at
/// once.
#[derive(Debug, Default)]
pub struct EventLog {
    lane: usize,
}

impl EventLog {
    /// The log of lane `lane`.
    pub fn for_lane(lane: usize) -> EventLog {
        EventLog { lane }
    }

    /// Writes `event` as one line, tagged with the lane, and flushes it.
    ///
    /// # Errors
    ///
    /// When stdout is closed: the checker is gone and the worker should stop.
    pub fn emit(&mut self, event: &Event) -> std::io::Result<()> {
        let line = serde_json::to_string(&LaneEvent {
            lane: self.lane,
            event: std::borrow::Cow::Borrowed(event),
        })?;
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
                shared: true,
                asked: 0,
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
        for (lane, event) in events.into_iter().enumerate() {
            let line = serde_json::to_string(&LaneEvent {
                lane,
                event: std::borrow::Cow::Borrowed(&event),
            })
            .expect("serializes");
            assert!(!line.contains('\n'));
            assert_eq!(Event::parse(&line).expect("parses"), (lane, event));
        }
        assert!(Event::parse("{\"ev\":\"nonsense\"}").is_err());
    }
}
