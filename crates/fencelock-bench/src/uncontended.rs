//! Scenario 1, uncontended: lock and unlock cycles on names nobody else uses, one task after
//! another and many tasks at once, beside the limit of the same Redis in the same run: the same
//! number of bare round trips (`SET NX PX`, then the compare-and-delete release script) sent
//! directly with the `redis` crate at the same concurrency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::latency::{Latencies, LatencySummary};
use crate::progress::Progress;
use crate::redisinfo::{self, Meter, Usage};
use crate::report::{ratio, short_number, Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

/// The release every Redis lock guide shows: delete the key only if it still holds our token.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                       return redis.call('DEL', KEYS[1]) else return 0 end";

/// One side of a measurement: fencelock or the bare round trips.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Lock and unlock cycles completed.
    pub cycles: u64,
    /// Cycles per second.
    pub cycles_per_sec: f64,
    /// Commands Redis executed per cycle (scripts' own commands included).
    pub commands_per_cycle: f64,
    /// CPU µs of Redis's main thread per cycle (see [`redisinfo::cpu_micros`]).
    pub redis_cpu_us_per_cycle: f64,
    /// Latency of a whole cycle.
    pub cycle_latency: LatencySummary,
}

/// fencelock and the limit at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct UncontendedRow {
    /// Tasks running cycles at once, in one process.
    pub tasks: usize,
    /// fencelock's cycles.
    pub fencelock: Throughput,
    /// The bare round trips.
    pub limit: Throughput,
    /// `fencelock.cycles_per_sec / limit.cycles_per_sec`.
    pub ratio: f64,
}

/// Scenario 1's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Uncontended {
    /// How long fencelock ran at each concurrency.
    pub duration_secs: f64,
    /// One row per concurrency.
    pub rows: Vec<UncontendedRow>,
}

/// Measures every concurrency of `settings.tasks` against a private server.
///
/// # Errors
///
/// Any failure to start Redis or of a lock operation.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Uncontended> {
    let server = Server::start()?;
    let url = server.url();
    let meter = Meter::connect(&url).await?;
    let client = fencelock::Client::connect(url.as_str()).await?;
    let limit_conn = redisinfo::connect(&url).await?;
    let mut rows = Vec::new();
    let round = settings.duration / ROUNDS;
    for &tasks in &settings.tasks {
        let (mut fencelock, mut fencelock_usage) = (Cycles::default(), Usage::default());
        let (mut limit, mut limit_usage) = (Cycles::default(), Usage::default());
        // Rounds that alternate, so that a change of load on the machine weighs on both sides.
        for round_index in 0..ROUNDS {
            progress.step(
                &format!("fencelock, {tasks} task(s), round {}", round_index + 1),
                round,
            );
            let stretch = meter.start().await?;
            let done = fencelock_cycles(&client, tasks, round).await?;
            fencelock_usage.add(stretch.finish().await?);
            progress.step(
                &format!("limit, {tasks} task(s), round {}", round_index + 1),
                round,
            );
            let stretch = meter.start().await?;
            let limit_done = limit_cycles(&limit_conn, tasks, done.count).await?;
            limit_usage.add(stretch.finish().await?);
            progress.add_operations(done.count + limit_done.count);
            limit.add(limit_done);
            fencelock.add(done);
        }
        let fencelock = throughput(fencelock, fencelock_usage);
        let limit = throughput(limit, limit_usage);
        let ratio = fencelock.cycles_per_sec / limit.cycles_per_sec.max(f64::MIN_POSITIVE);
        rows.push(UncontendedRow {
            tasks,
            fencelock,
            limit,
            ratio,
        });
    }
    drop(server);
    Ok(Uncontended {
        duration_secs: settings.duration.as_secs_f64(),
        rows,
    })
}

/// fencelock's uncontended cycles at one concurrency through `client`, with what they cost the
/// server `meter` watches.
///
/// # Errors
///
/// A failed lock operation or `INFO`.
pub async fn fencelock_throughput(
    meter: &Meter,
    client: &fencelock::Client,
    tasks: usize,
    duration: Duration,
) -> Result<Throughput> {
    let stretch = meter.start().await?;
    let cycles = fencelock_cycles(client, tasks, duration).await?;
    Ok(throughput(cycles, stretch.finish().await?))
}

/// Alternating rounds of fencelock and of the limit in each measurement.
const ROUNDS: u32 = 5;

/// What a batch of tasks did: cycles, time taken, latencies.
#[derive(Default)]
struct Cycles {
    count: u64,
    elapsed: Duration,
    latencies: Latencies,
}

impl Cycles {
    fn add(&mut self, other: Cycles) {
        self.count += other.count;
        self.elapsed += other.elapsed;
        self.latencies.merge(&other.latencies);
    }
}

fn throughput(cycles: Cycles, usage: Usage) -> Throughput {
    Throughput {
        cycles: cycles.count,
        cycles_per_sec: cycles.count as f64 / cycles.elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
        commands_per_cycle: usage.commands_per(cycles.count),
        redis_cpu_us_per_cycle: usage.cpu_us_per(cycles.count),
        cycle_latency: cycles.latencies.summary(),
    }
}

async fn fencelock_cycles(
    client: &fencelock::Client,
    tasks: usize,
    duration: Duration,
) -> Result<Cycles> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let client = client.clone();
        set.spawn(async move {
            let mut latencies = Latencies::new();
            let mut count = 0u64;
            while Instant::now() < deadline {
                let began = Instant::now();
                let guard = client
                    .mutex(format!("u:{tasks}:{task}:{count}"))?
                    .lock()
                    .await?;
                guard.unlock().await?;
                latencies.record(began.elapsed());
                count += 1;
            }
            Ok::<_, Error>((count, latencies))
        });
    }
    collect(set, start).await
}

async fn limit_cycles(conn: &MultiplexedConnection, tasks: usize, total: u64) -> Result<Cycles> {
    let release = Arc::new(redis::Script::new(RELEASE));
    let start = Instant::now();
    let mut set = JoinSet::new();
    let tasks_u64 = tasks.max(1) as u64;
    for task in 0..tasks_u64 {
        let mut conn = conn.clone();
        let release = Arc::clone(&release);
        // The same total as fencelock did, shared out evenly.
        let share = total / tasks_u64 + u64::from(task < total % tasks_u64);
        set.spawn(async move {
            let mut latencies = Latencies::new();
            for i in 0..share {
                let began = Instant::now();
                let key = format!("limit:{tasks}:{task}:{i}");
                let token = format!("{task:016x}{i:016x}");
                let set: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await?;
                if set.is_none() {
                    return Err(Error::Parse(format!("{key} was already set")));
                }
                let _: i64 = release
                    .key(&key)
                    .arg(&token)
                    .invoke_async(&mut conn)
                    .await?;
                latencies.record(began.elapsed());
            }
            Ok::<_, Error>((share, latencies))
        });
    }
    collect(set, start).await
}

async fn collect(mut set: JoinSet<Result<(u64, Latencies)>>, start: Instant) -> Result<Cycles> {
    let mut cycles = Cycles::default();
    while let Some(joined) = set.join_next().await {
        let (count, latencies) =
            joined.map_err(|e| Error::Stuck(format!("a task ended abnormally: {e}")))??;
        cycles.count += count;
        cycles.latencies.merge(&latencies);
    }
    cycles.elapsed = start.elapsed();
    Ok(cycles)
}

/// Measures, prints and writes `uncontended.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Uncontended> {
    println!("== uncontended: lock+unlock on distinct names, fencelock vs bare round trips");
    // Each side measures for about the window: the limit does as many cycles as fencelock did.
    let expected = settings.duration * 2 * u32::try_from(settings.tasks.len()).unwrap_or(1);
    let progress = Progress::new("uncontended", expected);
    let results = measure(settings, &progress).await?;
    progress.finish(&summary(&results));
    let mut table = Table::new(&[
        "tasks",
        "fencelock cycles/s",
        "limit cycles/s",
        "fencelock / limit",
        "fencelock cmds/cycle",
        "limit cmds/cycle",
        "fencelock Redis µs/cycle",
        "limit Redis µs/cycle",
        "fencelock ÷ limit Redis µs",
        "fencelock p50 ms",
        "limit p50 ms",
        "fencelock p99 ms",
        "limit p99 ms",
    ]);
    let mut bars = Vec::new();
    for row in &results.rows {
        table.row(vec![
            row.tasks.to_string(),
            format!("{:.0}", row.fencelock.cycles_per_sec),
            format!("{:.0}", row.limit.cycles_per_sec),
            format!("{:.2}", row.ratio),
            format!("{:.1}", row.fencelock.commands_per_cycle),
            format!("{:.1}", row.limit.commands_per_cycle),
            short_number(row.fencelock.redis_cpu_us_per_cycle),
            short_number(row.limit.redis_cpu_us_per_cycle),
            ratio(
                row.fencelock.redis_cpu_us_per_cycle,
                row.limit.redis_cpu_us_per_cycle,
            ),
            short_number(row.fencelock.cycle_latency.p50_ms),
            short_number(row.limit.cycle_latency.p50_ms),
            short_number(row.fencelock.cycle_latency.p99_ms),
            short_number(row.limit.cycle_latency.p99_ms),
        ]);
        bars.push(Bar {
            label: format!("fencelock, {} task(s)", row.tasks),
            value: row.fencelock.cycles_per_sec,
        });
        bars.push(Bar {
            label: format!("limit (SET NX PX + release script), {} task(s)", row.tasks),
            value: row.limit.cycles_per_sec,
        });
    }
    let report = Report {
        scenario: "uncontended".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![("Uncontended lock+unlock cycles".to_owned(), table)],
        notes: vec![
            format!(
                "limit: the same number of cycles as fencelock did, as bare SET NX PX and \
                 compare-and-delete script round trips on one multiplexed connection, like \
                 fencelock's one command connection; {ROUNDS} alternating rounds of each"
            ),
            redisinfo::CPU_NOTE.to_owned(),
        ],
    };
    let chart = Chart {
        title: "Uncontended lock+unlock cycles per second (higher is better)".to_owned(),
        unit: "cycles per second".to_owned(),
        bars,
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}

/// The scenario in one line: fencelock's rate and Redis CPU beside the limit's, per concurrency.
fn summary(results: &Uncontended) -> String {
    let rows: Vec<String> = results
        .rows
        .iter()
        .map(|row| {
            format!(
                "{} task(s): fencelock ÷ limit {:.2} in cycles/s, {} in Redis µs/cycle",
                row.tasks,
                row.ratio,
                ratio(
                    row.fencelock.redis_cpu_us_per_cycle,
                    row.limit.redis_cpu_us_per_cycle
                )
            )
        })
        .collect();
    rows.join("; ")
}
