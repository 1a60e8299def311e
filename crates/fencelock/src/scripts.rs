//! The Lua scripts, one `.lua` file each, hashed once and run with EVALSHA.

use std::sync::LazyLock;

pub(crate) use redis::Script;

use crate::transport::conn::Conn;

/// A script that grants locks: `lua/fence.lua` (`next_fence`) followed by `lua/<file>`.
macro_rules! granting_script {
    ($($file:literal),+) => {
        ::std::sync::LazyLock::new(|| {
            ::redis::Script::new(concat!(
                include_str!("lua/fence.lua"),
                $(include_str!(concat!("lua/", $file))),+
            ))
        })
    };
}
pub(crate) use granting_script;

/// A script from `lua/<file>`.
macro_rules! script {
    ($file:literal) => {
        ::std::sync::LazyLock::new(|| ::redis::Script::new(include_str!(concat!("lua/", $file))))
    };
}
pub(crate) use script;

/// A script that announces releases, from the concatenation of `lua/<file>`s; see
/// [`Announcing`].
macro_rules! announcing_script {
    ($($file:literal),+) => {
        ::std::sync::LazyLock::new(|| {
            $crate::scripts::Announcing::new(concat!($(include_str!(concat!("lua/", $file))),+))
        })
    };
}
pub(crate) use announcing_script;

/// A script that announces releases on a wake channel, built twice: with `PUBLISH` for one
/// server, and with `SPUBLISH` (sharded pub/sub) for a cluster, where a plain `PUBLISH` would be
/// broadcast to every node while only the channel's shard has subscribers. A cluster of Redis
/// 6.2, which has no `SPUBLISH`, pays that broadcast. The Lua source calls
/// `redis.call(PUBLISH, channel, payload)`; the local `PUBLISH` is set in front of it.
pub(crate) struct Announcing {
    plain: Script,
    sharded: Script,
}

impl Announcing {
    pub(crate) fn new(source: &str) -> Announcing {
        Announcing {
            plain: Script::new(&format!("local PUBLISH = 'PUBLISH'\n{source}")),
            sharded: Script::new(&format!("local PUBLISH = 'SPUBLISH'\n{source}")),
        }
    }

    /// The variant for the deployment behind `conn`.
    pub(crate) fn on(&self, conn: &Conn) -> &Script {
        if conn.announces_sharded() {
            &self.sharded
        } else {
            &self.plain
        }
    }

    /// The variant for one server, for tests that run scripts directly.
    #[cfg(test)]
    pub(crate) fn plain(&self) -> &Script {
        &self.plain
    }
}

pub(crate) static MUTEX_ACQUIRE: LazyLock<Script> =
    granting_script!("mutex_value.lua", "mutex_acquire.lua");
pub(crate) static MUTEX_RELEASE: LazyLock<Announcing> =
    announcing_script!("mutex_value.lua", "mutex_release.lua");
pub(crate) static MUTEX_EXTEND: LazyLock<Script> = script!("mutex_extend.lua");
/// The batch renewal, after the helpers that only ever move an expiry later.
pub(crate) static RENEW_BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/expiries.lua"),
        include_str!("lua/renew_batch.lua")
    ))
});
pub(crate) static FENCE_RAISE: LazyLock<Script> = script!("fence_raise.lua");
pub(crate) static ELECTION_ACQUIRE: LazyLock<Announcing> =
    announcing_script!("fence.lua", "election_acquire.lua");
pub(crate) static ELECTION_RELEASE: LazyLock<Announcing> =
    announcing_script!("election_release.lua");
pub(crate) static ELECTION_PROCLAIM: LazyLock<Announcing> =
    announcing_script!("election_proclaim.lua");
pub(crate) static ELECTION_LEADER: LazyLock<Script> = script!("election_leader.lua");

/// Every script, run directly against a real server.
#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const LOCK: &str = "t:{n}:mutex";
    const WAITERS: &str = "t:{n}:mutex-waiters";
    const WAKE: &str = "t:{n}:wake";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

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
        MUTEX_ACQUIRE
            .key(LOCK)
            .key(WAITERS)
            .arg(token)
            .arg(lease)
            .arg(60_000)
            .arg("host-1")
            .arg(place_ms)
            .arg(u8::from(refused_before))
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
        MUTEX_RELEASE
            .plain()
            .key(LOCK)
            .key(WAITERS)
            .arg(token)
            .arg(WAKE)
            .arg("")
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

    /// The payloads announced on `channel` while `during` runs.
    async fn announced_on<F: std::future::Future>(
        server: &RedisServer,
        channel: &str,
        during: F,
    ) -> Vec<String> {
        let mut pubsub = redis::Client::open(server.url().as_str())
            .expect("url")
            .get_async_pubsub()
            .await
            .expect("pubsub");
        pubsub.subscribe(channel).await.expect("subscribe");
        during.await;
        // A marker published last: everything before it has arrived once it does.
        let mut c = conn(server).await;
        redis::cmd("PUBLISH")
            .arg(channel)
            .arg("end")
            .exec_async(&mut c)
            .await
            .expect("publish");
        let mut payloads = Vec::new();
        let mut messages = pubsub.on_message();
        while let Ok(Some(message)) = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            futures_next(&mut messages),
        )
        .await
        {
            let payload: String = message.get_payload().expect("utf-8 payload");
            if payload == "end" {
                break;
            }
            payloads.push(payload);
        }
        payloads
    }

    async fn futures_next<S: futures_core::Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
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
                MUTEX_EXTEND
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
            [""],
            "nobody has a place: any one waiter per process"
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

    const LEADER: &str = "t:{e}:election";
    const LEADER_FENCE: &str = "t:{e}:fence";
    const CANDIDATES: &str = "t:{e}:wake";
    const OBSERVERS: &str = "t:{e}:election-changes";

    async fn campaign(c: &mut MultiplexedConnection, token: &str, value: &str) -> Vec<i64> {
        ELECTION_ACQUIRE
            .plain()
            .key(LEADER)
            .key(LEADER_FENCE)
            .arg(token)
            .arg(10_000)
            .arg(60_000)
            .arg(value)
            .arg(OBSERVERS)
            .invoke_async(c)
            .await
            .expect("campaign")
    }

    async fn leader(c: &mut MultiplexedConnection) -> Option<(String, i64)> {
        ELECTION_LEADER
            .key(LEADER)
            .invoke_async(c)
            .await
            .expect("leader")
    }

    #[tokio::test]
    async fn election_scripts_check_the_owner_and_keep_fence_since_and_lease() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        assert_eq!(leader(&mut c).await, None);
        let won = campaign(&mut c, "a:", "v:1").await;
        assert_eq!(won[0], 1);
        let (stored, pttl) = leader(&mut c).await.expect("a leader");
        let fields: Vec<&str> = stored.splitn(4, ':').collect();
        assert_eq!((fields[0], fields[1]), ("a", won[1].to_string().as_str()));
        assert_eq!(fields[3], "v:1");
        assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
        assert_eq!(
            campaign(&mut c, "a:", "other").await,
            won,
            "a retry is idempotent"
        );
        assert_eq!(campaign(&mut c, "b:", "v").await[0], 0);

        let proclaim = |c: &mut MultiplexedConnection, token: &'static str| {
            let mut c = c.clone();
            async move {
                ELECTION_PROCLAIM
                    .plain()
                    .key(LEADER)
                    .arg(token)
                    .arg("v:2")
                    .arg(OBSERVERS)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("proclaim")
            }
        };
        let mut p = c.clone();
        let payloads = announced_on(&server, OBSERVERS, async move {
            assert_eq!(proclaim(&mut p, "b:").await, -1, "a foreign proclamation");
            assert_eq!(proclaim(&mut p, "a:").await, 1);
        })
        .await;
        assert_eq!(
            payloads,
            ["*"],
            "only the leader's proclamation is announced"
        );
        let (proclaimed, pttl) = leader(&mut c).await.expect("a leader");
        assert_eq!(
            proclaimed,
            format!("{}:{}:{}:v:2", fields[0], fields[1], fields[2])
        );
        assert!(pttl > 0, "the lease is kept: {pttl}");

        let release = |c: &mut MultiplexedConnection, token: &'static str| {
            let mut c = c.clone();
            async move {
                ELECTION_RELEASE
                    .plain()
                    .key(LEADER)
                    .arg(token)
                    .arg(CANDIDATES)
                    .arg(OBSERVERS)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("release")
            }
        };
        let mut r = c.clone();
        let payloads = announced_on(&server, CANDIDATES, async move {
            assert_eq!(release(&mut r, "b:").await, -1, "a foreign resignation");
            assert_eq!(release(&mut r, "a:").await, 1);
            assert_eq!(release(&mut r, "a:").await, 0, "nobody leads");
        })
        .await;
        assert_eq!(
            payloads,
            [""],
            "one wake per process, for the resignation only"
        );
        assert_eq!(proclaim(&mut c, "a:").await, 0, "nothing to proclaim");
        assert_eq!(leader(&mut c).await, None);
        assert!(campaign(&mut c, "b:", "w").await[1] > won[1], "fences rise");
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

    #[tokio::test]
    async fn batch_renewal_renews_only_what_each_holder_still_holds() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let run = |c: &mut MultiplexedConnection, cmd: &[&str]| {
            let mut c = c.clone();
            let mut command = redis::cmd(cmd[0]);
            for arg in &cmd[1..] {
                command.arg(*arg);
            }
            async move { command.exec_async(&mut c).await.expect("setup command") }
        };
        run(&mut c, &["SET", "v:{1}", "a:1", "PX", "1000"]).await;
        run(&mut c, &["SET", "v:{2}", "x:2", "PX", "1000"]).await;
        run(&mut c, &["HSET", "v:{3}", "f", "v"]).await;
        run(&mut c, &["HSET", "h:{1}", "a:", "1"]).await;
        run(&mut c, &["PEXPIRE", "h:{1}", "1000"]).await;
        // Per-holder expiries: live for a second more for a:, already passed for b:.
        let (secs, micros): (i64, i64) =
            redis::cmd("TIME").query_async(&mut c).await.expect("time");
        let soon = secs * 1000 + micros / 1000 + 1000;
        let ahead = soon.to_string();
        let ahead = ahead.as_str();
        run(&mut c, &["HSET", "he:{1}", "a:", ahead, "b:", "1"]).await;
        run(&mut c, &["PEXPIRE", "he:{1}", "1000"]).await;
        run(&mut c, &["ZADD", "z:{1}", ahead, "a:", "1", "b:"]).await;
        run(&mut c, &["PEXPIRE", "z:{1}", "1000"]).await;
        let renewed: Vec<i64> = RENEW_BATCH
            .key("v:{1}")
            .arg("v")
            .arg("a:")
            .arg(30_000)
            .key("v:{2}")
            .arg("v")
            .arg("a:")
            .arg(30_000)
            .key("v:{3}")
            .arg("v")
            .arg("a:")
            .arg(30_000)
            .key("v:{4}")
            .arg("v")
            .arg("a:")
            .arg(30_000)
            .key("h:{1}")
            .arg("h")
            .arg("a:")
            .arg(30_000)
            .key("h:{1}")
            .arg("h")
            .arg("c:")
            .arg(30_000)
            .key("he:{1}")
            .arg("he")
            .arg("a:")
            .arg(30_000)
            .key("z:{1}")
            .arg("z")
            .arg("a:")
            .arg(30_000)
            .key("z:{1}")
            .arg("z")
            .arg("c:")
            .arg(30_000)
            .key("he:{1}")
            .arg("he")
            .arg("b:")
            .arg(30_000)
            .key("z:{1}")
            .arg("z")
            .arg("b:")
            .arg(30_000)
            .invoke_async(&mut c)
            .await
            .expect("a wrong-typed key does not fail the batch");
        assert_eq!(renewed, vec![1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0]);
        for key in ["v:{1}", "h:{1}", "he:{1}", "z:{1}"] {
            assert!(pttl(&mut c, key).await > 1000, "{key} renewed");
        }
        assert!(
            pttl(&mut c, "v:{2}").await <= 1000,
            "a foreign value is untouched"
        );
        // Per-holder expiries: the renewed holder's moves to the server's now + lease; the
        // ended holder's is not revived.
        let expiries: Vec<i64> = redis::cmd("HMGET")
            .arg("he:{1}")
            .arg("a:")
            .arg("b:")
            .query_async(&mut c)
            .await
            .expect("hmget");
        assert!(
            expiries[0] > soon + 20_000 && expiries[1] == 1,
            "{expiries:?}"
        );
        let score: f64 = redis::cmd("ZSCORE")
            .arg("z:{1}")
            .arg("a:")
            .query_async(&mut c)
            .await
            .expect("zscore");
        assert!(score > (soon + 20_000) as f64);

        // A renewal never shortens: an expiry an extension moved beyond the renewal's lease
        // stays where it is, for a key and for a holder.
        let far = soon + 3_600_000;
        run(&mut c, &["SET", "v:{5}", "a:1", "PX", "3600000"]).await;
        run(&mut c, &["HSET", "he:{5}", "a:", &far.to_string()]).await;
        run(&mut c, &["PEXPIRE", "he:{5}", "3600000"]).await;
        let renewed: Vec<i64> = RENEW_BATCH
            .key("v:{5}")
            .arg("v")
            .arg("a:")
            .arg(30_000)
            .key("he:{5}")
            .arg("he")
            .arg("a:")
            .arg(30_000)
            .invoke_async(&mut c)
            .await
            .expect("renewal");
        assert_eq!(renewed, vec![1, 1]);
        for key in ["v:{5}", "he:{5}"] {
            assert!(
                pttl(&mut c, key).await > 3_500_000,
                "{key} kept its extension"
            );
        }
        let kept: i64 = redis::cmd("HGET")
            .arg("he:{5}")
            .arg("a:")
            .query_async(&mut c)
            .await
            .expect("hget");
        assert_eq!(kept, far);
    }
}
