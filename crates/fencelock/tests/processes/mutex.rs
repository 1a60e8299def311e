//! The mutex across real OS processes, against a real `redis-server`.
//!
//! - `mutual_exclusion_across_processes`: 8 processes × 8 tasks × 200 non-atomic increments of
//!   a Redis counter, each under the lock. No increment may be lost and no two critical
//!   sections may overlap in time.
//! - `broken_lock_is_caught`: the same workload with a naive check-then-set "lock", to show
//!   that those two checks do see violations when the lock is not a lock.
//! - `one_wake_up_per_hand_off_however_many_wait`: with 6 waiting processes, then 24 waiters
//!   (4 processes × 6 tasks), each release wakes the one waiter it chose, so a hand-off costs
//!   about two script calls however many wait (counted by the server in `INFO commandstats`).
//! - `killed_holder_frees_after_lease_not_before`: a holder killed with SIGKILL keeps the lock
//!   until its lease runs out, then a waiter gets it promptly.
//! - `a_stuck_head_waiter_costs_the_next_the_window_*`: the waiter whose place ends first is
//!   killed (the release, hearing nobody listen, skips it at once), killed behind a pattern
//!   subscriber that makes its channel seem heard, frozen with SIGSTOP, or cut off half-open;
//!   the live waiter behind it holds the lock within 1 s of the release (its
//!   30 s lease would be the failure). The frozen and the half-open one come back while the
//!   live one holds, and must not take their stale offer for a grant.
//! - `no_waiter_starves_under_sustained_contention`: 4 processes × 6 tasks take turns for
//!   seconds, each asking again as soon as it released; no wait lasts many more hand-offs than
//!   the mean wait.

use std::time::{Duration, Instant};

use crate::common::{
    connect_with_raw, expect_held_for, handoff, join_within, runtime, Workload, ITERATIONS_ENV,
    TASKS_ENV, URL_ENV,
};
use fencelock::{Client, Lease, LockOptions};
use fencelock_testkit::process::{
    env_parse, env_var, monotonic_nanos, say, say_all, start_barrier, Workers, DONE,
};
use fencelock_testkit::{check_no_overlap, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// Worker roles.
const FENCELOCK_INCREMENTS: &str = "mutex::fencelock-increments";
const NAIVE_INCREMENTS: &str = "mutex::naive-increments";
const HOLDER: &str = "mutex::holder";
const TURNS: &str = "mutex::turns";

/// The counter every critical section increments with a separate GET and SET.
const COUNTER_KEY: &str = "test:counter";
/// The key of the broken lock of the control scenario.
const NAIVE_LOCK_KEY: &str = "test:naive-lock";
/// The lock name the increments contend for.
const COUNTER_LOCK: &str = "counter";
/// The lock name of the killed-holder scenario.
const VICTIM_LOCK: &str = "victim";

/// The victim's lease: renewed every third of it while its holder lives.
const VICTIM_LEASE: Duration = Duration::from_millis(1500);

/// Bounds on every wait, so that a hung worker fails the test instead of stalling it.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// Generous: the full workload takes about 25 s in a debug build on two cores.
const WORKLOAD_LIMIT: Duration = Duration::from_secs(90);
const REAP_LIMIT: Duration = Duration::from_secs(5);
/// How long the holder sleeps on its lock before giving up by itself.
const HOLDER_LIMIT: Duration = Duration::from_secs(60);

/// Lines of the holder's protocol on stdout.
const ACQUIRED: &str = "ACQUIRED";
const LOST: &str = "LOST";

/// The scenarios, named as libtest names the tests of module `mutex`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "mutex::mutual_exclusion_across_processes",
        mutual_exclusion_across_processes,
    ),
    ("mutex::broken_lock_is_caught", broken_lock_is_caught),
    (
        "mutex::one_wake_up_per_hand_off_however_many_wait",
        one_wake_up_per_hand_off_however_many_wait,
    ),
    (
        "mutex::killed_holder_frees_after_lease_not_before",
        killed_holder_frees_after_lease_not_before,
    ),
    (
        "mutex::a_stuck_head_waiter_costs_the_next_the_window_killed",
        || {
            handoff::a_stuck_head_waiter_costs_the_next_the_window(
                handoff::Kind::Mutex,
                handoff::Stuck::Killed,
            )
        },
    ),
    (
        "mutex::a_stuck_head_waiter_costs_the_next_the_window_killed_behind_a_tap",
        || {
            handoff::a_stuck_head_waiter_costs_the_next_the_window(
                handoff::Kind::Mutex,
                handoff::Stuck::KilledBehindATap,
            )
        },
    ),
    (
        "mutex::a_stuck_head_waiter_costs_the_next_the_window_frozen",
        || {
            handoff::a_stuck_head_waiter_costs_the_next_the_window(
                handoff::Kind::Mutex,
                handoff::Stuck::Frozen,
            )
        },
    ),
    (
        "mutex::a_stuck_head_waiter_costs_the_next_the_window_half_open",
        || {
            handoff::a_stuck_head_waiter_costs_the_next_the_window(
                handoff::Kind::Mutex,
                handoff::Stuck::HalfOpen,
            )
        },
    ),
    (
        "mutex::no_waiter_starves_under_sustained_contention",
        no_waiter_starves_under_sustained_contention,
    ),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] = &[
    (FENCELOCK_INCREMENTS, || {
        increments_worker(Guarding::Fencelock)
    }),
    (NAIVE_INCREMENTS, || increments_worker(Guarding::Naive)),
    (HOLDER, holder_worker),
    (TURNS, turns_worker),
];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn mutual_exclusion_across_processes() {
    let server = RedisServer::start();
    let workload = Workload {
        processes: 8,
        tasks: 8,
        iterations: 200,
    };
    let mut run = run_increments(&server, FENCELOCK_INCREMENTS, &workload);
    let expected = workload.total();

    assert_eq!(
        run.intervals.len(),
        expected,
        "every critical section reports its interval"
    );
    if let Err(overlap) = check_no_overlap(&mut run.intervals) {
        panic!("two holders were inside the critical section at once: {overlap}");
    }
    assert_eq!(
        run.counter, expected,
        "increments were lost although each ran under the lock"
    );

    let cycles_per_sec = expected as f64 / run.elapsed.as_secs_f64();
    println!(
        "    {} processes × {} tasks × {} increments: {expected} lock+unlock cycles in {:.2?}, \
         {cycles_per_sec:.0} cycles/s",
        workload.processes, workload.tasks, workload.iterations, run.elapsed
    );
    // `check_no_overlap` sorted the intervals by entry, so neighbours are consecutive holders.
    let mut gaps: Vec<u64> = run
        .intervals
        .windows(2)
        .map(|pair| pair[1].0.saturating_sub(pair[0].1))
        .collect();
    gaps.sort_unstable();
    println!(
        "    handoff gap (one holder's exit to the next one's entry): p50 {} µs, p99 {} µs, \
         max {} µs",
        percentile(&gaps, 50) / 1_000,
        percentile(&gaps, 99) / 1_000,
        gaps.last().copied().unwrap_or(0) / 1_000
    );
}

fn broken_lock_is_caught() {
    let server = RedisServer::start();
    let workload = Workload {
        processes: 4,
        tasks: 4,
        iterations: 50,
    };
    let mut run = run_increments(&server, NAIVE_INCREMENTS, &workload);
    let expected = workload.total();

    assert_eq!(run.intervals.len(), expected);
    let lost = expected.saturating_sub(run.counter);
    let overlap = check_no_overlap(&mut run.intervals).err();
    println!(
        "    naive lock: counter {} of {expected} ({lost} increments lost), overlap: {}",
        run.counter,
        overlap.as_deref().unwrap_or("none found")
    );
    assert!(
        lost > 0 || overlap.is_some(),
        "a check-then-set lock must let holders overlap, yet the checks saw no violation: \
         they could not catch a broken mutex either"
    );
}

fn one_wake_up_per_hand_off_however_many_wait() {
    handoff::one_wake_up_per_hand_off(handoff::Kind::Mutex);
}

fn killed_holder_frees_after_lease_not_before() {
    let server = RedisServer::start();
    let url = server.url();
    let mut workers = Workers::spawn(HOLDER, 1, &[(URL_ENV, url.clone())]);
    workers.expect_from_all(ACQUIRED, Instant::now() + STARTUP_LIMIT);

    let runtime = runtime();
    runtime.block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the orchestrator connects to redis");
        let mutex = client
            .mutex_with_options(VICTIM_LOCK, victim_options())
            .expect("valid mutex");

        // Longer than one whole lease, so only renewal can still hold the lock; and half a
        // renewal period (a sixth of the lease) past it, so that the kill below falls midway
        // between two renewals, away from both bounds checked after it.
        tokio::time::sleep(VICTIM_LEASE + VICTIM_LEASE / 6).await;
        let live = expect_held_for(
            mutex.try_lock().await,
            VICTIM_LEASE,
            "while its holder lives",
        );
        workers.refuse_line(LOST);
        println!("    live holder: lease has {live:?} left after more than one lease");

        workers.kill(0);
        let killed = Instant::now();

        let at_kill = expect_held_for(
            mutex.try_lock().await,
            VICTIM_LEASE,
            "right after its holder was killed",
        );
        let guard = mutex
            .lock_timeout(Duration::from_secs(5))
            .await
            .expect("the lock frees itself once the dead holder's lease ends");
        let freed_after = killed.elapsed();
        guard
            .unlock()
            .await
            .expect("the new holder still held the lock");

        println!(
            "    SIGKILL to acquisition: {freed_after:?} (lease {VICTIM_LEASE:?}, \
             {at_kill:?} left at the kill)"
        );
        // Renewal runs every third of the lease, so at the kill between two thirds and all of
        // it was left.
        let earliest = VICTIM_LEASE * 2 / 3 - Duration::from_millis(100);
        let latest = VICTIM_LEASE + Duration::from_millis(1000);
        assert!(
            freed_after >= earliest,
            "acquired {freed_after:?} after the kill: the dead holder's lease was cut short \
             (expected at least {earliest:?})"
        );
        assert!(
            freed_after <= latest,
            "acquired {freed_after:?} after the kill: the waiter noticed the expiry late \
             (expected at most {latest:?})"
        );
    });

    workers.reap_killed(0, Instant::now() + REAP_LIMIT);
}

/// How long the workers of `no_waiter_starves_under_sustained_contention` take turns.
const TURNS_RUN: Duration = Duration::from_secs(4);
/// How long each turn holds the lock.
const TURN_HOLD: Duration = Duration::from_millis(2);
/// How many milliseconds the turn workers run, as an environment variable.
const RUN_MS_ENV: &str = "FENCELOCK_TEST_RUN_MS";
/// The lock the turn workers share.
const TURNS_LOCK: &str = "turns";

/// One turn: when its task asked for the lock, and when it entered (monotonic nanoseconds).
struct Turn {
    asked: u64,
    enter: u64,
}

fn no_waiter_starves_under_sustained_contention() {
    let server = RedisServer::start();
    let (processes, tasks) = (4, 6);
    let envs = [
        (URL_ENV, server.url()),
        (TASKS_ENV, tasks.to_string()),
        (RUN_MS_ENV, TURNS_RUN.as_millis().to_string()),
    ];
    let mut workers = Workers::spawn(TURNS, processes, &envs);
    workers.start_together(Instant::now() + STARTUP_LIMIT);
    let mut turns = Vec::new();
    let deadline = Instant::now() + WORKLOAD_LIMIT;
    workers.collect_until(DONE, deadline, |i, line| turns.push(parse_turn(i, &line)));
    workers.reap_all_successful(deadline);

    // A turn's wait in hand-offs: how many other turns began while it waited.
    let mut entries: Vec<u64> = turns.iter().map(|t| t.enter).collect();
    entries.sort_unstable();
    let waits: Vec<usize> = turns
        .iter()
        .map(|t| {
            let from = entries.partition_point(|&e| e <= t.asked);
            let to = entries.partition_point(|&e| e < t.enter);
            to.saturating_sub(from)
        })
        .collect();
    let mean = waits.iter().sum::<usize>() as f64 / waits.len() as f64;
    let longest = waits.iter().copied().max().unwrap_or(0);
    let waiters = processes * tasks;
    println!(
        "    {waiters} waiters, {} turns in {TURNS_RUN:?}: a wait is {mean:.1} hand-offs on \
         average, {longest} at the longest",
        turns.len()
    );
    assert!(
        turns.len() >= 4 * waiters,
        "too few turns to judge: {}",
        turns.len()
    );
    // With every waiter in line the mean is about one round of the line; a waiter that keeps
    // its turn waits a few more hand-offs when other tasks take the lock before it, not
    // rounds more.
    let bound = 2.0 * mean + waiters as f64;
    assert!(
        (longest as f64) <= bound,
        "a waiter waited {longest} hand-offs, the mean is {mean:.1} (bound {bound:.0})"
    );
}

fn parse_turn(worker: usize, line: &str) -> Turn {
    let fields: Vec<&str> = line.split(' ').collect();
    let parsed = match fields.as_slice() {
        ["W", asked, enter] => asked.parse().ok().zip(enter.parse().ok()),
        _ => None,
    };
    let (asked, enter) =
        parsed.unwrap_or_else(|| panic!("worker {worker} printed {line:?}, not `W ASKED ENTER`"));
    Turn { asked, enter }
}

fn victim_options() -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(VICTIM_LEASE))
}

// ---------------------------------------------------------------------------------------------
// Increments: orchestrator side
// ---------------------------------------------------------------------------------------------

struct Run {
    intervals: Vec<(u64, u64)>,
    counter: usize,
    /// From the start signal to the last worker's exit.
    elapsed: Duration,
}

/// Starts the workers, lets them all begin at once, and collects their intervals, the final
/// counter and the exit status of each.
fn run_increments(server: &RedisServer, role: &str, workload: &Workload) -> Run {
    let mut workers = workload.start(server, role, STARTUP_LIMIT);
    let started = Instant::now();

    let deadline = started + WORKLOAD_LIMIT;
    let mut intervals = Vec::with_capacity(workload.total());
    // Every worker must report all its intervals and then `DONE`.
    workers.collect_until(DONE, deadline, |i, line| {
        intervals.push(parse_interval(i, &line));
    });
    workers.reap_all_successful(deadline);
    let elapsed = started.elapsed();

    let counter = server.cli(&["GET", COUNTER_KEY]);
    let counter = counter
        .parse()
        .unwrap_or_else(|_| panic!("{COUNTER_KEY} holds {counter:?}, not a count"));
    Run {
        intervals,
        counter,
        elapsed,
    }
}

fn parse_interval(worker: usize, line: &str) -> (u64, u64) {
    let fields: Vec<&str> = line.split(' ').collect();
    let parsed = match fields.as_slice() {
        ["I", enter, exit] => enter.parse().ok().zip(exit.parse().ok()),
        _ => None,
    };
    parsed.unwrap_or_else(|| panic!("worker {worker} printed {line:?}, not `I ENTER EXIT`"))
}

/// The `pct`-th percentile of sorted values (nearest rank below).
fn percentile(sorted: &[u64], pct: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() * pct / 100).min(sorted.len() - 1)]
}

// ---------------------------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------------------------

/// How a worker's tasks keep each other out of the critical section.
#[derive(Clone, Copy)]
enum Guarding {
    Fencelock,
    /// Checks that a key is absent, then sets it, in two commands: two tasks can both see it
    /// absent and both go in. The control that shows the checks catch a broken lock.
    Naive,
}

/// Connects, reports `READY`, waits for `GO` on stdin, then runs `TASKS_ENV` tasks of
/// `ITERATIONS_ENV` guarded increments each and prints every critical section as
/// `I ENTER EXIT` (monotonic nanoseconds), then `DONE`.
fn increments_worker(guarding: Guarding) {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let iterations: usize = env_parse(ITERATIONS_ENV);
    let runtime = runtime();
    let (client, conn) = runtime.block_on(connect_with_raw(&url));

    start_barrier();

    let intervals = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let conn = conn.clone();
            match guarding {
                Guarding::Fencelock => {
                    let mutex = client.mutex(COUNTER_LOCK).expect("valid lock name");
                    set.spawn(fencelock_increments(mutex, conn, iterations));
                }
                Guarding::Naive => {
                    set.spawn(naive_increments(conn, iterations));
                }
            }
        }
        join_within(set, WORKLOAD_LIMIT).await
    });

    say_all(
        intervals
            .into_iter()
            .flatten()
            .map(|(enter, exit)| format!("I {enter} {exit}")),
    );
    say(DONE);
}

async fn fencelock_increments(
    mutex: fencelock::Mutex,
    mut conn: MultiplexedConnection,
    iterations: usize,
) -> Vec<(u64, u64)> {
    let mut intervals = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let guard = mutex.lock().await.expect("lock");
        let enter = monotonic_nanos();
        increment_non_atomically(&mut conn, None).await;
        let exit = monotonic_nanos();
        guard
            .unlock()
            .await
            .expect("unlock: the lock was held for the whole critical section");
        intervals.push((enter, exit));
    }
    intervals
}

/// The pause inside the broken lock and its critical section, long enough that racing tasks
/// interleave on nearly every contended acquisition.
const RACE_PAUSE: Duration = Duration::from_millis(1);

async fn naive_increments(mut conn: MultiplexedConnection, iterations: usize) -> Vec<(u64, u64)> {
    let deadline = tokio::time::Instant::now() + WORKLOAD_LIMIT;
    let mut intervals = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        loop {
            let taken: bool = conn.exists(NAIVE_LOCK_KEY).await.expect("EXISTS");
            if !taken {
                tokio::time::sleep(RACE_PAUSE).await;
                let () = conn.set(NAIVE_LOCK_KEY, "held").await.expect("SET");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the naive lock stayed taken past the deadline"
            );
            tokio::time::sleep(RACE_PAUSE).await;
        }
        let enter = monotonic_nanos();
        increment_non_atomically(&mut conn, Some(RACE_PAUSE)).await;
        let exit = monotonic_nanos();
        let _: u64 = conn.del(NAIVE_LOCK_KEY).await.expect("DEL");
        intervals.push((enter, exit));
    }
    intervals
}

/// GET, pause, SET value+1: an increment that loses updates unless callers exclude each other.
/// Without a `pause` it still yields to the scheduler, so other tasks run inside the window.
async fn increment_non_atomically(conn: &mut MultiplexedConnection, pause: Option<Duration>) {
    let value: Option<String> = conn.get(COUNTER_KEY).await.expect("GET the counter");
    let count: u64 = value.map_or(0, |v| v.parse().expect("the counter holds a number"));
    match pause {
        Some(pause) => tokio::time::sleep(pause).await,
        None => tokio::task::yield_now().await,
    }
    let () = conn
        .set(COUNTER_KEY, count + 1)
        .await
        .expect("SET the counter");
}

/// Takes the victim lock, reports `ACQUIRED`, then holds it (renewing) until killed, printing
/// `LOST` if the lease is lost meanwhile. Gives up after [`HOLDER_LIMIT`] so that it cannot
/// outlive a vanished orchestrator by much.
fn holder_worker() {
    let url = env_var(URL_ENV);
    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the holder connects to redis");
        let mutex = client
            .mutex_with_options(VICTIM_LOCK, victim_options())
            .expect("valid mutex");
        let guard = mutex.try_lock().await.expect("the victim lock is free");
        say(ACQUIRED);
        tokio::select! {
            reason = guard.lost() => say(&format!("{LOST} {reason}")),
            () = tokio::time::sleep(HOLDER_LIMIT) => {}
        }
    });
}

/// Connects, reports `READY`, waits for `GO`, then runs `TASKS_ENV` tasks that take turns at
/// the lock for `RUN_MS_ENV` milliseconds, each asking again as soon as it released, and
/// prints each turn as `W ASKED ENTER` (monotonic nanoseconds); then prints `DONE`.
fn turns_worker() {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let run = Duration::from_millis(env_parse(RUN_MS_ENV));
    let runtime = runtime();
    let client = runtime.block_on(async {
        Client::connect(url.as_str())
            .await
            .expect("the worker connects to redis")
    });
    start_barrier();
    let turns = runtime.block_on(async {
        let until = tokio::time::Instant::now() + run;
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let mutex = client.mutex(TURNS_LOCK).expect("valid lock name");
            set.spawn(async move {
                let mut turns = Vec::new();
                while tokio::time::Instant::now() < until {
                    let asked = monotonic_nanos();
                    let guard = mutex.lock().await.expect("lock");
                    let enter = monotonic_nanos();
                    tokio::time::sleep(TURN_HOLD).await;
                    guard.unlock().await.expect("unlock");
                    turns.push(format!("W {asked} {enter}"));
                }
                turns
            });
        }
        join_within(set, WORKLOAD_LIMIT).await
    });
    say_all(turns.into_iter().flatten());
    say(DONE);
}
