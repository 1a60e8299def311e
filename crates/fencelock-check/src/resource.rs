//! The protected resource: a counter in a Redis of its own, never faulted, that critical
//! sections increment with a non-atomic read-modify-write. Fenced strategies pass the grant's
//! fence with every access, and the resource refuses an access whose fence is lower than the
//! highest it has seen.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use crate::error::Result;

/// How long a worker waits for an answer of the resource.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The key of lane `lane`'s counter (each lane, one lock name, protects a counter of its own).
pub fn counter_key(lane: usize) -> String {
    format!("fencelock-check:counter:{lane}")
}

/// The key of the highest fence lane `lane`'s counter has seen.
fn fence_key(lane: usize) -> String {
    format!("fencelock-check:fence:{lane}")
}

/// A worker's connection to the protected counter of one lane.
#[derive(Clone)]
pub struct Resource {
    conn: ConnectionManager,
    counter: String,
    fence: String,
    read: Script,
    write: Script,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource").finish_non_exhaustive()
    }
}

impl Resource {
    /// Connects to the resource's Redis at `url`, for lane 0.
    ///
    /// # Errors
    ///
    /// When the URL is malformed or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Resource> {
        // The resource is never faulted, but the machine that runs a cell may be loaded: an
        // answer later than the redis crate's half-second default would fail the worker
        // ("redis: timed out"), which says nothing of the lock.
        let config = ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
        let conn = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
        Ok(Resource {
            conn,
            counter: counter_key(0),
            fence: fence_key(0),
            read: Script::new(include_str!("lua/fenced_read.lua")),
            write: Script::new(include_str!("lua/fenced_write.lua")),
        })
    }

    /// The counter of lane `lane`, on the same connection.
    pub fn for_lane(&self, lane: usize) -> Resource {
        Resource {
            counter: counter_key(lane),
            fence: fence_key(lane),
            ..self.clone()
        }
    }

    /// Reads the counter; with a fence, `None` when the resource refused it.
    ///
    /// # Errors
    ///
    /// When the resource's Redis fails.
    pub async fn read(&mut self, fence: Option<u64>) -> Result<Option<i64>> {
        match fence {
            None => {
                let value: Option<i64> = self.conn.get(&self.counter).await?;
                Ok(Some(value.unwrap_or(0)))
            }
            Some(fence) => {
                let (granted, value): (i64, i64) = self
                    .read
                    .key(&self.counter)
                    .key(&self.fence)
                    .arg(fence)
                    .invoke_async(&mut self.conn)
                    .await?;
                Ok((granted == 1).then_some(value))
            }
        }
    }

    /// Writes `value` to the counter; with a fence, whether the resource accepted it.
    ///
    /// # Errors
    ///
    /// When the resource's Redis fails.
    pub async fn write(&mut self, fence: Option<u64>, value: i64) -> Result<bool> {
        match fence {
            None => {
                let () = self.conn.set(&self.counter, value).await?;
                Ok(true)
            }
            Some(fence) => {
                let stored: i64 = self
                    .write
                    .key(&self.counter)
                    .key(&self.fence)
                    .arg(fence)
                    .arg(value)
                    .invoke_async(&mut self.conn)
                    .await?;
                Ok(stored == 1)
            }
        }
    }
}

/// The final value of each of `lanes` lanes' counters, read by the checker after every worker
/// exited.
///
/// # Errors
///
/// When the resource's Redis cannot be reached.
pub fn final_counters(url: &str, lanes: usize) -> Result<Vec<i64>> {
    let mut conn = redis::Client::open(url)?.get_connection()?;
    (0..lanes)
        .map(|lane| {
            let value: Option<i64> = redis::cmd("GET").arg(counter_key(lane)).query(&mut conn)?;
            Ok(value.unwrap_or(0))
        })
        .collect()
}
