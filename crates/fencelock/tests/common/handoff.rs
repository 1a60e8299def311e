//! Hand-offs between waiting processes, for the locks whose releases wake one chosen waiter
//! (the fair mutex, and the mutex): the orchestrator holds the lock while worker processes
//! queue up, releases it, and counts the script calls of the whole chain of hand-offs.

use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Guard, Lease, LockOptions};
use fencelock_testkit::process::{
    env_parse, env_var, monotonic_nanos, say, start_barrier, worker_command, Event, Workers, DONE,
    GO, READY,
};
use fencelock_testkit::{check_no_overlap, Proxy, RedisServer};

use super::{command_calls, join_within, runtime, TASKS_ENV, URL_ENV};

/// The worker role that waits for its turns (see [`waiter_worker`]).
pub const WAITER: &str = "handoff::waiter";
/// The worker roles of the hand-off scenarios.
pub const WORKERS: &[(&str, fn())] = &[(WAITER, waiter_worker)];
/// Which lock the waiters take: `fair` or `mutex`.
const KIND_ENV: &str = "FENCELOCK_TEST_LOCK_KIND";
/// How long each waiter holds the lock, in ms ([`HOLD`] when not set).
const HOLD_ENV: &str = "FENCELOCK_TEST_HOLD_MS";
/// What a waiter says as it takes the lock, before its critical section.
const ENTERED: &str = "IN";
const LOCK: &str = "turns";

const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const WORKLOAD_LIMIT: Duration = Duration::from_secs(30);
/// Long enough that no waiter retries on its timer during a scenario: every script call
/// counted belongs to a hand-off.
const WAKE_FALLBACK: Duration = Duration::from_secs(20);
/// How long each worker holds the lock, unless told otherwise.
const HOLD: Duration = Duration::from_millis(5);

/// The lock the waiters queue for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Fair,
    Mutex,
}

impl Kind {
    fn code(self) -> &'static str {
        match self {
            Kind::Fair => "fair",
            Kind::Mutex => "mutex",
        }
    }

    fn from_env() -> Kind {
        match env_var(KIND_ENV).as_str() {
            "fair" => Kind::Fair,
            "mutex" => Kind::Mutex,
            other => panic!("unknown lock kind {other:?}"),
        }
    }

    /// The key that lists the waiters with a place.
    fn waiters_key(self) -> &'static str {
        match self {
            Kind::Fair => "fencelock:{turns}:fair-line",
            Kind::Mutex => "fencelock:{turns}:mutex-waiters",
        }
    }

    /// Takes `name`, waiting for it.
    async fn lock(self, client: &Client, name: &str) -> Guard {
        let guard: fencelock::Result<Guard> = match self {
            Kind::Fair => {
                let lock = client.fair_mutex_with_options(name, options());
                lock.expect("valid lock").lock().await.map(Guard::from)
            }
            Kind::Mutex => {
                let lock = client.mutex_with_options(name, options());
                lock.expect("valid lock").lock().await.map(Guard::from)
            }
        };
        guard.expect("lock")
    }
}

fn options() -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(Duration::from_secs(30)))
}

fn client_options() -> ClientOptions {
    ClientOptions::default().wake_fallback(WAKE_FALLBACK)
}

/// With 6 waiting processes, then 24 waiters (4 processes × 6 tasks), every hand-off must cost
/// about two script calls (the release, and the chosen waiter's attempt): a release that woke
/// more than one waiter would add refused attempts per hand-off, more the more wait.
pub fn one_wake_up_per_hand_off(kind: Kind) {
    let mut per_hand_off = Vec::new();
    for (processes, tasks) in [(6, 1), (4, 6)] {
        let server = RedisServer::start();
        let run = run_line(kind, &server, processes, tasks, Arrival::AllAtOnce);
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
            "{} script calls for {} hand-offs: releases wake more than one waiter",
            run.calls,
            run.hand_offs
        );
        per_hand_off.push(ratio);
    }
    assert!(
        per_hand_off[1] <= per_hand_off[0] + 0.25,
        "more waiters cost more per hand-off: {per_hand_off:?}"
    );
}

/// How the waiter first in line fails to claim the lock a release offers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// Killed with SIGKILL: its connections close.
    Killed,
    /// Killed, while a pattern subscriber (`PSUBSCRIBE *`) makes every `PUBLISH` count a
    /// listener: its channel still seems heard.
    KilledBehindATap,
    /// Frozen with SIGSTOP (a GC or VM pause, a debugger): its connections stay open, and the
    /// offer's message waits in its socket. It is resumed while the next waiter holds the
    /// lock, and must not take the stale offer for a grant.
    Frozen,
    /// Cut off with its connections still open (half-open, behind a proxy that forwards
    /// nothing); healed while the next waiter holds the lock.
    HalfOpen,
}

/// What the next live waiter may wait, from the release, behind a first waiter that cannot
/// claim: the handoff window (200 ms by default) and then some, far below the first waiter's
/// 30 s lease, which is what the lock would sit idle for if the offer were a grant. The bench
/// measures the figure itself (`fencelock-bench takeover`).
const BEHIND_A_STUCK_WAITER: Duration = Duration::from_secs(1);

/// How long the live waiter holds the lock in [`a_stuck_head_waiter_costs_the_next_the_window`]:
/// long enough that the stuck one comes back while it holds.
const LIVE_HOLD: Duration = Duration::from_millis(1000);

/// Two waiting processes, one behind the other; the one first in line is `stuck`. The live one
/// must hold the lock within [`BEHIND_A_STUCK_WAITER`] of the release, and, when the stuck one
/// comes back (frozen, half-open) while the live one holds, the two must never hold at once.
pub fn a_stuck_head_waiter_costs_the_next_the_window(kind: Kind, stuck: Stuck) {
    let server = RedisServer::start();
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into());
    let env = |url: String, hold: Duration| {
        [
            (URL_ENV, url),
            (TASKS_ENV, "1".to_owned()),
            (KIND_ENV, kind.code().to_owned()),
            (HOLD_ENV, hold.as_millis().to_string()),
        ]
    };
    let commands = [
        worker_command(WAITER, &env(proxy.url(), HOLD)),
        worker_command(WAITER, &env(server.url(), LIVE_HOLD)),
    ];
    let mut workers = Workers::spawn_commands(WAITER, commands);
    workers.expect_from_all(READY, Instant::now() + STARTUP_LIMIT);
    let runtime = runtime();
    let guard = runtime.block_on(async {
        let client = Client::connect_with_options(server.url().as_str(), client_options())
            .await
            .expect("the orchestrator connects to redis");
        kind.lock(&client, LOCK).await
    });
    for i in 0..2 {
        workers.send(i, GO);
        line_reaches(kind, &server, i + 1);
        // Its attempt after subscribing renews its place: let it pass before the next.
        calls_settle(&server);
    }
    let listening = listening_channels(&server);
    let _tap = runtime.block_on(async {
        if stuck != Stuck::KilledBehindATap {
            return None;
        }
        let tap = redis::Client::open(server.url().as_str()).expect("url");
        let mut tap = tap.get_async_pubsub().await.expect("pubsub");
        tap.psubscribe("*").await.expect("psubscribe");
        Some(tap)
    });
    match stuck {
        Stuck::Killed | Stuck::KilledBehindATap => {
            workers.kill(0);
            let deadline = Instant::now() + STARTUP_LIMIT;
            while listening_channels(&server) >= listening {
                assert!(
                    Instant::now() < deadline,
                    "the killed waiter's connection stays open"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Stuck::Frozen => workers.pause(0),
        Stuck::HalfOpen => proxy.set_cut(true),
    }
    assert_eq!(
        line_len(kind, &server),
        2,
        "the stuck waiter keeps its place"
    );

    runtime
        .block_on(guard.unlock())
        .expect("unlock: the lock was held all along");
    let released = monotonic_nanos();
    let comes_back = matches!(stuck, Stuck::Frozen | Stuck::HalfOpen);
    let mut sections = Vec::new();
    let mut done = [!comes_back, false];
    let deadline = Instant::now() + WORKLOAD_LIMIT;
    while !done.iter().all(|d| *d) {
        match workers.next_event(deadline) {
            Event::Line(i, line) if line == DONE => done[i] = true,
            Event::Line(1, line) if line == ENTERED => {
                // The live waiter holds the lock: the stuck one comes back now, its offer's
                // message waiting for it.
                match stuck {
                    Stuck::Frozen => workers.resume(0),
                    Stuck::HalfOpen => proxy.set_cut(false),
                    Stuck::Killed | Stuck::KilledBehindATap => {}
                }
            }
            Event::Line(_, line) if line == ENTERED => {}
            Event::Line(i, line) => sections.push(parse_section(i, &line)),
            // A killed waiter's output closes; the live one must go on.
            Event::Closed(0) if !comes_back => {}
            Event::Closed(i) if done[i] => {}
            Event::Closed(i) => panic!("waiter {i} closed its output before {DONE:?}"),
        }
    }
    if comes_back {
        let status = workers.reap(0, Instant::now() + STARTUP_LIMIT);
        assert!(
            status.success(),
            "the stuck waiter failed once back: {status}"
        );
    } else {
        workers.reap_killed(0, Instant::now() + STARTUP_LIMIT);
    }
    let live = workers.reap(1, Instant::now() + STARTUP_LIMIT);
    assert!(live.success(), "the live waiter failed: {live}");
    let live_section = sections
        .iter()
        .find(|s| s.worker == 1)
        .expect("the live waiter had its turn");
    let after = Duration::from_nanos(live_section.enter.saturating_sub(released));
    println!("    {kind:?}, {stuck:?}: release returned → the live waiter holds it: {after:?}");
    assert!(
        after < BEHIND_A_STUCK_WAITER,
        "the live waiter got the {kind:?} lock {after:?} after the release, behind a {stuck:?} one"
    );
    let mut intervals: Vec<(u64, u64)> = sections.iter().map(|s| (s.enter, s.exit)).collect();
    if let Err(overlap) = check_no_overlap(&mut intervals) {
        panic!("{kind:?}, {stuck:?}: two holders at once: {overlap}");
    }
    assert_eq!(
        sections.len(),
        if comes_back { 2 } else { 1 },
        "each waiter still alive had one turn"
    );
}

/// How many pub/sub channels have a subscriber: each waiting client listens on its own.
fn listening_channels(server: &RedisServer) -> usize {
    server
        .cli(&["PUBSUB", "CHANNELS"])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

pub enum Arrival {
    /// Each worker joins the line only once the one before it is in it.
    OneByOne,
    /// Every worker starts at once.
    AllAtOnce,
}

/// One turn at the lock: which worker had it, from when to when (monotonic nanoseconds).
pub struct Section {
    pub worker: usize,
    pub enter: u64,
    pub exit: u64,
}

pub struct LineRun {
    /// Sorted by entry.
    pub sections: Vec<Section>,
    /// Script calls from the orchestrator's release to the last worker's release.
    pub calls: u64,
    /// Turns handed from one holder to the next: one per waiter.
    pub hand_offs: u64,
    pub elapsed: Duration,
}

/// Holds the `kind` lock while `processes` workers of `tasks` tasks each join the line, then releases
/// it and collects every worker's turn.
pub fn run_line(
    kind: Kind,
    server: &RedisServer,
    processes: usize,
    tasks: usize,
    arrival: Arrival,
) -> LineRun {
    let url = server.url();
    let envs = [
        (URL_ENV, url.clone()),
        (TASKS_ENV, tasks.to_string()),
        (KIND_ENV, kind.code().to_owned()),
    ];
    let mut workers = Workers::spawn(WAITER, processes, &envs);
    workers.expect_from_all(READY, Instant::now() + STARTUP_LIMIT);
    let waiters = processes * tasks;

    let runtime = runtime();
    let client = runtime.block_on(async {
        Client::connect_with_options(url.as_str(), client_options())
            .await
            .expect("the orchestrator connects to redis")
    });
    let guard = runtime.block_on(async {
        // Load every script before counting: a server's first call of a script costs an extra
        // failed EVALSHA (NOSCRIPT) before it is loaded.
        kind.lock(&client, "warm")
            .await
            .unlock()
            .await
            .expect("unlock");
        kind.lock(&client, LOCK).await
    });
    match arrival {
        Arrival::OneByOne => {
            for i in 0..processes {
                workers.send(i, GO);
                line_reaches(kind, server, (i + 1) * tasks);
            }
        }
        Arrival::AllAtOnce => {
            workers.broadcast(GO);
            line_reaches(kind, server, waiters);
        }
    }
    // Each waiter tries once more after subscribing; let those attempts finish first.
    calls_settle(server);

    let calls_before = command_calls(server, "evalsha");
    let started = Instant::now();
    runtime
        .block_on(guard.unlock())
        .expect("unlock: the lock was held all along");
    let deadline = started + WORKLOAD_LIMIT;
    let mut sections = Vec::with_capacity(waiters);
    // Every worker must report its turns and then `DONE`.
    workers.collect_until(DONE, deadline, |i, line| {
        if line != ENTERED {
            sections.push(parse_section(i, &line));
        }
    });
    let elapsed = started.elapsed();
    workers.reap_all_successful(deadline);
    let calls = command_calls(server, "evalsha") - calls_before;
    assert_eq!(sections.len(), waiters, "every waiter had its turn");

    let mut intervals: Vec<(u64, u64)> = sections.iter().map(|s| (s.enter, s.exit)).collect();
    if let Err(overlap) = check_no_overlap(&mut intervals) {
        panic!("two holders of the {kind:?} lock at once: {overlap}");
    }
    sections.sort_by_key(|s| s.enter);
    LineRun {
        sections,
        calls,
        hand_offs: u64::try_from(waiters).expect("a count"),
        elapsed,
    }
}

fn line_len(kind: Kind, server: &RedisServer) -> usize {
    server
        .cli(&["ZCARD", kind.waiters_key()])
        .trim()
        .parse()
        .expect("ZCARD")
}

/// Polls until `len` waiters have a place.
fn line_reaches(kind: Kind, server: &RedisServer, len: usize) {
    let deadline = Instant::now() + STARTUP_LIMIT;
    while line_len(kind, server) != len {
        assert!(
            Instant::now() < deadline,
            "the line stays at {} waiters, expected {len}",
            line_len(kind, server)
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

/// Connects, reports `READY`, waits for `GO`, then runs `TASKS_ENV` tasks that each wait for
/// the lock once, say [`ENTERED`] as they take it, hold it briefly (`HOLD_ENV` ms) and print
/// their turn as `T ENTER EXIT` (monotonic nanoseconds); then prints `DONE`.
pub fn waiter_worker() {
    let url = env_var(URL_ENV);
    let tasks: usize = env_parse(TASKS_ENV);
    let kind = Kind::from_env();
    let hold = std::env::var(HOLD_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(HOLD, Duration::from_millis);
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
            let client = client.clone();
            set.spawn(async move {
                let guard = kind.lock(&client, LOCK).await;
                let enter = monotonic_nanos();
                say(ENTERED);
                tokio::time::sleep(hold).await;
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
