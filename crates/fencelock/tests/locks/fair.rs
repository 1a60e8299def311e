//! The FairMutex against a real redis-server: exclusion, first come first served, one wake-up
//! per hand-off, waiters that give up or die, the holder's crash, cancellation and leases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, client, client_with, command_calls, ms};
use fencelock::{ClientOptions, Error, Lease, LockOptions, Lost};
use fencelock_testkit::RedisServer;

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

/// Options under which a hand-off that relied on the fallback timer would show.
fn slow_fallback() -> ClientOptions {
    ClientOptions::default().wake_fallback(Duration::from_secs(10))
}

fn line(server: &RedisServer, name: &str) -> Vec<String> {
    server
        .cli(&[
            "ZRANGE",
            &format!("fencelock:{{{name}}}:fair-line"),
            "0",
            "-1",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Polls until the line of `name` is `len` long, for at most 2 s.
async fn line_reaches(server: &RedisServer, name: &str, len: usize) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while line(server, name).len() != len {
        assert!(
            Instant::now() < deadline,
            "the line of {name} stays at {:?}, expected {len} waiters",
            line(server, name)
        );
        tokio::time::sleep(ms(5)).await;
    }
}

/// The server's clock in milliseconds.
fn server_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().expect("TIME"));
    parts.next().expect("seconds") * 1000 + parts.next().expect("µs") / 1000
}

/// Puts a waiter that never attempts at the back of the line, with its place ending in
/// `place` and asking for a lease of `lease`: its place member is its token and lease, as the
/// library writes one (value/value.lua).
fn enqueue_silent_waiter(
    server: &RedisServer,
    name: &str,
    token: &str,
    place: Duration,
    lease: Duration,
) {
    let line_key = format!("fencelock:{{{name}}}:fair-line");
    let places_key = format!("fencelock:{{{name}}}:fair-places");
    let member = format!("{token}{}", lease.as_millis());
    let last = server.cli(&["ZRANGE", &line_key, "-1", "-1", "WITHSCORES"]);
    let arrival = last
        .lines()
        .nth(1)
        .map_or(1, |s| s.trim().parse::<u64>().expect("arrival number") + 1);
    let until = server_ms(server) + u64::try_from(place.as_millis()).expect("ms");
    server.cli(&["ZADD", &line_key, &arrival.to_string(), &member]);
    server.cli(&["ZADD", &places_key, &until.to_string(), &member]);
    server.cli(&["PEXPIRE", &line_key, "60000"]);
    server.cli(&["PEXPIRE", &places_key, "60000"]);
}

/// A client that listens where a planted waiter's token (without a client tag) is told of a
/// grant, so that a release counts it alive: a waiter whose process is stalled, not gone.
/// Listens for as long as the returned connection lives.
async fn listen_as_planted_waiter(server: &RedisServer, name: &str) -> redis::aio::PubSub {
    let mut pubsub = redis::Client::open(server.url().as_str())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("connect");
    pubsub
        .subscribe(format!("fencelock:{{{name}}}:fair-wake"))
        .await
        .expect("subscribe");
    pubsub
}

#[tokio::test]
async fn second_owner_is_refused_until_release() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .fair_mutex("job")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    match b.fair_mutex("job").expect("name").try_lock().await {
        Err(Error::Held { name, remaining }) => {
            assert_eq!(name, "job");
            let left = remaining.expect("the lease has an expiry");
            assert!(left > Duration::from_secs(29) && left <= Duration::from_secs(30));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(line(&server, "job").is_empty(), "try_lock takes no place");
    let first_fence = guard.fence();
    guard.unlock().await.expect("unlock");
    let again = b
        .fair_mutex("job")
        .expect("name")
        .try_lock()
        .await
        .expect("free now");
    assert!(again.fence() > first_fence);
    again.unlock().await.expect("unlock");
}

#[tokio::test]
async fn waiters_get_the_lock_in_order_of_arrival_one_wake_up_each() {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client_with(&server, slow_fallback()).await);
    }
    let lease = fixed(Duration::from_secs(30));
    let first = clients[0]
        .fair_mutex_with_options("fifo", lease.clone())
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let fair = clients[i % 3]
            .fair_mutex_with_options("fifo", lease.clone())
            .expect("name");
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = fair.lock().await.expect("lock");
            order.lock().expect("order").push(i);
            tokio::time::sleep(ms(2)).await;
            guard.unlock().await.expect("unlock");
        }));
        // Each joins the line before the next one arrives.
        line_reaches(&server, "fifo", i + 1).await;
    }
    let evalsha_before = command_calls(&server, "evalsha");
    let released = Instant::now();
    first.unlock().await.expect("unlock");
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("every waiter is served well before the 10 s fallback")
            .expect("task");
    }
    let elapsed = released.elapsed();
    let calls = command_calls(&server, "evalsha") - evalsha_before;
    println!("8 hand-offs in {elapsed:?}, {calls} script calls");
    assert_eq!(*order.lock().expect("order"), (0..8).collect::<Vec<_>>());
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    // 9 releases and 8 attempts by woken first waiters; waking more than the first waiter
    // would add attempts that are refused.
    assert!(calls <= 9 + 8 + 2, "{calls} script calls for 8 hand-offs");
    assert!(line(&server, "fifo").is_empty());
}

#[tokio::test]
async fn a_release_names_the_next_in_line_to_that_waiter_s_client_alone() {
    let server = RedisServer::start();
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let holder = client_with(&server, options.clone()).await;
    let mut waiting_clients = Vec::new();
    for _ in 0..3 {
        waiting_clients.push(client_with(&server, options.clone()).await);
    }
    let held = holder
        .fair_mutex("one")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let mut waiting = Vec::new();
    for c in &waiting_clients {
        let fair = c.fair_mutex("one").expect("name");
        waiting.push(tokio::spawn(async move { fair.lock().await }));
    }
    line_reaches(&server, "one", 3).await;
    // Every message on the name's channels, whichever client's.
    let announced = common::published_during(&server, "fencelock:{one}:fair-wake*", async {
        held.unlock().await.expect("unlock");
    })
    .await;
    // The offer, once, to one client: on that client's channel of the name, naming the first
    // in line; then the note to the second in line, on its own client's channel, of how long
    // the offer lasts.
    let [(channel, token), (next_channel, note)] = announced.as_slice() else {
        panic!("an offer and a note: {announced:?}");
    };
    let tag = token.split('.').next().expect("a client tag");
    assert_eq!(
        *channel,
        format!("fencelock:{{one}}:fair-wake:{tag}"),
        "{token}"
    );
    let (next, window) = note.split_once('?').expect("a token and the offer's ms");
    assert_eq!(window, "200", "the default window");
    let next_tag = next.split('.').next().expect("a client tag");
    assert_eq!(
        *next_channel,
        format!("fencelock:{{one}}:fair-wake:{next_tag}")
    );
    for task in waiting {
        task.abort();
    }
}

#[tokio::test]
async fn try_lock_does_not_jump_the_line() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let fair = c.fair_mutex("no-jumping").expect("name");
    let first = "AAAAAAAAAAAAAAAAAAAAAA:";
    enqueue_silent_waiter(&server, "no-jumping", first, ms(60_000), ms(45_000));
    let _listening = listen_as_planted_waiter(&server, "no-jumping").await;
    match fair.try_lock().await {
        Err(Error::Held { remaining, .. }) => {
            // The free lock was offered to the first in line, for the handoff window.
            let left = remaining.expect("the offer ends");
            assert!(left > ms(0) && left <= ms(200), "{left:?}");
        }
        other => panic!("a free lock owed to a waiter was taken: {other:?}"),
    }
    let held = server.cli(&["GET", "fencelock:{no-jumping}:fair"]);
    assert!(
        held.starts_with(first),
        "offered to the first in line: {held}"
    );
    assert!(
        line(&server, "no-jumping").is_empty(),
        "try_lock took no place"
    );
}

#[tokio::test]
async fn a_waiter_that_times_out_leaves_the_line() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client_with(&server, slow_fallback()).await;
    let guard = holder
        .fair_mutex("patience")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let impatient = tokio::spawn({
        let fair = waiting.fair_mutex("patience").expect("name");
        async move { fair.lock_timeout(ms(300)).await }
    });
    line_reaches(&server, "patience", 1).await;
    let patient = tokio::spawn({
        let fair = waiting.fair_mutex("patience").expect("name");
        async move { fair.lock().await.map(|guard| (Instant::now(), guard)) }
    });
    line_reaches(&server, "patience", 2).await;
    let timed_out = impatient.await.expect("task");
    assert!(
        matches!(timed_out, Err(Error::Timeout { .. })),
        "{timed_out:?}"
    );
    line_reaches(&server, "patience", 1).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(2), patient)
        .await
        .expect("the next waiter is woken, not left to its 10 s fallback")
        .expect("task")
        .expect("lock");
    println!(
        "next waiter served {:?} after the release",
        acquired - released
    );
    assert!(acquired - released < ms(500));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_first_waiter_that_leaves_a_free_lock_wakes_the_next() {
    let server = RedisServer::start();
    let c = client_with(&server, slow_fallback()).await;
    let ghost = "GGGGGGGGGGGGGGGGGGGGGG:";
    enqueue_silent_waiter(&server, "leaving", ghost, ms(60_000), ms(60_000));
    let listening = listen_as_planted_waiter(&server, "leaving").await;
    let next = tokio::spawn({
        let fair = c.fair_mutex("leaving").expect("name");
        async move { fair.lock().await.map(|guard| (Instant::now(), guard)) }
    });
    // The next waiter's attempt finds the lock free and offers it to the first in line,
    // and takes its own place behind it.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !server
        .cli(&["GET", "fencelock:{leaving}:fair"])
        .starts_with(ghost)
    {
        assert!(
            Instant::now() < deadline,
            "the first in line is offered the lock"
        );
        tokio::time::sleep(ms(5)).await;
    }
    line_reaches(&server, "leaving", 1).await;
    drop(listening);
    // The first waiter gives up what it was offered, as a dropped lock() would, with the
    // script the library runs on one server (`PUBLISH` as the announcing command).
    let release = redis::Script::new(concat!(
        "local PUBLISH = 'PUBLISH'\n",
        include_str!("../../src/core/fence.lua"),
        include_str!("../../src/kinds/value/value.lua"),
        include_str!("../../src/kinds/fair/line.lua"),
        include_str!("../../src/kinds/fair/release.lua")
    ));
    let mut conn = redis::Client::open(server.url().as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let left = Instant::now();
    let reply: i64 = release
        .key("fencelock:{leaving}:fair")
        .key("fencelock:{leaving}:fair-line")
        .key("fencelock:{leaving}:fair-places")
        .arg(ghost)
        .arg("fencelock:{leaving}:fair-wake")
        .arg(60_000)
        .arg(format!("{ghost}60000"))
        .arg(200)
        .invoke_async(&mut conn)
        .await
        .expect("release");
    assert_eq!(reply, 1, "it released what it was offered");
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(2), next)
        .await
        .expect("offered by the leaving waiter's release, not the 10 s fallback")
        .expect("task")
        .expect("lock");
    assert!(acquired - left < ms(500));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_dead_first_waiter_costs_the_next_the_handoff_window() {
    let server = RedisServer::start();
    let c = client_with(&server, slow_fallback()).await;
    // Its place lasts a minute, but no client listens for it: its process is gone (or its
    // client is reconnecting: a fair lock offers it its turn all the same, for the window).
    enqueue_silent_waiter(
        &server,
        "dead-waiter",
        "DDDDDDDDDDDDDDDDDDDDDD:",
        ms(60_000),
        ms(60_000),
    );
    let started = Instant::now();
    let guard = c
        .fair_mutex("dead-waiter")
        .expect("name")
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the dead waiter's offer ends");
    let waited = started.elapsed();
    println!("waited {waited:?} behind a dead waiter whose place had a minute left");
    assert!(
        waited < ms(3000),
        "the dead waiter's place was honoured: {waited:?}"
    );
    assert!(line(&server, "dead-waiter").is_empty());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_stalled_first_waiter_holds_its_offer_only_for_the_window() {
    let server = RedisServer::start();
    let c = client_with(&server, slow_fallback()).await;
    // It listens but never comes, as a stalled process: the next waiter's attempt offers it
    // the free lock for the handoff window (200 ms, shorter than the 60 s it asked), by the
    // server's clock, and waits that out. Counted from before the place is made.
    let _listening = listen_as_planted_waiter(&server, "stalled").await;
    let started = Instant::now();
    enqueue_silent_waiter(
        &server,
        "stalled",
        "DDDDDDDDDDDDDDDDDDDDDD:",
        ms(60_000),
        ms(60_000),
    );
    let guard = c
        .fair_mutex("stalled")
        .expect("name")
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the stalled waiter's offer ends");
    let waited = started.elapsed();
    println!("waited {waited:?} behind a stalled waiter offered the lock");
    assert!(
        waited >= ms(195),
        "the stalled waiter's offer was cut short: {waited:?}"
    );
    assert!(waited < ms(3000), "taken when its offer ended: {waited:?}");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_waiter_offered_the_lock_that_never_comes_holds_it_only_for_the_window() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client_with(&server, ClientOptions::default().wake_fallback(ms(200))).await;
    let guard = holder
        .fair_mutex_with_options("no-show", fixed(Duration::from_secs(30)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let ghost = "SSSSSSSSSSSSSSSSSSSSSS:";
    enqueue_silent_waiter(&server, "no-show", ghost, ms(60_000), ms(3_000));
    let _listening = listen_as_planted_waiter(&server, "no-show").await;
    let next = tokio::spawn({
        let fair = waiting.fair_mutex("no-show").expect("name");
        async move { fair.lock_timeout(Duration::from_secs(10)).await }
    });
    line_reaches(&server, "no-show", 2).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    // The release offered the lock to the first in line, for the window, not the 3 s it
    // asked.
    let kept = server.cli(&["GET", "fencelock:{no-show}:fair"]);
    assert!(kept.starts_with(ghost), "{kept}");
    let guard = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the next waiter is served")
        .expect("task")
        .expect("lock");
    let waited = released.elapsed();
    println!("served {waited:?} after the release, behind a no-show offered the lock");
    assert!(
        waited >= ms(195),
        "the no-show's offer was honoured: {waited:?}"
    );
    assert!(
        waited < ms(2_900),
        "taken when the offer ended, not the lease it asked: {waited:?}"
    );
    assert!(line(&server, "no-show").is_empty());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn after_the_holders_lease_ends_the_first_waiter_and_only_it_takes_the_lock() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client_with(&server, slow_fallback()).await;
    let lease = ms(800);
    let crashed = holder
        .fair_mutex_with_options("crash", fixed(lease))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let locked_at = Instant::now();
    // The holder "crashes": no release ever comes.
    std::mem::forget(crashed);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let fair = waiting
            .fair_mutex_with_options("crash", fixed(Duration::from_secs(30)))
            .expect("name");
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = fair.lock().await.expect("lock");
            order.lock().expect("order").push((i, locked_at.elapsed()));
            tokio::time::sleep(ms(20)).await;
            guard.unlock().await.expect("unlock");
        }));
        line_reaches(&server, "crash", i + 1).await;
    }
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("served after the lease, not the 10 s fallback")
            .expect("task");
    }
    let order = order.lock().expect("order").clone();
    println!("served after the dead holder's lease: {order:?}");
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let first = order[0].1;
    assert!(
        first >= lease - ms(50),
        "taken before the lease ended: {first:?}"
    );
    assert!(
        first < lease + ms(500),
        "the first waiter napped past the lease: {first:?}"
    );
}

#[tokio::test]
async fn aborting_an_acquire_in_flight_leaves_the_lock_free_and_the_line_empty() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = a.fair_mutex("warm").expect("name");
    warm.lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let busy = a
        .fair_mutex("warm")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let refused = tokio::time::timeout(ms(100), a.fair_mutex("warm").expect("name").lock()).await;
    assert!(refused.is_err());
    busy.unlock().await.expect("unlock");

    server.pause();
    let fair = a.fair_mutex("in-flight").expect("name");
    let aborted = tokio::time::timeout(ms(100), fair.lock()).await;
    assert!(aborted.is_err());
    server.resume();
    let start = Instant::now();
    let guard = b
        .fair_mutex("in-flight")
        .expect("name")
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the aborted grant is released");
    println!("free {:?} after the resume", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(line(&server, "in-flight").is_empty());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_former_owner_cannot_release_or_extend_the_new_owners_lock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let old = a
        .fair_mutex_with_options("handover", fixed(ms(200)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    tokio::time::sleep(ms(300)).await;
    let new = b
        .fair_mutex_with_options("handover", fixed(ms(5000)))
        .expect("name")
        .lock()
        .await
        .expect("free after the lease");
    let value = server.cli(&["GET", "fencelock:{handover}:fair"]);
    assert!(matches!(
        old.extend(ms(60_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(old.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(server.cli(&["GET", "fencelock:{handover}:fair"]), value);
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{handover}:fair"])
        .parse()
        .expect("pttl");
    assert!(
        pttl <= 5000,
        "the old owner's extend must not touch it: {pttl}"
    );
    new.unlock().await.expect("the new owner releases");
}

#[tokio::test]
async fn renewal_keeps_the_lock_and_lost_fires_when_it_is_deleted() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let rival = client(&server).await;
    let lease = ms(400);
    let guard = holder
        .fair_mutex_with_options("long", LockOptions::default().lease(Lease::Renewed(lease)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let rival = rival.fair_mutex("long").expect("name");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(guard.is_held(), "renewal must keep the lease valid");
        assert!(matches!(rival.try_lock().await, Err(Error::Held { .. })));
        tokio::time::sleep(ms(50)).await;
    }
    guard.extend(ms(1000)).await.expect("extend");
    server.cli(&["DEL", "fencelock:{long}:fair"]);
    let reason = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost fires within the next renewal");
    assert_eq!(reason, Lost::Revoked);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn fences_strictly_increase_and_idle_keys_expire() {
    let server = RedisServer::start();
    let options = ClientOptions::default()
        .fence_memory(ms(100))
        .wake_fallback(ms(30))
        .response_timeout(ms(100));
    let c = client_with(&server, options).await;
    let fair = c
        .fair_mutex_with_options("fenced", fixed(ms(200)))
        .expect("name");
    let mut last = 0;
    for i in 0..200 {
        let guard = fair.lock().await.expect("lock");
        assert!(guard.fence().get() > last, "grant {i}");
        last = guard.fence().get();
        if i % 50 == 0 {
            server.cli(&["DEL", "fencelock:{fenced}:fence"]);
        }
        guard.unlock().await.expect("unlock");
    }
    let guard = fair.lock().await.expect("lock");
    // A waiter joins the line, then gives up: its place lasts 3 × 30 ms + 100 ms.
    assert!(fair.lock_timeout(ms(50)).await.is_err());
    std::mem::forget(guard);
    assert_ne!(server.cli(&["DBSIZE"]), "0");
    tokio::time::sleep(ms(450)).await;
    assert_eq!(server.cli(&["KEYS", "*"]), "", "every key expired");
}

#[tokio::test]
async fn a_key_of_another_type_is_a_typed_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["SET", "fencelock:{typed}:fair-line", "x"]);
    let err = c
        .fair_mutex("typed")
        .expect("name")
        .try_lock()
        .await
        .expect_err("wrong type");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
}

/// Every command the server ran so far, by `INFO commandstats`: each `EVALSHA` and every command
/// its script ran, counted apart; the `INFO` calls that read the count are left out.
fn commands_run(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| !line.starts_with("cmdstat_info:"))
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| line.split_once(":calls=")?.1.split(',').next())
        .map(|calls| calls.parse::<u64>().expect("numeric call count"))
        .sum()
}

/// The commands that one hand-off costs at most when four workers, each on a client of its
/// own, take turns without pause (each count is checked by `costs.rs`): the holder's release
/// (11: `EVALSHA GET ZPOPMIN ZSCORE TIME ZREM SET PUBLISH ZRANGE ZSCORE PUBLISH`, the offer to
/// the first in line and the note to the second), the first waiter's claim (3: `EVALSHA GET
/// SET`), and the former holder's attempt that puts it at the back of the line again (9:
/// `EVALSHA GET PTTL ZSCORE TIME ZADD ZRANGE ZADD PTTL`; `PEXPIRE PEXPIRE` more at most once
/// per place's length).
const COMMANDS_PER_HAND_OFF: u64 = 25;

#[tokio::test]
async fn a_steady_hand_off_between_four_waiters_costs_few_commands() {
    const WORKERS: usize = 4;
    // Grants before the count starts (scripts loaded, every worker subscribed and in line),
    // and grants counted.
    const WARM: usize = 12;
    const COUNTED: usize = 40;
    let server = Arc::new(RedisServer::start());
    let grants = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        // A long fallback: every attempt below follows a release or a first arrival.
        let c = client_with(&server, slow_fallback()).await;
        let fair = c
            .fair_mutex_with_options("steady", fixed(Duration::from_secs(30)))
            .expect("name");
        let (server, grants, counts) = (
            Arc::clone(&server),
            Arc::clone(&grants),
            Arc::clone(&counts),
        );
        workers.push(tokio::spawn(async move {
            let _client = c;
            loop {
                let guard = fair.lock().await.expect("lock");
                let grant = grants.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                if grant == WARM || grant == WARM + COUNTED {
                    // Read while the lock is held and every other worker waits for a wake.
                    tokio::time::sleep(ms(50)).await;
                    counts.lock().expect("counts").push(commands_run(&server));
                }
                guard.unlock().await.expect("unlock");
                if grant >= WARM + COUNTED {
                    return;
                }
            }
        }));
    }
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("every hand-off is woken, well before the 10 s fallback")
            .expect("task");
    }
    let counts = counts.lock().expect("counts").clone();
    let per_hand_off = (counts[1] - counts[0]) as f64 / COUNTED as f64;
    println!("{per_hand_off:.1} commands per hand-off");
    assert!(
        per_hand_off <= COMMANDS_PER_HAND_OFF as f64,
        "{per_hand_off:.1} commands per hand-off, over {COMMANDS_PER_HAND_OFF}"
    );
}
