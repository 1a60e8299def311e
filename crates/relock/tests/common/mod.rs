//! Shared set-up for the integration tests: a real server per test and clients on it.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use relock::{Client, ClientOptions};
use relock_testkit::RedisServer;

/// Connects a client with test-friendly timeouts.
pub async fn client(server: &RedisServer) -> Client {
    client_with(server, ClientOptions::default()).await
}

/// Connects a client with the given options.
pub async fn client_with(server: &RedisServer, options: ClientOptions) -> Client {
    Client::connect_with_options(server.url().as_str(), options)
        .await
        .expect("connect to the test server")
}

/// The number of calls of one command so far, from `INFO commandstats` (0 if never called).
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("numeric call count"))
}

/// Milliseconds as a `Duration`, to keep the tests short.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A multi-threaded runtime for a worker process or an orchestrator that runs no `#[test]`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
