//! A waiter's record of its wait: what it waits for, since when, and what its task holds, kept
//! in Redis under `<prefix>waits:<client>/<task>` while a waiter waits (by default once it has
//! waited a second, `ClientOptions::record_waits`); and the reading of every record.
//!
//! A record lives a few check intervals unless its waiter refreshes it, so a crashed waiter's
//! record goes by itself; a waiter that stops waiting deletes its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cycle::{LockKind, TaskId};
use crate::error::Result;
use crate::options::millis;
use crate::transport::conn::Conn;

/// The suffix after the prefix of every record's key.
pub(crate) const RECORDS: &str = "waits:";

/// One waiter's wait, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) task: TaskId,
    pub(crate) label: String,
    /// When the wait began, by this client's clock.
    pub(crate) since: SystemTime,
    /// The locks it waits for: one, or a multi-lock's names.
    pub(crate) waits_for: Vec<(LockKind, String)>,
    /// What its task holds, one entry per hold of each lock.
    pub(crate) holds: Vec<(LockKind, String)>,
    /// How long the record lives unless refreshed.
    pub(crate) ttl: Duration,
}

impl Wait {
    /// Writes the record under `prefix` on `conn`, to live its time unless written again.
    pub(crate) async fn record(&self, conn: &Conn, prefix: &str) -> Result<()> {
        redis::cmd("SET")
            .arg(Wait::key_of(prefix, &self.task))
            .arg(self.encode())
            .arg("PX")
            .arg(millis(self.ttl).max(1))
            .query_async::<()>(&mut conn.clone())
            .await?;
        Ok(())
    }

    /// The key of `task`'s record under `prefix`.
    pub(crate) fn key_of(prefix: &str, task: &TaskId) -> Vec<u8> {
        format!("{prefix}{RECORDS}{task}").into_bytes()
    }

    /// The record's value: a line per field, names and label in hex so that any bytes fit.
    pub(crate) fn encode(&self) -> String {
        let since = self.since.duration_since(UNIX_EPOCH).map_or(0, millis);
        let mut out = format!("fencelock-wait 1\n{since}\n{}\n", hex(&self.label));
        for (tag, list) in [("W", &self.waits_for), ("H", &self.holds)] {
            for (kind, name) in list {
                out.push_str(&format!("{tag} {kind} {}\n", hex(name)));
            }
        }
        out
    }

    /// The record of `task` read back; `None` for a value fencelock did not write.
    pub(crate) fn decode(task: TaskId, value: &str) -> Option<Wait> {
        let mut lines = value.lines();
        if lines.next()? != "fencelock-wait 1" {
            return None;
        }
        let since = UNIX_EPOCH + Duration::from_millis(lines.next()?.parse().ok()?);
        let label = unhex(lines.next()?)?;
        let (mut waits_for, mut holds) = (Vec::new(), Vec::new());
        for line in lines {
            let mut fields = line.split(' ');
            let (tag, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            let entry = (LockKind::parse(kind)?, unhex(name)?);
            match tag {
                "W" => waits_for.push(entry),
                "H" => holds.push(entry),
                _ => return None,
            }
        }
        Some(Wait {
            task,
            label,
            since,
            waits_for,
            holds,
            ttl: Duration::ZERO,
        })
    }
}

/// When a wait that begins now began, as every process reads it back from its record: whole
/// milliseconds. A waiter compares its own wait with the others' records to learn whether it
/// is the youngest of a cycle, the one to give up; compared at a finer grain than the others
/// read it, two waits begun in the same millisecond could each find itself the younger, and
/// both give up.
pub(crate) fn wait_began(now: SystemTime) -> SystemTime {
    let since = now.duration_since(UNIX_EPOCH).map_or(0, millis);
    UNIX_EPOCH + Duration::from_millis(since)
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The most waits one graph or one check reads; more are left out, and the graph says so.
pub const MAX_RECORDED_WAITS: usize = 10_000;

/// How many records one pipeline reads.
const PAGE: usize = 100;

/// Every wait record under `prefix`, at most [`MAX_RECORDED_WAITS`] of them, and whether that
/// was all. `page` is told how many keys each `SCAN` call returned.
pub(crate) async fn read_records(
    conn: &Conn,
    prefix: &str,
    page: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<Wait>, bool)> {
    let mut matcher = Vec::with_capacity(prefix.len() + RECORDS.len() + 2);
    for &b in prefix.as_bytes() {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            matcher.push(b'\\');
        }
        matcher.push(b);
    }
    matcher.extend_from_slice(RECORDS.as_bytes());
    matcher.push(b'*');
    let mut keys = conn.clone().scan_keys(&matcher, page).await?;
    keys.sort();
    keys.dedup();
    let complete = keys.len() <= MAX_RECORDED_WAITS;
    keys.truncate(MAX_RECORDED_WAITS);
    let mut records = Vec::with_capacity(keys.len());
    for page in keys.chunks(PAGE) {
        let values = read_values(conn, page).await?;
        for (key, value) in page.iter().zip(values) {
            let (Some(value), Some(task)) = (value, task_of(prefix, key)) else {
                continue;
            };
            if let Some(wait) = std::str::from_utf8(&value)
                .ok()
                .and_then(|text| Wait::decode(task, text))
            {
                records.push(wait);
            }
        }
    }
    Ok((records, complete))
}

/// The values of `keys`: in one pipeline on one server; on a cluster, whose pipelines may not
/// cross slots (and the records' keys have no hash tag in common), one `GET` each, all under
/// way at once.
async fn read_values(conn: &Conn, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
    if conn.is_sharded() {
        let mut gets = tokio::task::JoinSet::new();
        for (at, key) in keys.iter().enumerate() {
            let (mut conn, key) = (conn.clone(), key.clone());
            gets.spawn(async move {
                let value = redis::cmd("GET")
                    .arg(key)
                    .query_async::<Option<Vec<u8>>>(&mut conn)
                    .await;
                (at, value)
            });
        }
        let mut values = vec![None; keys.len()];
        while let Some(done) = gets.join_next().await {
            let Ok((at, value)) = done else { continue };
            if let Some(slot) = values.get_mut(at) {
                *slot = value?;
            }
        }
        return Ok(values);
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.get(key);
    }
    Ok(pipe.query_async(&mut conn.clone()).await?)
}

/// The task a record's key names: `<prefix>waits:<client>/<task>`.
fn task_of(prefix: &str, key: &[u8]) -> Option<TaskId> {
    let rest = std::str::from_utf8(key)
        .ok()?
        .strip_prefix(prefix)?
        .strip_prefix(RECORDS)?;
    let (client, task) = rest.split_once('/')?;
    Some(TaskId {
        client: client.to_owned(),
        task: task.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_begins_as_others_read_it_back() {
        // 0.7 ms into a millisecond: read back by others as its whole millisecond.
        let now = UNIX_EPOCH + Duration::from_micros(1_790_000_000_123_700);
        let wait = Wait {
            task: TaskId {
                client: "abcdefgh".into(),
                task: "t7".into(),
            },
            label: String::new(),
            since: wait_began(now),
            waits_for: vec![(LockKind::Mutex, "x".into())],
            holds: Vec::new(),
            ttl: Duration::ZERO,
        };
        let read = Wait::decode(wait.task.clone(), &wait.encode()).expect("a record");
        assert_eq!(read.since, wait.since);
    }

    #[test]
    fn records_read_back_as_written() {
        let wait = Wait {
            task: TaskId {
                client: "abcdefgh".into(),
                task: "t7".into(),
            },
            label: "host a/12".into(),
            since: UNIX_EPOCH + Duration::from_millis(1_790_000_000_123),
            waits_for: vec![(LockKind::Mutex, "x y\n".into())],
            holds: vec![
                (LockKind::Semaphore, "pool".into()),
                (LockKind::RwLock, "é".into()),
            ],
            ttl: Duration::ZERO,
        };
        let back = Wait::decode(wait.task.clone(), &wait.encode());
        assert_eq!(back, Some(wait.clone()));
        assert_eq!(Wait::decode(wait.task.clone(), "junk"), None);
        assert_eq!(
            Wait::decode(wait.task.clone(), "fencelock-wait 1\n1\n4\n"),
            None
        );
    }
}
