//! Scenario 2, contended handoff: W workers want one name. Each holds it briefly and, after
//! releasing, does not ask again until another worker has acquired, so every grant goes to a
//! worker that was already waiting: what is measured is how fast a release reaches a waiter.
//!
//! The other variant, an empty critical section and an immediate re-acquire, is reported too
//! with its switch rate: there the releaser mostly takes the lock back at once, and a polling
//! library looks as fast as a notifying one.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::grants::{analyse, Grant, HandoffStats};
use crate::progress::Progress;
use crate::redisinfo::{self, Meter};
use crate::report::{short_number, Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::{join_within, Settings};

/// How workers behave between grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Hold for the hold time; after releasing, wait until another worker has acquired.
    Handoff,
    /// Release at once and ask again at once.
    Immediate,
}

impl Mode {
    /// The name peers' workers are given.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Handoff => "handoff",
            Mode::Immediate => "immediate",
        }
    }
}

/// Which fencelock primitive the workers share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FencelockKind {
    /// [`fencelock::Mutex`]: a release wakes one waiter per client.
    Mutex,
    /// [`fencelock::FairMutex`]: a release wakes only the first in line.
    FairMutex,
}

impl FencelockKind {
    /// The name the results give it.
    pub fn label(self) -> &'static str {
        match self {
            FencelockKind::Mutex => "fencelock Mutex",
            FencelockKind::FairMutex => "fencelock FairMutex",
        }
    }

    /// The lock of this kind named `name`, so that one worker loop serves both.
    fn handle(self, client: &fencelock::Client, name: &str) -> Result<fencelock::Handle> {
        Ok(match self {
            FencelockKind::Mutex => client.mutex(name)?.into(),
            FencelockKind::FairMutex => client.fair_mutex(name)?.into(),
        })
    }
}

/// Holds the lock for `hold` without yielding the thread, so that the hold is as precise as the
/// peers' `sleep` (a tokio timer rounds up to the next millisecond tick); the runtime moves
/// this thread's other tasks elsewhere meanwhile.
pub fn hold_for(hold: Duration) {
    if !hold.is_zero() {
        tokio::task::block_in_place(|| std::thread::sleep(hold));
    }
}

/// One contended run of one library.
#[derive(Clone, Debug, Serialize)]
pub struct HandoffRun {
    /// The library and its settings, e.g. `fencelock` or `rslock (retry 1 ms)`.
    pub library: String,
    /// The behaviour between grants.
    pub mode: Mode,
    /// What the grants say.
    pub stats: HandoffStats,
    /// Every grant, in the window or after it, while the workers wound down.
    pub total_acquires: u64,
    /// Commands Redis executed per acquire, over the whole run; none for a lock not on Redis.
    pub commands_per_acquire: Option<f64>,
    /// CPU µs of Redis's main thread per acquire, over the whole run (see
    /// [`redisinfo::cpu_micros`]); none for a lock not on Redis.
    pub redis_cpu_us_per_acquire: Option<f64>,
}

/// Scenario 2's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Handoff {
    /// Length of each run's measured window.
    pub duration_secs: f64,
    /// How long a holder holds in handoff mode.
    pub hold_ms: f64,
    /// Every run.
    pub runs: Vec<HandoffRun>,
}

/// Grants as they are recorded by in-process workers.
struct Shared {
    start: Instant,
    window_end: Instant,
    grants: StdMutex<Vec<Grant>>,
    acquires: watch::Sender<u64>,
}

impl Shared {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Counts an acquire and returns its sequence number.
    fn count_acquire(&self) -> u64 {
        let mut seq = 0;
        self.acquires.send_modify(|n| {
            *n += 1;
            seq = *n;
        });
        seq
    }

    fn record(&self, grant: Grant) {
        if let Ok(mut grants) = self.grants.lock() {
            grants.push(grant);
        }
    }

    /// Waits until a grant after `seq` (by another worker) or the end of the window.
    async fn wait_for_other(&self, seq: u64) {
        let mut acquires = self.acquires.subscribe();
        let window_end = tokio::time::Instant::from_std(self.window_end);
        tokio::select! {
            _ = acquires.wait_for(|n| *n > seq) => {}
            _ = tokio::time::sleep_until(window_end) => {}
        }
    }
}

/// Runs `workers` fencelock workers, each with a client of its own as if in its own process, on
/// one name of the server at `url`, which `meter` watches.
///
/// # Errors
///
/// A failed connection or lock operation, or workers that do not finish 30 s after the window.
pub async fn fencelock_run(
    url: &str,
    meter: &Meter,
    kind: FencelockKind,
    workers: usize,
    mode: Mode,
    hold: Duration,
    window: Duration,
) -> Result<HandoffRun> {
    let name = format!("handoff:{kind:?}:{}:{workers}", mode.as_str());
    let mut mutexes = Vec::with_capacity(workers);
    for _ in 0..workers {
        let client = fencelock::Client::connect(url).await?;
        mutexes.push((kind.handle(&client, &name)?, client));
    }
    let stretch = meter.start().await?;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        start,
        window_end: start + window,
        grants: StdMutex::new(Vec::new()),
        acquires: watch::Sender::new(0),
    });
    let mut set = JoinSet::new();
    for (worker, (mutex, client)) in mutexes.into_iter().enumerate() {
        let shared = Arc::clone(&shared);
        set.spawn(async move {
            let result = fencelock_worker(worker, &mutex, &shared, mode, hold).await;
            drop(client);
            result
        });
    }
    join_within(set, window + Duration::from_secs(30), "fencelock workers").await?;
    let usage = stretch.finish().await?;
    let total_acquires = *shared.acquires.borrow();
    let mut grants = shared
        .grants
        .lock()
        .map(|g| g.clone())
        .map_err(|_| Error::Stuck("a worker panicked while recording".to_owned()))?;
    Ok(HandoffRun {
        library: kind.label().to_owned(),
        mode,
        stats: analyse(&mut grants, workers, window),
        total_acquires,
        commands_per_acquire: Some(usage.commands_per(total_acquires)),
        redis_cpu_us_per_acquire: Some(usage.cpu_us_per(total_acquires)),
    })
}

async fn fencelock_worker(
    worker: usize,
    mutex: &fencelock::Handle,
    shared: &Shared,
    mode: Mode,
    hold: Duration,
) -> Result<()> {
    while Instant::now() < shared.window_end {
        let guard = mutex.lock().await?;
        let acquired = Instant::now();
        let seq = shared.count_acquire();
        if mode == Mode::Handoff {
            hold_for(hold);
        }
        let released = Instant::now();
        guard.unlock().await?;
        if acquired < shared.window_end {
            shared.record(Grant {
                worker,
                acquired_ns: shared.nanos(acquired),
                released_ns: shared.nanos(released),
            });
        }
        if mode == Mode::Handoff {
            shared.wait_for_other(seq).await;
        }
    }
    Ok(())
}

/// fencelock's runs on the server at `url`, which `meter` watches: both modes, both kinds, every
/// worker count of `settings.workers`.
///
/// # Errors
///
/// As [`fencelock_run`].
pub async fn fencelock_runs(
    url: &str,
    meter: &Meter,
    settings: &Settings,
    progress: &Progress,
) -> Result<Vec<HandoffRun>> {
    let mut runs = Vec::new();
    for mode in [Mode::Handoff, Mode::Immediate] {
        for kind in [FencelockKind::Mutex, FencelockKind::FairMutex] {
            for &workers in &settings.workers {
                let step = format!("{}, {}, W={workers}", kind.label(), mode.as_str());
                progress.step(&step, settings.duration);
                let (hold, window) = (settings.hold, settings.duration);
                let run = fencelock_run(url, meter, kind, workers, mode, hold, window).await?;
                progress.add_operations(run.total_acquires);
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// How many runs [`fencelock_runs`] makes: both modes, both kinds, each worker count.
pub fn fencelock_run_count(settings: &Settings) -> u32 {
    u32::try_from(4 * settings.workers.len()).unwrap_or(u32::MAX)
}

/// Measures fencelock at every worker count of `settings.workers`, in both modes.
///
/// # Errors
///
/// As [`fencelock_run`].
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Handoff> {
    let server = Server::start()?;
    let url = server.url();
    let meter = Meter::connect(&url).await?;
    Ok(Handoff {
        duration_secs: settings.duration.as_secs_f64(),
        hold_ms: settings.hold.as_secs_f64() * 1000.0,
        runs: fencelock_runs(&url, &meter, settings, progress).await?,
    })
}

/// The table of contended runs, one row each.
pub fn table(runs: &[HandoffRun]) -> Table {
    let mut table = Table::new(&[
        "library",
        "mode",
        "W",
        "acquires/s",
        "handoffs/s",
        "switch rate",
        "handoff p50 ms",
        "p99 ms",
        "max ms",
        "per worker min/max",
        "cmds/acquire",
        "Redis µs/acquire",
    ]);
    for run in runs {
        let s = &run.stats;
        table.row(vec![
            run.library.clone(),
            run.mode.as_str().to_owned(),
            s.workers.to_string(),
            format!("{:.0}", s.acquires_per_sec),
            format!("{:.0}", s.handoffs_per_sec),
            format!("{:.1}%", s.switch_rate * 100.0),
            short_number(s.latency.p50_ms),
            short_number(s.latency.p99_ms),
            short_number(s.latency.max_ms),
            format!("{}/{}", s.min_per_worker, s.max_per_worker),
            per_acquire(run.commands_per_acquire),
            per_acquire(run.redis_cpu_us_per_acquire),
        ]);
    }
    table
}

/// Commands or Redis µs per acquire for a table, `n/a` for a lock not on Redis.
pub fn per_acquire(figure: Option<f64>) -> String {
    figure.map_or_else(|| "n/a".to_owned(), |c| format!("{c:.1}"))
}

/// Bars of handoffs per second for the runs in handoff mode.
pub fn chart(title: &str, runs: &[HandoffRun]) -> Chart {
    Chart {
        title: title.to_owned(),
        unit: "handoffs per second".to_owned(),
        bars: runs
            .iter()
            .filter(|r| r.mode == Mode::Handoff)
            .map(|r| Bar {
                label: format!("{}, W={}", r.library, r.stats.workers),
                value: r.stats.handoffs_per_sec,
            })
            .collect(),
    }
}

/// Measures, prints and writes `handoff.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Handoff> {
    println!("== handoff: one name, W workers, every grant to a waiting worker");
    let progress = Progress::new("handoff", settings.duration * fencelock_run_count(settings));
    let results = measure(settings, &progress).await?;
    progress.finish(&summary(&results.runs));
    let overlaps: u64 = results.runs.iter().map(|r| r.stats.overlaps).sum();
    let report = Report {
        scenario: "handoff".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![(
            "Contended handoff, fencelock".to_owned(),
            table(&results.runs),
        )],
        notes: vec![
            format!(
                "handoff: each holder holds {:.0} ms, then waits until another worker has \
                 acquired; latency is from the start of a release to the next holder's acquire",
                results.hold_ms
            ),
            "immediate: empty critical section, re-acquire at once; the switch rate is the \
             share of acquires by another worker than the previous holder"
                .to_owned(),
            format!("grants that overlapped the previous one: {overlaps}"),
            redisinfo::CPU_NOTE.to_owned(),
        ],
    };
    let chart = chart(
        "fencelock: handoffs per second (higher is better)",
        &results.runs,
    );
    output.publish(&report, &[chart])?;
    Ok(results)
}

/// The runs in one line: handoffs per second and Redis µs per acquire of each handoff run.
pub fn summary(runs: &[HandoffRun]) -> String {
    let parts: Vec<String> = runs
        .iter()
        .filter(|r| r.mode == Mode::Handoff)
        .map(|r| {
            format!(
                "{} W={} {:.0}/s {} µs",
                r.library,
                r.stats.workers,
                r.stats.handoffs_per_sec,
                per_acquire(r.redis_cpu_us_per_acquire)
            )
        })
        .collect();
    format!("handoffs/s and Redis µs/acquire: {}", parts.join(", "))
}
