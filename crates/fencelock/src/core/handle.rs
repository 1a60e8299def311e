//! The one handle: a lock ready to be taken, of any kind, with what every handle offers written
//! once, as the guard is. What only one kind offers is written on that kind's handle, in the
//! kind's module; a kind whose acquire asks for more than the lock (a holder, a number of
//! permits, a side, a value) makes a handle for each such request.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::core::acquire;
use crate::core::guard::Guard;
use crate::core::held::{AnyKind, Held};
use crate::core::kind::Kind;
use crate::error::Result;
use crate::options::{Lease, Wait};
use crate::token::Fence;

/// A lock ready to be taken: what every lock of this crate is taken with, whatever its kind.
/// Each kind's handle is named by an alias: [`Mutex`], [`FairMutex`], [`ForeignMutex`] and
/// [`MultiMutex`]. A kind whose acquire asks for more makes a handle for each request:
/// [`ReentrantMutex::handle_as`] (a holder), [`Semaphore::permits_handle`] (a number of
/// permits), [`RwLock::read_handle`] and [`RwLock::write_handle`] (a side),
/// [`Election::campaign_handle`] (a value). The methods below are the same for all of them,
/// and a kind's own methods follow further down.
///
/// `Handle` without a kind takes a lock of a kind chosen at run time: every handle turns into
/// one (`.into()`), and it grants a [`Guard`] without a kind. Use it where one piece of code
/// takes locks of several kinds (a command-line flag picks the kind, a test runs over every
/// kind); use the kind's own handle where the kind is known, for its guard's own methods.
///
/// A handle is cheap to clone (clones take the same lock) and touches Redis only when asked
/// to take the lock.
///
/// [`Mutex`]: crate::Mutex
/// [`FairMutex`]: crate::FairMutex
/// [`ForeignMutex`]: crate::ForeignMutex
/// [`MultiMutex`]: crate::MultiMutex
/// [`ReentrantMutex::handle_as`]: crate::ReentrantMutex::handle_as
/// [`Semaphore::permits_handle`]: crate::Semaphore::permits_handle
/// [`RwLock::read_handle`]: crate::RwLock::read_handle
/// [`RwLock::write_handle`]: crate::RwLock::write_handle
/// [`Election::campaign_handle`]: crate::Election::campaign_handle
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// use fencelock::Handle;
///
/// let kind = "semaphore"; // from a flag, say
/// let report: Handle = match kind {
///     "fair" => client.fair_mutex("report")?.into(),
///     "semaphore" => client.semaphore("report", 3)?.permits_handle(1)?.into(),
///     "read" => client.rwlock("report")?.read_handle().into(),
///     _ => client.mutex("report")?.into(),
/// };
/// let guard = report.lock().await?;
/// assert_eq!(guard.name(), "report");
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub struct Handle<K: ?Sized + AnyKind = dyn AnyKind> {
    pub(crate) grant: Arc<K>,
}

impl<K: ?Sized + AnyKind> Handle<K> {
    /// The handle whose acquires try for `grant`.
    pub(crate) fn of(grant: Arc<K>) -> Handle<K> {
        Handle { grant }
    }
}

/// What a handle takes: a grant of one kind, or of any kind (a handle without a kind). The
/// trait is the crate's own (its module is private).
pub trait Acquire: AnyKind {
    /// Acquires a grant of `grant`'s kind as `wait` says.
    fn acquire(grant: &Arc<Self>, wait: Wait) -> impl Future<Output = Result<Held<Self>>> + Send;
}

impl<K: Kind> Acquire for K {
    fn acquire(grant: &Arc<K>, wait: Wait) -> impl Future<Output = Result<Held<K>>> + Send {
        acquire::take(grant, wait)
    }
}

impl Acquire for dyn AnyKind {
    fn acquire(
        grant: &Arc<dyn AnyKind>,
        wait: Wait,
    ) -> impl Future<Output = Result<Held<dyn AnyKind>>> + Send {
        Arc::clone(grant).acquire_any(wait)
    }
}

/// A handle of any kind, for code that takes locks of kinds it chooses at run time.
///
/// # Examples
///
/// See [`Handle`].
impl<K: Kind> From<Handle<K>> for Handle {
    fn from(handle: Handle<K>) -> Handle {
        Handle {
            grant: handle.grant,
        }
    }
}

impl<K: ?Sized + Acquire> Handle<K> {
    /// The lock's name, as given (lossily decoded where it is not UTF-8); a multi-lock's
    /// names, listed.
    pub fn name(&self) -> &str {
        &self.grant.lock().name
    }

    /// The lease each grant of this handle gets.
    pub fn lease(&self) -> Lease {
        self.grant.lock().lease
    }

    /// Waits until the lock is granted, or until the handle's
    /// [`wait_timeout`](crate::LockOptions::wait_timeout) if it has one.
    ///
    /// While others hold the lock, the caller sleeps until a release wakes it, and then tries
    /// again. Whom a release wakes, and in which order waiters are served, is the kind's: see
    /// its type ([`Mutex`](crate::Mutex), [`FairMutex`](crate::FairMutex), ...). A wake is
    /// never taken for a grant: the caller's next request is, so a stale or relayed wake costs
    /// one request, which Redis refuses. If a wake is lost, the caller tries again after at
    /// most the client's [`wake_fallback`](crate::ClientOptions::wake_fallback) (in the
    /// layouts of a [`ForeignMutex`](crate::ForeignMutex) that announce nothing, its
    /// [`poll_interval`](crate::LockOptions::poll_interval)), and never past the holder's
    /// remaining lease.
    ///
    /// While Redis cannot be reached (a restart, a failover, a dropped connection: the errors
    /// [`Error::is_unavailable`](crate::Error::is_unavailable) accepts), the caller keeps
    /// trying with the same owner token, pausing between tries (jittered, growing up to the
    /// wake fallback), until the wait limit; without one, for the client's
    /// [`outage_limit`](crate::ClientOptions::outage_limit) (30 s by default) after the first
    /// failure. Errors that trying again would not cure (refused credentials, a wrong type)
    /// return at once.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when a key of the lock holds another
    /// Redis type; [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until
    /// the wait limit (without one, for the client's outage limit): the last error;
    /// [`Error::Deadlock`](crate::Error::Deadlock) when the wait closes a cycle of waits and
    /// the lock has a [`deadlock_check`](crate::LockOptions::deadlock_check);
    /// [`Error::Shutdown`](crate::Error::Shutdown) when the client is shut down, before or
    /// while waiting. A kind's own: [`Error::InvalidOption`](crate::Error::InvalidOption)
    /// (option `permits`) for more permits than a semaphore's total, at once or as soon as a
    /// lowered total is seen while waiting, since waiting could never end;
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when the owner of read holds of a
    /// read-write lock asks to write.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the lock may have been
    /// granted without the caller knowing (by its own request, or by a release that offered it
    /// to the caller): that grant alone is given back in the background, by its owner token,
    /// so a cancelled acquire leaves the lock free, or hands it to the next waiter, and a
    /// reentrant owner's other holds keep their count. A waiter's place among the waiters is
    /// given up the same way (or ends by itself within three wake fallbacks).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.mutex("invoices")?;
    /// let first = mutex.lock().await?;
    /// let waiter = tokio::spawn({
    ///     let mutex = mutex.clone();
    ///     async move { mutex.lock().await.map(|guard| guard.fence()) }
    /// });
    /// let before = first.fence();
    /// first.unlock().await?; // offers the lock to the waiter, which claims it
    /// let after = waiter.await.expect("task")?;
    /// assert!(after > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<Guard<K>> {
        self.acquire(Wait::AsConfigured).await
    }

    /// Waits at most `timeout` for the lock, whatever the handle's
    /// [`wait_timeout`](crate::LockOptions::wait_timeout). See [`lock`](Handle::lock).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout` when the lock was still held
    /// (a waiter in line leaves the line); the last [`Error::Redis`](crate::Error::Redis) when
    /// Redis was still unreachable then; otherwise as [`lock`](Handle::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Handle::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: fencelock::Mutex) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match mutex.lock_timeout(Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("another instance is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Guard<K>> {
        self.acquire(Wait::AtMost(timeout)).await
    }

    /// Tries once to take the lock, without waiting and without a place among the waiters.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when the lock cannot be granted now: another owner
    /// holds it (a multi-lock's: any of its names, and none is taken; a semaphore's: too many
    /// of its permits), or a fair mutex has waiters in line, which it never jumps; with the
    /// time its lease, or an offer to a waiter, still runs (`None` for a holder without an
    /// expiry, as a redis-py lock taken without a timeout);
    /// [`Error::LateGrant`](crate::Error::LateGrant) when Redis granted it but answered too
    /// late to trust the lease (the grant is given back); otherwise as [`lock`](Handle::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Handle::lock).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.mutex("cron:cleanup")?;
    /// let guard = mutex.try_lock().await?;
    /// match mutex.try_lock().await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<Guard<K>> {
        self.acquire(Wait::No).await
    }

    /// Takes the lock as `wait` says: as [`lock`](Handle::lock) for [`Wait::AsConfigured`],
    /// [`lock_timeout`](Handle::lock_timeout) for [`Wait::AtMost`] and
    /// [`try_lock`](Handle::try_lock) for [`Wait::No`], for code that chooses at run time
    /// how long to wait.
    ///
    /// # Errors
    ///
    /// As the method `wait` stands for.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Handle::lock).
    ///
    /// # Examples
    ///
    /// See [`Wait`].
    pub fn acquire(&self, wait: Wait) -> impl Future<Output = Result<Guard<K>>> + Send + '_ {
        // Not an `async fn`: the future's `Send` is proven here once, for every kind, rather
        // than where a handle without a kind is awaited.
        let acquiring = K::acquire(&self.grant, wait);
        async move { acquiring.await.map(Guard::new) }
    }

    /// Waits for the lock as [`lock`](Handle::lock) does, runs `work` while it is held, and
    /// releases it: [`Guard::using`] in one call. `work` gets the grant's fence (a foreign
    /// layout's is always 1, which fences nothing); it is stopped (its future dropped) if the
    /// lock is lost first.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock) while waiting, then as [`Guard::using`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lock`](Handle::lock) while waiting; afterwards dropping the future
    /// drops `work` and releases the lock in the background.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let winners = client
    ///     .mutex("lottery")?
    ///     .using(|fence| async move { vec![format!("ticket 7 (fence {fence})")] })
    ///     .await?;
    /// assert_eq!(winners.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn using<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock().await?.using(work).await
    }
}

impl<K: ?Sized + AnyKind> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Handle {
            grant: Arc::clone(&self.grant),
        }
    }
}

impl<K: ?Sized + AnyKind> fmt::Debug for Handle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock = self.grant.lock();
        let mut handle = f.debug_struct(self.grant.handle_name());
        handle.field("name", &lock.name);
        self.grant.describe(&mut handle);
        handle
            .field("lease", &lock.lease)
            .field("wait_timeout", &lock.wait_timeout)
            .finish()
    }
}
