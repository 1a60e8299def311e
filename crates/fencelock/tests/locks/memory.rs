//! What each primitive keeps in Redis: the keys and bytes (`MEMORY USAGE`) of one hold, and what
//! a released name leaves, asserted against the guide's table ("Memory, and how long keys
//! live" in `docs/guide.md`), so that the table cannot drift from what the library stores; and
//! that every key has an expiry, held or idle, so that no key of an idle lock outlives its lease
//! plus the fence memory.
//!
//! `MEMORY USAGE` differs between servers (their allocators and encodings differ), so the bytes
//! are compared on the server the guide's table names (`on Redis 7.0.15`: the suite's default
//! server), and printed on any other; the keys and expiries are checked on every server. When
//! the table is wrong the test prints what it measured, row by row, to write into the guide.

use std::time::Duration;

use crate::common;
use fencelock::{ClientOptions, Error};
use fencelock_testkit::RedisServer;

/// The guide, whose memory table this test asserts.
const GUIDE: &str = include_str!("../../docs/guide.md");

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

/// What one state of a name takes: its keys and their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Footprint {
    keys: usize,
    bytes: u64,
}

/// Checks that every key of `name` expires within the lease plus the fence memory, prints
/// each, and returns how many keys and bytes there are.
fn expiring(server: &RedisServer, name: &str) -> Footprint {
    let keys = keys_of(server, name);
    let bound = i64::try_from((LEASE + FENCE_MEMORY).as_millis()).expect("a bound in ms");
    for (key, bytes, ttl) in &keys {
        println!("  {key}: {bytes} bytes, expires in {ttl} ms");
        assert!(
            (1..=bound).contains(ttl),
            "{key} has a time to live of {ttl} ms, not within (0, {bound}] ms"
        );
    }
    Footprint {
        keys: keys.len(),
        bytes: keys.iter().map(|(_, bytes, _)| bytes).sum(),
    }
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

/// One row of the guide's table: a primitive's state, what it holds and what its name leaves
/// once released.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    /// The first column without its link: `Mutex with one waiter`.
    primitive: String,
    held: Footprint,
    /// Bytes left after every hold of the name was released.
    left_bytes: u64,
}

/// The server the guide's table was measured on (`Redis 7.0.15`) and its rows.
fn guide_table() -> (String, Vec<Row>) {
    let section = GUIDE
        .split("# Memory, and how long keys live")
        .nth(1)
        .expect("the guide's section \"Memory, and how long keys live\"");
    let server = section
        .split("measured with `MEMORY USAGE` on ")
        .nth(1)
        .map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().take(2).collect();
            words.join(" ").trim_end_matches([',', '.']).to_owned()
        })
        .expect("the guide says which server its memory table was measured on");
    let lines: Vec<&str> = section
        .lines()
        .skip_while(|line| !line.starts_with("| primitive |"))
        .take_while(|line| line.starts_with('|'))
        .collect();
    let cells = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect()
    };
    let header = cells(lines.first().expect("the guide's memory table"));
    assert_eq!(
        header,
        [
            "primitive",
            "keys held",
            "bytes held",
            "left after release, until it expires"
        ],
        "the guide's memory table's columns"
    );
    let number = |text: &str| -> u64 {
        text.parse()
            .unwrap_or_else(|_| panic!("{text:?} in the guide's memory table is not a number"))
    };
    let rows = lines[2..]
        .iter()
        .map(|line| {
            let row = cells(line);
            let leading = row[1].split_whitespace().next().unwrap_or_default();
            let left = row[3]
                .strip_suffix(" bytes")
                .and_then(|text| text.rsplit(' ').next())
                .unwrap_or_else(|| panic!("{:?} does not end in \"N bytes\"", row[3]));
            Row {
                primitive: row[0].replace(['[', ']', '`'], ""),
                held: Footprint {
                    keys: usize::try_from(number(leading)).expect("a key count"),
                    bytes: number(&row[2]),
                },
                left_bytes: number(left),
            }
        })
        .collect();
    (server, rows)
}

/// `Redis 7.0` of `Redis 7.0.15`: `MEMORY USAGE` is taken to be the same within a release.
fn release_of(server: &str) -> String {
    let mut words = server.split_whitespace();
    let product = words.next().unwrap_or_default();
    let version: Vec<&str> = words
        .next()
        .unwrap_or_default()
        .split('.')
        .take(2)
        .collect();
    format!("{product} {}", version.join("."))
}

#[tokio::test]
async fn every_key_expires_and_memory_per_hold_is_the_guides() -> Result<(), Error> {
    let server = RedisServer::start();
    // The guide's table is of bare holds: a label (by default the process's `host/pid`) adds
    // its length to each.
    let options = ClientOptions::default()
        .default_lease(fencelock::Lease::Renewed(LEASE))
        .fence_memory(FENCE_MEMORY)
        .holder_label("");
    let client = common::client_with(&server, options.clone()).await;
    let other = common::client_with(&server, options).await;
    let holder = client.holder_named("worker")?;
    // Each state measured: the guide's first column, the name, and what it holds.
    let mut held: Vec<(&str, &str, Footprint)> = Vec::new();
    let mut measure = |primitive: &'static str, name: &'static str| {
        println!("{primitive}, held:");
        held.push((primitive, name, expiring(&server, name)));
    };

    let guard = client.mutex(NAMES[0])?.lock().await?;
    measure("Mutex", NAMES[0]);
    let waiter = other.mutex(NAMES[0])?;
    let waiting = tokio::spawn(async move { waiter.lock_timeout(LIMIT).await });
    settle(&server, NAMES[0], 2).await;
    measure("Mutex with one waiter", NAMES[0]);
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
    measure("FairMutex with one waiter", NAMES[4]);
    guard.unlock().await?;
    waiting.await.expect("the waiter")?.unlock().await?;

    // Released: what stays (the fence, a semaphore's total) expires after the fence memory.
    let measured: Vec<Row> = held
        .iter()
        .map(|(primitive, name, footprint)| {
            println!("{primitive}, released:");
            Row {
                primitive: (*primitive).to_owned(),
                held: *footprint,
                left_bytes: expiring(&server, name).bytes,
            }
        })
        .collect();
    println!("\n| primitive | keys held | bytes held | left after release |");
    println!("|---|---|---|---|");
    for row in &measured {
        println!(
            "| {} | {} | {} | {} bytes |",
            row.primitive, row.held.keys, row.held.bytes, row.left_bytes
        );
    }
    // A held mutex is one key, its fence inside its value; a released one leaves that key.
    assert_eq!(measured[0].held.keys, 1);
    assert_eq!(keys_of(&server, NAMES[0]).len(), 1);

    let (measured_on, guide) = guide_table();
    let primitives = |rows: &[Row]| rows.iter().map(|r| r.primitive.clone()).collect::<Vec<_>>();
    assert_eq!(
        primitives(&guide),
        primitives(&measured),
        "the guide's memory table has a row for each state measured here, in this order"
    );
    for (written, found) in guide.iter().zip(&measured) {
        assert_eq!(
            written.held.keys, found.held.keys,
            "keys held by {}: the guide says {}, Redis holds {}",
            found.primitive, written.held.keys, found.held.keys
        );
    }
    let running = fencelock_testkit::server_version();
    if release_of(running) != release_of(&measured_on) {
        println!(
            "bytes not compared: the guide's table was measured on {measured_on}, this is \
             {running}, whose MEMORY USAGE differs"
        );
        return Ok(());
    }
    assert_eq!(
        guide, measured,
        "the guide's memory table (docs/guide.md, measured on {measured_on}) is not what \
         {running} holds: write the rows printed above into it"
    );
    Ok(())
}
