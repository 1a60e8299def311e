//! Leader election against a real redis-server: leading, handing over, publishing a value,
//! observing every change, the supervisor loop, bad keys and refusals; through a Sentinel failover
//! and on a Cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::common::{self, client, client_with, ms};
use fencelock::{
    Client, ClientOptions, Deployment, Election, Error, LeaderWatch, Lease, LockOptions, Lost,
    SentinelOptions,
};
use fencelock_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// Long enough that a wait that ends in time was ended by an announcement.
const NO_FALLBACK: Duration = Duration::from_secs(30);
/// Bounds every wait of these tests.
const LIMIT: Duration = Duration::from_secs(10);

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

async fn announced_only(server: &RedisServer) -> Client {
    client_with(server, ClientOptions::default().wake_fallback(NO_FALLBACK)).await
}

/// The watch's next state, within [`LIMIT`].
async fn next(watch: &mut LeaderWatch) -> Option<(String, u64)> {
    tokio::time::timeout(LIMIT, watch.next())
        .await
        .expect("the watch answers in time")
        .expect("the leader can be read")
        .map(|leader| (leader.value().to_owned(), leader.fence().get()))
}

#[tokio::test]
async fn one_leader_at_a_time_and_a_resignation_hands_over_at_once() {
    let server = RedisServer::start();
    let a = announced_only(&server).await;
    let b = announced_only(&server).await;
    let election = a.election("scheduler").expect("name");
    assert!(election.leader().await.expect("read").is_none());

    let before = SystemTime::now() - Duration::from_secs(5);
    let first = election.campaign("host-a:1").await.expect("campaign");
    let leader = election.leader().await.expect("read").expect("a leader");
    assert_eq!(leader.value(), "host-a:1");
    assert_eq!(leader.fence(), first.fence());
    assert!(leader.since() > before && leader.since() < SystemTime::now() + LIMIT);
    assert!(first.is_held());

    let standby = tokio::spawn({
        let election = b.election("scheduler").expect("name");
        async move {
            let leadership = election.campaign("host-b:2").await.expect("campaign");
            (Instant::now(), leadership)
        }
    });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !standby.is_finished(),
        "a second leader while the first leads"
    );
    let resigned = Instant::now();
    first.resign().await.expect("resign");
    let (took_over, second) = tokio::time::timeout(LIMIT, standby)
        .await
        .expect("the standby takes over")
        .expect("task");
    let handover = took_over - resigned;
    assert!(
        handover < ms(2_000),
        "with a fallback of 30 s only the announcement can have woken it: {handover:?}"
    );
    assert!(
        second.fence() > leader.fence(),
        "fences rise with each leader"
    );
    let now = election.leader().await.expect("read").expect("a leader");
    assert_eq!((now.value(), now.fence()), ("host-b:2", second.fence()));
    second.resign().await.expect("resign");
}

#[tokio::test]
async fn proclaim_changes_the_value_only_while_leading() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let election = c
        .election_with_options("primary", renewed(ms(600)))
        .expect("name");
    let leadership = election.campaign("starting").await.expect("campaign");
    let at_start = election.leader().await.expect("read").expect("a leader");
    leadership.proclaim("ready: a:b:c").await.expect("proclaim");
    let proclaimed = election.leader().await.expect("read").expect("a leader");
    assert_eq!(proclaimed.value(), "ready: a:b:c");
    assert_eq!(proclaimed.fence(), at_start.fence(), "same leadership");
    assert_eq!(proclaimed.since(), at_start.since(), "same leadership");
    let pttl: i64 = server
        .cli(&["PTTL", "fencelock:{primary}:election"])
        .parse()
        .expect("pttl");
    assert!(pttl > 0, "the lease is kept: {pttl}");

    // Someone removes the leader key: the leadership is gone, and a proclamation says so.
    server.cli(&["DEL", "fencelock:{primary}:election"]);
    match leadership.proclaim("still me?").await {
        Err(Error::NotHeld { name }) => assert_eq!(name, "primary"),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert!(!leadership.is_held());
    assert_eq!(leadership.lost().await, Lost::Revoked);
    assert!(
        election.leader().await.expect("read").is_none(),
        "nothing written"
    );
}

/// Runs `change` while `watch` waits, having first checked that the watch saw no change for
/// a while (so it is waiting, with no earlier wake left over), and answers the change's output
/// and the state the watch then answers.
async fn after<T>(
    watch: &mut LeaderWatch,
    change: impl std::future::Future<Output = T>,
) -> (T, Option<(String, u64)>) {
    let mut waiting = std::pin::pin!(next(watch));
    assert!(
        tokio::time::timeout(ms(300), &mut waiting).await.is_err(),
        "the watch answered before the change"
    );
    let output = change.await;
    (output, waiting.await)
}

#[tokio::test]
async fn an_observer_sees_every_change_in_order() {
    let server = RedisServer::start();
    let c = announced_only(&server).await;
    let other = announced_only(&server).await;
    let election = c.election("consumer").expect("name");
    let mut watch = election.observe();
    assert_eq!(next(&mut watch).await, None, "nobody leads at first");

    let (a, seen) = after(&mut watch, election.campaign("a")).await;
    let a = a.expect("campaign");
    let fa = a.fence().get();
    assert_eq!(seen, Some(("a".into(), fa)));
    let (proclaimed, seen) = after(&mut watch, a.proclaim("a2")).await;
    proclaimed.expect("proclaim");
    assert_eq!(seen, Some(("a2".into(), fa)));
    let (resigned, seen) = after(&mut watch, a.resign()).await;
    resigned.expect("resign");
    assert_eq!(seen, None);
    let other = other.election("consumer").expect("name");
    let (b, seen) = after(&mut watch, other.campaign("b")).await;
    let b = b.expect("campaign");
    assert_eq!(seen, Some(("b".into(), b.fence().get())));
    assert!(b.fence().get() > fa);
    let ((), seen) = after(&mut watch, async move { drop(b) }).await;
    assert_eq!(seen, None, "a dropped leadership resigns");

    // Without a resignation the change comes with the lease's end, not the 30 s fallback.
    let fixed = c
        .election_with_options(
            "consumer",
            LockOptions::default().lease(Lease::Fixed(ms(500))),
        )
        .expect("name");
    let (held, seen) = after(&mut watch, fixed.campaign("c")).await;
    let held = held.expect("campaign");
    assert_eq!(seen, Some(("c".into(), held.fence().get())));
    let started = Instant::now();
    assert_eq!(next(&mut watch).await, None, "the lease ran out");
    assert!(started.elapsed() < ms(5_000), "{:?}", started.elapsed());
    assert_eq!(held.lost().await, Lost::Expired);
}

#[tokio::test]
async fn the_supervisor_runs_the_task_only_while_leading_and_resigns_on_shutdown() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let election = c
        .election_with_options("compaction", renewed(ms(600)))
        .expect("name");
    let terms = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let supervisor = tokio::spawn({
        let election = election.clone();
        let (terms, running) = (Arc::clone(&terms), Arc::clone(&running));
        async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            election
                .lead("worker-1", shutdown, move |_fence| {
                    let running = Arc::clone(&running);
                    terms.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let _running = Running::enter(running);
                        std::future::pending::<()>().await;
                    }
                })
                .await
        }
    });
    wait_until(|| running.load(Ordering::SeqCst) == 1).await;
    let first = election.leader().await.expect("read").expect("leads");
    assert_eq!(first.value(), "worker-1");

    // The leadership is taken away: the task is stopped, and the loop campaigns again.
    server.cli(&["DEL", "fencelock:{compaction}:election"]);
    wait_until(|| terms.load(Ordering::SeqCst) == 2).await;
    wait_until(|| running.load(Ordering::SeqCst) == 1).await;
    let second = election.leader().await.expect("read").expect("leads");
    assert!(second.fence() > first.fence());

    stop.send(()).expect("the supervisor listens");
    tokio::time::timeout(LIMIT, supervisor)
        .await
        .expect("shutdown is prompt")
        .expect("task")
        .expect("no error");
    assert_eq!(running.load(Ordering::SeqCst), 0, "the task was stopped");
    assert!(
        election.leader().await.expect("read").is_none(),
        "resigned, not left to expire"
    );
}

/// Counts a running task; the count drops when its future is dropped.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn enter(count: Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::SeqCst);
        Running(count)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn wait_until(condition: impl Fn() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {LIMIT:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

#[tokio::test]
async fn a_cancelled_campaign_leaves_nobody_leading() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let election = c.election("cancelled").expect("name");
    for _ in 0..20 {
        let campaign = election.campaign("x");
        let _ = tokio::time::timeout(Duration::from_micros(300), campaign).await;
    }
    let deadline = Instant::now() + LIMIT;
    while election.leader().await.expect("read").is_some() {
        assert!(
            Instant::now() < deadline,
            "a cancelled campaign kept leading"
        );
        tokio::time::sleep(ms(20)).await;
    }
    let leadership = election.campaign("y").await.expect("free");
    leadership.resign().await.expect("resign");
}

#[tokio::test]
async fn foreign_keys_give_typed_errors_and_redlock_refuses() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["HSET", "fencelock:{hash}:election", "f", "v"]);
    let hash = c.election("hash").expect("name");
    assert!(matches!(hash.leader().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        hash.campaign("v").await,
        Err(Error::WrongType { .. })
    ));
    server.cli(&["SET", "fencelock:{garbage}:election", "not-ours"]);
    let garbage = c.election("garbage").expect("name");
    assert!(matches!(
        garbage.leader().await,
        Err(Error::UnexpectedReply { .. })
    ));
    assert!(matches!(c.election(""), Err(Error::InvalidName { .. })));

    let others = [RedisServer::start(), RedisServer::start()];
    let urls = [server.url(), others[0].url(), others[1].url()];
    let redlock = Client::connect(Deployment::redlock(urls).expect("addresses"))
        .await
        .expect("connect");
    assert!(matches!(
        redlock.election("x"),
        Err(Error::Unsupported { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_leader_is_announced_and_handed_over() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let options = ClientOptions::default().wake_fallback(NO_FALLBACK);
    let c = Client::connect_with_options(
        Deployment::cluster(cluster.urls()).expect("addresses"),
        options,
    )
    .await
    .expect("connect");
    let elections: Vec<Election> = (0..3)
        .map(|i| c.election(format!("cluster-{i}")).expect("name"))
        .collect();
    for election in &elections {
        let mut watch = election.observe();
        assert_eq!(next(&mut watch).await, None);
        let first = election.campaign("a").await.expect("campaign");
        assert_eq!(
            next(&mut watch).await,
            Some(("a".into(), first.fence().get()))
        );
        let standby = tokio::spawn({
            let election = election.clone();
            async move { election.campaign("b").await.expect("campaign") }
        });
        tokio::time::sleep(ms(200)).await;
        first.resign().await.expect("resign");
        let second = tokio::time::timeout(ms(3_000), standby)
            .await
            .expect("a sharded announcement woke the standby")
            .expect("task");
        let seen = next(&mut watch).await;
        // The watch may see the gap between the two leaders, or only its end.
        let seen = if seen.is_none() {
            next(&mut watch).await
        } else {
            seen
        };
        assert_eq!(seen, Some(("b".into(), second.fence().get())));
        second.resign().await.expect("resign");
    }
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_api_campaigns_observes_and_hands_over() {
    let server = RedisServer::start();
    let client = fencelock::blocking::Client::connect(server.url().as_str()).expect("connect");
    let election = client.election("blocking").expect("name");
    let mut watch = election.observe();
    assert!(client.block_on(watch.next()).expect("read").is_none());
    let first = client.lock(election.campaign("a")).expect("campaign");
    let seen = client
        .block_on(watch.next())
        .expect("read")
        .expect("a leader");
    assert_eq!((seen.value(), seen.fence()), ("a", first.fence()));
    // The timer is made inside the client's runtime: outside any, tokio's timers panic.
    let unchanged = client.block_on(async {
        match tokio::time::timeout(ms(200), watch.next()).await {
            Ok(state) => state.map(Some),
            Err(_elapsed) => Ok(None),
        }
    });
    assert_eq!(unchanged.expect("read"), None, "no change");

    let standby = std::thread::spawn({
        let (client, election) = (client.clone(), election.clone());
        move || {
            client
                .lock(election.campaign("b"))
                .map(|leadership| leadership.fence())
        }
    });
    std::thread::sleep(ms(200));
    first.proclaim("a2").expect("proclaim");
    assert_eq!(
        client
            .block_on(watch.next())
            .expect("read")
            .expect("a leader")
            .value(),
        "a2"
    );
    let before = first.fence();
    first.resign().expect("resign");
    let after = standby.join().expect("no panic").expect("campaign");
    assert!(after > before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sentinel_failover_the_leader_keeps_leading_and_hands_over() {
    let group = tokio::task::block_in_place(SentinelGroup::start);
    let through = || async {
        let deployment = Deployment::sentinel(group.sentinel_urls(), group.service_name())
            .expect("addresses")
            .sentinel_options(SentinelOptions::default());
        Client::connect_with_options(
            deployment,
            ClientOptions::default().wake_fallback(NO_FALLBACK),
        )
        .await
        .expect("connect through the sentinels")
    };
    let (a, b) = (through().await, through().await);
    let election = a.election("failover").expect("name");
    let mut watch = b.election("failover").expect("name").observe();
    assert_eq!(next(&mut watch).await, None);
    let leadership = election.campaign("a").await.expect("campaign");
    let fence = leadership.fence().get();
    assert_eq!(next(&mut watch).await, Some(("a".into(), fence)));
    let standby = tokio::spawn({
        let election = b.election("failover").expect("name");
        async move { election.campaign("b").await.expect("campaign") }
    });
    // The failover must not lose the leader: wait until the replica has its key.
    let replica = tokio::task::block_in_place(|| group.current_replica());
    let deadline = Instant::now() + LIMIT;
    while tokio::task::block_in_place(|| replica.cli(&["EXISTS", "fencelock:{failover}:election"]))
        != "1"
    {
        assert!(
            Instant::now() < deadline,
            "the replica never got the leader"
        );
        tokio::time::sleep(ms(20)).await;
    }

    tokio::task::block_in_place(|| group.failover());
    // Proclaiming reaches the new master once the client followed it; the watch follows too.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match leadership.proclaim("a2").await {
            Ok(()) => break,
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                tokio::time::sleep(ms(50)).await;
            }
            Err(e) => panic!("proclaim after the failover: {e}"),
        }
    }
    assert_eq!(next(&mut watch).await, Some(("a2".into(), fence)));
    assert!(leadership.is_held(), "the failover kept the leader");
    assert!(!standby.is_finished(), "a second leader after the failover");

    // A resignation on the new master wakes the standby, not its 30 s fallback.
    leadership.resign().await.expect("resign");
    let second = tokio::time::timeout(LIMIT, standby)
        .await
        .expect("the standby takes over")
        .expect("task");
    assert!(second.fence().get() > fence);
    let seen = next(&mut watch).await;
    let seen = if seen.is_none() {
        next(&mut watch).await
    } else {
        seen
    };
    assert_eq!(seen, Some(("b".into(), second.fence().get())));
}

#[tokio::test]
async fn the_supervisor_campaigns_on_while_replicas_do_not_acknowledge() {
    // No replica ever acknowledges: each won campaign is given up as not replicated.
    let server = RedisServer::start();
    let options = ClientOptions::default().wait_for_replicas(1, ms(50));
    let c = client_with(&server, options).await;
    let election = c.election("unreplicated").expect("name");
    let ran = Arc::new(AtomicUsize::new(0));
    let outcome = election
        .lead("x", tokio::time::sleep(ms(1_000)), |_fence| {
            ran.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>()
        })
        .await;
    assert!(
        outcome.is_ok(),
        "a refusal retrying can cure ended the loop: {outcome:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "never led unreplicated");
    // The campaign in flight when the shutdown came is given back in the background, as every
    // cancelled acquire is: nobody leads once that release has landed, long before a lease.
    let deadline = Instant::now() + LIMIT;
    while election.leader().await.expect("read").is_some() {
        assert!(
            Instant::now() < deadline,
            "an unreplicated campaign kept the lead"
        );
        tokio::time::sleep(ms(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_costs_one_read_per_observer() {
    const OBSERVERS: usize = 8;
    const CHANGES: u64 = 10;
    let server = RedisServer::start();
    let leader = announced_only(&server).await;
    let election = leader.election("watched").expect("name");
    let leadership = election.campaign("v0").await.expect("campaign");
    let (seen, mut sightings) = tokio::sync::mpsc::unbounded_channel();
    let mut observers = tokio::task::JoinSet::new();
    for i in 0..OBSERVERS {
        let client = announced_only(&server).await;
        let seen = seen.clone();
        observers.spawn(async move {
            let mut watch = client.election("watched").expect("name").observe();
            loop {
                let state = watch.next().await.expect("read");
                let value = state.map(|leader| leader.value().to_owned());
                if seen.send((i, value)).is_err() {
                    return;
                }
            }
        });
    }
    await_all(&mut sightings, OBSERVERS, "v0").await;
    let before = common::command_calls(&server, "evalsha");
    for change in 1..=CHANGES {
        let value = format!("v{change}");
        leadership.proclaim(&value).await.expect("proclaim");
        await_all(&mut sightings, OBSERVERS, &value).await;
    }
    let calls = common::command_calls(&server, "evalsha") - before;
    let per_change = calls as f64 / CHANGES as f64;
    println!("    {OBSERVERS} observers: {per_change} script calls per change");
    // One proclamation and one read per observer; renewals go through the batch script, at
    // most once per lease third on the leader's client.
    let renewals = 2;
    assert!(
        calls <= CHANGES * (1 + OBSERVERS as u64) + renewals,
        "{calls} script calls for {CHANGES} changes seen by {OBSERVERS} observers"
    );
    observers.abort_all();
}

/// Waits until `observers` sightings of `value` came, failing on any other state.
async fn await_all(
    sightings: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Option<String>)>,
    observers: usize,
    value: &str,
) {
    for _ in 0..observers {
        let (_, seen) = tokio::time::timeout(LIMIT, sightings.recv())
            .await
            .expect("every observer sees the change")
            .expect("observers run");
        assert_eq!(seen.as_deref(), Some(value), "changes in order");
    }
}

/// A standby campaigning while Redis is down (killed, restarted without persistence 2 s
/// later) keeps trying, as a waiting `lock()` does, and leads once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_rides_out_redis_down_for_two_seconds() {
    let mut server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    // A short lease, so that the old leader hears of its loss within a second of the restart.
    let options = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(3)));
    let leader = a
        .election_with_options("blip", options)
        .expect("name")
        .campaign("a")
        .await
        .expect("campaign");
    let standby = tokio::spawn(async move {
        let started = Instant::now();
        let won = b.election("blip").expect("name").campaign("b").await;
        (won, started.elapsed(), b)
    });
    tokio::time::sleep(ms(300)).await;
    let server = tokio::task::spawn_blocking(move || {
        server.kill9();
        std::thread::sleep(Duration::from_secs(2));
        server.restart();
        server
    })
    .await
    .expect("the outage's thread");
    let (won, waited, b) = tokio::time::timeout(LIMIT * 2, standby)
        .await
        .expect("the standby leads once Redis is back")
        .expect("task");
    let won = won.expect("the campaign outlasts the outage");
    assert!(
        waited >= Duration::from_secs(2),
        "not before Redis returned"
    );
    // The restarted server holds nothing of the old leader's: the standby leads, and the old
    // leader finds its key taken, unless its lease ran out first.
    let lost = tokio::time::timeout(LIMIT, leader.lost()).await;
    let lost = lost.expect("the old leader learns of its loss");
    assert!(matches!(lost, Lost::Revoked | Lost::Expired), "{lost}");
    let now = b.election("blip").expect("name").leader().await;
    assert_eq!(now.expect("read").expect("a leader").value(), "b");
    won.resign().await.expect("resign");
    drop(server);
}
