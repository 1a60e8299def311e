//! Redis Sentinel and replica acknowledgement against real processes: a master, a replica and
//! three sentinels; failovers asked for and forced by killing the master; replicas paused and
//! killed under a client that waits for them.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::common::ms;
use fencelock::{Client, ClientOptions, Deployment, Error, SentinelOptions};
use fencelock_testkit::{RedisServer, SentinelGroup, ServerOptions};

/// Long enough that a waiter woken in time was woken by a release announcement.
const NO_FALLBACK: Duration = Duration::from_secs(30);
/// What the replica-acknowledging clients ask for.
const ACK_TIMEOUT: Duration = Duration::from_millis(200);

/// Runs blocking test-kit work (processes, `redis-cli`, failovers) without stalling the
/// client's background tasks on the runtime.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(work)
}

fn quiet_waiters() -> ClientOptions {
    ClientOptions::default().wake_fallback(NO_FALLBACK)
}

fn acknowledged() -> ClientOptions {
    ClientOptions::default().wait_for_replicas(1, ACK_TIMEOUT)
}

async fn through(group: &SentinelGroup, options: ClientOptions) -> Client {
    let deployment = Deployment::sentinel(group.sentinel_urls(), group.service_name())
        .expect("addresses")
        .sentinel_options(SentinelOptions::default());
    Client::connect_with_options(deployment, options)
        .await
        .expect("connect through the sentinels")
}

/// The key a mutex of `name` is stored under with the default prefix.
fn mutex_key(name: &str) -> String {
    format!("fencelock:{{{name}}}:mutex")
}

/// Whether the mutex key `key` holds a lock (a released one keeps only the last fence, `~<fence>`).
fn holds(server: &RedisServer, key: &str) -> bool {
    let value = server.cli(&["GET", key]);
    !value.is_empty() && !value.starts_with('~')
}

/// Retries `operation` while it fails with an unavailable error, until `limit`; returns the
/// first other outcome and when it came.
async fn once_available<T, F, Fut>(
    limit: Duration,
    mut operation: F,
) -> (fencelock::Result<T>, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = fencelock::Result<T>>,
{
    let started = Instant::now();
    loop {
        match operation().await {
            Err(e) if e.is_unavailable() && started.elapsed() < limit => {
                tokio::time::sleep(ms(50)).await;
            }
            outcome => return (outcome, started.elapsed()),
        }
    }
}

/// A waiter on `name` held by `holder`'s guard is woken by the release announcement (the
/// fallback timer would take 30 s) and gets the lock.
async fn waiter_is_woken_by_the_release(holder: &Client, waiter: &Client, name: &str) {
    let guard = holder
        .mutex(name)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let mutex = waiter.mutex(name).expect("name");
    let waiting = tokio::spawn(async move { mutex.lock().await });
    tokio::time::sleep(ms(300)).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let woken = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .expect("the waiter task")
        .expect("the waiter's lock");
    assert!(released.elapsed() < Duration::from_secs(3));
    woken.unlock().await.expect("the waiter unlocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_through_the_sentinels_and_wakes_waiters() {
    let group = blocking(SentinelGroup::start);
    let a = through(&group, quiet_waiters()).await;
    let b = through(&group, quiet_waiters()).await;

    let guard = a.mutex("report").expect("name").lock().await.expect("lock");
    assert!(blocking(|| holds(
        group.current_master(),
        &mutex_key("report")
    )));
    assert!(matches!(
        b.mutex("report").expect("name").try_lock().await,
        Err(Error::Held { .. })
    ));
    guard.unlock().await.expect("unlock");
    let again = b
        .mutex("report")
        .expect("name")
        .try_lock()
        .await
        .expect("free again");
    again.unlock().await.expect("unlock");

    waiter_is_woken_by_the_release(&a, &b, "report").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_needs_a_sentinel_that_knows_the_service() {
    let none: [&str; 0] = [];
    assert!(matches!(
        Client::connect(Deployment::sentinel(none, "fencelock-test").expect("no address")).await,
        Err(Error::InvalidOption {
            option: "sentinels",
            ..
        })
    ));
    let group = blocking(SentinelGroup::start);
    let unknown =
        Deployment::sentinel(group.sentinel_urls(), "no-such-service").expect("addresses");
    let unknown = Client::connect(unknown).await;
    assert!(
        unknown.is_err(),
        "a service no sentinel monitors was accepted"
    );
}

/// The lock taken before the failover (and known to be on the replica) survives it; the same
/// client's later locks land on the new master within `limit`, and its waiters are woken
/// there.
async fn follows_the_new_master(
    new_master: &RedisServer,
    a: &Client,
    b: &Client,
    held: fencelock::MutexGuard,
    limit: Duration,
) {
    let started = Instant::now();
    let mut probes = 0;
    loop {
        probes += 1;
        let name = format!("after-{probes}");
        let mutex = a.mutex(name.as_str()).expect("name");
        let (guard, _) = once_available(limit, || mutex.try_lock()).await;
        let guard = guard.expect("a lock after the failover");
        let on_new_master = blocking(|| holds(new_master, &mutex_key(&name)));
        guard.unlock().await.expect("unlock after the failover");
        if on_new_master {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "after {limit:?} the client still locks on a node other than the new master"
        );
        tokio::time::sleep(ms(50)).await;
    }
    let ledger = b.mutex("ledger").expect("name");
    let (refused, _) = once_available(limit, || ledger.try_lock()).await;
    assert!(
        matches!(refused, Err(Error::Held { .. })),
        "the lock held across the failover was not found held: {refused:?}"
    );
    held.unlock()
        .await
        .expect("the holder unlocks on the new master");
    waiter_is_woken_by_the_release(a, b, "ledger").await;
}

/// Takes "ledger" and waits until the replica has it, so that the failover cannot lose it.
async fn hold_replicated(group: &SentinelGroup, client: &Client) -> fencelock::MutexGuard {
    let guard = client
        .mutex("ledger")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let replica = blocking(|| group.current_replica());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !blocking(|| holds(replica, &mutex_key("ledger"))) {
        assert!(Instant::now() < deadline, "the replica never got the lock");
        tokio::time::sleep(ms(20)).await;
    }
    guard
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_failover_asked_of_the_sentinels() {
    let group = blocking(SentinelGroup::start);
    let a = through(&group, quiet_waiters()).await;
    let b = through(&group, quiet_waiters()).await;
    // Both clients' subscriptions are open on the first master.
    waiter_is_woken_by_the_release(&a, &b, "warm-up").await;
    let held = hold_replicated(&group, &a).await;

    let old = group.master_port();
    let new = blocking(|| group.failover());
    assert_ne!(old, new);
    // The old master stays a master for seconds until the sentinels demote it: the client
    // must move on the sentinels' announcement, not on the old master's refusal.
    follows_the_new_master(group.current_master(), &a, &b, held, Duration::from_secs(5)).await;
}

/// Kills the master while the sentinel the client listens to for announcements is paused:
/// the client must find the new master through its failed commands alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_replica_elected_after_the_master_is_killed() {
    let mut group = blocking(SentinelGroup::start);
    let a = through(&group, quiet_waiters()).await;
    let b = through(&group, quiet_waiters()).await;
    waiter_is_woken_by_the_release(&a, &b, "warm-up").await;
    let held = hold_replicated(&group, &a).await;

    let old = group.master_port();
    assert_eq!(old, group.node(0).port());
    let announcer = &group.sentinels()[0];
    blocking(|| announcer.pause());
    blocking(|| group.node_mut(0).kill9());
    blocking(|| await_master_named_by_the_others(&group, old));
    // The replica was the only candidate.
    follows_the_new_master(group.node(1), &a, &b, held, Duration::from_secs(10)).await;
    blocking(|| group.sentinels()[0].resume());
}

/// Waits until the sentinels other than the first (paused) one name a new master.
fn await_master_named_by_the_others(group: &SentinelGroup, old: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let new_master = || {
        group.sentinels()[1..].iter().all(|sentinel| {
            let reply =
                sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.service_name()]);
            reply
                .lines()
                .nth(1)
                .is_some_and(|port| port != old.to_string())
        })
    };
    while !new_master() {
        assert!(
            Instant::now() < deadline,
            "the sentinels elected no new master"
        );
        std::thread::sleep(ms(50));
    }
}

/// With the replica unable to acknowledge, `try_lock` and `lock` fail with `NotReplicated`
/// after the acknowledgement timeout, and the grant is gone from the master at once: another
/// client takes the lock immediately.
async fn refused_unless_replicated(waiting: &Client, other: &Client, master: &RedisServer) {
    let mutex = waiting.mutex("payout").expect("name");
    let started = Instant::now();
    match mutex.try_lock().await {
        Err(Error::NotReplicated {
            name,
            acknowledged: 0,
            wanted: 1,
        }) => assert_eq!(name, "payout"),
        other => panic!("try_lock: expected NotReplicated, got {other:?}"),
    }
    assert!(started.elapsed() >= ACK_TIMEOUT);
    assert!(
        !blocking(|| holds(master, &mutex_key("payout"))),
        "the refused grant is left on the master"
    );
    free_for(other).await;

    match mutex.lock().await {
        Err(Error::NotReplicated {
            acknowledged: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("lock: expected NotReplicated, got {other:?}"),
    }
    free_for(other).await;
}

/// Checks that `other` takes "payout" at once: the refused grant left nothing behind.
async fn free_for(other: &Client) {
    let taken = other
        .mutex("payout")
        .expect("name")
        .try_lock()
        .await
        .expect("another client takes it at once");
    taken.unlock().await.expect("unlock");
}

async fn granted_when_replicated(client: &Client, when: &str) {
    let guard = client
        .mutex("payout")
        .expect("name")
        .try_lock()
        .await
        .unwrap_or_else(|e| panic!("try_lock {when}: {e}"));
    guard.unlock().await.expect("unlock");
    let guard = client
        .mutex("payout")
        .expect("name")
        .lock()
        .await
        .unwrap_or_else(|e| panic!("lock {when}: {e}"));
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_sentinels_a_grant_no_replica_acknowledged_is_released() {
    let mut group = blocking(SentinelGroup::start);
    let waiting = through(&group, acknowledged()).await;
    let other = through(&group, ClientOptions::default()).await;
    granted_when_replicated(&waiting, "at first").await;

    blocking(|| group.node(1).pause());
    refused_unless_replicated(&waiting, &other, group.node(0)).await;
    blocking(|| group.node(1).resume());
    granted_when_replicated(&waiting, "after the replica resumed").await;

    blocking(|| group.node_mut(1).kill9());
    refused_unless_replicated(&waiting, &other, group.node(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_single_server_a_grant_no_replica_acknowledged_is_released() {
    let master = blocking(RedisServer::start);
    let mut replica =
        blocking(|| RedisServer::start_with(ServerOptions::default().replica_of(&master)));
    blocking(|| master.wait_replicas_in_sync(1, Duration::from_secs(10)));
    let waiting = Client::connect_with_options(master.url().as_str(), acknowledged())
        .await
        .expect("connect");
    let other = Client::connect(master.url().as_str())
        .await
        .expect("connect");
    granted_when_replicated(&waiting, "at first").await;

    // Every primitive goes through the same acknowledgement.
    let semaphore = waiting.semaphore("printers", 2).expect("name");
    let permit = semaphore.try_acquire().await.expect("granted");
    permit.release().await.expect("release");

    blocking(|| replica.pause());
    refused_unless_replicated(&waiting, &other, &master).await;
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotReplicated { .. })
    ));
    blocking(|| replica.resume());
    granted_when_replicated(&waiting, "after the replica resumed").await;

    blocking(|| replica.kill9());
    refused_unless_replicated(&waiting, &other, &master).await;
}
