//! The one guard: proof of holding a grant of any kind, with what every grant offers written
//! once. What only one kind offers is written on that kind's guard, in the kind's module.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::core::held::{AnyKind, Held};
use crate::core::kind::Kind;
use crate::core::lease::Lost;
use crate::error::Result;
use crate::token::Fence;

/// Proof of holding a lock, with its lease and fencing token: what every lock of this crate
/// grants, whatever its kind. Each kind's guard is named by an alias: [`MutexGuard`],
/// [`FairMutexGuard`], [`ReentrantMutexGuard`], [`RwLockReadGuard`], [`RwLockWriteGuard`],
/// [`SemaphorePermit`], [`MultiMutexGuard`] and [`Leadership`]; the methods below are the same
/// for all of them, and a kind's own methods follow further down.
///
/// Release it with [`unlock`](Guard::unlock) to learn whether it was still held. Dropping the
/// guard releases the lock in the background, best effort; if that release cannot reach Redis,
/// the lock frees itself when its lease ends. A drop only queues the release to the client's
/// background task, which ends with the runtime: before the program exits, call
/// [`Client::shutdown`](crate::Client::shutdown), which gives back every lock still held and
/// waits for the releases queued.
///
/// [`MutexGuard`]: crate::MutexGuard
/// [`FairMutexGuard`]: crate::FairMutexGuard
/// [`ReentrantMutexGuard`]: crate::ReentrantMutexGuard
/// [`RwLockReadGuard`]: crate::RwLockReadGuard
/// [`RwLockWriteGuard`]: crate::RwLockWriteGuard
/// [`SemaphorePermit`]: crate::SemaphorePermit
/// [`MultiMutexGuard`]: crate::MultiMutexGuard
/// [`Leadership`]: crate::Leadership
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let guard = client.mutex("reindex")?.lock().await?;
/// assert!(guard.is_held());
/// tokio::select! {
///     reason = guard.lost() => panic!("lost the lock: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues its release to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct Guard<K: ?Sized + AnyKind = dyn AnyKind> {
    pub(crate) held: Held<K>,
}

impl<K: ?Sized + AnyKind> Guard<K> {
    pub(crate) fn new(held: Held<K>) -> Guard<K> {
        Guard { held }
    }
}

/// A guard of any kind, for code that holds locks of kinds it chooses at run time: what is
/// common to every guard stays, a kind's own methods go.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let exclusive = true;
/// let guard: fencelock::Guard = if exclusive {
///     client.mutex("report")?.lock().await?.into()
/// } else {
///     client.semaphore("report", 3)?.acquire().await?.into()
/// };
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
impl<K: Kind> From<Guard<K>> for Guard {
    fn from(guard: Guard<K>) -> Guard {
        Guard {
            held: guard.held.erased(),
        }
    }
}

impl<K: ?Sized + AnyKind> Guard<K> {
    /// The fencing token of this grant: larger than that of every earlier grant of the name.
    /// Pass it to what the lock protects, so that it can refuse a write from a holder that
    /// lost the lock without knowing (a process paused past its lease). A grant of several
    /// names ([`MultiMutexGuard`](crate::MultiMutexGuard)) gives the first name's here, and
    /// each name's in its [`fences`](Guard::fences) and [`fence_of`](Guard::fence_of).
    pub fn fence(&self) -> Fence {
        self.held.fence()
    }

    /// The lock's name, as given (lossily decoded where it is not UTF-8); the first name of a
    /// grant of several.
    pub fn name(&self) -> &str {
        &self.held.grant().lock().name
    }

    /// The instant until which the lock is certainly held: the time the last successful
    /// acquire or renewal was sent, plus the lease, minus the client's drift allowance (by
    /// default 1% + 2 ms).
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// Whether the lock is still held as far as this process knows, without asking Redis: the
    /// lost signal has not fired and the validity deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Completes when the lock is lost: when renewal finds it deleted or taken, or when the
    /// validity deadline passes without a successful renewal (Redis unreachable or paused), or
    /// when the client is shut down. Stop touching the protected resource when it fires.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; call it as often as you like, from `select!` loops too.
    ///
    /// # Examples
    ///
    /// See [`Guard`].
    pub async fn lost(&self) -> Lost {
        self.held.lost().await
    }

    /// Makes the lease last at least `lease` from now, if the lock is still held. It never
    /// shortens it: with less than the time left, nothing changes. A renewed lease is renewed
    /// as before, which never cuts an extension short: renewals take over when the extension
    /// has run down to the lock's own lease length.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was lost;
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) on RedLock when too few masters answered.
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
    /// use fencelock::{Lease, LockOptions};
    ///
    /// let options = LockOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
    /// let guard = client.mutex_with_options("export", options)?.lock().await?;
    /// guard.extend(Duration::from_secs(60)).await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease).await
    }

    /// Releases the lock and reports whether it was still held until then.
    ///
    /// A release whose reply was lost is resent; if the resend finds the lock gone while the
    /// validity deadline has not passed, the first send released it (nobody else can have
    /// taken a lock that was still validly ours), so this reports success rather than a false
    /// error.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or been
    /// taken: whatever the guard protected was unprotected for a while.
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; the lock then frees
    /// itself when its lease ends. [`Error::Shutdown`](crate::Error::Shutdown) when the client
    /// was shut down, which released it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in
    /// the background as for a dropped guard.
    ///
    /// # Examples
    ///
    /// See [`Guard`].
    pub async fn unlock(self) -> Result<()> {
        self.held.unlock().await
    }

    /// Releases the lock, but not before `at`: when `at` is still ahead, the lock is left to
    /// end by itself at `at` (its lease is set to end then, only if it is still ours) instead
    /// of being freed now, and renewal stops. For work that must not run again soon after it
    /// ran, such as a cron job whose instances start a few seconds apart: an instance that
    /// starts after the job ended finds the lock still held. When `at` has passed, this is
    /// [`unlock`](Guard::unlock).
    ///
    /// The lock is free again from `at` on (by the local clock; up to
    /// [`MIN_LEASE`](crate::MIN_LEASE) later): its expiry is set to `at`, shorter or longer
    /// than the lease it had. (Unlike [`extend`](Guard::extend), which never shortens: this
    /// gives the guard up, so no validity is claimed afterwards.)
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or been
    /// taken; [`Error::InvalidOption`](crate::Error::InvalidOption) when `at` is more than
    /// [`MAX_LEASE`](crate::MAX_LEASE) away; [`Error::Redis`](crate::Error::Redis) when Redis
    /// cannot be reached. On an error the lock is not released: it ends with its lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request is handed to the client's background task when this is
    /// called, so a dropped future, polled or not, leaves the lock to end at `at` all the same.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// use std::time::{Duration, Instant};
    /// use fencelock::Optional;
    ///
    /// let mutex = client.mutex("cron:invoices")?;
    /// if let Some(guard) = mutex.try_lock().await.optional()? {
    ///     let started = Instant::now();
    ///     // ... the job, quicker than the instances' start times differ ...
    ///     guard.unlock_no_earlier_than(started + Duration::from_secs(60)).await?;
    /// }
    /// assert!(mutex.try_lock().await.optional()?.is_none(), "a late instance skips it");
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock_no_earlier_than(
        self,
        at: Instant,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.held.unlock_no_earlier_than(at)
    }

    /// Runs `work` while the lock is held, then releases it: `work` gets the grant's fence,
    /// and its value is returned once the release confirmed that the lock was held throughout.
    /// When the lock is lost first, `work` is stopped (its future dropped at its current
    /// `.await`) and [`Error::NotHeld`](crate::Error::NotHeld) returned.
    ///
    /// Stopping happens only at an `.await`: a `work` that blocks the thread, or that has
    /// already sent a write, is not undone. Pass the fence to what you write to where that
    /// matters.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was lost while `work` ran
    /// (stopped) or before its release (`work` ran to the end, partly unprotected);
    /// [`Error::Redis`](crate::Error::Redis) when the release could not reach Redis (the lock
    /// then ends with its lease).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background, as for a
    /// dropped guard.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.mutex("ledger")?.lock().await?;
    /// let written = guard.using(|fence| async move { format!("entry under {fence}") }).await?;
    /// assert!(written.starts_with("entry under"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn using<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.held.using(work).await
    }
}

impl<K: ?Sized + AnyKind> fmt::Debug for Guard<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut guard = f.debug_struct(self.held.grant().guard_name());
        guard.field("name", &self.name());
        self.held.grant().describe(&mut guard);
        guard
            .field("fence", &self.fence())
            .field("held", &self.is_held())
            .finish()
    }
}
