//! TLS and ACL against real servers: `rediss://` with certificates made at test time, client
//! certificates, and an ACL user allowed only the lock prefix and the commands fencelock needs.

use std::time::{Duration, Instant};

use crate::common::take_each_primitive;
use fencelock::{Client, ClientOptions, DeploymentWarning, Error};
use fencelock_testkit::{RedisServer, ServerOptions};

/// Bounds each wait of the tests.
const LIMIT: Duration = Duration::from_secs(10);
/// Within this time of a release, a waiter was woken by its announcement: the fallback timer
/// of these clients is 30 s.
const ANNOUNCED_WITHIN: Duration = Duration::from_secs(3);

/// The ACL rules of a user that may use fencelock with the default prefix and nothing else:
/// its keys and channels, the commands its scripts run, and those its connections send.
/// `docs/security.md` lists the same commands.
const FENCELOCK_USER: &[&str] = &[
    "resetkeys",
    "~fencelock:*",
    "resetchannels",
    "&fencelock:*",
    "-@all",
    // Connecting.
    "+hello",
    "+auth",
    "+ping",
    // Scripts, and the commands they run.
    "+evalsha",
    "+eval",
    "+script|load",
    "+get",
    "+set",
    "+del",
    "+pexpire",
    "+pttl",
    "+time",
    "+type",
    "+hget",
    "+hset",
    "+hsetnx",
    "+hdel",
    "+hexists",
    "+hgetall",
    "+hincrby",
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zscore",
    "+zcard",
    "+zpopmin",
    "+publish",
    // Waiting.
    "+subscribe",
    "+unsubscribe",
    // Inspection (`fencelock status`).
    "+scan",
    "+exists",
    "+zcount",
    "+pubsub|numsub",
    // `Client::deployment_warnings`.
    "+info",
];

/// A client whose fallback timer never fires within a test.
fn quiet() -> ClientOptions {
    ClientOptions::default().wake_fallback(Duration::from_secs(30))
}

/// Every primitive once, a waiter woken by a release, inspection and a forced release.
async fn exercise(a: &Client, b: &Client) {
    let guard = a.mutex("acct").expect("name").lock().await.expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.mutex("acct").expect("name").lock_timeout(LIMIT).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = a.locks("*").await.expect("locks");
    assert_eq!(held.len(), 1, "{held:?}");
    guard.unlock().await.expect("unlock");
    let taken = tokio::time::timeout(ANNOUNCED_WITHIN, waiter)
        .await
        .expect("woken by the announcement")
        .expect("waiter task")
        .expect("lock");
    taken.unlock().await.expect("unlock");

    let holder = a.holder_named("alice").expect("holder");
    let reentrant = a.reentrant_mutex("acct").expect("name");
    let outer = reentrant.lock(&holder).await.expect("lock");
    reentrant
        .lock(&holder)
        .await
        .expect("re-enter")
        .unlock()
        .await
        .expect("unlock");
    outer.unlock().await.expect("unlock");
    take_each_primitive(a, &holder, "acct").await;

    let stuck = a.mutex("stuck").expect("name").lock().await.expect("lock");
    assert_eq!(a.force_unlock("stuck").await.expect("force").len(), 1);
    assert!(
        stuck.unlock().await.is_err(),
        "the forced release removed it"
    );
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
    exercise(&a, &b).await;
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
async fn an_acl_user_with_only_the_listed_commands_and_the_prefix_can_use_every_primitive() {
    let server = RedisServer::start_with(ServerOptions::default().acl_user(
        "fencelock-app",
        "app-secret",
        FENCELOCK_USER,
    ));
    let url = server.url_with_auth(Some("fencelock-app"), "app-secret");
    let a = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    let b = Client::connect_with_options(url.as_str(), quiet())
        .await
        .expect("connect");
    exercise(&a, &b).await;
    // The user reads every setting the deployment check looks at: the test server runs
    // without an append-only file, and says so.
    let warnings = a.deployment_warnings().await.expect("warnings");
    assert_eq!(
        warnings,
        [DeploymentWarning::NoAppendOnlyFile],
        "{warnings:?}"
    );
}

#[tokio::test]
async fn without_info_the_deployment_check_says_which_settings_it_could_not_read() {
    let without_info: Vec<&str> = FENCELOCK_USER
        .iter()
        .copied()
        .filter(|rule| *rule != "+info")
        .collect();
    let server = RedisServer::start_with(ServerOptions::default().acl_user(
        "fencelock-app",
        "app-secret",
        &without_info,
    ));
    let url = server.url_with_auth(Some("fencelock-app"), "app-secret");
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
    let server = RedisServer::start_with(
        ServerOptions::default()
            .acl_user("fencelock-app", "app-secret", FENCELOCK_USER)
            .acl_user(
                "other-app",
                "other-secret",
                &["~other:*", "resetchannels", "&other:*", "+@all"],
            ),
    );
    let wrong = server.url_with_auth(Some("fencelock-app"), "wrong");
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
