//! Real `redis-server` (or `valkey-server`) processes for fencelock's tests.
//!
//! Everything here drives genuine server binaries: no mocks, no in-process
//! fakes. A [`RedisServer`] owns a child process, a private temporary
//! directory (config, log, AOF) and a loopback port; it can be paused,
//! killed, restarted on the same port and directory, and inspected through
//! `redis-cli`. A [`SentinelGroup`] is a master, a replica and three
//! sentinels, with failovers on request; a [`RedisCluster`] is three masters and
//! their replicas, with failovers and slot migrations on request. A [`Proxy`] stands between
//! clients and a server and can cut them off. A [`Postgres`] is a PostgreSQL server, for
//! fenced writes to a real database. A [`FakedClock`] steps or speeds up a server's wall
//! clock (libfaketime). The [`process`] module helps integration tests
//! that need several OS processes competing for the same lock.
//!
//! Setup failures panic with a message that says what went wrong and, when a
//! server was involved, what its log said: in a test-support crate a clear
//! panic is the most useful error.
//!
//! ```no_run
//! use fencelock_testkit::{RedisServer, ServerOptions};
//!
//! let server = RedisServer::start_with(ServerOptions::default().aof_always());
//! server.cli(&["SET", "k", "v"]);
//! assert_eq!(server.cli(&["GET", "k"]), "v");
//! ```
//!
//! The server under test is Debian's `redis-server` on the `PATH` unless the environment
//! chooses another: `FENCELOCK_SERVER_DIR` (Redis 6.2 or Valkey 8 as `cargo xtask setup` fetches
//! them), or `FENCELOCK_REDIS_SERVER` and `FENCELOCK_REDIS_CLI`; see [`redis_server_path`].
//! [`server_version`] says which it is, [`tls_support`] whether it speaks TLS.
//!
//! Only Unix is supported: pausing relies on `SIGSTOP`/`SIGCONT`.

#![cfg(unix)]
// Panicking with a clear message is how this crate reports setup failures.
#![allow(clippy::expect_used, clippy::panic)]

mod bins;
mod clock;
mod cluster;
mod net;
mod options;
mod postgres;
pub mod process;
mod proxy;
mod sentinel;
mod server;
mod tls;

pub use bins::{
    redis_cli_path, redis_server_path, server_has_sharded_pubsub, server_release, server_version,
    version_of,
};
pub use clock::FakedClock;
pub use cluster::{Migration, RedisCluster};
pub use net::free_port;
pub use options::ServerOptions;
pub use postgres::{postgres_bin_dir, Postgres};
pub use process::check_no_overlap;
pub use proxy::Proxy;
pub use sentinel::SentinelGroup;
pub use server::RedisServer;
pub use tls::tls_support;

/// The URL in the environment variable `var` when it is set and not empty; otherwise a server
/// made by `start`, returned beside its URL so that the caller decides how long it lives.
fn from_env_or_start<S>(
    var: &str,
    start: impl FnOnce() -> S,
    url: impl FnOnce(&S) -> String,
) -> (String, Option<S>) {
    match std::env::var(var) {
        Ok(given) if !given.is_empty() => (given, None),
        _ => {
            let server = start();
            (url(&server), Some(server))
        }
    }
}
