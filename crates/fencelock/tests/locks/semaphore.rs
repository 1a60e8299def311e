//! The Semaphore against a real redis-server: counts, many permits per grant, the total and
//! its changes at run time, leases and renewal, the lost signal, fencing, cancellation and
//! notified waiters.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, command_calls, ms};
use fencelock::{ClientOptions, Error, Lease, LockOptions, Lost, MIN_LEASE};
use fencelock_testkit::RedisServer;

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

fn is_over_total(result: &fencelock::Result<fencelock::SemaphorePermit>) -> bool {
    matches!(
        result,
        Err(Error::InvalidOption {
            option: "permits",
            ..
        })
    )
}

#[tokio::test]
async fn permits_are_counted_across_clients_and_grants() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let sa = a.semaphore("pool", 5).expect("name");
    let sb = b.semaphore("pool", 5).expect("name");
    let one = sa.acquire().await.expect("1 of 5");
    let three = sb.acquire_many(3).await.expect("3 more");
    assert_eq!((one.permits(), three.permits()), (1, 3));
    assert_eq!(sa.available().await.expect("available"), 1);
    match sb.try_acquire_many(2).await {
        Err(Error::Held { name, remaining }) => {
            assert_eq!(name, "pool");
            let left = remaining.expect("grants have expiries");
            assert!(left > Duration::from_secs(29) && left <= Duration::from_secs(30));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let last = sb.try_acquire().await.expect("the fifth permit");
    assert!(matches!(sa.try_acquire().await, Err(Error::Held { .. })));
    three.release().await.expect("release 3");
    assert_eq!(sb.available().await.expect("available"), 3);
    assert!(matches!(
        sa.try_acquire_many(4).await,
        Err(Error::Held { .. })
    ));
    let again = sa.try_acquire_many(3).await.expect("3 free again");
    for permit in [one, last, again] {
        permit.release().await.expect("release");
    }
    assert_eq!(sa.available().await.expect("available"), 5);
    assert_eq!(
        server.cli(&["HLEN", "fencelock:{pool}:sem"]),
        "1",
        "only the total is left"
    );
}

#[tokio::test]
async fn asking_for_more_than_the_total_fails_at_once() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("small", 3).expect("name");
    let start = Instant::now();
    let waited = tokio::time::timeout(ms(2000), sem.acquire_many(4))
        .await
        .expect("an error at once, not a wait");
    assert!(is_over_total(&waited), "{waited:?}");
    assert!(is_over_total(&sem.try_acquire_many(4).await));
    assert!(start.elapsed() < ms(500), "no wait: {:?}", start.elapsed());
    assert!(is_over_total(&sem.acquire_many(0).await));
    assert!(matches!(
        c.semaphore("small", 0),
        Err(Error::InvalidOption {
            option: "permits",
            ..
        })
    ));
    // The stored total rules, not the handle's: a handle made with 10 still may not take 4.
    let bigger = c.semaphore("small", 10).expect("name");
    let err = tokio::time::timeout(ms(2000), bigger.acquire_many(4))
        .await
        .expect("an error at once, not a wait")
        .expect_err("over the stored total");
    assert!(err.to_string().contains("whose total is 3"), "{err}");
    assert_eq!(bigger.permits().await.expect("permits"), 3);
    let all = bigger.acquire_many(3).await.expect("exactly the total");
    all.release().await.expect("release");
}

#[tokio::test]
async fn a_fixed_lease_gives_permits_back_when_it_ends() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c
        .semaphore_with_options("short", 2, fixed(ms(300)))
        .expect("name");
    let first = sem.acquire_many(2).await.expect("both");
    first.extend(ms(800)).await.expect("extend while held");
    tokio::time::sleep(ms(500)).await;
    assert!(first.is_held(), "the extension outlives the first lease");
    assert!(matches!(sem.try_acquire().await, Err(Error::Held { .. })));
    tokio::time::sleep(ms(400)).await;
    assert!(!first.is_held());
    assert_eq!(first.lost().await, Lost::Expired);
    let next = sem.try_acquire_many(2).await.expect("back after the lease");
    assert!(next.fence() > first.fence());
    assert!(matches!(
        first.extend(ms(500)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(first.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        sem.available().await.expect("available"),
        0,
        "the old grant took nothing back"
    );
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_release_after_the_lease_ended_reports_not_held() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c
        .semaphore_with_options("late", 2, fixed(ms(200)))
        .expect("name");
    let permit = sem.acquire().await.expect("acquire");
    let extended = sem.acquire().await.expect("acquire");
    tokio::time::sleep(ms(300)).await;
    // Nothing touched the semaphore since: the ended grants are still stored.
    assert_eq!(server.cli(&["HLEN", "fencelock:{late}:sem"]), "3");
    assert!(matches!(
        extended.extend(ms(5000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert_eq!(
        sem.available().await.expect("available"),
        2,
        "the late extension did not bring the grant back"
    );
    assert!(matches!(permit.release().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn renewal_keeps_permits_for_three_leases() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let rival = client(&server).await;
    let lease = ms(400);
    let permit = holder
        .semaphore_with_options("long", 3, renewed(lease))
        .expect("name")
        .acquire_many(3)
        .await
        .expect("all three");
    let rival = rival.semaphore("long", 3).expect("name");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(permit.is_held(), "renewal must keep the lease valid");
        assert!(
            matches!(rival.try_acquire().await, Err(Error::Held { .. })),
            "the permits must stay taken at {:?}",
            start.elapsed()
        );
        tokio::time::sleep(ms(50)).await;
    }
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{long}:sem"])
        .parse()
        .expect("pttl");
    assert!(pttl > 0, "the hash still has an expiry: {pttl}");
    permit
        .release()
        .await
        .expect("still held after three leases");
}

#[tokio::test]
async fn lost_fires_when_the_grants_are_deleted_behind_the_holder() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(600);
    let permit = c
        .semaphore_with_options("deleted", 2, renewed(lease))
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    server.cli(&["DEL", "fencelock:{deleted}:sem"]);
    let reason = tokio::time::timeout(lease * 2, permit.lost())
        .await
        .expect("lost must fire within the next renewal");
    assert_eq!(reason, Lost::Revoked);
    assert!(!permit.is_held());
    assert!(matches!(permit.release().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn grants_expire_by_the_servers_clock() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("clock", 2).expect("name");
    // Store grants directly: one that ended a millisecond ago by the server's clock, one that
    // ends in a minute. Only the second counts.
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().expect("TIME"));
    let now_ms = parts.next().expect("seconds") * 1000 + parts.next().expect("µs") / 1000;
    let ended = (now_ms - 1).to_string();
    let running = (now_ms + 60_000).to_string();
    server.cli(&[
        "HSET",
        "fencelock:{clock}:sem",
        "permits",
        "2",
        "AAAAAAAAAAAAAAAAAAAAAA:1",
        ended.as_str(),
        "BBBBBBBBBBBBBBBBBBBBBB:1",
        running.as_str(),
    ]);
    assert_eq!(sem.available().await.expect("available"), 1);
    let permit = sem
        .try_acquire()
        .await
        .expect("the ended grant is not counted");
    assert_eq!(
        server.cli(&[
            "HEXISTS",
            "fencelock:{clock}:sem",
            "AAAAAAAAAAAAAAAAAAAAAA:1"
        ]),
        "0",
        "the acquire deleted the ended grant"
    );
    assert!(matches!(sem.try_acquire().await, Err(Error::Held { .. })));
    permit.release().await.expect("release");
}

#[tokio::test]
async fn raising_the_total_wakes_waiters_and_lowering_takes_nothing_back() {
    let server = RedisServer::start();
    // A fallback this long would show in any wake-up that relied on it.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let c = client_with(&server, options.clone()).await;
    let other = client_with(&server, options).await;
    let sem = c.semaphore("elastic", 1).expect("name");
    let held = sem.acquire().await.expect("the only permit");
    let mut waiters = Vec::new();
    for i in 0..3 {
        let sem = if i % 2 == 0 {
            sem.clone()
        } else {
            other.semaphore("elastic", 1).expect("name")
        };
        waiters.push(tokio::spawn(async move { sem.acquire().await }));
    }
    tokio::time::sleep(ms(300)).await;
    let raised = Instant::now();
    sem.set_permits(4).await.expect("raise");
    let mut permits = Vec::new();
    for waiter in waiters {
        let permit = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken by the raise, not the 10 s fallback")
            .expect("task")
            .expect("acquire");
        permits.push(permit);
    }
    println!("3 waiters served {:?} after the raise", raised.elapsed());
    assert_eq!(sem.available().await.expect("available"), 0);

    // Lower to 2 with 4 held: nobody loses a permit, nobody new gets one.
    sem.set_permits(2).await.expect("lower");
    assert_eq!(sem.permits().await.expect("permits"), 2);
    assert_eq!(sem.available().await.expect("available"), 0);
    assert!(held.is_held() && permits.iter().all(|p| p.is_held()));
    held.release().await.expect("release");
    assert!(
        matches!(sem.try_acquire().await, Err(Error::Held { .. })),
        "3 held of 2"
    );
    let big = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire_many(2).await }
    });
    permits
        .pop()
        .expect("permit")
        .release()
        .await
        .expect("release");
    tokio::time::sleep(ms(100)).await;
    assert!(!big.is_finished(), "2 held of 2: no room for 2 more");
    permits
        .pop()
        .expect("permit")
        .release()
        .await
        .expect("release");
    permits
        .pop()
        .expect("permit")
        .release()
        .await
        .expect("release");
    let big = tokio::time::timeout(Duration::from_secs(2), big)
        .await
        .expect("woken by the releases")
        .expect("task")
        .expect("both permits");
    assert_eq!(big.permits(), 2);

    // A waiter for more than a lowered total fails instead of waiting forever.
    let hopeless = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire_many(2).await }
    });
    tokio::time::sleep(ms(200)).await;
    sem.set_permits(1)
        .await
        .expect("lower below the waiter's request");
    big.release().await.expect("release wakes the waiter");
    let result = tokio::time::timeout(Duration::from_secs(2), hopeless)
        .await
        .expect("the waiter's next attempt sees the lowered total")
        .expect("task");
    assert!(is_over_total(&result), "{result:?}");
}

#[tokio::test]
async fn each_release_wakes_waiters_without_the_fallback_timer() {
    let server = RedisServer::start();
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client_with(&server, options.clone()).await);
    }
    let lease = fixed(Duration::from_secs(30));
    let sem = clients[0]
        .semaphore_with_options("handoff", 2, lease.clone())
        .expect("name");
    let first = sem.acquire_many(2).await.expect("both permits");
    let mut waiters = Vec::new();
    for i in 0..12 {
        let sem = clients[i % 3]
            .semaphore_with_options("handoff", 2, lease.clone())
            .expect("name");
        waiters.push(tokio::spawn(async move {
            let permit = sem.acquire().await.expect("acquire");
            tokio::time::sleep(ms(5)).await;
            permit.release().await.expect("release");
        }));
    }
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    first.release().await.expect("release");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("every waiter is served well before the 10 s fallback")
            .expect("task");
    }
    println!(
        "12 waiters served {:?} after the first release",
        released.elapsed()
    );
    assert_eq!(sem.available().await.expect("available"), 2);
}

#[tokio::test]
async fn fences_strictly_increase_over_grants_expiries_and_deletes() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c
        .semaphore_with_options("fenced", 3, fixed(MIN_LEASE))
        .expect("name");
    let mut last = 0;
    for i in 0..300 {
        let permit = sem.acquire_many(1 + i % 3).await.expect("acquire");
        let fence = permit.fence().get();
        assert!(fence > last, "grant {i}: fence {fence} after {last}");
        last = fence;
        match i % 50 {
            0 => {
                tokio::time::sleep(MIN_LEASE + ms(10)).await;
                drop(permit);
            }
            1 => {
                server.cli(&["DEL", "fencelock:{fenced}:sem", "fencelock:{fenced}:fence"]);
                drop(permit);
            }
            _ => {
                let _ = permit.release().await;
            }
        }
    }
}

#[tokio::test]
async fn aborting_an_acquire_in_flight_takes_no_permit() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = a.semaphore("warm", 1).expect("name");
    warm.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    assert_eq!(warm.available().await.expect("available"), 1);
    server.pause();
    let sem = a.semaphore("in-flight", 2).expect("name");
    let aborted = tokio::time::timeout(ms(100), sem.acquire_many(2)).await;
    assert!(aborted.is_err());
    server.resume();
    // The grant happened after the abort; the background release gives it back long before
    // the 30 s lease would.
    let start = Instant::now();
    let all = b
        .semaphore("in-flight", 2)
        .expect("name")
        .acquire_many_timeout(2, Duration::from_secs(5))
        .await
        .expect("the aborted grant was given back");
    println!("free {:?} after the resume", start.elapsed());
    all.release().await.expect("release");
}

#[tokio::test]
async fn aborting_a_waiting_acquire_takes_no_permit() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("busy", 2).expect("name");
    let held = sem.acquire_many(2).await.expect("both");
    assert!(tokio::time::timeout(ms(200), sem.acquire()).await.is_err());
    assert!(matches!(
        sem.acquire_timeout(ms(200)).await,
        Err(Error::Timeout { .. })
    ));
    held.release().await.expect("release");
    tokio::time::sleep(ms(50)).await;
    assert_eq!(sem.available().await.expect("available"), 2);
}

#[tokio::test]
async fn a_dropped_permit_is_given_back_in_the_background() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("dropped", 1).expect("name");
    drop(sem.acquire().await.expect("acquire"));
    let again = sem
        .acquire_timeout(Duration::from_secs(2))
        .await
        .expect("given back by drop, not by its 30 s lease");
    again.release().await.expect("release");
}

#[tokio::test]
async fn an_idle_semaphore_leaves_no_keys_behind() {
    let server = RedisServer::start();
    let options = ClientOptions::default().fence_memory(ms(100));
    let c = client_with(&server, options).await;
    let sem = c
        .semaphore_with_options("idle", 2, fixed(ms(200)))
        .expect("name");
    sem.acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
    sem.set_permits(5).await.expect("set");
    std::mem::forget(sem.acquire().await.expect("acquire"));
    assert_ne!(server.cli(&["DBSIZE"]), "0");
    tokio::time::sleep(ms(450)).await;
    assert_eq!(server.cli(&["KEYS", "*"]), "", "every key expired");
    assert_eq!(
        sem.permits().await.expect("permits"),
        2,
        "the forgotten total falls back to the handle's"
    );
}

#[tokio::test]
async fn a_key_of_another_type_is_a_typed_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["SET", "fencelock:{typed}:sem", "x"]);
    let sem = c.semaphore("typed", 1).expect("name");
    assert!(matches!(
        sem.try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        sem.available().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        sem.set_permits(2).await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn one_script_call_per_acquire_and_release() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("cost", 3).expect("name");
    sem.acquire()
        .await
        .expect("warm")
        .release()
        .await
        .expect("warm");
    let before = command_calls(&server, "evalsha");
    for _ in 0..10 {
        let permit = sem.try_acquire_many(2).await.expect("acquire");
        permit.release().await.expect("release");
    }
    assert_eq!(command_calls(&server, "evalsha") - before, 20);
}
