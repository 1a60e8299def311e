//! Handoffs under the faults that ordinary deployments bring, rows F36 to F41 of
//! `docs/faults.md`: a release offers the lock to its next waiter for the handoff window, and
//! only the waiter's own request, answered by the master, turns the offer into a grant. A
//! message is never proof, a waiter that cannot claim costs the next one the window and not a
//! lease, and a fair lock's waiter keeps its turn across a lost pub/sub connection.
//!
//! Each test here failed on the lock path before offers (3e24be5), which took a grant heard
//! on pub/sub as proof and a `PUBLISH` that reached someone as a live waiter.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, eventually, ms};
use fencelock::{Client, ClientOptions, Error, Guard, Lease, LockOptions};
use fencelock_testkit::{Proxy, RedisServer, ServerOptions};

/// The two kinds whose releases hand the lock over.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Fair,
}

const KINDS: [Kind; 2] = [Kind::Mutex, Kind::Fair];

impl Kind {
    /// The key a lock `name` of this kind keeps its holder in, under the default prefix.
    fn lock_key(self, name: &str) -> String {
        match self {
            Kind::Mutex => format!("fencelock:{{{name}}}:mutex"),
            Kind::Fair => format!("fencelock:{{{name}}}:fair"),
        }
    }

    /// The key its waiters' places are scored in by when each ends.
    fn places_key(self, name: &str) -> String {
        match self {
            Kind::Mutex => format!("fencelock:{{{name}}}:mutex-waiters"),
            Kind::Fair => format!("fencelock:{{{name}}}:fair-places"),
        }
    }

    /// The key of the order its waiters are served in: a Mutex serves the place that ends
    /// first, a FairMutex its line.
    fn order_key(self, name: &str) -> String {
        match self {
            Kind::Mutex => self.places_key(name),
            Kind::Fair => format!("fencelock:{{{name}}}:fair-line"),
        }
    }

    /// The channel a release addresses the waiters of the client tagged `tag` on.
    fn waiter_channel(self, name: &str, tag: &str) -> String {
        match self {
            Kind::Mutex => format!("fencelock:{{{name}}}:wake:{tag}"),
            Kind::Fair => format!("fencelock:{{{name}}}:fair-wake:{tag}"),
        }
    }

    async fn lock(
        self,
        client: &Client,
        name: &str,
        options: LockOptions,
    ) -> fencelock::Result<Guard> {
        match self {
            Kind::Mutex => client
                .mutex_with_options(name, options)?
                .lock()
                .await
                .map(Guard::from),
            Kind::Fair => {
                let lock = client.fair_mutex_with_options(name, options)?;
                lock.lock().await.map(Guard::from)
            }
        }
    }

    async fn try_lock(self, client: &Client, name: &str) -> fencelock::Result<Guard> {
        match self {
            Kind::Mutex => client.mutex(name)?.try_lock().await.map(Guard::from),
            Kind::Fair => client.fair_mutex(name)?.try_lock().await.map(Guard::from),
        }
    }
}

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

/// A waiting `lock()` of `name` in a task of its own, with a fixed lease of 30 s: a waiter
/// that held the lock without claiming it would keep the others out that long.
fn wait_for(
    kind: Kind,
    client: &Client,
    name: &'static str,
) -> tokio::task::JoinHandle<fencelock::Result<Guard>> {
    let client = client.clone();
    tokio::spawn(async move {
        kind.lock(&client, name, fixed(Duration::from_secs(30)))
            .await
    })
}

/// The place members of `name`'s waiters, by when each place ends.
fn places(server: &RedisServer, kind: Kind, name: &str) -> Vec<String> {
    server
        .cli(&["ZRANGE", &kind.places_key(name), "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Waits until `name` has `count` waiters with a place, for at most 10 s.
async fn places_reach(server: &RedisServer, kind: Kind, name: &str, count: usize) {
    let reached = eventually(Duration::from_secs(10), || {
        places(server, kind, name).len() == count
    })
    .await;
    assert!(
        reached,
        "{kind:?} {name}: {:?}, not {count} places",
        places(server, kind, name)
    );
    let newest = in_order(server, kind, name).pop().expect("a place");
    let channel = kind.waiter_channel(name, tag_of(token_of(&newest)));
    let subscribed = eventually(Duration::from_secs(10), || {
        !server.cli(&["PUBSUB", "NUMSUB", &channel]).ends_with("\n0")
    })
    .await;
    assert!(subscribed, "{channel} has no subscriber");
    // The attempt that follows a subscription renews the place: let it pass.
    tokio::time::sleep(ms(200)).await;
}

/// The place members of `name`'s waiters, in the order they are served.
fn in_order(server: &RedisServer, kind: Kind, name: &str) -> Vec<String> {
    server
        .cli(&["ZRANGE", &kind.order_key(name), "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The tag of the client whose waiter `name` serves first.
fn first_tag(server: &RedisServer, kind: Kind, name: &str) -> String {
    let first = in_order(server, kind, name).remove(0);
    tag_of(token_of(&first)).to_owned()
}

/// The tag of `client`'s tokens: its waiters' channels end with it.
async fn tag_of_client(server: &RedisServer, client: &Client) -> String {
    let probe = "tag-probe";
    let guard = client
        .mutex(probe)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let value = server.cli(&["GET", &Kind::Mutex.lock_key(probe)]);
    guard.unlock().await.expect("unlock");
    tag_of(&value).to_owned()
}

/// A place member's token: everything up to and including its first `:`.
fn token_of(member: &str) -> &str {
    member.find(':').map_or(member, |at| &member[..=at])
}

/// Waits until nobody is subscribed to `channel` (pattern subscribers are not counted), for at
/// most 10 s.
async fn unheard_on(server: &RedisServer, channel: &str) {
    let unheard = eventually(Duration::from_secs(10), || {
        server.cli(&["PUBSUB", "NUMSUB", channel]).ends_with("\n0")
    })
    .await;
    assert!(unheard, "{channel} keeps its subscriber");
}

/// The client tag a token starts with.
fn tag_of(token: &str) -> &str {
    token.split('.').next().unwrap_or(token)
}

/// A client of `server` whose connections go through a proxy: its command connection is
/// number 0, its pub/sub connection number 1. Returns once both are open.
async fn client_behind_proxy(proxy: &Proxy, options: ClientOptions) -> Client {
    let client = Client::connect_with_options(proxy.url().as_str(), options)
        .await
        .expect("connect through the proxy");
    let both_open = eventually(Duration::from_secs(10), || proxy.accepted() >= 2).await;
    assert!(both_open, "the pub/sub connection opened with the client");
    client
}

fn proxy_to(server: &RedisServer) -> Proxy {
    Proxy::start(([127, 0, 0, 1], server.port()).into())
}

/// F36: a grant whose reply comes back after the lease it gave has passed is given back with
/// [`Error::LateGrant`], which says nothing of another holder, and the lock is free again well
/// before that grant's lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f36_a_grant_answered_too_late_is_given_back_and_not_called_held() {
    let server = RedisServer::start();
    let options = ClientOptions::default()
        .holder_label("")
        .response_timeout(Duration::from_secs(10));
    let slow = client_with(&server, options).await;
    let lease = Duration::from_secs(2);
    let mutex = slow.mutex_with_options("late", fixed(lease)).expect("name");
    // Loaded first, so that the paused server holds back the acquire itself.
    mutex
        .try_lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
    server.pause();
    let attempt = tokio::spawn(async move { mutex.try_lock().await });
    tokio::time::sleep(lease + ms(500)).await;
    server.resume();
    match attempt.await.expect("task") {
        Err(e @ Error::LateGrant { .. }) => {
            assert!(e.is_unavailable() && !e.is_held(), "{e}");
        }
        Err(other) => panic!("a grant that came too late, reported as: {other}"),
        Ok(guard) => panic!("a guard whose lease may have ended already: {guard:?}"),
    }
    // The grant Redis made on resuming would last the lease; it is given back at once.
    let freed = eventually(lease / 2, || !crate::common::mutex_is_held(&server, "late")).await;
    assert!(
        freed,
        "the late grant was kept: {}",
        server.cli(&["GET", "fencelock:{late}:mutex"])
    );
    client(&server)
        .await
        .mutex("late")
        .expect("name")
        .try_lock()
        .await
        .expect("free for the next caller")
        .unlock()
        .await
        .expect("unlock");
}

/// F37: a message on a waiter's own channel naming its token and a fence (a forged one here:
/// a frozen process reading a stale grant, a duplicate or a replica's relay look the same to
/// the waiter) does not make it a holder: it asks, the holder's value refuses it, and it waits
/// on until the real release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f37_a_message_naming_a_waiter_is_no_grant() {
    for kind in KINDS {
        let server = RedisServer::start();
        let holder = client(&server).await;
        let waiter = client(&server).await;
        let name = "heard";
        let held = kind
            .lock(&holder, name, fixed(Duration::from_secs(30)))
            .await
            .expect("lock");
        let waiting = wait_for(kind, &waiter, name);
        places_reach(&server, kind, name, 1).await;
        let member = places(&server, kind, name).remove(0);
        let token = token_of(&member);
        let channel = kind.waiter_channel(name, tag_of(token));
        for payload in [format!("{token}99999999999999"), token.to_owned()] {
            let heard = server.cli(&["PUBLISH", &channel, &payload]);
            assert_eq!(heard, "1", "{kind:?}: the waiter listens on {channel}");
        }
        tokio::time::sleep(ms(500)).await;
        assert!(
            !waiting.is_finished(),
            "{kind:?}: the waiter took a message for a grant while {} held the lock",
            server.cli(&["GET", &kind.lock_key(name)])
        );
        held.unlock().await.expect("the holder held it all along");
        let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the real release hands the lock over")
            .expect("task")
            .expect("lock");
        assert!(guard.is_held());
        guard.unlock().await.expect("held by the waiter");
    }
}

/// F38: a client of one URL whose pub/sub connection ends on a replica while its commands go
/// to the master (an endpoint or address that moved, `FAILOVER`): the master counts nobody
/// listening, the replica relays the release's message all the same. The waiter's claim goes
/// to the master, so it holds only what the master granted, and a third client is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f38_a_pub_sub_connection_on_a_replica_never_makes_a_second_holder() {
    for kind in KINDS {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(ServerOptions::default().replica_of(&master));
        replica.wait_replication_link_up(Duration::from_secs(20));
        let proxy = proxy_to(&master);
        proxy.route_connection(1, ([127, 0, 0, 1], replica.port()).into());
        let waiter = client_behind_proxy(&proxy, ClientOptions::default().holder_label("")).await;
        let holder = client(&master).await;
        let third = client(&master).await;
        let name = "moved";
        let held = kind
            .lock(&holder, name, fixed(Duration::from_secs(30)))
            .await
            .expect("lock");
        let waiting = wait_for(kind, &waiter, name);
        // The replica has the places too, and the waiter's subscription.
        places_reach(&replica, kind, name, 1).await;
        held.unlock().await.expect("unlock");
        let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiter gets the lock")
            .expect("task")
            .expect("lock");
        let value = master.cli(&["GET", &kind.lock_key(name)]);
        assert!(
            guard.is_held() && !value.starts_with('~') && !value.is_empty(),
            "{kind:?}: the waiter holds a guard while the master's value is {value:?}"
        );
        match kind.try_lock(&third, name).await {
            Err(Error::Held { .. }) => {}
            Ok(second) => panic!("{kind:?}: two holders, {guard:?} and {second:?}"),
            Err(other) => panic!("{kind:?}: {other}"),
        }
        guard
            .unlock()
            .await
            .expect("the master held it for the waiter");
    }
}

/// How the first waiter in line fails to claim its offer.
#[derive(Clone, Copy, Debug)]
enum Stuck {
    /// Its process is gone, its connections closed, behind a pattern subscriber that makes
    /// `PUBLISH` count a listener on every channel.
    GoneBehindATap,
    /// Cut off with its connections still open (half-open): nothing passes, nothing closes.
    HalfOpen,
    /// Its process is gone, its connections closed.
    Gone,
}

/// F39: the first waiter cannot claim the lock it is offered. The offer ends with the handoff
/// window, and the waiter behind it, told of the offer, takes the lock then: within the window
/// and a little, far from the first waiter's 30 s lease. (A Mutex skips a waiter whose client
/// hears nothing at once; a FairMutex offers it its turn all the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f39_a_first_waiter_that_cannot_claim_costs_the_next_the_window_not_its_lease() {
    for kind in KINDS {
        for stuck in [Stuck::GoneBehindATap, Stuck::HalfOpen, Stuck::Gone] {
            let after = behind_a_stuck_waiter(kind, stuck).await;
            println!("    {kind:?}, {stuck:?}: the next waiter held the lock {after:?} after the release");
            assert!(
                after < Duration::from_secs(3),
                "{kind:?}, {stuck:?}: {after:?} behind a waiter that cannot claim"
            );
        }
    }
}

/// How long after the release the second waiter of `kind` holds the lock, when the first is
/// `stuck`.
async fn behind_a_stuck_waiter(kind: Kind, stuck: Stuck) -> Duration {
    let server = RedisServer::start();
    // Waiters that never try again on their timers during the test: their places (and so
    // their order) stay as they took them.
    let options = ClientOptions::default()
        .holder_label("")
        .wake_fallback(Duration::from_secs(20));
    let holder = client(&server).await;
    let next = client_with(&server, options.clone()).await;
    let proxy = proxy_to(&server);
    let first = client_behind_proxy(&proxy, options).await;
    let name = "stuck";
    let held = kind
        .lock(&holder, name, fixed(Duration::from_secs(30)))
        .await
        .expect("lock");
    let first_waits = wait_for(kind, &first, name);
    places_reach(&server, kind, name, 1).await;
    let second_waits = wait_for(kind, &next, name);
    places_reach(&server, kind, name, 2).await;
    let stuck_tag = tag_of_client(&server, &first).await;
    assert_eq!(
        first_tag(&server, kind, name),
        stuck_tag,
        "{kind:?}: the waiter to be stuck is served first"
    );
    // New connections wait too: the first waiter's client stays cut off.
    proxy.set_cut(true);
    let _tap = match stuck {
        Stuck::GoneBehindATap => {
            let tap = redis::Client::open(server.url().as_str()).expect("url");
            let mut tap = tap.get_async_pubsub().await.expect("pubsub");
            tap.psubscribe("*").await.expect("psubscribe");
            Some(tap)
        }
        Stuck::HalfOpen | Stuck::Gone => None,
    };
    if matches!(stuck, Stuck::GoneBehindATap | Stuck::Gone) {
        proxy.close_connection(0);
        proxy.close_connection(1);
        unheard_on(&server, &kind.waiter_channel(name, &stuck_tag)).await;
    }
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let guard = tokio::time::timeout(Duration::from_secs(20), second_waits)
        .await
        .unwrap_or_else(|_| {
            panic!("{kind:?}, {stuck:?}: the lock sat with a waiter that cannot claim")
        })
        .expect("task")
        .expect("lock");
    let after = released.elapsed();
    guard.unlock().await.expect("unlock");
    first_waits.abort();
    after
}

/// F40: a guard dropped while Redis does not answer: its release is sent again until Redis
/// answers (or the lease has passed), so the lock does not sit held for the rest of its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f40_the_release_of_a_dropped_guard_is_sent_again_until_answered() {
    let server = RedisServer::start();
    let proxy = proxy_to(&server);
    let options = ClientOptions::default()
        .holder_label("")
        .response_timeout(ms(500));
    let dropping = client_behind_proxy(&proxy, options).await;
    let other = client(&server).await;
    let guard = dropping
        .mutex_with_options("dropped", fixed(Duration::from_secs(30)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    proxy.set_cut(true);
    drop(guard);
    // The release is on its way, held back; then its connection closes, and it is lost.
    tokio::time::sleep(ms(200)).await;
    proxy.close_connection(0);
    // Longer than a response timeout: the first send of the release has failed.
    tokio::time::sleep(ms(1500)).await;
    assert!(
        crate::common::mutex_is_held(&server, "dropped"),
        "nothing passed while cut"
    );
    proxy.set_cut(false);
    let freed = eventually(Duration::from_secs(10), || {
        !crate::common::mutex_is_held(&server, "dropped")
    })
    .await;
    assert!(
        freed,
        "the dropped guard's release was given up after one send"
    );
    other
        .mutex("dropped")
        .expect("name")
        .try_lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

/// F41: the first waiter in a fair lock's line loses its pub/sub connection just before the
/// release: it is offered its turn all the same, reconnects, and claims it; the waiter behind
/// it does not pass it. The releasing client's window is long, so that the reconnect fits
/// whatever the machine's load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f41_a_fair_waiter_keeps_its_turn_across_a_killed_pub_sub_connection() {
    let server = RedisServer::start();
    let holder = client_with(
        &server,
        ClientOptions::default()
            .holder_label("")
            .handoff_window(Duration::from_secs(10)),
    )
    .await;
    let proxy = proxy_to(&server);
    let first = client_behind_proxy(&proxy, ClientOptions::default().holder_label("")).await;
    let behind = client(&server).await;
    let name = "line";
    let held = Kind::Fair
        .lock(&holder, name, fixed(Duration::from_secs(30)))
        .await
        .expect("lock");
    let first_waits = wait_for(Kind::Fair, &first, name);
    places_reach(&server, Kind::Fair, name, 1).await;
    let behind_waits = wait_for(Kind::Fair, &behind, name);
    places_reach(&server, Kind::Fair, name, 2).await;
    // The first waiter's pub/sub connection is killed, and its reconnection held back until
    // the release has run: the release finds nobody listening for it.
    let first_tag = first_tag(&server, Kind::Fair, name);
    assert_eq!(first_tag, tag_of_client(&server, &first).await);
    let channel = Kind::Fair.waiter_channel(name, &first_tag);
    for reconnection in 2..6 {
        proxy.set_cut_connection(reconnection, true);
    }
    proxy.close_connection(1);
    unheard_on(&server, &channel).await;
    held.unlock().await.expect("unlock");
    for reconnection in 2..6 {
        proxy.set_cut_connection(reconnection, false);
    }
    let guard = tokio::time::timeout(Duration::from_secs(15), first_waits)
        .await
        .expect("the first in line gets its turn")
        .expect("task")
        .expect("lock");
    assert!(
        !behind_waits.is_finished(),
        "the waiter behind passed the first in line"
    );
    guard.unlock().await.expect("unlock");
    let next = tokio::time::timeout(Duration::from_secs(15), behind_waits)
        .await
        .expect("then the one behind")
        .expect("task")
        .expect("lock");
    next.unlock().await.expect("unlock");
}
