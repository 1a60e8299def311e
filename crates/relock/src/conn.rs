//! The command connection, whatever the deployment behind it: every script and command of the
//! library goes through [`Conn`], so a primitive never knows which kind of Redis it talks to.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

use crate::sentinel::SentinelConn;

/// A cheap-to-clone, multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One Redis server.
    Single(ConnectionManager),
    /// The master of a Sentinel deployment, followed across failovers.
    Sentinel(SentinelConn),
    /// A Redis Cluster: each command goes to the master of its first key's slot.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether the deployment shards keys over several masters, so that scripts announce
    /// releases with sharded pub/sub (`SPUBLISH`).
    pub(crate) fn is_sharded(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// The shard a key lives on, for deployments that shard: keys of one shard may go into
    /// one script. `None` where one server holds every key.
    pub(crate) fn shard_of(&self, key: &[u8]) -> Option<Slot> {
        self.is_sharded().then(|| Slot::for_key(key))
    }

    /// Sends `WAIT replicas timeout` to the master that holds `routing_key`, over the
    /// connection this handle sent its last command through, and returns how many replicas
    /// acknowledged every write sent on that connection before the `WAIT`.
    ///
    /// The server blocks the whole connection while it waits, for at most `timeout`.
    pub(crate) async fn wait_for_replicas(
        &mut self,
        routing_key: &[u8],
        replicas: usize,
        timeout: Duration,
    ) -> RedisResult<usize> {
        let wait = wait_command(replicas, timeout);
        match self {
            Conn::Single(conn) => wait.query_async(conn).await,
            Conn::Sentinel(conn) => conn.wait(&wait).await,
            // The cluster keeps one connection per node, so the WAIT follows the grant's
            // writes on the same connection to the same master.
            Conn::Cluster(conn) => {
                let master = Route::with_key(routing_key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
                let reply = conn.route_command(wait, routing).await?;
                Ok(usize::from_redis_value(reply)?)
            }
        }
    }
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
            Conn::Sentinel(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
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
            Conn::Sentinel(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Sentinel(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}
