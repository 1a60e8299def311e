//! The distributed semaphore: up to a total of permits per name, each grant with its own lease.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::shared::Shared;
use crate::core::stored::{parse_number, remaining_until, LockInfo, LockKind, Shape, Stored};
use crate::core::{EXPIRIES, FENCE, FORCE_PARTS};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::options::{Lease, LockOptions};
use crate::token::{Fence, OwnerToken};
use crate::transport::script::Lua;

/// The helpers that read and tidy the semaphore's grants, which every script starts with.
const GRANTS: &str = include_str!("semaphore/grants.lua");

static ACQUIRE: Lua = Lua::new(&[
    FENCE,
    EXPIRIES,
    GRANTS,
    include_str!("semaphore/acquire.lua"),
]);
static RELEASE: Lua = Lua::new(&[EXPIRIES, GRANTS, include_str!("semaphore/release.lua")]);
static EXTEND: Lua = Lua::new(&[EXPIRIES, GRANTS, include_str!("semaphore/extend.lua")]);
static SET_TOTAL: Lua = Lua::new(&[EXPIRIES, GRANTS, include_str!("semaphore/set.lua")]);
static STATE: Lua = Lua::new(&[EXPIRIES, GRANTS, include_str!("semaphore/state.lua")]);
static FORCE: Lua = Lua::new(&[FORCE_PARTS, include_str!("semaphore/force.lua")]);

/// Where a semaphore keeps its state under a name (`<prefix>{<name>}:<suffix>`): one hash of
/// its total, every grant with its own expiry, and grants' labels.
const LOCK_KEY: &str = "sem";
/// Where releases are announced, with how many permits came back.
const WAKE: &str = "sem-wake";

/// What inspection reads of a semaphore, and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LOCK_KEY,
    shape: Shape::Hash,
    places: None,
    channels: &[WAKE],
    judge: |name, raw, now_ms| semaphore(name, &raw.fields, now_ms),
    force: &FORCE,
    force_keys: &[LOCK_KEY],
};

/// A semaphore's hash: `permits` (the total), one `<token>:<count>` field per grant, valued
/// with its expiry in server ms, and `l:<token>:<count>` with the holder label of a grant
/// whose client has one.
fn semaphore(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], now_ms: i64) -> Option<LockInfo> {
    let mut info = LockInfo::new(name, LockKind::Semaphore);
    let (mut in_use, mut latest) = (0u64, None::<i64>);
    let label_of = |grant: &[u8]| {
        fields
            .iter()
            .find(|(field, _)| field.strip_prefix(b"l:") == Some(grant))
            .map(|(_, label)| String::from_utf8_lossy(label).into_owned())
    };
    for (field, value) in fields {
        if field.as_slice() == b"permits" {
            info.permits_total = parse_number(value);
            continue;
        }
        // `<token>:<count>`, the token free of `:`.
        let Some(at) = field.iter().position(|&b| b == b':') else {
            continue;
        };
        let (token, count) = (&field[..at], &field[at + 1..]);
        let Some(count) = parse_number::<u64>(count) else {
            continue;
        };
        let expiry = parse_number::<i64>(value).unwrap_or(0);
        if token.is_empty() || expiry <= now_ms {
            continue;
        }
        info.holds += 1;
        in_use = in_use.saturating_add(count);
        latest = latest.max(Some(expiry));
        if let Some(label) = label_of(field) {
            info.add_holder(label);
        }
    }
    if info.holds == 0 {
        return None;
    }
    info.permits_in_use = Some(in_use);
    info.remaining = latest.map(|at| remaining_until(at, now_ms));
    Some(info)
}

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
#[doc = include_str!("../../docs/rustdoc-links.md")]
#[doc = include_str!("../../docs/semaphore.md")]
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

/// The semaphore's name, keys and settings, computed once per handle.
struct Inner {
    lock: Lock,
    hash_key: Vec<u8>,
    fence_key: Vec<u8>,
    wake_channel: Vec<u8>,
    /// The total this handle stores when Redis has none.
    permits: u32,
}

/// A request for some permits of a [`Semaphore`]: what its grants are of.
pub struct PermitGrant {
    semaphore: Arc<Inner>,
    permits: u32,
}

/// Proof of holding permits of a [`Semaphore`]: a [`Guard`](crate::Guard) of a grant of one
/// or more permits, given back together.
pub type SemaphorePermit = Guard<PermitGrant>;

impl Semaphore {
    pub(crate) fn new(
        shared: Arc<Shared>,
        keys: LockKeys,
        permits: u32,
        options: &LockOptions,
    ) -> Result<Self> {
        check_count(permits)?;
        let lock = Lock::new::<PermitGrant>(shared, keys, options)?;
        Ok(Semaphore {
            inner: Arc::new(Inner {
                hash_key: lock.key(LOCK_KEY),
                fence_key: lock.keys.fence_key(),
                wake_channel: lock.key(WAKE),
                permits,
                lock,
            }),
        })
    }

    /// The semaphore's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.lock.name
    }

    /// The lease each grant of this semaphore gets.
    pub fn lease(&self) -> Lease {
        self.inner.lock.lease
    }

    /// Waits for one permit, as [`acquire_many`](Semaphore::acquire_many) does.
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
        self.permits_handle(1)?.lock().await
    }

    /// Waits until `n` permits are granted at once, as one grant, or until the semaphore's
    /// [`wait_timeout`](crate::LockOptions::wait_timeout) if it has one: the
    /// [`lock`](Handle::lock) of [`permits_handle(n)`](Semaphore::permits_handle).
    ///
    /// While too few permits are free, the caller sleeps until permits are given back (each
    /// release wakes as many waiters per process as there are permits free), or at most the
    /// client's [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the
    /// first held grant's lease, then tries again.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (option `permits`) for `n` = 0, or when `n` exceeds the
    /// semaphore's total: at once, or as soon as a lowered total is seen while waiting, since
    /// waiting could never end; otherwise as [`Handle::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Handle::lock`]: permits granted to a dropped acquire are given back.
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
        self.permits_handle(n)?.lock().await
    }

    /// Waits at most `timeout` for one permit. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// As [`Handle::lock_timeout`] and [`Semaphore::acquire_many`].
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
        self.permits_handle(1)?.lock_timeout(timeout).await
    }

    /// Waits at most `timeout` for `n` permits at once. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// As [`Handle::lock_timeout`] and [`Semaphore::acquire_many`].
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
        self.permits_handle(n)?.lock_timeout(timeout).await
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
        self.permits_handle(1)?.try_lock().await
    }

    /// Waits for one permit as [`acquire`](Semaphore::acquire) does, runs `work` while it is
    /// held, and gives it back, as [`Handle::using`] does.
    ///
    /// # Errors
    ///
    /// As [`Handle::using`].
    ///
    /// # Cancel safety
    ///
    /// As [`Handle::using`].
    ///
    /// # Examples
    ///
    /// See [`Handle::using`].
    pub async fn using<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.permits_handle(1)?.using(work).await
    }

    /// Tries once to take `n` permits at once, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`] when fewer than `n` permits are free, with the time until the first
    /// grant held ends if nobody gives it back; [`Error::InvalidOption`] (option `permits`)
    /// for `n` = 0 or more than the total; otherwise as [`Handle::try_lock`].
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
        self.permits_handle(n)?.try_lock().await
    }

    /// `n` permits of this semaphore as one grant: a [`Handle`] whose acquires take them, for
    /// code that takes locks of any kind ([`Handle`] without a kind). Its
    /// [`lock`](Handle::lock), [`lock_timeout`](Handle::lock_timeout) and
    /// [`try_lock`](Handle::try_lock) are [`acquire_many(n)`](Semaphore::acquire_many),
    /// [`acquire_many_timeout`](Semaphore::acquire_many_timeout) and
    /// [`try_acquire_many(n)`](Semaphore::try_acquire_many).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (option `permits`) for `n` = 0.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let pair: fencelock::Handle = client.semaphore("exports", 3)?.permits_handle(2)?.into();
    /// let guard = pair.lock().await?;
    /// assert!(pair.try_lock().await.is_err(), "1 of 3 left");
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits_handle(&self, n: u32) -> Result<Handle<PermitGrant>> {
        check_count(n)?;
        Ok(Handle::of(Arc::new(PermitGrant {
            semaphore: Arc::clone(&self.inner),
            permits: n,
        })))
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
        let mut invocation = SET_TOTAL.invocation();
        invocation
            .key(inner.hash_key.as_slice())
            .arg(total)
            .arg(
                inner
                    .lock
                    .lease_ms
                    .saturating_add(inner.lock.fence_memory_ms()),
            )
            .arg(inner.wake_channel.as_slice());
        inner.lock.call::<i64>(invocation).await?;
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
        let mut read = STATE.invocation();
        read.key(inner.hash_key.as_slice());
        let reply: Vec<i64> = inner.lock.call(read).await?;
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        match *reply.as_slice() {
            [-1, held] => Ok((inner.permits, count(held))),
            [total, held] if total >= 0 && held >= 0 => Ok((count(total), count(held))),
            _ => Err(Error::UnexpectedReply {
                detail: format!("semaphore state replied {reply:?}"),
            }),
        }
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
            .field("lock", &self.inner.lock)
            .field("permits", &self.inner.permits)
            .finish()
    }
}

impl PermitGrant {
    fn field(&self, token: &OwnerToken) -> String {
        format!("{}{}", token.as_str(), self.permits)
    }
}

impl Kind for PermitGrant {
    const NAME: &'static str = "semaphore";
    const GUARD: &'static str = "SemaphorePermit";
    const HANDLE: &'static str = "Semaphore";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::Semaphore;

    fn lock(&self) -> &Lock {
        &self.semaphore.lock
    }

    fn wake_channel(&self) -> &[u8] {
        &self.semaphore.wake_channel
    }

    fn acquire(&self, token: &OwnerToken, _waits: bool, _refused_before: bool) -> Invocation {
        let s = &self.semaphore;
        let mut invocation = ACQUIRE.invocation();
        invocation
            .key(s.hash_key.as_slice())
            .key(s.fence_key.as_slice())
            .arg(self.field(token))
            .arg(self.permits)
            .arg(s.lock.lease_ms)
            .arg(s.lock.fence_memory_ms())
            .arg(s.permits)
            .arg(s.lock.label());
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let s = &self.semaphore;
        let mut invocation = RELEASE.invocation();
        invocation
            .key(s.hash_key.as_slice())
            .arg(self.field(token))
            .arg(s.wake_channel.as_slice());
        invocation
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        let s = &self.semaphore;
        let mut invocation = EXTEND.invocation();
        invocation
            .key(s.hash_key.as_slice())
            .arg(self.field(token))
            .arg(lease_ms)
            .arg(s.lock.fence_memory_ms());
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.semaphore.hash_key.clone(),
            member: self.field(token),
            kind: RenewKind::HashExpiry,
        }]
    }

    fn describe(&self, guard: &mut fmt::DebugStruct<'_, '_>) {
        guard.field("permits", &self.permits);
    }

    /// The acquire script's refusal of more permits than the total, as a typed error.
    fn acquire_error(&self, error: Error) -> Error {
        if let Error::Redis(e) = &error
            && e.code() == Some(OVER_TOTAL)
        {
            let total = e.detail().unwrap_or("fewer").trim();
            return Error::InvalidOption {
                option: "permits",
                reason: format!(
                    "{} permits asked of semaphore {:?}, whose total is {total}",
                    self.permits, self.semaphore.lock.name
                ),
            };
        }
        error
    }
}

impl Guard<PermitGrant> {
    /// How many permits this grant holds.
    pub fn permits(&self) -> u32 {
        self.held.grant().permits
    }

    /// Gives the permits back: [`unlock`](Guard::unlock), by the name a semaphore's users
    /// know.
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub async fn release(self) -> Result<()> {
        self.unlock().await
    }
}

#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::conn;

    const HASH: &str = "t:{s}:sem";
    const FENCE: &str = "t:{s}:fence";
    const WAKE: &str = "t:{s}:sem-wake";

    async fn acquire(
        c: &mut MultiplexedConnection,
        field: &str,
        asked: u32,
        total: u32,
    ) -> redis::RedisResult<Vec<i64>> {
        ACQUIRE
            .plain()
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
        let state: Vec<i64> = STATE
            .plain()
            .key(HASH)
            .invoke_async(&mut c)
            .await
            .expect("state");
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
                    .plain()
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
        let state: Vec<i64> = STATE
            .plain()
            .key(HASH)
            .invoke_async(&mut c)
            .await
            .expect("state");
        assert_eq!(state, vec![1, 2]);
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn is_send_sync<T: Send + Sync + 'static>() {}
        is_send_sync::<Semaphore>();
        is_send_sync::<SemaphorePermit>();
    }
}

/// How inspection reads what this kind stores.
#[cfg(test)]
mod stored_tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    const TOKEN_A: &str = "AAAAAAAAAAAAAAAAAAAAAA:";
    const TOKEN_B: &str = "BBBBBBBBBBBBBBBBBBBBBB:";

    #[test]
    fn a_semaphore_adds_up_live_grants_only() {
        let now = 5_000;
        let hash = fields(&[
            ("permits", "5"),
            (&format!("{TOKEN_A}2"), "6000"),
            (&format!("{TOKEN_B}1"), "9000"),
            // Expired but not purged yet: not held.
            ("CCCCCCCCCCCCCCCCCCCCCC:2", "5000"),
        ]);
        let info = semaphore(b"n", &hash, now).expect("held");
        assert_eq!(
            (info.holds, info.permits_in_use, info.permits_total),
            (2, Some(3), Some(5))
        );
        assert_eq!(info.remaining, Some(Duration::from_millis(4000)));
        assert_eq!((info.fence, info.holder), (None, None));
        let idle = fields(&[("permits", "5"), (&format!("{TOKEN_A}2"), "100")]);
        assert!(semaphore(b"n", &idle, now).is_none());
    }
}
