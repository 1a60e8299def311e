//! Redis Cluster against real processes: three masters and their replicas. Every primitive on
//! names spread over the masters, waiters woken by announcements (sharded, or broadcast where
//! the server has no sharded pub/sub), batch renewal across slots, and locks held through a
//! manual failover and through a slot migration.

use std::time::{Duration, Instant};

use fencelock::{
    Client, ClientOptions, Deployment, DeploymentWarning, Error, Layout, Lease, LockOptions,
};
use fencelock_testkit::RedisCluster;

/// Long enough that a waiter woken in time was woken by a release announcement.
const NO_FALLBACK: Duration = Duration::from_secs(30);
/// A renewed lease short enough that a test outlives several of them.
const SHORT: Duration = Duration::from_millis(900);
/// Bounds each wait of the tests.
const LIMIT: Duration = Duration::from_secs(10);

/// Runs blocking test-kit work (processes, `redis-cli`) without stalling the client's
/// background tasks.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(work)
}

async fn client(cluster: &RedisCluster) -> Client {
    let options = ClientOptions::default().wake_fallback(NO_FALLBACK);
    Client::connect_with_options(
        Deployment::cluster(cluster.urls()).expect("addresses"),
        options,
    )
    .await
    .expect("connect to the cluster")
}

/// The key a mutex of `name` is stored under with the default prefix.
fn mutex_key(name: &str) -> String {
    format!("fencelock:{{{name}}}:mutex")
}

/// Names whose slots are served by every master, one name per master.
fn names_on_every_master(cluster: &RedisCluster, stem: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut masters = Vec::new();
    for i in 0..1000 {
        let name = format!("{stem}-{i}");
        let port = cluster
            .master_of(RedisCluster::slot_of(mutex_key(&name)))
            .port();
        if !masters.contains(&port) {
            masters.push(port);
            names.push(name);
        }
        if masters.len() == 3 {
            return names;
        }
    }
    panic!("no names found on every master: {masters:?}");
}

fn short_lease() -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(SHORT))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_names_of_every_master() {
    let cluster = blocking(RedisCluster::start);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    for name in blocking(|| names_on_every_master(&cluster, "prim")) {
        let guard = a.mutex(&name).expect("name").lock().await.expect("lock");
        assert!(matches!(
            b.mutex(&name).expect("name").try_lock().await,
            Err(Error::Held { .. })
        ));
        let waiter = {
            let b = b.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let guard = b.mutex(&name).expect("name").lock_timeout(LIMIT).await;
                (guard, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fence = guard.fence();
        guard.unlock().await.expect("unlock");
        let (taken, waited) = waiter.await.expect("waiter task");
        let taken = taken.expect("the waiter gets the lock");
        assert!(taken.fence() > fence, "fences rise");
        assert!(
            waited < ANNOUNCED_WITHIN,
            "woken by the sharded announcement"
        );
        taken.unlock().await.expect("unlock");

        let (alice, bob) = (
            a.holder_named("alice").expect("holder"),
            b.holder_named("bob").expect("holder"),
        );
        let reentrant = a.reentrant_mutex(&name).expect("name");
        let first = reentrant.lock(&alice).await.expect("lock");
        let again = reentrant.lock(&alice).await.expect("re-enter");
        assert!(b
            .reentrant_mutex(&name)
            .expect("name")
            .try_lock(&bob)
            .await
            .is_err());
        again.unlock().await.expect("unlock");
        first.unlock().await.expect("unlock");

        let rw = a.rwlock(&name).expect("name");
        let read_a = rw.read_as(&alice).await.expect("read");
        let read_b = b
            .rwlock(&name)
            .expect("name")
            .read_as(&bob)
            .await
            .expect("read");
        assert!(
            rw.try_write_as(&alice).await.is_err(),
            "readers exclude a writer"
        );
        read_a.unlock().await.expect("unlock");
        read_b.unlock().await.expect("unlock");
        rw.write_as(&alice)
            .await
            .expect("write")
            .unlock()
            .await
            .expect("unlock");

        let semaphore = a.semaphore(&name, 2).expect("name");
        let one = semaphore.acquire().await.expect("permit");
        let two = b
            .semaphore(&name, 2)
            .expect("name")
            .acquire()
            .await
            .expect("permit");
        assert!(semaphore.try_acquire().await.is_err(), "two of two taken");
        one.release().await.expect("release");
        two.release().await.expect("release");

        let fair = a.fair_mutex(&name).expect("name");
        let held = fair.lock().await.expect("lock");
        assert!(b.fair_mutex(&name).expect("name").try_lock().await.is_err());
        held.unlock().await.expect("unlock");

        let multi = a.multi_mutex([name.as_str()]).expect("names");
        multi
            .lock()
            .await
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_renews_leases_on_every_master() {
    let cluster = blocking(RedisCluster::start);
    let a = client(&cluster).await;
    let names = blocking(|| names_on_every_master(&cluster, "renew"));
    let mut guards = Vec::new();
    for name in &names {
        let mutex = a.mutex_with_options(name, short_lease()).expect("name");
        guards.push(mutex.lock().await.expect("lock"));
    }
    tokio::time::sleep(SHORT * 3).await;
    for (guard, name) in guards.iter().zip(&names) {
        assert!(guard.is_held(), "{name} renewed");
        let pttl: i64 = blocking(|| {
            let master = cluster.master_of(RedisCluster::slot_of(mutex_key(name)));
            master
                .cli(&["PTTL", &mutex_key(name)])
                .parse()
                .expect("PTTL")
        });
        assert!(pttl > 0, "{name} still has its key, PTTL {pttl}");
    }
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_across_a_manual_failover() {
    let cluster = blocking(RedisCluster::start);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let slot = RedisCluster::slot_of(mutex_key("failover"));
    let held = HeldOnSlot::take(&a, &b, "failover").await;

    let old_master = blocking(|| cluster.master_of(slot).port());
    let new_master = blocking(|| cluster.failover(slot));
    assert_ne!(old_master, new_master);
    tokio::time::sleep(SHORT * 3).await;
    held.check_and_release(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_held_across_a_slot_migration() {
    let cluster = blocking(RedisCluster::start);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let slot = RedisCluster::slot_of(mutex_key("migrating"));
    let held = HeldOnSlot::take(&a, &b, "migrating").await;

    let migration = blocking(|| cluster.begin_migration(slot));
    tokio::time::sleep(SHORT).await;
    assert!(
        held.renewed.is_held(),
        "renewed while the slot is migrating"
    );
    blocking(|| cluster.move_keys(&migration));
    tokio::time::sleep(SHORT * 2).await;
    assert!(held.renewed.is_held(), "renewed through ASK redirections");
    blocking(|| cluster.finish_migration(&migration));
    tokio::time::sleep(SHORT * 2).await;
    let owner = blocking(|| cluster.master_of(slot).port());
    assert_eq!(owner, migration.target_port());
    held.check_and_release(&b).await;
}

/// Two locks on one slot, and a waiter: `renewed` has a lease shorter than the fault, so it
/// survives only if its renewals reach the slot's master; `watched` has the default 30 s
/// lease, so the waiter on it, whose fallback timer is 15 s at least, gets it within a few
/// seconds of its release only through the release announcement.
struct HeldOnSlot {
    renewed: fencelock::MutexGuard,
    watched: fencelock::MutexGuard,
    watched_name: String,
    waiter: tokio::task::JoinHandle<fencelock::Result<fencelock::MutexGuard>>,
}

impl HeldOnSlot {
    async fn take(a: &Client, b: &Client, name: &str) -> HeldOnSlot {
        let renewed = a
            .mutex_with_options(name, short_lease())
            .expect("name")
            .lock()
            .await
            .expect("lock");
        let watched_name = name_on_slot_of(name);
        let watched = a
            .mutex(&watched_name)
            .expect("name")
            .lock()
            .await
            .expect("lock");
        let waiter = {
            let b = b.clone();
            let name = watched_name.clone();
            tokio::spawn(async move { b.mutex(&name).expect("name").lock_timeout(LIMIT * 6).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        HeldOnSlot {
            renewed,
            watched,
            watched_name,
            waiter,
        }
    }

    async fn check_and_release(self, b: &Client) {
        assert!(
            self.renewed.is_held(),
            "the short lease was renewed on the slot's master"
        );
        let name = self.renewed.name().to_owned();
        assert!(matches!(
            b.mutex(&name).expect("name").try_lock().await,
            Err(Error::Held { .. })
        ));
        self.renewed
            .unlock()
            .await
            .expect("unlock on the slot's master");
        assert!(
            !self.waiter.is_finished(),
            "nobody took {} meanwhile",
            self.watched_name
        );
        let released_at = Instant::now();
        self.watched.unlock().await.expect("unlock");
        let taken = tokio::time::timeout(ANNOUNCED_WITHIN, self.waiter)
            .await
            .expect("the waiter is woken by the release announcement")
            .expect("waiter task")
            .expect("the waiter gets the lock");
        assert!(released_at.elapsed() < ANNOUNCED_WITHIN);
        taken.unlock().await.expect("unlock");
    }
}

/// Within this time of a release, a waiter was woken by its announcement, not its timer.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(3);

/// Another name whose keys hash to the same slot as `name`'s.
fn name_on_slot_of(name: &str) -> String {
    let slot = RedisCluster::slot_of(mutex_key(name));
    (0..2_000_000)
        .map(|i| format!("{name}-{i}"))
        .find(|other| RedisCluster::slot_of(mutex_key(other)) == slot)
        .expect("a name on the same slot")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_over_several_slots_is_refused_with_a_typed_error() {
    let cluster = blocking(RedisCluster::start);
    let a = client(&cluster).await;
    let names = blocking(|| names_on_every_master(&cluster, "multi"));
    match a.multi_mutex(&names) {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_layouts_run_on_the_master_of_their_key_s_slot() {
    let cluster = blocking(RedisCluster::start);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    // Redisson's unlock message, sharded on the slot of the lock's name, wakes a waiter whose
    // fallback is longer than the test.
    let held = a
        .foreign_mutex(Layout::Redisson, "invoices")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.foreign_mutex(Layout::Redisson, "invoices")
                .expect("name")
                .lock_timeout(LIMIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    waiter
        .await
        .expect("task")
        .expect("woken by the message")
        .unlock()
        .await
        .expect("unlock");
    assert!(released.elapsed() < Duration::from_secs(5));

    // python-redis-lock's key and signal list must share a slot: a hash tag makes them.
    let whole_seconds = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(2)));
    let untagged = (0..64)
        .map(|n| format!("reports-{n}"))
        .find(|name| {
            RedisCluster::slot_of(format!("lock:{name}"))
                != RedisCluster::slot_of(format!("lock-signal:{name}"))
        })
        .expect("a name whose two keys fall in two slots");
    assert!(matches!(
        a.foreign_mutex_with_options(Layout::PythonRedisLock, &untagged, whole_seconds.clone()),
        Err(Error::InvalidName { .. })
    ));
    let tagged = a
        .foreign_mutex_with_options(Layout::PythonRedisLock, "{reports}", whole_seconds)
        .expect("one slot");
    tagged
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let plain = a
        .foreign_mutex(Layout::RedisPy, "jobs:nightly")
        .expect("name");
    plain
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_wait_for_the_replica_of_their_slot() {
    let cluster = blocking(RedisCluster::start);
    let options = ClientOptions::default().wait_for_replicas(1, Duration::from_millis(500));
    let a = Client::connect_with_options(
        Deployment::cluster(cluster.urls()).expect("addresses"),
        options,
    )
    .await
    .expect("connect");
    let names = blocking(|| names_on_every_master(&cluster, "acked"));
    // A replica acknowledges writes only some time after its sync: up to seconds on Valkey 8.
    for name in &names {
        let deadline = Instant::now() + LIMIT;
        loop {
            match a.mutex(name).expect("name").lock().await {
                Ok(guard) => break guard.unlock().await.expect("unlock"),
                Err(Error::NotReplicated { .. }) if Instant::now() < deadline => {}
                Err(e) => panic!("not acknowledged within {LIMIT:?}: {e:?}"),
            }
        }
    }
    // With the replica of the first name's slot paused, only that name's grants go
    // unacknowledged: the WAIT went to that slot's master, not to any other.
    let paused = RedisCluster::slot_of(mutex_key(&names[0]));
    blocking(|| cluster.replica_of(paused).pause());
    let first = a.mutex(&names[0]).expect("name").try_lock().await;
    let others = {
        let mut others = Vec::new();
        for name in &names[1..] {
            others.push(a.mutex(name).expect("name").try_lock().await);
        }
        others
    };
    blocking(|| cluster.replica_of(paused).resume());
    assert!(
        matches!(first, Err(Error::NotReplicated { .. })),
        "{first:?}"
    );
    for other in others {
        other
            .expect("acknowledged by its own slot's replica")
            .unlock()
            .await
            .expect("unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_and_forced_release_cover_every_master() {
    let cluster = blocking(RedisCluster::start);
    let (a, b) = (client(&cluster).await, client(&cluster).await);
    let names = blocking(|| names_on_every_master(&cluster, "seen"));
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.mutex(name).expect("name").lock().await.expect("lock"));
    }
    let listed: Vec<String> = a
        .locks("seen-*")
        .await
        .expect("locks")
        .into_iter()
        .map(|info| info.name)
        .collect();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected, "a lock on every master is listed");

    let name = names[0].clone();
    let waiter = {
        let b = b.clone();
        let name = name.clone();
        tokio::spawn(async move { b.mutex(&name).expect("name").lock_timeout(LIMIT).await })
    };
    let deadline = Instant::now() + LIMIT;
    loop {
        let info = a.locks_named(&name).await.expect("locks_named");
        if info.first().is_some_and(|i| i.waiting_clients == 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sharded subscriber is never counted: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let removed = a.force_unlock(&name).await.expect("force_unlock");
    assert_eq!(removed.len(), 1);
    let taken = tokio::time::timeout(ANNOUNCED_WITHIN, waiter)
        .await
        .expect("the forced release is announced")
        .expect("waiter task")
        .expect("the waiter gets the lock");
    taken.unlock().await.expect("unlock");
    for guard in guards {
        let _ = guard.unlock().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_sharded_pubsub_is_warned_that_releases_are_broadcast() {
    let cluster = blocking(RedisCluster::start);
    let c = client(&cluster).await;
    let warnings = c.deployment_warnings().await.expect("warnings");
    // Every master's settings are read (`INFO` goes to each), and each warning comes once.
    assert!(
        !warnings
            .iter()
            .any(|w| matches!(w, DeploymentWarning::Unreadable { .. })),
        "{warnings:?}"
    );
    let no_aof = warnings
        .iter()
        .filter(|w| **w == DeploymentWarning::NoAppendOnlyFile)
        .count();
    assert_eq!(
        no_aof, 1,
        "the test cluster's masters run without AOF: {warnings:?}"
    );
    let broadcast: Vec<String> = warnings
        .iter()
        .filter(|w| matches!(w, DeploymentWarning::BroadcastReleases { .. }))
        .map(ToString::to_string)
        .collect();
    let server = fencelock_testkit::server_version();
    if fencelock_testkit::server_has_sharded_pubsub() {
        assert!(broadcast.is_empty(), "{server}: {warnings:?}");
    } else {
        assert_eq!(broadcast.len(), 1, "{server}: {warnings:?}");
        assert!(
            broadcast[0].contains(server),
            "names the server: {broadcast:?}"
        );
    }
}
