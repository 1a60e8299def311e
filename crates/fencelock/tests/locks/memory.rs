//! What each primitive keeps in Redis: the keys and bytes (`MEMORY USAGE`) of one hold, and
//! that every key has an expiry, held or idle, so that no key of an idle lock outlives its lease
//! plus the fence memory. `cargo test -p fencelock --test locks -- memory:: --nocapture` prints
//! the table the guide shows.

use std::time::Duration;

use crate::common;
use fencelock::{ClientOptions, Error};
use fencelock_testkit::RedisServer;

/// Names of a typical length (18 bytes): each byte more adds about one byte per key.
const NAMES: [&str; 5] = [
    "mutex:2026-11-22-a",
    "rmutex:2026-11-22b",
    "rwlock:2026-11-22b",
    "semaphore:2026-11c",
    "fair:2026-11-22-ab",
];

/// Bounds each wait: a waiter that never registers fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(10);

/// The lease every hold here takes (renewed), and how long a name's last fence is kept.
const LEASE: Duration = Duration::from_secs(30);
const FENCE_MEMORY: Duration = Duration::from_secs(60);

/// The keys of the lock `name` under the default prefix, with their size and time to live.
fn keys_of(server: &RedisServer, name: &str) -> Vec<(String, u64, i64)> {
    let listed = server.cli(&["--raw", "KEYS", &format!("fencelock:{{{name}}}*")]);
    let mut keys: Vec<(String, u64, i64)> = listed
        .lines()
        .filter(|key| !key.is_empty())
        .map(|key| {
            let bytes = server.cli(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
            let ttl = server.cli(&["PTTL", key]);
            (
                key.to_owned(),
                bytes.trim().parse().expect("MEMORY USAGE answers a number"),
                ttl.trim().parse().expect("PTTL answers a number"),
            )
        })
        .collect();
    keys.sort();
    keys
}

/// Checks that every key of `name` expires within the lease plus the fence memory, prints
/// each, and returns how many keys and bytes there are.
fn expiring(server: &RedisServer, name: &str) -> (usize, u64) {
    let keys = keys_of(server, name);
    let bound = i64::try_from((LEASE + FENCE_MEMORY).as_millis()).expect("a bound in ms");
    for (key, bytes, ttl) in &keys {
        println!("  {key}: {bytes} bytes, expires in {ttl} ms");
        assert!(
            (1..=bound).contains(ttl),
            "{key} has a time to live of {ttl} ms, not within (0, {bound}] ms"
        );
    }
    (keys.len(), keys.iter().map(|(_, bytes, _)| bytes).sum())
}

/// Waits, within [`LIMIT`], until `name` has `keys` keys: a waiter has taken its place.
async fn settle(server: &RedisServer, name: &str, keys: usize) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while keys_of(server, name).len() < keys {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no waiter registered on {name}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn every_key_expires_and_memory_per_hold_is_measured() -> Result<(), Error> {
    let server = RedisServer::start();
    let options = ClientOptions::default()
        .default_lease(fencelock::Lease::Renewed(LEASE))
        .fence_memory(FENCE_MEMORY);
    let client = common::client_with(&server, options.clone()).await;
    let other = common::client_with(&server, options).await;
    let holder = client.holder_named("worker")?;
    let mut rows = Vec::new();
    let mut measure = |kind: &str, name: &str| {
        println!("{kind}, held:");
        let held = expiring(&server, name);
        rows.push((kind.to_owned(), held));
    };

    let guard = client.mutex(NAMES[0])?.lock().await?;
    measure("Mutex", NAMES[0]);
    // A held mutex is one key, its fence inside its value.
    assert_eq!(keys_of(&server, NAMES[0]).len(), 1);
    let waiter = other.mutex(NAMES[0])?;
    let waiting = tokio::spawn(async move { waiter.lock_timeout(LIMIT).await });
    settle(&server, NAMES[0], 2).await;
    measure("Mutex, one waiter", NAMES[0]);
    guard.unlock().await?;
    waiting.await.expect("the waiter")?.unlock().await?;
    let guard = client.reentrant_mutex(NAMES[1])?.lock(&holder).await?;
    measure("ReentrantMutex", NAMES[1]);
    guard.unlock().await?;
    let guard = client.rwlock(NAMES[2])?.read_as(&holder).await?;
    measure("RwLock, one reader", NAMES[2]);
    guard.unlock().await?;
    let guard = client.semaphore(NAMES[3], 4)?.acquire().await?;
    measure("Semaphore, one permit of 4", NAMES[3]);
    guard.release().await?;
    let guard = client.fair_mutex(NAMES[4])?.lock().await?;
    measure("FairMutex", NAMES[4]);
    let waiter = other.fair_mutex(NAMES[4])?;
    let waiting = tokio::spawn(async move { waiter.lock_timeout(LIMIT).await });
    settle(&server, NAMES[4], 3).await;
    measure("FairMutex, one waiter", NAMES[4]);
    guard.unlock().await?;
    waiting.await.expect("the waiter")?.unlock().await?;

    println!("| primitive, one hold | keys | bytes (`MEMORY USAGE`) |");
    println!("|---|---|---|");
    for (kind, (keys, bytes)) in &rows {
        println!("| {kind} | {keys} | {bytes} |");
    }
    // Released: what stays (the fence, a semaphore's total) expires after the fence memory.
    println!("\n| released name | keys left | bytes |");
    println!("|---|---|---|");
    for name in NAMES {
        println!("{name}, released:");
        let (keys, bytes) = expiring(&server, name);
        println!("| {name} | {keys} | {bytes} |");
        if name == NAMES[0] {
            assert_eq!(keys, 1, "a released mutex leaves one key: its last fence");
        }
    }
    Ok(())
}
