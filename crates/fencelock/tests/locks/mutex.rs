//! The Mutex against a real redis-server: exclusion, leases, renewal, the lost signal,
//! fencing, owner checks, cancellation and notified hand-off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, client, client_with, command_calls, ms};
use fencelock::{ClientOptions, Error, Lease, LockOptions, Lost, MIN_LEASE};
use fencelock_testkit::RedisServer;

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

#[tokio::test]
async fn second_owner_is_refused_until_release() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.mutex("job").expect("name").lock().await.expect("lock");
    assert!(guard.is_held());
    match b.mutex("job").expect("name").try_lock().await {
        Err(Error::Held { name, remaining }) => {
            assert_eq!(name, "job");
            let left = remaining.expect("the lease has an expiry");
            assert!(left > Duration::from_secs(29) && left <= Duration::from_secs(30));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    guard.unlock().await.expect("unlock");
    let again = b
        .mutex("job")
        .expect("name")
        .try_lock()
        .await
        .expect("free now");
    again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn fixed_lease_expires_and_extend_moves_it() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c.mutex_with_options("short", fixed(ms(300))).expect("name");
    let guard = mutex.lock().await.expect("lock");
    guard.extend(ms(1500)).await.expect("extend while held");
    tokio::time::sleep(ms(600)).await;
    assert!(guard.is_held(), "extension must outlive the first lease");
    assert!(matches!(mutex.try_lock().await, Err(Error::Held { .. })));
    tokio::time::sleep(ms(1100)).await;
    assert!(!guard.is_held(), "past the extended lease");
    assert_eq!(guard.lost().await, Lost::Expired);
    let next = mutex.try_lock().await.expect("free after the lease");
    assert!(next.fence() > guard.fence());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn renewal_keeps_the_lock_for_three_leases() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let rival = client(&server).await;
    let lease = ms(400);
    let guard = holder
        .mutex_with_options("long-job", renewed(lease))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let rival = rival.mutex("long-job").expect("name");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(guard.is_held(), "renewal must keep the lease valid");
        assert!(
            matches!(rival.try_lock().await, Err(Error::Held { .. })),
            "the lock must stay taken at {:?}",
            start.elapsed()
        );
        tokio::time::sleep(ms(50)).await;
    }
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{long-job}:mutex"])
        .parse()
        .expect("pttl");
    assert!(pttl > 0, "key still has a lease: {pttl}");
    guard.unlock().await.expect("still ours after three leases");
}

#[tokio::test]
async fn lost_fires_when_the_key_is_deleted_behind_the_holder() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(600);
    let guard = c
        .mutex_with_options("deleted", renewed(lease))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.cli(&["DEL", "fencelock:{deleted}:mutex"]);
    let deleted_at = Instant::now();
    let reason = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost must fire within the next renewal");
    println!("lost after delete: {:?}", deleted_at.elapsed());
    assert_eq!(reason, Lost::Revoked);
    assert!(!guard.is_held());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn lost_fires_when_redis_is_paused_past_the_lease() {
    let server = RedisServer::start();
    let options = ClientOptions::default().response_timeout(ms(150));
    let c = client_with(&server, options).await;
    let lease = ms(600);
    let guard = c
        .mutex_with_options("paused", renewed(lease))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.pause();
    let paused_at = Instant::now();
    let reason = tokio::time::timeout(lease * 3, guard.lost()).await;
    let after = paused_at.elapsed();
    let held = guard.is_held();
    server.resume();
    let reason = reason.expect("lost must fire while Redis is paused");
    println!("lost after pause: {after:?}");
    assert_eq!(reason, Lost::Expired);
    assert!(!held);
    assert!(after <= lease, "the validity deadline is within one lease");
    // The key may still be ours after the resume; either answer is fine, but no panic.
    let _ = guard.unlock().await;
}

#[tokio::test]
async fn fences_strictly_increase_over_1000_grants_with_expiries_and_deletes() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .mutex_with_options("fenced", fixed(MIN_LEASE))
        .expect("name");
    let mut last = 0;
    for i in 0..1000 {
        let guard = mutex.lock().await.expect("lock");
        let fence = guard.fence().get();
        assert!(fence > last, "grant {i}: fence {fence} after {last}");
        last = fence;
        match i % 100 {
            // Let the lease run out instead of releasing.
            0 => {
                tokio::time::sleep(MIN_LEASE + ms(10)).await;
                drop(guard);
            }
            // Delete the lock, and with it the remembered fence, behind the client's back.
            1 => {
                server.cli(&["DEL", "fencelock:{fenced}:mutex"]);
                drop(guard);
            }
            // Lose every key of the server.
            2 => {
                server.cli(&["FLUSHALL"]);
                drop(guard);
            }
            _ => {
                let _ = guard.unlock().await;
            }
        }
    }
}

#[tokio::test]
async fn a_former_owner_cannot_release_or_extend_the_new_owners_lock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let old = a
        .mutex_with_options("handover", fixed(ms(200)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(300)).await;
    let new = b
        .mutex_with_options("handover", fixed(ms(5000)))
        .expect("name")
        .lock()
        .await
        .expect("free after the lease");
    let value_before = server.cli(&["GET", "fencelock:{handover}:mutex"]);
    assert!(matches!(
        old.extend(ms(60_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        server.cli(&["GET", "fencelock:{handover}:mutex"]),
        value_before
    );
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{handover}:mutex"])
        .parse()
        .expect("pttl");
    assert!(
        pttl <= 5000,
        "the old owner's extend must not touch it: {pttl}"
    );
    assert!(new.is_held());
    new.unlock().await.expect("the new owner releases");
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c
        .mutex_with_options("flushed", renewed(ms(300)))
        .expect("name");
    let guard = mutex.lock().await.expect("lock");
    server.script_flush();
    // Renewal runs a flushed script too.
    tokio::time::sleep(ms(700)).await;
    assert!(guard.is_held(), "renewal recovered from NOSCRIPT");
    server.script_flush();
    guard
        .unlock()
        .await
        .expect("release recovers from NOSCRIPT");
    server.script_flush();
    let again = mutex
        .try_lock()
        .await
        .expect("acquire recovers from NOSCRIPT");
    server.script_flush();
    again
        .extend(ms(1000))
        .await
        .expect("extend recovers from NOSCRIPT");
    again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn aborting_a_waiting_lock_leaves_the_lock_free() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.mutex("busy").expect("name").lock().await.expect("lock");
    let waiting = b.mutex("busy").expect("name");
    let aborted = tokio::time::timeout(ms(200), waiting.lock()).await;
    assert!(
        aborted.is_err(),
        "the lock was held, the wait must time out"
    );
    held.unlock().await.expect("unlock");
    // The release may grant the lock to the aborted waiter's place before its give-up,
    // sent in the background as the wait was dropped, reaches Redis; the give-up then
    // releases that grant too. Nothing renews it: without the give-up it would stay held
    // for its whole lease, far beyond this wait.
    let free = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match a.mutex("busy").expect("name").try_lock().await {
                Ok(guard) => return guard,
                Err(Error::Held { .. }) => tokio::time::sleep(ms(10)).await,
                Err(e) => panic!("try_lock failed: {e}"),
            }
        }
    })
    .await
    .expect("nobody holds it once the aborted waiter's give-up arrived");
    free.unlock().await.expect("unlock");
}

/// Waits until the mutex `name` shows `queued` waiters with a place and `clients` clients
/// subscribed, then a little longer, for each waiter's attempt after it subscribed.
async fn waiters_settle(c: &fencelock::Client, name: &str, queued: u64, clients: u64) {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let info = c.lock_info(name).await.expect("inspect").expect("held");
            if info.queued == Some(queued) && info.waiting_clients == clients {
                return;
            }
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await
    .expect("the waiters settle");
    tokio::time::sleep(ms(100)).await;
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_its_place_so_the_next_release_wakes_another() {
    let server = RedisServer::start();
    // Fallback timers far beyond the test: only a release's wake can hand the lock over.
    let slow = || ClientOptions::default().wake_fallback(Duration::from_secs(30));
    let holder = client(&server).await;
    let (quitter, stayer) = (
        client_with(&server, slow()).await,
        client_with(&server, slow()).await,
    );
    let held = holder
        .mutex("turn")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    // The quitter waits first, so its place would be the first woken.
    let quitting = {
        let mutex = quitter.mutex("turn").expect("name");
        tokio::spawn(async move { mutex.lock().await })
    };
    waiters_settle(&holder, "turn", 1, 1).await;
    let staying = {
        let mutex = stayer.mutex("turn").expect("name");
        tokio::spawn(async move { mutex.lock().await })
    };
    waiters_settle(&holder, "turn", 2, 2).await;
    quitting.abort();
    assert!(quitting.await.is_err(), "aborted while waiting");
    // Its place goes with it (the stayer's place remains; both subscriptions do, the quitter's
    // for a while in case its client waits on the name again).
    waiters_settle(&holder, "turn", 1, 2).await;

    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let guard = tokio::time::timeout(Duration::from_secs(5), staying)
        .await
        .expect("the release woke the waiter that stayed, not the one that left")
        .expect("task")
        .expect("lock");
    assert!(released.elapsed() < Duration::from_secs(5));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn aborting_an_acquire_in_flight_releases_what_it_was_granted() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = a.mutex("warm").expect("name").lock().await.expect("lock");
    warm.unlock().await.expect("unlock");
    server.pause();
    // The request goes out but Redis only executes it after the caller has given up.
    let mutex = a.mutex("in-flight").expect("name");
    let aborted = tokio::time::timeout(ms(100), mutex.lock()).await;
    assert!(aborted.is_err());
    server.resume();
    // The grant happened after the abort; the background release must undo it long before the
    // 30 s lease would.
    let start = Instant::now();
    let guard = b
        .mutex("in-flight")
        .expect("name")
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the aborted grant is released");
    println!("free {:?} after the resume", start.elapsed());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_dropped_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex = c.mutex("dropped").expect("name");
    drop(mutex.lock().await.expect("lock"));
    let again = mutex
        .lock_timeout(Duration::from_secs(2))
        .await
        .expect("released by drop, not by its 30 s lease");
    again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn unlock_resent_after_a_timeout_reports_success() {
    let server = RedisServer::start();
    let options = ClientOptions::default().response_timeout(ms(200));
    let c = client_with(&server, options).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = c.mutex("warm").expect("name").lock().await.expect("lock");
    warm.unlock().await.expect("unlock");
    let guard = c
        .mutex("slow-release")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    server.pause();
    let unlock = tokio::spawn(guard.unlock());
    // The first release times out and is resent; both run once Redis resumes, and the resend
    // finds the key already gone.
    tokio::time::sleep(ms(260)).await;
    server.resume();
    unlock
        .await
        .expect("task")
        .expect("a release whose reply was lost is still a release");
    assert!(!common::mutex_is_held(&server, "slow-release"));
}

#[tokio::test]
async fn each_release_hands_over_to_one_of_16_waiters_without_the_fallback_timer() {
    let server = RedisServer::start();
    // A fallback this long would show in every hand-off that relied on it.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client_with(&server, options.clone()).await);
    }
    let lease = LockOptions::default().lease(Lease::Fixed(Duration::from_secs(30)));
    let first = clients[0]
        .mutex_with_options("handoff", lease.clone())
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let events = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let mut waiters = Vec::new();
    for i in 0..16 {
        let mutex = clients[i % 4]
            .mutex_with_options("handoff", lease.clone())
            .expect("name");
        let events = Arc::clone(&events);
        waiters.push(tokio::spawn(async move {
            let guard = mutex.lock().await.expect("lock");
            let acquired = Instant::now();
            tokio::time::sleep(ms(2)).await;
            let released = Instant::now();
            guard.unlock().await.expect("unlock");
            events.lock().expect("events").push((acquired, released));
        }));
    }
    // Every waiter is subscribed and asleep before the first release.
    tokio::time::sleep(ms(300)).await;
    let evalsha_before = command_calls(&server, "evalsha");
    let first_release = Instant::now();
    first.unlock().await.expect("unlock");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("every waiter gets the lock")
            .expect("task");
    }
    let evalsha = command_calls(&server, "evalsha") - evalsha_before;
    let mut events = events.lock().expect("events").clone();
    events.sort();
    let mut gaps = vec![events[0].0 - first_release];
    gaps.extend(
        events
            .windows(2)
            .map(|w| w[1].0.saturating_duration_since(w[0].1)),
    );
    gaps.sort();
    println!(
        "16 waiters: hand-off p50 {:?}, max {:?}; {} script calls for 16 hand-offs",
        gaps[gaps.len() / 2],
        gaps[gaps.len() - 1],
        evalsha
    );
    assert!(
        gaps[gaps.len() - 1] < Duration::from_secs(1),
        "a hand-off waited for the fallback timer: {gaps:?}"
    );
    // 16 releases plus about one attempt per waiting client per release; waking every waiter
    // on each release would cost over a hundred more.
    assert!(
        evalsha <= 16 + 16 * 4,
        "{evalsha} script calls: waiters stampede"
    );
}

/// One wait on a held lock by `waiter`: the script calls and subscriptions the server saw from
/// the wait's start to its grant, the holder's release included.
async fn one_wait(
    server: &RedisServer,
    holder: &fencelock::Client,
    waiter: &fencelock::Client,
) -> (u64, u64) {
    let fixed = fixed(Duration::from_secs(30));
    let held = holder
        .mutex_with_options("again", fixed.clone())
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let (evalsha, subscribe) = (
        command_calls(server, "evalsha"),
        command_calls(server, "subscribe"),
    );
    let mutex = waiter.mutex_with_options("again", fixed).expect("name");
    let waiting = tokio::spawn(async move { mutex.lock().await });
    waiters_settle(holder, "again", 1, 1).await;
    held.unlock().await.expect("unlock");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("lock");
    let counts = (
        command_calls(server, "evalsha") - evalsha,
        command_calls(server, "subscribe") - subscribe,
    );
    guard.unlock().await.expect("unlock");
    counts
}

#[tokio::test]
async fn a_client_that_waited_on_a_name_a_moment_ago_waits_again_with_one_attempt() {
    let server = RedisServer::start();
    // A long fallback: every wake below comes from a release.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let holder = client_with(&server, options.clone()).await;
    let waiter = client_with(&server, options).await;
    // Load the scripts, so that no call below is a reload after NOSCRIPT.
    let warm = holder
        .mutex("warm")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    warm.unlock().await.expect("unlock");
    // The first wait tries, subscribes (to its client's channel of the name, and to the
    // name's) and tries again; the holder's release, the third call, offers it the lock,
    // which the wait claims with a fourth.
    assert_eq!(one_wait(&server, &holder, &waiter).await, (4, 2));
    // The subscription outlived the wait: the next one tries once before the release.
    assert_eq!(one_wait(&server, &holder, &waiter).await, (3, 0));
}

#[tokio::test]
async fn a_release_names_its_woken_waiter_to_that_waiter_s_client_alone() {
    let server = RedisServer::start();
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let holder = client_with(&server, options.clone()).await;
    let mut waiting_clients = Vec::new();
    for _ in 0..3 {
        waiting_clients.push(client_with(&server, options.clone()).await);
    }
    let held = holder
        .mutex("one")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let mut waiting = Vec::new();
    for c in &waiting_clients {
        let mutex = c.mutex("one").expect("name");
        waiting.push(tokio::spawn(async move { mutex.lock().await }));
    }
    waiters_settle(&holder, "one", 3, 3).await;
    // Every message on the name's channels, whichever client's.
    let announced = common::published_during(&server, "fencelock:{one}:wake*", async {
        held.unlock().await.expect("unlock");
    })
    .await;
    // The offer, once, to one client: on that client's channel of the name, naming its
    // waiter; then the note to the next waiter, on its own client's channel, of how long the
    // offer lasts.
    let [(channel, token), (next_channel, note)] = announced.as_slice() else {
        panic!("an offer and a note: {announced:?}");
    };
    let tag = token.split('.').next().expect("a client tag");
    assert_eq!(*channel, format!("fencelock:{{one}}:wake:{tag}"), "{token}");
    let (next, window) = note.split_once('?').expect("a token and the offer's ms");
    assert_eq!(window, "200", "the default window");
    let next_tag = next.split('.').next().expect("a client tag");
    assert_ne!(next_tag, tag, "another client's waiter");
    assert_eq!(*next_channel, format!("fencelock:{{one}}:wake:{next_tag}"));
    for task in waiting {
        task.abort();
    }
}

#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert!(matches!(c.mutex(""), Err(Error::InvalidName { .. })));
    assert!(matches!(
        c.mutex(vec![b'x'; fencelock::MAX_NAME_LEN + 1]),
        Err(Error::InvalidName { .. })
    ));
    for lease in [
        Duration::ZERO,
        ms(1),
        Duration::MAX,
        fencelock::MAX_LEASE * 2,
    ] {
        assert!(
            matches!(
                c.mutex_with_options("x", fixed(lease)),
                Err(Error::InvalidOption {
                    option: "lease",
                    ..
                })
            ),
            "lease {lease:?}"
        );
    }
    let guard = c.mutex("x").expect("name").lock().await.expect("lock");
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidOption { .. })
    ));
    guard.unlock().await.expect("unlock");
    // Names may be any bytes, braces included.
    for name in [&b"\x00\xff{}"[..], "ключ/🔒".as_bytes(), b"{a}", b"}"] {
        let guard = c.mutex(name).expect("name").try_lock().await.expect("lock");
        guard.unlock().await.expect("unlock");
    }
    let bad = fencelock::Client::connect_with_options(
        server.url().as_str(),
        ClientOptions::default().prefix("a{b}:"),
    )
    .await;
    assert!(matches!(
        bad,
        Err(Error::InvalidOption {
            option: "prefix",
            ..
        })
    ));
}

#[tokio::test]
async fn a_key_of_another_type_is_a_typed_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["HSET", "fencelock:{typed}:mutex", "field", "value"]);
    let err = c
        .mutex("typed")
        .expect("name")
        .try_lock()
        .await
        .expect_err("wrong type");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    // Held by another owner, with a waiters' set of another type: a refused waiter's place.
    server.cli(&["SET", "fencelock:{typed}:mutex", "other:1", "PX", "60000"]);
    server.cli(&["LPUSH", "fencelock:{typed}:mutex-waiters", "x"]);
    let err = c
        .mutex("typed")
        .expect("name")
        .lock()
        .await
        .expect_err("wrong type");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
}

#[tokio::test]
async fn redis_down_is_a_typed_error() {
    let mut server = RedisServer::start();
    let url = server.url();
    let c = client(&server).await;
    server.kill9();
    let err = c
        .mutex("x")
        .expect("name")
        .try_lock()
        .await
        .expect_err("down");
    assert!(err.is_unavailable(), "{err:?}");
    let err = fencelock::Client::connect(url.as_str())
        .await
        .expect_err("down");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(matches!(
        fencelock::Client::connect("redis://[not a url").await,
        Err(Error::InvalidAddress { .. })
    ));
}

#[tokio::test]
async fn idle_locks_leave_no_keys_behind() {
    let server = RedisServer::start();
    let options = ClientOptions::default().fence_memory(ms(100));
    let c = client_with(&server, options).await;
    let mutex = c.mutex_with_options("idle", fixed(ms(200))).expect("name");
    mutex
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    std::mem::forget(mutex.lock().await.expect("lock"));
    assert_ne!(server.cli(&["DBSIZE"]), "0");
    tokio::time::sleep(ms(450)).await;
    assert_eq!(server.cli(&["KEYS", "*"]), "", "every key expired");
}

#[tokio::test]
async fn renewal_and_release_survive_killed_connections() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let guard = c
        .mutex_with_options("reconnect", renewed(ms(600)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    for _ in 0..3 {
        assert!(server.client_kill(&["TYPE", "normal"]) >= 1);
        tokio::time::sleep(ms(250)).await;
    }
    assert!(guard.is_held(), "renewal reconnected in time");
    guard.unlock().await.expect("release after reconnecting");
}

#[tokio::test]
async fn a_waiter_is_woken_after_its_subscription_connection_is_killed() {
    let server = RedisServer::start();
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let holder = client(&server).await;
    let waiter = client_with(&server, options).await;
    let held = holder
        .mutex("resubscribe")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiting = tokio::spawn(async move {
        waiter
            .mutex("resubscribe")
            .expect("name")
            .lock()
            .await
            .map(|guard| (Instant::now(), guard))
    });
    tokio::time::sleep(ms(200)).await;
    assert_eq!(server.client_kill(&["TYPE", "pubsub"]), 1);
    // Give the subscription time to come back, then release.
    tokio::time::sleep(ms(500)).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken well before the 10 s fallback")
        .expect("task")
        .expect("lock");
    println!("woken {:?} after release", acquired - released);
    assert!(acquired - released < Duration::from_secs(1));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn an_acquire_resent_after_a_timeout_finds_its_own_grant() {
    let server = RedisServer::start();
    let options = ClientOptions::default().response_timeout(ms(200));
    let c = client_with(&server, options).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = c.mutex("warm").expect("name").lock().await.expect("lock");
    warm.unlock().await.expect("unlock");
    server.pause();
    let mutex = c.mutex("resent").expect("name");
    let attempt = tokio::spawn(async move { mutex.try_lock().await });
    // The first request times out and is resent with the same token; once Redis resumes, the
    // first grants the lock and the resend must recognise that grant as its own.
    tokio::time::sleep(ms(260)).await;
    server.resume();
    let guard = attempt
        .await
        .expect("task")
        .expect("the resend is answered with the first request's grant");
    assert!(guard.is_held());
    guard.unlock().await.expect("unlock");
    assert!(!common::mutex_is_held(&server, "resent"));
}
