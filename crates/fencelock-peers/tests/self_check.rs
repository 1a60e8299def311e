//! Each peer's worker against itself, on a real `redis-server`: the installed version is the
//! pinned one; two workers of one peer on one name never overlap and lose no update; a release
//! lets a waiter of the same peer in, well before the lease would have; a holder killed with
//! SIGKILL leaves the lock to a waiter within its lease, and not before. What the cross-language
//! tests build on.

use std::time::{Duration, Instant};

use fencelock_peers::{Installed, Layout, Mode, Peer, Worker};
use fencelock_testkit::check_no_overlap;
use fencelock_testkit::process::{monotonic_nanos, Event, Workers, DONE};
use fencelock_testkit::RedisServer;

/// How long a worker may take to start (an interpreter under a loaded machine) or to finish.
const PATIENCE: Duration = Duration::from_secs(60);

fn installed() -> Installed {
    Installed::locate().unwrap_or_else(|e| panic!("{e}"))
}

fn spawn(role: &str, installed: &Installed, workers: &[Worker]) -> Workers {
    let mut spawned = Workers::spawn_commands(role, workers.iter().map(|w| w.command(installed)));
    spawned.start_together(Instant::now() + PATIENCE);
    spawned
}

/// The next line of a group of one worker: it must start with `word`; returns the stamp that
/// follows it, if any.
fn expect(workers: &Workers, word: &str) -> Option<u64> {
    match workers.next_event(Instant::now() + PATIENCE) {
        Event::Line(_, line) => {
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some(word), "expected {word}, read {line:?}");
            words
                .next()
                .map(|t| t.parse().expect("a stamp in nanoseconds"))
        }
        Event::Closed(_) => panic!("the worker exited before {word}"),
    }
}

fn stamp(workers: &Workers, word: &str) -> u64 {
    expect(workers, word).unwrap_or_else(|| panic!("{word} without a stamp"))
}

/// Reads a worker's last line and its exit.
fn finish(workers: &mut Workers) {
    expect(workers, DONE);
    workers.reap_all_successful(Instant::now() + PATIENCE);
}

/// The type of the key a held lock of `peer` keeps.
fn held_type(peer: Peer) -> &'static str {
    match peer.layout() {
        Layout::Token | Layout::PythonRedisLock => "string",
        Layout::Redisson => "hash",
    }
}

fn pinned_version(peer: Peer) {
    let output = installed()
        .version_command(peer)
        .output()
        .expect("runs --version");
    assert!(output.status.success(), "{}: {output:?}", peer.name());
    let text = String::from_utf8_lossy(&output.stdout);
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    let pinned = peer.pinned_version().expect("pinned");
    assert_eq!(words, [peer.name(), pinned.as_str()], "{text}");
}

fn two_workers_exclude_each_other(peer: Peer) {
    const ITERATIONS: u64 = 20;
    let installed = installed();
    let server = RedisServer::start();
    let worker = Worker::new(
        peer,
        &server.url(),
        "jobs:nightly",
        "counter",
        Mode::Loop {
            iterations: ITERATIONS,
        },
        Duration::from_secs(10),
    )
    .hold(Duration::from_millis(2))
    .gap(Duration::from_millis(5));
    let mut workers = spawn("loop", &installed, &[worker.clone(), worker]);
    let mut sections = Vec::new();
    let mut per_worker = [0u64; 2];
    workers.collect_until(DONE, Instant::now() + PATIENCE * 3, |i, line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["SECTION", enter, exit] => {
                let parse = |n: &str| n.parse::<u64>().expect("nanoseconds");
                sections.push((parse(enter), parse(exit), i));
                per_worker[i] += 1;
            }
            _ => panic!("{} worker {i}: {line:?}", peer.name()),
        }
    });
    workers.reap_all_successful(Instant::now() + PATIENCE);
    assert_eq!(per_worker, [ITERATIONS; 2]);
    sections.sort_unstable();
    let handoffs = sections.windows(2).filter(|w| w[0].2 != w[1].2).count();
    let mut intervals: Vec<(u64, u64)> = sections.iter().map(|&(a, b, _)| (a, b)).collect();
    check_no_overlap(&mut intervals).unwrap_or_else(|e| panic!("{}: {e}", peer.name()));
    assert_eq!(
        server.cli(&["GET", "counter"]),
        (2 * ITERATIONS).to_string()
    );
    assert_eq!(server.cli(&["EXISTS", "counter:overlaps"]), "0");
    assert_eq!(server.cli(&["GET", "counter:inside"]), "0");
    // Released, not left to expire.
    assert_eq!(server.cli(&["EXISTS", &peer.key("jobs:nightly")]), "0");
    eprintln!(
        "{}: {} sections, {handoffs} handoffs between the two workers",
        peer.name(),
        2 * ITERATIONS
    );
}

fn release_lets_the_waiter_in(peer: Peer) {
    let lease = Duration::from_secs(20);
    let installed = installed();
    let server = RedisServer::start();
    let worker = |mode| Worker::new(peer, &server.url(), "report", "counter", mode, lease);
    let mut holder = spawn("holder", &installed, &[worker(Mode::Hold)]);
    stamp(&holder, "HELD");
    let key = peer.key("report");
    assert_eq!(server.cli(&["TYPE", &key]), held_type(peer));
    let ttl: u64 = server.cli(&["PTTL", &key]).parse().expect("a lease");
    assert!(ttl > 0 && ttl <= lease.as_millis() as u64, "PTTL {ttl}");
    let mut waiter = spawn("waiter", &installed, &[worker(Mode::Wait)]);
    stamp(&waiter, "WAITING");
    let released = monotonic_nanos();
    holder.send(0, "RELEASE");
    stamp(&holder, "RELEASED");
    finish(&mut holder);
    let acquired = stamp(&waiter, "ACQUIRED");
    stamp(&waiter, "RELEASED");
    finish(&mut waiter);
    assert!(acquired > released, "acquired before the release");
    let latency = Duration::from_nanos(acquired - released);
    // A polling waiter tries again within 0.3 s, a woken one at once; without their wake-up,
    // python-redis-lock's and Redisson's waiters would wait out the 20 s lease.
    assert!(latency < lease / 4, "{}: in after {latency:?}", peer.name());
    assert_eq!(server.cli(&["EXISTS", &key]), "0");
    eprintln!(
        "{}: the waiter was in {latency:?} after the release",
        peer.name()
    );
}

fn killed_holder_frees_within_its_lease(peer: Peer) {
    let lease = Duration::from_secs(3);
    let installed = installed();
    let server = RedisServer::start();
    let worker = |mode| Worker::new(peer, &server.url(), "report", "counter", mode, lease);
    let mut holder = spawn("holder", &installed, &[worker(Mode::Hold)]);
    stamp(&holder, "HELD");
    let mut waiter = spawn("waiter", &installed, &[worker(Mode::Wait)]);
    stamp(&waiter, "WAITING");
    // Renewed, the lock outlives its first lease.
    std::thread::sleep(lease * 3 / 2);
    holder.refuse_line("LOST");
    waiter.refuse_line("ACQUIRED");
    let killed = monotonic_nanos();
    holder.kill(0);
    holder.reap_killed(0, Instant::now() + PATIENCE);
    let acquired = stamp(&waiter, "ACQUIRED");
    stamp(&waiter, "RELEASED");
    finish(&mut waiter);
    assert!(acquired > killed, "acquired before the holder was killed");
    let after = Duration::from_nanos(acquired - killed);
    // The key expires within a lease of the kill; a waiter notices within its next retry,
    // which python-redis-lock's and Redisson's make after at most another lease.
    assert!(
        after < lease * 2 + Duration::from_secs(2),
        "{}: in after {after:?}",
        peer.name()
    );
    eprintln!(
        "{}: the waiter was in {after:?} after the kill",
        peer.name()
    );
}

/// What the checks above look at does show a lack of exclusion: redis-py's lock `jobs` (the key
/// `jobs`) and pottery's (the key `redlock:jobs`) are two locks, and their workers on one counter
/// overlap or lose updates.
#[test]
fn peers_that_name_different_keys_do_not_exclude_each_other() {
    const ITERATIONS: u64 = 20;
    let installed = installed();
    let server = RedisServer::start();
    let worker = |peer| {
        Worker::new(
            peer,
            &server.url(),
            "jobs",
            "counter",
            Mode::Loop {
                iterations: ITERATIONS,
            },
            Duration::from_secs(10),
        )
        .hold(Duration::from_millis(5))
    };
    assert_ne!(Peer::RedisPy.key("jobs"), Peer::Pottery.key("jobs"));
    let mut workers = spawn(
        "unrelated",
        &installed,
        &[worker(Peer::RedisPy), worker(Peer::Pottery)],
    );
    let mut intervals = Vec::new();
    let mut overlaps_seen = 0;
    workers.collect_until(DONE, Instant::now() + PATIENCE * 3, |_, line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["SECTION", enter, exit] => {
                let parse = |n: &str| n.parse::<u64>().expect("nanoseconds");
                intervals.push((parse(enter), parse(exit)));
            }
            ["OVERLAP", _] => overlaps_seen += 1,
            _ => panic!("{line:?}"),
        }
    });
    workers.reap_all_successful(Instant::now() + PATIENCE);
    let counter: u64 = server.cli(&["GET", "counter"]).parse().expect("a count");
    let overlaps: u64 = server
        .cli(&["GET", "counter:overlaps"])
        .parse()
        .unwrap_or(0);
    assert!(check_no_overlap(&mut intervals).is_err());
    assert!(
        overlaps > 0 && overlaps == overlaps_seen,
        "{overlaps} overlaps, {overlaps_seen} seen"
    );
    eprintln!(
        "redis-py and pottery on jobs: {overlaps} overlaps, {counter} of {} updates kept",
        2 * ITERATIONS
    );
}

macro_rules! peers {
    ($($module:ident => $peer:expr),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[test]
            fn pinned_version() {
                super::pinned_version($peer);
            }

            #[test]
            fn two_workers_exclude_each_other() {
                super::two_workers_exclude_each_other($peer);
            }

            #[test]
            fn release_lets_the_waiter_in() {
                super::release_lets_the_waiter_in($peer);
            }

            #[test]
            fn killed_holder_frees_within_its_lease() {
                super::killed_holder_frees_within_its_lease($peer);
            }
        }
    )*};
}

peers! {
    redis_py => Peer::RedisPy,
    python_redis_lock => Peer::PythonRedisLock,
    pottery => Peer::Pottery,
    redlock => Peer::Redlock,
    redis_semaphore => Peer::RedisSemaphore,
    node_redisson => Peer::NodeRedisson,
    redisson => Peer::Redisson,
    rslock => Peer::Rslock,
}
