//! Scenario 9, a stuck waiter: what the next waiter pays when the waiter first in line cannot
//! claim the lock a release offers it. A holder, a first waiter and a second waiter are
//! separate processes, each a `fencelock` client of one [`Mutex`](fencelock::Mutex) or
//! [`FairMutex`](fencelock::FairMutex) with a renewed lease: the bench itself, run again with
//! the hidden `lease-holder` subcommand. The first waiter is made stuck, then the holder is
//! terminated (SIGTERM: it unlocks), and the time from its release to the second waiter
//! holding is measured. Three ways a first waiter is stuck:
//!
//! - frozen (SIGSTOP): its connections stay open, so its channel still counts a listener;
//! - killed (SIGKILL) while a pattern subscriber (`PSUBSCRIBE *`, as `redis-cli`, RedisInsight or
//!   a message tap would) makes every channel count one;
//! - killed, its connections closed: a Mutex's release skips it, a FairMutex's offers it its
//!   turn all the same.
//!
//! Before offers, the second waiter waited for the stuck one's whole lease in the first two
//! cases; with offers, for the handoff window. These are times the window decides, not speeds.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::report::{Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::takeover::{stamp, Holder};
use crate::Settings;

/// The lease every process asks for: what the second waiter would wait for if the stuck one
/// kept the lock for its lease.
pub const LEASE: Duration = Duration::from_secs(30);

/// How long the first waiter is given to subscribe and try again before the second comes, and
/// the second before the first is made stuck.
const SETTLE: Duration = Duration::from_millis(300);

/// How long the bench waits between making the first waiter stuck and the release: longer than
/// a wake fallback (1 s), so that the live waiter has renewed its place after the stuck one's
/// last renewal, and the stuck one is first in a Mutex's order too.
const STUCK_FOR: Duration = Duration::from_millis(1500);

/// Which lock the processes take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A `Mutex`.
    Mutex,
    /// A `FairMutex`.
    Fair,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "Mutex",
            Kind::Fair => "FairMutex",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Kind::Mutex => &[],
            Kind::Fair => &["--fair"],
        }
    }
}

/// How the first waiter is stuck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// Frozen with SIGSTOP.
    Frozen,
    /// Killed with SIGKILL, behind a pattern subscriber.
    KilledBehindATap,
    /// Killed with SIGKILL.
    Killed,
}

impl How {
    fn label(self) -> &'static str {
        match self {
            How::Frozen => "frozen (SIGSTOP)",
            How::KilledBehindATap => "killed, behind PSUBSCRIBE *",
            How::Killed => "killed, connections closed",
        }
    }
}

/// The second waiter's waits behind one kind of stuck first waiter.
#[derive(Clone, Debug, Serialize)]
pub struct Stuck {
    /// The lock.
    pub kind: Kind,
    /// How the first waiter was stuck.
    pub how: How,
    /// Each round's time from the holder's release to the second waiter holding, ms.
    pub rounds_ms: Vec<f64>,
    /// The shortest round, ms.
    pub min_ms: f64,
    /// The median round, ms.
    pub median_ms: f64,
    /// The longest round, ms.
    pub max_ms: f64,
}

/// Scenario 9's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct StuckResults {
    /// The lease of every process, ms.
    pub lease_ms: u64,
    /// The handoff window of every client (the default), ms.
    pub window_ms: u64,
    /// Rounds of each measurement.
    pub rounds: u32,
    /// The waits, by kind and by how the first waiter was stuck.
    pub stuck: Vec<Stuck>,
}

/// Measures every kind and way of being stuck, `settings.takeover_rounds` rounds each.
///
/// # Errors
///
/// A failure of Redis or of a lock process, or a second waiter that does not hold the lock
/// within twice the lease.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<StuckResults> {
    let server = Server::start()?;
    let url = server.url();
    let program = settings.program.display().to_string();
    let mut stuck = Vec::new();
    for kind in [Kind::Mutex, Kind::Fair] {
        for how in [How::Frozen, How::KilledBehindATap, How::Killed] {
            let mut rounds_ms = Vec::new();
            for round in 0..settings.takeover_rounds {
                progress.step(
                    &format!(
                        "{}, first waiter {}, round {}",
                        kind.label(),
                        how.label(),
                        round + 1
                    ),
                    STUCK_FOR + SETTLE * 2,
                );
                let name = format!("stuck-{kind:?}-{how:?}-{round}");
                rounds_ms.push(behind_a_stuck_waiter(&program, &url, &name, kind, how).await?);
                progress.add_operations(1);
            }
            stuck.push(summarize(kind, how, rounds_ms));
        }
    }
    Ok(StuckResults {
        lease_ms: millis(LEASE),
        window_ms: millis(fencelock::DEFAULT_HANDOFF_WINDOW),
        rounds: settings.takeover_rounds,
        stuck,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn summarize(kind: Kind, how: How, rounds_ms: Vec<f64>) -> Stuck {
    let mut sorted = rounds_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    Stuck {
        kind,
        how,
        min_ms: sorted.first().copied().unwrap_or(0.0),
        median_ms: median,
        max_ms: sorted.last().copied().unwrap_or(0.0),
        rounds_ms,
    }
}

/// One round: a holder, a first waiter made stuck, a second waiter; the time from the holder's
/// release to the second waiter holding, ms.
async fn behind_a_stuck_waiter(
    program: &str,
    url: &str,
    name: &str,
    kind: Kind,
    how: How,
) -> Result<f64> {
    let bound = LEASE * 2;
    let mut holder = Holder::spawn_with(program, url, name, LEASE, kind.args())?;
    holder.hold(bound).await?;
    let mut first = Holder::spawn_with(program, url, name, LEASE, kind.args())?;
    first.send("lock").await?;
    first.expect(&["waiting"], bound).await?;
    tokio::time::sleep(SETTLE).await;
    let mut second = Holder::spawn_with(program, url, name, LEASE, kind.args())?;
    second.send("lock").await?;
    second.expect(&["waiting"], bound).await?;
    tokio::time::sleep(SETTLE).await;
    let _tap = match how {
        How::KilledBehindATap => Some(tap(url).await?),
        How::Frozen | How::Killed => None,
    };
    match how {
        How::Frozen => first.signal(Signal::SIGSTOP)?,
        How::KilledBehindATap | How::Killed => first.signal(Signal::SIGKILL)?,
    };
    tokio::time::sleep(STUCK_FOR).await;
    holder.signal(Signal::SIGTERM)?;
    let released_at = stamp(&holder.expect(&["released"], bound).await?);
    let held_at = stamp(&second.expect(&["holding"], bound).await?);
    if how == How::Frozen {
        // Dropped, it is killed: a frozen process takes SIGKILL as any other.
        first.signal(Signal::SIGKILL)?;
    }
    Ok(Duration::from_nanos(held_at.saturating_sub(released_at)).as_secs_f64() * 1000.0)
}

/// A pattern subscriber to every channel of the server at `url`, kept for as long as it lives.
async fn tap(url: &str) -> Result<redis::aio::PubSub> {
    let client = redis::Client::open(url).map_err(Error::Redis)?;
    let mut pubsub = client.get_async_pubsub().await.map_err(Error::Redis)?;
    pubsub.psubscribe("*").await.map_err(Error::Redis)?;
    Ok(pubsub)
}

/// Measures, prints and writes `stuck.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<StuckResults> {
    println!("== stuck: the next waiter behind a first waiter that cannot claim");
    let expected = (STUCK_FOR + SETTLE * 2) * settings.takeover_rounds * 6;
    let progress = Progress::new("stuck", expected);
    let results = measure(settings, &progress).await?;
    let summary: Vec<String> = results
        .stuck
        .iter()
        .map(|s| format!("{:?} {:?} median {:.1} ms", s.kind, s.how, s.median_ms))
        .collect();
    progress.finish(&summary.join(", "));
    let report = Report {
        scenario: "stuck".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![(
            format!(
                "Behind a stuck first waiter: from the release to the next waiter holding \
                 ({} rounds, leases of {} s, the default handoff window of {} ms)",
                results.rounds,
                results.lease_ms / 1000,
                results.window_ms
            ),
            stuck_table(&results.stuck),
        )],
        notes: vec![
            "holder, first and second waiter are separate processes, each a fencelock client of \
             one lock on a renewed lease; the first waiter is made stuck 1.5 s before the \
             holder is terminated (SIGTERM, which it handles by unlocking), and the time runs \
             from the holder's release returning to the second waiter holding"
                .to_owned(),
        ],
    };
    let chart = Chart {
        title: "Behind a stuck first waiter, median".to_owned(),
        unit: "ms from the release to the next waiter holding".to_owned(),
        bars: results
            .stuck
            .iter()
            .map(|s| Bar {
                label: format!("{}, {}", s.kind.label(), s.how.label()),
                value: s.median_ms,
            })
            .collect(),
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}

fn stuck_table(stuck: &[Stuck]) -> Table {
    let mut table = Table::new(&["lock", "first waiter", "fastest", "median", "slowest"]);
    for s in stuck {
        table.row(vec![
            s.kind.label().to_owned(),
            s.how.label().to_owned(),
            format!("{:.1} ms", s.min_ms),
            format!("{:.1} ms", s.median_ms),
            format!("{:.1} ms", s.max_ms),
        ]);
    }
    table
}
