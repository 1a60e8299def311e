//! Who waits for whom: [`Client::wait_graph`], the wait-for graph of every lock under the
//! prefix. Holders are read from each kind's storage, as [`Client::locks`] reads them; waits
//! from the records that waiters with a deadlock check or a recorded wait keep
//! (`core/waits.rs`, which also finds the cycles).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::client::Client;
use crate::core::waits::{graph, read_records, WaitGraph};
use crate::cycle::LockKind;
use crate::error::Result;

impl Client {
    /// The wait-for graph of the locks whose names match `pattern` (a Redis glob, as for
    /// [`Client::locks`]): each lock's holders and waiters, which waiting task waits for which,
    /// and every deadlock (a cycle of tasks each waiting for a lock the next one holds, any
    /// number of them, any kinds).
    ///
    /// Holders are read as [`Client::locks`] reads them, every kind included; waiters are the
    /// waits recorded by locks with
    /// [`LockOptions::deadlock_check`](crate::LockOptions::deadlock_check), from their first
    /// check on (other waiters are counted in each lock's [`LockInfo`](crate::LockInfo)). A task of one client
    /// waiting for a lock another task of the same client holds is no cycle. Both walks use
    /// `SCAN` in pages; at most [`MAX_RECORDED_WAITS`](crate::MAX_RECORDED_WAITS) waits are read.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock
    /// client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.mutex("ledger")?.lock().await?;
    /// let graph = client.wait_graph("*").await?;
    /// assert_eq!(graph.locks[0].name, "ledger");
    /// assert!(graph.cycles.is_empty());
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_graph(&self, pattern: &str) -> Result<WaitGraph> {
        self.wait_graph_with_progress(pattern, &|_| {}).await
    }

    /// [`Client::wait_graph`], telling `progress` how far the walk of the key space has come
    /// after each `SCAN` call: for a progress line while a big key space is read (the CLI's
    /// `status --graph` shows one on a terminal).
    ///
    /// # Errors
    ///
    /// As [`Client::wait_graph`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.mutex("ledger")?.lock().await?;
    /// let last = std::sync::Mutex::new(fencelock::ScanProgress::default());
    /// let graph = client
    ///     .wait_graph_with_progress("*", &|seen| *last.lock().unwrap() = seen)
    ///     .await?;
    /// assert_eq!(graph.locks.len(), 1);
    /// // A walk of the wait records, then one of the locks: one `SCAN` call each here.
    /// assert_eq!(last.lock().unwrap().scans, 2);
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_graph_with_progress(
        &self,
        pattern: &str,
        progress: &(dyn Fn(ScanProgress) + Sync),
    ) -> Result<WaitGraph> {
        let seen = Seen::default();
        let page = |keys: usize| progress(seen.page(keys));
        let conn = self.shared.nodes.only("the wait-for graph")?;
        let (records, complete) = read_records(conn, &self.shared.options.prefix, &page).await?;
        let mut infos = self.locks_scanning(pattern, &page).await?;
        // A lock waited for, outside the pattern's listing or released since, is read by name.
        let listed: BTreeSet<(LockKind, String)> =
            infos.iter().map(|i| (i.kind, i.name.clone())).collect();
        let mut extra = BTreeSet::new();
        for record in &records {
            for wanted in &record.waits_for {
                if !listed.contains(wanted) {
                    extra.insert(wanted.1.clone());
                }
            }
        }
        for name in extra {
            for info in self.locks_named(name.as_bytes()).await? {
                if !listed.contains(&(info.kind, info.name.clone())) {
                    infos.push(info);
                }
            }
        }
        Ok(graph(records, infos, complete, SystemTime::now()))
    }
}

/// How far a walk of the key space has come: see [`Client::wait_graph_with_progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanProgress {
    /// `SCAN` calls answered so far.
    pub scans: u64,
    /// Keys those calls returned that matched what is read (a key may be counted twice, as
    /// `SCAN` may return it twice).
    pub keys: u64,
}

/// The running count behind [`ScanProgress`].
#[derive(Default)]
struct Seen {
    scans: AtomicU64,
    keys: AtomicU64,
}

impl Seen {
    /// Counts one `SCAN` call that returned `keys` keys, and says how far the walk is.
    fn page(&self, keys: usize) -> ScanProgress {
        let keys = u64::try_from(keys).unwrap_or(u64::MAX);
        ScanProgress {
            scans: self.scans.fetch_add(1, Ordering::Relaxed) + 1,
            keys: self
                .keys
                .fetch_add(keys, Ordering::Relaxed)
                .saturating_add(keys),
        }
    }
}
