//! What Redis itself reports: the commands it executed (`INFO commandstats`, which in Redis 7
//! counts the commands scripts run too) and its memory.

use std::collections::BTreeMap;
use std::time::Duration;

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
}
