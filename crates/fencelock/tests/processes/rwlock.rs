//! The read-write lock across real OS processes, against a real `redis-server`.
//!
//! - `killed_reader_frees_its_hold_after_its_lease_alone`: of two reader processes, one is
//!   killed with SIGKILL. Its hold ends when its own lease does, not before, while the other
//!   reader keeps renewing its own; a writer waiting meanwhile gets the lock only after both
//!   the dead reader's lease and the live reader's release.
//! - `writer_preference_bounds_the_wait_for_a_writer` and
//!   `without_preference_a_writer_starves`: 8 reader processes re-acquire read holds without
//!   pause. With writer preference a writer gets in within a bound, every time; without it, it
//!   does not get in at all within that bound.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{runtime, URL_ENV};
use fencelock::{Client, ClientOptions, Error, Lease, LockOptions, RwLock};
use fencelock_testkit::process::{env_var, say, Workers, READY};
use fencelock_testkit::RedisServer;

/// The lock the workers take, besides the Redis URL in `URL_ENV`.
const NAME_ENV: &str = "FENCELOCK_TEST_LOCK";
/// When set, the holding reader also takes and gives back a second read hold this often.
const REENTER_ENV: &str = "FENCELOCK_TEST_REENTER_MS";

/// Worker roles.
const HOLDING_READER: &str = "rwlock::holding-reader";
const CHURNING_READER: &str = "rwlock::churning-reader";

/// The readers' lease in the killed-reader scenario: renewed every third of it.
const READER_LEASE: Duration = Duration::from_millis(1500);

/// How long a writer may wait among churning readers when it has preference.
const WRITER_BOUND: Duration = Duration::from_secs(2);
/// How many times the writer with preference must get in within the bound.
const WRITER_ROUNDS: usize = 5;
/// Reader processes in the starvation scenarios.
const CHURNERS: usize = 8;
/// Every churning reader holds its read hold this long, at random, between its releases.
const CHURN_HOLD_MS: std::ops::Range<u64> = 20..80;
/// The counter every churning reader increments once per read hold.
const READS_KEY: &str = "test:reads";

/// Bounds on every wait, so that a hung worker fails the test instead of stalling it.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const REAP_LIMIT: Duration = Duration::from_secs(10);
/// How long a worker runs before giving up by itself, should the orchestrator vanish.
const WORKER_LIMIT: Duration = Duration::from_secs(60);

/// Lines of the readers' protocol, besides `READY`.
const ACQUIRED: &str = "ACQUIRED";
const RELEASE: &str = "RELEASE";
const RELEASED: &str = "RELEASED";
const STOP: &str = "STOP";
const LOST: &str = "LOST";

/// The scenarios, named as libtest names the tests of module `rwlock`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "rwlock::killed_reader_frees_its_hold_after_its_lease_alone",
        killed_reader_frees_its_hold_after_its_lease_alone,
    ),
    (
        "rwlock::writer_preference_bounds_the_wait_for_a_writer",
        writer_preference_bounds_the_wait_for_a_writer,
    ),
    (
        "rwlock::without_preference_a_writer_starves",
        without_preference_a_writer_starves,
    ),
];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] = &[
    (HOLDING_READER, holding_reader),
    (CHURNING_READER, churning_reader),
];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn key(name: &str) -> String {
    format!("fencelock:{{{name}}}:rw")
}

/// The lock's read-hold fields and their expiries (server ms).
fn read_holds(server: &RedisServer, name: &str) -> Vec<(String, u64)> {
    let flat = server.cli(&["HGETALL", &key(name)]);
    let lines: Vec<&str> = flat.lines().collect();
    lines
        .chunks(2)
        .filter(|pair| pair.len() == 2 && pair[0].starts_with('r') && pair[0].contains(':'))
        .map(|pair| (pair[0].to_owned(), pair[1].parse().expect("numeric expiry")))
        .collect()
}

fn server_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time
        .lines()
        .map(|p| p.parse::<u64>().expect("numeric time"));
    let (secs, micros) = (
        parts.next().expect("seconds"),
        parts.next().expect("micros"),
    );
    secs * 1000 + micros / 1000
}

fn killed_reader_frees_its_hold_after_its_lease_alone() {
    const NAME: &str = "victim";
    let server = RedisServer::start();
    let envs = [(URL_ENV, server.url()), (NAME_ENV, NAME.to_owned())];
    let mut doomed = Workers::spawn(HOLDING_READER, 1, &envs);
    doomed.expect_from_all(ACQUIRED, Instant::now() + STARTUP_LIMIT);
    let holds = read_holds(&server, NAME);
    assert_eq!(holds.len(), 1, "one read hold: {holds:?}");
    let doomed_field = holds[0].0.clone();
    // The survivor also re-enters now and then: read grants that must not stretch the dead
    // reader's lease either.
    let mut survivor_envs = envs.to_vec();
    survivor_envs.push((REENTER_ENV, "100".to_owned()));
    let mut survivor = Workers::spawn(HOLDING_READER, 1, &survivor_envs);
    survivor.expect_from_all(ACQUIRED, Instant::now() + STARTUP_LIMIT);

    runtime().block_on(async {
        // Waiters retry at least this often, so that the purge is seen promptly.
        let options = ClientOptions::default().wake_fallback(Duration::from_millis(200));
        let client = Client::connect_with_options(server.url().as_str(), options)
            .await
            .expect("the orchestrator connects to redis");
        let lock = client.rwlock(NAME).expect("valid lock");

        // Longer than one whole lease, so only renewal can still hold the reads; and half a
        // renewal period past it, so the kill falls midway between two renewals.
        tokio::time::sleep(READER_LEASE + READER_LEASE / 6).await;
        assert!(read_holds(&server, NAME).len() >= 2, "both readers renew");
        doomed.refuse_line(LOST);
        survivor.refuse_line(LOST);

        let writer = client.holder().expect("holder");
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move {
                let guard = lock
                    .write_timeout_as(&writer, Duration::from_secs(20))
                    .await;
                (Instant::now(), guard)
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;

        doomed.kill(0);
        let killed = Instant::now();
        let holds = read_holds(&server, NAME);
        let doomed_expiry = holds
            .iter()
            .find(|(field, _)| *field == doomed_field)
            .map(|&(_, expiry)| expiry)
            .expect("the dead reader's hold is still there at the kill");
        let survivor_expiry_at_kill = holds
            .iter()
            .filter(|(field, _)| *field != doomed_field)
            .map(|&(_, expiry)| expiry)
            .min()
            .expect("the live reader's hold");

        // The dead reader's hold must stay until its own expiry, then be purged promptly.
        let gone_after = loop {
            let holds = read_holds(&server, NAME);
            let now = server_ms(&server);
            let present = holds.iter().any(|(field, _)| *field == doomed_field);
            if !present {
                assert!(
                    now >= doomed_expiry,
                    "the dead reader's hold was removed {} ms before its expiry",
                    doomed_expiry - now
                );
                break killed.elapsed();
            }
            assert!(
                killed.elapsed() < READER_LEASE + Duration::from_secs(2),
                "the dead reader's hold outlived its lease by far"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        println!(
            "    dead reader's hold gone {gone_after:?} after SIGKILL (lease {READER_LEASE:?})"
        );
        let earliest = READER_LEASE * 2 / 3 - Duration::from_millis(100);
        assert!(
            gone_after >= earliest,
            "gone after {gone_after:?}, before {earliest:?}"
        );
        assert!(gone_after <= READER_LEASE + Duration::from_millis(600));

        // The live reader keeps renewing its own hold, and the writer keeps waiting for it.
        tokio::time::sleep(READER_LEASE).await;
        let holds = read_holds(&server, NAME);
        assert!(
            !holds.is_empty() && holds.iter().all(|(field, _)| *field != doomed_field),
            "{holds:?}"
        );
        assert!(
            holds
                .iter()
                .all(|&(_, expiry)| expiry > survivor_expiry_at_kill),
            "the live reader renewed its hold after the other one died"
        );
        survivor.refuse_line(LOST);
        assert!(
            !waiting.is_finished(),
            "the writer must wait for the live reader"
        );

        let release_sent = Instant::now();
        survivor.broadcast(RELEASE);
        let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the writer gets the lock once the live reader released")
            .expect("task");
        let guard = guard.expect("write");
        assert!(acquired > release_sent);
        println!(
            "    writer in {:?} after the live reader was told to release",
            acquired - release_sent
        );
        assert!(acquired - release_sent < Duration::from_secs(1));
        guard.unlock().await.expect("unlock");
    });
    survivor.expect_from_all(RELEASED, Instant::now() + STARTUP_LIMIT);
    assert!(survivor.reap(0, Instant::now() + REAP_LIMIT).success());
    doomed.reap_killed(0, Instant::now() + REAP_LIMIT);
}

fn writer_preference_bounds_the_wait_for_a_writer() {
    let waits = writer_among_churning_readers("preferred", true, WRITER_ROUNDS);
    for (round, wait) in waits.iter().enumerate() {
        let wait = wait.unwrap_or_else(|| panic!("round {round}: the writer did not get in"));
        assert!(
            wait < WRITER_BOUND,
            "round {round}: the writer waited {wait:?}"
        );
    }
}

fn without_preference_a_writer_starves() {
    let waits = writer_among_churning_readers("plain", false, 1);
    assert_eq!(
        waits,
        vec![None],
        "without preference a writer should not find a moment without readers"
    );
}

/// Runs [`CHURNERS`] reader processes on lock `name`, then has a writer (with or without
/// preference) try `rounds` times to get in within [`WRITER_BOUND`]. Returns each round's wait,
/// `None` where the writer gave up.
fn writer_among_churning_readers(name: &str, prefer: bool, rounds: usize) -> Vec<Option<Duration>> {
    let server = RedisServer::start();
    let envs = [(URL_ENV, server.url()), (NAME_ENV, name.to_owned())];
    let mut readers = Workers::spawn(CHURNING_READER, CHURNERS, &envs);
    readers.expect_from_all(READY, Instant::now() + STARTUP_LIMIT);
    let reads = || -> u64 { server.cli(&["GET", READS_KEY]).parse().unwrap_or(0) };

    let waits = runtime().block_on(async {
        let client = Client::connect(server.url().as_str())
            .await
            .expect("the orchestrator connects to redis");
        let options = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(5)));
        let lock = client
            .rwlock_with_options(name, options)
            .expect("valid lock")
            .writer_preference(prefer);
        let writer = client.holder().expect("holder");
        let mut waits = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            // Let the readers overlap again after the last round.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = reads();
            let started = Instant::now();
            let wait = match lock.write_timeout_as(&writer, WRITER_BOUND).await {
                Ok(guard) => {
                    let wait = started.elapsed();
                    assert!(
                        read_holds(&server, name).is_empty(),
                        "a writer got in while readers held the lock"
                    );
                    guard.unlock().await.expect("unlock");
                    Some(wait)
                }
                Err(Error::Timeout { .. }) => None,
                Err(e) => panic!("write failed: {e}"),
            };
            let during = reads() - before;
            println!(
                "    preference {prefer}: writer {}, {during} read holds granted meanwhile",
                wait.map_or_else(
                    || format!("starved for {WRITER_BOUND:?}"),
                    |w| format!("in after {w:?}")
                )
            );
            if wait.is_none() {
                assert!(
                    during > 0,
                    "the readers went on reading while the writer waited"
                );
            }
            waits.push(wait);
        }
        waits
    });
    let reads_total = reads();
    readers.broadcast(STOP);
    for i in 0..CHURNERS {
        let status = readers.reap(i, Instant::now() + REAP_LIMIT);
        assert!(status.success(), "reader {i} failed: {status}");
    }
    println!("    {CHURNERS} readers took {reads_total} read holds in all");
    waits
}

// ---------------------------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------------------------

/// Watches stdin on a thread: the flag is set when `line` arrives or stdin closes.
fn on_line(line: &'static str) -> Arc<AtomicBool> {
    let seen = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&seen);
    thread::spawn(move || {
        let stdin = std::io::stdin();
        for got in stdin.lock().lines() {
            match got {
                Ok(got) if got.trim() == line => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        flag.store(true, Ordering::SeqCst);
    });
    seen
}

/// Takes a read hold with a renewed [`READER_LEASE`], reports `ACQUIRED`, then holds it until
/// told to release (reporting `RELEASED`) or killed, printing `LOST` if the lease is lost.
/// With [`REENTER_ENV`], it also takes a second read hold and gives it back that often.
fn holding_reader() {
    let url = env_var(URL_ENV);
    let name = env_var(NAME_ENV);
    let reenter = std::env::var(REENTER_ENV)
        .ok()
        .map(|ms| Duration::from_millis(ms.parse().expect("milliseconds")));
    let release = on_line(RELEASE);
    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the reader connects to redis");
        let options = LockOptions::default().lease(Lease::Renewed(READER_LEASE));
        let lock = client
            .rwlock_with_options(name, options)
            .expect("valid lock");
        let reader = client.holder().expect("holder");
        let guard = lock
            .try_read_as(&reader)
            .await
            .expect("the lock is free to read");
        say(ACQUIRED);
        let started = Instant::now();
        let mut reentered = Instant::now();
        while !release.load(Ordering::SeqCst) && started.elapsed() < WORKER_LIMIT {
            if reenter.is_some_and(|every| reentered.elapsed() >= every) {
                let again = lock
                    .try_read_as(&reader)
                    .await
                    .expect("a reader may re-enter");
                again.unlock().await.expect("unlock");
                reentered = Instant::now();
            }
            tokio::select! {
                reason = guard.lost() => {
                    say(&format!("{LOST} {reason}"));
                    return;
                }
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        guard
            .unlock()
            .await
            .expect("the hold was kept until its release");
        say(RELEASED);
    });
}

/// Reports `READY`, then takes read holds one after another, each for a random
/// [`CHURN_HOLD_MS`], counting them in [`READS_KEY`], until told to stop.
fn churning_reader() {
    let url = env_var(URL_ENV);
    let name = env_var(NAME_ENV);
    let stop = on_line(STOP);
    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the reader connects to redis");
        let mut counter = redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("a raw connection");
        let lock: RwLock = client.rwlock(name).expect("valid lock");
        let reader = client.holder().expect("holder");
        say(READY);
        let started = Instant::now();
        while !stop.load(Ordering::SeqCst) && started.elapsed() < WORKER_LIMIT {
            let guard = lock
                .read_timeout_as(&reader, Duration::from_secs(10))
                .await
                .expect("a reader gets in within 10 s");
            let _: i64 = redis::cmd("INCR")
                .arg(READS_KEY)
                .query_async(&mut counter)
                .await
                .expect("count the read");
            tokio::time::sleep(Duration::from_millis(random_in(CHURN_HOLD_MS))).await;
            guard.unlock().await.expect("unlock");
        }
    });
}

/// A number in `range` from the clock's low bits: enough to keep readers out of step.
fn random_in(range: std::ops::Range<u64>) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let mixed = nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    range.start + mixed % (range.end - range.start)
}
