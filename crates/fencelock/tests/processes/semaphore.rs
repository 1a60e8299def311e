//! The semaphore across real OS processes, against a real `redis-server`.
//!
//! - `never_more_permits_held_than_the_total`: 6 processes × 4 tasks take 1 or 2 permits of 3
//!   at a time, 30 times each. At no instant may the permits held add up to more than 3, and
//!   the workload must actually reach 3, or the check would prove nothing.
//! - `killed_holders_permits_come_back_after_its_lease_not_before`: a process holding 2 of 3
//!   permits is killed with SIGKILL; its permits stay taken until its lease runs out, then a
//!   waiter gets them promptly.

use std::time::{Duration, Instant};

use crate::common::{
    expect_held_for, join_within, runtime, Workload, ITERATIONS_ENV, TASKS_ENV, URL_ENV,
};
use fencelock::{Client, Lease, LockOptions};
use fencelock_testkit::process::{
    env_parse, env_var, monotonic_nanos, say, say_all, start_barrier, Workers, DONE,
};
use fencelock_testkit::RedisServer;

const CONTENDER: &str = "semaphore::contender";
const HOLDER: &str = "semaphore::holder";

const POOL: &str = "pool";
const POOL_TOTAL: u32 = 3;
const VICTIM: &str = "victim";
const VICTIM_TOTAL: u32 = 3;
const VICTIM_PERMITS: u32 = 2;
const VICTIM_LEASE: Duration = Duration::from_millis(1500);

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const WORKLOAD_LIMIT: Duration = Duration::from_secs(60);
const HOLDER_LIMIT: Duration = Duration::from_secs(60);
const REAP_LIMIT: Duration = Duration::from_secs(5);

const ACQUIRED: &str = "ACQUIRED";
const LOST: &str = "LOST";

/// The scenarios, named as libtest names the tests of module `semaphore`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "semaphore::never_more_permits_held_than_the_total",
        never_more_permits_held_than_the_total,
    ),
    (
        "semaphore::killed_holders_permits_come_back_after_its_lease_not_before",
        killed_holders_permits_come_back_after_its_lease_not_before,
    ),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] =
    &[(CONTENDER, contender_worker), (HOLDER, holder_worker)];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn never_more_permits_held_than_the_total() {
    let server = RedisServer::start();
    let workload = Workload {
        processes: 6,
        tasks: 4,
        iterations: 30,
    };
    let mut workers = workload.start(&server, CONTENDER, STARTUP_LIMIT);
    let started = Instant::now();
    let deadline = started + WORKLOAD_LIMIT;
    // (enter, exit, permits) of every section.
    let mut sections: Vec<(u64, u64, u32)> = Vec::new();
    // Every worker must report all its sections and then `DONE`.
    workers.collect_until(DONE, deadline, |i, line| {
        sections.push(parse_section(i, &line));
    });
    workers.reap_all_successful(deadline);
    assert_eq!(sections.len(), workload.total());

    let (peak, at) = peak_permits(&sections);
    println!(
        "    {} sections in {:.2?}; at most {peak} of {POOL_TOTAL} permits held at once",
        sections.len(),
        started.elapsed()
    );
    assert!(
        peak <= POOL_TOTAL,
        "{peak} permits were held at once at {at} ns, more than the total {POOL_TOTAL}"
    );
    assert_eq!(
        peak, POOL_TOTAL,
        "the workload never filled the semaphore, so the check proves nothing"
    );
}

/// The most permits held at one instant, and that instant: exits at an instant count before
/// entries at the same instant, as touching sections do not overlap.
fn peak_permits(sections: &[(u64, u64, u32)]) -> (u32, u64) {
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(sections.len() * 2);
    for &(enter, exit, permits) in sections {
        events.push((enter, i64::from(permits)));
        events.push((exit, -i64::from(permits)));
    }
    events.sort_unstable();
    let (mut held, mut peak, mut at) = (0i64, 0i64, 0);
    for (time, change) in events {
        held += change;
        if held > peak {
            peak = held;
            at = time;
        }
    }
    (u32::try_from(peak).expect("a count of permits"), at)
}

fn parse_section(worker: usize, line: &str) -> (u64, u64, u32) {
    let fields: Vec<&str> = line.split(' ').collect();
    let parsed = match fields.as_slice() {
        ["S", enter, exit, permits] => enter
            .parse()
            .ok()
            .zip(exit.parse().ok())
            .zip(permits.parse().ok())
            .map(|((a, b), c)| (a, b, c)),
        _ => None,
    };
    parsed.unwrap_or_else(|| panic!("worker {worker} printed {line:?}, not `S ENTER EXIT N`"))
}

fn killed_holders_permits_come_back_after_its_lease_not_before() {
    let server = RedisServer::start();
    let url = server.url();
    let mut workers = Workers::spawn(HOLDER, 1, &[(URL_ENV, url.clone())]);
    workers.expect_from_all(ACQUIRED, Instant::now() + STARTUP_LIMIT);

    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the orchestrator connects to redis");
        let sem = client
            .semaphore_with_options(VICTIM, VICTIM_TOTAL, victim_options())
            .expect("valid semaphore");

        // Longer than one whole lease, so only renewal can still hold the permits; and half a
        // renewal period past it, so that the kill falls midway between two renewals.
        tokio::time::sleep(VICTIM_LEASE + VICTIM_LEASE / 6).await;
        let live = expect_held_for(
            sem.try_acquire_many(2).await,
            VICTIM_LEASE,
            "while the holder lives",
        );
        assert_eq!(sem.available().await.expect("available"), 1);
        workers.refuse_line(LOST);
        println!("    live holder: its grant has {live:?} left after more than one lease");

        workers.kill(0);
        let killed = Instant::now();

        let at_kill = expect_held_for(
            sem.try_acquire_many(2).await,
            VICTIM_LEASE,
            "right after the kill",
        );
        // The third permit was never the holder's: it stays free all along.
        let third = sem.try_acquire().await.expect("the free permit");
        third.release().await.expect("release");
        let back = sem
            .acquire_many_timeout(VICTIM_PERMITS, Duration::from_secs(5))
            .await
            .expect("the permits come back once the dead holder's lease ends");
        let back_after = killed.elapsed();
        back.release().await.expect("release");

        println!(
            "    SIGKILL to the permits' return: {back_after:?} (lease {VICTIM_LEASE:?}, \
             {at_kill:?} left at the kill)"
        );
        // Renewal runs every third of the lease, so at the kill between two thirds and all of
        // it was left; and the grant's own expiry, as Redis reported it right after the kill,
        // must be honoured to within the scheduling noise.
        let earliest = (VICTIM_LEASE * 2 / 3)
            .max(at_kill)
            .saturating_sub(Duration::from_millis(50));
        let latest = VICTIM_LEASE + Duration::from_millis(1000);
        assert!(
            back_after >= earliest,
            "permits back {back_after:?} after the kill: the dead holder's lease was cut short \
             (expected at least {earliest:?})"
        );
        assert!(
            back_after <= latest,
            "permits back {back_after:?} after the kill: the waiter noticed late \
             (expected at most {latest:?})"
        );
    });

    workers.reap_killed(0, Instant::now() + REAP_LIMIT);
}

fn victim_options() -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(VICTIM_LEASE))
}

// ---------------------------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------------------------

/// Connects, reports `READY`, waits for `GO`, then runs `TASKS_ENV` tasks that each take 1 or
/// 2 permits of the pool `ITERATIONS_ENV` times and print every section as
/// `S ENTER EXIT PERMITS` (monotonic nanoseconds), then `DONE`.
fn contender_worker() {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let iterations: usize = env_parse(ITERATIONS_ENV);
    let runtime = runtime();
    let client = runtime.block_on(async {
        Client::connect(url.as_str())
            .await
            .expect("the worker connects to redis")
    });
    start_barrier();
    let sections = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for task in 0..tasks {
            let sem = client.semaphore(POOL, POOL_TOTAL).expect("valid semaphore");
            set.spawn(async move {
                let mut sections = Vec::with_capacity(iterations);
                for i in 0..iterations {
                    let permits = 1 + u32::try_from((task + i) % 2).expect("0 or 1");
                    let permit = sem.acquire_many(permits).await.expect("acquire");
                    let enter = monotonic_nanos();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let exit = monotonic_nanos();
                    permit
                        .release()
                        .await
                        .expect("release: the permits were held all along");
                    sections.push((enter, exit, permits));
                }
                sections
            });
        }
        join_within(set, WORKLOAD_LIMIT).await
    });
    say_all(
        sections
            .into_iter()
            .flatten()
            .map(|(enter, exit, permits)| format!("S {enter} {exit} {permits}")),
    );
    say(DONE);
}

/// Takes 2 permits of the victim semaphore, reports `ACQUIRED`, then holds them (renewing)
/// until killed, printing `LOST` if they are lost meanwhile. Gives up after [`HOLDER_LIMIT`].
fn holder_worker() {
    let url = env_var(URL_ENV);
    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the holder connects to redis");
        let sem = client
            .semaphore_with_options(VICTIM, VICTIM_TOTAL, victim_options())
            .expect("valid semaphore");
        let permit = sem
            .try_acquire_many(VICTIM_PERMITS)
            .await
            .expect("the victim semaphore is free");
        say(ACQUIRED);
        tokio::select! {
            reason = permit.lost() => say(&format!("{LOST} {reason}")),
            () = tokio::time::sleep(HOLDER_LIMIT) => {}
        }
    });
}
