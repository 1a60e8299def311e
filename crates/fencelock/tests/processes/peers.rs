//! fencelock's [`ForeignMutex`](fencelock::ForeignMutex) against the lock libraries of other
//! languages, each in processes of its own, against a real `redis-server`. The peers are the
//! pinned installs of `cargo xtask setup` (`fencelock_peers`), run by their workers; fencelock is
//! the worker role `peers::fencelock` of this binary, which speaks the same protocol
//! (crates/fencelock-peers/workers/README.md). A peer that is not installed fails the test.
//!
//! - `<layout>_and_fencelock_share_one_lock`: fencelock workers and the peers of a layout all
//!   increment one counter under one name: no overlap, no lost update, every worker gets its
//!   turns, and the lock is left free.
//! - `<peer>::our_release_lets_theirs_in`, `<peer>::their_release_lets_ours_in`: a holder of one
//!   side, a waiter of the other, a release: the waiter is in well before the holder's 20 s
//!   lease would have run out. For python-redis-lock and Redisson these are the wake-ups across
//!   languages: their waiters block for a whole lease unless a release signals (the list
//!   `lock-signal:N`, the message `0`), and fencelock's waiter on Redisson's layout is given a
//!   30 s wake fallback, so only the message can wake it in time.
//! - `<peer>::their_killed_holder_frees_it_for_us`, `<peer>::our_killed_holder_frees_it_for_them`:
//!   a holder killed with SIGKILL, after more than a lease of renewals, leaves the lock to the
//!   other side's waiter within its lease.
//! - `<peer>::our_late_release_leaves_theirs_held`: a fencelock grant that ran out of its lease
//!   is released after a peer took the lock: the release is refused and the peer's lock stays.
//! - `a_lock_on_another_key_is_caught`: fencelock in redis-py's layout and pottery on one name
//!   keep two keys (`N`, `redlock:N`): the checks above do see the overlaps, so they would see
//!   a layout whose key is off by a prefix.

use std::time::{Duration, Instant};

use crate::common::runtime;
use fencelock::{Client, ClientOptions, Error, Layout, Lease, LockOptions};
use fencelock_peers::{Installed, Mode, Peer, Worker};
use fencelock_testkit::process::{
    env_parse, env_var, monotonic_nanos, say, worker_command, Event, Workers, DONE, GO, READY,
};
use fencelock_testkit::{check_no_overlap, RedisServer};
use redis::AsyncCommands;

/// The worker role: a fencelock `ForeignMutex` speaking the peers' worker protocol.
const FENCELOCK: &str = "peers::fencelock";

// The worker's arguments, as the peers' workers take them on their command line.
const URL_ENV: &str = "FENCELOCK_PEER_URL";
const LAYOUT_ENV: &str = "FENCELOCK_PEER_LAYOUT";
const NAME_ENV: &str = "FENCELOCK_PEER_NAME";
const COUNTER_ENV: &str = "FENCELOCK_PEER_COUNTER";
const MODE_ENV: &str = "FENCELOCK_PEER_MODE";
const ITERATIONS_ENV: &str = "FENCELOCK_PEER_ITERATIONS";
const LEASE_ENV: &str = "FENCELOCK_PEER_LEASE_MS";
const HOLD_ENV: &str = "FENCELOCK_PEER_HOLD_MS";
const GAP_ENV: &str = "FENCELOCK_PEER_GAP_MS";
/// `1`: a fixed lease, never renewed.
const FIXED_ENV: &str = "FENCELOCK_PEER_FIXED";
/// The client's wake fallback, in ms.
const FALLBACK_ENV: &str = "FENCELOCK_PEER_WAKE_FALLBACK_MS";

/// How long a worker may take to start (an interpreter on a loaded machine) or to finish.
const PATIENCE: Duration = Duration::from_secs(60);
/// The lease of the hand-over scenarios: long, so that only a release lets the waiter in.
const LONG_LEASE: Duration = Duration::from_secs(20);
/// The longest a waiter may take to get in after a release: a polling waiter tries again
/// within 0.3 s, a woken one at once; a loaded machine gets the rest.
const HANDOVER_LIMIT: Duration = Duration::from_secs(3);
/// The lease of the killed-holder scenarios and the counter loops (whole seconds, as
/// python-redis-lock keeps them).
const SHORT_LEASE: Duration = Duration::from_secs(2);

/// The scenarios, named as libtest names tests of module `peers`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "peers::plain_token_layouts_and_fencelock_share_one_lock",
        plain_token_layouts_and_fencelock_share_one_lock,
    ),
    ("peers::pottery_and_fencelock_share_one_lock", || {
        share_one_lock(&[Peer::Pottery])
    }),
    (
        "peers::redis_semaphore_and_fencelock_share_one_lock",
        || share_one_lock(&[Peer::RedisSemaphore]),
    ),
    (
        "peers::python_redis_lock_and_fencelock_share_one_lock",
        || share_one_lock(&[Peer::PythonRedisLock]),
    ),
    (
        "peers::redisson_layouts_and_fencelock_share_one_lock",
        || share_one_lock(&[Peer::Redisson, Peer::NodeRedisson]),
    ),
    (
        "peers::a_lock_on_another_key_is_caught",
        a_lock_on_another_key_is_caught,
    ),
    (
        "peers::redis_py::our_late_release_leaves_theirs_held",
        || our_late_release_leaves_theirs_held(Peer::RedisPy),
    ),
    (
        "peers::python_redis_lock::our_late_release_leaves_theirs_held",
        || our_late_release_leaves_theirs_held(Peer::PythonRedisLock),
    ),
    (
        "peers::redisson::our_late_release_leaves_theirs_held",
        || our_late_release_leaves_theirs_held(Peer::Redisson),
    ),
    ("peers::redis_py::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::RedisPy)
    }),
    ("peers::redis_py::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::RedisPy)
    }),
    (
        "peers::redis_py::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::RedisPy),
    ),
    (
        "peers::redis_py::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::RedisPy),
    ),
    (
        "peers::python_redis_lock::our_release_lets_theirs_in",
        || our_release_lets_theirs_in(Peer::PythonRedisLock),
    ),
    (
        "peers::python_redis_lock::their_release_lets_ours_in",
        || their_release_lets_ours_in(Peer::PythonRedisLock),
    ),
    (
        "peers::python_redis_lock::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::PythonRedisLock),
    ),
    (
        "peers::python_redis_lock::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::PythonRedisLock),
    ),
    ("peers::pottery::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::Pottery)
    }),
    ("peers::pottery::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::Pottery)
    }),
    (
        "peers::pottery::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::Pottery),
    ),
    (
        "peers::pottery::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::Pottery),
    ),
    ("peers::redlock::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::Redlock)
    }),
    ("peers::redlock::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::Redlock)
    }),
    (
        "peers::redlock::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::Redlock),
    ),
    (
        "peers::redlock::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::Redlock),
    ),
    ("peers::redis_semaphore::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::RedisSemaphore)
    }),
    ("peers::redis_semaphore::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::RedisSemaphore)
    }),
    (
        "peers::redis_semaphore::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::RedisSemaphore),
    ),
    (
        "peers::redis_semaphore::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::RedisSemaphore),
    ),
    ("peers::node_redisson::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::NodeRedisson)
    }),
    ("peers::node_redisson::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::NodeRedisson)
    }),
    (
        "peers::node_redisson::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::NodeRedisson),
    ),
    (
        "peers::node_redisson::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::NodeRedisson),
    ),
    ("peers::redisson::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::Redisson)
    }),
    ("peers::redisson::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::Redisson)
    }),
    (
        "peers::redisson::their_killed_holder_frees_it_for_us",
        || their_killed_holder_frees_it_for_us(Peer::Redisson),
    ),
    (
        "peers::redisson::our_killed_holder_frees_it_for_them",
        || our_killed_holder_frees_it_for_them(Peer::Redisson),
    ),
    ("peers::rslock::our_release_lets_theirs_in", || {
        our_release_lets_theirs_in(Peer::Rslock)
    }),
    ("peers::rslock::their_release_lets_ours_in", || {
        their_release_lets_ours_in(Peer::Rslock)
    }),
    ("peers::rslock::their_killed_holder_frees_it_for_us", || {
        their_killed_holder_frees_it_for_us(Peer::Rslock)
    }),
    ("peers::rslock::our_killed_holder_frees_it_for_them", || {
        our_killed_holder_frees_it_for_them(Peer::Rslock)
    }),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] = &[(FENCELOCK, fencelock_worker)];

/// The layout fencelock keeps a lock in to share it with `peer`.
fn layout_of(peer: Peer) -> Layout {
    match peer {
        Peer::RedisPy => Layout::RedisPy,
        Peer::PythonRedisLock => Layout::PythonRedisLock,
        Peer::Pottery => Layout::Pottery,
        Peer::Redlock => Layout::NodeRedlock,
        Peer::RedisSemaphore => Layout::RedisSemaphore,
        Peer::NodeRedisson | Peer::Redisson => Layout::Redisson,
        Peer::Rslock => Layout::Rslock,
    }
}

fn installed() -> Installed {
    Installed::locate().unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------------
// The workers of a scenario: fencelock's and the peers', one protocol
// ---------------------------------------------------------------------------------------------

/// A fencelock worker's arguments, as [`Worker`] holds a peer's.
#[derive(Clone)]
struct Ours {
    layout: Layout,
    url: String,
    name: String,
    counter: String,
    mode: Mode,
    lease: Duration,
    hold: Duration,
    gap: Duration,
    fixed: bool,
    wake_fallback: Duration,
}

impl Ours {
    fn new(layout: Layout, url: &str, name: &str, mode: Mode, lease: Duration) -> Ours {
        Ours {
            layout,
            url: url.to_owned(),
            name: name.to_owned(),
            counter: "counter".to_owned(),
            mode,
            lease,
            hold: Duration::from_millis(2),
            gap: Duration::ZERO,
            fixed: false,
            wake_fallback: Duration::from_secs(1),
        }
    }

    fn command(&self) -> std::process::Command {
        let (mode, iterations) = match self.mode {
            Mode::Loop { iterations } => ("loop", iterations),
            Mode::Hold => ("hold", 0),
            Mode::Wait => ("wait", 0),
        };
        let millis = |d: Duration| d.as_millis().to_string();
        worker_command(
            FENCELOCK,
            &[
                (URL_ENV, self.url.clone()),
                (LAYOUT_ENV, self.layout.name().to_owned()),
                (NAME_ENV, self.name.clone()),
                (COUNTER_ENV, self.counter.clone()),
                (MODE_ENV, mode.to_owned()),
                (ITERATIONS_ENV, iterations.to_string()),
                (LEASE_ENV, millis(self.lease)),
                (HOLD_ENV, millis(self.hold)),
                (GAP_ENV, millis(self.gap)),
                (FIXED_ENV, u8::from(self.fixed).to_string()),
                (FALLBACK_ENV, millis(self.wake_fallback)),
            ],
        )
    }
}

/// Spawns `commands` as one group and lets them all begin at once.
fn spawn(role: &str, commands: Vec<std::process::Command>) -> Workers {
    let mut workers = Workers::spawn_commands(role, commands);
    workers.start_together(Instant::now() + PATIENCE);
    workers
}

/// The next line of a group of one worker: it must start with `word`; returns the stamp that
/// follows it.
fn stamp(workers: &Workers, word: &str) -> u64 {
    match workers.next_event(Instant::now() + PATIENCE) {
        Event::Line(_, line) => {
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some(word), "expected {word}, read {line:?}");
            words
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("{word} without a stamp: {line:?}"))
        }
        Event::Closed(_) => panic!("the worker exited before {word}"),
    }
}

/// Reads a worker's last line and its exit.
fn finish(workers: &mut Workers) {
    match workers.next_event(Instant::now() + PATIENCE) {
        Event::Line(_, line) => assert_eq!(line, DONE),
        Event::Closed(_) => panic!("the worker exited before {DONE}"),
    }
    workers.reap_all_successful(Instant::now() + PATIENCE);
}

// ---------------------------------------------------------------------------------------------
// One counter, one name, every side
// ---------------------------------------------------------------------------------------------

/// Iterations of each worker of the counter loops: short, since interpreters start slowly.
const ITERATIONS: u64 = 6;

/// What a group of workers did to the counter.
struct Sections {
    /// `(enter, exit, worker)` of every critical section, in the workers' monotonic stamps.
    sections: Vec<(u64, u64, usize)>,
    per_worker: Vec<u64>,
    overlaps_seen: u64,
}

/// Runs `commands` in loop mode on one counter and collects their sections.
fn run_loops(role: &str, commands: Vec<std::process::Command>) -> Sections {
    let count = commands.len();
    let mut workers = spawn(role, commands);
    let mut run = Sections {
        sections: Vec::new(),
        per_worker: vec![0; count],
        overlaps_seen: 0,
    };
    workers.collect_until(DONE, Instant::now() + PATIENCE * 3, |i, line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["SECTION", enter, exit] => {
                let parse = |n: &str| n.parse::<u64>().expect("nanoseconds");
                run.sections.push((parse(enter), parse(exit), i));
                run.per_worker[i] += 1;
            }
            ["OVERLAP", _] => run.overlaps_seen += 1,
            _ => panic!("{role} worker {i}: {line:?}"),
        }
    });
    workers.reap_all_successful(Instant::now() + PATIENCE);
    run
}

/// Checks that the workers of `run` took turns on the counter: every section of each, none
/// overlapping another, no update lost, and the lock left free at `key`.
fn check_turns(server: &RedisServer, run: &mut Sections, names: &[String], key: &[u8]) {
    let total: u64 = run.per_worker.iter().sum();
    assert_eq!(
        run.per_worker,
        vec![ITERATIONS; names.len()],
        "sections per worker ({names:?})"
    );
    run.sections.sort_unstable();
    let mut intervals: Vec<(u64, u64)> = run.sections.iter().map(|&(a, b, _)| (a, b)).collect();
    check_no_overlap(&mut intervals)
        .unwrap_or_else(|e| panic!("two holders at once among {names:?}: {e}"));
    assert_eq!(run.overlaps_seen, 0);
    assert_eq!(server.cli(&["GET", "counter"]), total.to_string());
    assert_eq!(server.cli(&["EXISTS", "counter:overlaps"]), "0");
    assert_eq!(server.cli(&["GET", "counter:inside"]), "0");
    let key = String::from_utf8(key.to_vec()).expect("a text key");
    assert_eq!(
        server.cli(&["EXISTS", &key]),
        "0",
        "released, not left to expire"
    );
    // Who took the lock after whom: every worker's release let another worker in.
    let handoffs: Vec<(usize, usize)> = run
        .sections
        .windows(2)
        .filter(|w| w[0].2 != w[1].2)
        .map(|w| (w[0].2, w[1].2))
        .collect();
    let mut told = Vec::new();
    for (from, to) in &handoffs {
        let pair = format!("{} -> {}", names[*from], names[*to]);
        if !told.contains(&pair) {
            told.push(pair);
        }
    }
    assert!(!handoffs.is_empty(), "no worker ever followed another");
    println!(
        "    {total} sections, {} hand-overs between workers: {}",
        handoffs.len(),
        told.join(", ")
    );
}

/// Fencelock in every plain-token layout whose key is the name itself (redis-py's,
/// node-redlock's, go-redsync's, rslock's) and the installable peers of those libraries: one
/// lock, seven processes, four libraries, three languages.
fn plain_token_layouts_and_fencelock_share_one_lock() {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let name = "jobs:nightly";
    let mode = Mode::Loop {
        iterations: ITERATIONS,
    };
    let peers = [Peer::RedisPy, Peer::Redlock, Peer::Rslock];
    let ours = [
        Layout::RedisPy,
        Layout::NodeRedlock,
        Layout::GoRedsync,
        Layout::Rslock,
    ];
    let mut commands = Vec::new();
    let mut names = Vec::new();
    for layout in ours {
        assert_eq!(layout.key(name), name.as_bytes());
        let worker = Ours::new(layout, &url, name, mode, SHORT_LEASE).pace();
        commands.push(worker.command());
        names.push(format!("fencelock ({layout})"));
    }
    for peer in peers {
        assert_eq!(peer.key(name), name);
        let worker = Worker::new(peer, &url, name, "counter", mode, SHORT_LEASE)
            .hold(PACE_HOLD)
            .gap(PACE_GAP);
        commands.push(worker.command(&installed));
        names.push(peer.name().to_owned());
    }
    let mut run = run_loops("plain-token", commands);
    check_turns(&server, &mut run, &names, name.as_bytes());
}

/// How long a section of the loops holds the lock, and how long a worker pauses after it:
/// long enough a pause for the polling workers to find the lock free now and then.
const PACE_HOLD: Duration = Duration::from_millis(5);
const PACE_GAP: Duration = Duration::from_millis(60);

impl Ours {
    /// The pace of the counter loops.
    fn pace(mut self) -> Ours {
        self.hold = PACE_HOLD;
        self.gap = PACE_GAP;
        self
    }
}

/// Two fencelock workers in the layout of `peers` (which share it) and one worker of each peer.
fn share_one_lock(peers: &[Peer]) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let name = "reports";
    let layout = layout_of(peers[0]);
    let mode = Mode::Loop {
        iterations: ITERATIONS,
    };
    let key = layout.key(name);
    let mut commands = Vec::new();
    let mut names = Vec::new();
    for n in 0..2 {
        let worker = Ours::new(layout, &url, name, mode, SHORT_LEASE).pace();
        commands.push(worker.command());
        names.push(format!("fencelock {n} ({layout})"));
    }
    for &peer in peers {
        assert_eq!(peer.key(name).as_bytes(), key.as_slice());
        let worker = Worker::new(peer, &url, name, "counter", mode, SHORT_LEASE)
            .hold(PACE_HOLD)
            .gap(PACE_GAP);
        commands.push(worker.command(&installed));
        names.push(peer.name().to_owned());
    }
    let mut run = run_loops(layout.name(), commands);
    check_turns(&server, &mut run, &names, &key);
}

/// The control: fencelock in redis-py's layout keeps `jobs`, pottery `redlock:jobs`: two locks,
/// and the checks of the loops see their holders overlap and lose updates.
fn a_lock_on_another_key_is_caught() {
    const LOOPS: u64 = 20;
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let mode = Mode::Loop { iterations: LOOPS };
    assert_ne!(Layout::RedisPy.key("jobs"), Layout::Pottery.key("jobs"));
    let mut ours = Ours::new(Layout::RedisPy, &url, "jobs", mode, SHORT_LEASE);
    ours.hold = Duration::from_millis(5);
    let theirs = Worker::new(Peer::Pottery, &url, "jobs", "counter", mode, SHORT_LEASE)
        .hold(Duration::from_millis(5));
    let mut run = run_loops(
        "another-key",
        vec![ours.command(), theirs.command(&installed)],
    );
    let mut intervals: Vec<(u64, u64)> = run.sections.iter().map(|&(a, b, _)| (a, b)).collect();
    let counter: u64 = server.cli(&["GET", "counter"]).parse().expect("a count");
    let overlaps: u64 = server
        .cli(&["GET", "counter:overlaps"])
        .parse()
        .unwrap_or(0);
    run.sections.clear();
    assert!(
        check_no_overlap(&mut intervals).is_err(),
        "two locks of different keys never overlapped: the check could not catch a wrong key"
    );
    assert!(overlaps > 0 && overlaps == run.overlaps_seen);
    println!(
        "    fencelock on `jobs`, pottery on `redlock:jobs`: {overlaps} overlaps, {counter} of {} \
         updates kept",
        2 * LOOPS
    );
}

// ---------------------------------------------------------------------------------------------
// One side holds, the other waits
// ---------------------------------------------------------------------------------------------

/// The time from `released` to `acquired`, which must come after it and within
/// [`HANDOVER_LIMIT`].
fn handover(peer: Peer, released: u64, acquired: u64, who: &str) -> Duration {
    assert!(acquired > released, "{who} acquired before the release");
    let latency = Duration::from_nanos(acquired - released);
    assert!(
        latency < HANDOVER_LIMIT,
        "{}: {who} was in {latency:?} after the release (lease {LONG_LEASE:?})",
        peer.name()
    );
    println!(
        "    {}: {who} was in {latency:?} after the release",
        peer.name()
    );
    latency
}

/// A fencelock holder, a waiter of `peer`, fencelock's release: the waiter is in at once.
fn our_release_lets_theirs_in(peer: Peer) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let layout = layout_of(peer);
    let mut holder = spawn(
        "fencelock holder",
        vec![Ours::new(layout, &url, "report", Mode::Hold, LONG_LEASE).command()],
    );
    stamp(&holder, "HELD");
    let key = String::from_utf8(layout.key("report")).expect("text");
    assert_eq!(server.cli(&["EXISTS", &key]), "1");
    let waiter_worker = Worker::new(peer, &url, "report", "counter", Mode::Wait, LONG_LEASE);
    let mut waiter = spawn("peer waiter", vec![waiter_worker.command(&installed)]);
    stamp(&waiter, "WAITING");
    let released = monotonic_nanos();
    holder.send(0, "RELEASE");
    stamp(&holder, "RELEASED");
    finish(&mut holder);
    let acquired = stamp(&waiter, "ACQUIRED");
    stamp(&waiter, "RELEASED");
    finish(&mut waiter);
    handover(peer, released, acquired, "their waiter");
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
}

/// A holder of `peer`, a fencelock waiter, the peer's release: the waiter is in at once.
fn their_release_lets_ours_in(peer: Peer) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let layout = layout_of(peer);
    let holder_worker = Worker::new(peer, &url, "report", "counter", Mode::Hold, LONG_LEASE);
    let mut holder = spawn("peer holder", vec![holder_worker.command(&installed)]);
    stamp(&holder, "HELD");
    let mut ours = Ours::new(layout, &url, "report", Mode::Wait, LONG_LEASE);
    // Longer than the lease: where releases are announced, only the announcement can wake
    // this waiter in time; elsewhere it polls.
    ours.wake_fallback = Duration::from_secs(30);
    let mut waiter = spawn("fencelock waiter", vec![ours.command()]);
    stamp(&waiter, "WAITING");
    waiting_in_earnest(&server, layout);
    let released = monotonic_nanos();
    holder.send(0, "RELEASE");
    stamp(&holder, "RELEASED");
    finish(&mut holder);
    let acquired = stamp(&waiter, "ACQUIRED");
    stamp(&waiter, "RELEASED");
    finish(&mut waiter);
    handover(peer, released, acquired, "our waiter");
    let key = String::from_utf8(layout.key("report")).expect("text");
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
}

/// Returns once a fencelock waiter that said `WAITING` (before its waiting call) is asleep in
/// it: in Redisson's layout, subscribed to the unlock channel (so that only the message can
/// wake it in time); in the others, past its first tries.
fn waiting_in_earnest(server: &RedisServer, layout: Layout) {
    if layout == Layout::Redisson {
        let channel = "redisson_lock__channel:{report}";
        let until = Instant::now() + PATIENCE;
        while server.cli(&["PUBSUB", "NUMSUB", channel]) != format!("{channel}\n1") {
            assert!(
                Instant::now() < until,
                "our waiter never subscribed to {channel}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Its attempts after the subscription are refused and it goes to sleep.
    std::thread::sleep(Duration::from_millis(500));
}

/// A holder of one side, renewed past its lease, killed with SIGKILL: the other side's waiter
/// is in within the lease (and a retry), never while the holder lived.
fn killed_holder_frees_it(
    server: &RedisServer,
    key: &[u8],
    holder_command: std::process::Command,
    waiter_command: std::process::Command,
    who: &str,
) {
    let mut holder = spawn("holder", vec![holder_command]);
    stamp(&holder, "HELD");
    let mut waiter = spawn("waiter", vec![waiter_command]);
    stamp(&waiter, "WAITING");
    // Renewed, the lock outlives its first lease.
    std::thread::sleep(SHORT_LEASE + SHORT_LEASE / 6);
    holder.refuse_line("LOST");
    waiter.refuse_line("ACQUIRED");
    let killed = monotonic_nanos();
    holder.kill(0);
    // What the dead holder left ends within its lease: no longer, whoever renewed it.
    let key = String::from_utf8(key.to_vec()).expect("a text key");
    let pttl: i64 = server.cli(&["PTTL", &key]).parse().expect("a pttl");
    let lease_ms = i64::try_from(SHORT_LEASE.as_millis()).expect("a short lease");
    assert!(
        pttl == -2 || (0..=lease_ms).contains(&pttl),
        "{who}: the killed holder's key lives {pttl} ms more"
    );
    holder.reap_killed(0, Instant::now() + PATIENCE);
    let acquired = stamp(&waiter, "ACQUIRED");
    stamp(&waiter, "RELEASED");
    finish(&mut waiter);
    assert!(acquired > killed, "acquired before the holder was killed");
    let after = Duration::from_nanos(acquired - killed);
    // The key expires within a lease of the kill; a waiter notices at its next try, which
    // python-redis-lock's and Redisson's waiters make after at most another lease.
    assert!(
        after < SHORT_LEASE * 2 + Duration::from_secs(2),
        "{who}: in after {after:?}"
    );
    println!("    {who}: the waiter was in {after:?} after the kill");
}

fn their_killed_holder_frees_it_for_us(peer: Peer) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let holder = Worker::new(peer, &url, "report", "counter", Mode::Hold, SHORT_LEASE);
    let waiter = Ours::new(layout_of(peer), &url, "report", Mode::Wait, SHORT_LEASE);
    killed_holder_frees_it(
        &server,
        &layout_of(peer).key("report"),
        holder.command(&installed),
        waiter.command(),
        &format!("{} killed, fencelock waiting", peer.name()),
    );
}

fn our_killed_holder_frees_it_for_them(peer: Peer) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let holder = Ours::new(layout_of(peer), &url, "report", Mode::Hold, SHORT_LEASE);
    let waiter = Worker::new(peer, &url, "report", "counter", Mode::Wait, SHORT_LEASE);
    killed_holder_frees_it(
        &server,
        &layout_of(peer).key("report"),
        holder.command(),
        waiter.command(&installed),
        &format!("fencelock killed, {} waiting", peer.name()),
    );
}

/// A fencelock grant on a fixed lease runs out; `peer` takes the lock; fencelock's release
/// comes late: it is refused (`NOTHELD`), and the peer's lock stays as it was, which the peer's
/// own release then confirms.
fn our_late_release_leaves_theirs_held(peer: Peer) {
    let installed = installed();
    let server = RedisServer::start();
    let url = server.url();
    let layout = layout_of(peer);
    let key = String::from_utf8(layout.key("report")).expect("text");
    let mut ours = Ours::new(layout, &url, "report", Mode::Hold, SHORT_LEASE);
    ours.fixed = true;
    let mut late = spawn("late holder", vec![ours.command()]);
    stamp(&late, "HELD");
    let gone_by = Instant::now() + SHORT_LEASE * 3;
    while server.cli(&["EXISTS", &key]) == "1" {
        assert!(Instant::now() < gone_by, "the fixed lease never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let theirs = Worker::new(peer, &url, "report", "counter", Mode::Hold, LONG_LEASE);
    let mut holder = spawn("peer holder", vec![theirs.command(&installed)]);
    stamp(&holder, "HELD");
    let held_as = dump(&server, &key);
    late.send(0, "RELEASE");
    // Its guard saw the lease end, then its release was refused.
    stamp(&late, "LOST");
    stamp(&late, "NOTHELD");
    finish(&mut late);
    assert_eq!(
        dump(&server, &key),
        held_as,
        "the late release touched their lock"
    );
    if peer == Peer::PythonRedisLock {
        // Nor did it signal a release that did not happen.
        assert_eq!(server.cli(&["EXISTS", "lock-signal:report"]), "0");
    }
    holder.send(0, "RELEASE");
    stamp(&holder, "RELEASED");
    finish(&mut holder);
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
}

/// The key's type and content, to compare before and after.
fn dump(server: &RedisServer, key: &str) -> String {
    let kind = server.cli(&["TYPE", key]);
    let content = match kind.as_str() {
        "string" => server.cli(&["GET", key]),
        "hash" => server.cli(&["HGETALL", key]),
        other => panic!("{key} is a {other}"),
    };
    format!("{kind} {content}")
}

// ---------------------------------------------------------------------------------------------
// The fencelock worker
// ---------------------------------------------------------------------------------------------

fn fencelock_worker() {
    let url = env_var(URL_ENV);
    let layout: Layout = env_var(LAYOUT_ENV).parse().expect("a layout");
    let name = env_var(NAME_ENV);
    let counter = env_var(COUNTER_ENV);
    let mode = env_var(MODE_ENV);
    let iterations: u64 = env_parse(ITERATIONS_ENV);
    let lease = Duration::from_millis(env_parse(LEASE_ENV));
    let hold = Duration::from_millis(env_parse(HOLD_ENV));
    let gap = Duration::from_millis(env_parse(GAP_ENV));
    let fixed = env_var(FIXED_ENV) == "1";
    let fallback = Duration::from_millis(env_parse(FALLBACK_ENV));
    runtime().block_on(async move {
        let options = ClientOptions::default().wake_fallback(fallback);
        let client = Client::connect_with_options(url.as_str(), options)
            .await
            .expect("the worker connects");
        let lease = if fixed {
            Lease::Fixed(lease)
        } else {
            Lease::Renewed(lease)
        };
        let lock = client
            .foreign_mutex_with_options(layout, name.as_str(), LockOptions::default().lease(lease))
            .expect("a valid lock");
        let mut data = redis::Client::open(url.as_str())
            .expect("a valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection for the counter");
        let (go, lines) = stdin_lines();
        say(READY);
        go.await.expect("GO from the orchestrator");
        match mode.as_str() {
            "loop" => {
                for _ in 0..iterations {
                    let guard = lock.lock().await.expect("lock");
                    let enter = monotonic_nanos();
                    critical_section(&mut data, &counter, hold).await;
                    let exit = monotonic_nanos();
                    guard.unlock().await.expect("still held at the release");
                    say(&format!("SECTION {enter} {exit}"));
                    tokio::time::sleep(gap).await;
                }
            }
            "hold" => hold_until_told(&lock, lines).await,
            "wait" => {
                let guard = match lock.try_lock().await {
                    Ok(guard) => guard,
                    Err(Error::Held { .. }) => {
                        say(&format!("WAITING {}", monotonic_nanos()));
                        lock.lock().await.expect("lock")
                    }
                    Err(e) => panic!("try_lock: {e}"),
                };
                say(&format!("ACQUIRED {}", monotonic_nanos()));
                guard.unlock().await.expect("unlock");
                say(&format!("RELEASED {}", monotonic_nanos()));
            }
            other => panic!("unknown mode {other:?}"),
        }
        say(DONE);
        client.shutdown().await.expect("shutdown");
    });
}

/// The orchestrator's lines, read on a thread of their own: the first, which must be `GO`,
/// completes the first receiver (the start barrier, off the runtime's threads); the others go
/// to the channel, which closes at the end of stdin.
fn stdin_lines() -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (go, gone) = tokio::sync::oneshot::channel();
    let (lines, received) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lines();
        match stdin.next() {
            Some(Ok(line)) if line.trim() == GO => {
                let _ = go.send(());
            }
            other => panic!("expected {GO}, read {other:?}"),
        }
        for line in stdin {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (gone, received)
}

/// Holds the lock until `RELEASE` or the end of stdin, saying `LOST` when the guard loses it;
/// then releases it: `RELEASED`, or `NOTHELD` when the release found it gone or taken.
async fn hold_until_told(
    lock: &fencelock::ForeignMutex,
    mut lines: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let guard = lock.lock().await.expect("lock");
    say(&format!("HELD {}", monotonic_nanos()));
    let mut lost = false;
    loop {
        tokio::select! {
            line = lines.recv() => match line.as_deref() {
                Some("RELEASE") | None => break,
                Some(other) => panic!("unexpected line {other:?}"),
            },
            _ = guard.lost(), if !lost => {
                lost = true;
                say(&format!("LOST {}", monotonic_nanos()));
            }
        }
    }
    match guard.unlock().await {
        Ok(()) => say(&format!("RELEASED {}", monotonic_nanos())),
        Err(Error::NotHeld { .. }) => say(&format!("NOTHELD {}", monotonic_nanos())),
        Err(e) => panic!("unlock: {e}"),
    }
}

/// The peers' critical section: an overlap check, then a read-sleep-write increment.
async fn critical_section(
    data: &mut redis::aio::MultiplexedConnection,
    counter: &str,
    hold: Duration,
) {
    let inside: i64 = data
        .incr(format!("{counter}:inside"), 1)
        .await
        .expect("incr");
    if inside != 1 {
        let _: i64 = data
            .incr(format!("{counter}:overlaps"), 1)
            .await
            .expect("incr");
        say(&format!("OVERLAP {inside}"));
    }
    let value: Option<u64> = data.get(counter).await.expect("get");
    tokio::time::sleep(hold).await;
    let _: () = data
        .set(counter, value.unwrap_or(0) + 1)
        .await
        .expect("set");
    let _: i64 = data
        .decr(format!("{counter}:inside"), 1)
        .await
        .expect("decr");
}
