//! Scenario 5, renewal at scale: one [`fencelock::Client`] holding 10,000 or 100,000 renewed
//! leases. What it costs Redis per renewal interval (commands, scripts), what it costs the
//! client (CPU), and what a held lock costs in Redis memory beside a plain `SET` with expiry
//! measured in the same run.

use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeValLike;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::redisinfo;
use crate::report::{Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

/// The lease held: short, so that several renewal intervals (a third of it) pass in seconds.
pub const LEASE: Duration = Duration::from_secs(3);

/// How long the client waits for a reply: acquiring and releasing 100,000 leases from 64 tasks
/// on a small shared machine can keep a reply longer than the default second.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Tasks acquiring the leases at once before the measurement.
const ACQUIRERS: usize = 64;

/// One lease count.
#[derive(Clone, Debug, Serialize)]
pub struct RenewalRow {
    /// Leases held by the one client.
    pub leases: usize,
    /// Renewal intervals observed (window / a third of the lease).
    pub intervals: f64,
    /// Commands Redis executed per interval, the scripts' own included.
    pub commands_per_interval: f64,
    /// Script calls (`EVALSHA`/`EVAL`) per interval.
    pub scripts_per_interval: f64,
    /// Client CPU time (user + system) as a share of one core during the window.
    pub client_cpu_share: f64,
    /// Leases still held at the end of the window.
    pub still_held: usize,
    /// Redis `used_memory` growth per held lock.
    pub bytes_per_lock: f64,
    /// Redis `used_memory` growth per plain `SET key value PX` key, with a key and a value as
    /// long as a lock's of the same name.
    pub bytes_per_plain_key: f64,
    /// The length of the key of one held lock, picked at random (names run from `lease:0` to
    /// `lease:99999`); a plain key of the same name is as long.
    pub key_bytes: usize,
    /// The length of a held lock's value, and so of the plain key's.
    pub value_bytes: usize,
}

/// Scenario 5's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Renewal {
    /// The lease length, ms.
    pub lease_ms: u64,
    /// The measured window, s.
    pub window_secs: f64,
    /// One row per lease count.
    pub rows: Vec<RenewalRow>,
}

/// Measures every lease count of `settings.leases`.
///
/// # Errors
///
/// A failed Redis or lock operation.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Renewal> {
    let server = Server::start()?;
    let url = server.url();
    let mut admin = redisinfo::connect(&url).await?;
    let window = settings.duration.max(LEASE / 3);
    let mut rows = Vec::new();
    for &leases in &settings.leases {
        progress.step(&format!("{leases} leases"), window);
        rows.push(measure_count(&url, &mut admin, leases, window).await?);
        progress.add_operations(u64::try_from(leases).unwrap_or(u64::MAX));
    }
    Ok(Renewal {
        lease_ms: u64::try_from(LEASE.as_millis()).unwrap_or(u64::MAX),
        window_secs: window.as_secs_f64(),
        rows,
    })
}

async fn measure_count(
    url: &str,
    admin: &mut MultiplexedConnection,
    leases: usize,
    window: Duration,
) -> Result<RenewalRow> {
    flush(admin).await?;
    let options = fencelock::ClientOptions::default()
        .default_lease(fencelock::Lease::Renewed(LEASE))
        .response_timeout(RESPONSE_TIMEOUT);
    let client = fencelock::Client::connect_with_options(url, options).await?;
    let before = redisinfo::used_memory(admin).await?;
    let guards = acquire_all(&client, leases).await?;
    let after = redisinfo::used_memory(admin).await?;
    let shape = lock_shape(admin).await?;
    redisinfo::reset_stats(admin).await?;
    let cpu_before = cpu_time()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed();
    let cpu = cpu_time()?.saturating_sub(cpu_before);
    let calls = redisinfo::command_calls(admin).await?;
    let commands: u64 = calls.values().sum();
    let scripts: u64 = calls
        .iter()
        .filter(|(name, _)| name.starts_with("eval"))
        .map(|(_, n)| n)
        .sum();
    let intervals = elapsed.as_secs_f64() / (LEASE / 3).as_secs_f64();
    let still_held = guards.iter().filter(|g| g.is_held()).count();
    release_all(guards).await?;
    drop(client);
    let bytes_per_plain_key = plain_key_bytes(admin, leases, &shape).await?;
    flush(admin).await?;
    Ok(RenewalRow {
        leases,
        intervals,
        commands_per_interval: commands as f64 / intervals,
        scripts_per_interval: scripts as f64 / intervals,
        client_cpu_share: cpu.as_secs_f64() / elapsed.as_secs_f64(),
        still_held,
        bytes_per_lock: after.saturating_sub(before) as f64 / leases.max(1) as f64,
        bytes_per_plain_key,
        key_bytes: shape.key_len,
        value_bytes: shape.value_len,
    })
}

/// What fencelock stored for one held lock: its key around the name's hash tag, and the length
/// of its value.
struct LockShape {
    key_len: usize,
    before: String,
    after: String,
    value_len: usize,
}

/// Reads one held lock's key and value (every key is one while the leases are held).
async fn lock_shape(admin: &mut MultiplexedConnection) -> Result<LockShape> {
    let key: Option<String> = redis::cmd("RANDOMKEY").query_async(admin).await?;
    let key = key.ok_or_else(|| Error::Stuck("no key while the leases are held".to_owned()))?;
    let value_len: usize = redis::cmd("STRLEN").arg(&key).query_async(admin).await?;
    let open = key.find("{lease:");
    let close = key.find('}');
    let (Some(open), Some(close)) = (open, close) else {
        return Err(Error::Parse(format!(
            "a lock key without its name's hash tag: {key}"
        )));
    };
    Ok(LockShape {
        key_len: key.len(),
        before: key[..open].to_owned(),
        after: key[close + 1..].to_owned(),
        value_len,
    })
}

async fn flush(admin: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("FLUSHALL").query_async::<()>(admin).await?;
    Ok(())
}

/// `used_memory` per key of `count` plain `SET key value PX` keys, each key and value exactly
/// as long as fencelock's for the same name.
async fn plain_key_bytes(
    admin: &mut MultiplexedConnection,
    count: usize,
    shape: &LockShape,
) -> Result<f64> {
    flush(admin).await?;
    let before = redisinfo::used_memory(admin).await?;
    let value = "v".repeat(shape.value_len);
    for chunk in (0..count).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(format!("{}{{lease:{i}}}{}", shape.before, shape.after))
                .arg(&value)
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
        pipe.query_async::<()>(admin).await?;
    }
    let after = redisinfo::used_memory(admin).await?;
    Ok(after.saturating_sub(before) as f64 / count.max(1) as f64)
}

async fn acquire_all(
    client: &fencelock::Client,
    leases: usize,
) -> Result<Vec<fencelock::MutexGuard>> {
    let mut set = JoinSet::new();
    for task in 0..ACQUIRERS {
        let client = client.clone();
        set.spawn(async move {
            let mut guards = Vec::new();
            for i in (task..leases).step_by(ACQUIRERS) {
                guards.push(client.mutex(format!("lease:{i}"))?.try_lock().await?);
            }
            Ok::<_, Error>(guards)
        });
    }
    let mut guards = Vec::with_capacity(leases);
    while let Some(joined) = set.join_next().await {
        guards.extend(joined.map_err(|e| Error::Stuck(format!("an acquirer ended: {e}")))??);
    }
    Ok(guards)
}

async fn release_all(guards: Vec<fencelock::MutexGuard>) -> Result<()> {
    let mut set = JoinSet::new();
    let mut chunks: Vec<Vec<fencelock::MutexGuard>> = (0..ACQUIRERS).map(|_| Vec::new()).collect();
    for (i, guard) in guards.into_iter().enumerate() {
        if let Some(chunk) = chunks.get_mut(i % ACQUIRERS) {
            chunk.push(guard);
        }
    }
    for chunk in chunks {
        set.spawn(async move {
            for guard in chunk {
                // A lease lost in the window is counted in `still_held`, not a failed run.
                match guard.unlock().await {
                    Ok(()) | Err(fencelock::Error::NotHeld { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok::<_, Error>(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined.map_err(|e| Error::Stuck(format!("a releaser ended: {e}")))??;
    }
    Ok(())
}

fn notes(results: &Renewal) -> Vec<String> {
    let mut notes = vec![
        format!(
            "lease {} ms renewed every third of it; commands and client CPU over a window of \
             {:.1} s after every lease was acquired",
            results.lease_ms, results.window_secs
        ),
        "bytes/lock: used_memory growth per held lock, every key it keeps included; the plain \
         keys are measured after the locks are released, each with a key and a value as long as \
         a lock's of the same name"
            .to_owned(),
    ];
    for row in results.rows.iter().filter(|r| r.still_held < r.leases) {
        notes.push(format!(
            "{} of {} leases were lost before the end of the window: the client could not \
             renew them all on this machine, so the row measures neither renewal nor memory \
             per held lock",
            row.leases - row.still_held,
            row.leases
        ));
    }
    notes
}

/// User + system CPU time of this process so far.
fn cpu_time() -> Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)
        .map_err(|e| Error::io("getrusage", std::io::Error::from(e)))?;
    let micros = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    Ok(Duration::from_micros(u64::try_from(micros).unwrap_or(0)))
}

/// Measures, prints and writes `renewal.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Renewal> {
    println!("== renewal: one client holding many renewed leases");
    let window = settings.duration.max(LEASE / 3);
    let count = u32::try_from(settings.leases.len()).unwrap_or(u32::MAX);
    let progress = Progress::new("renewal", window * count);
    let results = measure(settings, &progress).await?;
    let summary: Vec<String> = results
        .rows
        .iter()
        .map(|r| {
            format!(
                "{} leases {:.1} cmds/interval",
                r.leases, r.commands_per_interval
            )
        })
        .collect();
    progress.finish(&summary.join(", "));
    let mut table = Table::new(&[
        "leases",
        "intervals",
        "commands/interval",
        "scripts/interval",
        "client CPU",
        "still held",
        "bytes/lock",
        "bytes/plain SET PX key",
        "lock / plain",
    ]);
    let mut bars = Vec::new();
    for row in &results.rows {
        table.row(vec![
            row.leases.to_string(),
            format!("{:.1}", row.intervals),
            format!("{:.0}", row.commands_per_interval),
            format!("{:.0}", row.scripts_per_interval),
            format!("{:.1}%", row.client_cpu_share * 100.0),
            row.still_held.to_string(),
            format!("{:.0}", row.bytes_per_lock),
            format!("{:.0}", row.bytes_per_plain_key),
            format!(
                "{:.2}",
                row.bytes_per_lock / row.bytes_per_plain_key.max(f64::MIN_POSITIVE)
            ),
        ]);
        bars.push(Bar {
            label: format!("fencelock lock, {} held", row.leases),
            value: row.bytes_per_lock,
        });
        bars.push(Bar {
            label: format!("plain SET PX key, {} keys", row.leases),
            value: row.bytes_per_plain_key,
        });
    }
    let report = Report {
        scenario: "renewal".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![("Renewal at scale".to_owned(), table)],
        notes: notes(&results),
    };
    let chart = Chart {
        title: "Redis memory per held lock vs a plain SET PX key (bytes)".to_owned(),
        unit: "bytes of used_memory per key".to_owned(),
        bars,
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}
