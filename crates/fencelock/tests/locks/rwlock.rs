//! The RwLock against a real redis-server: sharing and exclusion, reentrant reads and writes,
//! downgrade, refused upgrade, owners, per-hold leases, writer preference, fencing,
//! cancellation and wake-ups.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, command_calls, eventually, ms};
use fencelock::{Client, ClientOptions, Error, Lease, LockOptions, Lost, RwLock, MIN_LEASE};
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
    format!("fencelock:{{{name}}}:rw")
}

/// The lock's fields whose names start with `kind` (`r`, `w` or `q`).
fn fields(server: &RedisServer, name: &str, kind: char) -> Vec<String> {
    server
        .cli(&["HKEYS", &key(name)])
        .lines()
        .filter(|f| f.starts_with(kind) && f.contains(':'))
        .map(str::to_owned)
        .collect()
}

/// The server's clock in milliseconds.
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

fn expiry(server: &RedisServer, name: &str, field: &str) -> u64 {
    server
        .cli(&["HGET", &key(name), field])
        .parse()
        .expect("numeric expiry")
}

#[track_caller]
fn expect_held<T: std::fmt::Debug>(result: fencelock::Result<T>) -> Option<Duration> {
    match result {
        Err(Error::Held { remaining, .. }) => remaining,
        other => panic!("expected Held, got {other:?}"),
    }
}

#[track_caller]
fn expect_deadlock<T: std::fmt::Debug>(result: fencelock::Result<T>) {
    match result {
        Err(Error::WouldDeadlock { .. }) => {}
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
}

fn holder(c: &Client) -> fencelock::Holder {
    c.holder().expect("holder")
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("catalog", bounded()).expect("name");
    let (a, b, w) = (holder(&c), holder(&c), holder(&c));

    let ra = lock.read_as(&a).await.expect("read");
    let rb = lock.try_read_as(&b).await.expect("readers share");
    assert_eq!(
        ra.fence(),
        rb.fence(),
        "read holds held together share a fence"
    );
    let left = expect_held(lock.try_write_as(&w).await).expect("readers have leases");
    assert!(left <= Duration::from_secs(30));
    ra.unlock().await.expect("unlock");
    expect_held(lock.try_write_as(&w).await);
    let read_fence = rb.fence();
    rb.unlock().await.expect("unlock");

    let wg = lock.try_write_as(&w).await.expect("free");
    assert!(wg.fence() > read_fence);
    expect_held(lock.try_read_as(&a).await);
    expect_held(lock.try_write_as(&b).await);
    let write_fence = wg.fence();
    wg.unlock().await.expect("unlock");
    let ra = lock.try_read_as(&a).await.expect("free again");
    assert!(ra.fence() > write_fence);
    ra.unlock().await.expect("unlock");
    assert_eq!(
        server.cli(&["EXISTS", &key("catalog")]),
        "0",
        "nothing left"
    );
}

#[tokio::test]
async fn reads_and_writes_are_reentrant_for_their_owner() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("reentry", bounded()).expect("name");
    let (owner, other) = (holder(&c), holder(&c));

    let r1 = lock.read_as(&owner).await.expect("read");
    let r2 = lock.read_as(&owner).await.expect("read again");
    assert_eq!(fields(&server, "reentry", 'r').len(), 2);
    r1.unlock().await.expect("unlock");
    expect_held(lock.try_write_as(&other).await);
    r2.unlock().await.expect("unlock");

    let w1 = lock.write_as(&owner).await.expect("write");
    let w2 = lock.try_write_as(&owner).await.expect("write again");
    assert_eq!(
        w1.fence(),
        w2.fence(),
        "an owner's write holds share a fence"
    );
    assert_eq!(fields(&server, "reentry", 'w').len(), 2);
    w2.unlock().await.expect("unlock");
    expect_held(lock.try_read_as(&other).await);
    expect_held(lock.try_write_as(&other).await);
    w1.unlock().await.expect("unlock");
    lock.try_write_as(&other)
        .await
        .expect("free after the last write hold")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn a_writer_downgrades_by_reading_before_it_lets_go() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("downgrade", bounded()).expect("name");
    let (owner, reader, writer) = (holder(&c), holder(&c), holder(&c));

    let w = lock.write_as(&owner).await.expect("write");
    let r = lock.try_read_as(&owner).await.expect("the writer may read");
    assert!(r.fence() > w.fence());
    expect_held(lock.try_read_as(&reader).await);
    let more = lock
        .try_write_as(&owner)
        .await
        .expect("still a writer: writes re-enter");
    more.unlock().await.expect("unlock");
    w.unlock().await.expect("unlock");

    let other = lock
        .try_read_as(&reader)
        .await
        .expect("the write is gone, readers enter");
    assert_eq!(other.fence(), r.fence());
    expect_held(lock.try_write_as(&writer).await);
    expect_deadlock(lock.try_write_as(&owner).await);
    other.unlock().await.expect("unlock");
    expect_held(lock.try_write_as(&writer).await);
    r.unlock().await.expect("the kept read hold is still held");
    lock.try_write_as(&writer)
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn an_upgrade_is_refused_at_once_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("upgrade", bounded()).expect("name");
    let (owner, other) = (holder(&c), holder(&c));
    let r = lock.read_as(&owner).await.expect("read");
    let before = server.cli(&["HGETALL", &key("upgrade")]);

    expect_deadlock(lock.try_write_as(&owner).await);
    let start = Instant::now();
    expect_deadlock(lock.write_as(&owner).await);
    expect_deadlock(lock.write_timeout_as(&owner, ms(5000)).await);
    assert!(
        start.elapsed() < ms(500),
        "refused, not waited: {:?}",
        start.elapsed()
    );
    tokio::time::sleep(ms(100)).await;
    assert_eq!(server.cli(&["HGETALL", &key("upgrade")]), before);
    assert!(
        fields(&server, "upgrade", 'q').is_empty(),
        "no waiting-writer marker"
    );

    let shared = lock.try_read_as(&other).await.expect("readers still share");
    shared.unlock().await.expect("unlock");
    r.unlock().await.expect("unlock");
}

#[tokio::test]
async fn only_the_owner_of_a_hold_releases_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let short = c
        .rwlock_with_options("owners", fixed(ms(200)))
        .expect("name");
    let long = c
        .rwlock_with_options("owners", fixed(ms(5000)))
        .expect("name");
    let (old, new, reader) = (holder(&c), holder(&c), holder(&c));

    let stale = short.write_as(&old).await.expect("write");
    let stale_reentry = short.write_as(&old).await.expect("write again");
    tokio::time::sleep(ms(300)).await;
    let fresh = long.write_as(&new).await.expect("free after the lease");
    let before = server.cli(&["HGETALL", &key("owners")]);
    assert!(matches!(
        stale.extend(ms(60_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(stale.unlock().await, Err(Error::NotHeld { .. })));
    drop(stale_reentry);
    tokio::time::sleep(ms(100)).await;
    assert_eq!(server.cli(&["HGETALL", &key("owners")]), before);
    expect_held(long.try_read_as(&reader).await);
    fresh.unlock().await.expect("the new owner releases");

    // One reader's release leaves the other readers' holds alone.
    let r1 = long.read_as(&old).await.expect("read");
    let r2 = long.read_as(&reader).await.expect("read");
    let r2_field = fields(&server, "owners", 'r')
        .into_iter()
        .find(|f| f.ends_with(reader.id()))
        .expect("the second reader's hold");
    let r2_expiry = expiry(&server, "owners", &r2_field);
    r1.unlock().await.expect("unlock");
    assert_eq!(fields(&server, "owners", 'r'), vec![r2_field.clone()]);
    assert_eq!(expiry(&server, "owners", &r2_field), r2_expiry);
    r2.unlock().await.expect("unlock");
}

#[tokio::test]
async fn each_reader_has_its_own_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(400);
    let lapsing = c.rwlock_with_options("leases", fixed(lease)).expect("name");
    let kept = c
        .rwlock_with_options("leases", renewed(lease))
        .expect("name");
    let (a, b, w) = (holder(&c), holder(&c), holder(&c));

    let short = lapsing.read_as(&a).await.expect("read");
    let long = kept.read_as(&b).await.expect("read");
    let short_field = fields(&server, "leases", 'r')
        .into_iter()
        .find(|f| f.ends_with(a.id()))
        .expect("the fixed reader's hold");
    let short_expiry = expiry(&server, "leases", &short_field);
    tokio::time::sleep(lease / 2).await;
    let third = holder(&c);
    kept.read_as(&third)
        .await
        .expect("read")
        .unlock()
        .await
        .expect("unlock");
    tokio::time::sleep(lease * 3 / 2).await;

    // The renewed reader's renewals, and a later reader's grant and release, neither extended
    // nor cut the other's lease.
    assert!(!short.is_held());
    assert_eq!(short.lost().await, Lost::Expired);
    assert!(long.is_held());
    assert!(server_ms(&server) > short_expiry);
    assert_eq!(expiry(&server, "leases", &short_field), short_expiry);
    expect_held(kept.try_write_as(&w).await);
    assert!(
        fields(&server, "leases", 'r')
            .iter()
            .all(|f| f.ends_with(b.id())),
        "the attempt purged the expired hold, by the server's clock"
    );
    assert!(matches!(
        short.extend(lease).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(short.unlock().await, Err(Error::NotHeld { .. })));
    long.unlock().await.expect("still held");
    kept.try_write_as(&w)
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn an_expired_hold_is_not_revived_by_a_late_extend() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("late", fixed(ms(200))).expect("name");
    let (a, keeper) = (holder(&c), holder(&c));
    let _keeps_the_key = c
        .rwlock_with_options("late", fixed(ms(10_000)))
        .expect("name")
        .read_as(&keeper)
        .await
        .expect("read");
    let expired = lock.read_as(&a).await.expect("read");
    tokio::time::sleep(ms(300)).await;
    // Nothing purged the field yet, and still the hold stays expired.
    let field = fields(&server, "late", 'r')
        .into_iter()
        .find(|f| f.ends_with(a.id()))
        .expect("the expired hold's field is still there");
    let expired_at = expiry(&server, "late", &field);
    assert!(matches!(
        expired.extend(ms(10_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(expiry(&server, "late", &field), expired_at, "not revived");
}

#[tokio::test]
async fn a_waiting_writer_holds_new_readers_back_only_with_preference() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for (name, prefer) in [("preferred", true), ("plain", false)] {
        let lock = c
            .rwlock_with_options(name, bounded())
            .expect("name")
            .writer_preference(prefer);
        let (reader, writer, newcomer) = (holder(&c), holder(&c), holder(&c));
        let held = lock.read_as(&reader).await.expect("read");
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.write_as(&writer).await }
        });
        tokio::time::sleep(ms(200)).await;
        assert!(!waiting.is_finished());

        let again = lock
            .try_read_as(&reader)
            .await
            .expect("a reader holding a read may re-enter");
        if prefer {
            assert_eq!(fields(&server, name, 'q').len(), 1, "the writer's marker");
            expect_held(lock.try_read_as(&newcomer).await);
        } else {
            assert!(fields(&server, name, 'q').is_empty());
            let joined = lock
                .try_read_as(&newcomer)
                .await
                .expect("readers join freely");
            joined.unlock().await.expect("unlock");
        }
        again.unlock().await.expect("unlock");
        held.unlock().await.expect("unlock");
        let w = tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("the writer is woken by the last reader")
            .expect("task")
            .expect("write");
        assert!(
            fields(&server, name, 'q').is_empty(),
            "the marker goes with the grant"
        );
        expect_held(lock.try_read_as(&newcomer).await);
        w.unlock().await.expect("unlock");
        lock.try_read_as(&newcomer)
            .await
            .expect("free")
            .unlock()
            .await
            .expect("unlock");
    }
}

#[tokio::test]
async fn a_writer_that_gives_up_or_is_cancelled_lets_readers_in_at_once() {
    let server = RedisServer::start();
    // Readers blocked by the marker would otherwise wait for this fallback.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let c = client_with(&server, options).await;
    let lock = c.rwlock_with_options("give-up", bounded()).expect("name");
    let (reader, writer, newcomer) = (holder(&c), holder(&c), holder(&c));
    let held = lock.read_as(&reader).await.expect("read");

    for cancel in [false, true] {
        let writing = tokio::spawn({
            let (lock, writer) = (lock.clone(), writer.clone());
            async move { lock.write_timeout_as(&writer, ms(300)).await }
        });
        tokio::time::sleep(ms(100)).await;
        let blocked = tokio::spawn({
            let (lock, newcomer) = (lock.clone(), newcomer.clone());
            async move {
                let guard = lock.read_as(&newcomer).await;
                (Instant::now(), guard)
            }
        });
        tokio::time::sleep(ms(100)).await;
        assert!(
            !blocked.is_finished(),
            "the waiting writer holds the newcomer back"
        );
        let left = if cancel {
            writing.abort();
            Instant::now()
        } else {
            let result = writing.await.expect("task");
            assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
            Instant::now()
        };
        let (entered, guard) = tokio::time::timeout(Duration::from_secs(2), blocked)
            .await
            .expect("the newcomer is woken when the writer leaves")
            .expect("task");
        println!(
            "cancel={cancel}: reader in {:?} after the writer left",
            entered - left
        );
        assert!(entered - left < Duration::from_secs(1));
        assert!(fields(&server, "give-up", 'q').is_empty());
        guard.expect("read").unlock().await.expect("unlock");
    }
    held.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_dead_writers_marker_expires_by_itself() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .rwlock_with_options("dead-writer", bounded())
        .expect("name");
    let reader = holder(&c);
    // What a waiting writer leaves; its process died before it could remove it.
    let marker = format!("q{}:{}:dead", "A".repeat(22), "B".repeat(22));
    let expires = server_ms(&server) + 500;
    server.cli(&["HSET", &key("dead-writer"), &marker, &expires.to_string()]);

    let left = expect_held(lock.try_read_as(&reader).await).expect("the marker's expiry");
    assert!(left <= ms(500), "{left:?}");
    let start = Instant::now();
    let guard = lock
        .read_timeout_as(&reader, Duration::from_secs(3))
        .await
        .expect("read");
    println!(
        "reader in after {:?} (marker had {left:?} left)",
        start.elapsed()
    );
    assert!(
        start.elapsed() + ms(50) >= left,
        "not before the marker expired"
    );
    assert!(fields(&server, "dead-writer", 'q').is_empty(), "purged");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn fixed_leases_expire_and_extend_sets_one_holds_lease() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .rwlock_with_options("fixed", fixed(ms(300)))
        .expect("name");
    let (w, r) = (holder(&c), holder(&c));
    let guard = lock.write_as(&w).await.expect("write");
    guard.extend(ms(1500)).await.expect("extend while held");
    tokio::time::sleep(ms(600)).await;
    assert!(guard.is_held(), "the extension outlives the first lease");
    expect_held(lock.try_read_as(&r).await);
    tokio::time::sleep(ms(1100)).await;
    assert!(!guard.is_held());
    assert_eq!(guard.lost().await, Lost::Expired);
    let next = lock.try_read_as(&r).await.expect("free after the lease");
    assert!(next.fence() > guard.fence());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn renewal_keeps_read_and_write_holds_for_three_leases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(400);
    let lock = c
        .rwlock_with_options("renewed", renewed(lease))
        .expect("name");
    let (owner, rival) = (holder(&c), holder(&c));
    let w = lock.write_as(&owner).await.expect("write");
    let r = lock.read_as(&owner).await.expect("read");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(w.is_held() && r.is_held());
        expect_held(lock.try_read_as(&rival).await);
        tokio::time::sleep(ms(50)).await;
    }
    w.unlock().await.expect("still held");
    let start = Instant::now();
    while start.elapsed() < lease * 2 {
        assert!(r.is_held());
        expect_held(lock.try_write_as(&rival).await);
        tokio::time::sleep(ms(50)).await;
    }
    r.unlock().await.expect("still held");
}

#[tokio::test]
async fn lost_fires_when_a_hold_is_removed_behind_its_owner() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(600);
    let lock = c
        .rwlock_with_options("revoked", renewed(lease))
        .expect("name");
    let (a, b) = (holder(&c), holder(&c));
    let ra = lock.read_as(&a).await.expect("read");
    let rb = lock.read_as(&b).await.expect("read");
    let field = fields(&server, "revoked", 'r')
        .into_iter()
        .find(|f| f.ends_with(a.id()))
        .expect("a's hold");
    server.cli(&["HDEL", &key("revoked"), &field]);
    let reason = tokio::time::timeout(lease * 2, ra.lost())
        .await
        .expect("lost must fire within the next renewal");
    assert_eq!(reason, Lost::Revoked);
    assert!(rb.is_held(), "the other reader is untouched");
    rb.unlock().await.expect("unlock");
}

#[tokio::test]
async fn fences_increase_across_writers_and_reader_groups() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .rwlock_with_options("fenced", fixed(MIN_LEASE))
        .expect("name");
    let (a, b) = (holder(&c), holder(&c));
    let mut last = 0;
    for i in 0..300 {
        let fence = if i % 3 == 0 {
            let r1 = lock.read_as(&a).await.expect("read");
            let r2 = lock.read_as(&b).await.expect("read");
            assert_eq!(r1.fence(), r2.fence());
            let fence = r1.fence().get();
            let _ = r1.unlock().await;
            if i % 30 == 0 {
                // Let the other hold's lease run out instead.
                tokio::time::sleep(MIN_LEASE + ms(20)).await;
                drop(r2);
            } else {
                let _ = r2.unlock().await;
            }
            fence
        } else {
            let w = lock
                .write_as(if i % 2 == 0 { &a } else { &b })
                .await
                .expect("write");
            let fence = w.fence().get();
            if i % 50 == 1 {
                server.cli(&["FLUSHALL"]);
            }
            let _ = w.unlock().await;
            fence
        };
        assert!(fence > last, "grant {i}: fence {fence} after {last}");
        last = fence;
    }
}

/// Loads the scripts, so that a request sent to a paused server does not come back NOSCRIPT.
async fn warm_up(lock: &RwLock, c: &Client) {
    let w = lock.write_as(&holder(c)).await.expect("write");
    w.extend(ms(30_000)).await.expect("extend");
    w.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_cancelled_acquire_in_flight_leaves_the_lock_as_it_was() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("in-flight", bounded()).expect("name");
    warm_up(&lock, &c).await;
    let (owner, other) = (holder(&c), holder(&c));
    let kept = lock.read_as(&owner).await.expect("read");
    let before = server.cli(&["HGETALL", &key("in-flight")]);

    // A read, a re-entrant read, and a write that will wait (and leave a marker) by an owner
    // holding nothing: each granted or refused after the caller gave up, then undone.
    for (i, attempt) in ["read", "reenter", "write"].into_iter().enumerate() {
        let calls = command_calls(&server, "evalsha");
        server.pause();
        let aborted = match attempt {
            "read" => tokio::time::timeout(ms(100), lock.read_as(&other))
                .await
                .is_err(),
            "reenter" => tokio::time::timeout(ms(100), lock.read_as(&owner))
                .await
                .is_err(),
            _ => tokio::time::timeout(ms(100), lock.write_as(&other))
                .await
                .is_err(),
        };
        assert!(aborted, "{attempt}: still in flight");
        server.resume();
        assert!(
            eventually(Duration::from_secs(5), || {
                command_calls(&server, "evalsha") >= calls + 2
            })
            .await,
            "{attempt}: the acquire and its release both ran"
        );
        assert_eq!(
            server.cli(&["HGETALL", &key("in-flight")]),
            before,
            "attempt {i} ({attempt}) left the lock as it was"
        );
    }
    assert!(kept.is_held());
    kept.unlock().await.expect("unlock");
    lock.try_write_as(&other)
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn a_writers_release_wakes_every_reader_and_the_last_reader_a_writer() {
    let server = RedisServer::start();
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(client_with(&server, options.clone()).await);
    }
    let lock = clients[0]
        .rwlock_with_options("wakes", bounded())
        .expect("name");
    let writer = holder(&clients[0]);
    let w = lock.write_as(&writer).await.expect("write");

    let mut readers = Vec::new();
    for i in 0..8 {
        let c = &clients[i % 2];
        let (lock, reader) = (
            c.rwlock_with_options("wakes", bounded()).expect("name"),
            holder(c),
        );
        readers.push(tokio::spawn(async move {
            let guard = lock.read_as(&reader).await.expect("read");
            (Instant::now(), guard)
        }));
    }
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    w.unlock().await.expect("unlock");
    let mut guards = Vec::new();
    for reader in readers {
        let (entered, guard) = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("every reader is woken")
            .expect("task");
        assert!(
            entered - released < Duration::from_secs(1),
            "{:?}",
            entered - released
        );
        guards.push(guard);
    }

    let next = clients[1]
        .rwlock_with_options("wakes", bounded())
        .expect("name");
    let next_writer = holder(&clients[1]);
    let waiting = tokio::spawn(async move {
        let guard = next.write_as(&next_writer).await.expect("write");
        (Instant::now(), guard)
    });
    tokio::time::sleep(ms(300)).await;
    let last = guards.pop().expect("a reader");
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
    tokio::time::sleep(ms(200)).await;
    assert!(!waiting.is_finished(), "one reader is left");
    let released = Instant::now();
    last.unlock().await.expect("unlock");
    let (entered, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the writer is woken")
        .expect("task");
    println!(
        "writer in {:?} after the last reader left",
        entered - released
    );
    assert!(entered - released < Duration::from_secs(1));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_key_of_another_type_is_reported() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["SET", &key("typed"), "x"]);
    let lock = c.rwlock_with_options("typed", bounded()).expect("name");
    assert!(matches!(
        lock.try_read_as(&holder(&c)).await,
        Err(Error::WrongType { .. })
    ));
}

/// Script calls so far: each operation's round trip is one, and the only one, since no lock
/// operation sends a command of its own beside its script.
fn script_calls(server: &RedisServer) -> u64 {
    ["evalsha", "eval"]
        .iter()
        .map(|command| command_calls(server, command))
        .sum()
}

#[tokio::test]
async fn every_operation_without_waiting_is_one_round_trip() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock_with_options("trips", bounded()).expect("name");
    let (a, b) = (holder(&c), holder(&c));
    warm_up(&lock, &c).await;

    let mut last = script_calls(&server);
    let one_trip = |what: &str, last: &mut u64| {
        let now = script_calls(&server);
        assert_eq!(now - *last, 1, "{what} ran {} scripts", now - *last);
        *last = now;
    };
    let r = lock.try_read_as(&a).await.expect("read");
    one_trip("try_read", &mut last);
    let again = lock.read_as(&a).await.expect("read");
    one_trip("read", &mut last);
    expect_held(lock.try_write_as(&b).await);
    one_trip("a refused try_write", &mut last);
    // A refused upgrade answers in one round trip; the core then gives back, in the
    // background, whatever the refused request might have been granted: nothing.
    let before = script_calls(&server);
    expect_deadlock(lock.try_write_as(&a).await);
    assert!(
        eventually(Duration::from_secs(2), || script_calls(&server)
            == before + 2)
        .await
    );
    last = script_calls(&server);
    r.extend(ms(60_000)).await.expect("extend");
    one_trip("extend", &mut last);
    r.unlock().await.expect("unlock");
    one_trip("unlock", &mut last);
    again.unlock().await.expect("unlock");
    one_trip("unlock", &mut last);
    let w = lock.write_as(&b).await.expect("write");
    one_trip("write", &mut last);
    w.unlock().await.expect("unlock");
    one_trip("unlock", &mut last);
}
