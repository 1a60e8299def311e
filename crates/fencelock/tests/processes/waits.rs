//! Deadlocks across real OS processes, against a real `redis-server`: each worker process holds
//! one lock and then waits for another with a deadlock check, as its plan says.
//!
//! - `two_processes_a_then_b_against_b_then_a`: one process takes mutex A then B, the other B
//!   then A. The one that began waiting last gets `Error::Deadlock`, whose cycle names both
//!   processes by their default labels (`<host>/<pid>`); the other then gets its lock.
//! - `three_processes_of_mixed_kinds`: a semaphore's only permit then a write lock; the write
//!   lock then a fair mutex; the fair mutex then the semaphore. The last to wait is refused.
//! - `a_long_wait_across_processes_is_not_refused`: one process holds A for several check
//!   intervals while it waits for nothing; the other holds B and waits for A. No cycle: the
//!   waiter is granted A when it is released, never refused.

use std::time::{Duration, Instant};

use fencelock::{Client, Error, Guard, Handle, LockOptions};
use fencelock_testkit::process::{env_var, hear, say, worker_index, Event, Workers};
use fencelock_testkit::RedisServer;

use crate::common::{runtime, URL_ENV};

const TAKE: &str = "waits::take";

/// Each worker's plan, `|`-separated by worker: `<held>><waited>[@<ms to hold>]`, each lock as
/// `<kind>:<name>`; a waited `-` waits for nothing and releases after the hold.
const PLAN_ENV: &str = "FENCELOCK_TEST_WAITS_PLAN";

/// How long a waiter waits before it checks, and between checks.
const CHECK: Duration = Duration::from_millis(200);
/// Bounds every wait: a deadlock not refused fails the scenario instead of hanging it.
const LIMIT: Duration = Duration::from_secs(15);
const SCENARIO_LIMIT: Duration = Duration::from_secs(60);

pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "waits::two_processes_a_then_b_against_b_then_a",
        two_processes_a_then_b_against_b_then_a,
    ),
    (
        "waits::three_processes_of_mixed_kinds",
        three_processes_of_mixed_kinds,
    ),
    (
        "waits::a_long_wait_across_processes_is_not_refused",
        a_long_wait_across_processes_is_not_refused,
    ),
];

pub(crate) const WORKERS: &[(&str, fn())] = &[(TAKE, take)];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn two_processes_a_then_b_against_b_then_a() {
    let outcomes = run(&["mutex:A>mutex:B", "mutex:B>mutex:A"]);
    assert_eq!(outcomes[0].0, "GRANTED", "{outcomes:?}");
    assert!(outcomes[1].0.starts_with("DEADLOCK"), "{outcomes:?}");
    // The cycle names both processes by their default labels, `<host>/<pid>`.
    let cycle = &outcomes[1].0;
    for (_, pid) in &outcomes {
        assert!(cycle.contains(&format!("/{pid})")), "{pid} not in {cycle}");
    }
    println!("    {cycle}");
}

fn three_processes_of_mixed_kinds() {
    let outcomes = run(&[
        "semaphore:S>write:W",
        "write:W>fair:F",
        "fair:F>semaphore:S",
    ]);
    assert_eq!(outcomes[0].0, "GRANTED", "{outcomes:?}");
    assert_eq!(outcomes[1].0, "GRANTED", "{outcomes:?}");
    let cycle = &outcomes[2].0;
    assert!(cycle.starts_with("DEADLOCK"), "{outcomes:?}");
    for kind in ["semaphore \"S\"", "rwlock \"W\"", "fair-mutex \"F\""] {
        assert!(cycle.contains(kind), "{kind} not in {cycle}");
    }
    println!("    {cycle}");
}

fn a_long_wait_across_processes_is_not_refused() {
    let outcomes = run(&["mutex:A>-@1500", "mutex:B>mutex:A"]);
    assert_eq!(outcomes[0].0, "RELEASED", "{outcomes:?}");
    assert_eq!(outcomes[1].0, "GRANTED", "{outcomes:?}");
}

/// Runs one worker per plan: each takes its first lock and says `HELD`; then, one by one
/// (300 ms apart, so that the order their waits begin in is known), each is told `GO` and
/// waits for its second. Returns each worker's outcome line and pid.
fn run(plans: &[&str]) -> Vec<(String, u32)> {
    let server = RedisServer::start();
    let envs = [(URL_ENV, server.url()), (PLAN_ENV, plans.join("|"))];
    let mut workers = Workers::spawn(TAKE, plans.len(), &envs);
    let deadline = Instant::now() + SCENARIO_LIMIT;
    workers.expect_from_all("HELD", deadline);
    for i in 0..plans.len() {
        workers.send(i, "GO");
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut outcomes: Vec<Option<String>> = vec![None; plans.len()];
    while outcomes.iter().any(Option::is_none) {
        match workers.next_event(deadline) {
            Event::Line(i, line) => outcomes[i] = Some(line),
            Event::Closed(i) => assert!(
                outcomes[i].is_some(),
                "worker {i} exited before its outcome"
            ),
        }
    }
    let pids: Vec<u32> = (0..plans.len()).map(|i| workers.pid(i)).collect();
    workers.reap_all_successful(deadline);
    outcomes
        .into_iter()
        .zip(pids)
        .map(|(o, pid)| (o.unwrap_or_default(), pid))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Worker side
// ---------------------------------------------------------------------------------------------

/// Takes the lock `<kind>:<name>`, of any kind.
async fn acquire(client: &Client, lock: &str, options: LockOptions) -> Result<Guard, Error> {
    let (kind, name) = lock.split_once(':').expect("a lock is <kind>:<name>");
    let handle: Handle = match kind {
        "mutex" => client.mutex_with_options(name, options)?.into(),
        "fair" => client.fair_mutex_with_options(name, options)?.into(),
        "write" => client
            .rwlock_with_options(name, options)?
            .write_handle()
            .into(),
        "semaphore" => client
            .semaphore_with_options(name, 1, options)?
            .permits_handle(1)?
            .into(),
        other => panic!("unknown kind {other:?}"),
    };
    handle.lock().await
}

/// Takes the plan's first lock, says `HELD`, hears `GO`, waits for the second (with a deadlock
/// check and [`LIMIT`]) and says `GRANTED`, `DEADLOCK <cycle>`, `TIMEOUT` or, when it waits
/// for nothing, `RELEASED` after its hold; then gives everything back.
fn take() {
    let plans = env_var(PLAN_ENV);
    let plan = plans
        .split('|')
        .nth(worker_index())
        .expect("a plan per worker");
    let (held, rest) = plan.split_once('>').expect("<held>><waited>");
    let (waited, hold_ms) = match rest.split_once('@') {
        Some((waited, ms)) => (waited, ms.parse().expect("ms")),
        None => (rest, 0),
    };
    runtime().block_on(async {
        // The default options: the worker's label is its process's, `<host>/<pid>`.
        let client = Client::connect(env_var(URL_ENV).as_str())
            .await
            .expect("connect");
        // One task holds and waits: a hold belongs to the task that took it.
        let (client2, held, waited) = (client.clone(), held.to_owned(), waited.to_owned());
        tokio::spawn(async move {
            let first = acquire(&client2, &held, LockOptions::default())
                .await
                .expect("the first lock");
            say("HELD");
            tokio::task::spawn_blocking(|| hear("GO"))
                .await
                .expect("hear");
            if waited == "-" {
                tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                first.unlock().await.expect("release");
                say("RELEASED");
                return;
            }
            let options = LockOptions::default()
                .deadlock_check(CHECK)
                .wait_timeout(LIMIT);
            match acquire(&client2, &waited, options).await {
                Ok(second) => {
                    say("GRANTED");
                    second.unlock().await.expect("release");
                }
                Err(Error::Deadlock { cycle, .. }) => say(&format!("DEADLOCK {cycle}")),
                Err(Error::Timeout { .. }) => say("TIMEOUT"),
                Err(e) => panic!("waiting for {waited}: {e}"),
            }
            first.unlock().await.expect("release");
        })
        .await
        .expect("the worker's task");
        client.shutdown().await.expect("shutdown");
    });
}
