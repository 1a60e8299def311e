//! The ReentrantMutex against a real redis-server: re-entry counts, owners, leases, renewal,
//! the lost signal, fencing, cancellation and hand-off to waiters.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, command_calls, eventually, ms};
use fencelock::{ClientOptions, Error, Lease, LockOptions, Lost, ReentrantMutex};
use fencelock_testkit::RedisServer;

/// Every wait in these tests is bounded, so that a broken lock fails them instead of hanging.
const WAIT: Duration = Duration::from_secs(10);

fn bounded() -> LockOptions {
    LockOptions::default().wait_timeout(WAIT)
}

fn fixed(lease: Duration) -> LockOptions {
    bounded().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> LockOptions {
    bounded().lease(Lease::Renewed(lease))
}

fn key(name: &str) -> String {
    format!("fencelock:{{{name}}}:rmutex")
}

/// The hold count stored for the lock, 0 when the lock is free.
fn count(server: &RedisServer, name: &str) -> u64 {
    let count = server.cli(&["HGET", &key(name), "count"]);
    if count.is_empty() {
        0
    } else {
        count.parse().expect("numeric count")
    }
}

fn pttl(server: &RedisServer, name: &str) -> i64 {
    server
        .cli(&["PTTL", &key(name)])
        .parse()
        .expect("numeric pttl")
}

fn expect_held<T: std::fmt::Debug>(result: fencelock::Result<T>) {
    match result {
        Err(Error::Held { .. }) => {}
        other => panic!("expected Held, got {other:?}"),
    }
}

#[tokio::test]
async fn the_owner_reenters_and_the_last_release_frees_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .reentrant_mutex_with_options("ledger", bounded())
        .expect("name");
    let (job, other) = (c.holder().expect("holder"), c.holder().expect("holder"));

    let first = mutex.lock(&job).await.expect("lock");
    let second = mutex.try_lock(&job).await.expect("re-enter");
    let third = mutex.lock_timeout(&job, ms(100)).await.expect("re-enter");
    assert_eq!(count(&server, "ledger"), 3);
    assert_eq!(
        second.fence(),
        first.fence(),
        "holds of one owner share the fence"
    );
    assert_eq!(third.fence(), first.fence());

    for (guard, left) in [(second, 2), (first, 1)] {
        expect_held(mutex.try_lock(&other).await);
        guard.unlock().await.expect("unlock");
        assert_eq!(count(&server, "ledger"), left);
    }
    expect_held(mutex.try_lock(&other).await);
    let last_fence = third.fence();
    third.unlock().await.expect("the last hold");
    assert_eq!(server.cli(&["EXISTS", &key("ledger")]), "0");

    let next = mutex.try_lock(&other).await.expect("free at zero");
    assert!(next.fence() > last_fence, "a new owner gets a larger fence");
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn owners_are_the_client_and_the_holder_id_together() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let mutex_a = a
        .reentrant_mutex_with_options("slots", bounded())
        .expect("name");
    let mutex_b = b
        .reentrant_mutex_with_options("slots", bounded())
        .expect("name");

    let held = mutex_a
        .lock(&a.holder_named("worker-3").expect("holder"))
        .await
        .expect("lock");
    // The same name through the same client is the same owner.
    let again = mutex_a
        .try_lock(&a.holder_named("worker-3").expect("holder"))
        .await
        .expect("same owner");
    // Through another client it is another owner, and so is another name in the same client.
    expect_held(
        mutex_b
            .try_lock(&b.holder_named("worker-3").expect("holder"))
            .await,
    );
    expect_held(
        mutex_a
            .try_lock(&a.holder_named("worker-4").expect("holder"))
            .await,
    );
    // A holder keeps its client's identity whichever client's handle it is used with.
    let via_b = mutex_b
        .try_lock(&a.holder_named("worker-3").expect("holder"))
        .await
        .expect("the owner is the holder's, not the handle's");
    assert_eq!(count(&server, "slots"), 3);
    for guard in [via_b, again, held] {
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn holder_names_are_validated() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for bad in ["", "a:b", &"x".repeat(129)] {
        assert!(
            matches!(c.holder_named(bad), Err(Error::InvalidOption { .. })),
            "{bad:?} must be refused"
        );
    }
    let holder = c.holder_named("x".repeat(128)).expect("128 bytes is fine");
    assert_eq!(holder.client_id(), c.id());
    assert_ne!(c.holder().expect("holder"), c.holder().expect("holder"));
}

#[tokio::test]
async fn a_former_owner_cannot_release_or_extend_the_new_owners_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let short = c
        .reentrant_mutex_with_options("handover", fixed(ms(200)))
        .expect("name");
    let long = c
        .reentrant_mutex_with_options("handover", fixed(ms(5000)))
        .expect("name");
    let (old_owner, new_owner) = (c.holder().expect("holder"), c.holder().expect("holder"));

    let old_a = short.lock(&old_owner).await.expect("lock");
    let old_b = short.lock(&old_owner).await.expect("re-enter");
    tokio::time::sleep(ms(300)).await;
    assert_eq!(old_a.lost().await, Lost::Expired);
    let new = long.lock(&new_owner).await.expect("free after the lease");
    let before = server.cli(&["HGETALL", &key("handover")]);

    assert!(matches!(
        old_a.extend(ms(60_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(old_a.unlock().await, Err(Error::NotHeld { .. })));
    drop(old_b); // its background release must not touch the new owner's hold either
    tokio::time::sleep(ms(100)).await;

    assert_eq!(server.cli(&["HGETALL", &key("handover")]), before);
    assert_eq!(count(&server, "handover"), 1);
    assert!(pttl(&server, "handover") <= 5000);
    assert!(new.is_held());
    new.unlock().await.expect("the new owner releases");
}

#[tokio::test]
async fn fixed_leases_expire_and_extend_never_shortens_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let owner = c.holder().expect("holder");
    let rival = c.holder().expect("holder");
    let short = c
        .reentrant_mutex_with_options("fixed", fixed(ms(300)))
        .expect("name");
    let long = c
        .reentrant_mutex_with_options("fixed", fixed(ms(3000)))
        .expect("name");

    let outer = long.lock(&owner).await.expect("lock");
    let inner = short
        .lock(&owner)
        .await
        .expect("re-enter with a shorter lease");
    assert!(
        pttl(&server, "fixed") > 2000,
        "a shorter hold must not cut the longer one's lease"
    );
    inner.extend(ms(500)).await.expect("extend");
    assert!(pttl(&server, "fixed") > 2000, "nor may its extension");
    inner.unlock().await.expect("unlock");

    outer.extend(ms(600)).await.expect("extend");
    tokio::time::sleep(ms(2600)).await;
    assert!(outer.is_held(), "the lock lasts at least as long as asked");
    outer.extend(ms(400)).await.expect("extend while held");
    tokio::time::sleep(ms(800)).await;
    assert!(!outer.is_held());
    assert_eq!(outer.lost().await, Lost::Expired);
    let next = short.try_lock(&rival).await.expect("free after the lease");
    assert!(next.fence() > outer.fence());
    assert!(matches!(outer.unlock().await, Err(Error::NotHeld { .. })));
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn renewal_keeps_every_hold_for_three_leases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(400);
    let mutex = c
        .reentrant_mutex_with_options("long-job", renewed(lease))
        .expect("name");
    let owner = c.holder().expect("holder");
    let rival = c.holder().expect("holder");
    let outer = mutex.lock(&owner).await.expect("lock");
    let inner = mutex.lock(&owner).await.expect("re-enter");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(
            outer.is_held() && inner.is_held(),
            "renewal keeps both holds valid"
        );
        expect_held(mutex.try_lock(&rival).await);
        tokio::time::sleep(ms(50)).await;
    }
    inner.unlock().await.expect("still held after three leases");
    tokio::time::sleep(lease).await;
    assert!(outer.is_held(), "the other hold goes on renewing");
    outer.unlock().await.expect("still held");
}

#[tokio::test]
async fn lost_fires_when_the_lock_is_deleted_behind_the_owner() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(600);
    let mutex = c
        .reentrant_mutex_with_options("deleted", renewed(lease))
        .expect("name");
    let owner = c.holder().expect("holder");
    let guard = mutex.lock(&owner).await.expect("lock");
    server.cli(&["DEL", &key("deleted")]);
    let reason = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost must fire within the next renewal");
    assert_eq!(reason, Lost::Revoked);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_last_release_only() {
    let server = RedisServer::start();
    // A fallback this long would show if the hand-off relied on it.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let a = client(&server).await;
    let b = client_with(&server, options).await;
    let owner = a.holder().expect("holder");
    let held = a
        .reentrant_mutex_with_options("handoff", bounded())
        .expect("name");
    let outer = held.lock(&owner).await.expect("lock");
    let inner = held.lock(&owner).await.expect("re-enter");

    let waiting = b
        .reentrant_mutex_with_options("handoff", bounded())
        .expect("name");
    let waiter_holder = b.holder().expect("holder");
    let waiter = tokio::spawn(async move {
        let guard = waiting.lock(&waiter_holder).await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(ms(200)).await;
    inner.unlock().await.expect("unlock");
    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished(), "one hold is still held");

    let released = Instant::now();
    outer.unlock().await.expect("unlock");
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken well before the 10 s fallback")
        .expect("task");
    let guard = guard.expect("lock");
    println!(
        "handed over {:?} after the last release",
        acquired - released
    );
    assert!(acquired - released < Duration::from_secs(1));
    guard.unlock().await.expect("unlock");
}

/// Loads the scripts, so that a request sent to a paused server does not come back NOSCRIPT.
async fn warm_up(mutex: &ReentrantMutex, c: &fencelock::Client) {
    let warm = mutex
        .lock(&c.holder().expect("holder"))
        .await
        .expect("lock");
    warm.extend(ms(30_000)).await.expect("extend");
    warm.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_cancelled_reentry_gives_back_only_its_own_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .reentrant_mutex_with_options("in-flight", bounded())
        .expect("name");
    warm_up(&mutex, &c).await;
    let owner = c.holder().expect("holder");
    let kept = mutex.lock(&owner).await.expect("lock");

    let calls = command_calls(&server, "evalsha");
    server.pause();
    let aborted = tokio::time::timeout(ms(100), mutex.lock(&owner)).await;
    assert!(aborted.is_err(), "the re-entry was still in flight");
    server.resume();

    // The re-entry was granted after the caller gave up: its hold is counted, then given back
    // by its token in the background, never the kept one.
    let settled = eventually(Duration::from_secs(5), || {
        command_calls(&server, "evalsha") >= calls + 2
    })
    .await;
    assert!(settled, "the acquire and its release both ran");
    assert_eq!(
        server.cli(&["HLEN", &key("in-flight")]),
        "4",
        "owner, count, fence, one hold"
    );
    assert_eq!(count(&server, "in-flight"), 1);
    assert!(kept.is_held());
    expect_held(mutex.try_lock(&c.holder().expect("holder")).await);
    kept.unlock().await.expect("the kept hold is still ours");
    assert_eq!(server.cli(&["EXISTS", &key("in-flight")]), "0");
}

#[tokio::test]
async fn a_cancelled_first_lock_leaves_the_lock_free() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let mutex = a
        .reentrant_mutex_with_options("in-flight", bounded())
        .expect("name");
    warm_up(&mutex, &a).await;

    server.pause();
    let aborted = tokio::time::timeout(ms(100), mutex.lock(&a.holder().expect("holder"))).await;
    assert!(aborted.is_err());
    server.resume();
    let start = Instant::now();
    let guard = b
        .reentrant_mutex_with_options("in-flight", bounded())
        .expect("name")
        .lock_timeout(&b.holder().expect("holder"), Duration::from_secs(5))
        .await
        .expect("the cancelled grant is released long before its 30 s lease");
    println!("free {:?} after the resume", start.elapsed());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_dropped_guard_gives_back_its_hold_in_the_background() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .reentrant_mutex_with_options("dropped", bounded())
        .expect("name");
    let owner = c.holder().expect("holder");
    let kept = mutex.lock(&owner).await.expect("lock");
    drop(mutex.lock(&owner).await.expect("re-enter"));
    assert!(
        eventually(Duration::from_secs(2), || count(&server, "dropped") == 1).await,
        "the dropped hold was given back"
    );
    drop(kept);
    let again = mutex
        .lock_timeout(&c.holder().expect("holder"), Duration::from_secs(2))
        .await
        .expect("released by drop, not by its 30 s lease");
    again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_hash_of_another_shape_is_reported_not_misread() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["SET", &key("typed"), "x"]);
    let mutex = c
        .reentrant_mutex_with_options("typed", bounded())
        .expect("name");
    assert!(matches!(
        mutex.try_lock(&c.holder().expect("holder")).await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn every_operation_without_waiting_is_one_round_trip() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .reentrant_mutex_with_options("trips", bounded())
        .expect("name");
    warm_up(&mutex, &c).await;
    let (owner, other) = (c.holder().expect("holder"), c.holder().expect("holder"));
    // Each operation is one script call, and no lock operation sends a command of its own.
    let scripts = || command_calls(&server, "evalsha") + command_calls(&server, "eval");
    let mut last = scripts();
    let mut one_trip = |what: &str| {
        let now = scripts();
        assert_eq!(now - last, 1, "{what} ran {} scripts", now - last);
        last = now;
    };
    let outer = mutex.lock(&owner).await.expect("lock");
    one_trip("lock");
    let inner = mutex.try_lock(&owner).await.expect("re-enter");
    one_trip("re-entry");
    expect_held(mutex.try_lock(&other).await);
    one_trip("a refused try_lock");
    inner.extend(ms(60_000)).await.expect("extend");
    one_trip("extend");
    inner.unlock().await.expect("unlock");
    one_trip("unlock");
    outer.unlock().await.expect("unlock");
    one_trip("the last unlock");
}
