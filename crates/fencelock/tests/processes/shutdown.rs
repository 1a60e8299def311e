//! Locks held as a process exits, against a real `redis-server`.
//!
//! - `shutdown_before_exit_frees_the_lock_at_once`: 100 child processes, one after another,
//!   each on a current-thread runtime: take a lock with a 30 s lease (fixed for every other
//!   child, renewed for the rest), call `Client::shutdown` with the guard still alive, and
//!   return from `main`. Right after each child exited, a fresh `try_lock` from this process
//!   must get the lock, every time.
//! - `dropping_the_guard_at_exit_is_best_effort`: the same children, but dropping the guard as
//!   they return instead of shutting down. A drop only queues the release to the client's
//!   background task, which the runtime stops as `main` returns, so the lock often stays held
//!   for its lease: the scenario counts how often and prints it, and asserts nothing about it
//!   (no guarantee is documented).

use std::time::{Duration, Instant};

use crate::common::{self, URL_ENV};
use fencelock::{Client, Error, Lease, LockOptions};
use fencelock_testkit::process::{env_var, Workers};
use fencelock_testkit::RedisServer;

/// Worker role: takes the lock named in [`NAME_ENV`] and exits as [`EXIT_ENV`] says.
const EXITING_HOLDER: &str = "shutdown::exiting-holder";
const NAME_ENV: &str = "FENCELOCK_TEST_LOCK_NAME";
/// `shutdown` or `drop`.
const EXIT_ENV: &str = "FENCELOCK_TEST_EXIT";
/// `fixed` or `renewed`.
const LEASE_ENV: &str = "FENCELOCK_TEST_LEASE";

/// How many children each scenario runs.
const CHILDREN: usize = 100;
/// Long enough that a lock left held by a child is still held when the parent looks, however
/// loaded the machine is.
const LEASE: Duration = Duration::from_secs(30);
/// Generous bound on one child's whole life (start, connect, lock, exit) on a loaded box.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

/// The scenarios, named as libtest names the tests of module `shutdown`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "shutdown::shutdown_before_exit_frees_the_lock_at_once",
        shutdown_before_exit_frees_the_lock_at_once,
    ),
    (
        "shutdown::dropping_the_guard_at_exit_is_best_effort",
        dropping_the_guard_at_exit_is_best_effort,
    ),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] = &[(EXITING_HOLDER, exiting_holder)];

fn shutdown_before_exit_frees_the_lock_at_once() {
    let left_held = run_children("shutdown");
    assert!(
        left_held.is_empty(),
        "after a shutdown and exit, these children's locks were still held: {left_held:?}"
    );
}

fn dropping_the_guard_at_exit_is_best_effort() {
    let left_held = run_children("drop");
    println!(
        "    guard dropped at exit: the lock stayed held after {} of {CHILDREN} children",
        left_held.len()
    );
}

/// Runs [`CHILDREN`] children one after another, each on a lock of its own, and returns the
/// children whose lock a fresh `try_lock` found held right after they exited.
fn run_children(exit: &str) -> Vec<usize> {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = common::runtime();
    let client = runtime
        .block_on(Client::connect(url.as_str()))
        .expect("connect");
    let mut left_held = Vec::new();
    for child in 0..CHILDREN {
        let name = format!("exit-{exit}-{child}");
        let lease = if child % 2 == 0 { "fixed" } else { "renewed" };
        let mut workers = Workers::spawn(
            EXITING_HOLDER,
            1,
            &[
                (URL_ENV, url.clone()),
                (NAME_ENV, name.clone()),
                (EXIT_ENV, exit.to_owned()),
                (LEASE_ENV, lease.to_owned()),
            ],
        );
        workers.reap_all_successful(Instant::now() + CHILD_LIMIT);
        let mutex = client.mutex(&name).expect("valid name");
        match runtime.block_on(mutex.try_lock()) {
            Ok(guard) => runtime.block_on(guard.unlock()).expect("unlock"),
            Err(Error::Held { .. }) => left_held.push(child),
            Err(other) => panic!("try_lock after child {child} exited: {other}"),
        }
    }
    runtime.block_on(client.shutdown()).expect("shutdown");
    left_held
}

/// Takes the lock, then leaves `main` the way the parent asked: shutting the client down with
/// the guard still alive, or only dropping the guard on the way out.
fn exiting_holder() {
    let url = env_var(URL_ENV);
    let name = env_var(NAME_ENV);
    let lease = match env_var(LEASE_ENV).as_str() {
        "fixed" => Lease::Fixed(LEASE),
        _ => Lease::Renewed(LEASE),
    };
    let shutdown = env_var(EXIT_ENV) == "shutdown";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let client = Client::connect(url.as_str()).await.expect("connect");
        let options = LockOptions::default().lease(lease);
        let mutex = client.mutex_with_options(name, options).expect("mutex");
        let _guard = mutex.try_lock().await.expect("the lock is free");
        if shutdown {
            client.shutdown().await.expect("shutdown");
        }
    });
}
