//! Shared set-up for the integration tests: a real server per test and clients on it.

#![allow(dead_code, unreachable_pub)]

pub mod handoff;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Error, Holder};
use fencelock_testkit::process::Workers;
use fencelock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

/// Whether the mutex `name` (under the default prefix) is held: a released one keeps only the
/// name's last fence in its key, `~<fence>`.
pub fn mutex_is_held(server: &RedisServer, name: &str) -> bool {
    let value = server.cli(&["GET", &format!("fencelock:{{{name}}}:mutex")]);
    !value.is_empty() && !value.starts_with('~')
}

/// The Redis URL a multi-process test's orchestrator hands its workers.
pub const URL_ENV: &str = "FENCELOCK_TEST_REDIS_URL";
/// How many tasks each worker process runs.
pub const TASKS_ENV: &str = "FENCELOCK_TEST_TASKS";
/// How many times each worker task goes through its critical section.
pub const ITERATIONS_ENV: &str = "FENCELOCK_TEST_ITERATIONS";

/// A multi-process workload: `processes` workers, each running `tasks` tasks that each go
/// `iterations` times through their critical section.
pub struct Workload {
    pub processes: usize,
    pub tasks: usize,
    pub iterations: usize,
}

impl Workload {
    /// Critical sections in all.
    pub fn total(&self) -> usize {
        self.processes * self.tasks * self.iterations
    }

    /// Spawns the workers in `role`, told the server, tasks and iterations through [`URL_ENV`],
    /// [`TASKS_ENV`] and [`ITERATIONS_ENV`], and lets them all begin at once when each has
    /// connected, within `startup`: start-up time must not leave the first ones to run
    /// uncontended.
    pub fn start(&self, server: &RedisServer, role: &str, startup: Duration) -> Workers {
        let envs = [
            (URL_ENV, server.url()),
            (TASKS_ENV, self.tasks.to_string()),
            (ITERATIONS_ENV, self.iterations.to_string()),
        ];
        let mut workers = Workers::spawn(role, self.processes, &envs);
        workers.start_together(Instant::now() + startup);
        workers
    }
}

/// Connects a client with test-friendly timeouts.
///
/// Without a holder label: the raw values and hash fields the tests read are those of bare
/// holds. A test of labels gives its own, or the default's, through [`client_with`].
pub async fn client(server: &RedisServer) -> Client {
    client_with(server, ClientOptions::default().holder_label("")).await
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

/// The lease left, at most `lease`, when `result` is the expected [`Error::Held`] with a known
/// expiry; panics on anything else. `when` says at which step, for the message.
pub fn expect_held_for<T: Debug>(
    result: fencelock::Result<T>,
    lease: Duration,
    when: &str,
) -> Duration {
    match result {
        Err(Error::Held {
            remaining: Some(left),
            ..
        }) => {
            assert!(
                left <= lease,
                "{when}: lease left {left:?} exceeds the lease"
            );
            left
        }
        Err(Error::Held {
            remaining: None, ..
        }) => panic!("{when}: held without an expiry"),
        Ok(granted) => panic!("{when}: granted ({granted:?}), expected Held"),
        Err(other) => panic!("{when}: failed with {other}, expected Held"),
    }
}

/// Takes and releases, once each, a read and a write hold of the read-write lock `name`, a
/// permit of the semaphore `name`, the fair mutex `name`, and the multi-mutex of `name` and
/// `ledger`.
pub async fn take_each_primitive(client: &Client, holder: &Holder, name: &str) {
    let rw = client.rwlock(name).expect("name");
    let read = rw.read_as(holder).await.expect("read");
    read.unlock().await.expect("unlock");
    let write = rw.write_as(holder).await.expect("write");
    write.unlock().await.expect("unlock");
    let semaphore = client.semaphore(name, 2).expect("name");
    let permit = semaphore.acquire().await.expect("permit");
    permit.release().await.expect("release");
    let fair = client.fair_mutex(name).expect("name");
    let first = fair.lock().await.expect("lock");
    first.unlock().await.expect("unlock");
    let multi = client.multi_mutex([name, "ledger"]).expect("names");
    let all = multi.lock().await.expect("lock");
    all.unlock().await.expect("unlock");
}

/// A multi-threaded runtime for a worker process or an orchestrator that runs no `#[test]`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A worker's fencelock client, and a plain connection for the data its critical sections touch.
pub async fn connect_with_raw(url: &str) -> (Client, MultiplexedConnection) {
    let client = Client::connect(url)
        .await
        .expect("the worker connects to redis");
    // A loaded machine can take longer than the default half second to answer a test's
    // bookkeeping; what the tests measure goes through `client`.
    let patient =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let conn = redis::Client::open(url)
        .expect("valid redis url")
        .get_multiplexed_async_connection_with_config(&patient)
        .await
        .expect("the worker opens a raw redis connection");
    (client, conn)
}

/// Waits for every task of a worker's workload, at most `limit` in all, and returns their
/// results; panics if a task panicked or the time ran out.
pub async fn join_within<T: 'static>(mut set: JoinSet<T>, limit: Duration) -> Vec<T> {
    let all = async {
        let mut results = Vec::with_capacity(set.len());
        while let Some(done) = set.join_next().await {
            results.push(done.expect("a worker task panicked"));
        }
        results
    };
    tokio::time::timeout(limit, all)
        .await
        .unwrap_or_else(|_| panic!("the worker's tasks did not finish within {limit:?}"))
}

/// Polls until `check` holds, for at most `limit`, letting the runtime's tasks run in between;
/// says whether it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        tokio::time::sleep(ms(10)).await;
    }
    check()
}

/// Every message published on a channel matching `pattern` while `during` runs, and for half a
/// second after it, as (channel, payload).
pub async fn published_during<F: std::future::Future>(
    server: &RedisServer,
    pattern: &str,
    during: F,
) -> Vec<(String, String)> {
    let mut pubsub = redis::Client::open(server.url().as_str())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub.psubscribe(pattern).await.expect("psubscribe");
    during.await;
    let mut messages = pubsub.on_message();
    let mut published = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(
        Duration::from_millis(500),
        std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut messages), cx)
        }),
    )
    .await
    {
        let payload: String = message.get_payload().expect("a text payload");
        published.push((message.get_channel_name().to_owned(), payload));
    }
    published
}
