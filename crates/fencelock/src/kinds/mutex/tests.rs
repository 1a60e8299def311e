//! The mutex's scripts, run directly against a real server.

use fencelock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use super::*;

const LOCK: &str = "t:{n}:mutex";
const WAITERS: &str = "t:{n}:mutex-waiters";
const WAKE: &str = "t:{n}:wake";

use crate::testing::{announced_on, conn, pttl};

async fn acquire(c: &mut MultiplexedConnection, token: &str, lease: u64) -> Vec<i64> {
    acquire_waiting(c, token, lease, 0, false).await
}

/// The label every test holder leaves.
const LABEL: &str = "host-1";

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
        .arg(LABEL)
        .arg(place_ms)
        .arg(u8::from(refused_before))
        .arg(u8::from(place_ms > 0))
        .invoke_async(c)
        .await
        .expect("acquire")
}

/// How long the tests' releases offer the lock to the next waiter, in ms.
const WINDOW: u64 = 1_000;

/// A release by `token`, whose own place (if it has one) asked for a lease of 10 s.
async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
    try_release(c, token).await.expect("release")
}

async fn try_release(c: &mut MultiplexedConnection, token: &str) -> redis::RedisResult<i64> {
    RELEASE
        .plain()
        .key(LOCK)
        .key(WAITERS)
        .arg(token)
        .arg(WAKE)
        .arg(60_000)
        .arg(place(token, 10_000))
        .arg(WINDOW)
        .invoke_async::<i64>(c)
        .await
}

/// The fence a held value carries.
fn fence_of(value: &str) -> i64 {
    value
        .split(':')
        .nth(1)
        .and_then(|f| f.trim_end_matches(['+', '?']).parse().ok())
        .unwrap_or_else(|| panic!("a held value with a fence: {value}"))
}

/// A waiter's place member, as the scripts store it.
fn place(token: &str, lease: u64) -> String {
    format!("{token}{lease}:{LABEL}")
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
            value::EXTEND
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
async fn a_release_offers_the_lock_to_the_waiter_whose_place_ends_first_and_warns_the_next() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    assert_eq!(
        acquire_waiting(&mut c, "b:", 30_000, 5_000, false).await[0],
        0
    );
    assert_eq!(
        acquire_waiting(&mut c, "c:", 10_000, 20_000, false).await[0],
        0
    );
    assert_eq!(acquire(&mut c, "try:", 10_000).await[0], 0);
    assert_eq!(
        waiters(&mut c).await,
        [place("b:", 30_000), place("c:", 10_000)],
        "a try takes no place"
    );
    let ttl = pttl(&mut c, WAITERS).await;
    // Lengthened to twice the longest place when that place ended after the set.
    assert!(
        ttl > 20_000 && ttl <= 40_000,
        "the set outlives its longest place: {ttl}"
    );
    // A waiter first in line whose place ended (it stopped trying) is skipped.
    redis::cmd("ZADD")
        .arg(WAITERS)
        .arg(1)
        .arg(place("gone:", 10_000))
        .exec_async(&mut c)
        .await
        .expect("zadd");
    let marked = get(&mut c, LOCK).await;
    assert!(marked.contains('+'), "refusals mark the value: {marked}");

    let before = fence_of(&marked);
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(
        payloads,
        ["b:".to_owned(), format!("c:?{WINDOW}")],
        "b: is told it may claim the lock, and c:, behind it, how long the offer lasts"
    );
    let offered = get(&mut c, LOCK).await;
    let fence = fence_of(&offered);
    assert!(fence > before, "fences rise through a hand-over");
    assert_eq!(
        offered,
        format!("b:{fence}+?:{LABEL}"),
        "offered to b:, marked since others wait, and not claimed yet"
    );
    let ttl = pttl(&mut c, LOCK).await;
    assert!(
        ttl > 0 && ttl <= i64::try_from(WINDOW).expect("ms"),
        "an offer lasts the window, not b:'s lease: {ttl}"
    );
    assert_eq!(
        waiters(&mut c).await,
        [place("c:", 10_000)],
        "gone: was dropped, b: offered the lock"
    );
    // b: claims it: its next attempt answers the same grant, now for its lease.
    assert_eq!(
        acquire_waiting(&mut c, "b:", 30_000, 5_000, true).await,
        [1, fence]
    );
    let ttl = pttl(&mut c, LOCK).await;
    assert!(
        ttl > 20_000 && ttl <= 30_000,
        "claimed for b:'s lease: {ttl}"
    );
    assert_eq!(
        get(&mut c, LOCK).await,
        format!("b:{fence}+:{LABEL}"),
        "a plain hold once claimed"
    );

    // c: gives up while b: holds: nothing is announced.
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "c:").await, -1, "c: gives up");
    })
    .await;
    assert!(payloads.is_empty(), "{payloads:?}");
    assert!(waiters(&mut c).await.is_empty(), "c: left the set");

    // Nobody with a place: one waiter of each process is woken, once per release.
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "b:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["~b:"]);
    assert!(get(&mut c, LOCK).await.starts_with('~'));
}

#[tokio::test]
async fn a_waiter_whose_client_is_gone_is_skipped_and_one_giving_up_hands_the_lock_on() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    // Tokens that name their clients: `gone`'s client no longer listens, `live`'s does.
    for waiter in ["gone.1:", "live.2:"] {
        assert_eq!(
            acquire_waiting(&mut c, waiter, 10_000, 5_000, false).await[0],
            0
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let mut r = c.clone();
    let payloads = announced_on(&server, "t:{n}:wake:live", async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["live.2:"], "one offer, to the live waiter");
    assert!(get(&mut c, LOCK).await.starts_with("live.2:"));
    assert!(waiters(&mut c).await.is_empty());

    // The holder's lease ends without a release; a waiter that gives up hands the free
    // lock to the next one instead of leaving it to that one's next try.
    redis::cmd("DEL")
        .arg(LOCK)
        .exec_async(&mut c)
        .await
        .expect("del");
    assert_eq!(acquire(&mut c, "h:", 10_000).await[0], 1);
    for waiter in ["x:", "y:"] {
        assert_eq!(
            acquire_waiting(&mut c, waiter, 10_000, 5_000, false).await[0],
            0
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    redis::cmd("DEL")
        .arg(LOCK)
        .exec_async(&mut c)
        .await
        .expect("del");
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "x:").await, 0, "x: gives up, the lock free");
    })
    .await;
    assert_eq!(payloads, ["y:"]);
    assert!(get(&mut c, LOCK).await.starts_with("y:"));
}

#[tokio::test]
async fn an_offer_nobody_claims_ends_with_the_window_and_the_next_attempt_takes_the_lock() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    for waiter in ["frozen:", "next:"] {
        assert_eq!(
            acquire_waiting(&mut c, waiter, 600_000, 5_000, false).await[0],
            0
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["frozen:".to_owned(), format!("next:?{WINDOW}")]);
    let offered = fence_of(&get(&mut c, LOCK).await);
    // `frozen:` never claims: its ten-minute lease is never given, the offer ends.
    redis::cmd("PEXPIRE")
        .arg(LOCK)
        .arg(1)
        .exec_async(&mut c)
        .await
        .expect("pexpire");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let taken = acquire_waiting(&mut c, "next:", 600_000, 5_000, true).await;
    assert_eq!(taken[0], 1, "the waiter told of the offer takes the lock");
    assert!(taken[1] > offered, "with a higher fence");
    assert_eq!(
        acquire_waiting(&mut c, "frozen:", 600_000, 5_000, true).await[0],
        0,
        "a claim after the offer ended is refused: the message proved nothing"
    );
}

#[tokio::test]
async fn an_offer_is_not_extended_before_its_waiter_claims_it() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    assert_eq!(
        acquire_waiting(&mut c, "b:", 30_000, 5_000, false).await[0],
        0
    );
    // Heard, so offered.
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(release(&mut r, "a:").await, 1);
    })
    .await;
    assert_eq!(payloads, ["b:"]);
    let extender = c.clone();
    let extend = |token: &'static str| {
        let mut c = extender.clone();
        async move {
            value::EXTEND
                .plain()
                .key(LOCK)
                .arg(token)
                .arg(600_000)
                .invoke_async::<i64>(&mut c)
                .await
                .expect("extend")
        }
    };
    // A renewal of b:'s token still on its way from an earlier hold must not make an offer
    // nobody may claim last ten minutes.
    assert_eq!(extend("b:").await, 0, "offered, not held: not extended");
    assert_eq!(extend("x:").await, -1, "another owner's");
    assert!(pttl(&mut c, LOCK).await <= i64::try_from(WINDOW).expect("ms"));
    assert_eq!(
        acquire_waiting(&mut c, "b:", 30_000, 5_000, true).await[0],
        1,
        "claimed"
    );
    assert_eq!(extend("b:").await, 1, "held once claimed");
    assert!(pttl(&mut c, LOCK).await > 30_000);
}

#[tokio::test]
async fn a_place_whose_lease_is_out_of_range_is_dropped_and_the_release_still_succeeds() {
    let server = RedisServer::start();
    let mut c = conn(&server).await;
    assert_eq!(acquire(&mut c, "a:", 10_000).await[0], 1);
    assert_eq!(
        acquire_waiting(&mut c, "b:", 10_000, 5_000, false).await[0],
        0
    );
    // Ahead of b:, places that ask for no lease and for more than any lease, as a member
    // written by hand or by another version might.
    for (score, member) in [(1, "zero:0"), (2, "huge:99999999999999999999")] {
        redis::cmd("ZADD")
            .arg(WAITERS)
            .arg(4_000_000_000_000_i64 + score)
            .arg(member)
            .exec_async(&mut c)
            .await
            .expect("zadd");
    }
    // b:'s place scored last, so the malformed ones come first.
    redis::cmd("ZADD")
        .arg(WAITERS)
        .arg(4_000_000_000_010_i64)
        .arg(place("b:", 10_000))
        .exec_async(&mut c)
        .await
        .expect("zadd");
    let mut r = c.clone();
    let payloads = announced(&server, async move {
        assert_eq!(
            try_release(&mut r, "a:")
                .await
                .expect("no error from a malformed place"),
            1
        );
    })
    .await;
    assert_eq!(
        payloads,
        ["b:"],
        "the malformed places are dropped unannounced"
    );
    assert!(get(&mut c, LOCK).await.starts_with("b:"));
    assert!(waiters(&mut c).await.is_empty());
}

async fn get(c: &mut MultiplexedConnection, key: &str) -> String {
    redis::cmd("GET")
        .arg(key)
        .query_async(c)
        .await
        .expect("get")
}
