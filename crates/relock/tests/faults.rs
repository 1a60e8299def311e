//! Bad input and faults, one test per row of the table in `docs/faults.md`: each gets a typed
//! error or a defined behaviour, never a panic, never a lock held past its lease, never a lock
//! released by someone who does not own it.

mod common;

use std::time::{Duration, Instant};

use common::{client, client_with, ms};
use relock::{ClientOptions, DeploymentWarning, Error, Lease, Lost, MutexOptions};
use relock_testkit::{RedisServer, ServerOptions};

fn fixed(lease: Duration) -> MutexOptions {
    MutexOptions::default().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> MutexOptions {
    MutexOptions::default().lease(Lease::Renewed(lease))
}

fn is_invalid_lease<T>(result: relock::Result<T>) -> bool {
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
    for lease in [Duration::MAX, relock::MAX_LEASE + ms(1)] {
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
    let refused = relock::Client::connect_with_options(server.url().as_str(), options).await;
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
    server.cli(&["RPUSH", "relock:{queue}:mutex", "job-1"]);
    let err = c
        .mutex("queue")
        .expect("name")
        .try_lock()
        .await
        .expect_err("a list");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    server.cli(&["SET", "relock:{queue}:sem", "not a hash"]);
    let err = c
        .semaphore("queue", 2)
        .expect("name")
        .try_acquire()
        .await
        .expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cli(&["LRANGE", "relock:{queue}:mutex", "0", "-1"]),
        "job-1"
    );
    assert_eq!(server.cli(&["GET", "relock:{queue}:sem"]), "not a hash");
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
    a: &relock::Client,
    b: &relock::Client,
) -> (relock::MutexGuard, relock::MutexGuard) {
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
    assert_eq!(server.cli(&["EXISTS", "relock:{late}:mutex"]), "1");
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
        .cli(&["PTTL", "relock:{late}:mutex"])
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
    let err = relock::Client::connect(url.as_str())
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
    match relock::Client::connect_with_options(server.url().as_str(), options).await {
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
        server.cli(&["EXISTS", "relock:{new}:mutex"]),
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

/// On the suite's servers (6.2 and later) this checks that connecting is allowed; run against
/// an older one (`RELOCK_SERVER_DIR` with a Redis 5 or 6.0 built from source) it checks the
/// refusal.
#[tokio::test]
async fn f19_a_server_older_than_redis_6_2_is_refused_at_connect() {
    let server = RedisServer::start();
    let version = relock_testkit::server_version();
    let too_old = version.starts_with("Redis") && relock_testkit::server_release() < (6, 2);
    match relock::Client::connect(server.url().as_str()).await {
        Err(Error::UnsupportedServer { server, oldest }) => {
            assert!(too_old, "{version} refused as {server}");
            assert_eq!(server, version, "names the server found");
            assert_eq!(oldest, "Redis 6.2");
        }
        Ok(_) => assert!(!too_old, "{version} accepted"),
        Err(other) => panic!("{version}: {other:?}"),
    }
}
