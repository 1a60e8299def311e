//! Who waits for whom: [`Client::wait_graph`], the wait-for graph of every lock under the
//! prefix. Holders are read from each kind's storage, as [`Client::locks`] reads them; waits
//! from the records that waiters with a deadlock check or a recorded wait keep
//! (`core/waits.rs`, which also finds the cycles).

use std::collections::BTreeSet;
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
        let conn = self.shared.nodes.only("the wait-for graph")?;
        let (records, complete) = read_records(conn, &self.shared.options.prefix).await?;
        let mut infos = self.locks(pattern).await?;
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
