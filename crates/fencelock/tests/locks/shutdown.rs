//! `Client::shutdown`: every hold of every primitive given back at once (a leadership resigned),
//! guards that outlive it told so, acquires refused afterwards, on every clone, on RedLock and on
//! the blocking API.

use std::time::Duration;

use crate::common::{self, client, client_with, eventually};
use fencelock::{Client, ClientOptions, Deployment, Error, Lease, Lost};
use fencelock_testkit::RedisServer;

/// Long enough that a lock found free was given back, not left to expire.
const LEASE: Duration = Duration::from_secs(30);
/// Generous bound on anything that should happen at once, on a loaded machine.
const PROMPTLY: Duration = Duration::from_secs(10);

/// Checks what a guard says after its client's shutdown: not held, lost because of the
/// shutdown, and neither extended nor released (`$release` is its release method).
macro_rules! assert_given_back {
    ($guard:expr, $release:ident) => {{
        let guard = $guard;
        assert!(!guard.is_held(), "{guard:?} still claims the lock");
        let lost = tokio::time::timeout(PROMPTLY, guard.lost()).await;
        assert_eq!(lost.expect("lost fires at once"), Lost::Shutdown);
        assert!(matches!(guard.extend(LEASE).await, Err(Error::Shutdown)));
        assert!(matches!(guard.$release().await, Err(Error::Shutdown)));
    }};
}

#[tokio::test]
async fn shutdown_gives_back_every_primitive_with_a_renewed_lease() {
    every_primitive_is_given_back(Lease::Renewed(LEASE)).await;
}

#[tokio::test]
async fn shutdown_gives_back_every_primitive_with_a_fixed_lease() {
    every_primitive_is_given_back(Lease::Fixed(LEASE)).await;
}

/// Takes one hold of each primitive (two of the reentrant mutex) and a leadership with `lease`,
/// shuts the client down, and checks that another client gets each of them at once.
async fn every_primitive_is_given_back(lease: Lease) {
    let server = RedisServer::start();
    let owner = client_with(&server, ClientOptions::default().default_lease(lease)).await;
    let holder = owner.holder().expect("holder");
    let mutex = owner.mutex("m").expect("name").lock().await.expect("mutex");
    let fair = owner.fair_mutex("f").expect("name").lock().await;
    let reentrant = owner.reentrant_mutex("r").expect("name");
    let outer = reentrant.lock(&holder).await.expect("reentrant");
    let inner = reentrant.lock(&holder).await.expect("reentrant again");
    let rwlock = owner.rwlock("rw").expect("name");
    let read = rwlock.read_as(&holder).await.expect("read");
    let write = owner.rwlock("w").expect("name").write_as(&holder).await;
    let permits = owner.semaphore("s", 3).expect("name").acquire_many(3).await;
    let multi = owner.multi_mutex(["a", "b"]).expect("names").lock().await;
    let leadership = owner.election("e").expect("name").campaign("owner").await;

    owner.shutdown().await.expect("every release answered");

    assert_given_back!(mutex, unlock);
    assert_given_back!(fair.expect("fair"), unlock);
    assert_given_back!(outer, unlock);
    assert_given_back!(inner, unlock);
    assert_given_back!(read, unlock);
    assert_given_back!(write.expect("write"), unlock);
    assert_given_back!(permits.expect("permits"), release);
    assert_given_back!(multi.expect("multi"), unlock);
    let leadership = leadership.expect("leadership");
    assert!(matches!(
        leadership.proclaim("still here").await,
        Err(Error::Shutdown)
    ));
    assert_given_back!(leadership, resign);

    let other = client(&server).await;
    let them = other.holder().expect("holder");
    let reentrant = other.reentrant_mutex("r").expect("name");
    let semaphore = other.semaphore("s", 3).expect("name");
    let election = other.election("e").expect("name");
    assert_eq!(election.leader().await.expect("leader"), None, "resigned");
    // Held by the other client until the end of the test, so that each is checked free.
    let _held = (
        other
            .mutex("m")
            .expect("name")
            .try_lock()
            .await
            .expect("mutex free"),
        other
            .fair_mutex("f")
            .expect("name")
            .try_lock()
            .await
            .expect("fair mutex free"),
        reentrant
            .try_lock(&them)
            .await
            .expect("reentrant mutex free"),
        other
            .rwlock("rw")
            .expect("name")
            .try_write_as(&them)
            .await
            .expect("no reader left"),
        other
            .rwlock("w")
            .expect("name")
            .try_write_as(&them)
            .await
            .expect("no writer left"),
        semaphore
            .try_acquire_many(3)
            .await
            .expect("every permit back"),
        other
            .multi_mutex(["a", "b"])
            .expect("names")
            .try_lock()
            .await
            .expect("names free"),
        tokio::time::timeout(PROMPTLY, election.campaign("other"))
            .await
            .expect("nobody leads: won at once")
            .expect("campaign"),
    );
}

#[tokio::test]
async fn after_shutdown_every_clone_and_handle_refuses_to_acquire() {
    let server = RedisServer::start();
    let original = client(&server).await;
    let clone = original.clone();
    let mutex = original.mutex("jobs").expect("name");
    let holder = original.holder().expect("holder");

    clone.shutdown().await.expect("nothing to release");

    assert!(matches!(mutex.try_lock().await, Err(Error::Shutdown)));
    assert!(matches!(mutex.lock().await, Err(Error::Shutdown)));
    let fresh = original.rwlock("jobs").expect("a handle is still made");
    assert!(matches!(fresh.read_as(&holder).await, Err(Error::Shutdown)));
    let semaphore = original.semaphore("jobs", 1).expect("name");
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Shutdown)
    ));
    let election = original.election("jobs").expect("name");
    assert!(matches!(election.campaign("a").await, Err(Error::Shutdown)));
    original
        .shutdown()
        .await
        .expect("a second shutdown returns at once");
}

#[tokio::test]
async fn a_waiting_lock_returns_when_its_client_shuts_down() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder
        .mutex("busy")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiter = client(&server).await;
    let mutex = waiter.mutex("busy").expect("name");
    let waiting = tokio::spawn(async move { mutex.lock().await });
    // Let the waiter be refused once and start waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;

    waiter.shutdown().await.expect("shutdown");

    let outcome = tokio::time::timeout(PROMPTLY, waiting).await;
    let outcome = outcome
        .expect("the waiter returns at once")
        .expect("no panic");
    assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    assert!(guard.is_held(), "another client's lock is not touched");
    guard.unlock().await.expect("still held by its owner");
}

#[tokio::test]
async fn shutdown_closes_the_notification_connection() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder
        .mutex("busy")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let before_client = connections(&server);
    let waiter = client(&server).await;
    let opened = eventually(PROMPTLY, || connections(&server) == before_client + 2).await;
    assert!(
        opened,
        "the waiter's client opened its command and pub/sub connections"
    );
    let mutex = waiter.mutex("busy").expect("name");
    let waiting = tokio::spawn(async move { mutex.lock().await });
    // Let the waiter be refused once and subscribe.
    tokio::time::sleep(Duration::from_millis(200)).await;

    waiter.shutdown().await.expect("shutdown");

    let closed = eventually(PROMPTLY, || connections(&server) == before_client + 1).await;
    assert!(closed, "the pub/sub connection closed with the shutdown");
    let outcome = waiting.await.expect("no panic");
    assert!(matches!(outcome, Err(Error::Shutdown)), "{outcome:?}");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn the_supervisor_returns_when_its_client_shuts_down_and_a_standby_leads_at_once() {
    let server = RedisServer::start();
    let owner = client(&server).await;
    let election = owner.election("scheduler").expect("name");
    let (started, mut running) = tokio::sync::watch::channel(false);
    // Each run of the task holds a clone: one count left means no task is alive.
    let alive = std::sync::Arc::new(());
    let supervisor = tokio::spawn(async move {
        let result = election
            .lead("owner", std::future::pending(), |_fence| {
                let started = started.clone();
                let alive = std::sync::Arc::clone(&alive);
                async move {
                    let _alive = alive;
                    started.send_replace(true);
                    std::future::pending::<()>().await;
                }
            })
            .await;
        (result, std::sync::Arc::strong_count(&alive))
    });
    tokio::time::timeout(PROMPTLY, running.wait_for(|running| *running))
        .await
        .expect("the task runs")
        .expect("the supervisor is alive");
    let other = client(&server).await;
    let standby = other.election("scheduler").expect("name");
    let taking_over = tokio::spawn(async move { standby.campaign("standby").await });

    owner.shutdown().await.expect("shutdown");

    let (result, tasks_alive) = tokio::time::timeout(PROMPTLY, supervisor)
        .await
        .expect("lead returns at once")
        .expect("no panic");
    assert!(matches!(result, Err(Error::Shutdown)), "{result:?}");
    assert_eq!(tasks_alive, 1, "the task was dropped with its loop");
    let leadership = tokio::time::timeout(PROMPTLY, taking_over)
        .await
        .expect("the standby leads long before the 30 s lease ends")
        .expect("no panic")
        .expect("campaign");
    leadership.resign().await.expect("resign");
}

/// How many connections the server has, `redis-cli`'s own included.
fn connections(server: &RedisServer) -> usize {
    server.cli(&["CLIENT", "LIST"]).lines().count()
}

/// A guard dropped just before the program ends: its release is only queued to the client's
/// background task, and the runtime ends right after; the shutdown must have waited for it.
#[test]
fn shutdown_waits_for_the_release_of_a_guard_just_dropped() {
    let server = RedisServer::start();
    let url = server.url();
    let exiting = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    exiting.block_on(async {
        let owner = Client::connect(url.as_str()).await.expect("connect");
        let options = fencelock::LockOptions::default().lease(Lease::Fixed(LEASE));
        let mutex = owner.mutex_with_options("report", options).expect("name");
        drop(mutex.lock().await.expect("lock"));
        owner.shutdown().await.expect("the queued release answered");
    });
    drop(exiting);

    common::runtime().block_on(async {
        let other = client(&server).await;
        let free = other.mutex("report").expect("name").try_lock().await;
        free.expect("free at once").unlock().await.expect("unlock");
    });
}

#[tokio::test]
async fn shutdown_gives_back_a_redlock_hold_on_every_master() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let owner = Client::connect(Deployment::redlock(urls.clone()).expect("addresses"))
        .await
        .expect("redlock");
    let guard = owner
        .mutex("ledger")
        .expect("name")
        .lock()
        .await
        .expect("lock");

    owner.shutdown().await.expect("a majority answered");

    assert_given_back!(guard, unlock);
    for server in &servers {
        let single = client(server).await;
        let mutex = single.mutex("ledger").expect("name");
        let free = mutex.try_lock().await.expect("free on every master");
        free.unlock().await.expect("unlock");
    }
}

#[cfg(feature = "blocking")]
#[test]
fn blocking_shutdown_gives_back_a_guard_held_by_another_thread() {
    let server = RedisServer::start();
    let owner = fencelock::blocking::Client::connect(server.url().as_str()).expect("connect");
    let mutex = owner.mutex("export").expect("name");
    let (held, hold_until) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let worker = std::thread::spawn({
        let owner = owner.clone();
        move || {
            let guard = owner.lock(mutex.lock()).expect("lock");
            held.0.send(()).expect("the test waits");
            let _ = hold_until.1.recv_timeout(PROMPTLY);
            (guard.is_held(), guard.unlock())
        }
    });
    held.1
        .recv_timeout(PROMPTLY)
        .expect("the worker holds the lock");

    owner.shutdown().expect("shutdown");

    let other = fencelock::blocking::Client::connect(server.url().as_str()).expect("connect");
    let free = other.lock(other.mutex("export").expect("name").try_lock());
    free.expect("free at once").unlock().expect("unlock");
    hold_until.0.send(()).expect("the worker waits");
    let (held, unlocked) = worker.join().expect("no panic");
    assert!(!held);
    assert!(matches!(unlocked, Err(Error::Shutdown)));
    assert!(matches!(
        owner.lock(owner.mutex("export").expect("name").try_lock()),
        Err(Error::Shutdown)
    ));
}
