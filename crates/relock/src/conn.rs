//! The command connection, whatever the deployment behind it: every script and command of the
//! library goes through [`Conn`], so a primitive never knows which kind of Redis it talks to.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A cheap-to-clone, multiplexed connection that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One Redis server.
    Single(ConnectionManager),
}

impl Conn {
    /// Whether the deployment shards keys over several masters, so that scripts announce
    /// releases with sharded pub/sub (`SPUBLISH`).
    pub(crate) fn is_sharded(&self) -> bool {
        match self {
            Conn::Single(_) => false,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
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
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
        }
    }
}
