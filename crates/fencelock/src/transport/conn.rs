//! The command connection, whatever the deployment behind it: every script and command of the
//! library goes through [`Conn`], so a primitive never knows which kind of Redis it talks to.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
#[cfg(feature = "cluster")]
use redis::FromRedisValue;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

#[cfg(feature = "sentinel")]
use crate::transport::sentinel::SentinelConn;

/// A hash slot of Redis Cluster: the keys of one slot may go into one script.
#[cfg(feature = "cluster")]
pub(crate) use redis::cluster_routing::Slot;
/// Without Cluster support one server holds every key: there is never a slot to tell apart.
#[cfg(not(feature = "cluster"))]
pub(crate) type Slot = std::convert::Infallible;

/// A node of a Redis Cluster to address a command to; nothing to choose from without Cluster
/// support.
#[cfg(feature = "cluster")]
type Node = SingleNodeRoutingInfo;
#[cfg(not(feature = "cluster"))]
type Node = std::convert::Infallible;

/// A cheap-to-clone, multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One Redis server.
    Single(ConnectionManager),
    /// The master of a Sentinel deployment, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConn),
    /// A Redis Cluster: each command goes to the master of its first key's slot.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection, Announce),
}

/// How a cluster announces releases, chosen once at connect by its masters' version.
#[cfg(feature = "cluster")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announce {
    /// Sharded pub/sub (`SPUBLISH`): on the master of the name's slot only.
    Sharded,
    /// Plain pub/sub (`PUBLISH`), which a cluster broadcasts to every node: Redis 6.2 has
    /// nothing else.
    Broadcast,
}

impl Conn {
    /// Whether the deployment shards keys over several masters.
    pub(crate) fn is_sharded(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self, Conn::Cluster(..));
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// Whether releases are announced with sharded pub/sub (`SPUBLISH`), and waiters
    /// subscribe with `SSUBSCRIBE`.
    pub(crate) fn announces_sharded(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self, Conn::Cluster(_, Announce::Sharded));
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// The shard a key lives on, for deployments that shard: keys of one shard may go into
    /// one script. `None` where one server holds every key.
    // Only a cluster routes by key.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) fn shard_of(&self, key: &[u8]) -> Option<Slot> {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(..) => Some(Slot::for_key(key)),
            _ => None,
        }
    }

    /// What [`wait_for_replicas`](Self::wait_for_replicas) needs to know of the connection
    /// a write is about to go through: taken before the write, given to the `WAIT` after it.
    pub(crate) fn replication_mark(&self) -> ReplicationMark {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(conn) => ReplicationMark(conn.generation()),
            _ => ReplicationMark(None),
        }
    }

    /// Sends `WAIT replicas timeout` to the master that holds `routing_key`, over the
    /// connection the writes since `mark` went through, and returns how many replicas
    /// acknowledged every write sent on that connection before the `WAIT`.
    ///
    /// The server blocks the whole connection while it waits, for at most `timeout`.
    #[cfg_attr(
        not(all(feature = "cluster", feature = "sentinel")),
        allow(unused_variables)
    )]
    pub(crate) async fn wait_for_replicas(
        &mut self,
        routing_key: &[u8],
        replicas: usize,
        timeout: Duration,
        mark: ReplicationMark,
    ) -> RedisResult<usize> {
        let wait = wait_command(replicas, timeout);
        match self {
            Conn::Single(conn) => wait.query_async(conn).await,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(conn) => conn.wait(&wait, mark.0).await,
            // The cluster keeps one connection per node, so the WAIT follows the grant's
            // writes on the same connection to the same master.
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn, _) => {
                let master = Route::with_key(routing_key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
                let reply = conn.route_command(wait, routing).await?;
                Ok(usize::from_redis_value(reply)?)
            }
        }
    }
}

/// Which master connection a write went through, where a deployment may replace it (a
/// Sentinel's master connection, after a failover): a `WAIT` on a newer connection would not
/// cover the write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplicationMark(Option<u64>);

/// How many keys one `SCAN` call asks for.
const SCAN_COUNT: usize = 1000;

impl Conn {
    /// Every key matching the `SCAN MATCH` pattern `matcher`, on every master of the
    /// deployment. A key may be listed more than once. `page` is told, after each `SCAN`
    /// call, how many matching keys it returned.
    pub(crate) async fn scan_keys(
        &mut self,
        matcher: &[u8],
        page: &(dyn Fn(usize) + Sync),
    ) -> RedisResult<Vec<Vec<u8>>> {
        #[cfg(feature = "cluster")]
        if let Conn::Cluster(conn, _) = self {
            let nodes: String = conn
                .route_command(
                    redis::cmd("CLUSTER").arg("NODES").clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
                )
                .await
                .and_then(|v| Ok(String::from_redis_value(v)?))?;
            let mut keys = Vec::new();
            for (host, port) in masters_serving_slots(&nodes) {
                let at = SingleNodeRoutingInfo::ByAddress { host, port };
                keys.extend(scan_node(self, matcher, Some(at), page).await?);
            }
            return Ok(keys);
        }
        scan_node(self, matcher, None, page).await
    }
}

/// `SCAN`s one node to the end: the only node, or the cluster node `at`.
async fn scan_node(
    conn: &mut Conn,
    matcher: &[u8],
    at: Option<Node>,
    page: &(dyn Fn(usize) + Sync),
) -> RedisResult<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(matcher)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, batch): (u64, Vec<Vec<u8>>) = match (&mut *conn, &at) {
            #[cfg(feature = "cluster")]
            (Conn::Cluster(cluster, _), Some(at)) => {
                let routing = RoutingInfo::SingleNode(at.clone());
                FromRedisValue::from_redis_value(cluster.route_command(scan, routing).await?)?
            }
            (conn, _) => scan.query_async(conn).await?,
        };
        page(batch.len());
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            return Ok(keys);
        }
    }
}

/// The addresses of the masters that serve slots, from a `CLUSTER NODES` reply:
/// `<id> <host:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`.
#[cfg(feature = "cluster")]
fn masters_serving_slots(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serves = fields.len() > 8;
            let master = flags.split(',').any(|f| f == "master");
            let failed = flags.split(',').any(|f| f == "fail" || f == "noaddr");
            if !(master && serves) || failed {
                return None;
            }
            let address = fields.get(1)?.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// `WAIT replicas timeout_ms`; at least 1 ms, since 0 would block for ever.
fn wait_command(replicas: usize, timeout: Duration) -> Cmd {
    let millis = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut wait = redis::cmd("WAIT");
    wait.arg(replicas).arg(millis);
    wait
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn, _) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(conn) => conn.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn, _) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(conn) => conn.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn, _) => conn.get_db(),
        }
    }
}

#[cfg(all(test, feature = "cluster"))]
mod tests {
    use super::*;

    #[test]
    fn masters_that_serve_slots_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922 [10923->-c3]
c3 10.0.0.3:7002@17002 master,fail - 0 0 3 disconnected 10923-16383
d4 127.0.0.1:7003@17003 slave a1 0 0 1 connected
e5 127.0.0.1:7004@17004 master - 0 0 0 connected";
        assert_eq!(
            masters_serving_slots(nodes),
            vec![
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001)
            ]
        );
    }
}
