//! The one handle: a `Handle` without a kind takes every kind's lock with each way to wait, as
//! the kind's own methods do, and the kinds whose acquire asks for more (a holder, permits, a
//! side, a value) make a handle per request.

use std::time::Duration;

use crate::common::{client, ms};
use fencelock::{Client, Error, Handle, Layout, LockKind, Wait};
use fencelock_testkit::RedisServer;

/// How long a test waits for something that should take milliseconds, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// Two owners' handles of `kind`'s lock `name`, as code that picks the kind at run time makes
/// them: each pair excludes each other.
fn pair(kind: LockKind, a: &Client, b: &Client, name: &str) -> (Handle, Handle) {
    let owner = |client: &Client| client.holder().expect("holder");
    match kind {
        LockKind::Mutex => (
            a.mutex(name).expect("name").into(),
            b.mutex(name).expect("name").into(),
        ),
        LockKind::FairMutex => (
            a.fair_mutex(name).expect("name").into(),
            b.fair_mutex(name).expect("name").into(),
        ),
        LockKind::ForeignMutex => (
            a.foreign_mutex(Layout::Redisson, name)
                .expect("name")
                .into(),
            b.foreign_mutex(Layout::Redisson, name)
                .expect("name")
                .into(),
        ),
        LockKind::ReentrantMutex => (
            a.reentrant_mutex(name)
                .expect("name")
                .handle_as(&owner(a))
                .into(),
            b.reentrant_mutex(name)
                .expect("name")
                .handle_as(&owner(b))
                .into(),
        ),
        LockKind::Semaphore => (
            a.semaphore(name, 2)
                .expect("name")
                .permits_handle(2)
                .expect("permits")
                .into(),
            b.semaphore(name, 2)
                .expect("name")
                .permits_handle(1)
                .expect("permits")
                .into(),
        ),
        LockKind::RwLock => (
            a.rwlock(name).expect("name").read_handle().into(),
            b.rwlock(name).expect("name").write_handle().into(),
        ),
        LockKind::Election => (
            a.election(name).expect("name").campaign_handle("a").into(),
            b.election(name).expect("name").campaign_handle("b").into(),
        ),
        other => panic!("no pair of handles for {other}: teach this test the new kind"),
    }
}

/// Two owners' handles of every kind's lock `name` (walking [`LockKind::ALL`]), and of a
/// multi-lock of `name` and one more name, whose names are listed as mutexes.
fn pairs(a: &Client, b: &Client, name: &str) -> Vec<(String, Handle, Handle)> {
    let mut pairs: Vec<(String, Handle, Handle)> = LockKind::ALL
        .into_iter()
        .map(|kind| {
            let (first, second) = pair(kind, a, b, name);
            (kind.to_string(), first, second)
        })
        .collect();
    let multi = [name.to_owned(), format!("{name}:pair")];
    pairs.push((
        "multi".to_owned(),
        a.multi_mutex(&multi).expect("names").into(),
        b.multi_mutex(&multi).expect("names").into(),
    ));
    pairs
}

#[tokio::test]
async fn a_handle_without_a_kind_takes_every_kind_with_each_wait() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for (kind, first, second) in pairs(&a, &b, "shared") {
        let held = first.acquire(Wait::No).await.expect(&kind);
        assert_eq!(held.name(), first.name(), "{kind}");
        assert!(
            matches!(second.acquire(Wait::No).await, Err(Error::Held { .. })),
            "{kind}: held by the first"
        );
        assert!(
            matches!(
                second.acquire(Wait::AtMost(ms(100))).await,
                Err(Error::Timeout { .. })
            ),
            "{kind}: still held"
        );
        let waiter = tokio::spawn({
            let second = second.clone();
            async move { second.acquire(Wait::AsConfigured).await }
        });
        tokio::time::sleep(ms(50)).await;
        held.unlock().await.expect(&kind);
        let next = tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap_or_else(|_| panic!("{kind}: the waiter was not granted"))
            .expect("task")
            .expect(&kind);
        next.unlock().await.expect(&kind);
    }
}

#[tokio::test]
async fn a_cancelled_acquire_of_a_handle_without_a_kind_leaves_the_lock_free() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for (kind, first, second) in pairs(&a, &b, "cancelled") {
        let held = first.lock().await.expect(&kind);
        let waiter = tokio::spawn({
            let second = second.clone();
            async move { second.lock().await }
        });
        tokio::time::sleep(ms(50)).await;
        waiter.abort();
        assert!(waiter.await.is_err_and(|e| e.is_cancelled()), "{kind}");
        held.unlock().await.expect(&kind);
        let again = first.lock_timeout(PATIENCE).await.expect(&kind);
        again.unlock().await.expect(&kind);
    }
}

#[tokio::test]
async fn read_and_write_handles_without_a_holder_are_an_owner_of_their_own_at_each_acquire() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.rwlock("catalog").expect("name");
    let writes = lock.write_handle();
    let first = writes.lock().await.expect("write");
    assert!(
        matches!(writes.try_lock().await, Err(Error::Held { .. })),
        "another owner: not reentrant"
    );
    first.unlock().await.expect("unlock");

    let job = c.holder().expect("holder");
    let as_job = lock.write_handle_as(&job);
    let outer = as_job.lock().await.expect("write");
    let inner = as_job
        .try_lock()
        .await
        .expect("the same owner enters again");
    assert_eq!(inner.fence(), outer.fence());
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_kind_s_own_refusals_come_through_a_handle_without_a_kind() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let semaphore = c.semaphore("slots", 2).expect("name");
    assert!(matches!(
        semaphore.permits_handle(0),
        Err(Error::InvalidOption {
            option: "permits",
            ..
        })
    ));
    let too_many: Handle = semaphore.permits_handle(3).expect("permits").into();
    for wait in [Wait::No, Wait::AtMost(ms(100))] {
        assert!(
            matches!(
                too_many.acquire(wait).await,
                Err(Error::InvalidOption {
                    option: "permits",
                    ..
                })
            ),
            "{wait:?}"
        );
    }

    let lock = c.rwlock("schema").expect("name");
    let reader = c.holder().expect("holder");
    let read = lock.read_handle_as(&reader).lock().await.expect("read");
    let upgrade: Handle = lock.write_handle_as(&reader).into();
    assert!(matches!(
        upgrade.try_lock().await,
        Err(Error::WouldDeadlock { .. })
    ));
    read.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_handle_says_its_kind_name_and_request() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex: Handle = c.mutex("jobs").expect("name").into();
    let shown = format!("{mutex:?}");
    assert!(
        shown.starts_with("Mutex {") && shown.contains("\"jobs\""),
        "{shown}"
    );
    let permits = c
        .semaphore("jobs", 3)
        .expect("name")
        .permits_handle(2)
        .expect("permits");
    let shown = format!("{permits:?}");
    assert!(
        shown.starts_with("Semaphore {") && shown.contains("permits: 2"),
        "{shown}"
    );
    let multi = c.multi_mutex(["a", "b"]).expect("names");
    assert_eq!(multi.name(), "[a, b]");
    assert_eq!(multi.names().collect::<Vec<_>>(), ["a", "b"]);
}
