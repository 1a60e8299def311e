//! The common cases in a few lines, against a real redis-server: the cron leader with
//! `optional()`, work run under a lock with `using`, a release kept until a point in time,
//! and a client made from the service's own `redis::Client`. What they do when the lock is
//! lost is in `faults.rs` (F19, F20).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::common::{self, client, ms};
use fencelock::{Client, ClientOptions, Deployment, Error, LockKind, LockOptions, Optional};
use fencelock_testkit::RedisServer;

/// How long a test waits for something that should take milliseconds, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn optional_turns_a_busy_lock_into_none_and_passes_other_errors_on() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let leader = a.mutex("cron:report").expect("name");
    let follower = b.mutex("cron:report").expect("name");
    let guard = leader
        .try_lock()
        .await
        .optional()
        .expect("no error")
        .expect("free at first");
    assert!(follower
        .try_lock()
        .await
        .optional()
        .expect("no error")
        .is_none());
    let waited = follower.lock_timeout(ms(100)).await.optional();
    assert!(waited.expect("a timeout is busy too").is_none());
    guard.unlock().await.expect("unlock");
    let next = follower.try_lock().await.optional().expect("no error");
    assert!(next.is_some(), "free after the release");

    let wrong = b.mutex("cron:wrong").expect("name");
    server.cli(&["HSET", "fencelock:{cron:wrong}:mutex", "f", "v"]);
    assert!(matches!(
        wrong.try_lock().await.optional(),
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn a_client_made_from_a_redis_client_locks_the_same_names() {
    let server = RedisServer::start();
    let redis = redis::Client::open(server.url().as_str()).expect("url");
    let from_redis = Client::connect_with_options(&redis, ClientOptions::default())
        .await
        .expect("connect");
    let by_url = client(&server).await;
    let guard = from_redis
        .mutex("shared")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let rival = by_url.mutex("shared").expect("name").try_lock().await;
    assert!(matches!(rival, Err(Error::Held { .. })), "{rival:?}");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn using_returns_the_work_s_value_and_releases_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c.mutex("ledger").expect("name");
    let (fence, held_inside) = mutex
        .using(|fence| {
            let mutex = mutex.clone();
            async move { (fence, mutex.try_lock().await.optional()) }
        })
        .await
        .expect("ran under the lock");
    assert!(
        held_inside.expect("no error").is_none(),
        "the lock is held while the work runs"
    );
    let after = mutex.try_lock().await.expect("released after the work");
    assert!(after.fence() > fence);
    after.unlock().await.expect("unlock");

    let permits = c.semaphore("pool", 1).expect("name");
    let got = permits
        .using(|_| async { permits.available().await })
        .await
        .expect("ran under a permit");
    assert_eq!(got.expect("available"), 0);
    assert_eq!(permits.available().await.expect("available"), 1);
}

#[tokio::test]
async fn unlock_no_earlier_than_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let mutex = a.mutex("cron:dedup").expect("name");
    let rival = b.mutex("cron:dedup").expect("name");
    let guard = mutex.lock().await.expect("lock");
    let at = Instant::now() + Duration::from_secs(2);
    guard.unlock_no_earlier_than(at).await.expect("kept");
    match rival.try_lock().await {
        Err(Error::Held {
            remaining: Some(left),
            ..
        }) => assert!(
            left <= Duration::from_secs(2) && left > ms(500),
            "the key ends at `at`, not with the 30 s lease: {left:?}"
        ),
        other => panic!("expected Held until `at`, got {other:?}"),
    }
    let next = rival.lock_timeout(PATIENCE).await.expect("free after `at`");
    assert!(Instant::now() >= at, "free only from `at` on");
    next.unlock_no_earlier_than(Instant::now() - ms(1))
        .await
        .expect("a past point is a plain unlock");
    let again = mutex.try_lock().await.expect("freed at once");
    again.unlock().await.expect("unlock");
}

/// Dropping the future of `unlock_no_earlier_than`, before it was ever polled or while it waits
/// for Redis, keeps the lock until `at` all the same: the request went to the client's
/// background task when the method was called. Before, the dropped future dropped the guard,
/// whose drop freed the lock at once.
#[tokio::test]
async fn a_dropped_unlock_no_earlier_than_still_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for (name, polled) in [("never-polled", false), ("polled-once", true)] {
        let mutex = a.mutex(name).expect("name");
        let rival = b.mutex(name).expect("name");
        let guard = mutex.lock().await.expect("lock");
        let at = Instant::now() + Duration::from_secs(2);
        let keeping = guard.unlock_no_earlier_than(at);
        if polled {
            let mut keeping = std::pin::pin!(keeping);
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(keeping.as_mut().poll(cx).is_ready())
            })
            .await;
            assert!(
                !first,
                "{name}: Redis cannot have answered without a round trip"
            );
        } else {
            drop(keeping);
        }
        // However the dropped request's answer and this try are ordered, the lock is held: by
        // the guard until the request lands, then until `at`.
        match rival.try_lock().await {
            Err(Error::Held { .. }) => {}
            other => panic!("{name}: expected the lock kept until `at`, got {other:?}"),
        }
        // Free from `at` on, long before the 30 s lease would have ended.
        let deadline = at + Duration::from_secs(5);
        loop {
            match rival.try_lock().await {
                Ok(next) => {
                    assert!(Instant::now() >= at, "{name}: free only from `at` on");
                    next.unlock().await.expect("unlock");
                    break;
                }
                Err(Error::Held { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(ms(50)).await;
                }
                other => panic!("{name}: expected the lock free soon after `at`, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_permit_and_a_write_hold_can_be_kept_until_a_point_too() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let semaphore = c
        .semaphore_with_options("exports", 1, LockOptions::default())
        .expect("name");
    let permit = semaphore.acquire().await.expect("permit");
    let at = Instant::now() + Duration::from_secs(1);
    permit.unlock_no_earlier_than(at).await.expect("kept");
    assert!(semaphore
        .try_acquire()
        .await
        .optional()
        .expect("no error")
        .is_none());
    let next = semaphore
        .acquire_timeout(PATIENCE)
        .await
        .expect("after `at`");
    assert!(Instant::now() >= at);
    next.release().await.expect("release");

    let rwlock = c.rwlock("catalog").expect("name");
    let holder = c.holder().expect("holder");
    let write = rwlock.write_as(&holder).await.expect("write");
    let at = Instant::now() + Duration::from_secs(1);
    write.unlock_no_earlier_than(at).await.expect("kept");
    let reader = c.holder().expect("holder");
    assert!(rwlock
        .try_read_as(&reader)
        .await
        .optional()
        .expect("no error")
        .is_none());
    let read = rwlock
        .read_timeout_as(&reader, PATIENCE)
        .await
        .expect("after `at`");
    assert!(Instant::now() >= at);
    read.unlock().await.expect("unlock");
}

#[tokio::test]
async fn rwlock_reads_and_writes_need_no_holder_and_are_not_reentrant() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock("catalog").expect("name");
    let (first, second) = (
        lock.read().await.expect("read"),
        lock.read().await.expect("readers share"),
    );
    assert!(lock
        .try_write()
        .await
        .optional()
        .expect("no error")
        .is_none());
    let own = lock.write_timeout(ms(200)).await;
    assert!(
        matches!(own, Err(Error::Timeout { .. })),
        "a second call is another owner, which waits for the reads: {own:?}"
    );
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    let write = lock.write().await.expect("write");
    assert!(lock
        .try_read()
        .await
        .optional()
        .expect("no error")
        .is_none());
    write.unlock().await.expect("unlock");
    lock.read_timeout(PATIENCE)
        .await
        .expect("free again")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn permit_holders_are_listed_and_their_labels_go_with_their_grants() {
    let server = RedisServer::start();
    let labelled = |label: &str| ClientOptions::default().holder_label(label);
    let a = common::client_with(&server, labelled("worker-a")).await;
    let b = common::client_with(&server, labelled("worker-b")).await;
    let unlabelled = common::client_with(&server, labelled("")).await;
    let fields = || server.cli(&["HGETALL", "fencelock:{pool}:sem"]);
    let listed = || async {
        let locks = a.locks_named("pool").await.expect("status");
        locks
            .into_iter()
            .find(|info| info.kind == LockKind::Semaphore)
            .expect("held")
    };
    let first = a
        .semaphore("pool", 3)
        .expect("name")
        .acquire()
        .await
        .expect("permit");
    let second = b
        .semaphore("pool", 3)
        .expect("name")
        .acquire()
        .await
        .expect("permit");
    let third = unlabelled
        .semaphore("pool", 3)
        .expect("name")
        .acquire()
        .await
        .expect("permit");
    let listed_now = listed().await;
    assert_eq!(listed_now.holds, 3);
    let mut holders = listed_now.holders.clone();
    holders.sort();
    assert_eq!(holders, ["worker-a", "worker-b"], "{listed_now:?}");
    assert_eq!(listed_now.holder, None, "two holders");
    first.release().await.expect("release");
    assert!(!fields().contains("worker-a"), "{}", fields());
    let listed_now = listed().await;
    assert_eq!(listed_now.holders, ["worker-b"]);
    assert_eq!(listed_now.holder.as_deref(), Some("worker-b"));
    second.release().await.expect("release");
    third.release().await.expect("release");
    assert!(
        !fields().contains("l:"),
        "no label outlives its grant: {}",
        fields()
    );

    let short = LockOptions::default().lease(fencelock::Lease::Fixed(ms(200)));
    let expiring = b
        .semaphore_with_options("pool", 3, short)
        .expect("name")
        .acquire()
        .await
        .expect("permit");
    assert!(fields().contains("worker-b"), "{}", fields());
    tokio::time::sleep(ms(400)).await;
    let next = a
        .semaphore("pool", 3)
        .expect("name")
        .acquire()
        .await
        .expect("permit");
    assert!(
        !fields().contains("worker-b"),
        "an ended grant's label goes with it: {}",
        fields()
    );
    drop(expiring);
    next.release().await.expect("release");
}

#[cfg(feature = "blocking")]
#[test]
fn a_blocking_guard_can_be_kept_until_a_point_too() {
    let server = RedisServer::start();
    let client = fencelock::blocking::Client::connect(server.url().as_str()).expect("connect");
    let mutex = client.mutex("cron:blocking").expect("name");
    let at = Instant::now() + Duration::from_secs(1);
    let guard = client.lock(mutex.lock()).expect("lock");
    guard.unlock_no_earlier_than(at).expect("kept");
    assert!(client
        .lock(mutex.try_lock())
        .optional()
        .expect("no error")
        .is_none());
    let next = client
        .lock(mutex.lock_timeout(PATIENCE))
        .expect("free after `at`");
    assert!(Instant::now() >= at, "free only from `at` on");
    next.unlock().expect("unlock");
}

/// An address with a wrong scheme, or a part that cannot be read, is refused before anything is
/// sent with a typed error that says what each deployment takes.
#[tokio::test]
async fn a_wrong_address_says_what_is_expected_there() {
    fn refused(result: fencelock::Result<Client>) -> (String, String, String) {
        match result {
            Err(e @ Error::InvalidAddress { .. }) => {
                assert!(e.is_bad_target() && !e.is_unavailable(), "{e:?}");
                let said = e.to_string();
                let Error::InvalidAddress {
                    of,
                    reason,
                    expected,
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(
                    said,
                    format!("invalid address of {of}: {reason}; expected {expected}")
                );
                (of.to_owned(), reason, expected.to_owned())
            }
            Err(other) => panic!("expected InvalidAddress, got {other:?}"),
            Ok(_) => panic!("a wrong address connected"),
        }
    }
    let options = ClientOptions::default;
    let connect = |deployment: fencelock::Result<Deployment>| async move {
        Client::connect_with_options(deployment?, options()).await
    };

    let (of, reason, expected) = refused(Client::connect("http://db:6379").await);
    assert_eq!(of, "the Redis server");
    assert_eq!(reason, "not a URL with a scheme Redis takes");
    assert!(expected.starts_with("redis://[user:password@]host[:port][/db], rediss://"));
    let (_, reason, _) = refused(Client::connect("redis://db:6379/zero").await);
    assert!(reason.contains("database"), "{reason}");

    let (of, _, expected) =
        refused(connect(Deployment::redlock(["redis://a", "tcp://b", "redis://c"])).await);
    assert_eq!(of, "a RedLock master");
    assert!(expected.starts_with("redis://[user:password@]host[:port][/db]"));

    let (of, _, expected) = refused(connect(Deployment::cluster(["localhost:7000"])).await);
    assert_eq!(of, "a cluster node");
    assert!(expected.contains("not a unix socket"), "{expected}");
    let unix = connect(Deployment::cluster(["redis+unix:///tmp/redis.sock"]));
    let (of, reason, _) = refused(unix.await);
    assert_eq!(of, "a cluster node");
    assert!(reason.contains("unix socket"), "{reason}");

    let (of, _, expected) =
        refused(connect(Deployment::sentinel(["sentinel://s1:26379"], "orders")).await);
    assert_eq!(of, "a sentinel");
    assert!(expected.contains("26379"), "{expected}");
}
