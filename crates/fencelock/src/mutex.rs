//! The distributed mutex: one holder at a time per name.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use crate::error::Result;
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::MUTEX;
use crate::keys::LockKeys;
use crate::notify::Target;
use crate::options::{Lease, MutexOptions};
use crate::scripts::{FENCE_RAISE, MUTEX_ACQUIRE, MUTEX_EXTEND, MUTEX_RELEASE};
use crate::shared::Shared;
use crate::token::{Fence, OwnerToken};

/// How long a released lock is kept for the waiter the release woke, in ms: time for the wake
/// to reach it and its attempt to come back on a loaded machine. A task that asks in that
/// time (the releaser asking again, a waiter on its timer) waits its turn instead of taking
/// the lock first; a woken waiter that does not come loses the lock to anyone after it.
const HANDOFF_MS: u64 = 200;

/// A distributed mutex: at most one holder at a time for a name, across every process that uses
/// the same Redis.
///
/// Acquiring is one round trip (one script: `GET`, then `SET PX` with a random owner token).
/// Each grant carries a lease: if the holder dies, the lock frees itself when the lease ends.
/// By default the lease is renewed in the background while the guard lives, so a long critical
/// section keeps the lock, and a crashed process loses it within one lease. Each grant also
/// gets a [`Fence`]. A refused waiter takes a place among the lock's waiters, and a release
/// wakes one of them by a notification addressed to it: a handoff costs one release and one
/// attempt however many processes wait. The lock is not fair: a newcomer may take a free lock
/// before the woken waiter does (use [`FairMutex`](crate::FairMutex) for turns in order).
///
/// Use it to make one instance of a service do a thing at a time. Do not use it where two
/// holders at once would corrupt data unless the resource also checks the fencing token: a
/// process can be paused past its lease (see the crate documentation).
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
/// let mutex = client.mutex("lottery")?;
///
/// let guard = mutex.lock().await?;
/// println!("drawing with fence {}", guard.fence());
/// assert!(mutex.try_lock().await.is_err());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Mutex {
    /// For `lock`: a refused attempt takes a place among the waiters.
    inner: Arc<Inner>,
    /// For `try_lock`: a refused attempt leaves nothing behind.
    trying: Arc<Inner>,
}

/// The lock's name, keys and settings, computed once per handle.
#[derive(Clone)]
struct Inner {
    shared: Arc<Shared>,
    name: String,
    /// Held: the holder's token and fence; released: the name's last fence (and the woken
    /// waiter it is kept for), as `lua/mutex_value.lua` describes.
    lock_key: Vec<u8>,
    /// On RedLock only: each master keeps the name's last fence apart from the lock, for the
    /// fence memory after every grant, since a grant raises it on a majority of masters.
    fence_key: Option<Vec<u8>>,
    /// The waiters' places: token -> when the place ends.
    waiters_key: Vec<u8>,
    /// Where releases are announced: what its scripts are given.
    wake_channel: Vec<u8>,
    /// Where this handle's waiters are woken by name: a waiter with a place by its token on
    /// its client's own channel of the name, so that a release is written to one client, not
    /// to every waiting one; the others (a single try, RedLock's) on `wake_channel`.
    waiter_channel: Vec<u8>,
    /// How long a refused attempt's place among the waiters lasts, in ms; 0 for no place (a
    /// single try, or RedLock, whose masters keep no places).
    place_ms: u64,
    lease: Lease,
    lease_ms: u64,
    wait_timeout: Option<Duration>,
}

impl Mutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: MutexOptions) -> Result<Self> {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let place_ms = if shared.nodes.is_distributed() {
            0
        } else {
            shared.options.place_ms()
        };
        let inner = Inner {
            name: keys.display_name(),
            lock_key: keys.key(MUTEX.lock),
            fence_key: shared.nodes.is_distributed().then(|| keys.fence_key()),
            waiters_key: keys.key(MUTEX.places),
            wake_channel: keys.key(MUTEX.wake),
            waiter_channel: if place_ms > 0 {
                keys.client_channel(MUTEX.wake, &shared.id)
            } else {
                keys.key(MUTEX.wake)
            },
            place_ms,
            lease,
            lease_ms,
            wait_timeout: options.wait_timeout,
            shared,
        };
        Ok(Mutex {
            trying: Arc::new(Inner {
                place_ms: 0,
                waiter_channel: inner.wake_channel.clone(),
                ..inner.clone()
            }),
            inner: Arc::new(inner),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease each grant of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    /// Waits until the lock is acquired, or until the mutex's
    /// [`wait_timeout`](MutexOptions::wait_timeout) if it has one.
    ///
    /// While the lock is held by another owner, the caller sleeps until a release is announced
    /// (or, if an announcement is lost, at most the client's
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the holder's
    /// remaining lease), then tries again.
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
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another Redis type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the wait limit
    /// (without one, for the client's [`outage_limit`](crate::ClientOptions::outage_limit)): the
    /// last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the lock may have been
    /// granted without the caller knowing: it is released in the background, by owner token,
    /// so a cancelled `lock()` leaves the lock free. A waiter's place among the waiters is
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
    /// first.unlock().await?; // wakes the waiter at once
    /// let after = waiter.await.expect("task")?;
    /// assert!(after > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<MutexGuard> {
        let held = grant::acquire(&self.inner, self.inner.wait_timeout).await?;
        Ok(MutexGuard { held })
    }

    /// Waits at most `timeout` for the lock. See [`Mutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout` when the lock was still held;
    /// the last [`Error::Redis`](crate::Error::Redis) when Redis was still unreachable then;
    /// otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`].
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
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard> {
        let held = grant::acquire(&self.inner, Some(timeout)).await?;
        Ok(MutexGuard { held })
    }

    /// Tries once to take the lock, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds it, with the time its lease still runs,
    /// or when a release just woke a waiter and the lock is kept for it (at most 200 ms, the
    /// time given); otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`].
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
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let held = grant::try_acquire(&self.trying).await?;
        Ok(MutexGuard { held })
    }

    /// Waits for the lock as [`lock`](Mutex::lock) does, runs `work` while it is held, and
    /// releases it: [`MutexGuard::using`] in one call. `work` gets the grant's fence; it is
    /// stopped (its future dropped) if the lock is lost first.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`] while waiting, then as [`MutexGuard::using`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`] while waiting; afterwards dropping the future drops
    /// `work` and releases the lock in the background.
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

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .finish()
    }
}

impl Inner {
    fn fence_memory_ms(&self) -> u64 {
        self.shared.options.fence_memory_ms()
    }

    /// What a release announces: on RedLock every master announces it, so it names itself.
    fn acquire_invocation(
        &self,
        token: &OwnerToken,
        refused_before: bool,
    ) -> ScriptInvocation<'static> {
        let mut invocation = MUTEX_ACQUIRE.prepare_invoke();
        invocation
            .key(self.lock_key.as_slice())
            .key(self.waiters_key.as_slice());
        if let Some(fence_key) = &self.fence_key {
            invocation.key(fence_key.as_slice());
        }
        invocation
            .arg(token.as_str())
            .arg(self.lease_ms)
            .arg(self.fence_memory_ms())
            .arg(self.shared.options.holder_label.as_str())
            .arg(self.place_ms)
            .arg(u8::from(refused_before));
        invocation
    }

    fn announcement(&self, token: &OwnerToken) -> String {
        if self.shared.nodes.is_distributed() {
            format!("~{}", token.as_str())
        } else {
            String::new()
        }
    }
}

impl Resource for Inner {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "mutex"
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

    fn wake_channel(&self) -> &[u8] {
        &self.wake_channel
    }

    /// A waiter with a place listens on its client's own channel, where a release names it,
    /// and on the name's channel, where releases that name nobody are announced (a
    /// multi-lock's, an operator's forced one).
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        let own = (self.waiter_channel != self.wake_channel).then_some(&self.waiter_channel);
        own.into_iter()
            .chain(std::iter::once(&self.wake_channel))
            .map(Vec::as_slice)
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        self.acquire_invocation(token, false)
    }

    fn acquire_script_after_refusal(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        self.acquire_invocation(token, true)
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let mut invocation = MUTEX_RELEASE.on(&self.shared.conn).prepare_invoke();
        invocation
            .key(self.lock_key.as_slice())
            .key(self.waiters_key.as_slice())
            .arg(token.as_str())
            .arg(self.wake_channel.as_slice())
            .arg(self.announcement(token))
            .arg(HANDOFF_MS)
            .arg(self.fence_memory_ms());
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        let mut invocation = MUTEX_EXTEND.prepare_invoke();
        invocation
            .key(self.lock_key.as_slice())
            .arg(token.as_str())
            .arg(lease_ms);
        invocation
    }

    fn raise_fence_script(&self, fence: u64) -> Option<ScriptInvocation<'static>> {
        let mut invocation = FENCE_RAISE.prepare_invoke();
        invocation
            .key(self.fence_key.as_deref()?)
            .arg(fence)
            .arg(self.lease_ms.saturating_add(self.fence_memory_ms()));
        Some(invocation)
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.lock_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::Value,
        }]
    }

    fn keeps_place_while_waiting(&self) -> bool {
        self.place_ms > 0
    }

    fn wake_target(&self, token: &OwnerToken) -> Target {
        if self.place_ms > 0 {
            Target::AnyOrToken(token.as_str().as_bytes().to_vec())
        } else {
            Target::Any
        }
    }
}

/// Proof of holding a [`Mutex`], with its lease and fencing token.
///
/// Release it with [`unlock`](MutexGuard::unlock) to learn whether it was still held. Dropping
/// the guard releases the lock in the background, best effort; if that release cannot reach
/// Redis, the lock frees itself when its lease ends.
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
pub struct MutexGuard {
    held: Held<Inner>,
}

guard! {
    MutexGuard {
        fence:
        /// The fencing token of this grant: larger than that of every earlier grant of the name.
        name:
        /// The lock's name.
        valid_until:
        /// The instant until which the lock is certainly held: the time the last successful
        /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether the lock is still held as far as this process knows, without asking Redis:
        /// the lost signal has not fired and the validity deadline has not passed.
        lost:
        /// Completes when the lock is lost: when renewal finds it deleted or taken, or when the
        /// validity deadline passes without a successful renewal (Redis unreachable or paused).
        /// Stop touching the protected resource when it fires.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe; call it as often as you like, from `select!` loops too.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard`].
        extend:
        /// Makes the lease last at least `lease` from now, if the lock is still held. It
        /// never shortens it: with less than the time left, nothing changes. A renewed lease
        /// is renewed as before, which never cuts an extension short: renewals take over when
        /// the extension has run down to the lock's own lease length.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was lost; [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of
        /// range; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
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
        /// let guard = client.mutex_with_options("export", options)?.lock().await?;
        /// guard.extend(Duration::from_secs(60)).await?;
        /// guard.unlock().await?;
        /// # Ok(())
        /// # }
        /// ```
        release unlock:
        /// Releases the lock and reports whether it was still held until then.
        ///
        /// A release whose reply was lost is resent; if the resend finds the key gone while the
        /// validity deadline has not passed, the first send released it (nobody else can have
        /// taken a lock that was still validly ours), so this reports success rather than a false
        /// error.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or been taken: whatever the guard
        /// protected was unprotected for a while. [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
        /// the lock then frees itself when its lease ends.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
        /// background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`Mutex`].
        release_no_earlier_than unlock_no_earlier_than:
        /// Releases the lock, but not before `at`: when `at` is still ahead, the lock is left to
        /// end by itself at `at` (its lease is set to end then, only if it is still ours) instead
        /// of being freed now, and renewal stops. For work that must not run again soon after it
        /// ran, such as a cron job whose instances start a few seconds apart: an instance that
        /// starts after the job ended finds the lock still held. When `at` has passed, this is
        /// [`unlock`](MutexGuard::unlock).
        ///
        /// The lock is free again from `at` on (by the local clock; up to
        /// [`MIN_LEASE`](crate::MIN_LEASE) later): its expiry is set to `at`, shorter or longer
        /// than the lease it had. (Unlike [`extend`](MutexGuard::extend), which never shortens: this
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
        /// called, so dropping the future, polled or not, only stops waiting for the answer;
        /// the lock is still kept until `at`.
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
        using:
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
        debug: []
    }
}
