//! ForeignMutex against a real redis-server: the keys and values each layout writes (the
//! other library's, with no prefix of ours), owner-checked release and extension against a
//! holder of the other library (planted as that library writes it), python-redis-lock's
//! signal list and Redisson's unlock message both ways, waiting with a deadline, the lost
//! signal, the blocking API, and the options each layout refuses. The libraries themselves
//! take part in `tests/processes/peers.rs`.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, ms, published_during};
use fencelock::{ClientOptions, Error, Layout, Lease, LockOptions, Lost};
use fencelock_testkit::RedisServer;

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

/// Every key of the server.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server
        .cli(&["KEYS", "*"])
        .lines()
        .map(str::to_owned)
        .filter(|k| !k.is_empty())
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn each_layout_keeps_the_key_its_library_names_without_our_prefix() {
    let server = RedisServer::start();
    let c = client_with(&server, ClientOptions::default().prefix("app:")).await;
    for layout in Layout::ALL {
        let lock = c
            .foreign_mutex_with_options(layout, "jobs:nightly", renewed(Duration::from_secs(10)))
            .expect("name");
        let key = String::from_utf8(layout.key("jobs:nightly")).expect("text");
        assert_eq!(lock.key(), key.as_bytes());
        let guard = lock.lock().await.expect("lock");
        assert_eq!(guard.layout(), layout);
        assert_eq!(
            keys(&server),
            vec![key.clone()],
            "{layout}: one key, no prefix"
        );
        let pttl: u64 = server.cli(&["PTTL", &key]).parse().expect("an expiry");
        assert!(pttl > 9_000 && pttl <= 10_000, "{layout}: pttl {pttl}");
        if layout == Layout::Redisson {
            assert_eq!(server.cli(&["TYPE", &key]), "hash");
            let fields = server.cli(&["HGETALL", &key]);
            let lines: Vec<&str> = fields.lines().collect();
            let [field, count] = lines.as_slice() else {
                panic!("one holder's field: {fields:?}");
            };
            let (client_id, thread) = field.rsplit_once(':').expect("<client id>:<thread id>");
            assert!(
                !client_id.is_empty() && thread.parse::<u64>().is_ok(),
                "{field}"
            );
            assert_eq!(*count, "1", "entered once");
        } else {
            assert_eq!(server.cli(&["TYPE", &key]), "string");
            assert!(
                server.cli(&["GET", &key]).len() >= 16,
                "{layout}: a random token"
            );
        }
        guard.unlock().await.expect("unlock");
        let left = keys(&server);
        if layout == Layout::PythonRedisLock {
            assert_eq!(left, vec!["lock-signal:jobs:nightly".to_owned()]);
            server.cli(&["DEL", "lock-signal:jobs:nightly"]);
        } else {
            assert!(
                left.is_empty(),
                "{layout}: released, nothing left: {left:?}"
            );
        }
    }
}

#[tokio::test]
async fn another_library_s_holder_excludes_us_and_our_release_leaves_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // As redis-py's `Lock(r, "report", timeout=10).acquire()` writes it.
    server.cli(&["SET", "report", "9f1c2b6e0a", "PX", "10000", "NX"]);
    let lock = c.foreign_mutex(Layout::RedisPy, "report").expect("name");
    match lock.try_lock().await {
        Err(Error::Held { remaining, .. }) => {
            let left = remaining.expect("the peer's lock has an expiry");
            assert!(left > Duration::from_secs(9), "{left:?}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // A redis-py lock taken without a timeout has no expiry: held, for as long as unknown.
    server.cli(&["PERSIST", "report"]);
    assert!(matches!(
        lock.try_lock().await,
        Err(Error::Held {
            remaining: None,
            ..
        })
    ));
    server.cli(&["DEL", "report"]);

    // Ours, then taken over as a peer would after our lease ran out: our release and our
    // extension are refused, and leave the peer's value and expiry as they were.
    let guard = lock.lock().await.expect("lock");
    server.cli(&["SET", "report", "9f1c2b6e0a", "PX", "10000"]);
    assert!(matches!(
        guard.extend(Duration::from_secs(60)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(server.cli(&["GET", "report"]), "9f1c2b6e0a");
    let pttl: u64 = server.cli(&["PTTL", "report"]).parse().expect("an expiry");
    assert!(pttl <= 10_000, "our extension touched their expiry: {pttl}");
}

#[tokio::test]
async fn a_renewal_that_finds_the_key_taken_signals_the_loss() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for layout in [Layout::Pottery, Layout::PythonRedisLock, Layout::Redisson] {
        let lock = c
            .foreign_mutex_with_options(layout, "ledger", renewed(Duration::from_secs(1)))
            .expect("name");
        let guard = lock.lock().await.expect("lock");
        // Outlives its lease while renewed.
        tokio::time::sleep(ms(1300)).await;
        assert!(guard.is_held(), "{layout}: renewed");
        let key = String::from_utf8(layout.key("ledger")).expect("text");
        server.cli(&["DEL", &key]);
        let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{layout}: the loss was never noticed"));
        assert_eq!(lost, Lost::Revoked, "{layout}");
        assert!(!guard.is_held());
        server.cli(&["DEL", "lock-signal:ledger"]);
    }
}

#[tokio::test]
async fn a_wait_with_a_deadline_ends_in_a_timeout() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["SET", "redlock:printer", "uuid-of-pottery", "PX", "30000"]);
    let lock = c.foreign_mutex(Layout::Pottery, "printer").expect("name");
    let started = Instant::now();
    match lock.lock_timeout(ms(400)).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected Timeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited >= ms(400) && waited < ms(1500), "{waited:?}");
    // A release by the peer lets a waiter in within its poll interval.
    let polling = c
        .foreign_mutex_with_options(
            Layout::Pottery,
            "printer",
            LockOptions::default().poll_interval(ms(50)),
        )
        .expect("name");
    let waiter = tokio::spawn(async move { polling.lock_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(ms(200)).await;
    let released = Instant::now();
    server.cli(&["DEL", "redlock:printer"]);
    let guard = waiter.await.expect("task").expect("in after the release");
    assert!(released.elapsed() < ms(1000), "{:?}", released.elapsed());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn our_python_redis_lock_release_signals_one_waiter() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .foreign_mutex_with_options(
            Layout::PythonRedisLock,
            "reports",
            renewed(Duration::from_secs(5)),
        )
        .expect("name");
    let guard = lock.lock().await.expect("lock");
    let pttl: u64 = server.cli(&["PTTL", "lock:reports"]).parse().expect("ttl");
    assert!(pttl > 4_000 && pttl <= 5_000, "{pttl}");
    guard.unlock().await.expect("unlock");
    // One element, for one waiter's BLPOP, which lives a second.
    assert_eq!(server.cli(&["LLEN", "lock-signal:reports"]), "1");
    let pttl: u64 = server
        .cli(&["PTTL", "lock-signal:reports"])
        .parse()
        .expect("ttl");
    assert!(pttl <= 1000, "{pttl}");
    assert_eq!(
        server.cli(&["BLPOP", "lock-signal:reports", "1"]),
        "lock-signal:reports\n1"
    );
}

#[tokio::test]
async fn redisson_s_unlock_message_is_sent_and_heard() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.foreign_mutex(Layout::Redisson, "invoices").expect("name");
    let guard = lock.lock().await.expect("lock");
    let published = published_during(&server, "redisson_lock__channel:*", async {
        guard.unlock().await.expect("unlock");
    })
    .await;
    assert_eq!(
        published,
        vec![(
            "redisson_lock__channel:{invoices}".to_owned(),
            "0".to_owned()
        )]
    );

    // A Java holder, released as RedissonLock's unlock does (the hash deleted, 0 published):
    // our waiter, whose fallback is far longer than the test, is woken by the message alone.
    let waiting = client_with(
        &server,
        ClientOptions::default().wake_fallback(Duration::from_secs(60)),
    )
    .await;
    server.cli(&["HSET", "invoices", "b5f3e1a2-jvm:57", "1"]);
    server.cli(&["PEXPIRE", "invoices", "30000"]);
    let lock = waiting
        .foreign_mutex(Layout::Redisson, "invoices")
        .expect("name");
    let waiter = tokio::spawn(async move { lock.lock_timeout(Duration::from_secs(20)).await });
    tokio::time::sleep(ms(500)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    server.cli(&["DEL", "invoices"]);
    server.cli(&["PUBLISH", "redisson_lock__channel:{invoices}", "0"]);
    let guard = waiter.await.expect("task").expect("woken by the message");
    assert!(released.elapsed() < Duration::from_secs(5));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn the_options_a_layout_cannot_keep_are_refused() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // python-redis-lock keeps whole seconds.
    assert!(matches!(
        c.foreign_mutex_with_options(
            Layout::PythonRedisLock,
            "x",
            renewed(Duration::from_millis(1500))
        ),
        Err(Error::InvalidOption {
            option: "lease",
            ..
        })
    ));
    assert!(matches!(
        c.foreign_mutex_with_options(
            Layout::RedisPy,
            "x",
            LockOptions::default().poll_interval(Duration::ZERO)
        ),
        Err(Error::InvalidOption {
            option: "poll_interval",
            ..
        })
    ));
    // Names of bytes only where the library takes bytes.
    assert!(c.foreign_mutex(Layout::RedisPy, [0xff, 0x00]).is_ok());
    assert!(matches!(
        c.foreign_mutex(Layout::Redisson, [0xff, 0x00]),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        c.foreign_mutex(Layout::GoRedsync, ""),
        Err(Error::InvalidName { .. })
    ));
}

#[tokio::test]
async fn using_runs_the_work_under_the_lock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c
        .foreign_mutex(Layout::NodeRedlock, "exports")
        .expect("name");
    let seen = lock
        .using(|_| async { server.cli(&["EXISTS", "exports"]) })
        .await
        .expect("using");
    assert_eq!(seen, "1", "held while the work ran");
    assert_eq!(server.cli(&["EXISTS", "exports"]), "0", "released after");
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_api_takes_and_releases_a_foreign_lock() {
    let server = RedisServer::start();
    let c = fencelock::blocking::Client::connect(server.url().as_str()).expect("connect");
    let lock = c.foreign_mutex(Layout::Rslock, "nightly").expect("name");
    let guard = c.lock(lock.lock()).expect("lock");
    assert!(matches!(c.lock(lock.try_lock()), Err(Error::Held { .. })));
    assert_eq!(server.cli(&["EXISTS", "nightly"]), "1");
    guard.unlock().expect("unlock");
    assert_eq!(server.cli(&["EXISTS", "nightly"]), "0");
}
