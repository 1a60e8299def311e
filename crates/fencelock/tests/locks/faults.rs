//! Bad input and faults, one test per row of the table in `docs/faults.md`: each gets a typed
//! error or a defined behaviour, never a panic, never a lock held past its lease, never a lock
//! released by someone who does not own it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, client, client_with, eventually, ms};
use fencelock::{ClientOptions, DeploymentWarning, Error, Lease, LockOptions, Lost, MIN_LEASE};
use fencelock_testkit::{Proxy, RedisServer, ServerOptions};

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

fn is_invalid_lease<T>(result: fencelock::Result<T>) -> bool {
    matches!(result, Err(Error::InvalidOption { option, .. }) if option == "lease" || option == "default_lease")
}

#[tokio::test]
async fn f01_an_empty_name_is_an_invalid_name() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert!(matches!(c.mutex(""), Err(Error::InvalidName { .. })));
    assert!(matches!(c.rwlock(b""), Err(Error::InvalidName { .. })));
    assert!(matches!(c.semaphore("", 1), Err(Error::InvalidName { .. })));
}

#[tokio::test]
async fn f02_a_one_megabyte_name_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let before = common::command_calls(&server, "evalsha");
    let huge = vec![b'n'; 1 << 20];
    assert!(matches!(c.mutex(&huge), Err(Error::InvalidName { .. })));
    assert!(matches!(
        c.fair_mutex(&huge),
        Err(Error::InvalidName { .. })
    ));
    assert_eq!(common::command_calls(&server, "evalsha"), before);
}

#[tokio::test]
async fn f03_binary_unicode_and_brace_names_are_distinct_locks() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let names: [&[u8]; 7] = [
        b"a",
        b"{a}",
        b"a}",
        b"%7Ba%7D",
        b"\x00\xff\r\n",
        "ключ/🔒".as_bytes(),
        b"*?[",
    ];
    let mut guards = Vec::new();
    for name in names {
        guards.push(
            a.mutex(name)
                .expect("name")
                .try_lock()
                .await
                .expect("each its own lock"),
        );
    }
    for name in names {
        assert!(matches!(
            b.mutex(name).expect("name").try_lock().await,
            Err(Error::Held { .. })
        ));
    }
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn f04_a_zero_lease_is_an_invalid_option() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert!(is_invalid_lease(
        c.mutex_with_options("x", fixed(Duration::ZERO))
    ));
    assert!(is_invalid_lease(
        c.mutex_with_options("x", renewed(Duration::ZERO))
    ));
    let guard = c.mutex("x").expect("name").lock().await.expect("lock");
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(guard.is_held(), "a refused extension changes nothing");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f06_an_overflowing_lease_is_an_invalid_option() {
    let server = RedisServer::start();
    let c = client(&server).await;
    for lease in [Duration::MAX, fencelock::MAX_LEASE + ms(1)] {
        assert!(
            is_invalid_lease(c.mutex_with_options("x", fixed(lease))),
            "{lease:?}"
        );
        assert!(
            is_invalid_lease(c.mutex_with_options("x", renewed(lease))),
            "{lease:?}"
        );
    }
    let options = ClientOptions::default().default_lease(Lease::Renewed(Duration::MAX));
    let refused = fencelock::Client::connect_with_options(server.url().as_str(), options).await;
    assert!(matches!(refused, Err(Error::InvalidOption { .. })));
    let guard = c.mutex("x").expect("name").lock().await.expect("lock");
    assert!(matches!(
        guard.extend(Duration::MAX).await,
        Err(Error::InvalidOption { .. })
    ));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f07_a_name_holding_another_type_is_a_wrong_type_error_and_left_alone() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["RPUSH", "fencelock:{queue}:mutex", "job-1"]);
    let err = c
        .mutex("queue")
        .expect("name")
        .try_lock()
        .await
        .expect_err("a list");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    server.cli(&["SET", "fencelock:{queue}:sem", "not a hash"]);
    let err = c
        .semaphore("queue", 2)
        .expect("name")
        .try_acquire()
        .await
        .expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cli(&["LRANGE", "fencelock:{queue}:mutex", "0", "-1"]),
        "job-1"
    );
    assert_eq!(server.cli(&["GET", "fencelock:{queue}:sem"]), "not a hash");
}

#[tokio::test]
async fn f08_a_grant_released_by_force_then_unlocked_is_not_held() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = a.mutex("twice").expect("name").lock().await.expect("lock");
    assert_eq!(a.force_unlock("twice").await.expect("force").len(), 1);
    let next = b
        .mutex("twice")
        .expect("name")
        .try_lock()
        .await
        .expect("free");
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        next.is_held(),
        "the second release left the new owner alone"
    );
    next.unlock().await.expect("the new owner still holds it");
}

/// A guard of `a` on "late" whose 200 ms lease ran out, and the grant `b` took after it with
/// a fixed lease of 5 s.
async fn expired_and_retaken(
    a: &fencelock::Client,
    b: &fencelock::Client,
) -> (fencelock::MutexGuard, fencelock::MutexGuard) {
    let guard = a
        .mutex_with_options("late", fixed(ms(200)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(300)).await;
    assert!(!guard.is_held(), "past its deadline");
    let next = b
        .mutex_with_options("late", fixed(ms(5_000)))
        .expect("name")
        .try_lock()
        .await
        .expect("expired");
    (guard, next)
}

#[tokio::test]
async fn f09_unlock_after_expiry_is_not_held_and_spares_the_next_owner() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let (guard, next) = expired_and_retaken(&a, &b).await;
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(server.cli(&["EXISTS", "fencelock:{late}:mutex"]), "1");
    next.unlock().await.expect("the new owner still holds it");
}

#[tokio::test]
async fn f10_extend_after_expiry_is_not_held_and_spares_the_next_owner() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let (guard, next) = expired_and_retaken(&a, &b).await;
    assert!(matches!(
        guard.extend(ms(60_000)).await,
        Err(Error::NotHeld { .. })
    ));
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{late}:mutex"])
        .parse()
        .expect("PTTL");
    assert!(
        pttl <= 5_000,
        "the new owner's lease was not stretched: {pttl}"
    );
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f11_redis_down_at_start_is_an_unavailable_error() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill9();
    let started = Instant::now();
    let err = fencelock::Client::connect(url.as_str())
        .await
        .expect_err("down");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn f12_a_restart_without_persistence_revokes_held_locks_and_fences_keep_rising() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .mutex_with_options("restart", renewed(ms(600)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let fence = guard.fence();
    server.restart();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost fires");
    assert_eq!(lost, Lost::Revoked, "the new server does not hold it");
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    let next = c
        .mutex("restart")
        .expect("name")
        .lock()
        .await
        .expect("lock after the restart");
    assert!(
        next.fence() > fence,
        "fences rise across a restart without persistence"
    );
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f13_script_flush_mid_run_is_transparent() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .mutex_with_options("flush", renewed(ms(600)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.script_flush();
    tokio::time::sleep(ms(700)).await;
    assert!(guard.is_held(), "renewal reloaded its script");
    server.script_flush();
    guard.unlock().await.expect("release reloaded its script");
    server.script_flush();
    c.mutex("flush")
        .expect("name")
        .try_lock()
        .await
        .expect("acquire too")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f14_client_kill_mid_acquire_is_survived() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let guard = a.mutex("killed").expect("name").lock().await.expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.mutex("killed")
                .expect("name")
                .lock_timeout(Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(ms(200)).await;
    assert!(server.client_kill(&["TYPE", "normal"]) >= 1);
    assert!(server.client_kill(&["TYPE", "pubsub"]) >= 1);
    tokio::time::sleep(ms(200)).await;
    let _ = guard.unlock().await;
    let taken = waiter
        .await
        .expect("task")
        .expect("the waiter gets it after reconnecting");
    taken.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f15_a_reply_timeout_is_a_timeout_error_and_the_lease_is_not_overstayed() {
    let server = RedisServer::start();
    let options = ClientOptions::default().response_timeout(ms(300));
    let c = client_with(&server, options).await;
    let guard = c
        .mutex_with_options("paused", renewed(ms(900)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.pause();
    let started = Instant::now();
    let err = c
        .mutex("other")
        .expect("name")
        .try_lock()
        .await
        .expect_err("paused");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the response timeout"
    );
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    let deadline = guard.valid_until();
    server.resume();
    assert_eq!(lost.expect("lost fires"), Lost::Expired);
    assert!(std::time::Instant::now() >= deadline || !guard.is_held());
    assert!(
        !guard.is_held(),
        "not held past the lease it could not renew"
    );
}

#[tokio::test]
async fn f16_maxclients_reached_is_a_typed_error() {
    let server = RedisServer::start_with(ServerOptions::default().args(["--maxclients", "4"]));
    let redis = redis::Client::open(server.url().as_str()).expect("url");
    let mut held = Vec::new();
    for _ in 0..4 {
        if let Ok(conn) = redis.get_multiplexed_async_connection().await {
            held.push(conn);
        }
    }
    let options = ClientOptions::default().connection_timeout(Duration::from_secs(2));
    let started = Instant::now();
    match fencelock::Client::connect_with_options(server.url().as_str(), options).await {
        // The server answers with an error and closes at once: the client may read either.
        Err(e @ Error::Redis(_)) => assert!(
            e.is_unavailable() || e.to_string().contains("max number of clients"),
            "{e:?}"
        ),
        other => panic!("expected the server's refusal, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(held);
}

#[tokio::test]
async fn f17_out_of_memory_refuses_new_grants_and_still_releases() {
    let server = RedisServer::start_with(
        ServerOptions::default().args(["--maxmemory-policy", "noeviction"]),
    );
    let c = client(&server).await;
    let guard = c
        .mutex_with_options("held", renewed(ms(600)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    match c.mutex("new").expect("name").try_lock().await {
        // Redis 7 passes the script's OOM on as the error code; 6.2 wraps it in an ERR.
        Err(Error::Redis(e)) => assert!(
            e.code() == Some("OOM") || e.to_string().contains("-OOM command not allowed"),
            "{e}"
        ),
        other => panic!("expected OOM, got {other:?}"),
    }
    assert_eq!(
        server.cli(&["EXISTS", "fencelock:{new}:mutex"]),
        "0",
        "nothing half-granted"
    );
    tokio::time::sleep(ms(700)).await;
    assert!(guard.is_held(), "renewal is not refused for memory");
    guard
        .unlock()
        .await
        .expect("releasing frees memory and is allowed");
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
}

#[tokio::test]
async fn f18_an_evicting_memory_policy_is_reported() {
    let evicting = RedisServer::start_with(ServerOptions::default().args([
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]));
    let warnings = client(&evicting)
        .await
        .deployment_warnings()
        .await
        .expect("read");
    assert!(
        warnings.contains(&DeploymentWarning::EvictsLockKeys {
            policy: "allkeys-lru".into()
        }),
        "{warnings:?}"
    );
    assert!(
        warnings.contains(&DeploymentWarning::NoAppendOnlyFile),
        "{warnings:?}"
    );
    let safe = RedisServer::start_with(ServerOptions::default().aof_always().args([
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "noeviction",
    ]));
    let warnings = client(&safe)
        .await
        .deployment_warnings()
        .await
        .expect("read");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[tokio::test]
async fn f20_a_shutdown_redis_does_not_answer_reports_the_releases_it_gave_up() {
    let server = RedisServer::start();
    let options = ClientOptions::default().shutdown_timeout(ms(300));
    let c = client_with(&server, options).await;
    let guard = c
        .mutex_with_options("unanswered", fixed(ms(3000)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.pause();
    let started = Instant::now();
    let outcome = c.shutdown().await;
    let waited = started.elapsed();
    server.resume();
    assert!(
        matches!(outcome, Err(Error::ShutdownIncomplete { unanswered: 1 })),
        "{outcome:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "bounded by the shutdown timeout, waited {waited:?}"
    );
    assert!(!guard.is_held(), "a guard never outlives its shutdown");
    assert!(matches!(guard.unlock().await, Err(Error::Shutdown)));
    let other = client(&server).await;
    let mutex = other.mutex("unanswered").expect("name");
    let free = mutex.lock_timeout(Duration::from_secs(10)).await;
    free.expect("free by the end of its lease")
        .unlock()
        .await
        .expect("unlock");
}

/// Takes `server` down with `SIGKILL` for `down`, then starts it again on the same port, off
/// the runtime's threads; returns it once it answers again.
async fn down_for(mut server: RedisServer, down: Duration) -> RedisServer {
    tokio::task::spawn_blocking(move || {
        server.kill9();
        std::thread::sleep(down);
        server.restart();
        server
    })
    .await
    .expect("the outage's thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f22_a_waiter_rides_out_redis_down_for_two_seconds() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let holder = a.mutex("blip").expect("name").lock().await.expect("lock");
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let taken = b
            .mutex("blip")
            .expect("name")
            .lock_timeout(Duration::from_secs(10))
            .await;
        (taken, started.elapsed())
    });
    tokio::time::sleep(ms(300)).await;
    let _server = down_for(server, Duration::from_secs(2)).await;
    let (taken, waited) = waiter.await.expect("task");
    let taken = taken.expect("the waiter gets the lock once Redis is back");
    assert!(
        waited >= Duration::from_secs(2),
        "not before Redis returned"
    );
    // The restarted server holds nothing of the holder's: the lock went to the waiter.
    assert_eq!(holder.lost().await, Lost::Revoked);
    taken.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f22_a_waiter_rides_out_redis_paused_for_two_seconds() {
    let server = RedisServer::start();
    // Short reply timeouts: each send fails fast, so the few resends of one request end well
    // inside the pause.
    let options = || ClientOptions::default().response_timeout(ms(300));
    let (a, b) = (
        client_with(&server, options()).await,
        client_with(&server, options()).await,
    );
    let holder = a.mutex("paused").expect("name").lock().await.expect("lock");
    let waiter = tokio::spawn(async move {
        b.mutex("paused")
            .expect("name")
            .lock_timeout(Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(ms(300)).await;
    server.pause();
    tokio::time::sleep(ms(2000)).await;
    server.resume();
    assert!(!waiter.is_finished(), "the waiter waited through the pause");
    holder
        .unlock()
        .await
        .expect("the holder releases after the pause");
    let taken = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock after the pause");
    taken.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f22_an_outage_past_the_wait_limit_reports_the_last_error_at_the_limit() {
    let mut server = RedisServer::start();
    let options = ClientOptions::default().outage_limit(ms(800));
    let c = client_with(&server, options).await;
    server.kill9();
    let mutex = c.mutex("gone").expect("name");
    let started = Instant::now();
    let err = mutex
        .lock_timeout(ms(1500))
        .await
        .expect_err("Redis stays down");
    let waited = started.elapsed();
    assert!(
        err.is_unavailable(),
        "the last error, not a timeout: {err:?}"
    );
    assert!(waited >= ms(1400), "retried until the limit: {waited:?}");
    assert!(waited < Duration::from_secs(8), "then gave up: {waited:?}");

    let started = Instant::now();
    let err = mutex.lock().await.expect_err("Redis stays down");
    let waited = started.elapsed();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        waited >= ms(700),
        "lock() retries for the outage limit: {waited:?}"
    );
    assert!(waited < Duration::from_secs(8), "then gives up: {waited:?}");

    let started = Instant::now();
    let err = mutex.try_lock().await.expect_err("Redis stays down");
    eprintln!("TRY_LOCK took {:?}: {err}", started.elapsed());
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        started.elapsed() < ms(700),
        "try_lock does not wait through an outage"
    );
}

/// A client of `server` through a proxy that can cut its connections one by one: its command
/// connection is number 0, and its pub/sub connection, which it opens in the background as it
/// is made, number 1. Returns once both are open.
async fn client_behind_proxy(
    server: &RedisServer,
    options: ClientOptions,
) -> (fencelock::Client, Proxy) {
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into());
    let c = fencelock::Client::connect_with_options(proxy.url().as_str(), options)
        .await
        .expect("connect through the proxy");
    let both_open = eventually(Duration::from_secs(10), || proxy.accepted() >= 2).await;
    assert!(both_open, "the pub/sub connection opened with the client");
    assert_eq!(
        proxy.accepted(),
        2,
        "one command and one pub/sub connection"
    );
    (c, proxy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_contended_wait_opens_no_connection() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let (waiter, proxy) = client_behind_proxy(&server, options).await;
    let took = handoff(&holder, &waiter, "first-wait", ms(500)).await;
    assert!(took < Duration::from_secs(2), "announced: {took:?}");
    assert_eq!(
        proxy.accepted(),
        2,
        "the wait subscribed on the connection opened with the client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f35_a_client_whose_pub_sub_connection_cannot_open_still_locks() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into());
    // Every connection after the command connection hangs: the one opened with the client
    // and each one a subscription tries after it.
    for connection in 1..1000 {
        proxy.set_cut_connection(connection, true);
    }
    let options = ClientOptions::default()
        .wake_fallback(ms(300))
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1));
    let started = Instant::now();
    let waiter = fencelock::Client::connect_with_options(proxy.url().as_str(), options)
        .await
        .expect("made without its pub/sub connection");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the client is made without waiting for its pub/sub connection"
    );
    let took = handoff(&holder, &waiter, "no-pub-sub", ms(300)).await;
    assert!(
        took < Duration::from_secs(10),
        "the waiter's fallback timer took it: {took:?}"
    );
    assert!(proxy.accepted() >= 2, "a pub/sub connection was tried");
}

/// How long after `holder` releases `name` the waiting `waiter` holds it. The waiter is given
/// `settle` to subscribe (or find it cannot) before the release.
async fn handoff(
    holder: &fencelock::Client,
    waiter: &fencelock::Client,
    name: &'static str,
    settle: Duration,
) -> Duration {
    let held = holder
        .mutex(name)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let guard = waiter
                .mutex(name)
                .expect("name")
                .lock_timeout(Duration::from_secs(30))
                .await
                .expect("the waiter gets the lock");
            let at = Instant::now();
            guard.unlock().await.expect("unlock");
            at
        })
    };
    tokio::time::sleep(settle).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let taken = waiting.await.expect("task");
    taken.saturating_duration_since(released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f23_a_silent_pub_sub_connection_is_replaced_and_handoffs_stay_prompt() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    // A long fallback: only a release announcement hands the lock over promptly.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let (waiter, proxy) = client_behind_proxy(&server, options).await;
    let warm = handoff(&holder, &waiter, "warm-up", ms(500)).await;
    assert!(warm < Duration::from_secs(2), "announced: {warm:?}");
    assert_eq!(proxy.accepted(), 2, "the pub/sub connection opened");
    proxy.set_cut_connection(1, true);
    // Each new name subscribes: the first on the silent connection, which is given up after
    // a response timeout (1 s) and replaced; the settle time covers that with room to spare.
    for name in ["after-cut-1", "after-cut-2", "after-cut-3"] {
        let took = handoff(&holder, &waiter, name, ms(2500)).await;
        assert!(
            took < Duration::from_secs(2),
            "{name}: handed over {took:?} after the release, not on the fallback timer"
        );
    }
    assert!(proxy.accepted() >= 3, "a new pub/sub connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f23_a_quiet_silent_pub_sub_connection_is_noticed_and_replaced() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let options = ClientOptions::default()
        .wake_fallback(ms(500))
        .response_timeout(ms(500));
    let (waiter, proxy) = client_behind_proxy(&server, options).await;
    let held = holder
        .mutex("quiet")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .mutex("quiet")
                .expect("name")
                .lock_timeout(Duration::from_secs(30))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.accepted() < 2 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(ms(20)).await;
    }
    // A connection that answers its checks is kept.
    tokio::time::sleep(ms(1500)).await;
    assert_eq!(
        proxy.accepted(),
        2,
        "a live pub/sub connection was replaced"
    );
    // Nothing more is subscribed: only a check of the quiet connection can find it silent.
    proxy.set_cut_connection(1, true);
    let deadline = Instant::now() + Duration::from_secs(8);
    while proxy.accepted() < 3 {
        assert!(
            Instant::now() < deadline,
            "the silent pub/sub connection was never replaced"
        );
        tokio::time::sleep(ms(20)).await;
    }
    held.unlock().await.expect("unlock");
    let taken = waiting
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    taken.unlock().await.expect("unlock");
}

#[tokio::test]
async fn f24_a_missing_password_is_an_auth_failure_when_the_client_is_made() {
    let server = RedisServer::start_with(ServerOptions::default().password("s3cret"));
    let err = fencelock::Client::connect(server.url().as_str())
        .await
        .expect_err("no password");
    assert!(err.is_auth_failure(), "{err:?}");
    let with_it = server.url_with_auth(None, "s3cret");
    let c = fencelock::Client::connect(with_it.as_str())
        .await
        .expect("the password");
    let guard = c.mutex("m").expect("name").try_lock().await.expect("lock");
    guard.unlock().await.expect("unlock");
    // RedLock: one master asking for a password is enough, even with another one down.
    let mut down = RedisServer::start();
    let open = RedisServer::start();
    let masters = [server.url(), open.url(), down.url()];
    down.kill9();
    let err =
        fencelock::Client::connect(fencelock::Deployment::redlock(masters).expect("addresses"))
            .await
            .expect_err("no password for one master");
    assert!(err.is_auth_failure(), "{err:?}");
}

#[tokio::test]
async fn f25_an_unlock_refused_for_waiters_keys_of_another_type_leaves_the_lock_held() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .mutex_with_options("jobs", fixed(ms(60_000)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    // A waiter that gave up: the value is marked, so the unlock looks for waiters.
    let waiter = c
        .mutex_with_options("jobs", LockOptions::default().wait_timeout(ms(300)))
        .expect("name")
        .lock()
        .await;
    assert!(matches!(waiter, Err(Error::Timeout { .. })), "{waiter:?}");
    let held = server.cli(&["GET", "fencelock:{jobs}:mutex"]);
    server.cli(&["SET", "fencelock:{jobs}:mutex-waiters", "not a zset"]);
    let err = guard.unlock().await.expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cli(&["GET", "fencelock:{jobs}:mutex"]),
        held,
        "an unlock that failed released nothing"
    );
    assert_eq!(
        server.cli(&["GET", "fencelock:{jobs}:mutex-waiters"]),
        "not a zset"
    );
}

#[tokio::test]
async fn f26_the_shortest_renewed_leases_are_kept_while_their_guards_live() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut guards = Vec::new();
    for i in 0..5 {
        let mutex = c
            .mutex_with_options(format!("short-{i}"), renewed(MIN_LEASE))
            .expect("name");
        guards.push(mutex.lock().await.expect("lock"));
    }
    // Some 45 renewals of each lease.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for (i, guard) in guards.iter().enumerate() {
            assert!(guard.is_held(), "lease {i} of {MIN_LEASE:?} was lost");
        }
        tokio::time::sleep(ms(20)).await;
    }
    for guard in guards {
        guard.unlock().await.expect("held throughout");
    }
}

#[tokio::test]
async fn f27_keeping_a_lock_whose_lease_ended_is_not_held_and_spares_the_new_owner() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let options = fixed(ms(200));
    let stale = a
        .mutex_with_options("taken-over", options)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(400)).await;
    let owner = b
        .mutex_with_options("taken-over", fixed(ms(3000)))
        .expect("name")
        .try_lock()
        .await
        .expect("free after the stale lease");
    let kept = stale
        .unlock_no_earlier_than(Instant::now() + Duration::from_secs(60))
        .await;
    assert!(matches!(kept, Err(Error::NotHeld { .. })), "{kept:?}");
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{taken-over}:mutex"])
        .trim()
        .parse()
        .expect("pttl");
    assert!(
        (1..=3000).contains(&pttl),
        "the owner's lease is untouched: {pttl}"
    );
    owner.unlock().await.expect("the owner still holds it");
}

#[tokio::test]
async fn f28_work_under_using_is_stopped_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let options = fixed(ms(300));
    let mutex = c.mutex_with_options("short", options).expect("name");
    let finished = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        mutex.using(|_| {
            let finished = Arc::clone(&finished);
            async move {
                tokio::time::sleep(Duration::from_secs(20)).await;
                finished.store(true, Ordering::SeqCst);
            }
        }),
    )
    .await
    .expect("stopped well before the work's end");
    assert!(matches!(outcome, Err(Error::NotHeld { .. })), "{outcome:?}");
    assert!(!finished.load(Ordering::SeqCst), "the work was dropped");
    assert!(started.elapsed() >= ms(250), "not before the lease ran out");

    let renewed = renewed(ms(600));
    let mutex = c.mutex_with_options("taken", renewed).expect("name");
    let guard = mutex.lock().await.expect("lock");
    server.cli(&["DEL", "fencelock:{taken}:mutex"]);
    let stopped = tokio::time::timeout(
        Duration::from_secs(10),
        guard.using(|_| std::future::pending::<()>()),
    )
    .await
    .expect("renewal notices the deleted key within a lease");
    assert!(matches!(stopped, Err(Error::NotHeld { .. })), "{stopped:?}");
}
/// On the suite's servers (6.2 and later) this checks that connecting is allowed; run against
/// an older one (`FENCELOCK_SERVER_DIR` with a Redis 5 or 6.0 built from source) it checks the
/// refusal.
#[tokio::test]
async fn f29_a_server_older_than_redis_6_2_is_refused_at_connect() {
    let server = RedisServer::start();
    let version = fencelock_testkit::server_version();
    let too_old = version.starts_with("Redis") && fencelock_testkit::server_release() < (6, 2);
    match fencelock::Client::connect(server.url().as_str()).await {
        Err(Error::UnsupportedServer { server, oldest }) => {
            assert!(too_old, "{version} refused as {server}");
            assert_eq!(server, version, "names the server found");
            assert_eq!(oldest, "Redis 6.2");
        }
        Ok(_) => assert!(!too_old, "{version} accepted"),
        Err(other) => panic!("{version}: {other:?}"),
    }
}
