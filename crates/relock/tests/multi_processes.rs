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
//!
//! This binary is its own worker: `main` dispatches on the role a spawned copy was given.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use relock::{Client, Error};
use relock_testkit::process::{monotonic_nanos, run_scenarios, worker_command, worker_role};
use relock_testkit::{check_no_overlap, RedisServer};

/// Environment variables through which the orchestrator configures its workers.
const URL_ENV: &str = "RELOCK_TEST_REDIS_URL";
const TASKS_ENV: &str = "RELOCK_TEST_TASKS";
const ITERATIONS_ENV: &str = "RELOCK_TEST_ITERATIONS";
const WORKER_ENV: &str = "RELOCK_TEST_WORKER";

/// Worker roles.
const MULTI: &str = "multi";
const ONE_BY_ONE: &str = "one-by-one";

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

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const WORKLOAD_LIMIT: Duration = Duration::from_secs(90);
const REAP_LIMIT: Duration = Duration::from_secs(5);

/// Lines of the worker protocol on stdout (stdin carries only `GO`).
const READY: &str = "READY";
const GO: &str = "GO";
const DONE: &str = "DONE";
const DEADLOCK: &str = "DEADLOCK";

fn main() {
    if let Some(role) = worker_role() {
        match role.as_str() {
            MULTI => worker(Taking::Together),
            ONE_BY_ONE => worker(Taking::OneByOne),
            other => panic!("unknown worker role {other:?}"),
        }
        return;
    }
    run_scenarios(&[
        (
            "overlapping_sets_across_processes",
            overlapping_sets_across_processes,
        ),
        (
            "names_taken_one_by_one_deadlock",
            names_taken_one_by_one_deadlock,
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn overlapping_sets_across_processes() {
    let server = RedisServer::start();
    let run = run_workers(&server, MULTI, 4, 4, 40);
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
    let run = run_workers(&server, ONE_BY_ONE, 4, 4, 40);
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

fn run_workers(
    server: &RedisServer,
    role: &str,
    processes: usize,
    tasks: usize,
    iterations: usize,
) -> Run {
    let mut workers = Workers::spawn(role, processes, |i| {
        vec![
            (URL_ENV, server.url()),
            (TASKS_ENV, tasks.to_string()),
            (ITERATIONS_ENV, iterations.to_string()),
            (WORKER_ENV, i.to_string()),
        ]
    });
    workers.expect_from_all(READY, Instant::now() + STARTUP_LIMIT);
    workers.broadcast(GO);
    let started = Instant::now();
    let deadline = started + WORKLOAD_LIMIT;
    let mut run = Run {
        intervals: [Vec::new(), Vec::new(), Vec::new()],
        deadlocks: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut done = vec![false; processes];
    let mut open = processes;
    while open > 0 {
        match workers.next_event(deadline) {
            Event::Line(i, line) if line == DONE => done[i] = true,
            Event::Line(i, line) if line.starts_with(DEADLOCK) => {
                run.deadlocks.push(format!("worker {i}: {line}"));
            }
            Event::Line(i, line) => {
                let (name, interval) = parse_interval(i, &line);
                run.intervals[name].push(interval);
            }
            Event::Closed(_) => open -= 1,
        }
    }
    for (i, done) in done.into_iter().enumerate() {
        let status = workers.reap(i, deadline);
        assert!(status.success(), "worker {i} failed: {status}");
        assert!(done, "worker {i} exited without reporting everything");
    }
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

enum Event {
    Line(usize, String),
    Closed(usize),
}

/// Worker processes whose stdout is read line by line on threads, so that no worker blocks on
/// a full pipe. Dropping it kills and reaps every worker still running, so that a failed
/// assertion leaves no process behind.
struct Workers {
    role: String,
    children: Vec<Child>,
    events: mpsc::Receiver<Event>,
}

impl Workers {
    fn spawn(
        role: &str,
        count: usize,
        envs: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Workers {
        let (sender, events) = mpsc::channel();
        let mut workers = Workers {
            role: role.to_owned(),
            children: Vec::with_capacity(count),
            events,
        };
        for i in 0..count {
            let mut child = worker_command(role, &envs(i))
                .stdin(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot spawn worker {i} ({role}): {e}"));
            let stdout = child.stdout.take().expect("worker stdout is piped");
            // Pushed before anything else can fail, so that Drop reaps it.
            workers.children.push(child);
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(Event::Line(i, line)).is_err() {
                        return;
                    }
                }
                let _ = sender.send(Event::Closed(i));
            });
        }
        workers
    }

    fn next_event(&self, deadline: Instant) -> Event {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} workers: no output before the deadline", self.role)
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{} workers: every output pipe closed", self.role)
            }
        }
    }

    /// Waits until every worker printed `expected`; any other output first is a failure.
    fn expect_from_all(&self, expected: &str, deadline: Instant) {
        let mut pending = vec![true; self.children.len()];
        while pending.contains(&true) {
            match self.next_event(deadline) {
                Event::Line(i, line) if line == expected && pending[i] => pending[i] = false,
                Event::Line(i, line) => panic!(
                    "{} worker {i} printed {line:?} while waiting for {expected:?}",
                    self.role
                ),
                Event::Closed(i) => panic!(
                    "{} worker {i} closed its output before {expected:?}",
                    self.role
                ),
            }
        }
    }

    fn broadcast(&mut self, line: &str) {
        for (i, child) in self.children.iter_mut().enumerate() {
            let stdin = child.stdin.as_mut().expect("worker stdin is piped");
            writeln!(stdin, "{line}")
                .and_then(|()| stdin.flush())
                .unwrap_or_else(|e| panic!("cannot write to worker {i}: {e}"));
        }
    }

    /// Waits for worker `index` to exit, polling until `deadline`.
    fn reap(&mut self, index: usize, deadline: Instant) -> ExitStatus {
        let child = &mut self.children[index];
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => panic!("{} worker {index} still runs at its deadline", self.role),
                Err(e) => panic!("cannot wait for {} worker {index}: {e}", self.role),
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // No panics here: this also runs while a failed assertion unwinds.
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(Some(_))) {
                continue;
            }
            let _ = child.kill();
            let deadline = Instant::now() + REAP_LIMIT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Worker side
// ---------------------------------------------------------------------------------------------

fn env_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker started without {name}"))
}

fn env_count(name: &str) -> usize {
    let value = env_var(name);
    value
        .parse()
        .unwrap_or_else(|_| panic!("{name}={value:?} is not a count"))
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .expect("write to the orchestrator");
}

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
    let tasks = env_count(TASKS_ENV);
    let iterations = env_count(ITERATIONS_ENV);
    let index = env_count(WORKER_ENV);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (client, conn) = runtime.block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the worker connects to redis");
        let conn = redis::Client::open(url.as_str())
            .expect("valid redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("the worker opens a raw redis connection");
        (client, conn)
    });

    say(READY);
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .expect("read the start signal");
    assert_eq!(go.trim(), GO, "the orchestrator went away before the start");

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
        let all = async {
            let mut reports = Vec::new();
            while let Some(done) = set.join_next().await {
                reports.extend(done.expect("a task panicked"));
            }
            reports
        };
        tokio::time::timeout(WORKLOAD_LIMIT, all)
            .await
            .expect("the worker's tasks finish in time")
    });

    let mut out = BufWriter::new(std::io::stdout().lock());
    for line in reports {
        writeln!(out, "{line}").expect("write a report");
    }
    writeln!(out, "{DONE}")
        .and_then(|()| out.flush())
        .expect("write to the orchestrator");
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
        held.unlock().await;
    }
    reports
}

/// Whatever guards a task holds for one set.
enum HeldSet {
    Multi(relock::MultiMutexGuard),
    Single(relock::MutexGuard),
    Each(Vec<relock::MutexGuard>),
}

impl HeldSet {
    async fn unlock(self) {
        match self {
            HeldSet::Multi(guard) => guard.unlock().await.expect("held to the end"),
            HeldSet::Single(guard) => guard.unlock().await.expect("held to the end"),
            HeldSet::Each(guards) => {
                for guard in guards {
                    guard.unlock().await.expect("held to the end");
                }
            }
        }
    }
}

async fn take_together(client: &Client, names: &[usize]) -> Result<HeldSet, String> {
    let names_of = || names.iter().map(|&n| NAMES[n]);
    let result = if let [one] = names {
        client
            .mutex(NAMES[*one])
            .expect("name")
            .lock_timeout(STUCK)
            .await
            .map(HeldSet::Single)
    } else {
        client
            .multi_mutex(names_of())
            .expect("names")
            .lock_timeout(STUCK)
            .await
            .map(HeldSet::Multi)
    };
    match result {
        Ok(held) => Ok(held),
        Err(Error::Timeout { name, waited }) => Err(format!("{name} after {waited:?}")),
        Err(other) => panic!("lock {:?}: {other}", names_of().collect::<Vec<_>>()),
    }
}

async fn take_one_by_one(client: &Client, names: &[usize]) -> Result<HeldSet, String> {
    let mut guards = Vec::new();
    for &name in names {
        match client
            .mutex(NAMES[name])
            .expect("name")
            .lock_timeout(CONTROL_WAIT)
            .await
        {
            Ok(guard) => guards.push(guard),
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
    Ok(HeldSet::Each(guards))
}

/// GET, yield, SET value+1: an increment that loses updates unless holders exclude each other.
async fn increment_non_atomically(conn: &mut MultiplexedConnection, name: &str) {
    let key = counter_key(name);
    let value: Option<String> = conn.get(&key).await.expect("GET the counter");
    let count: u64 = value.map_or(0, |v| v.parse().expect("the counter holds a number"));
    tokio::task::yield_now().await;
    let () = conn.set(&key, count + 1).await.expect("SET the counter");
}
