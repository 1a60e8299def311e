//! The nodes a client's leases live on, and how many of them must agree.
//!
//! A client on one Redis (single server, cluster or sentinel) has one node and needs its one
//! answer. A RedLock client has several independent masters and needs a majority: every
//! request goes to all of them at once, each bounded by the node timeout, so a node that is
//! down or paused costs one vote and at most one node timeout, never the whole operation.

use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, ScriptInvocation};
use tokio::sync::mpsc;

use crate::transport::conn::Conn;

/// The nodes, and the timeout of each node's answer (none on a single node, where the
/// connection's own response timeout applies).
pub(crate) struct Quorum {
    nodes: Vec<Conn>,
    node_timeout: Option<Duration>,
}

impl Quorum {
    /// A single node: one answer decides.
    pub(crate) fn single(conn: Conn) -> Quorum {
        Quorum {
            nodes: vec![conn],
            node_timeout: None,
        }
    }

    /// Independent masters, each given `node_timeout` to answer; `None` without any.
    pub(crate) fn of(nodes: Vec<Conn>, node_timeout: Duration) -> Option<Quorum> {
        (!nodes.is_empty()).then_some(Quorum {
            nodes,
            node_timeout: Some(node_timeout),
        })
    }

    /// The first node (the only one of a single deployment). There is always one: both
    /// constructors make sure of it.
    pub(crate) fn first(&self) -> &Conn {
        &self.nodes[0]
    }

    /// How many nodes there are.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// How many nodes must agree: more than half.
    pub(crate) fn majority(&self) -> usize {
        majority(self.nodes.len())
    }

    /// Whether this is a RedLock over several masters.
    pub(crate) fn is_distributed(&self) -> bool {
        self.nodes.len() > 1
    }

    /// Runs `invocation` on every node at once, until `settled` says the answers so far
    /// decide the question. Each node's answer, in node order, is `None` when it failed, did not
    /// answer within the node timeout, or had not answered when the question was settled; with
    /// them, how many nodes were heard from (answered or failed). The requests of unsettled
    /// nodes go on in the background, each still bounded by the node timeout.
    pub(crate) async fn ask<T>(
        &self,
        invocation: ScriptInvocation<'static>,
        settled: impl Fn(&[Option<T>], usize) -> bool,
    ) -> (Vec<Option<T>>, usize)
    where
        T: FromRedisValue + Send + 'static,
    {
        let invocation = Arc::new(invocation);
        let (answered, mut answers_rx) = mpsc::unbounded_channel();
        for (node, conn) in self.nodes.iter().enumerate() {
            let request = Arc::clone(&invocation);
            let mut conn = conn.clone();
            let answered = answered.clone();
            let node_timeout = self.node_timeout;
            tokio::spawn(async move {
                let reply = request.invoke_async::<T>(&mut conn);
                let answer = match node_timeout {
                    Some(limit) => tokio::time::timeout(limit, reply)
                        .await
                        .ok()
                        .and_then(Result::ok),
                    None => reply.await.ok(),
                };
                let _ = answered.send((node, answer));
            });
        }
        drop(answered);
        let mut answers: Vec<Option<T>> = self.nodes.iter().map(|_| None).collect();
        let mut heard = 0;
        while let Some((node, answer)) = answers_rx.recv().await {
            heard += 1;
            if let Some(slot) = answers.get_mut(node) {
                *slot = answer;
            }
            if heard == answers.len() || settled(&answers, heard) {
                break;
            }
        }
        (answers, heard)
    }

    /// [`ask`](Quorum::ask) until every node answered or timed out.
    pub(crate) async fn ask_all<T>(&self, invocation: ScriptInvocation<'static>) -> Vec<Option<T>>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.ask(invocation, |_, _| false).await.0
    }

    /// Whether `heard` answers settle a yes-or-no question: a majority said yes, or so many
    /// said anything else (or failed) that a majority of yes is out of reach.
    pub(crate) fn settles(&self, yes: usize, heard: usize) -> bool {
        self.verdict(yes, heard - yes).is_some()
    }

    /// Where a verdict stands after some nodes said yes and some said no: decided when a
    /// majority agrees either way, `None` while the silent nodes could still tip it.
    pub(crate) fn verdict(&self, yes: usize, no: usize) -> Option<bool> {
        verdict(self.nodes.len(), yes, no)
    }
}

fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

fn verdict(nodes: usize, yes: usize, no: usize) -> Option<bool> {
    if yes >= majority(nodes) {
        Some(true)
    } else if no > nodes - majority(nodes) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_decides_either_way() {
        for (nodes, needed) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            assert_eq!(majority(nodes), needed);
        }
        assert_eq!(verdict(1, 1, 0), Some(true));
        assert_eq!(verdict(1, 0, 1), Some(false));
        assert_eq!(verdict(1, 0, 0), None);
        assert_eq!(verdict(5, 3, 0), Some(true));
        assert_eq!(verdict(5, 2, 2), None, "the fifth node decides");
        assert_eq!(verdict(5, 2, 3), Some(false));
        assert_eq!(verdict(5, 0, 2), None);
    }
}
