//! The fair mutex across real OS processes, against a real `redis-server`.
//!
//! - `first_come_first_served_across_processes`: while the orchestrator holds the lock, 6
//!   worker processes join the line one after another; once it is released they must get the
//!   lock in exactly that order, one at a time.
//! - `one_wake_up_per_hand_off_however_long_the_line`: with 6 waiters, then with 24 (4
//!   processes × 6 tasks), every hand-off must cost about two script calls (the release and
//!   the first waiter's attempt), counted by the server in `INFO commandstats`: a release that
//!   woke more than the first waiter would add refused attempts per hand-off.
//!
//! This binary is its own worker: `main` dispatches on the role a spawned copy was given.

mod common;

use std::time::{Duration, Instant};

use common::{command_calls, join_within, runtime, TASKS_ENV, URL_ENV};
use relock::{Client, ClientOptions, Lease, MutexOptions};
use relock_testkit::process::{
    env_parse, env_var, monotonic_nanos, run_scenarios, say, start_barrier, worker_role, Workers,
    DONE, GO, READY,
};
use relock_testkit::{check_no_overlap, RedisServer};

const WAITER: &str = "waiter";
const LOCK: &str = "turns";
const LINE_KEY: &str = "relock:{turns}:fair-line";

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const WORKLOAD_LIMIT: Duration = Duration::from_secs(30);
/// Long enough that no waiter refreshes its place during a scenario: every script call
/// counted belongs to a hand-off.
const WAKE_FALLBACK: Duration = Duration::from_secs(20);
/// How long each worker holds the lock.
const HOLD: Duration = Duration::from_millis(5);

fn main() {
    if let Some(role) = worker_role() {
        match role.as_str() {
            WAITER => waiter_worker(),
            other => panic!("unknown worker role {other:?}"),
        }
        return;
    }
    run_scenarios(&[
        (
            "first_come_first_served_across_processes",
            first_come_first_served_across_processes,
        ),
        (
            "one_wake_up_per_hand_off_however_long_the_line",
            one_wake_up_per_hand_off_however_long_the_line,
        ),
    ]);
}

fn options() -> MutexOptions {
    MutexOptions::default().lease(Lease::Fixed(Duration::from_secs(30)))
}

fn client_options() -> ClientOptions {
    ClientOptions::default().wake_fallback(WAKE_FALLBACK)
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn first_come_first_served_across_processes() {
    let server = RedisServer::start();
    let run = run_line(&server, 6, 1, Arrival::OneByOne);
    let order: Vec<usize> = run.sections.iter().map(|s| s.worker).collect();
    println!(
        "    order of the turns: {order:?}; {} script calls for {} hand-offs",
        run.calls, run.hand_offs
    );
    assert_eq!(
        order,
        (0..6).collect::<Vec<_>>(),
        "the lock was not taken in the order the workers joined the line"
    );
    assert!(
        run.calls <= 2 * run.hand_offs + 2,
        "{} script calls for {} hand-offs",
        run.calls,
        run.hand_offs
    );
}

fn one_wake_up_per_hand_off_however_long_the_line() {
    let mut per_hand_off = Vec::new();
    for (processes, tasks) in [(6, 1), (4, 6)] {
        let server = RedisServer::start();
        let run = run_line(&server, processes, tasks, Arrival::AllAtOnce);
        let ratio = run.calls as f64 / run.hand_offs as f64;
        println!(
            "    {} waiters ({processes} processes × {tasks} tasks): {} script calls for {} \
             hand-offs, {ratio:.2} each, in {:.2?}",
            processes * tasks,
            run.calls,
            run.hand_offs,
            run.elapsed
        );
        assert!(
            run.calls <= 2 * run.hand_offs + 2,
            "{} script calls for {} hand-offs: releases wake more than the first waiter",
            run.calls,
            run.hand_offs
        );
        per_hand_off.push(ratio);
    }
    assert!(
        per_hand_off[1] <= per_hand_off[0] + 0.25,
        "a longer line costs more per hand-off: {per_hand_off:?}"
    );
}

enum Arrival {
    /// Each worker joins the line only once the one before it is in it.
    OneByOne,
    /// Every worker starts at once.
    AllAtOnce,
}

/// One turn at the lock: which worker had it, from when to when (monotonic nanoseconds).
struct Section {
    worker: usize,
    enter: u64,
    exit: u64,
}

struct LineRun {
    /// Sorted by entry.
    sections: Vec<Section>,
    /// Script calls from the orchestrator's release to the last worker's release.
    calls: u64,
    /// Turns handed from one holder to the next: one per waiter.
    hand_offs: u64,
    elapsed: Duration,
}

/// Holds the lock while `processes` workers of `tasks` tasks each join the line, then releases
/// it and collects every worker's turn.
fn run_line(server: &RedisServer, processes: usize, tasks: usize, arrival: Arrival) -> LineRun {
    let url = server.url();
    let envs = [(URL_ENV, url.clone()), (TASKS_ENV, tasks.to_string())];
    let mut workers = Workers::spawn(WAITER, processes, &envs);
    workers.expect_from_all(READY, Instant::now() + STARTUP_LIMIT);
    let waiters = processes * tasks;

    let runtime = runtime();
    let client = runtime.block_on(async {
        Client::connect_with_options(url.as_str(), client_options())
            .await
            .expect("the orchestrator connects to redis")
    });
    let fair = client
        .fair_mutex_with_options(LOCK, options())
        .expect("valid lock");
    let guard = runtime.block_on(async {
        // Load every script before counting: a server's first call of a script costs an extra
        // failed EVALSHA (NOSCRIPT) before it is loaded.
        let warm = client.fair_mutex("warm").expect("valid lock");
        let warm = warm.lock().await.expect("the warm-up lock is free");
        warm.unlock().await.expect("warm-up unlock");
        fair.lock().await.expect("the lock is free")
    });
    match arrival {
        Arrival::OneByOne => {
            for i in 0..processes {
                workers.send(i, GO);
                line_reaches(server, (i + 1) * tasks);
            }
        }
        Arrival::AllAtOnce => {
            workers.broadcast(GO);
            line_reaches(server, waiters);
        }
    }
    // Each waiter tries once more after subscribing; let those attempts finish first.
    calls_settle(server);

    let calls_before = command_calls(server, "evalsha");
    let started = Instant::now();
    runtime
        .block_on(guard.unlock())
        .expect("the orchestrator still held the lock");
    let deadline = started + WORKLOAD_LIMIT;
    let mut sections = Vec::with_capacity(waiters);
    // Every worker must report its turns and then `DONE`.
    workers.collect_until(DONE, deadline, |i, line| {
        sections.push(parse_section(i, &line));
    });
    let elapsed = started.elapsed();
    workers.reap_all_successful(deadline);
    let calls = command_calls(server, "evalsha") - calls_before;
    assert_eq!(sections.len(), waiters, "every waiter had its turn");

    let mut intervals: Vec<(u64, u64)> = sections.iter().map(|s| (s.enter, s.exit)).collect();
    if let Err(overlap) = check_no_overlap(&mut intervals) {
        panic!("two holders of the fair mutex at once: {overlap}");
    }
    sections.sort_by_key(|s| s.enter);
    LineRun {
        sections,
        calls,
        hand_offs: u64::try_from(waiters).expect("a count"),
        elapsed,
    }
}

fn line_len(server: &RedisServer) -> usize {
    server
        .cli(&["ZCARD", LINE_KEY])
        .trim()
        .parse()
        .expect("ZCARD")
}

/// Polls until `len` waiters are in line.
fn line_reaches(server: &RedisServer, len: usize) {
    let deadline = Instant::now() + STARTUP_LIMIT;
    while line_len(server) != len {
        assert!(
            Instant::now() < deadline,
            "the line stays at {} waiters, expected {len}",
            line_len(server)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until no script call has come for 200 ms, for at most 5 s.
fn calls_settle(server: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = command_calls(server, "evalsha");
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = command_calls(server, "evalsha");
        if now == last {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the waiters keep calling scripts"
        );
        last = now;
    }
}

fn parse_section(worker: usize, line: &str) -> Section {
    let fields: Vec<&str> = line.split(' ').collect();
    let parsed = match fields.as_slice() {
        ["T", enter, exit] => enter.parse().ok().zip(exit.parse().ok()),
        _ => None,
    };
    let (enter, exit) =
        parsed.unwrap_or_else(|| panic!("worker {worker} printed {line:?}, not `T ENTER EXIT`"));
    Section {
        worker,
        enter,
        exit,
    }
}

// ---------------------------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------------------------

/// Connects, reports `READY`, waits for `GO`, then runs `TASKS_ENV` tasks that each wait in
/// line once, hold the lock briefly and print their turn as `T ENTER EXIT` (monotonic
/// nanoseconds); then prints `DONE`.
fn waiter_worker() {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let runtime = runtime();
    let client = runtime.block_on(async {
        Client::connect_with_options(url.as_str(), client_options())
            .await
            .expect("the worker connects to redis")
    });
    start_barrier();
    runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let fair = client
                .fair_mutex_with_options(LOCK, options())
                .expect("valid lock");
            set.spawn(async move {
                let guard = fair.lock().await.expect("lock");
                let enter = monotonic_nanos();
                tokio::time::sleep(HOLD).await;
                let exit = monotonic_nanos();
                guard
                    .unlock()
                    .await
                    .expect("unlock: the lock was held all along");
                say(&format!("T {enter} {exit}"));
            });
        }
        join_within(set, WORKLOAD_LIMIT).await;
    });
    say(DONE);
}
