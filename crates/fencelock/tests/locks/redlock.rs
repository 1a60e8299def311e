//! RedLock over independent masters: real `redis-server` processes, some of them pre-locked by
//! another owner, down, killed or paused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, ms};
use fencelock::{
    Client, ClientOptions, Deployment, Error, Lease, LockOptions, Lost, Mutex, MutexGuard,
};
use fencelock_testkit::{free_port, RedisServer};

/// The key of the mutex `name` under the default prefix. Held, its value starts with the
/// holder's token; released, it is `~` and the name's last fence, kept for the fence memory.
fn lock_key(name: &str) -> String {
    format!("fencelock:{{{name}}}:mutex")
}

/// Whether a master's value of a mutex key (`None`: no key) holds nothing.
fn is_free(value: Option<&str>) -> bool {
    value.is_none_or(|value| value.starts_with('~'))
}

fn masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

async fn redlock(urls: Vec<String>, options: ClientOptions) -> Client {
    Client::connect_with_options(Deployment::redlock(urls).expect("addresses"), options)
        .await
        .expect("a RedLock client")
}

fn options() -> ClientOptions {
    ClientOptions::default().node_timeout(ms(300))
}

async fn held(client: &Client, name: &str, lease: Lease) -> MutexGuard {
    client
        .mutex_with_options(name, LockOptions::default().lease(lease))
        .expect("name")
        .lock()
        .await
        .expect("lock")
}

/// One lock and unlock, which must both succeed.
async fn cycle(mutex: &Mutex) {
    let guard = mutex.lock().await.expect("lock");
    guard.unlock().await.expect("unlock");
}

/// What a master looks like to the acquiring client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Free,
    LockedByOther,
    Down,
}

const FOREIGN: &str = "FFFFFFFFFFFFFFFFFFFFFF:1:someone-else";

#[tokio::test]
async fn acquire_succeeds_exactly_when_a_majority_of_masters_is_free() {
    let servers = masters(5);
    // A port nothing listens on: a master that is down.
    let down = format!("redis://127.0.0.1:{}/", free_port());
    let name = "quorum";
    let states = [Node::Free, Node::LockedByOther, Node::Down];
    let mut raw = Vec::new();
    for server in &servers {
        raw.push(common::connect_with_raw(&server.url()).await.1);
    }
    let mut combinations = 0;
    for code in 0..3usize.pow(5) {
        let layout: Vec<Node> = (0..5).map(|i| states[code / 3usize.pow(i) % 3]).collect();
        for (conn, node) in raw.iter_mut().zip(&layout) {
            let mut set = redis::pipe();
            set.del(lock_key(name));
            if *node == Node::LockedByOther {
                set.cmd("SET")
                    .arg(lock_key(name))
                    .arg(FOREIGN)
                    .arg("PX")
                    .arg(60_000);
            }
            set.exec_async(conn).await.expect("set up the master");
        }
        let targets = servers
            .iter()
            .zip(&layout)
            .map(|(server, node)| match node {
                Node::Down => down.clone(),
                _ => server.url(),
            })
            .collect();
        let client = redlock(targets, options()).await;
        let free = layout.iter().filter(|n| **n == Node::Free).count();
        let answering = layout.iter().filter(|n| **n != Node::Down).count();
        let result = client.mutex(name).expect("name").try_lock().await;
        match (free >= 3, result) {
            (true, Ok(guard)) => {
                guard.unlock().await.expect("unlock");
            }
            (false, Err(Error::Held { .. })) if answering >= 3 => {}
            (
                false,
                Err(Error::NoQuorum {
                    answered, needed, ..
                }),
            ) if answering < 3 => {
                assert!(answered <= answering && needed == 3, "{layout:?}");
            }
            (_, other) => panic!("{layout:?}: unexpected {:?}", other.map(|_| "granted")),
        }
        // Whatever happened, nothing of ours is left (a refused attempt is released in the
        // background) and the other owner's holds are intact.
        let started = Instant::now();
        loop {
            let mut values = Vec::new();
            for conn in &mut raw {
                let value: Option<String> = redis::cmd("GET")
                    .arg(lock_key(name))
                    .query_async(conn)
                    .await
                    .expect("get");
                values.push(value);
            }
            let settled = values.iter().zip(&layout).all(|(value, node)| match node {
                Node::LockedByOther => value.as_deref() == Some(FOREIGN),
                _ => is_free(value.as_deref()),
            });
            if settled {
                break;
            }
            assert!(
                started.elapsed() < ms(3_000),
                "{layout:?}: a grant was left behind or a foreign one removed: {values:?}"
            );
            tokio::time::sleep(ms(10)).await;
        }
        combinations += 1;
    }
    assert_eq!(combinations, 243);
}

/// With a master down, a mutex another client holds is refused as held, however soon the
/// answers of the masters that refuse it decide the attempt: the down master is one vote
/// short, not an outage.
#[tokio::test]
async fn with_a_master_down_a_held_lock_is_refused_as_held() {
    let mut servers = masters(3);
    let (holder, other) = (
        redlock(urls(&servers), options()).await,
        redlock(urls(&servers), options()).await,
    );
    servers[2].kill9();
    let guard = held(&holder, "busy", Lease::Renewed(Duration::from_secs(30))).await;
    let mutex = other.mutex("busy").expect("name");
    for _ in 0..5 {
        let refused = mutex.try_lock().await;
        assert!(matches!(refused, Err(Error::Held { .. })), "{refused:?}");
    }
    let waited = mutex.lock_timeout(ms(500)).await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn two_masters_down_still_lock_three_down_fail_at_the_wait_limit_with_a_typed_error() {
    let mut servers = masters(5);
    let client = redlock(urls(&servers), options()).await;
    servers[0].kill9();
    servers[1].kill9();
    let mutex = client
        .mutex_with_options(
            "survivor",
            LockOptions::default().lease(Lease::Renewed(ms(900))),
        )
        .expect("name");
    let guard = mutex.lock().await.expect("3 of 5 masters grant it");
    // Renewal keeps it past several leases on the remaining majority.
    tokio::time::sleep(ms(2_000)).await;
    assert!(guard.is_held(), "renewed on 3 of 5 masters");
    assert!(mutex.try_lock().await.is_err(), "and still exclusive");

    servers[2].kill9();
    let lost = tokio::time::timeout(ms(3_000), guard.lost())
        .await
        .expect("the lost signal fires once no majority renews it");
    assert_eq!(lost, Lost::Expired);

    let waiting = client
        .mutex_with_options("another", LockOptions::default().wait_timeout(ms(1_500)))
        .expect("name");
    let started = Instant::now();
    let refused = waiting.lock().await;
    let waited = started.elapsed();
    assert!(
        matches!(refused, Err(Error::NoQuorum { needed: 3, .. })),
        "{refused:?}"
    );
    assert!(refused.is_err_and(|e| e.is_unavailable()));
    assert!(
        waited >= ms(1_400),
        "asked again until the wait limit: {waited:?}"
    );
    assert!(waited < ms(8_000), "then gave up: {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_majority_of_masters_down_for_two_seconds() {
    let servers = masters(3);
    let (holder, waiter) = (
        redlock(urls(&servers), options()).await,
        redlock(urls(&servers), options()).await,
    );
    let held = held(&holder, "blip", Lease::Renewed(Duration::from_secs(30))).await;
    let waiting = tokio::spawn(async move {
        waiter
            .mutex("blip")
            .expect("name")
            .lock_timeout(Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(ms(300)).await;
    let _servers = tokio::task::spawn_blocking(move || {
        let mut servers = servers;
        servers[0].kill9();
        servers[1].kill9();
        std::thread::sleep(Duration::from_secs(2));
        servers[0].restart();
        servers[1].restart();
        servers
    })
    .await
    .expect("the outage's thread");
    // The restarted masters hold nothing: they grant the waiter a majority.
    let taken = waiting
        .await
        .expect("task")
        .expect("the waiter gets the lock once a majority is back");
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the holder learns it lost its majority");
    taken.unlock().await.expect("unlock");
}

#[tokio::test]
async fn restarted_masters_count_again() {
    let mut servers = masters(3);
    let client = redlock(urls(&servers), options()).await;
    let mutex = client.mutex("comeback").expect("name");
    cycle(&mutex).await;
    servers[0].kill9();
    cycle(&mutex).await;
    servers[0].restart();
    servers[1].kill9();
    // Only masters 0 (restarted) and 2 are up: the client must have reconnected to 0.
    let guard = mutex
        .lock()
        .await
        .expect("the restarted master votes again");
    assert_eq!(servers[0].cli(&["EXISTS", &lock_key("comeback")]), "1");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_paused_master_costs_one_node_timeout_at_most() {
    let servers = masters(5);
    let node_timeout = ms(400);
    let client = redlock(urls(&servers), options().node_timeout(node_timeout)).await;
    let mutex = client.mutex("paused").expect("name");
    // Warm every master's script cache and connection first, on another name: a master's
    // first call of a script is reloaded after NOSCRIPT, and its acquire can then land after
    // the release that followed it, leaving that master holding the warm-up's name until its
    // lease ends. Then let every master carry out a release of this name: the release returns
    // once a majority released, and a master still releasing refuses the next acquire. Two
    // such masters and the paused one leave no majority until the paused master's node
    // timeout: contention, not what this test measures.
    cycle(&client.mutex("warm-up").expect("name")).await;
    cycle(&mutex).await;
    released_everywhere(&servers, "paused").await;
    servers[4].pause();
    // A majority answers without the paused master: it costs nothing.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let guard = mutex.lock().await.expect("4 of 5 masters answer");
        slowest = slowest.max(started.elapsed());
        guard.unlock().await.expect("unlock");
    }
    println!("slowest acquire with a paused master: {slowest:?} (node timeout {node_timeout:?})");
    assert!(slowest < node_timeout, "acquire took {slowest:?}");
    // When its vote is needed to decide, the answer comes one node timeout later.
    for server in &servers[..2] {
        server.cli(&["SET", &lock_key("paused"), FOREIGN, "PX", "60000"]);
    }
    let started = Instant::now();
    let refused = mutex.try_lock().await;
    let waited = started.elapsed();
    servers[4].resume();
    println!("refusal that needed the paused master: {waited:?}");
    assert!(matches!(refused, Err(Error::Held { .. })), "{refused:?}");
    // One node timeout, not two; the rest is slack for a loaded machine.
    assert!(
        waited >= node_timeout && waited < node_timeout * 2,
        "{waited:?}"
    );
}

/// Waits until no master holds the mutex `name`, for at most 10 s. It yields to the runtime
/// while it waits: an unlock returns once a majority released, and the releases on their way
/// to the other masters are tasks of this runtime.
async fn released_everywhere(servers: &[RedisServer], name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let held = |server: &RedisServer| {
        let value = server.cli(&["GET", &lock_key(name)]);
        !is_free(Some(value.as_str()).filter(|v| !v.is_empty()))
    };
    while servers.iter().any(held) {
        assert!(Instant::now() < deadline, "{name} is still held somewhere");
        tokio::time::sleep(ms(5)).await;
    }
}

#[tokio::test]
async fn clients_on_five_masters_exclude_each_other() {
    let servers = masters(5);
    let inside = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let client = redlock(urls(&servers), options()).await;
        let (inside, count) = (Arc::clone(&inside), Arc::clone(&count));
        tasks.spawn(async move {
            let mutex = client.mutex("shared").expect("name");
            for _ in 0..15 {
                let guard = mutex.lock().await.expect("lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let seen = count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                count.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
        });
    }
    let done = common::join_within(tasks, ms(60_000)).await;
    assert_eq!(done.len(), 4);
    assert_eq!(count.load(Ordering::SeqCst), 60);
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_its_fallback() {
    let servers = masters(3);
    let slow = options().wake_fallback(Duration::from_secs(10));
    let holder = redlock(urls(&servers), slow.clone()).await;
    let waiter = redlock(urls(&servers), slow).await;
    let guard = holder
        .mutex("wake")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiting = tokio::spawn(async move {
        let guard = waiter.mutex("wake").expect("name").lock().await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let (acquired, guard) = tokio::time::timeout(ms(3_000), waiting)
        .await
        .expect("woken well before the 10 s fallback")
        .expect("task");
    guard.expect("lock").unlock().await.expect("unlock");
    assert!(acquired - released < ms(1_000), "{:?}", acquired - released);
}

#[tokio::test]
async fn fences_rise_even_when_the_next_majority_is_another_one() {
    let servers = masters(5);
    let client = redlock(urls(&servers), options()).await;
    let name = "fenced";
    let mutex = client.mutex(name).expect("name");
    // Master 0 remembers a fence far ahead (a released value, as a release leaves it): its
    // fences are the highest.
    let ahead = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_micros(),
    )
    .expect("fits")
        + 3_600_000_000;
    servers[0].cli(&["SET", &lock_key(name), &format!("~{ahead}"), "PX", "600000"]);
    // First grant on masters 0, 1, 2 (3 and 4 are held by someone else meanwhile).
    for i in [3, 4] {
        servers[i].cli(&["SET", &lock_key(name), FOREIGN, "PX", "60000"]);
    }
    let first_guard = mutex.lock().await.expect("lock");
    let first = first_guard.fence();
    first_guard.unlock().await.expect("unlock");
    for i in [3, 4] {
        servers[i].cli(&["DEL", &lock_key(name)]);
    }
    // Second grant on masters 2, 3, 4: it never asks master 0.
    for i in [0, 1] {
        servers[i].cli(&["SET", &lock_key(name), FOREIGN, "PX", "60000"]);
    }
    let second = mutex.lock().await.expect("lock");
    println!("fences: {first} then {}", second.fence());
    assert!(first.get() > ahead);
    assert!(second.fence() > first, "{first} then {}", second.fence());
    second.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_lease_that_loses_its_majority_is_reported_lost() {
    let servers = masters(5);
    let client = redlock(urls(&servers), options()).await;
    let guard = held(&client, "revoked", Lease::Renewed(ms(900))).await;
    // The lock returns once a majority granted it: the other masters' grants may land later, or
    // never (a request that outlasts the node timeout, as on a loaded machine, is given up).
    // Three masters that hold it stay; every other master gets a foreign holder, which also
    // keeps a grant still on its way from landing there.
    tokio::time::sleep(ms(200)).await;
    let holding: Vec<usize> = (0..servers.len())
        .filter(|&i| {
            let value = servers[i].cli(&["GET", &lock_key("revoked")]);
            !value.is_empty() && value != FOREIGN
        })
        .collect();
    assert!(holding.len() >= 3, "granted by a majority: {holding:?}");
    let kept = &holding[..3];
    for (i, server) in servers.iter().enumerate() {
        if !kept.contains(&i) {
            server.cli(&["SET", &lock_key("revoked"), FOREIGN, "PX", "60000"]);
        }
    }
    tokio::time::sleep(ms(700)).await;
    assert!(guard.is_held(), "3 of 5 still renew it");
    // Three masters no longer holding it is not survivable.
    servers[kept[0]].cli(&["SET", &lock_key("revoked"), FOREIGN, "PX", "60000"]);
    let lost = tokio::time::timeout(ms(2_000), guard.lost())
        .await
        .expect("lost within a renewal interval or so");
    assert_eq!(lost, Lost::Revoked);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn extension_needs_a_majority() {
    let servers = masters(3);
    let client = redlock(urls(&servers), options()).await;
    let guard = held(&client, "extended", Lease::Fixed(ms(2_000))).await;
    guard.extend(ms(30_000)).await.expect("extended");
    // It returns once a majority extended; the last master follows at once.
    let extended = || {
        servers
            .iter()
            .filter(|server| {
                server
                    .cli(&["PTTL", &lock_key("extended")])
                    .parse::<u64>()
                    .is_ok_and(|pttl| pttl > 20_000)
            })
            .count()
    };
    assert!(extended() >= 2);
    assert!(common::eventually(ms(2_000), || extended() == 3).await);
    servers[0].cli(&["DEL", &lock_key("extended")]);
    guard
        .extend(ms(30_000))
        .await
        .expect("2 of 3 still extend it");
    servers[1].cli(&["DEL", &lock_key("extended")]);
    assert!(matches!(
        guard.extend(ms(30_000)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(!guard.is_held());
}

#[tokio::test]
async fn only_the_mutex_is_offered_on_redlock() {
    let servers = masters(3);
    let client = redlock(urls(&servers), options()).await;
    assert!(client.mutex("m").is_ok());
    let refused = [
        client.rwlock("r").map(drop),
        client.semaphore("s", 2).map(drop),
        client.fair_mutex("f").map(drop),
        client.reentrant_mutex("e").map(drop),
        client.multi_mutex(["a", "b"]).map(drop),
        client.locks("*").await.map(drop),
        client.force_unlock("m").await.map(drop),
    ];
    for result in refused {
        assert!(
            matches!(result, Err(Error::Unsupported { .. })),
            "{result:?}"
        );
    }
    let none = Deployment::redlock(Vec::<String>::new()).expect("no address to parse");
    assert!(matches!(
        Client::connect(none).await,
        Err(Error::InvalidOption {
            option: "masters",
            ..
        })
    ));
}
