//! The reentrant mutex, and the explicit owners ([`Holder`]) that reentrant locks are held by.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use crate::error::Result;
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::REENTRANT;
use crate::keys::LockKeys;
use crate::options::{Lease, MutexOptions};
use crate::scripts::{announcing_script, granting_script, script, Announcing};
use crate::shared::Shared;
use crate::token::OwnerToken;

static ACQUIRE: LazyLock<Script> = granting_script!("rmutex_acquire.lua");
static RELEASE: LazyLock<Announcing> = announcing_script!("rmutex_release.lua");
static EXTEND: LazyLock<Script> = script!("rmutex_extend.lua");

/// The longest holder id accepted by [`Client::holder_named`], in bytes.
pub(crate) const MAX_HOLDER_LEN: usize = 128;

/// Who holds a reentrant lock: the owner that re-enters it, and the only one that can release
/// its holds.
///
/// Reentrant locks ([`ReentrantMutex`], [`RwLock`](crate::RwLock)) do not use thread ids, since
/// async tasks move between threads and one task may act for several owners: the owner is
/// passed explicitly. An owner is the id of the [`Client`](crate::Client) that made the holder plus the
/// holder's own id, so two clients never share an owner even with equal holder names, and a
/// holder keeps meaning the same owner whichever of its client's locks it is used with.
///
/// Cloning is cheap; clones are the same owner.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
/// let request = client.holder()?; // a fresh owner, e.g. one per request
/// let worker = client.holder_named("worker-3")?; // a chosen one, stable for this client
/// assert_ne!(request, worker);
/// assert_eq!(worker.id(), "worker-3");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// `<client id>:<holder id>`: what the lock scripts store and compare.
    owner: Arc<str>,
    /// Where the holder id starts in `owner`.
    id_at: usize,
}

impl Holder {
    pub(crate) fn new(client_id: &str, id: &str) -> Holder {
        Holder {
            owner: format!("{client_id}:{id}").into(),
            id_at: client_id.len() + 1,
        }
    }

    /// The holder's own id: random, or the name given to [`Client::holder_named`](crate::Client::holder_named).
    pub fn id(&self) -> &str {
        self.owner.get(self.id_at..).unwrap_or_default()
    }

    /// The id of the client that made this holder.
    pub fn client_id(&self) -> &str {
        self.owner
            .get(..self.id_at.saturating_sub(1))
            .unwrap_or_default()
    }

    /// The owner as stored in Redis.
    pub(crate) fn owner(&self) -> &Arc<str> {
        &self.owner
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("client_id", &self.client_id())
            .field("id", &self.id())
            .finish()
    }
}

/// A distributed mutex that its owner may lock again while holding it.
///
/// The owner is an explicit [`Holder`], not a thread. Each `lock` by the owner that holds it
/// adds a hold and returns a guard of its own; each guard released gives one hold back, and the
/// lock is free when the last one is gone. Any other owner is refused until then, and can never
/// release the owner's holds. Use it where code that holds a lock calls code that takes the
/// same lock for the same owner (a job that calls a helper which locks the job's ledger).
///
/// Every operation is one round trip: a script on one Redis hash holding the owner, the hold
/// count, the fence, and one field per hold, named by that hold's random token. The lock's
/// lease covers the longest lease among the owner's holds and is renewed in the background by
/// default, as for [`Mutex`](crate::Mutex).
///
/// Holds are counted by token, so a request resent after a lost reply, or the background
/// release of a `lock()` cancelled mid-flight, can neither count a hold twice nor give back a
/// hold it never got.
///
/// **Fencing**: the owner's first hold takes a new [`Fence`](crate::Fence); the holds it adds while it keeps
/// the lock get that same fence, since no other owner can have held the lock in between. A
/// later owner's first hold gets a larger one.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let mutex = client.reentrant_mutex("ledger")?;
/// let job = client.holder()?;
/// let outer = mutex.lock(&job).await?;
/// let inner = mutex.lock(&job).await?; // the same owner enters again
/// assert_eq!(inner.fence(), outer.fence());
///
/// let other = client.holder()?;
/// assert!(mutex.try_lock(&other).await.is_err());
///
/// inner.unlock().await?;
/// outer.unlock().await?; // the last hold frees the lock
/// mutex.try_lock(&other).await?.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ReentrantMutex {
    inner: Arc<Inner>,
}

/// The lock's name, keys and settings, computed once per handle.
struct Inner {
    shared: Arc<Shared>,
    name: String,
    lock_key: Vec<u8>,
    fence_key: Vec<u8>,
    wake_channel: Vec<u8>,
    lease: Lease,
    lease_ms: u64,
    fence_memory_ms: u64,
    wait_timeout: Option<Duration>,
}

/// One owner's claim on the lock: what the grant core acquires, holds and releases.
struct Claim {
    lock: Arc<Inner>,
    owner: Arc<str>,
}

impl ReentrantMutex {
    pub(crate) fn new(
        shared: Arc<Shared>,
        keys: &LockKeys,
        options: &MutexOptions,
    ) -> Result<Self> {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let fence_memory_ms = shared.options.fence_memory_ms();
        Ok(ReentrantMutex {
            inner: Arc::new(Inner {
                shared,
                name: keys.display_name(),
                lock_key: keys.key(REENTRANT.lock),
                fence_key: keys.fence_key(),
                wake_channel: keys.key(REENTRANT.wake),
                lease,
                lease_ms,
                fence_memory_ms,
                wait_timeout: options.wait_timeout,
            }),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease each hold of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    fn claim(&self, holder: &Holder) -> Arc<Claim> {
        Arc::new(Claim {
            lock: Arc::clone(&self.inner),
            owner: Arc::clone(holder.owner()),
        })
    }

    /// Waits until `holder` holds the lock, or until the mutex's
    /// [`wait_timeout`](MutexOptions::wait_timeout) if it has one. If `holder` already holds
    /// it, this adds a hold at once.
    ///
    /// While another owner holds the lock, the caller sleeps until the last of that owner's
    /// holds is released (or, if the announcement is lost, at most the client's
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the lock's
    /// remaining lease), then tries again.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another Redis type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the wait limit
    /// (without one, for the client's [`outage_limit`](crate::ClientOptions::outage_limit)): the
    /// last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, a hold may have been
    /// granted without the caller knowing: that hold alone is given back in the background, by
    /// its token, so the owner's other holds keep their count.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.reentrant_mutex("invoices")?;
    /// let (first, second) = (client.holder()?, client.holder()?);
    /// let held = mutex.lock(&first).await?;
    /// let waiter = tokio::spawn({
    ///     let mutex = mutex.clone();
    ///     async move { mutex.lock(&second).await.map(|guard| guard.fence()) }
    /// });
    /// let before = held.fence();
    /// held.unlock().await?; // the last hold: wakes the waiter at once
    /// assert!(waiter.await.expect("task")? > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, holder: &Holder) -> Result<ReentrantMutexGuard> {
        let held = grant::acquire(&self.claim(holder), self.inner.wait_timeout).await?;
        Ok(ReentrantMutexGuard { held })
    }

    /// Waits at most `timeout` for the lock. See [`ReentrantMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`ReentrantMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ReentrantMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: fencelock::ReentrantMutex, job: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match mutex.lock_timeout(&job, Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("another owner is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_timeout(
        &self,
        holder: &Holder,
        timeout: Duration,
    ) -> Result<ReentrantMutexGuard> {
        let held = grant::acquire(&self.claim(holder), Some(timeout)).await?;
        Ok(ReentrantMutexGuard { held })
    }

    /// Tries once to take the lock (or one more hold of it) for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds it, with the time its
    /// lease still runs; otherwise as [`ReentrantMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ReentrantMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.reentrant_mutex("cron:cleanup")?;
    /// let guard = mutex.try_lock(&client.holder_named("cron")?).await?;
    /// match mutex.try_lock(&client.holder_named("api")?).await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, holder: &Holder) -> Result<ReentrantMutexGuard> {
        let held = grant::try_acquire(&self.claim(holder)).await?;
        Ok(ReentrantMutexGuard { held })
    }
}

impl fmt::Debug for ReentrantMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantMutex")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .finish()
    }
}

impl Resource for Claim {
    fn name(&self) -> &str {
        &self.lock.name
    }

    fn kind(&self) -> &'static str {
        "reentrant_mutex"
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.lock.shared
    }

    fn lease(&self) -> Lease {
        self.lock.lease
    }

    fn lease_ms(&self) -> u64 {
        self.lock.lease_ms
    }

    fn wake_channel(&self) -> &[u8] {
        &self.lock.wake_channel
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let lock = &self.lock;
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(lock.lock_key.as_slice())
            .key(lock.fence_key.as_slice())
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(lock.lease_ms)
            .arg(lock.fence_memory_ms)
            .arg(lock.shared.options.holder_label.as_str());
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let mut invocation = RELEASE.on(&self.shared().conn).prepare_invoke();
        invocation
            .key(self.lock.lock_key.as_slice())
            .arg(token.as_str())
            .arg(self.lock.wake_channel.as_slice());
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        let mut invocation = EXTEND.prepare_invoke();
        invocation
            .key(self.lock.lock_key.as_slice())
            .arg(token.as_str())
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.lock.lock_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::HashField,
        }]
    }
}

/// Proof of one hold of a [`ReentrantMutex`], with its lease and fencing token.
///
/// Release it with [`unlock`](ReentrantMutexGuard::unlock) to learn whether it was still held.
/// Dropping the guard gives its hold back in the background, best effort; if that cannot reach
/// Redis, the lock frees itself when its lease ends. Either way only this guard's hold is given
/// back: the owner's other guards keep the lock.
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
/// let guard = client.reentrant_mutex("reindex")?.lock(&client.holder()?).await?;
/// assert!(guard.is_held());
/// tokio::select! {
///     reason = guard.lost() => panic!("lost the lock: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues giving its hold back to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct ReentrantMutexGuard {
    held: Held<Claim>,
}

guard! {
    ReentrantMutexGuard {
        fence:
        /// The fencing token of the owner's holds: taken by its first hold, shared by the holds it
        /// added while keeping the lock, larger than that of every earlier owner.
        name:
        /// The lock's name.
        valid_until:
        /// The instant until which this hold is certainly held: the time the last successful
        /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether this hold is still held as far as this process knows, without asking Redis: the
        /// lost signal has not fired and the validity deadline has not passed.
        lost:
        /// Completes when this hold is lost: when renewal finds it gone, or when the validity
        /// deadline passes without a successful renewal. Stop touching the protected resource when
        /// it fires.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe; call it as often as you like, from `select!` loops too.
        ///
        /// # Examples
        ///
        /// See [`ReentrantMutexGuard`].
        extend:
        /// Makes the lock last at least `lease` from now, if this hold is still held. It never
        /// shortens the lock, which the owner's other holds may rely on. A renewed lease is
        /// renewed as before, which never cuts an extension short: renewals take over when the
        /// extension has run down to the mutex's own lease length.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was lost;
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
        /// let mutex = client.reentrant_mutex_with_options("export", options)?;
        /// let guard = mutex.lock(&client.holder()?).await?;
        /// guard.extend(Duration::from_secs(60)).await?;
        /// guard.unlock().await?;
        /// # Ok(())
        /// # }
        /// ```
        release unlock:
        /// Gives this hold back and reports whether it was still held until then. The lock is free
        /// once the owner's last hold is given back.
        ///
        /// A release whose reply was lost is resent; if the resend finds the hold gone while the
        /// validity deadline has not passed, the first send released it, so this reports success
        /// rather than a false error.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold had already expired: whatever the
        /// guard protected was unprotected for a while. [`Error::Redis`](crate::Error::Redis) when
        /// Redis cannot be reached; the lock then frees itself when its lease ends.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
        /// background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`ReentrantMutex`].
        using:
        /// Runs `work` while the hold is held, then gives it back, as
        /// [`MutexGuard::using`](crate::MutexGuard::using): `work` gets the fence and is stopped when
        /// the hold is lost.
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::using`](crate::MutexGuard::using).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future drops `work` and gives it back in the background, as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::using`](crate::MutexGuard::using).
        debug: []
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<Holder>();
        is_send_sync::<ReentrantMutex>();
        is_send_sync::<ReentrantMutexGuard>();
    }

    #[test]
    fn a_holder_splits_into_client_and_id() {
        let holder = Holder::new("abcdefghijklmnopqrstuv", "worker-3");
        assert_eq!(&**holder.owner(), "abcdefghijklmnopqrstuv:worker-3");
        assert_eq!(holder.client_id(), "abcdefghijklmnopqrstuv");
        assert_eq!(holder.id(), "worker-3");
    }
}

/// The scripts, run directly against a real server.
#[cfg(test)]
mod script_tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const LOCK: &str = "t:{n}:rmutex";
    const FENCE: &str = "t:{n}:fence";
    const WAKE: &str = "t:{n}:rmutex-wake";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    async fn acquire(c: &mut MultiplexedConnection, token: &str, owner: &str) -> Vec<i64> {
        ACQUIRE
            .key(LOCK)
            .key(FENCE)
            .arg(token)
            .arg(owner)
            .arg(10_000)
            .arg(60_000)
            .arg("")
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
        RELEASE
            .plain()
            .key(LOCK)
            .arg(token)
            .arg(WAKE)
            .invoke_async(c)
            .await
            .expect("release")
    }

    async fn count(c: &mut MultiplexedConnection) -> Option<i64> {
        redis::cmd("HGET")
            .arg(LOCK)
            .arg("count")
            .query_async(c)
            .await
            .expect("hget")
    }

    #[tokio::test]
    async fn a_resent_acquire_counts_once_and_a_stranger_token_releases_nothing() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let first = acquire(&mut c, "t1:", "client:a").await;
        assert_eq!(first[0], 1);
        assert_eq!(acquire(&mut c, "t1:", "client:a").await, first, "a resend");
        assert_eq!(count(&mut c).await, Some(1));
        assert_eq!(acquire(&mut c, "t2:", "client:a").await, first, "re-entry");
        assert_eq!(count(&mut c).await, Some(2));
        assert_eq!(
            acquire(&mut c, "t3:", "client:b").await[0],
            0,
            "another owner"
        );

        // Tokens of other grants, resends of a release, and tokens that never got a hold give
        // back nothing.
        assert_eq!(release(&mut c, "t3:").await, 0);
        assert_eq!(release(&mut c, "t1:").await, 1);
        assert_eq!(release(&mut c, "t1:").await, 0);
        assert_eq!(count(&mut c).await, Some(1));
        assert_eq!(release(&mut c, "t2:").await, 1);
        assert_eq!(count(&mut c).await, None, "freed at zero");
        assert_eq!(release(&mut c, "t2:").await, 0);
    }
}
