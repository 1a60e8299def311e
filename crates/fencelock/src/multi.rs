//! Several mutex names held together: all of them or none.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use crate::error::{Error, Result};
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::MUTEX;
use crate::keys::LockKeys;
use crate::options::{Lease, MutexOptions};
use crate::scripts::{announcing_script, granting_script, script, Announcing};
use crate::shared::Shared;
use crate::token::{Fence, OwnerToken};

static ACQUIRE: LazyLock<Script> = granting_script!("mutex_value.lua", "multi_acquire.lua");
static RELEASE: LazyLock<Announcing> = announcing_script!("mutex_value.lua", "multi_release.lua");
static EXTEND: LazyLock<Script> = script!("multi_extend.lua");

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
/// waits is woken by a release of any of the names.
///
/// Because every name is taken in one step, two multi-locks over overlapping sets can never
/// deadlock, whatever order their names are given in: neither ever holds part of its set while
/// it waits for the rest. Use it where one operation touches several resources that each have
/// their own lock (a transfer between two accounts, a job over several shards). The names are
/// given as bytes; a name given twice is locked once (see
/// [`Client::multi_mutex`](crate::Client::multi_mutex)).
///
/// The handle is cheap to clone and touches Redis only when asked to lock.
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
#[doc = include_str!("../docs/rustdoc-links.md")]
#[doc = include_str!("../docs/multi.md")]
#[derive(Clone)]
pub struct MultiMutex {
    inner: Arc<Inner>,
}

/// One name of the lock and its keys.
struct Member {
    name: Vec<u8>,
    display: String,
    lock_key: Vec<u8>,
    wake_channel: Vec<u8>,
}

/// The names, keys and settings, computed once per handle.
struct Inner {
    shared: Arc<Shared>,
    /// The names for errors: `[a, b, …]`.
    name: String,
    /// In the caller's order, without repeats; never empty.
    members: Vec<Member>,
    lease: Lease,
    lease_ms: u64,
    wait_timeout: Option<Duration>,
}

impl MultiMutex {
    pub(crate) fn new<I>(shared: Arc<Shared>, names: I, options: MutexOptions) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        for (given, name) in names.into_iter().enumerate() {
            if given == MAX_MULTI_NAMES {
                return Err(Error::InvalidName {
                    reason: "a multi-lock takes at most 1024 names",
                });
            }
            let name = name.as_ref();
            let keys = LockKeys::new(&shared.options.prefix, name)?;
            if !seen.insert(name.to_vec()) {
                continue;
            }
            members.push(Member {
                name: name.to_vec(),
                display: keys.display_name(),
                lock_key: keys.key(MUTEX.lock),
                wake_channel: keys.key(MUTEX.wake),
            });
        }
        if members.is_empty() {
            return Err(Error::InvalidName {
                reason: "a multi-lock needs at least one name",
            });
        }
        refuse_several_shards(&shared, &members)?;
        Ok(MultiMutex {
            inner: Arc::new(Inner {
                shared,
                name: display_names(&members),
                members,
                lease,
                lease_ms,
                wait_timeout: options.wait_timeout,
            }),
        })
    }

    /// The names, in the order given, each once (lossily decoded where not UTF-8).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.inner.members.iter().map(|m| m.display.as_str())
    }

    /// The lease each grant of this lock gets, on every name.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    /// Waits until every name is acquired, or until the lock's
    /// [`wait_timeout`](MutexOptions::wait_timeout) if it has one.
    ///
    /// While any name is held by another owner, the caller sleeps until a release of any of
    /// the names is announced (or, if announcements are lost, at most the client's
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback), and never past the longest
    /// remaining lease among the held names), then tries the whole set again. It never holds
    /// some names while waiting for others.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when a name's key holds another Redis type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the wait limit
    /// (without one, for the client's [`outage_limit`](crate::ClientOptions::outage_limit)): the
    /// last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the names may have been
    /// granted without the caller knowing: they are released in the background, by owner
    /// token, so a cancelled `lock()` leaves every name free.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let single = client.mutex("shard-2")?.lock().await?;
    /// let both = client.multi_mutex(["shard-1", "shard-2"])?;
    /// let waiter = tokio::spawn(async move { both.lock().await.map(|guard| guard.fences().len()) });
    /// single.unlock().await?; // wakes the waiter at once
    /// assert_eq!(waiter.await.expect("task")?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<MultiMutexGuard> {
        let held = grant::acquire(&self.inner, self.inner.wait_timeout).await?;
        Ok(MultiMutexGuard { held })
    }

    /// Waits at most `timeout` for every name. See [`MultiMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`MultiMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: fencelock::MultiMutex) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match lock.lock_timeout(Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("one of the accounts stays busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MultiMutexGuard> {
        let held = grant::acquire(&self.inner, Some(timeout)).await?;
        Ok(MultiMutexGuard { held })
    }

    /// Tries once to take every name, without waiting. When any name is held by another owner,
    /// none is taken.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds any of the names, with the
    /// longest remaining lease among the held ones; otherwise as [`MultiMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let one = client.mutex("b")?.lock().await?;
    /// match client.multi_mutex(["a", "b"])?.try_lock().await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// // All or none: "a" was not taken.
    /// client.mutex("a")?.try_lock().await?.unlock().await?;
    /// one.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<MultiMutexGuard> {
        let held = grant::try_acquire(&self.inner).await?;
        Ok(MultiMutexGuard { held })
    }

    /// Waits for every name as [`lock`](MultiMutex::lock) does, runs `work` while it is held,
    /// and gives it back: [`MultiMutexGuard::using`] in one call. See [`Mutex::using`](crate::Mutex::using).
    ///
    /// # Errors
    ///
    /// As [`MultiMutex::lock`] while waiting, then as [`MultiMutexGuard::using`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiMutex::lock`] while waiting; afterwards dropping the future drops
    /// `work` and gives every name back in the background.
    ///
    /// # Examples
    ///
    /// See [`Mutex::using`](crate::Mutex::using).
    pub async fn using<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock().await?.using(work).await
    }
}

impl fmt::Debug for MultiMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiMutex")
            .field("names", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .finish()
    }
}

/// A script may only touch keys of one slot on Redis Cluster, and the names of one multi-lock
/// usually hash to several.
fn refuse_several_shards(shared: &Shared, members: &[Member]) -> Result<()> {
    let shard = |m: &Member| shared.conn.shard_of(&m.lock_key);
    let first = members.first().and_then(shard);
    if members.iter().any(|m| shard(m) != first) {
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

impl Resource for Inner {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "multi_mutex"
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn lease(&self) -> Lease {
        self.lease
    }

    fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// The first name's channel; waiters listen on every name's ([`Inner::wake_channels`]).
    fn wake_channel(&self) -> &[u8] {
        self.members
            .first()
            .map_or(&[][..], |m| m.wake_channel.as_slice())
    }

    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        self.members.iter().map(|m| m.wake_channel.as_slice())
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let options = &self.shared.options;
        let mut invocation = ACQUIRE.prepare_invoke();
        for member in &self.members {
            invocation.key(member.lock_key.as_slice());
        }
        invocation
            .arg(token.as_str())
            .arg(self.lease_ms)
            .arg(options.holder_label.as_str());
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let mut invocation = RELEASE.on(&self.shared().conn).prepare_invoke();
        invocation
            .arg(token.as_str())
            .arg(self.shared.options.fence_memory_ms());
        for member in &self.members {
            invocation
                .key(member.lock_key.as_slice())
                .arg(member.wake_channel.as_slice());
        }
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        let mut invocation = EXTEND.prepare_invoke();
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

/// Proof of holding every name of a [`MultiMutex`], with one lease for all of them and a
/// fencing token per name.
///
/// Release it with [`unlock`](MultiMutexGuard::unlock) to learn whether every name was still
/// held. Dropping the guard releases them in the background, best effort; if that release
/// cannot reach Redis, the names free themselves when their lease ends.
/// A drop only queues the release to the client's background task, which ends with the
/// runtime: before the program exits, call [`Client::shutdown`](crate::Client::shutdown), which
/// gives back every lock still held and waits for the releases queued.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let guard = client.multi_mutex(["orders", "stock"])?.lock().await?;
/// let stock_fence = guard.fence("stock").expect("a locked name");
/// assert!(guard.is_held());
/// tokio::select! {
///     reason = guard.lost() => panic!("lost a name: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// # let _ = stock_fence;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues the release of every name to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct MultiMutexGuard {
    held: Held<Inner>,
}

impl MultiMutexGuard {
    /// Each name with the fencing token of this grant for it, in the order the names were
    /// given (each name once). A name's token is larger than that of every earlier grant of the
    /// name, by a multi-lock or a [`Mutex`](crate::Mutex) alike.
    pub fn fences(&self) -> impl ExactSizeIterator<Item = (&str, Fence)> + '_ {
        self.held
            .resource()
            .members
            .iter()
            .zip(self.held.fences())
            .map(|(member, &fence)| (member.display.as_str(), fence))
    }

    /// The fencing token of one name of this grant, or `None` if the lock does not have that
    /// name.
    pub fn fence(&self, name: impl AsRef<[u8]>) -> Option<Fence> {
        let name = name.as_ref();
        self.held
            .resource()
            .members
            .iter()
            .zip(self.held.fences())
            .find_map(|(member, &fence)| (member.name == name).then_some(fence))
    }
}

guard! {
    MultiMutexGuard {
        valid_until:
        /// The instant until which every name is certainly held: the time the last successful
        /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether every name is still held as far as this process knows, without asking Redis:
        /// the lost signal has not fired and the validity deadline has not passed.
        lost:
        /// Completes when any name is lost: when renewal finds one of the keys deleted or taken,
        /// or when the validity deadline passes without a successful renewal of them all. Stop
        /// touching every protected resource when it fires.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe; call it as often as you like, from `select!` loops too.
        ///
        /// # Examples
        ///
        /// See [`MultiMutexGuard`].
        extend:
        /// Makes the lease of every name last at least `lease` from now, if all of them are still
        /// held; if any is not, nothing is extended. It never shortens it: with less than the time left, nothing changes. A renewed lease
        /// is renewed as before, which never cuts an extension short: renewals take over when
        /// the extension has run down to the lock's own lease length.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when any name was lost;
        /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
        /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: a dropped extension either reached Redis or did not; the validity deadline
        /// only moves on a confirmed reply.
        ///
        /// # Examples
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), fencelock::Error> {
        /// # let server = fencelock_testkit::RedisServer::start();
        /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
        /// use std::time::Duration;
        /// use fencelock::{Lease, MutexOptions};
        ///
        /// let options = MutexOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
        /// let guard = client.multi_mutex_with_options(["in", "out"], options)?.lock().await?;
        /// guard.extend(Duration::from_secs(60)).await?;
        /// guard.unlock().await?;
        /// # Ok(())
        /// # }
        /// ```
        release unlock:
        /// Releases every name and reports whether all of them were still held until then.
        ///
        /// One script deletes each name's key that still holds this grant's token and announces
        /// each of those releases. A release whose reply was lost is resent; if the resend finds
        /// none of the names held while the validity deadline has not passed, the first send
        /// released them, so this reports success rather than a false error.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when any name had already expired, been
        /// deleted or been taken: what it protected was unprotected for a while. The names still
        /// held are released all the same. [`Error::Redis`](crate::Error::Redis) when Redis cannot
        /// be reached; the names then free themselves when their lease ends.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
        /// background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`MultiMutex`].
        release_no_earlier_than unlock_no_earlier_than:
        /// Releases every name, but not before `at`, as
        /// [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than): when `at`
        /// is still ahead, the names are left to end by themselves at `at` instead of being given
        /// back now; otherwise this is [`unlock`](MultiMutexGuard::unlock).
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: the request is handed to the client's background task when this is
        /// called, so dropping the future, polled or not, only stops waiting for the answer;
        /// the names are still kept until `at`.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        using:
        /// Runs `work` while the set of names is held, then releases them, as
        /// [`MutexGuard::using`](crate::MutexGuard::using): `work` gets the fence and is stopped when
        /// the set of names is lost.
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::using`](crate::MutexGuard::using).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future drops `work` and releases them in the background, as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::using`](crate::MutexGuard::using).
    }
}

impl fmt::Debug for MultiMutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiMutexGuard")
            .field("fences", &self.fences().collect::<Vec<_>>())
            .field("held", &self.is_held())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const A: &str = "t:{a}:mutex";
    const B: &str = "t:{b}:mutex";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    async fn acquire(c: &mut MultiplexedConnection, token: &str) -> Vec<i64> {
        ACQUIRE
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
