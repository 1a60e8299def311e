//! What Redis itself reports: the commands it executed (`INFO commandstats`, which in Redis 7
//! counts the commands scripts run too), the CPU time its main thread spent (`INFO cpu`) and
//! its memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::error::{Error, Result};

/// Commands the bench sends to observe Redis, left out of the counts.
const OBSERVER_COMMANDS: [&str; 4] = ["info", "config|resetstat", "config", "ping"];

/// How long a command may wait for its reply: long, because on a small machine shared with
/// other work a reply can be late, and a late reply is a measurement, not a failure.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a plain multiplexed connection.
///
/// # Errors
///
/// [`Error::Redis`] when the URL is malformed or the server does not answer.
pub async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Zeroes the server's command statistics (`CONFIG RESETSTAT`).
///
/// # Errors
///
/// [`Error::Redis`] when the command fails.
pub async fn reset_stats(conn: &mut MultiplexedConnection) -> Result<()> {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// Calls per command since the last reset, without the bench's own observing commands.
///
/// # Errors
///
/// [`Error::Redis`] when `INFO` fails, [`Error::Parse`] on a malformed line.
pub async fn command_calls(conn: &mut MultiplexedConnection) -> Result<BTreeMap<String, u64>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    parse_commandstats(&info)
}

/// The total of [`command_calls`].
///
/// # Errors
///
/// As [`command_calls`].
pub async fn total_calls(conn: &mut MultiplexedConnection) -> Result<u64> {
    Ok(command_calls(conn).await?.values().sum())
}

fn parse_commandstats(info: &str) -> Result<BTreeMap<String, u64>> {
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, fields) = rest
            .split_once(':')
            .ok_or_else(|| Error::Parse(format!("commandstats line {line:?}")))?;
        if OBSERVER_COMMANDS.contains(&name) {
            continue;
        }
        let count = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| Error::Parse(format!("commandstats line {line:?}")))?;
        calls.insert(name.to_owned(), count);
    }
    Ok(calls)
}

/// What the "Redis µs" columns mean, for the notes under the tables.
pub const CPU_NOTE: &str = "Redis µs: CPU time of the Redis main thread (INFO cpu, user + \
    system) per operation, less the idle server's own background rate measured for a second \
    before; not the usec of INFO commandstats, which counts the commands a script runs twice \
    (in the script's usec and under their own names) and is wall time";

/// How long an idle server is watched to learn what its own background work (the `serverCron`
/// timer, expiring keys) costs per second, so that this is not charged to the operations.
const IDLE_SAMPLE: Duration = Duration::from_secs(1);

/// The CPU time Redis's main thread has used since it started, user and system, in µs.
///
/// The main thread runs every command, script and reply; the `*_main_thread` fields (Redis 6.2
/// and later) leave out the background threads (lazy free, AOF fsync). A server without them
/// is read from the process-wide fields.
///
/// Why not the `usec` of `INFO commandstats`: a script's `usec` already includes the commands it
/// runs, which Redis 7 also counts under their own names, so a sum over commands counts a
/// script's work twice; and `usec` is wall time, which grows with every moment the server waits
/// for a core on a loaded machine.
///
/// # Errors
///
/// [`Error::Redis`] when `INFO` fails, [`Error::Parse`] when the fields are missing.
pub async fn cpu_micros(conn: &mut MultiplexedConnection) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    parse_cpu_micros(&info)
}

fn parse_cpu_micros(info: &str) -> Result<u64> {
    let field = |name: &str| -> Option<u64> {
        let text = info
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
            .trim();
        // Seconds with six decimals, read exactly rather than through a float.
        let (secs, micros) = text.split_once('.').unwrap_or((text, "0"));
        let micros = format!("{micros:0<6}");
        Some(secs.parse::<u64>().ok()? * 1_000_000 + micros.get(..6)?.parse::<u64>().ok()?)
    };
    let sum = |sys: &str, user: &str| Some(field(sys)? + field(user)?);
    sum("used_cpu_sys_main_thread", "used_cpu_user_main_thread")
        .or_else(|| sum("used_cpu_sys", "used_cpu_user"))
        .ok_or_else(|| Error::Parse("INFO cpu has no used_cpu_sys/used_cpu_user".to_owned()))
}

/// What a measured stretch cost Redis: the commands it executed and its main thread's CPU time,
/// less what the idle server spends on its own over as long.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Commands executed, without the bench's own observing commands.
    pub commands: u64,
    /// CPU time in µs.
    pub cpu_us: f64,
}

impl Usage {
    /// Adds another stretch's usage.
    pub fn add(&mut self, other: Usage) {
        self.commands += other.commands;
        self.cpu_us += other.cpu_us;
    }

    /// Commands per operation.
    pub fn commands_per(&self, operations: u64) -> f64 {
        self.commands as f64 / operations.max(1) as f64
    }

    /// CPU µs per operation.
    pub fn cpu_us_per(&self, operations: u64) -> f64 {
        self.cpu_us / operations.max(1) as f64
    }
}

/// A connection that measures what stretches of work cost one server.
#[derive(Clone)]
pub struct Meter {
    url: String,
    conn: MultiplexedConnection,
    idle_cpu_us_per_sec: f64,
}

/// One stretch being measured: started by [`Meter::start`], ended by [`Stretch::finish`].
pub struct Stretch {
    conn: MultiplexedConnection,
    cpu_us: u64,
    started: Instant,
    idle_cpu_us_per_sec: f64,
}

impl Meter {
    /// Connects to the server at `url` and watches it idle for a second to learn its background
    /// CPU rate. Call it before the server has clients of the bench's making that do work.
    ///
    /// # Errors
    ///
    /// As [`connect`] and [`cpu_micros`].
    pub async fn connect(url: &str) -> Result<Meter> {
        let mut conn = connect(url).await?;
        let before = cpu_micros(&mut conn).await?;
        let started = Instant::now();
        tokio::time::sleep(IDLE_SAMPLE).await;
        let spent = cpu_micros(&mut conn).await?.saturating_sub(before);
        Ok(Meter {
            url: url.to_owned(),
            conn,
            idle_cpu_us_per_sec: spent as f64 / started.elapsed().as_secs_f64(),
        })
    }

    /// The URL of the server measured.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Zeroes the command statistics and notes the CPU time: the start of a stretch.
    ///
    /// # Errors
    ///
    /// As [`reset_stats`] and [`cpu_micros`].
    pub async fn start(&self) -> Result<Stretch> {
        let mut conn = self.conn.clone();
        reset_stats(&mut conn).await?;
        let cpu_us = cpu_micros(&mut conn).await?;
        Ok(Stretch {
            conn,
            cpu_us,
            started: Instant::now(),
            idle_cpu_us_per_sec: self.idle_cpu_us_per_sec,
        })
    }
}

impl Stretch {
    /// What the server spent since [`Meter::start`].
    ///
    /// # Errors
    ///
    /// As [`total_calls`] and [`cpu_micros`].
    pub async fn finish(mut self) -> Result<Usage> {
        let cpu_us = cpu_micros(&mut self.conn)
            .await?
            .saturating_sub(self.cpu_us);
        let idle = self.idle_cpu_us_per_sec * self.started.elapsed().as_secs_f64();
        Ok(Usage {
            commands: total_calls(&mut self.conn).await?,
            cpu_us: (cpu_us as f64 - idle).max(0.0),
        })
    }
}

/// One numeric field of `INFO section`.
///
/// # Errors
///
/// [`Error::Redis`] when `INFO` fails, [`Error::Parse`] when the field is missing.
pub async fn info_field(
    conn: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<String> {
    let info: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| Error::Parse(format!("INFO {section} has no {field}")))
}

/// `used_memory` in bytes.
///
/// # Errors
///
/// As [`info_field`], and [`Error::Parse`] when it is not a number.
pub async fn used_memory(conn: &mut MultiplexedConnection) -> Result<u64> {
    let text = info_field(conn, "memory", "used_memory").await?;
    text.parse()
        .map_err(|_| Error::Parse(format!("used_memory {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_sum_calls_and_skip_the_observer() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5\r\n\
                    cmdstat_info:calls=3,usec=1\r\ncmdstat_get:calls=10,usec=1\r\n";
        let calls = parse_commandstats(info).ok();
        let total: Option<u64> = calls.map(|c| c.values().sum());
        assert_eq!(total, Some(20));
    }

    #[test]
    fn cpu_time_is_the_main_threads_in_micros() {
        let info = "# CPU\r\nused_cpu_sys:0.019895\r\nused_cpu_user:0.143246\r\n\
                    used_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\
                    used_cpu_sys_main_thread:0.019886\r\nused_cpu_user_main_thread:12.143184\r\n";
        assert_eq!(parse_cpu_micros(info).ok(), Some(12_163_070));
        let old = "used_cpu_sys:1.5\r\nused_cpu_user:0.000001\r\n";
        assert_eq!(parse_cpu_micros(old).ok(), Some(1_500_001));
        assert!(parse_cpu_micros("used_cpu_sys:x\r\nused_cpu_user:1.0\r\n").is_err());
        assert!(parse_cpu_micros("").is_err());
    }
}
