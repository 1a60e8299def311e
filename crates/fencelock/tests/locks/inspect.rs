//! Inspection and forced release of every kind of lock, against a real server.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::common::{self, client, client_with, ms};
use fencelock::{Client, ClientOptions, Error, Fence, Guard, LockKind};
use fencelock_testkit::RedisServer;
use tokio::task::JoinHandle;

/// Bounds each test: a wait that never ends fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn every_kind_held_is_listed_with_its_holders_and_counts() -> Result<(), Error> {
    let server = RedisServer::start();
    let labelled = ClientOptions::default().holder_label("host-a/1");
    let client = client_with(&server, labelled).await;
    let mutex = client.mutex("job:mutex")?.lock().await?;
    let owner = client.holder_named("worker")?;
    let reentrant = client.reentrant_mutex("job:reentrant")?;
    let (r1, r2) = (reentrant.lock(&owner).await?, reentrant.lock(&owner).await?);
    let rw = client.rwlock("job:rw")?;
    let (alice, bob) = (client.holder_named("alice")?, client.holder_named("bob")?);
    let (ra, rb) = (rw.read_as(&alice).await?, rw.read_as(&bob).await?);
    let sem = client.semaphore("job:sem", 5)?;
    let (p2, p1) = (sem.acquire_many(2).await?, sem.acquire().await?);
    let fair = client.fair_mutex("job:fair")?;
    let held_fair = fair.lock().await?;
    // Two waiters take places in line behind the holder.
    let other = common::client(&server).await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let fair = other.fair_mutex("job:fair").expect("name");
            tokio::spawn(async move { fair.lock_timeout(LIMIT).await })
        })
        .collect();
    // And one takes a place among the mutex's waiters.
    let mutex_waiter = {
        let mutex = other.mutex("job:mutex")?;
        tokio::spawn(async move { mutex.lock_timeout(LIMIT).await })
    };
    let listed = tokio::time::timeout(LIMIT, async {
        loop {
            let locks = client.locks("job:*").await.expect("locks");
            // Each waiter takes its place, then subscribes.
            let waiting = |kind, queued| {
                locks
                    .iter()
                    .any(|l| l.kind == kind && l.queued == Some(queued) && l.waiting_clients == 1)
            };
            if waiting(LockKind::FairMutex, 2) && waiting(LockKind::Mutex, 1) {
                return locks;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await
    .expect("every waiter has its place");

    let kinds: Vec<(&str, LockKind)> = listed.iter().map(|l| (l.name.as_str(), l.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("job:fair", LockKind::FairMutex),
            ("job:mutex", LockKind::Mutex),
            ("job:reentrant", LockKind::ReentrantMutex),
            ("job:rw", LockKind::RwLock),
            ("job:sem", LockKind::Semaphore),
        ]
    );
    let [f, m, re, r, s] = &listed[..] else {
        panic!("five locks: {listed:?}")
    };
    assert_eq!(
        (f.holder.as_deref(), f.fence),
        (Some("host-a/1"), Some(held_fair.fence()))
    );
    assert_eq!((m.holds, m.fence), (1, Some(mutex.fence())));
    assert_eq!((re.holds, re.holder.as_deref()), (2, Some("host-a/1")));
    assert_eq!(re.fence, Some(r1.fence()));
    assert_eq!(r.holders, ["alice", "bob"]);
    assert_eq!((r.holds, r.write_holds, r.queued), (2, Some(0), Some(0)));
    assert_eq!(r.fence, Some(ra.fence()));
    assert_eq!(
        (s.holds, s.permits_in_use, s.permits_total),
        (2, Some(3), Some(5))
    );
    assert_eq!(s.fence, None);
    for lock in &listed {
        let left = lock.remaining.expect("a lease");
        assert!(
            left > Duration::from_secs(20) && left <= Duration::from_secs(30),
            "{lock:?}"
        );
    }
    // Every kind is listed here or, named below, by another test: a kind added to
    // `LockKind::ALL` fails this test until it is listed too.
    let elsewhere = [
        // `an_election_is_listed_and_released_by_force`, with its published value as holder.
        LockKind::Election,
        // Under its layout's own key, without the client's prefix: `locks` does not walk it,
        // `ForeignMutex::info` reads it (`tests/locks/foreign.rs`).
        LockKind::ForeignMutex,
    ];
    let covered: std::collections::BTreeSet<LockKind> =
        listed.iter().map(|l| l.kind).chain(elsewhere).collect();
    assert_eq!(
        covered,
        LockKind::ALL.into_iter().collect(),
        "teach this test the new kind"
    );
    let named = client.locks_named("job:rw").await?;
    assert_eq!(named.len(), 1);
    assert_eq!((&named[0].holders, named[0].fence), (&r.holders, r.fence));
    assert!(client.locks("other:*").await?.is_empty());

    held_fair.unlock().await?;
    for waiter in waiters {
        waiter.await.expect("task")?.unlock().await?;
    }
    for guard in [ra, rb] {
        guard.unlock().await?;
    }
    r2.unlock().await?;
    r1.unlock().await?;
    p1.release().await?;
    p2.release().await?;
    mutex.unlock().await?;
    mutex_waiter.await.expect("task")?.unlock().await?;
    assert!(client.locks("*").await?.is_empty(), "nothing left held");
    Ok(())
}

#[tokio::test]
async fn a_writer_is_listed_with_its_fence_and_readers_waiting_behind_it() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.rwlock("doc")?;
    let writer = client.holder_named("editor")?;
    let w = rw.write_as(&writer).await?;
    let held = client.locks_named("doc").await?;
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].holds, held[0].write_holds), (1, Some(1)));
    assert_eq!(held[0].holder.as_deref(), Some("editor"));
    assert_eq!(held[0].fence, Some(w.fence()));
    w.unlock().await?;
    assert!(client.locks_named("doc").await?.is_empty());
    Ok(())
}

/// Holds whose own expiry passed stay in the hash until a script purges them; by the server's
/// clock they are not held, whatever the key's own expiry says.
#[tokio::test]
async fn expired_holds_not_yet_purged_are_not_listed() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = client(&server).await;
    let past = "1000";
    let token = "AAAAAAAAAAAAAAAAAAAAAA:";
    server.cli(&[
        "HSET",
        "fencelock:{old-rw}:rw",
        &format!("r{token}c:h"),
        past,
    ]);
    server.cli(&["HSET", "fencelock:{old-rw}:rw", "fence-r", "7"]);
    server.cli(&["PEXPIRE", "fencelock:{old-rw}:rw", "60000"]);
    server.cli(&["HSET", "fencelock:{old-sem}:sem", "permits", "3"]);
    server.cli(&[
        "HSET",
        "fencelock:{old-sem}:sem",
        &format!("{token}2"),
        past,
    ]);
    server.cli(&["PEXPIRE", "fencelock:{old-sem}:sem", "60000"]);
    assert!(client.locks("*").await?.is_empty());
    assert!(client.locks_named("old-rw").await?.is_empty());
    assert!(client.force_unlock("old-sem").await?.is_empty());

    // One live grant next to the expired one: only the live one counts.
    let live = client.semaphore("old-sem", 3)?.acquire().await?;
    let listed = client.locks("old-*").await?;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].holds, listed[0].permits_in_use), (1, Some(1)));
    live.release().await?;
    Ok(())
}

#[tokio::test]
async fn keys_of_other_types_are_skipped_and_left_alone() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = client(&server).await;
    server.cli(&["RPUSH", "fencelock:{odd}:mutex", "x"]);
    server.cli(&["SET", "fencelock:{odd}:rw", "x"]);
    let guard = client.semaphore("odd", 2)?.acquire().await?;
    let listed = client.locks("*").await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, LockKind::Semaphore);
    let removed = client.force_unlock("odd").await?;
    assert_eq!(removed.len(), 1);
    assert_eq!(server.cli(&["TYPE", "fencelock:{odd}:mutex"]), "list");
    assert_eq!(server.cli(&["TYPE", "fencelock:{odd}:rw"]), "string");
    assert!(guard.release().await.is_err());
    Ok(())
}

#[tokio::test]
async fn keys_fencelock_did_not_make_are_skipped_and_left_alone() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = client(&server).await;
    let oversized = format!(
        "fencelock:{{{}}}:mutex",
        "x".repeat(fencelock::MAX_NAME_LEN + 1)
    );
    let strangers = [
        "fencelock:{}:mutex",
        "fencelock:{k{lo}:mutex",
        oversized.as_str(),
    ];
    for key in strangers {
        server.cli(&["SET", key, "tokentokentokentokento:1:"]);
    }
    let guard = client.mutex("k{lo")?.lock().await?;
    let listed = client.locks("*").await?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "k{lo");
    guard.unlock().await?;
    for key in strangers {
        assert_eq!(server.cli(&["EXISTS", key]), "1");
    }
    Ok(())
}

/// One kind's hold of a name that [`force_unlock_frees_every_kind_keeps_the_fence_and_wakes_waiters`]
/// frees: its fence, its release (refused once freed), and a waiter of another client that the
/// forced release must wake, if the kind's waiters are woken by a release.
struct Stuck {
    kind: LockKind,
    fence: Fence,
    release: Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>,
    waiter: Option<JoinHandle<Result<Guard, Error>>>,
}

/// Holds `kind`'s lock `name` in `client`, and starts a waiter of `other` behind it for the
/// kinds that have one here; `None` for a kind this test leaves out.
async fn hold_stuck(
    kind: LockKind,
    client: &Client,
    other: &Client,
    name: &str,
) -> Result<Option<Stuck>, Error> {
    let (fence, release, waiter): (Fence, Pin<Box<dyn Future<Output = _> + Send>>, _) = match kind {
        LockKind::Mutex => {
            let mutex = client.mutex(name)?.lock().await?;
            (mutex.fence(), Box::pin(mutex.unlock()), None)
        }
        LockKind::ReentrantMutex => {
            let owner = client.holder()?;
            let reentrant = client.reentrant_mutex(name)?.lock(&owner).await?;
            (reentrant.fence(), Box::pin(reentrant.unlock()), None)
        }
        LockKind::RwLock => {
            let read = client.rwlock(name)?.read_as(&client.holder()?).await?;
            (read.fence(), Box::pin(read.unlock()), None)
        }
        LockKind::Semaphore => {
            let permit = client.semaphore(name, 1)?.acquire().await?;
            let sem = other.semaphore(name, 1)?;
            let waiter =
                tokio::spawn(async move { sem.acquire_timeout(LIMIT).await.map(Guard::from) });
            (permit.fence(), Box::pin(permit.release()), Some(waiter))
        }
        LockKind::FairMutex => {
            let fair = client.fair_mutex(name)?.lock().await?;
            let line = other.fair_mutex(name)?;
            let waiter =
                tokio::spawn(async move { line.lock_timeout(LIMIT).await.map(Guard::from) });
            (fair.fence(), Box::pin(fair.unlock()), Some(waiter))
        }
        // Listed and released by force in `an_election_is_listed_and_released_by_force`: a
        // leader whose leadership was removed learns it (`lost`), it is not refused here.
        LockKind::Election => return Ok(None),
        // A foreign mutex lives under its layout's own key, without the client's prefix:
        // `force_unlock` of a name does not reach it.
        LockKind::ForeignMutex => return Ok(None),
        other => panic!("no stuck lock for {other}: teach this test the new kind"),
    };
    Ok(Some(Stuck {
        kind,
        fence,
        release,
        waiter,
    }))
}

#[tokio::test]
async fn force_unlock_frees_every_kind_keeps_the_fence_and_wakes_waiters() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "stuck";
    // Waiters of the semaphore and of the fair mutex, in another client: the release must
    // wake them, well before their fallback timers (1 s by default) would.
    let other = client_with(
        &server,
        ClientOptions::default().wake_fallback(Duration::from_secs(30)),
    )
    .await;
    let mut stuck = Vec::new();
    for kind in LockKind::ALL {
        if let Some(held) = hold_stuck(kind, &client, &other, name).await? {
            stuck.push(held);
        }
    }
    // Read after every hold: each waiter (started with its kind's hold) waits.
    let fence_before: u64 = server
        .cli(&["GET", "fencelock:{stuck}:fence"])
        .parse()
        .expect("fence");
    let fair_queued = |locks: &[fencelock::LockInfo]| {
        locks
            .iter()
            .find(|l| l.kind == LockKind::FairMutex)
            .and_then(|l| l.queued)
    };
    tokio::time::timeout(LIMIT, async {
        while fair_queued(&client.locks_named(name).await.expect("read")) != Some(1)
            || server
                .cli(&["PUBSUB", "NUMSUB", "fencelock:{stuck}:sem-wake"])
                .ends_with('0')
        {
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await
    .expect("both waiters wait");

    let started = std::time::Instant::now();
    let removed = client.force_unlock(name).await?;
    let kinds: Vec<LockKind> = removed.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        stuck.iter().map(|s| s.kind).collect::<Vec<_>>(),
        "every kind held, in the order of LockKind::ALL"
    );
    let fence_of = |kind| stuck.iter().find(|s| s.kind == kind).map(|s| s.fence);
    let removed_of = |kind| removed.iter().find(|l| l.kind == kind).expect("removed");
    assert_eq!(removed_of(LockKind::Mutex).fence, fence_of(LockKind::Mutex));
    assert_eq!(removed_of(LockKind::FairMutex).queued, Some(1));
    let mut woken = Vec::new();
    for held in &mut stuck {
        if let Some(waiter) = held.waiter.take() {
            woken.push((held.kind, held.fence, waiter.await.expect("task")?));
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the release, not a timer: {:?}",
        started.elapsed()
    );
    for (kind, fence, next) in &woken {
        match kind {
            LockKind::Semaphore => assert!(next.fence().get() > fence_before, "{kind}"),
            _ => assert!(next.fence() > *fence, "{kind}"),
        }
    }

    for held in stuck {
        let lost = held.release.await;
        assert!(
            matches!(lost, Err(Error::NotHeld { .. })),
            "{}: {lost:?}",
            held.kind
        );
    }
    assert_eq!(
        server.cli(&["HGET", "fencelock:{stuck}:sem", "permits"]),
        "1",
        "the total is kept"
    );
    for (_, _, next) in woken {
        next.unlock().await?;
    }
    assert!(client.force_unlock(name).await?.is_empty());
    Ok(())
}

/// An election's leader is listed as every kind's holders are, with its published value as the
/// holder, and a forced release ends its leadership: the leader's guard learns it lost, and a
/// waiting candidate leads at once.
#[tokio::test]
async fn an_election_is_listed_and_released_by_force() -> Result<(), Error> {
    let server = RedisServer::start();
    let c = client(&server).await;
    // Renewed every third of a second: the lost leadership is noticed soon.
    let short =
        fencelock::LockOptions::default().lease(fencelock::Lease::Renewed(Duration::from_secs(1)));
    let election = c.election_with_options("scheduler", short)?;
    let leading = election.campaign("host-a:8080").await?;
    let listed = c.locks("scheduler").await?;
    let [listed] = listed.as_slice() else {
        panic!("one lock listed: {listed:?}");
    };
    assert_eq!(listed.kind, LockKind::Election);
    assert_eq!(listed.holder.as_deref(), Some("host-a:8080"));
    assert_eq!(listed.fence, Some(leading.fence()));
    assert!(listed.remaining.is_some());
    assert_eq!(c.locks("sched*").await?.len(), 1, "every kind listed");

    let standby = tokio::spawn({
        let election = c.election("scheduler")?;
        async move { election.campaign("host-b:8080").await }
    });
    tokio::time::sleep(ms(200)).await;
    let removed = c.force_unlock("scheduler").await?;
    assert_eq!(
        removed.iter().map(|info| info.kind).collect::<Vec<_>>(),
        [LockKind::Election]
    );
    let lost = tokio::time::timeout(LIMIT, leading.lost()).await;
    assert!(lost.is_ok(), "the leader learns it lost its leadership");
    let next = tokio::time::timeout(LIMIT, standby)
        .await
        .expect("the standby is woken")
        .expect("task")?;
    assert!(next.fence() > listed.fence.expect("fence"), "fences rise");
    next.resign().await?;
    Ok(())
}
