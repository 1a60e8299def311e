//! The distributed semaphore: up to a total of permits per name, each grant with its own lease.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use crate::error::{Error, Result};
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::SEMAPHORE;
use crate::keys::LockKeys;
use crate::options::Lease;
use crate::scripts::{announcing_script, Announcing};
use crate::shared::Shared;
use crate::token::{Fence, OwnerToken};

/// A semaphore script: the shared grant helpers followed by `lua/<file>`; granting scripts
/// also get `lua/fence.lua` first.
macro_rules! semaphore_script {
    (granting $file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/fence.lua"),
                include_str!("lua/expiries.lua"),
                include_str!("lua/semaphore_grants.lua"),
                include_str!(concat!("lua/", $file))
            ))
        })
    };
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/expiries.lua"),
                include_str!("lua/semaphore_grants.lua"),
                include_str!(concat!("lua/", $file))
            ))
        })
    };
}

static ACQUIRE: LazyLock<Script> = semaphore_script!(granting "semaphore_acquire.lua");
static RELEASE: LazyLock<Announcing> = announcing_script!(
    "expiries.lua",
    "semaphore_grants.lua",
    "semaphore_release.lua"
);
static EXTEND: LazyLock<Script> = semaphore_script!("semaphore_extend.lua");
static SET_TOTAL: LazyLock<Announcing> =
    announcing_script!("expiries.lua", "semaphore_grants.lua", "semaphore_set.lua");
static STATE: LazyLock<Script> = semaphore_script!("semaphore_state.lua");

/// The error code of the acquire script's reply when more permits are asked than the total.
const OVER_TOTAL: &str = "FENCELOCK_TOTAL";

/// A distributed semaphore: at most a total number of permits of a name are held at once,
/// across every process that uses the same Redis.
///
/// Each acquire takes one or more permits as a single grant with its own owner token, lease
/// and [`Fence`]: a holder that crashes gives its permits back when its lease ends, not
/// before, and renewal keeps the permits of a live holder for as long as its guard lives. The
/// total is stored in Redis, so every process agrees on it, and it can be changed at run time
/// with [`set_permits`](Semaphore::set_permits).
///
/// Use it to bound concurrency across instances: at most 10 connections to a partner API, at
/// most 3 heavy exports at a time. It is not fair: a request for many permits can be passed
/// by a stream of requests for one.
///
/// The handle is cheap to clone and touches Redis only when asked to.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = fencelock::Client::connect(url.as_str()).await?;
/// let exports = client.semaphore("exports", 3)?;
///
/// let permit = exports.acquire().await?;
/// let two_more = exports.acquire_many(2).await?;
/// assert!(exports.try_acquire().await.is_err(), "all 3 permits are held");
/// permit.release().await?;
/// two_more.release().await?;
/// assert_eq!(exports.available().await?, 3);
/// # Ok(())
/// # }
/// ```
///
#[doc = include_str!("../docs/rustdoc-links.md")]
#[doc = include_str!("../docs/semaphore.md")]
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

/// The semaphore's name, keys and settings, computed once per handle.
struct Inner {
    shared: Arc<Shared>,
    name: String,
    hash_key: Vec<u8>,
    fence_key: Vec<u8>,
    wake_channel: Vec<u8>,
    /// The total this handle stores when Redis has none.
    permits: u32,
    lease: Lease,
    lease_ms: u64,
    fence_memory_ms: u64,
    wait_timeout: Option<Duration>,
}

/// Settings of one [`Semaphore`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use fencelock::{Lease, SemaphoreOptions};
///
/// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
/// let options = SemaphoreOptions::default()
///     .lease(Lease::Renewed(Duration::from_secs(10)))
///     .wait_timeout(Duration::from_secs(2));
/// let partner_api = client.semaphore_with_options("partner-api", 10, options)?;
/// # let _ = partner_api;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct SemaphoreOptions {
    lease: Option<Lease>,
    wait_timeout: Option<Duration>,
}

impl SemaphoreOptions {
    /// The lease of each grant. Default: the client's
    /// [`default_lease`](crate::ClientOptions::default_lease).
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long [`Semaphore::acquire`] and [`Semaphore::acquire_many`] wait before they give
    /// up with [`Error::Timeout`]. Default: no limit.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }
}

impl Semaphore {
    pub(crate) fn new(
        shared: Arc<Shared>,
        keys: LockKeys,
        permits: u32,
        options: SemaphoreOptions,
    ) -> Result<Self> {
        check_count(permits)?;
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let fence_memory_ms = shared.options.fence_memory_ms();
        Ok(Semaphore {
            inner: Arc::new(Inner {
                shared,
                name: keys.display_name(),
                hash_key: keys.key(SEMAPHORE.lock),
                fence_key: keys.fence_key(),
                wake_channel: keys.key(SEMAPHORE.wake),
                permits,
                lease,
                lease_ms,
                fence_memory_ms,
                wait_timeout: options.wait_timeout,
            }),
        })
    }

    /// The semaphore's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease each grant of this semaphore gets.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    /// Waits for one permit, or until the semaphore's
    /// [`wait_timeout`](SemaphoreOptions::wait_timeout) if it has one. See
    /// [`acquire_many`](Semaphore::acquire_many).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        self.acquire_many(1).await
    }

    /// Waits until `n` permits are granted at once, as one grant, or until the semaphore's
    /// [`wait_timeout`](SemaphoreOptions::wait_timeout) if it has one.
    ///
    /// While too few permits are free, the caller sleeps until permits are given back (each
    /// release wakes as many waiters per process as there are permits free), or at most the
    /// client's [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the
    /// first held grant's lease, then tries again.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (option `permits`) for `n` = 0, or when `n` exceeds the semaphore's
    /// total: at once, or as soon as a lowered total is seen while waiting, since waiting could
    /// never end. [`Error::Timeout`] when the wait limit passes; [`Error::WrongType`] when the
    /// semaphore's key holds another Redis type; [`Error::Redis`] when Redis stays unreachable
    /// until the wait limit (without one, for the client's
    /// [`outage_limit`](crate::ClientOptions::outage_limit)): the last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the permits may have
    /// been granted without the caller knowing: they are given back in the background, by
    /// owner token, so a cancelled acquire takes no permit.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let gpu = client.semaphore("gpu-slots", 4)?;
    /// let small = gpu.acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let gpu = gpu.clone();
    ///     async move { gpu.acquire_many(4).await.map(|permit| permit.permits()) }
    /// });
    /// small.release().await?; // wakes the waiter at once
    /// assert_eq!(waiter.await.expect("task")?, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many(&self, n: u32) -> Result<SemaphorePermit> {
        self.acquire_within(n, self.inner.wait_timeout).await
    }

    /// Waits at most `timeout` for one permit. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] after `timeout`; otherwise as [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(exports: fencelock::Semaphore) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match exports.acquire_timeout(Duration::from_secs(2)).await {
    ///     Ok(permit) => permit.release().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("every export slot is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphorePermit> {
        self.acquire_within(1, Some(timeout)).await
    }

    /// Waits at most `timeout` for `n` permits at once. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] after `timeout`; otherwise as [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(gpu: fencelock::Semaphore) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// let permit = gpu.acquire_many_timeout(2, Duration::from_secs(5)).await?;
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many_timeout(&self, n: u32, timeout: Duration) -> Result<SemaphorePermit> {
        self.acquire_within(n, Some(timeout)).await
    }

    /// Tries once to take one permit, without waiting. See
    /// [`try_acquire_many`](Semaphore::try_acquire_many).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub async fn try_acquire(&self) -> Result<SemaphorePermit> {
        self.try_acquire_many(1).await
    }

    /// Waits for one permit as [`acquire`](Semaphore::acquire) does, runs `work` while it is held,
    /// and gives it back: [`SemaphorePermit::using`] in one call. See [`Mutex::using`](crate::Mutex::using).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] while waiting, then as [`SemaphorePermit::using`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`] while waiting; afterwards dropping the future drops
    /// `work` and gives one permit back in the background.
    ///
    /// # Examples
    ///
    /// See [`Mutex::using`](crate::Mutex::using).
    pub async fn using<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.acquire().await?.using(work).await
    }

    /// Tries once to take `n` permits at once, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`] when fewer than `n` permits are free, with the time until the first
    /// grant held ends if nobody gives it back; [`Error::InvalidOption`] (option `permits`)
    /// for `n` = 0 or more than the total; otherwise as [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let slots = client.semaphore("slots", 3)?;
    /// let two = slots.try_acquire_many(2).await?;
    /// match slots.try_acquire_many(2).await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// assert!(matches!(
    ///     slots.try_acquire_many(4).await,
    ///     Err(fencelock::Error::InvalidOption { option: "permits", .. })
    /// ));
    /// two.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_many(&self, n: u32) -> Result<SemaphorePermit> {
        let request = self.request(n)?;
        match grant::try_acquire(&request).await {
            Ok(held) => Ok(SemaphorePermit { held }),
            Err(e) => Err(self.over_total(e, n)),
        }
    }

    /// Sets the total number of permits, for every process, from now on.
    ///
    /// Raising the total wakes waiters. Lowering it below what is held takes no permit back:
    /// holders keep theirs, and new grants wait until enough are given back to fit under the
    /// new total. Waiters asking for more than the new total fail with
    /// [`Error::InvalidOption`] on their next attempt.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a total of zero; [`Error::WrongType`] when the semaphore's
    /// key holds another Redis type; [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call either reached Redis or did not.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let workers = client.semaphore("workers", 2)?;
    /// let held = workers.acquire_many(2).await?;
    /// workers.set_permits(1).await?;
    /// assert_eq!(workers.permits().await?, 1);
    /// assert_eq!(workers.available().await?, 0, "2 held of 1: none free");
    /// workers.set_permits(5).await?;
    /// assert_eq!(workers.available().await?, 3);
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_permits(&self, total: u32) -> Result<()> {
        check_count(total)?;
        let inner = &self.inner;
        let mut invocation = SET_TOTAL.on(&inner.shared.conn).prepare_invoke();
        invocation
            .key(inner.hash_key.as_slice())
            .arg(total)
            .arg(inner.lease_ms.saturating_add(inner.fence_memory_ms))
            .arg(inner.wake_channel.as_slice());
        invocation
            .invoke_async::<i64>(&mut inner.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &inner.name))?;
        Ok(())
    }

    /// The total number of permits in force: the one stored in Redis, or this handle's own
    /// when none is stored (the next acquire stores it).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the semaphore's key holds another Redis type;
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// See [`Semaphore::set_permits`].
    pub async fn permits(&self) -> Result<u32> {
        Ok(self.state().await?.0)
    }

    /// How many permits are free now: the total less the permits held by grants whose lease
    /// has not ended, by the server's clock; zero while more are held than a lowered total.
    /// Another process may take them before you do.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::permits`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub async fn available(&self) -> Result<u32> {
        let (total, held) = self.state().await?;
        Ok(total.saturating_sub(held))
    }

    /// The total in force and the permits held.
    async fn state(&self) -> Result<(u32, u32)> {
        let inner = &self.inner;
        let reply: Vec<i64> = STATE
            .key(inner.hash_key.as_slice())
            .invoke_async(&mut inner.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &inner.name))?;
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        match *reply.as_slice() {
            [-1, held] => Ok((inner.permits, count(held))),
            [total, held] if total >= 0 && held >= 0 => Ok((count(total), count(held))),
            _ => Err(Error::UnexpectedReply {
                detail: format!("semaphore state replied {reply:?}"),
            }),
        }
    }

    async fn acquire_within(&self, n: u32, timeout: Option<Duration>) -> Result<SemaphorePermit> {
        let request = self.request(n)?;
        match grant::acquire(&request, timeout).await {
            Ok(held) => Ok(SemaphorePermit { held }),
            Err(e) => Err(self.over_total(e, n)),
        }
    }

    fn request(&self, permits: u32) -> Result<Arc<Request>> {
        check_count(permits)?;
        Ok(Arc::new(Request {
            semaphore: Arc::clone(&self.inner),
            permits,
        }))
    }

    /// Turns the acquire script's refusal of more permits than the total into a typed error.
    fn over_total(&self, error: Error, asked: u32) -> Error {
        if let Error::Redis(e) = &error {
            if e.code() == Some(OVER_TOTAL) {
                let total = e.detail().unwrap_or("fewer").trim();
                return Error::InvalidOption {
                    option: "permits",
                    reason: format!(
                        "{asked} permits asked of semaphore {:?}, whose total is {total}",
                        self.inner.name
                    ),
                };
            }
        }
        error
    }
}

pub(crate) fn check_count(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::InvalidOption {
            option: "permits",
            reason: "at least one permit".into(),
        });
    }
    Ok(())
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.inner.name)
            .field("permits", &self.inner.permits)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .finish()
    }
}

/// One acquisition: the semaphore and how many permits it asks for. The grant's hash field is
/// the owner token followed by that count, so every script and the batch renewal find the
/// grant and its size by the field alone.
struct Request {
    semaphore: Arc<Inner>,
    permits: u32,
}

impl Request {
    fn field(&self, token: &OwnerToken) -> String {
        format!("{}{}", token.as_str(), self.permits)
    }
}

impl Resource for Request {
    fn name(&self) -> &str {
        &self.semaphore.name
    }

    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.semaphore.shared
    }

    fn lease(&self) -> Lease {
        self.semaphore.lease
    }

    fn lease_ms(&self) -> u64 {
        self.semaphore.lease_ms
    }

    fn wake_channel(&self) -> &[u8] {
        &self.semaphore.wake_channel
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let s = &self.semaphore;
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(s.hash_key.as_slice())
            .key(s.fence_key.as_slice())
            .arg(self.field(token))
            .arg(self.permits)
            .arg(s.lease_ms)
            .arg(s.fence_memory_ms)
            .arg(s.permits)
            .arg(self.shared().options.holder_label.as_str());
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let s = &self.semaphore;
        let mut invocation = RELEASE.on(&self.shared().conn).prepare_invoke();
        invocation
            .key(s.hash_key.as_slice())
            .arg(self.field(token))
            .arg(s.wake_channel.as_slice());
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        let s = &self.semaphore;
        let mut invocation = EXTEND.prepare_invoke();
        invocation
            .key(s.hash_key.as_slice())
            .arg(self.field(token))
            .arg(lease_ms)
            .arg(s.fence_memory_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.semaphore.hash_key.clone(),
            member: self.field(token),
            kind: RenewKind::HashExpiry,
        }]
    }
}

/// Proof of holding permits of a [`Semaphore`], as one grant with its own lease and fencing
/// token.
///
/// Give the permits back with [`release`](SemaphorePermit::release) to learn whether they were
/// still held. Dropping the guard gives them back in the background, best effort; if that
/// cannot reach Redis, they come back when the lease ends.
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
/// let permit = client.semaphore("encoders", 8)?.acquire_many(2).await?;
/// assert_eq!(permit.permits(), 2);
/// tokio::select! {
///     reason = permit.lost() => panic!("lost the permits: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the permit only queues giving it back to the client's background task; call `release`, or `Client::shutdown` before the program exits"]
pub struct SemaphorePermit {
    held: Held<Request>,
}

impl SemaphorePermit {
    /// How many permits this grant holds.
    pub fn permits(&self) -> u32 {
        self.held.resource().permits
    }
}

guard! {
    SemaphorePermit {
        fence:
        /// The fencing token of this grant: larger than that of every earlier grant of the name.
        name:
        /// The semaphore's name.
        valid_until:
        /// The instant until which the permits are certainly held: the time the last successful
        /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether the permits are still held as far as this process knows, without asking
        /// Redis: the lost signal has not fired and the validity deadline has not passed.
        lost:
        /// Completes when the permits are lost: when renewal finds the grant gone, or when the
        /// validity deadline passes without a successful renewal (Redis unreachable or paused).
        /// Stop using what the permits guard when it fires.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe; call it as often as you like, from `select!` loops too.
        ///
        /// # Examples
        ///
        /// See [`SemaphorePermit`].
        extend:
        /// Makes the grant's lease last at least `lease` from now, if it still stands. It
        /// never shortens it: with less than the time left, nothing changes. A renewed lease
        /// is renewed as before, which never cuts an extension short: renewals take over when
        /// the extension has run down to the lock's own lease length.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`] when the grant was lost; [`Error::InvalidOption`] for a lease out of
        /// range; [`Error::Redis`] when Redis cannot be reached.
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
        /// use fencelock::{Lease, SemaphoreOptions};
        ///
        /// let options = SemaphoreOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
        /// let permit = client.semaphore_with_options("batch", 2, options)?.acquire().await?;
        /// permit.extend(Duration::from_secs(60)).await?;
        /// permit.release().await?;
        /// # Ok(())
        /// # }
        /// ```
        release release:
        /// Gives the permits back and reports whether they were still held until then.
        ///
        /// A release whose reply was lost is resent; if the resend finds the grant gone while the
        /// validity deadline has not passed, the first send released it, so this reports success
        /// rather than a false error.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`] when the grant's lease had already ended: whatever the permits
        /// guarded was unguarded for a while. [`Error::Redis`] when Redis cannot be reached; the
        /// permits then come back when the lease ends.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
        /// background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`Semaphore`].
        release_no_earlier_than release_no_earlier_than:
        /// Gives the permits back, but not before `at`, as
        /// [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than): when `at`
        /// is still ahead, the permits are left to end by themselves at `at` instead of being
        /// given back now; otherwise this is [`release`](SemaphorePermit::release).
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: the request is handed to the client's background task when this is
        /// called, so dropping the future, polled or not, only stops waiting for the answer;
        /// the permits are still kept until `at`.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        using:
        /// Runs `work` while the grant of permits is held, then gives the permits back, as
        /// [`MutexGuard::using`](crate::MutexGuard::using): `work` gets the fence and is stopped when
        /// the grant of permits is lost.
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::using`](crate::MutexGuard::using).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future drops `work` and gives the permits back in the background, as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::using`](crate::MutexGuard::using).
        debug: [permits]
    }
}

/// The semaphore's scripts, run directly against a real server.
#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const HASH: &str = "t:{s}:sem";
    const FENCE: &str = "t:{s}:fence";
    const WAKE: &str = "t:{s}:sem-wake";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    async fn acquire(
        c: &mut MultiplexedConnection,
        field: &str,
        asked: u32,
        total: u32,
    ) -> redis::RedisResult<Vec<i64>> {
        ACQUIRE
            .key(HASH)
            .key(FENCE)
            .arg(field)
            .arg(asked)
            .arg(10_000)
            .arg(60_000)
            .arg(total)
            .arg("")
            .invoke_async(c)
            .await
    }

    async fn release(c: &mut MultiplexedConnection, field: &str) -> i64 {
        RELEASE
            .plain()
            .key(HASH)
            .arg(field)
            .arg(WAKE)
            .invoke_async(c)
            .await
            .expect("release")
    }

    #[tokio::test]
    async fn grants_fit_under_the_stored_total_and_retries_are_one_grant() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let first = acquire(&mut c, "a:2", 2, 3).await.expect("acquire");
        assert_eq!(first[0], 1);
        assert_eq!(server.cli(&["HGET", HASH, "permits"]), "3", "stored");
        let ttl: i64 = server.cli(&["PTTL", HASH]).parse().expect("pttl");
        assert!(ttl > 60_000 && ttl <= 70_000, "lease + fence memory: {ttl}");
        // The same grant again (a lost reply): still one grant of 2, with a higher fence.
        let retried = acquire(&mut c, "a:2", 2, 3).await.expect("acquire");
        assert_eq!(retried.len(), 2, "granted, and one fence: {retried:?}");
        assert_eq!(retried[0], 1);
        assert!(retried[1] > first[1]);
        assert_eq!(server.cli(&["HLEN", HASH]), "2", "the total and one grant");
        let refused = acquire(&mut c, "b:2", 2, 3).await.expect("acquire");
        assert_eq!(refused[0], 0);
        assert!(refused[1] > 9_000 && refused[1] <= 10_000, "{refused:?}");
        // A handle made with a larger total changes nothing.
        assert_eq!(acquire(&mut c, "b:2", 2, 9).await.expect("acquire")[0], 0);
        assert_eq!(acquire(&mut c, "c:1", 1, 3).await.expect("acquire")[0], 1);
        let over = acquire(&mut c, "d:4", 4, 3)
            .await
            .expect_err("over the total");
        assert_eq!(over.code(), Some(OVER_TOTAL));
        assert_eq!(over.detail().map(str::trim), Some("3"));

        assert_eq!(release(&mut c, "b:2").await, 0, "never granted");
        assert_eq!(release(&mut c, "a:2").await, 1);
        assert_eq!(release(&mut c, "a:2").await, 0, "already given back");
        let state: Vec<i64> = STATE.key(HASH).invoke_async(&mut c).await.expect("state");
        assert_eq!(state, vec![3, 1]);
    }

    #[tokio::test]
    async fn extend_and_set_touch_only_what_they_should() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "a:1", 1, 2).await.expect("acquire");
        let extend = |c: &mut MultiplexedConnection, field: &'static str| {
            let mut c = c.clone();
            async move {
                EXTEND
                    .key(HASH)
                    .arg(field)
                    .arg(500_000)
                    .arg(60_000)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("extend")
            }
        };
        assert_eq!(extend(&mut c, "b:1").await, 0, "not a grant");
        assert_eq!(extend(&mut c, "a:1").await, 1);
        let ttl: i64 = server.cli(&["PTTL", HASH]).parse().expect("pttl");
        assert!(ttl > 500_000, "the hash outlives the extended grant: {ttl}");
        // An ended grant cannot be extended back to life.
        server.cli(&["HSET", HASH, "a:1", "1"]);
        assert_eq!(extend(&mut c, "a:1").await, 0);
        assert_eq!(server.cli(&["HEXISTS", HASH, "a:1"]), "0");

        let set = |c: &mut MultiplexedConnection, total: u32| {
            let mut c = c.clone();
            async move {
                SET_TOTAL
                    .plain()
                    .key(HASH)
                    .arg(total)
                    .arg(70_000)
                    .arg(WAKE)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("set")
            }
        };
        acquire(&mut c, "c:2", 2, 2).await.expect("acquire");
        set(&mut c, 1).await;
        assert_eq!(
            server.cli(&["HEXISTS", HASH, "c:2"]),
            "1",
            "lowering takes nothing"
        );
        let state: Vec<i64> = STATE.key(HASH).invoke_async(&mut c).await.expect("state");
        assert_eq!(state, vec![1, 2]);
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn is_send_sync<T: Send + Sync + 'static>() {}
        is_send_sync::<Semaphore>();
        is_send_sync::<SemaphorePermit>();
        is_send_sync::<SemaphoreOptions>();
    }
}
