//! A waiter's part: its wait recorded once per check interval while it waits and, with the
//! deadlock check, every record read with the holds of what they wait for, to learn whether
//! it is the waiter a cycle must refuse; its record deleted when the wait ends, however it
//! ends.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::core::live_holds::LiveHolds;
use crate::core::nodes::Nodes;
use crate::core::waits::graph::find_cycles;
use crate::core::waits::holders::Holders;
use crate::core::waits::record::{read_records, wait_began, Wait};
use crate::cycle::{LockKind, Task, WaitCycle};
use crate::error::Result;
use crate::options::ClientOptions;
use crate::token::client_tag;

/// A client, as the waits feature uses it: the one node its records live on, its options (key
/// prefix, label, inherited holds), its id, what its tasks hold, and the reading of every
/// kind's holds that the façade installed. Lent by `Shared::waits`.
#[derive(Clone, Copy)]
pub(crate) struct ClientWaits<'a> {
    pub(crate) nodes: &'a Nodes,
    pub(crate) options: &'a ClientOptions,
    pub(crate) id: &'a str,
    pub(crate) holds: &'a LiveHolds,
    pub(crate) holders: &'a dyn Holders,
}

/// A waiter's part in the deadlock check: its wait, the checks it ran, and the deletion of its
/// record when the wait ends, however it ends.
pub(crate) struct Checker<'a> {
    client: ClientWaits<'a>,
    task: Task,
    kind: LockKind,
    names: Vec<String>,
    since: SystemTime,
    every: Duration,
    /// Whether the waiter gives up when its wait closes a cycle, or only records it.
    pub(crate) refuses: bool,
    recorded: AtomicBool,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(
        client: ClientWaits<'a>,
        kind: LockKind,
        names: Vec<String>,
        every: Duration,
        refuses: bool,
    ) -> Checker<'a> {
        Checker {
            client,
            task: Task::current(),
            kind,
            names,
            since: wait_began(SystemTime::now()),
            every,
            refuses,
            recorded: AtomicBool::new(false),
        }
    }

    /// How long between checks.
    pub(crate) fn every(&self) -> Duration {
        self.every
    }

    /// Records the wait and, for a waiter that gives up for a deadlock, checks it: the cycle to
    /// give up for, if this waiter is the one. A waiter that only records writes its record and
    /// reads nothing.
    pub(crate) async fn check(&self) -> Result<Option<WaitCycle>> {
        let client = &self.client;
        let wait = Wait {
            task: self.task.of_client(client_tag(client.id)),
            label: client.options.holder_label.clone(),
            since: self.since,
            waits_for: self.names.iter().map(|n| (self.kind, n.clone())).collect(),
            holds: client
                .holds
                .taken_by(self.task)
                .into_iter()
                .chain(client.options.inherited_holds.iter().cloned())
                .collect(),
            ttl: self.every.saturating_mul(3) + Duration::from_secs(2),
        };
        self.recorded.store(true, Ordering::Relaxed);
        if !self.refuses {
            let conn = client.nodes.only("the wait-for graph")?;
            wait.record(conn, &client.options.prefix).await?;
            return Ok(None);
        }
        self.cycle_through(wait).await
    }

    /// The deadlock check of `wait`: records it, reads every record and the holds of what they
    /// wait for, and answers the cycle through `wait` when its wait began last of the cycle's.
    async fn cycle_through(&self, wait: Wait) -> Result<Option<WaitCycle>> {
        let conn = self.client.nodes.only("the deadlock check")?;
        let prefix = &self.client.options.prefix;
        wait.record(conn, prefix).await?;
        let (mut records, _) = read_records(conn, prefix, &|_| {}).await?;
        records.retain(|r| r.task != wait.task);
        let task = wait.task.clone();
        records.push(wait);
        let names: BTreeSet<String> = records
            .iter()
            .flat_map(|r| r.waits_for.iter().map(|(_, name)| name.clone()))
            .collect();
        let infos = self
            .client
            .holders
            .held(conn, prefix, names.into_iter().collect())
            .await?;
        let found = find_cycles(&records, &infos, SystemTime::now());
        Ok(found.into_iter().find(|cycle| {
            cycle
                .youngest()
                .is_some_and(|youngest| youngest.waiter == task)
        }))
    }
}

impl Drop for Checker<'_> {
    fn drop(&mut self) {
        if !self.recorded.load(Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(conn) = self.client.nodes.only("the deadlock check") else {
            return;
        };
        let mut conn = conn.clone();
        let key = Wait::key_of(
            &self.client.options.prefix,
            &self.task.of_client(client_tag(self.client.id)),
        );
        // Best effort: a record left behind ends with its expiry.
        runtime.spawn(async move {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
        });
    }
}
