//! TLS and ACL against real servers: `rediss://` with certificates made at test time, client
//! certificates, and an ACL user allowed only the lock prefix and the commands fencelock needs,
//! its rules read from `docs/security.md`, on every deployment and for every foreign layout.

use std::time::{Duration, Instant};

use fencelock::{
    Client, ClientOptions, Deployment, DeploymentWarning, Error, Layout, Lease, LockOptions,
    SentinelOptions,
};
use fencelock_testkit::{RedisCluster, RedisServer, SentinelGroup, ServerOptions};

/// Bounds each wait of the tests.
const LIMIT: Duration = Duration::from_secs(10);
/// Within this time of a release, a waiter was woken by its announcement: the fallback timer
/// of these clients is 30 s.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(3);
/// A lease the tests outlive, so that renewal runs while they hold it.
const SHORT_LEASE: Duration = Duration::from_secs(1);

/// The page whose rules the ACL tests give their user: what it lists is what is tested.
const SECURITY_MD: &str = include_str!("../../docs/security.md");
/// The user of the ACL tests, and its password.
const USER: &str = "fencelock-app";
const PASSWORD: &str = "app-secret";

/// Whether `token` is an ACL rule: a command, key or channel grant, or a reset.
fn is_rule(token: &str) -> bool {
    token.starts_with(['+', '-', '~', '&']) || matches!(token, "resetkeys" | "resetchannels")
}

/// The rules of the user `docs/security.md` defines in its `user fencelock-app` line: what
/// fencelock needs on one server.
fn documented_user() -> Vec<String> {
    let block = SECURITY_MD
        .split_once("```text\nuser fencelock-app on >SECRET ")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .expect("docs/security.md defines the user fencelock-app in a text block");
    let rules: Vec<String> = block.split_whitespace().map(str::to_owned).collect();
    assert!(rules.iter().all(|r| is_rule(r)), "not all rules: {rules:?}");
    assert!(rules.len() > 20, "{rules:?}");
    rules
}

/// The rules `docs/security.md` adds in the table row whose first cell is `when`: each code
/// span of the row made only of rules, with `N` standing for `name` (and `\|`, a `|` escaped
/// inside a table, for `|`).
fn documented_addition(when: &str, name: &str) -> Vec<String> {
    let first_cell = format!("| {when} | ");
    let row = SECURITY_MD
        .lines()
        .find_map(|line| line.strip_prefix(first_cell.as_str()))
        .unwrap_or_else(|| panic!("docs/security.md has no row for {when}"));
    let rules: Vec<String> = row
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.split_whitespace().all(is_rule))
        .flat_map(str::split_whitespace)
        .map(|rule| rule.replace("\\|", "|").replace('N', name))
        .collect();
    assert!(!rules.is_empty(), "no rules in the row of {when}: {row}");
    rules
}

/// The user's rules: the documented line and the additions of the rows `when`.
fn rules_with(additions: &[&str]) -> Vec<String> {
    let mut rules = documented_user();
    for when in additions {
        rules.extend(documented_addition(when, ""));
    }
    rules
}

/// Options that define the user with `rules` on a server.
fn with_user(rules: &[String]) -> ServerOptions {
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    ServerOptions::default().acl_user(USER, PASSWORD, &rules)
}

/// What `server`'s `ACL LOG` says it refused, as `reason object`, but for the `CLIENT SETINFO`
/// that the `redis` crate sends on each new connection and whose refusal it ignores: logged as
/// `client|setinfo`, or as `client` by Redis 6.2 (fencelock sends no other `CLIENT` command).
fn refusals(server: &RedisServer) -> Vec<String> {
    let log = server.cli(&["ACL", "LOG", "128"]);
    let lines: Vec<&str> = log.lines().map(str::trim).collect();
    let mut found = Vec::new();
    let mut reason = "";
    for (at, line) in lines.iter().enumerate() {
        let Some(value) = lines.get(at + 1) else {
            break;
        };
        match *line {
            "reason" => reason = value,
            "object" if !matches!(*value, "client|setinfo" | "client") => {
                found.push(format!("{reason} {value} (port {})", server.port()));
            }
            _ => {}
        }
    }
    found
}

/// Panics with every refusal the servers logged.
fn assert_nothing_refused<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) {
    let refused: Vec<String> = servers.into_iter().flat_map(refusals).collect();
    assert!(
        refused.is_empty(),
        "ACL LOG: the documented user was refused {refused:?}"
    );
}

/// Runs blocking test-kit work (processes, `redis-cli`) without stalling the clients'
/// background tasks.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(work)
}

/// A client whose fallback timer never fires within a test.
fn quiet() -> ClientOptions {
    ClientOptions::default().wake_fallback(Duration::from_secs(30))
}

/// A client that gives a channel up soon after its last waiter left: three fallbacks of
/// 100 ms and a response timeout of 1 s.
fn brisk() -> ClientOptions {
    ClientOptions::default().wake_fallback(Duration::from_millis(100))
}

/// A second name whose keys share the slot of `name`'s, for a multi-lock that a cluster can
/// take in one script.
fn name_on_slot_of(name: &str) -> String {
    let key = |n: &str| format!("fencelock:{{{n}}}:mutex");
    let slot = RedisCluster::slot_of(key(name));
    (0..1_000_000)
        .map(|i| format!("{name}-{i}"))
        .find(|other| RedisCluster::slot_of(key(other)) == slot)
        .expect("a name on the same slot")
}

/// Waits for `task`, which must end within `within`.
async fn within<T>(within: Duration, what: &str, task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(within, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {within:?}"))
        .expect("task")
}

/// Every primitive, each with a waiter woken by a release, renewal and extension, inspection,
/// the wait-for graph, a deadlock check, an election followed by an observer, forced
/// releases, and a subscription given up: what an application does, done by `a` and `b`
/// (made with [`quiet`]) and `c` (made with [`brisk`]).
async fn exercise(a: &Client, b: &Client, c: &Client) {
    let renewed = LockOptions::default().lease(Lease::Renewed(SHORT_LEASE));
    // A mutex held past its lease (renewed), a waiter whose wait is recorded, both seen by
    // inspection and in the wait-for graph, and the release handed to the waiter.
    let guard = a
        .mutex_with_options("acct", renewed.clone())
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiter = {
        let b = b.clone();
        let recorded = LockOptions::default().record_wait(Duration::from_millis(100));
        tokio::spawn(async move {
            b.mutex_with_options("acct", recorded)
                .expect("name")
                .lock_timeout(LIMIT)
                .await
        })
    };
    tokio::time::sleep(SHORT_LEASE + SHORT_LEASE / 2).await;
    assert!(guard.is_held(), "renewed past its first lease");
    guard.extend(Duration::from_secs(5)).await.expect("extend");
    let held = a.locks("*").await.expect("locks");
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(a.lock_info("acct").await.expect("info").is_some());
    let graph = a.wait_graph("*").await.expect("graph");
    let waiting: Vec<(&str, usize)> = graph
        .locks
        .iter()
        .map(|l| (l.name.as_str(), l.waiters.len()))
        .collect();
    assert_eq!(waiting, [("acct", 1)], "{graph:?}");
    // A deadlock check reads the recorded waits: no cycle, so the wait runs out.
    let checked = LockOptions::default().deadlock_check(Duration::from_millis(100));
    let refused = b
        .mutex_with_options("acct", checked)
        .expect("name")
        .lock_timeout(Duration::from_millis(600))
        .await;
    assert!(matches!(refused, Err(Error::Timeout { .. })), "{refused:?}");
    guard.unlock().await.expect("unlock");
    let taken = within(ANNOUNCED_WITHIN, "the mutex's handoff", waiter)
        .await
        .expect("lock");
    taken.unlock().await.expect("unlock");

    // A fair mutex, its waiter served by the release.
    let first = a
        .fair_mutex("queue")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.fair_mutex("queue")
                .expect("name")
                .lock_timeout(LIMIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.unlock().await.expect("unlock");
    let next = within(ANNOUNCED_WITHIN, "the fair mutex's handoff", waiter)
        .await
        .expect("lock");
    next.unlock().await.expect("unlock");

    // A reentrant mutex, entered twice.
    let holder = a.holder_named("alice").expect("holder");
    let reentrant = a.reentrant_mutex("acct").expect("name");
    let outer = reentrant.lock(&holder).await.expect("lock");
    let inner = reentrant.lock(&holder).await.expect("re-enter");
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");

    // A read-write lock: a writer woken when the reader leaves.
    let rw = a.rwlock("catalog").expect("name");
    let read = rw.read().await.expect("read");
    let writer = {
        let b = b.clone();
        tokio::spawn(async move {
            b.rwlock("catalog")
                .expect("name")
                .write_timeout(LIMIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    read.unlock().await.expect("unlock");
    let write = within(ANNOUNCED_WITHIN, "the writer's wake", writer)
        .await
        .expect("write");
    write.unlock().await.expect("unlock");

    // A semaphore: its total read and changed, a waiter woken by a release.
    let semaphore = a.semaphore("render", 1).expect("name");
    let permit = semaphore.acquire().await.expect("permit");
    assert_eq!(semaphore.permits().await.expect("permits"), 1);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.semaphore("render", 1)
                .expect("name")
                .acquire_timeout(LIMIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    permit.release().await.expect("release");
    let permit = within(ANNOUNCED_WITHIN, "the semaphore's wake", waiter)
        .await
        .expect("permit");
    permit.release().await.expect("release");
    semaphore.set_permits(2).await.expect("set the total");

    // A multi-lock over two names of one slot, as a cluster needs them.
    let other = name_on_slot_of("ledger");
    let all = a
        .multi_mutex(["ledger", other.as_str()])
        .expect("names")
        .lock()
        .await
        .expect("lock");
    all.unlock().await.expect("unlock");

    // An election: an observer sees the leader, its proclaimed value, and the standby that
    // takes over when it resigns.
    let election = a.election("scheduler").expect("name");
    let mut watch = b.election("scheduler").expect("name").observe();
    let leading = election.campaign("a").await.expect("campaign");
    let seen = tokio::time::timeout(LIMIT, watch.next())
        .await
        .expect("in time");
    assert_eq!(seen.expect("observe").expect("a leader").value(), "a");
    leading.proclaim("a, proclaimed").await.expect("proclaim");
    let seen = tokio::time::timeout(LIMIT, watch.next())
        .await
        .expect("in time");
    assert_eq!(
        seen.expect("observe").expect("a leader").value(),
        "a, proclaimed"
    );
    let standby = {
        let b = b.clone();
        tokio::spawn(async move { b.election("scheduler").expect("name").campaign("b").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    leading.resign().await.expect("resign");
    let leading = within(ANNOUNCED_WITHIN, "the standby's turn", standby)
        .await
        .expect("campaign");
    assert_eq!(
        election
            .leader()
            .await
            .expect("leader")
            .expect("leads")
            .value(),
        "b"
    );

    // Forced releases: of a mutex, and of the election's leadership.
    let stuck = a.mutex("stuck").expect("name").lock().await.expect("lock");
    assert_eq!(a.force_unlock("stuck").await.expect("force").len(), 1);
    assert!(
        stuck.unlock().await.is_err(),
        "the forced release removed it"
    );
    assert_eq!(a.force_unlock("scheduler").await.expect("force").len(), 1);
    assert!(
        leading.resign().await.is_err(),
        "the forced release ended it"
    );

    // A waiter's client leaves the lock's channel once nobody of it waits there any more.
    let guard = a.mutex("brisk").expect("name").lock().await.expect("lock");
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.mutex("brisk").expect("name").lock_timeout(LIMIT).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.expect("unlock");
    let taken = within(LIMIT, "the brisk waiter", waiter)
        .await
        .expect("lock");
    taken.unlock().await.expect("unlock");
    let guard = a.mutex("brisk").expect("name").lock().await.expect("lock");
    let started = Instant::now();
    loop {
        let info = a.lock_info("brisk").await.expect("info").expect("held");
        if info.waiting_clients == 0 {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the waiter's client still listens: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    guard.unlock().await.expect("unlock");
}

/// A lock of `layout` under `name`: renewed past its lease, seen by inspection, handed to a
/// waiter of the other client by its release, and freed by force.
async fn exercise_foreign(a: &Client, b: &Client, layout: Layout, name: &str) {
    let options = LockOptions::default().lease(Lease::Renewed(SHORT_LEASE));
    let lock = |client: &Client| {
        client
            .foreign_mutex_with_options(layout, name, options.clone())
            .unwrap_or_else(|e| panic!("{layout} {name}: {e}"))
    };
    let guard = lock(a).lock().await.expect("lock");
    let waiter = {
        let theirs = lock(b);
        tokio::spawn(async move { theirs.lock_timeout(LIMIT).await })
    };
    tokio::time::sleep(SHORT_LEASE + SHORT_LEASE / 2).await;
    assert!(guard.is_held(), "{layout}: renewed past its first lease");
    assert!(
        lock(a).info().await.expect("info").is_some(),
        "{layout}: inspected"
    );
    guard.unlock().await.expect("unlock");
    let taken = within(ANNOUNCED_WITHIN, "the foreign waiter", waiter)
        .await
        .unwrap_or_else(|e| panic!("{layout}: {e}"));
    assert!(
        lock(a).force_unlock().await.expect("force").is_some(),
        "{layout}: freed by force"
    );
    assert!(taken.unlock().await.is_err(), "{layout}: removed by force");
}

/// The name each layout locks in the ACL tests: one whose keys share a slot, which a
/// python-redis-lock lock on a cluster needs.
fn foreign_name(layout: Layout) -> &'static str {
    match layout {
        Layout::PythonRedisLock => "{jobs}:nightly",
        _ => "jobs:nightly",
    }
}

/// The documented rules of `layout` for the name the tests lock in it.
fn foreign_rules(layout: Layout) -> Vec<String> {
    let when = match layout {
        Layout::RedisPy | Layout::NodeRedlock | Layout::GoRedsync | Layout::Rslock => {
            "`redis-py`, `node-redlock`, `go-redsync`, `rslock`".to_owned()
        }
        other => format!("`{other}`"),
    };
    documented_addition(&when, foreign_name(layout))
}

/// A server started with `options` (which ask for TLS), or `None`, with the reason printed,
/// when the server under test was built without TLS.
fn tls_server(test: &str, options: ServerOptions) -> Option<RedisServer> {
    match fencelock_testkit::tls_support() {
        Ok(()) => Some(RedisServer::start_with(options)),
        Err(reason) => {
            eprintln!("skipped {test}: {reason}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_over_tls_with_the_ca_trusted() {
    let test = "every_primitive_works_over_tls_with_the_ca_trusted";
    let Some(server) = tls_server(test, ServerOptions::default().tls()) else {
        return;
    };
    let options = quiet().tls_root_certificate(server.tls_ca_pem());
    let url = server.tls_url();
    let a = Client::connect_with_options(url.as_str(), options.clone())
        .await
        .expect("TLS");
    let b = Client::connect_with_options(url.as_str(), options)
        .await
        .expect("TLS");
    let c = Client::connect_with_options(
        url.as_str(),
        brisk().tls_root_certificate(server.tls_ca_pem()),
    )
    .await
    .expect("TLS");
    exercise(&a, &b, &c).await;
}

#[tokio::test]
async fn a_server_whose_certificate_is_not_trusted_is_refused() {
    let test = "a_server_whose_certificate_is_not_trusted_is_refused";
    let Some(server) = tls_server(test, ServerOptions::default().tls()) else {
        return;
    };
    let url = server.tls_url();
    match Client::connect(url.as_str()).await {
        Err(Error::Redis(_)) => {}
        other => panic!("expected a refused certificate, got {other:?}"),
    }
    // Plain text to the TLS port is refused too, not taken for a server.
    let plain = url.replacen("rediss://", "redis://", 1);
    let options = quiet().connection_timeout(Duration::from_secs(2));
    assert!(Client::connect_with_options(plain.as_str(), options)
        .await
        .is_err());
}

#[tokio::test]
async fn a_server_that_asks_for_a_client_certificate_gets_one() {
    let test = "a_server_that_asks_for_a_client_certificate_gets_one";
    let Some(server) = tls_server(test, ServerOptions::default().tls_client_auth()) else {
        return;
    };
    let url = server.tls_url();
    let trusting = quiet().tls_root_certificate(server.tls_ca_pem());
    assert!(
        Client::connect_with_options(url.as_str(), trusting.clone())
            .await
            .is_err(),
        "no client certificate, no connection"
    );
    let options =
        trusting.tls_client_certificate(server.tls_client_cert_pem(), server.tls_client_key_pem());
    let client = Client::connect_with_options(url.as_str(), options)
        .await
        .expect("mTLS");
    let guard = client
        .mutex("acct")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_use_every_primitive_on_one_server() {
    let server = blocking(|| RedisServer::start_with(with_user(&documented_user())));
    let url = server.url_with_auth(Some(USER), PASSWORD);
    let a = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let b = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let c = Client::connect_with_options(url.as_str(), brisk())
        .await
        .expect("connect");
    exercise(&a, &b, &c).await;
    // The user reads every setting the deployment check looks at: the test server runs
    // without an append-only file, and says so.
    let warnings = a.deployment_warnings().await.expect("warnings");
    assert_eq!(
        warnings,
        [DeploymentWarning::NoAppendOnlyFile],
        "{warnings:?}"
    );
    for client in [a, b, c] {
        client.shutdown().await.expect("shutdown");
    }
    blocking(|| assert_nothing_refused([&server]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_use_a_database_other_than_0() {
    let database = "a database other than 0 (`redis://host/3`, [`SentinelOptions::master_db`])";
    let server = blocking(|| RedisServer::start_with(with_user(&rules_with(&[database]))));
    let url = format!("{}3", server.url_with_auth(Some(USER), PASSWORD));
    let a = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let b = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let c = Client::connect_with_options(url.as_str(), brisk())
        .await
        .expect("connect");
    exercise(&a, &b, &c).await;
    let guard = a.mutex("in-3").expect("name").lock().await.expect("lock");
    let keys = blocking(|| server.cli(&["-n", "3", "EXISTS", "fencelock:{in-3}:mutex"]));
    assert_eq!(keys.trim(), "1", "the lock is kept in database 3");
    guard.unlock().await.expect("unlock");
    for client in [a, b, c] {
        client.shutdown().await.expect("shutdown");
    }
    blocking(|| assert_nothing_refused([&server]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_use_every_primitive_through_sentinel() {
    let rules = rules_with(&[
        "Redis Sentinel",
        "[`ClientOptions::wait_for_replicas`]",
        "a database other than 0 (`redis://host/3`, [`SentinelOptions::master_db`])",
    ]);
    let group = blocking(|| SentinelGroup::start_with(with_user(&rules)));
    let connect = |options: ClientOptions| async {
        let nodes = SentinelOptions::default()
            .master_username(USER)
            .master_password(PASSWORD)
            .master_db(3);
        let deployment = Deployment::sentinel(group.sentinel_urls(), group.service_name())
            .expect("addresses")
            .sentinel_options(nodes);
        let options = options.wait_for_replicas(1, Duration::from_millis(500));
        Client::connect_with_options(deployment, options)
            .await
            .expect("connect through the sentinels")
    };
    let (a, b, c) = (
        connect(quiet()).await,
        connect(quiet()).await,
        connect(brisk()).await,
    );
    // A replica may acknowledge only a while after its sync (Valkey 8): wait until it does.
    let started = Instant::now();
    loop {
        match a.mutex("warm-up").expect("name").try_lock().await {
            Ok(guard) => break guard.unlock().await.expect("unlock"),
            Err(Error::NotReplicated { .. }) if started.elapsed() < LIMIT => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the replica never acknowledged a grant: {e}"),
        }
    }
    exercise(&a, &b, &c).await;
    let warnings = a.deployment_warnings().await.expect("warnings");
    assert_eq!(
        warnings,
        [DeploymentWarning::NoAppendOnlyFile],
        "{warnings:?}"
    );
    for client in [a, b, c] {
        client.shutdown().await.expect("shutdown");
    }
    blocking(|| assert_nothing_refused([group.node(0), group.node(1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_use_every_primitive_and_layout_on_a_cluster() {
    let cluster_row = if fencelock_testkit::server_has_sharded_pubsub() {
        "Redis Cluster"
    } else {
        "Redis Cluster of Redis 6.2 (no sharded pub/sub)"
    };
    let mut rules = rules_with(&[cluster_row]);
    for layout in Layout::ALL {
        rules.extend(foreign_rules(layout));
    }
    let cluster = blocking(|| RedisCluster::start_with(with_user(&rules)));
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| node.url_with_auth(Some(USER), PASSWORD))
        .collect();
    let connect = |options: ClientOptions| async {
        let deployment = Deployment::cluster(urls.iter().map(String::as_str)).expect("addresses");
        Client::connect_with_options(deployment, options)
            .await
            .expect("connect to the cluster")
    };
    let (a, b, c) = (
        connect(quiet()).await,
        connect(quiet()).await,
        connect(brisk()).await,
    );
    exercise(&a, &b, &c).await;
    for layout in Layout::ALL {
        exercise_foreign(&a, &b, layout, foreign_name(layout)).await;
    }
    let warnings = a.deployment_warnings().await.expect("warnings");
    assert!(
        !warnings
            .iter()
            .any(|w| matches!(w, DeploymentWarning::Unreadable { .. })),
        "{warnings:?}"
    );
    for client in [a, b, c] {
        client.shutdown().await.expect("shutdown");
    }
    blocking(|| assert_nothing_refused(cluster.nodes()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_lock_each_foreign_layout_on_one_server() {
    for layout in Layout::ALL {
        let mut rules = documented_user();
        rules.extend(foreign_rules(layout));
        let server = blocking(|| RedisServer::start_with(with_user(&rules)));
        let url = server.url_with_auth(Some(USER), PASSWORD);
        let a = Client::connect_with_options(url.as_str(), quiet())
            .await
            .expect("connect");
        let b = Client::connect_with_options(url.as_str(), quiet())
            .await
            .expect("connect");
        exercise_foreign(&a, &b, layout, foreign_name(layout)).await;
        a.shutdown().await.expect("shutdown");
        b.shutdown().await.expect("shutdown");
        blocking(|| assert_nothing_refused([&server]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_user_can_hold_a_mutex_on_redlock_masters() {
    let rules = documented_user();
    let masters: Vec<RedisServer> = blocking(|| {
        (0..3)
            .map(|_| RedisServer::start_with(with_user(&rules)))
            .collect()
    });
    let urls: Vec<String> = masters
        .iter()
        .map(|master| master.url_with_auth(Some(USER), PASSWORD))
        .collect();
    let connect = || async {
        let deployment = Deployment::redlock(urls.iter().map(String::as_str)).expect("addresses");
        Client::connect_with_options(deployment, quiet())
            .await
            .expect("connect to the masters")
    };
    let (a, b) = (connect().await, connect().await);
    let renewed = LockOptions::default().lease(Lease::Renewed(SHORT_LEASE));
    let guard = a
        .mutex_with_options("acct", renewed)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.mutex("acct").expect("name").lock_timeout(LIMIT).await })
    };
    tokio::time::sleep(SHORT_LEASE + SHORT_LEASE / 2).await;
    assert!(guard.is_held(), "renewed past its first lease");
    guard.extend(Duration::from_secs(5)).await.expect("extend");
    guard.unlock().await.expect("unlock");
    let taken = within(ANNOUNCED_WITHIN, "the RedLock waiter", waiter)
        .await
        .expect("lock");
    taken.unlock().await.expect("unlock");
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    blocking(|| assert_nothing_refused(&masters));
}

#[tokio::test]
async fn without_info_the_deployment_check_says_which_settings_it_could_not_read() {
    let without_info: Vec<String> = documented_user()
        .into_iter()
        .filter(|rule| rule != "+info")
        .collect();
    let server = RedisServer::start_with(with_user(&without_info));
    let url = server.url_with_auth(Some(USER), PASSWORD);
    let client = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let warnings = client
        .deployment_warnings()
        .await
        .expect("unreadable settings are warnings, not an error");
    let unreadable: Vec<&str> = warnings
        .iter()
        .map(|w| match w {
            DeploymentWarning::Unreadable { settings, reason } => {
                assert!(reason.to_lowercase().contains("noperm"), "{reason}");
                *settings
            }
            other => panic!("only unreadable settings are known: {other:?}"),
        })
        .collect();
    assert_eq!(unreadable, ["maxmemory and maxmemory-policy", "appendonly"]);
    assert!(warnings[0]
        .to_string()
        .starts_with("cannot read the server's maxmemory and maxmemory-policy: "));
}

#[tokio::test]
async fn refused_credentials_and_keys_outside_the_grant_are_auth_failures() {
    let server = RedisServer::start_with(with_user(&documented_user()).acl_user(
        "other-app",
        "other-secret",
        &["~other:*", "resetchannels", "&other:*", "+@all"],
    ));
    let wrong = server.url_with_auth(Some(USER), "wrong");
    match Client::connect(wrong.as_str()).await {
        Err(e) => assert!(e.is_auth_failure(), "wrong password: {e:?}"),
        Ok(_) => panic!("a wrong password connected"),
    }
    // Allowed to connect, but not to the fencelock prefix: refused at the first lock command.
    let other = server.url_with_auth(Some("other-app"), "other-secret");
    let client = Client::connect(other.as_str()).await.expect("connect");
    let started = Instant::now();
    match client.mutex("acct").expect("name").try_lock().await {
        Err(e) => assert!(e.is_auth_failure(), "outside the key grant: {e:?}"),
        Ok(_) => panic!("locked outside the user's keys"),
    }
    assert!(started.elapsed() < LIMIT);
    // With a prefix inside its grant, the same user locks.
    let inside = ClientOptions::default().prefix("other:");
    let client = Client::connect_with_options(other.as_str(), inside)
        .await
        .expect("connect");
    let guard = client
        .mutex("acct")
        .expect("name")
        .try_lock()
        .await
        .expect("inside the grant");
    guard.unlock().await.expect("unlock");
}
