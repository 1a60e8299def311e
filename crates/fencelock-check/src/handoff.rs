//! What the handoff faults need besides their plan: a release hands the lock to the waiter first
//! in line and tells it on pub/sub, so these faults go after that waiter and its messages. The
//! checker stops a waiter behind a holder that stays long inside ([`VictimWatch`]), keeps a
//! pattern subscription open on the lock's Redis ([`Tap`]); workers hold long sections in a
//! window around the fault, and under pubsub-kill close every pub/sub connection just before
//! each release ([`FaultWindow`]).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use fencelock_testkit::process::monotonic_nanos;
use redis::aio::MultiplexedConnection;

use crate::args::WorkerArgs;
use crate::error::Result;
use crate::event::{nanos, Event, EventLog};
use crate::fault::{Fault, Victim, WaiterHit};

/// The lease of the faults that measure how long the lock sits idle: long enough that a lock
/// idle for a lease (a grant nobody uses, waiting for its expiry) and one idle for a handoff
/// window and a margin ([`IDLE_BOUND`]) are far apart, whatever the machine's load.
pub const HANDOFF_LEASE: Duration = Duration::from_secs(4);

/// The longest the lock may sit idle while a worker able to take it waits, under the faults
/// that stop a waiter: the 200 ms a release offers the lock to the first in line for, and a
/// generous margin. A grant to a waiter that cannot use it keeps the lock idle for its whole
/// lease instead.
pub const IDLE_BOUND: Duration = Duration::from_secs(1);

/// How long a holder stays inside its first section once a waiter fault is due, so that the
/// checker stops a waiter that certainly has its place in line behind it.
pub const HOLD_LONG: Duration = Duration::from_millis(400);

/// How long after such a holder entered the checker stops the waiter: the waiter's first
/// request has long been refused, and the holder is far from its release.
pub const HIT_AFTER: Duration = Duration::from_millis(100);

/// How long a section lasts under pubsub-kill, so that waiters line up this far apart (much
/// more than [`ORDER_MARGIN`](crate::history::ORDER_MARGIN)) and their order is beyond doubt.
pub const PUBSUB_KILL_HOLD: Duration = Duration::from_millis(300);

/// For how long, from its due time, each section a worker holds under pubsub-kill lasts
/// [`PUBSUB_KILL_HOLD`] and ends with the pub/sub connections closed just before the release.
pub const PUBSUB_KILL_WINDOW: Duration = Duration::from_secs(2);

/// How many leases a reply may take, under the faults that delay replies: more than the
/// longest delay they inject, so that a late reply comes back late instead of failing.
pub const SLOW_REPLY_LEASES: u32 = 3;

/// A span of a worker's run, from its fault's due time, in which every section it holds lasts
/// long (so that a holder that should not be one is inside when the rightful one enters, and
/// waiters line up far apart), and, under pubsub-kill, ends with every pub/sub connection on
/// the lock's Redis closed just before the release.
pub struct FaultWindow {
    from: u64,
    until: u64,
    hold: Duration,
    /// A connection to the lock's Redis to close the pub/sub connections with.
    killer: Option<MultiplexedConnection>,
}

impl FaultWindow {
    /// The window of a worker whose fault has one; `None` for any other.
    ///
    /// # Errors
    ///
    /// When the lock's Redis cannot be reached.
    pub async fn open(args: &WorkerArgs) -> Result<Option<FaultWindow>> {
        let Some(from) = args.fault_at_ns else {
            return Ok(None);
        };
        let lease = args.lease();
        let (length, hold) = match args.fault {
            Fault::PubsubKill => (PUBSUB_KILL_WINDOW, PUBSUB_KILL_HOLD),
            Fault::LateReply => (lease * 2, lease * 3 / 5),
            _ => return Ok(None),
        };
        let killer = match (args.fault, args.lock_urls.first()) {
            (Fault::PubsubKill, Some(url)) => Some(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            ),
            _ => None,
        };
        Ok(Some(FaultWindow {
            from,
            until: from + nanos(length),
            hold,
            killer,
        }))
    }

    /// How long a section entered now lasts, if the window is open.
    pub fn hold_now(&self) -> Option<Duration> {
        (self.from..self.until)
            .contains(&monotonic_nanos())
            .then_some(self.hold)
    }

    /// What comes between a long section's exit and its release: under pubsub-kill, the kill,
    /// logged first.
    ///
    /// # Errors
    ///
    /// When the log is closed or the lock's Redis fails.
    pub async fn before_release(&mut self, log: &mut EventLog) -> Result<()> {
        let Some(conn) = self.killer.as_mut() else {
            return Ok(());
        };
        log.emit(&Event::KillPubsub {
            t: monotonic_nanos(),
        })?;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .exec_async(conn)
            .await?;
        Ok(())
    }
}

impl std::fmt::Debug for FaultWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultWindow")
            .field("from", &self.from)
            .field("until", &self.until)
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

/// A `PSUBSCRIBE *` on the lock's Redis, as a monitoring tool or a message tap holds one: every
/// PUBLISH counts it as a receiver. What it receives is read and dropped; it ends with the run.
#[derive(Debug)]
pub struct Tap {
    stream: TcpStream,
}

impl Tap {
    /// Subscribes to every channel of the Redis on `port` of loopback.
    ///
    /// # Errors
    ///
    /// When the Redis cannot be reached.
    pub fn open(port: u16) -> Result<Tap> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.write_all(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$1\r\n*\r\n")?;
        let mut drain = stream.try_clone()?;
        // Read so that the server never counts the tap as a slow consumer; ends when the tap is
        // dropped or the server goes.
        thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while matches!(drain.read(&mut buf), Ok(n) if n > 0) {}
        });
        Ok(Tap { stream })
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// What the checker does next to the victim of a waiter fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Kill, stop or cut off the victim now.
    Hit(usize, WaiterHit),
    /// Resume it, or heal its links.
    Heal(usize, WaiterHit),
    /// Heal its pub/sub link, held cut past its resume.
    Deliver(usize),
}

/// How long after a victim of pubsub-delay resumed its pub/sub link heals: long enough for its
/// first request to be answered, well within a lease.
pub const LATE_DELIVERY: Duration = Duration::from_millis(200);

/// Follows the workers' events to stop the victim of a waiter fault at the moment it bites: the
/// victim waits (it began an acquire and has not entered) behind the planned holder, which
/// entered [`HIT_AFTER`] ago, is still inside, and stays inside [`HOLD_LONG`]: the victim's request has
/// been refused, so it has its place in line, and no release is near.
#[derive(Debug)]
pub struct VictimWatch {
    victim: Victim,
    /// From when the victim may be hit.
    due: Instant,
    asking: Vec<bool>,
    inside: Vec<bool>,
    /// When to hit, and the holder the victim waits behind.
    aim: Option<(Instant, usize)>,
    /// When to heal, once hit.
    heal_at: Option<Instant>,
    /// When to heal a pub/sub link held cut past the resume.
    deliver_at: Option<Instant>,
    hit: bool,
}

impl VictimWatch {
    /// Watches `workers` workers for `victim`, due `start + victim.due`.
    pub fn new(victim: Victim, workers: usize, start: Instant) -> VictimWatch {
        VictimWatch {
            victim,
            due: start + victim.due,
            asking: vec![false; workers],
            inside: vec![false; workers],
            aim: None,
            heal_at: None,
            deliver_at: None,
            hit: false,
        }
    }

    /// The worker the fault is about.
    pub fn victim(&self) -> usize {
        self.victim.worker
    }

    /// Takes in an event of worker `worker`, seen at `now`.
    pub fn saw(&mut self, worker: usize, event: &Event, now: Instant) {
        let (Some(asking), Some(inside)) =
            (self.asking.get_mut(worker), self.inside.get_mut(worker))
        else {
            return;
        };
        match event {
            Event::Ask { .. } => *asking = true,
            Event::Enter { .. } => {
                *asking = false;
                *inside = true;
                if !self.hit
                    && self.aim.is_none()
                    && worker == self.victim.holder
                    && now >= self.due
                {
                    self.aim = Some((now + HIT_AFTER, worker));
                }
            }
            Event::GaveUp { .. } => *asking = false,
            Event::Exit { .. } | Event::Crash { .. } => *inside = false,
            _ => {}
        }
    }

    /// When the next step is due, if one is planned.
    pub fn next_wake(&self) -> Option<Instant> {
        [self.aim.map(|(at, _)| at), self.heal_at, self.deliver_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The step due at `now`, if any. An aim whose holder left or whose victim stopped waiting
    /// is dropped, and the next holder's entry is waited for.
    pub fn step(&mut self, now: Instant) -> Option<Step> {
        let victim = self.victim.worker;
        if let Some((at, holder)) = self.aim.filter(|(at, _)| *at <= now) {
            self.aim = None;
            let holding = self.inside.get(holder).copied().unwrap_or(false);
            let waiting = self.asking.get(victim).copied().unwrap_or(false);
            if holding && waiting && now < at + HOLD_LONG / 2 {
                self.hit = true;
                self.heal_at =
                    (self.victim.hit != WaiterHit::Kill).then(|| now + self.victim.out_for);
                return Some(Step::Hit(victim, self.victim.hit));
            }
        }
        if self.heal_at.is_some_and(|at| at <= now) {
            self.heal_at = None;
            if self.victim.hit == WaiterHit::StopLate {
                self.deliver_at = Some(now + LATE_DELIVERY);
            }
            return Some(Step::Heal(victim, self.victim.hit));
        }
        if self.deliver_at.is_some_and(|at| at <= now) {
            self.deliver_at = None;
            return Some(Step::Deliver(victim));
        }
        None
    }

    /// What is still owed to the victim at the end of the run, if it is still stopped or cut
    /// off: its heal, and its pub/sub link.
    pub fn pending(&mut self) -> Vec<Step> {
        let victim = self.victim.worker;
        let heal = self
            .heal_at
            .take()
            .map(|_| Step::Heal(victim, self.victim.hit));
        let late = heal.is_some() && self.victim.hit == WaiterHit::StopLate;
        let deliver = (self.deliver_at.take().is_some() || late).then_some(Step::Deliver(victim));
        heal.into_iter().chain(deliver).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(start: Instant) -> VictimWatch {
        let victim = Victim {
            worker: 1,
            due: Duration::from_millis(50),
            holder: 2,
            hit: WaiterHit::Stop,
            out_for: Duration::from_secs(6),
        };
        VictimWatch::new(victim, 3, start)
    }

    const ASK: Event = Event::Ask { t: 0 };
    const ENTER: Event = Event::Enter {
        t: 0,
        fence: None,
        shared: false,
        asked: 0,
    };
    const EXIT: Event = Event::Exit { t: 0 };

    #[test]
    fn the_victim_is_stopped_behind_a_holder_that_entered_after_the_due_time_then_resumed() {
        let start = Instant::now();
        let mut watch = watch(start);
        watch.saw(1, &ASK, start);
        // Before the due time: no aim.
        watch.saw(0, &ENTER, start);
        assert_eq!(watch.next_wake(), None);
        watch.saw(0, &EXIT, start);
        let entered = start + Duration::from_millis(60);
        watch.saw(2, &ENTER, entered);
        assert_eq!(watch.next_wake(), Some(entered + HIT_AFTER));
        assert_eq!(watch.step(entered), None);
        let hit_at = entered + HIT_AFTER;
        assert_eq!(watch.step(hit_at), Some(Step::Hit(1, WaiterHit::Stop)));
        let heal_at = hit_at + Duration::from_secs(6);
        assert_eq!(watch.next_wake(), Some(heal_at));
        assert_eq!(watch.step(heal_at), Some(Step::Heal(1, WaiterHit::Stop)));
        assert_eq!(watch.pending(), Vec::new());
    }

    #[test]
    fn a_victim_that_stopped_waiting_or_a_holder_that_left_is_not_hit() {
        let start = Instant::now();
        let mut watch = watch(start);
        let entered = start + Duration::from_millis(60);
        watch.saw(1, &ASK, entered);
        watch.saw(2, &ENTER, entered);
        watch.saw(2, &EXIT, entered);
        assert_eq!(watch.step(entered + HIT_AFTER), None);
        // The next holder: the victim entered meanwhile, so it does not wait.
        watch.saw(0, &ENTER, entered + HIT_AFTER);
        watch.saw(1, &ENTER, entered + HIT_AFTER);
        assert_eq!(watch.step(entered + HIT_AFTER * 2), None);
        assert_eq!(watch.pending(), Vec::new());
    }
}
