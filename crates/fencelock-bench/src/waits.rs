//! Scenario 10, recorded waits: what recording every wait for the wait-for graph costs. A
//! client records a wait once it has lasted `ClientOptions::record_waits` (1 s by default),
//! and again each such interval while it lasts. Measured two ways, each against a client that
//! records none, in one run:
//!
//! - uncontended lock and unlock cycles of one task: Redis commands per cycle (a lock taken at
//!   once waits for nothing, so nothing is recorded);
//! - W tasks waiting for a lock held for the whole window: Redis commands per waiter per
//!   second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::Result;
use crate::progress::Progress;
use crate::redisinfo::{command_calls, connect, reset_stats};
use crate::report::{Output, Report, Table};
use crate::server::Server;
use crate::Settings;

/// How many tasks wait at once.
pub const WAITERS: usize = 16;

/// One way of measuring, with and without recording.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What was measured: `uncontended` (per cycle) or `waiting` (per waiter per second).
    pub mode: &'static str,
    /// Whether the client recorded waits (at its default threshold).
    pub recorded: bool,
    /// Commands Redis ran per cycle (`uncontended`) or per waiter per second (`waiting`).
    pub commands: f64,
    /// The same, by command.
    pub by_command: BTreeMap<String, f64>,
}

/// Scenario 10's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct WaitsResults {
    /// The threshold and interval of recording, ms.
    pub record_ms: u64,
    /// How many tasks waited at once.
    pub waiters: usize,
    /// The measured window, ms.
    pub window_ms: u64,
    /// The rows.
    pub rows: Vec<Row>,
}

/// Measures both modes with and without recording.
///
/// # Errors
///
/// A failure of Redis or of a lock operation.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<WaitsResults> {
    let server = Server::start()?;
    let window = settings.duration.max(Duration::from_secs(3));
    let mut rows = Vec::new();
    for recorded in [false, true] {
        progress.step(&format!("uncontended, recorded {recorded}"), window);
        rows.push(uncontended(&server, recorded, window).await?);
        progress.step(&format!("{WAITERS} waiting, recorded {recorded}"), window);
        rows.push(waiting(&server, recorded, window).await?);
    }
    Ok(WaitsResults {
        record_ms: millis(fencelock::DEFAULT_RECORD_WAITS),
        waiters: WAITERS,
        window_ms: millis(window),
        rows,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

async fn client(server: &Server, recorded: bool) -> Result<fencelock::Client> {
    let mut options = fencelock::ClientOptions::default().holder_label("");
    if !recorded {
        options = options.record_waits(None);
    }
    Ok(fencelock::Client::connect_with_options(server.url().as_str(), options).await?)
}

/// Lock and unlock cycles of one task for `window`: commands per cycle.
async fn uncontended(server: &Server, recorded: bool, window: Duration) -> Result<Row> {
    let client = client(server, recorded).await?;
    let mutex = client.mutex(format!("uncontended-{recorded}"))?;
    // Loads the scripts first.
    mutex.lock().await?.unlock().await?;
    let mut observer = connect(&server.url()).await?;
    reset_stats(&mut observer).await?;
    let until = Instant::now() + window;
    let mut cycles = 0_u64;
    while Instant::now() < until {
        mutex.lock().await?.unlock().await?;
        cycles += 1;
    }
    let calls = command_calls(&mut observer).await?;
    client.shutdown().await?;
    Ok(row("uncontended", recorded, &calls, cycles as f64))
}

/// [`WAITERS`] tasks waiting for `window` behind a holder: commands per waiter per second.
async fn waiting(server: &Server, recorded: bool, window: Duration) -> Result<Row> {
    let name = format!("waiting-{recorded}");
    let holder = client(server, false).await?;
    let held = holder
        .mutex_with_options(
            name.as_str(),
            fencelock::LockOptions::default()
                .lease(fencelock::Lease::Renewed(Duration::from_secs(30))),
        )?
        .lock()
        .await?;
    let waiter = client(server, recorded).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let mutex = waiter.mutex(name.as_str())?;
        tasks.spawn(async move { mutex.lock().await });
    }
    // Past the threshold first, so that the window sees waits that are recorded.
    tokio::time::sleep(fencelock::DEFAULT_RECORD_WAITS + Duration::from_millis(500)).await;
    let mut observer = connect(&server.url()).await?;
    reset_stats(&mut observer).await?;
    tokio::time::sleep(window).await;
    let calls = command_calls(&mut observer).await?;
    held.unlock().await?;
    while let Some(done) = tasks.join_next().await {
        if let Ok(Ok(guard)) = done {
            guard.unlock().await?;
        }
    }
    holder.shutdown().await?;
    waiter.shutdown().await?;
    let waiter_seconds = WAITERS as f64 * window.as_secs_f64();
    Ok(row("waiting", recorded, &calls, waiter_seconds))
}

fn row(mode: &'static str, recorded: bool, calls: &BTreeMap<String, u64>, per: f64) -> Row {
    let by_command: BTreeMap<String, f64> = calls
        .iter()
        .map(|(command, n)| (command.clone(), *n as f64 / per.max(1.0)))
        .collect();
    Row {
        mode,
        recorded,
        commands: by_command.values().sum(),
        by_command,
    }
}

/// Measures, prints and writes `waits.{json,md}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<WaitsResults> {
    println!("== waits: what recording every wait costs");
    let window = settings.duration.max(Duration::from_secs(3));
    let progress = Progress::new("waits", window * 4);
    let results = measure(settings, &progress).await?;
    progress.finish("done");
    let mut table = Table::new(&["measured", "waits recorded", "commands", "by command"]);
    for row in &results.rows {
        let by: Vec<String> = row
            .by_command
            .iter()
            .map(|(command, n)| format!("{command} {n:.2}"))
            .collect();
        table.row(vec![
            match row.mode {
                "uncontended" => "per uncontended lock and unlock".to_owned(),
                _ => "per waiting task per second".to_owned(),
            },
            if row.recorded { "yes" } else { "no" }.to_owned(),
            format!("{:.2}", row.commands),
            by.join(", "),
        ]);
    }
    let report = Report {
        scenario: "waits".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![(
            format!(
                "Recorded waits: Redis commands, with and without recording (threshold {} ms, \
                 {} waiting tasks, {} ms window)",
                results.record_ms, results.waiters, results.window_ms
            ),
            table,
        )],
        notes: vec![
            "one process; the waiting tasks share one client, the holder has its own, and its \
             lease is renewed (its renewals are counted in both rows alike); the waiters' \
             window starts after the threshold has passed"
                .to_owned(),
        ],
    };
    output.publish(&report, &[])?;
    Ok(results)
}
