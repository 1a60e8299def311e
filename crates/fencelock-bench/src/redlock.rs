//! Scenario 4, RedLock: what asking five independent masters costs over asking one. Sequential
//! lock and unlock on distinct names through a client on one server, RedLock over that one
//! master, and RedLock over five.

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

/// Scenario 4's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Redlock {
    /// Length of each measurement, s.
    pub duration_secs: f64,
    /// One row per setup.
    pub rows: Vec<RedlockRow>,
}

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
        ("connect_redlock, 1 master", 1, one, "rl1"),
        ("connect_redlock, 5 masters", 5, five, "rl5"),
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
    Ok(Redlock {
        duration_secs: settings.duration.as_secs_f64(),
        rows,
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
    println!("== redlock: acquire latency on 5 masters vs 1");
    let progress = Progress::new("redlock", settings.duration * 3);
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
    let report = Report {
        scenario: "redlock".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![("RedLock acquire latency".to_owned(), table)],
        notes: vec![
            "all five masters run on the same machine as the client: the figures show the \
             cost of asking five at once, not of a network"
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
