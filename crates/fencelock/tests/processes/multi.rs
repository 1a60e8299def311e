//! The MultiMutex across real OS processes, against a real `redis-server`.
//!
//! - `overlapping_sets_across_processes`: 4 processes × 4 tasks lock sets of the names A, B, C
//!   given in every order ({A, B}, {C, B}, {A, C, B}, …), mixed with single-name mutexes, and
//!   under each lock increment a counter per name with a separate GET and SET. No critical
//!   sections on one name may overlap in time, no increment may be lost, and no lock may wait
//!   long enough to suggest a deadlock.
//! - `names_taken_one_by_one_deadlock`: the control. The same sets taken one name at a time
//!   with single-name mutexes, each in its own order, wait for each other in a cycle; the
//!   workers must see that happen, which shows the first scenario would notice a deadlock.

use std::time::{Duration, Instant};

use crate::common::{
    connect_with_raw, join_within, runtime, Workload, ITERATIONS_ENV, TASKS_ENV, URL_ENV,
};
use fencelock::{Client, Error, Guard, Handle};
use fencelock_testkit::process::{
    env_parse, env_var, monotonic_nanos, say, say_all, start_barrier, worker_index, DONE,
};
use fencelock_testkit::{check_no_overlap, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// Worker roles.
const MULTI: &str = "multi::multi";
const ONE_BY_ONE: &str = "multi::one-by-one";

const NAMES: [&str; 3] = ["A", "B", "C"];

/// The sets the tasks lock, in the orders given; a single name is taken with a plain Mutex.
const SETS: [&[usize]; 9] = [
    &[0, 1],
    &[1, 0],
    &[1, 2],
    &[2, 1],
    &[2, 0],
    &[0, 2, 1],
    &[2, 1, 0],
    &[1],
    &[2],
];

/// Far longer than any wait for a lock in this workload: a lock that waits this long is stuck.
const STUCK: Duration = Duration::from_secs(20);
/// How long the control's tasks wait for their next name before calling it a deadlock.
const CONTROL_WAIT: Duration = Duration::from_millis(1500);

/// 4 processes × 4 tasks × 40 locks, in both scenarios.
const WORKLOAD: Workload = Workload {
    processes: 4,
    tasks: 4,
    iterations: 40,
};

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const WORKLOAD_LIMIT: Duration = Duration::from_secs(90);

/// How a worker's report of a suspected deadlock starts.
const DEADLOCK: &str = "DEADLOCK";

/// The scenarios, named as libtest names the tests of module `multi`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "multi::overlapping_sets_across_processes",
        overlapping_sets_across_processes,
    ),
    (
        "multi::names_taken_one_by_one_deadlock",
        names_taken_one_by_one_deadlock,
    ),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] = &[
    (MULTI, || worker(Taking::Together)),
    (ONE_BY_ONE, || worker(Taking::OneByOne)),
];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn overlapping_sets_across_processes() {
    let server = RedisServer::start();
    let run = run_workers(&server, MULTI, &WORKLOAD);
    assert!(
        run.deadlocks.is_empty(),
        "locks waited {STUCK:?}: {:?}",
        run.deadlocks
    );
    let mut sections = 0;
    for (i, name) in NAMES.iter().enumerate() {
        let mut intervals = run.intervals[i].clone();
        if let Err(overlap) = check_no_overlap(&mut intervals) {
            panic!("two holders of {name} were inside at once: {overlap}");
        }
        let counter: usize = server
            .cli(&["GET", &counter_key(name)])
            .parse()
            .unwrap_or(0);
        assert_eq!(
            counter,
            intervals.len(),
            "{name}: increments were lost although each ran under the lock"
        );
        sections += intervals.len();
    }
    println!(
        "    4 processes × 4 tasks × 40 locks of 1 to 3 names: {sections} critical sections \
         counted per name, in {:.2?}",
        run.elapsed
    );
}

fn names_taken_one_by_one_deadlock() {
    let server = RedisServer::start();
    let run = run_workers(&server, ONE_BY_ONE, &WORKLOAD);
    println!(
        "    names taken one by one: {} tasks found themselves waiting in a cycle",
        run.deadlocks.len()
    );
    assert!(
        !run.deadlocks.is_empty(),
        "sets taken one name at a time in opposite orders must deadlock, yet no task waited \
         {CONTROL_WAIT:?}: the check could not catch a deadlock either"
    );
}

// ---------------------------------------------------------------------------------------------
// Orchestrator side
// ---------------------------------------------------------------------------------------------

fn counter_key(name: &str) -> String {
    format!("test:count:{name}")
}

struct Run {
    /// Per name, every critical section that held it.
    intervals: [Vec<(u64, u64)>; 3],
    /// The tasks that reported a wait long enough to be a deadlock.
    deadlocks: Vec<String>,
    elapsed: Duration,
}

fn run_workers(server: &RedisServer, role: &str, workload: &Workload) -> Run {
    let mut workers = workload.start(server, role, STARTUP_LIMIT);
    let started = Instant::now();
    let deadline = started + WORKLOAD_LIMIT;
    let mut run = Run {
        intervals: [Vec::new(), Vec::new(), Vec::new()],
        deadlocks: Vec::new(),
        elapsed: Duration::ZERO,
    };
    // Every worker must report everything and then `DONE`.
    workers.collect_until(DONE, deadline, |i, line| {
        if line.starts_with(DEADLOCK) {
            run.deadlocks.push(format!("worker {i}: {line}"));
        } else {
            let (name, interval) = parse_interval(i, &line);
            run.intervals[name].push(interval);
        }
    });
    workers.reap_all_successful(deadline);
    run.elapsed = started.elapsed();
    run
}

/// `I <name index> <enter> <exit>`.
fn parse_interval(worker: usize, line: &str) -> (usize, (u64, u64)) {
    let fields: Vec<&str> = line.split(' ').collect();
    let parsed = match fields.as_slice() {
        ["I", name, enter, exit] => name
            .parse::<usize>()
            .ok()
            .filter(|&n| n < NAMES.len())
            .zip(enter.parse().ok().zip(exit.parse().ok())),
        _ => None,
    };
    parsed.unwrap_or_else(|| panic!("worker {worker} printed {line:?}, not `I NAME ENTER EXIT`"))
}

// ---------------------------------------------------------------------------------------------
// Worker side
// ---------------------------------------------------------------------------------------------

/// How a task takes the names of a set.
#[derive(Clone, Copy)]
enum Taking {
    /// One MultiMutex for the set.
    Together,
    /// One Mutex per name, in the set's order, each held while the next is awaited: the
    /// textbook deadlock when two sets list shared names in opposite orders.
    OneByOne,
}

/// Connects, reports `READY`, waits for `GO`, runs its tasks, prints every critical section as
/// `I NAME ENTER EXIT` per name held, any suspected deadlock as `DEADLOCK …`, then `DONE`.
fn worker(taking: Taking) {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let iterations: usize = env_parse(ITERATIONS_ENV);
    let index = worker_index();
    let runtime = runtime();
    let (client, conn) = runtime.block_on(connect_with_raw(&url));

    start_barrier();

    let reports = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for task in 0..tasks {
            let first_set = index * tasks + task;
            set.spawn(run_task(
                client.clone(),
                conn.clone(),
                taking,
                first_set,
                iterations,
            ));
        }
        join_within(set, WORKLOAD_LIMIT).await
    });

    say_all(reports.into_iter().flatten());
    say(DONE);
}

/// Locks `iterations` sets in turn, starting from `SETS[first_set]`, and reports each critical
/// section; stops at the first wait that looks like a deadlock.
async fn run_task(
    client: Client,
    mut conn: MultiplexedConnection,
    taking: Taking,
    first_set: usize,
    iterations: usize,
) -> Vec<String> {
    let mut reports = Vec::new();
    for i in 0..iterations {
        let names = SETS[(first_set + i * 5) % SETS.len()];
        let held = match taking {
            Taking::Together => take_together(&client, names).await,
            Taking::OneByOne => take_one_by_one(&client, names).await,
        };
        let held = match held {
            Ok(held) => held,
            Err(stuck) => {
                reports.push(format!("{DEADLOCK} {stuck}"));
                return reports;
            }
        };
        let enter = monotonic_nanos();
        for &name in names {
            increment_non_atomically(&mut conn, NAMES[name]).await;
        }
        let exit = monotonic_nanos();
        for &name in names {
            reports.push(format!("I {name} {enter} {exit}"));
        }
        unlock_all(held).await;
    }
    reports
}

/// Gives back the guards a task holds for one set.
async fn unlock_all(guards: Vec<Guard>) {
    for guard in guards {
        guard.unlock().await.expect("held to the end");
    }
}

async fn take_together(client: &Client, names: &[usize]) -> Result<Vec<Guard>, String> {
    let names_of = || names.iter().map(|&n| NAMES[n]);
    let set: Handle = if let [one] = names {
        client.mutex(NAMES[*one]).expect("name").into()
    } else {
        client.multi_mutex(names_of()).expect("names").into()
    };
    let result = set.lock_timeout(STUCK).await.map(|guard| vec![guard]);
    match result {
        Ok(held) => Ok(held),
        Err(Error::Timeout { name, waited }) => Err(format!("{name} after {waited:?}")),
        Err(other) => panic!("lock {:?}: {other}", names_of().collect::<Vec<_>>()),
    }
}

async fn take_one_by_one(client: &Client, names: &[usize]) -> Result<Vec<Guard>, String> {
    let mut guards = Vec::new();
    for &name in names {
        match client
            .mutex(NAMES[name])
            .expect("name")
            .lock_timeout(CONTROL_WAIT)
            .await
        {
            Ok(guard) => guards.push(guard.into()),
            // Dropping the guards held so far releases them, so the others can go on.
            Err(Error::Timeout { name, waited }) => {
                return Err(format!("{name} after {waited:?}"));
            }
            Err(other) => panic!("lock {}: {other}", NAMES[name]),
        }
        // Holding one name while going for the next is what makes the cycle possible; the
        // pause makes it likely.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(guards)
}

/// GET, yield, SET value+1: an increment that loses updates unless holders exclude each other.
async fn increment_non_atomically(conn: &mut MultiplexedConnection, name: &str) {
    let key = counter_key(name);
    let value: Option<String> = conn.get(&key).await.expect("GET the counter");
    let count: u64 = value.map_or(0, |v| v.parse().expect("the counter holds a number"));
    tokio::task::yield_now().await;
    let () = conn.set(&key, count + 1).await.expect("SET the counter");
}
