//! The protected resource: a counter in a Redis of its own, never faulted, that critical
//! sections increment with a non-atomic read-modify-write. Fenced strategies pass the grant's
//! fence with every access, and the resource refuses an access whose fence is lower than the
//! highest it has seen.

use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};

use crate::error::Result;

/// The counter's key.
pub const COUNTER_KEY: &str = "relock-check:counter";
/// The key of the highest fence the resource has seen.
pub const FENCE_KEY: &str = "relock-check:fence";

/// A worker's connection to the protected counter.
#[derive(Clone)]
pub struct Resource {
    conn: ConnectionManager,
    read: Script,
    write: Script,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource").finish_non_exhaustive()
    }
}

impl Resource {
    /// Connects to the resource's Redis at `url`.
    ///
    /// # Errors
    ///
    /// When the URL is malformed or the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Resource> {
        let conn = ConnectionManager::new(redis::Client::open(url)?).await?;
        Ok(Resource {
            conn,
            read: Script::new(include_str!("lua/fenced_read.lua")),
            write: Script::new(include_str!("lua/fenced_write.lua")),
        })
    }

    /// Reads the counter; with a fence, `None` when the resource refused it.
    ///
    /// # Errors
    ///
    /// When the resource's Redis fails.
    pub async fn read(&mut self, fence: Option<u64>) -> Result<Option<i64>> {
        match fence {
            None => {
                let value: Option<i64> = self.conn.get(COUNTER_KEY).await?;
                Ok(Some(value.unwrap_or(0)))
            }
            Some(fence) => {
                let (granted, value): (i64, i64) = self
                    .read
                    .key(COUNTER_KEY)
                    .key(FENCE_KEY)
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
                let () = self.conn.set(COUNTER_KEY, value).await?;
                Ok(true)
            }
            Some(fence) => {
                let stored: i64 = self
                    .write
                    .key(COUNTER_KEY)
                    .key(FENCE_KEY)
                    .arg(fence)
                    .arg(value)
                    .invoke_async(&mut self.conn)
                    .await?;
                Ok(stored == 1)
            }
        }
    }
}

/// The counter's final value, read by the checker after every worker exited.
///
/// # Errors
///
/// When the resource's Redis cannot be reached.
pub fn final_counter(url: &str) -> Result<i64> {
    let mut conn = redis::Client::open(url)?.get_connection()?;
    let value: Option<i64> = redis::cmd("GET").arg(COUNTER_KEY).query(&mut conn)?;
    Ok(value.unwrap_or(0))
}
