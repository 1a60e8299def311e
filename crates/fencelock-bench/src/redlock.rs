//! Scenario 4, RedLock: what asking five independent masters costs over asking one. Sequential
//! lock and unlock on distinct names through a client on one server, RedLock over that one
//! master, and RedLock over five; then RedLock over five with one of them paused (SIGSTOP):
//! acquires that a majority decides without it, and refusals that wait for its vote until the
//! node timeout.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::Result;
use crate::latency::{Latencies, LatencySummary};
use crate::progress::Progress;
use crate::report::{short_number, Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

/// One way of connecting.
#[derive(Clone, Debug, Serialize)]
pub struct RedlockRow {
    /// How the client was connected.
    pub setup: String,
    /// Masters asked.
    pub masters: usize,
    /// Lock and unlock cycles done.
    pub cycles: u64,
    /// Latency of `lock()`.
    pub acquire: LatencySummary,
    /// Latency of `unlock()`.
    pub release: LatencySummary,
    /// `acquire.p50_ms` over the single server's.
    pub acquire_ratio: f64,
}

/// RedLock over five masters with one of them paused.
#[derive(Clone, Debug, Serialize)]
pub struct PausedMaster {
    /// Lock and unlock cycles done with the master paused.
    pub cycles: u64,
    /// Latency of `lock()`, which four masters answer.
    pub acquire: LatencySummary,
    /// `acquire.p50_ms` over the p50 of five masters that all answer, in the same run.
    pub acquire_ratio: f64,
    /// `acquire.max_ms` over the node timeout.
    pub slowest_acquire_ratio: f64,
    /// The client's node timeout, ms.
    pub node_timeout_ms: f64,
    /// Latency of `try_lock()` refused while two masters are held by another owner and two
    /// are free: the paused master's vote decides, so the answer waits for its node timeout.
    pub refusals: LatencySummary,
    /// `refusals.p50_ms` over the node timeout.
    pub refusal_ratio: f64,
}

/// Scenario 4's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Redlock {
    /// Length of each measurement, s.
    pub duration_secs: f64,
    /// One row per setup.
    pub rows: Vec<RedlockRow>,
    /// Five masters, one paused.
    pub paused: PausedMaster,
}

/// Refusals measured with a master paused.
const REFUSALS: u64 = 10;

/// The node timeout of the client measured with a master paused: fencelock's default, set here
/// so that the figure says what it was.
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Measures the three setups against five private servers.
///
/// # Errors
///
/// A failed start, connection or lock operation.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Redlock> {
    let servers = (0..5)
        .map(|_| Server::start())
        .collect::<Result<Vec<_>>>()?;
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let single = fencelock::Client::connect(urls[0].as_str()).await?;
    let one = fencelock::Deployment::redlock(urls.iter().take(1).map(String::as_str))?;
    let one = fencelock::Client::connect(one).await?;
    let five = fencelock::Deployment::redlock(urls.iter().map(String::as_str))?;
    let five = fencelock::Client::connect(five).await?;
    let setups = [
        ("Client::connect, 1 server", 1, single, "single"),
        ("Deployment::redlock, 1 master", 1, one, "rl1"),
        ("Deployment::redlock, 5 masters", 5, five, "rl5"),
    ];
    let mut rows: Vec<RedlockRow> = Vec::new();
    for (setup, masters, client, prefix) in setups {
        progress.step(setup, settings.duration);
        let (cycles, acquire, release) = cycles(&client, prefix, settings.duration).await?;
        progress.add_operations(cycles);
        let base = rows.first().map_or(acquire.p50_ms, |r| r.acquire.p50_ms);
        rows.push(RedlockRow {
            setup: setup.to_owned(),
            masters,
            cycles,
            acquire,
            release,
            acquire_ratio: acquire.p50_ms / base.max(f64::MIN_POSITIVE),
        });
    }
    let all_up = rows.last().map_or(f64::MIN_POSITIVE, |r| r.acquire.p50_ms);
    progress.step(
        "Deployment::redlock, 5 masters, 1 paused",
        settings.duration,
    );
    servers[4].pause()?;
    let paused = paused_master(&urls, all_up, settings.duration).await;
    servers[4].resume()?;
    Ok(Redlock {
        duration_secs: settings.duration.as_secs_f64(),
        rows,
        paused: paused?,
    })
}

/// Cycles and refusals through a fresh RedLock client of the five masters, the last one paused.
async fn paused_master(
    urls: &[String],
    all_up_p50_ms: f64,
    duration: Duration,
) -> Result<PausedMaster> {
    let options = fencelock::ClientOptions::default().node_timeout(NODE_TIMEOUT);
    let masters = fencelock::Deployment::redlock(urls.iter().map(String::as_str))?;
    let client = fencelock::Client::connect_with_options(masters, options).await?;
    let (cycles, acquire, _) = cycles(&client, "paused", duration).await?;
    // Two masters held by another owner: two grants and two refusals leave the paused
    // master's vote to decide.
    let others = [
        fencelock::Client::connect(urls[0].as_str()).await?,
        fencelock::Client::connect(urls[1].as_str()).await?,
    ];
    let mut refusals = Latencies::new();
    for round in 0..REFUSALS {
        let name = format!("redlock:refused:{round}");
        let mut held = Vec::new();
        for other in &others {
            held.push(other.mutex(name.as_str())?.try_lock().await?);
        }
        let began = Instant::now();
        match client.mutex(name.as_str())?.try_lock().await {
            Err(fencelock::Error::Held { .. }) => refusals.record(began.elapsed()),
            outcome => {
                return Err(crate::Error::Stuck(format!(
                    "a try_lock against two held masters of five, one paused, gave {outcome:?}"
                )))
            }
        }
        for guard in held {
            guard.unlock().await?;
        }
    }
    let node_timeout_ms = NODE_TIMEOUT.as_secs_f64() * 1000.0;
    let refusals = refusals.summary();
    Ok(PausedMaster {
        cycles,
        acquire,
        acquire_ratio: acquire.p50_ms / all_up_p50_ms.max(f64::MIN_POSITIVE),
        slowest_acquire_ratio: acquire.max_ms / node_timeout_ms,
        node_timeout_ms,
        refusals,
        refusal_ratio: refusals.p50_ms / node_timeout_ms,
    })
}

async fn cycles(
    client: &fencelock::Client,
    prefix: &str,
    duration: Duration,
) -> Result<(u64, LatencySummary, LatencySummary)> {
    let mut acquire = Latencies::new();
    let mut release = Latencies::new();
    let deadline = Instant::now() + duration;
    let mut count = 0u64;
    while Instant::now() < deadline {
        let mutex = client.mutex(format!("redlock:{prefix}:{count}"))?;
        let began = Instant::now();
        let guard = mutex.lock().await?;
        let acquired = Instant::now();
        guard.unlock().await?;
        acquire.record(acquired - began);
        release.record(acquired.elapsed());
        count += 1;
    }
    Ok((count, acquire.summary(), release.summary()))
}

/// Measures, prints and writes `redlock.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Redlock> {
    println!("== redlock: acquire latency on 5 masters vs 1, and with 1 of 5 paused");
    let progress = Progress::new("redlock", settings.duration * 4);
    let results = measure(settings, &progress).await?;
    let summary: Vec<String> = results
        .rows
        .iter()
        .map(|r| format!("{} p50 {} ms", r.setup, short_number(r.acquire.p50_ms)))
        .collect();
    progress.finish(&format!("acquire {}", summary.join(", ")));
    let mut table = Table::new(&[
        "setup",
        "masters",
        "cycles",
        "acquire p50 ms",
        "p99 ms",
        "max ms",
        "release p50 ms",
        "acquire p50 / single server",
    ]);
    let mut bars = Vec::new();
    for row in &results.rows {
        table.row(vec![
            row.setup.clone(),
            row.masters.to_string(),
            row.cycles.to_string(),
            short_number(row.acquire.p50_ms),
            short_number(row.acquire.p99_ms),
            short_number(row.acquire.max_ms),
            short_number(row.release.p50_ms),
            format!("{:.2}", row.acquire_ratio),
        ]);
        bars.push(Bar {
            label: format!("fencelock {}", row.setup),
            value: row.acquire.p50_ms,
        });
    }
    let paused = &results.paused;
    let mut paused_table = Table::new(&[
        "with 1 of 5 masters paused",
        "count",
        "p50 ms",
        "max ms",
        "p50 / 5 masters up",
        "p50 / node timeout",
        "max / node timeout",
    ]);
    paused_table.row(vec![
        "acquire (4 masters answer)".to_owned(),
        paused.cycles.to_string(),
        short_number(paused.acquire.p50_ms),
        short_number(paused.acquire.max_ms),
        format!("{:.2}", paused.acquire_ratio),
        format!("{:.2}", paused.acquire.p50_ms / paused.node_timeout_ms),
        format!("{:.2}", paused.slowest_acquire_ratio),
    ]);
    paused_table.row(vec![
        "refusal (2 held, 2 free: the paused master's vote decides)".to_owned(),
        paused.refusals.count.to_string(),
        short_number(paused.refusals.p50_ms),
        short_number(paused.refusals.max_ms),
        "-".to_owned(),
        format!("{:.2}", paused.refusal_ratio),
        format!("{:.2}", paused.refusals.max_ms / paused.node_timeout_ms),
    ]);
    let report = Report {
        scenario: "redlock".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![
            ("RedLock acquire latency".to_owned(), table),
            (
                format!(
                    "RedLock over 5 masters, one paused (SIGSTOP), node timeout {} ms",
                    short_number(paused.node_timeout_ms)
                ),
                paused_table,
            ),
        ],
        notes: vec![
            "all five masters run on the same machine as the client: the figures show the \
             cost of asking five at once, not of a network"
                .to_owned(),
            "with a master paused, a fresh client of the five masters locks and unlocks \
             distinct names, then tries names that two other masters hold for another owner"
                .to_owned(),
        ],
    };
    let chart = Chart {
        title: "Acquire latency p50, ms (lower is better)".to_owned(),
        unit: "milliseconds".to_owned(),
        bars,
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}
