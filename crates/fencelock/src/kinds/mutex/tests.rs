//! The mutex's scripts, run directly against a real server.

use fencelock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use super::*;

const LOCK: &str = "t:{n}:mutex";
const WAITERS: &str = "t:{n}:mutex-waiters";
const WAKE: &str = "t:{n}:wake";

use crate::testing::{announced_on, conn};

async fn acquire(c: &mut MultiplexedConnection, token: &str, lease: u64) -> Vec<i64> {
    acquire_waiting(c, token, lease, 0, false).await
}

/// An attempt that takes a place of `place_ms` among the waiters when refused.
async fn acquire_waiting(
    c: &mut MultiplexedConnection,
    token: &str,
    lease: u64,
    place_ms: u64,
    refused_before: bool,
) -> Vec<i64> {
    ACQUIRE
        .plain()
        .key(LOCK)
        .key(WAITERS)
        .arg(token)
        .arg(lease)
        .arg(60_000)
        .arg("host-1")
        .arg(place_ms)
        .arg(u8::from(refused_before))
        .arg(u8::from(place_ms > 0))
        .invoke_async(c)
        .await
        .expect("acquire")
}

async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
    RELEASE
        .plain()
        .key(LOCK)
        .key(WAITERS)
        .arg(token)
        .arg(WAKE)
        .arg(200)
        .arg(60_000)
        .invoke_async::<i64>(c)
        .await
        .expect("release")
}

async fn waiters(c: &mut MultiplexedConnection) -> Vec<String> {
    members(c, WAITERS).await
}

async fn members(c: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .expect("zrange")
}

/// The payloads announced on the wake channel while `during` runs.
async fn announced<F: std::future::Future>(server: &RedisServer, during: F) -> Vec<String> {
    announced_on(server, WAKE, during).await
}

async fn pttl(c: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(c)
        .await
        .expect("pttl")
}

#[tokio::test]
async fn acquire_grants_once_and_a_retry_with_the_same_token_is_idempotent() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let granted = acquire(&mut c, "tokA:", 10_000).await;
    assert_eq!(granted[0], 1);
    let value: String = redis::cmd("GET")
        .arg(LOCK)
        .query_async(&mut c)
        .await
        .expect("get");
    assert_eq!(value, format!("tokA:{}:host-1", granted[1]));

    let retried = acquire(&mut c, "tokA:", 20_000).await;
    assert_eq!(retried, granted, "same token: same grant, same fence");
    assert!(
        pttl(&mut c, LOCK).await > 10_000,
        "the retry refreshed the lease"
    );

    let refused = acquire(&mut c, "tokB:", 10_000).await;
    assert_eq!(refused[0], 0);
    assert!(refused[1] > 10_000 && refused[1] <= 20_000, "{refused:?}");
    // Tokens end with the separator, so a shorter token never matches a longer one.
    assert_eq!(acquire(&mut c, "tok:", 10_000).await[0], 0);
}

#[tokio::test]
async fn fences_rise_above_a_remembered_value_and_survive_its_loss() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let first = acquire(&mut c, "a:", 10_000).await[1];
    redis::cmd("DEL")
        .arg(LOCK)
        .exec_async(&mut c)
        .await
        .expect("del");
    let second = acquire(&mut c, "b:", 10_000).await[1];
    assert!(
        second > first,
        "clock-based fences rise without the stored one"
    );
    // A release leaves the fence behind for the fence memory, and the next grant rises
    // above it even when it is ahead of the clock (a clock that stepped back).
    assert_eq!(release(&mut c, "b:").await, 1);
    let left: String = redis::cmd("GET")
        .arg(LOCK)
        .query_async(&mut c)
        .await
        .expect("get");
    assert_eq!(left, format!("~{second}"));
    let ttl = pttl(&mut c, LOCK).await;
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    let ahead = second + 10_000_000;
    redis::cmd("SET")
        .arg(LOCK)
        .arg(format!("~{ahead}"))
        .exec_async(&mut c)
        .await
        .expect("set");
    assert_eq!(acquire(&mut c, "c:", 10_000).await[1], ahead + 1);
}

#[tokio::test]
async fn release_and_extend_check_the_owner() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    let extend = |c: &mut MultiplexedConnection, token: &'static str| {
        let mut c = c.clone();
        async move {
            EXTEND
                .plain()
                .key(LOCK)
                .arg(token)
                .arg(50_000)
                .invoke_async::<i64>(&mut c)
                .await
                .expect("extend")
        }
    };
    assert_eq!(release(&mut c, "a:").await, 0, "nothing to release");
    assert_eq!(extend(&mut c, "a:").await, 0, "nothing to extend");
    acquire(&mut c, "a:", 10_000).await;
    assert_eq!(release(&mut c, "b:").await, -1, "foreign release refused");
    assert_eq!(extend(&mut c, "b:").await, -1, "foreign extend refused");
    assert!(pttl(&mut c, LOCK).await <= 10_000);
    assert_eq!(extend(&mut c, "a:").await, 1);
    assert!(pttl(&mut c, LOCK).await > 10_000);

    // Nobody waited: the release announces nothing and leaves only the fence behind.
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert!(payloads.is_empty(), "{payloads:?}");
    let left: String = redis::cmd("GET")
        .arg(LOCK)
        .query_async(&mut c)
        .await
        .expect("get");
    assert!(left.starts_with('~'), "{left}");
    assert_eq!(release(&mut c, "a:").await, 0, "released already");
    assert_eq!(extend(&mut c, "a:").await, 0, "released: nothing to extend");
}

#[tokio::test]
async fn a_release_wakes_one_waiter_by_its_token_and_a_giving_up_waiter_passes_it_on() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    assert_eq!(
        acquire_waiting(&mut c, "b:", 10_000, 5_000, false).await[0],
        0
    );
    assert_eq!(
        acquire_waiting(&mut c, "c:", 10_000, 20_000, false).await[0],
        0
    );
    assert_eq!(acquire(&mut c, "try:", 10_000).await[0], 0);
    assert_eq!(waiters(&mut c).await, ["b:", "c:"], "a try takes no place");
    let ttl = pttl(&mut c, WAITERS).await;
    assert!(
        ttl > 5_000 && ttl <= 20_000,
        "the list outlives its longest place: {ttl}"
    );
    // A waiter first in line whose place ended (it stopped trying) is skipped.
    redis::cmd("ZADD")
        .arg(WAITERS)
        .arg(1)
        .arg("gone:")
        .exec_async(&mut c)
        .await
        .expect("zadd");
    let marked: String = redis::cmd("GET")
        .arg(LOCK)
        .query_async(&mut c)
        .await
        .expect("get");
    assert!(marked.contains('+'), "refusals mark the value: {marked}");

    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["b:"], "one waiter woken, by its token");
    assert_eq!(waiters(&mut c).await, ["c:"], "gone: was dropped, b: woken");

    assert_eq!(
        acquire_waiting(&mut c, "b:", 10_000, 5_000, true).await[0],
        1
    );
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(
            release(&mut r, "c:").await,
            -1,
            "c: gives up while b: holds"
        );
    })
    .await;
    assert!(payloads.is_empty(), "{payloads:?}");
    assert!(waiters(&mut c).await.is_empty(), "c: left the list");

    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "b:").await, 1);
    })
    .await;
    assert_eq!(
        payloads,
        ["~b:"],
        "nobody has a place: any one waiter per process, once per release"
    );

    assert_eq!(acquire(&mut c, "e:", 10_000).await[0], 1);
    assert_eq!(
        acquire_waiting(&mut c, "f:", 10_000, 5_000, false).await[0],
        0
    );
    assert_eq!(
        acquire_waiting(&mut c, "g:", 10_000, 5_000, false).await[0],
        0
    );
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "e:").await, 1);
        // f: was woken but gives up before it claims the free lock.
        assert_eq!(release(&mut r, "f:").await, 0);
    })
    .await;
    assert_eq!(
        payloads,
        ["f:", "g:"],
        "the wake f: did not use went on to g:"
    );
    assert_eq!(
        acquire_waiting(&mut c, "g:", 10_000, 5_000, true).await[0],
        1
    );
    assert!(waiters(&mut c).await.is_empty());
}

#[tokio::test]
async fn the_lock_is_kept_for_a_woken_waiter_which_waits_again_if_late() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    for waiter in ["b:", "c:"] {
        assert_eq!(
            acquire_waiting(&mut c, waiter, 10_000, 5_000, false).await[0],
            0
        );
    }
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["b:"]);
    // The lock is kept for b: a moment: another task asking now is refused.
    let kept = acquire(&mut c, "x:", 10_000).await;
    assert!(kept[0] == 0 && kept[1] > 0 && kept[1] <= 200, "{kept:?}");
    // b: comes too late: the lock is free for anyone, another task takes it, and b: takes
    // a new place, behind c:'s (places are scored by the server's milliseconds).
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    assert_eq!(acquire(&mut c, "x:", 10_000).await[0], 1);
    for waiter in ["c:", "b:"] {
        assert_eq!(
            acquire_waiting(&mut c, waiter, 10_000, 5_000, true).await[0],
            0
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "x:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["c:"], "the place that ends first");
    assert_eq!(
        acquire_waiting(&mut c, "c:", 10_000, 5_000, true).await[0],
        1
    );
    assert_eq!(waiters(&mut c).await, ["b:"]);
}
