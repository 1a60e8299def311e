//! Who holds and who waits, as operators see it: every client names its process by default,
//! and reading the wait-for graph or checking for a deadlock costs the lock path nothing: the
//! commands Redis runs (`INFO commandstats`, the commands inside scripts included) for one
//! uncontended acquire and release of every kind are those it ran before.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common;
use fencelock::{Client, ClientOptions, Error, LockKind};
use fencelock_testkit::RedisServer;

/// Cycles per kind: enough that a stray background command would show as a fraction.
const CYCLES: u64 = 10;

/// The calls of every command since the last `CONFIG RESETSTAT`, without the test's own.
fn commands(server: &RedisServer) -> BTreeMap<String, u64> {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            (!matches!(name, "info" | "config|resetstat")).then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Runs one cycle of `kind` to load its scripts, then [`CYCLES`] more, and returns the
/// commands per cycle of those, by command.
async fn per_cycle<F, Fut>(
    server: &RedisServer,
    mut cycle: F,
) -> Result<BTreeMap<String, f64>, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    cycle().await?;
    // Let anything the first cycle set going (a background release, a subscription) settle.
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..CYCLES {
        cycle().await?;
    }
    Ok(commands(server)
        .into_iter()
        .map(|(name, calls)| (name, calls as f64 / CYCLES as f64))
        .collect())
}

fn total(commands: &BTreeMap<String, f64>) -> f64 {
    commands.values().sum()
}

/// The commands per cycle of every kind, on `client`.
async fn lock_path(
    server: &RedisServer,
    client: &Client,
) -> Result<Vec<(&'static str, f64)>, Error> {
    let holder = client.holder()?;
    let mut measured = Vec::new();

    let mutex = client.mutex("m")?;
    let c = per_cycle(server, || async { mutex.lock().await?.unlock().await }).await?;
    measured.push(("Mutex", c));
    let fair = client.fair_mutex("f")?;
    let c = per_cycle(server, || async { fair.lock().await?.unlock().await }).await?;
    measured.push(("FairMutex", c));
    let reentrant = client.reentrant_mutex("r")?;
    let c = per_cycle(server, || async {
        reentrant.lock(&holder).await?.unlock().await
    })
    .await?;
    measured.push(("ReentrantMutex", c));
    let rwlock = client.rwlock("rw")?;
    let c = per_cycle(server, || async { rwlock.read().await?.unlock().await }).await?;
    measured.push(("RwLock read", c));
    let c = per_cycle(server, || async { rwlock.write().await?.unlock().await }).await?;
    measured.push(("RwLock write", c));
    let semaphore = client.semaphore("s", 4)?;
    let c = per_cycle(server, || async {
        semaphore.acquire().await?.release().await
    })
    .await?;
    measured.push(("Semaphore", c));
    let multi = client.multi_mutex(["a", "b"])?;
    let c = per_cycle(server, || async { multi.lock().await?.unlock().await }).await?;
    measured.push(("MultiMutex of 2", c));
    let election = client.election("e")?;
    let c = per_cycle(server, || async {
        election.campaign("v").await?.resign().await
    })
    .await?;
    measured.push(("Election", c));

    for (kind, commands) in &measured {
        println!(
            "{kind}: {:.1} commands per cycle: {commands:?}",
            total(commands)
        );
        // One script call to take, one to give back: no command of its own is sent.
        assert_eq!(commands.get("evalsha"), Some(&2.0), "{kind}: {commands:?}");
    }
    // A semaphore's acquire reads the lease left (PTTL) on some cycles only: the totals are
    // compared rounded.
    Ok(measured
        .iter()
        .map(|(kind, commands)| (*kind, total(commands).round()))
        .collect())
}

#[tokio::test]
async fn an_uncontended_lock_runs_the_commands_it_ran_before() -> Result<(), Error> {
    let server = RedisServer::start();
    let unlabelled = common::client_with(&server, ClientOptions::default().holder_label("")).await;
    // Measured by this test at 3a4aa62, before clients were labelled by default and before
    // the wait-for graph and the deadlock check (Redis 7.0.15; a script's own commands
    // counted, as Redis 7 counts them).
    let before = [
        ("Mutex", 7.0),
        ("FairMutex", 9.0),
        ("ReentrantMutex", 13.0),
        ("RwLock read", 23.0),
        ("RwLock write", 24.0),
        ("Semaphore", 18.0),
        ("MultiMutex of 2", 12.0),
        ("Election", 13.0),
    ];
    assert_eq!(lock_path(&server, &unlabelled).await?, before);
    // A labelled client's reentrant mutex and semaphore store the label in a field of their
    // own, one HSET more, as any labelled client's did at 3a4aa62.
    let labelled: Client = common::client(&server).await;
    let mut with_label = before;
    with_label[2].1 += 1.0;
    with_label[5].1 += 1.0;
    assert_eq!(lock_path(&server, &labelled).await?, with_label);
    Ok(())
}

#[tokio::test]
async fn a_client_names_its_process_unless_told_otherwise() -> Result<(), Error> {
    let server = RedisServer::start();
    let client: Client = common::client(&server).await;
    let named = common::client_with(&server, ClientOptions::default().holder_label("job-7")).await;
    let label = ClientOptions::process_label();
    assert!(
        label.ends_with(&format!("/{}", std::process::id())),
        "{label}"
    );

    let holder = client.holder()?;
    let mutex = client.mutex("a")?.lock().await?;
    let fair = client.fair_mutex("b")?.lock().await?;
    let reentrant = client.reentrant_mutex("c")?.lock(&holder).await?;
    let permit = client.semaphore("d", 2)?.acquire().await?;
    let other = named.semaphore("d", 2)?.acquire().await?;
    let listed = client.locks("*").await?;
    let shown: Vec<(&str, LockKind, Vec<&str>)> = listed
        .iter()
        .map(|info| {
            let mut holders: Vec<&str> = info.holders.iter().map(String::as_str).collect();
            holders.sort_unstable();
            (info.name.as_str(), info.kind, holders)
        })
        .collect();
    let mut both = vec![label.as_str(), "job-7"];
    both.sort_unstable();
    assert_eq!(
        shown,
        [
            ("a", LockKind::Mutex, vec![label.as_str()]),
            ("b", LockKind::FairMutex, vec![label.as_str()]),
            ("c", LockKind::ReentrantMutex, vec![label.as_str()]),
            ("d", LockKind::Semaphore, both),
        ]
    );
    mutex.unlock().await?;
    fair.unlock().await?;
    reentrant.unlock().await?;
    permit.release().await?;
    other.release().await?;
    Ok(())
}
