//! Several mutex names held together: all of them or none.

use std::collections::HashSet;
use std::sync::Arc;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::shared::Shared;
use crate::core::FENCE;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::kinds::mutex;
use crate::kinds::value::VALUE;
use crate::options::LockOptions;
use crate::token::{Fence, OwnerToken};
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[FENCE, VALUE, include_str!("multi/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[FENCE, VALUE, include_str!("multi/release.lua")]);
static EXTEND: Lua = Lua::new(&[include_str!("multi/extend.lua")]);

/// The most names one [`MultiMutex`] locks together.
pub const MAX_MULTI_NAMES: usize = 1024;

/// How many names the lock's display name spells out before it only counts the rest.
const NAMES_SHOWN: usize = 8;

/// Several [`Mutex`](crate::Mutex) names locked together, all or none: Redisson's `MultiLock`,
/// node-redlock's lock of several resources.
///
/// Each name is held exactly as a [`Mutex`](crate::Mutex) of that name holds it (same key,
/// same value), so a multi-lock over `{A, B}` and `client.mutex("A")` exclude each other, and
/// each name gets its own [`Fence`] from its own sequence. Acquiring is one round trip: one
/// script reads every name's key and either grants them all or changes nothing. A caller that
/// waits is woken by a release of any of the names that grants it to nobody else (a release
/// hands a name to a waiting [`Mutex`](crate::Mutex) of that name first), and, if the
/// announcements are lost, at most the client's
/// [`wake_fallback`](crate::ClientOptions::wake_fallback) later, never past the longest
/// remaining lease among the held names. It is a [`Handle`], whose methods are written there;
/// its [`name`](Handle::name) lists the names.
///
/// Because every name is taken in one step, two multi-locks over overlapping sets can never
/// deadlock, whatever order their names are given in: neither ever holds part of its set while
/// it waits for the rest. Use it where one operation touches several resources that each have
/// their own lock (a transfer between two accounts, a job over several shards). The names are
/// given as bytes; a name given twice is locked once (see
/// [`Client::multi_mutex`](crate::Client::multi_mutex)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = fencelock::Client::connect(url.as_str()).await?;
/// let transfer = client.multi_mutex(["account:17", "account:42"])?;
///
/// let guard = transfer.lock().await?;
/// for (account, fence) in guard.fences() {
///     println!("{account} under fence {fence}");
/// }
/// // Each name is now held as by a Mutex of that name.
/// assert!(client.mutex("account:42")?.try_lock().await.is_err());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[doc = include_str!("../../docs/rustdoc-links.md")]
#[doc = include_str!("../../docs/multi.md")]
pub type MultiMutex = Handle<MultiGrant>;

/// Proof of holding every name of a [`MultiMutex`]: a [`Guard`](crate::Guard) of several
/// names at once, with a fence for each.
pub type MultiMutexGuard = Guard<MultiGrant>;

/// One name of the lock and its keys.
struct Member {
    name: Vec<u8>,
    display: String,
    lock_key: Vec<u8>,
    /// The name's Mutex waiters' places, which a release hands the name to first.
    places_key: Vec<u8>,
    wake_channel: Vec<u8>,
}

/// A multi-lock's names, keys and settings, computed once per handle: what its grants are of.
pub struct MultiGrant {
    /// Named by every name, as a list shown in errors and spans; its keys are the first
    /// name's.
    lock: Lock,
    members: Vec<Member>,
}

impl MultiMutex {
    pub(crate) fn new<I>(shared: Arc<Shared>, names: I, options: &LockOptions) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut members = Vec::new();
        let mut first = None;
        let mut seen = HashSet::new();
        for (given, name) in names.into_iter().enumerate() {
            if given == MAX_MULTI_NAMES {
                return Err(Error::InvalidName {
                    reason: "a multi-lock takes at most 1024 names",
                });
            }
            let name = name.as_ref();
            let keys = LockKeys::new(shared.prefix(), name)?;
            if !seen.insert(name.to_vec()) {
                continue;
            }
            let display = keys.display_name();
            members.push(Member {
                name: name.to_vec(),
                display,
                lock_key: keys.key(mutex::LOCK_KEY),
                places_key: keys.key(mutex::PLACES),
                wake_channel: keys.key(mutex::WAKE),
            });
            first.get_or_insert(keys);
        }
        let Some(first) = first else {
            return Err(Error::InvalidName {
                reason: "a multi-lock needs at least one name",
            });
        };
        refuse_several_shards(&shared, &members)?;
        let mut lock = Lock::new::<MultiGrant>(shared, first, options)?;
        lock.name = display_names(&members);
        Ok(Handle::of(Arc::new(MultiGrant { lock, members })))
    }

    /// The names, in the order given, each once (lossily decoded where not UTF-8).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.grant.members.iter().map(|m| m.display.as_str())
    }
}

/// A script may only touch keys of one slot on Redis Cluster, and the names of one multi-lock
/// usually hash to several.
fn refuse_several_shards(shared: &Shared, members: &[Member]) -> Result<()> {
    let Some(first) = members.first() else {
        return Ok(());
    };
    if !members
        .iter()
        .all(|m| shared.same_shard(&first.lock_key, &m.lock_key))
    {
        return Err(Error::Unsupported {
            what: "a multi-lock over names of several hash slots",
            deployment: "Redis Cluster",
        });
    }
    Ok(())
}

/// `[a, b, c]`, or the first few names and a count of the rest.
fn display_names(members: &[Member]) -> String {
    let mut shown: Vec<String> = members
        .iter()
        .take(NAMES_SHOWN)
        .map(|m| m.display.clone())
        .collect();
    if members.len() > NAMES_SHOWN {
        shown.push(format!("… {} more", members.len() - NAMES_SHOWN));
    }
    format!("[{}]", shown.join(", "))
}

impl Kind for MultiGrant {
    const NAME: &'static str = "multi_mutex";
    const GUARD: &'static str = "MultiMutexGuard";
    const HANDLE: &'static str = "MultiMutex";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::Mutex;

    fn lock(&self) -> &Lock {
        &self.lock
    }

    fn names_taken(&self) -> Vec<String> {
        self.members.iter().map(|m| m.display.clone()).collect()
    }

    /// The first name's: a multi-lock has at least one name.
    fn wake_channel(&self) -> &[u8] {
        self.members
            .first()
            .map_or(&[][..], |m| m.wake_channel.as_slice())
    }

    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        self.members.iter().map(|m| m.wake_channel.as_slice())
    }

    fn acquire(&self, token: &OwnerToken, _waits: bool, _refused_before: bool) -> Invocation {
        let mut invocation = ACQUIRE.invocation();
        for member in &self.members {
            invocation.key(member.lock_key.as_slice());
        }
        invocation
            .arg(token.as_str())
            .arg(self.lock.lease_ms)
            .arg(self.lock.label());
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let mut invocation = RELEASE.invocation();
        invocation
            .arg(token.as_str())
            .arg(self.lock.fence_memory_ms());
        for member in &self.members {
            invocation
                .key(member.lock_key.as_slice())
                .arg(member.wake_channel.as_slice());
        }
        for member in &self.members {
            invocation.key(member.places_key.as_slice());
        }
        invocation.arg(self.lock.handoff_window_ms());
        invocation
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        let mut invocation = EXTEND.invocation();
        for member in &self.members {
            invocation.key(member.lock_key.as_slice());
        }
        invocation.arg(token.as_str()).arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        self.members
            .iter()
            .map(|member| Renewal {
                key: member.lock_key.clone(),
                member: token.as_str().to_owned(),
                kind: RenewKind::Value,
            })
            .collect()
    }
}

impl Guard<MultiGrant> {
    /// Each name with the fencing token of this grant for it, in the order the names were
    /// given (each name once). A name's token is larger than that of every earlier grant of the
    /// name, by a multi-lock or a [`Mutex`](crate::Mutex) alike.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.multi_mutex(["orders", "stock"])?.lock().await?;
    /// let names: Vec<&str> = guard.fences().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["orders", "stock"]);
    /// assert_eq!(guard.fence_of("stock"), guard.fences().nth(1).map(|(_, f)| f));
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fences(&self) -> impl ExactSizeIterator<Item = (&str, Fence)> + '_ {
        self.held
            .grant()
            .members
            .iter()
            .zip(self.held.fences())
            .map(|(member, &fence)| (member.display.as_str(), fence))
    }

    /// The fencing token of one name of this grant, or `None` if the lock does not have that
    /// name.
    ///
    /// # Examples
    ///
    /// See [`fences`](Guard::fences).
    pub fn fence_of(&self, name: impl AsRef<[u8]>) -> Option<Fence> {
        let name = name.as_ref();
        self.held
            .grant()
            .members
            .iter()
            .zip(self.held.fences())
            .find_map(|(member, &fence)| (member.name == name).then_some(fence))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::conn;

    const A: &str = "t:{a}:mutex";
    const B: &str = "t:{b}:mutex";

    async fn acquire(c: &mut MultiplexedConnection, token: &str) -> Vec<i64> {
        ACQUIRE
            .plain()
            .key(A)
            .key(B)
            .arg(token)
            .arg(10_000)
            .arg("")
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
        RELEASE
            .plain()
            .key(A)
            .key(B)
            .key("t:{a}:mutex-waiters")
            .key("t:{b}:mutex-waiters")
            .arg(token)
            .arg(60_000)
            .arg("t:{a}:wake")
            .arg("t:{b}:wake")
            .invoke_async(c)
            .await
            .expect("release")
    }

    async fn extend(c: &mut MultiplexedConnection, token: &str) -> i64 {
        EXTEND
            .plain()
            .key(A)
            .key(B)
            .arg(token)
            .arg(50_000)
            .invoke_async(c)
            .await
            .expect("extend")
    }

    #[tokio::test]
    async fn acquire_grants_all_with_a_fence_each_and_answers_a_resend_alike() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let granted = acquire(&mut c, "tokA:").await;
        assert_eq!(granted.len(), 3);
        assert_eq!(granted[0], 1);
        assert_eq!(
            server.cli(&["GET", A]),
            format!("tokA:{}", granted[1]),
            "the Mutex's value"
        );
        assert_eq!(server.cli(&["GET", B]), format!("tokA:{}", granted[2]));
        assert_eq!(
            acquire(&mut c, "tokA:").await,
            granted,
            "same token, same grant"
        );

        // Part of the grant deleted, then a resend: the missing name is granted anew.
        server.cli(&["DEL", B]);
        let regranted = acquire(&mut c, "tokA:").await;
        assert_eq!(regranted[1], granted[1]);
        assert!(regranted[2] > granted[2]);
    }

    #[tokio::test]
    async fn a_refusal_reports_the_longest_lease_and_keeps_nothing_of_the_token() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        server.cli(&["SET", B, "other:1", "PX", "20000"]);
        let refused = acquire(&mut c, "tokA:").await;
        assert_eq!(refused[0], 0);
        assert!(refused[1] > 10_000 && refused[1] <= 20_000, "{refused:?}");
        assert_eq!(server.cli(&["EXISTS", A]), "0");
        assert_eq!(server.cli(&["GET", B]), "other:1+", "marked: someone waits");

        server.cli(&["SET", A, "x:1"]);
        assert_eq!(acquire(&mut c, "tokA:").await, vec![0, -1], "no expiry");

        // What a resend finds when part of an earlier grant was deleted and retaken.
        server.cli(&["SET", A, "tokA:5", "PX", "10000"]);
        assert_eq!(acquire(&mut c, "tokA:").await[0], 0);
        assert_eq!(
            server.cli(&["GET", A]),
            "~5",
            "the token's part is gone, its fence kept"
        );
        assert_eq!(server.cli(&["GET", B]), "other:1+");
    }

    #[tokio::test]
    async fn a_lock_key_of_another_type_fails_before_any_lock_key_is_written() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        server.cli(&["LPUSH", B, "x"]);
        let result: redis::RedisResult<Vec<i64>> = ACQUIRE
            .plain()
            .key(A)
            .key(B)
            .arg("tokA:")
            .arg(10_000)
            .arg("")
            .invoke_async(&mut c)
            .await;
        assert!(result.is_err());
        assert_eq!(server.cli(&["EXISTS", A]), "0");
    }

    #[tokio::test]
    async fn released_names_keep_their_fence_and_the_next_grant_rises_above_it() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let first = acquire(&mut c, "tokA:").await;
        assert_eq!(release(&mut c, "tokA:").await, 1);
        assert_eq!(server.cli(&["GET", A]), format!("~{}", first[1]));
        let ttl: i64 = server.cli(&["PTTL", A]).parse().expect("pttl");
        assert!(
            ttl > 50_000 && ttl <= 60_000,
            "kept for the fence memory: {ttl}"
        );
        // A fence remembered above the clock: the next grant still rises above it.
        let ahead = first[2] + 3_600_000_000;
        server.cli(&["SET", B, &format!("~{ahead}"), "PX", "60000"]);
        let second = acquire(&mut c, "tokB:").await;
        assert!(second[1] > first[1], "{first:?} then {second:?}");
        assert_eq!(second[2], ahead + 1);
    }

    #[tokio::test]
    async fn release_and_extend_report_all_none_or_some() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        assert_eq!(release(&mut c, "tokA:").await, 0);
        assert_eq!(extend(&mut c, "tokA:").await, 0);
        acquire(&mut c, "tokA:").await;
        assert_eq!(release(&mut c, "tokB:").await, 0, "a foreign release");
        assert_eq!(extend(&mut c, "tokB:").await, 0, "a foreign extend");
        assert_eq!(extend(&mut c, "tokA:").await, 1);
        let pttl: i64 = server.cli(&["PTTL", B]).parse().expect("pttl");
        assert!(pttl > 10_000, "{pttl}");

        // One name taken by another owner: extend changes nothing, release frees the rest.
        server.cli(&["SET", B, "tokB:1", "PX", "5000"]);
        assert_eq!(extend(&mut c, "tokA:").await, -1);
        let pttl: i64 = server.cli(&["PTTL", B]).parse().expect("pttl");
        assert!(pttl <= 5000, "{pttl}");
        assert_eq!(release(&mut c, "tokA:").await, -1);
        assert!(server.cli(&["GET", A]).starts_with('~'), "released");
        assert_eq!(server.cli(&["GET", B]), "tokB:1");

        server.cli(&["DEL", B]);
        assert_eq!(acquire(&mut c, "tokC:").await[0], 1);
        // A key of another type: the other name is still released.
        server.cli(&["DEL", B]);
        server.cli(&["HSET", B, "f", "v"]);
        assert_eq!(extend(&mut c, "tokC:").await, -1);
        assert_eq!(release(&mut c, "tokC:").await, -1);
        assert!(server.cli(&["GET", A]).starts_with('~'), "released");
    }

    #[tokio::test]
    async fn release_announces_each_name_someone_waited_for() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "tokA:").await;
        assert_eq!(release(&mut c, "tokA:").await, 1, "nobody waited");
        acquire(&mut c, "tokA:").await;
        assert_eq!(
            acquire(&mut c, "tokB:").await[0],
            0,
            "a refused attempt marks both"
        );
        let mut pubsub = redis::Client::open(server.url().as_str())
            .expect("url")
            .get_async_pubsub()
            .await
            .expect("pubsub");
        pubsub
            .subscribe(&["t:{a}:wake", "t:{b}:wake"])
            .await
            .expect("subscribe");
        assert_eq!(release(&mut c, "tokA:").await, 1);
        let mut channels = Vec::new();
        let mut messages = pubsub.on_message();
        for _ in 0..2 {
            let message = tokio::time::timeout(
                Duration::from_secs(2),
                std::future::poll_fn(|cx| {
                    futures_core::Stream::poll_next(std::pin::Pin::new(&mut messages), cx)
                }),
            )
            .await
            .expect("announced")
            .expect("message");
            assert_eq!(message.get_payload_bytes(), b"");
            channels.push(message.get_channel_name().to_owned());
        }
        channels.sort();
        assert_eq!(channels, ["t:{a}:wake", "t:{b}:wake"]);
    }

    #[test]
    fn long_sets_show_a_few_names_and_count_the_rest() {
        let members: Vec<Member> = (0..10)
            .map(|i| Member {
                name: vec![],
                display: i.to_string(),
                lock_key: vec![],
                places_key: vec![],
                wake_channel: vec![],
            })
            .collect();
        assert_eq!(
            display_names(&members),
            "[0, 1, 2, 3, 4, 5, 6, 7, … 2 more]"
        );
        assert_eq!(display_names(&members[..2]), "[0, 1]");
    }
}
