//! The distributed read-write lock: many readers or one writer per name, held by explicit
//! owners, each hold with its own lease.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use crate::error::{Error, Result};
use crate::grant::{self, Held, Resource};
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::RWLOCK;
use crate::keys::LockKeys;
use crate::options::Lease;
use crate::reentrant::Holder;
use crate::scripts::{announcing_script, Announcing};
use crate::shared::Shared;
use crate::token::{random_id, OwnerToken};

// Each script starts with the helpers that read and tidy the lock's hash; the granting one with
// `next_fence` before them.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/fence.lua"),
        include_str!("lua/expiries.lua"),
        include_str!("lua/rw_state.lua"),
        include_str!("lua/rw_acquire.lua")
    ))
});
static RELEASE: LazyLock<Announcing> =
    announcing_script!("expiries.lua", "rw_state.lua", "rw_release.lua");
static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/expiries.lua"),
        include_str!("lua/rw_state.lua"),
        include_str!("lua/rw_extend.lua")
    ))
});

/// The error code with which the acquire script refuses an upgrade.
const DEADLOCK_CODE: &str = "FENCELOCK_DEADLOCK";

/// Settings of one [`RwLock`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use fencelock::{Lease, RwLockOptions};
///
/// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
/// let options = RwLockOptions::default()
///     .lease(Lease::Renewed(Duration::from_secs(10)))
///     .wait_timeout(Duration::from_secs(5))
///     .writer_preference(true);
/// let lock = client.rwlock_with_options("catalog", options)?;
/// # let _ = lock;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RwLockOptions {
    lease: Option<Lease>,
    wait_timeout: Option<Duration>,
    writer_preference: bool,
}

impl Default for RwLockOptions {
    fn default() -> Self {
        RwLockOptions {
            lease: None,
            wait_timeout: None,
            writer_preference: true,
        }
    }
}

impl RwLockOptions {
    /// The lease of each read and write hold. Default: the client's
    /// [`default_lease`](crate::ClientOptions::default_lease).
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long [`RwLock::read`] and [`RwLock::write`] wait before giving up with
    /// [`Error::Timeout`](crate::Error::Timeout). Default: no limit.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// Whether a writer of this handle, while it waits, keeps owners that hold nothing from
    /// taking new read holds, so that a steady stream of readers cannot keep it out forever.
    /// Without it, a writer gets in only at a moment when no reader holds the lock. It is the
    /// writer's setting that counts: every reader honours a waiting writer's preference.
    /// Default: `true`.
    pub fn writer_preference(mut self, prefer: bool) -> Self {
        self.writer_preference = prefer;
        self
    }
}

#[doc = include_str!("../docs/rustdoc-links.md")]
#[doc = include_str!("../docs/rwlock.md")]
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let lock = client.rwlock("catalog")?;
/// let (alice, bob) = (client.holder()?, client.holder()?);
///
/// let a = lock.read_as(&alice).await?;
/// let b = lock.read_as(&bob).await?; // readers share the lock
/// assert!(lock.try_write_as(&client.holder()?).await.is_err());
/// assert!(matches!(
///     lock.try_write_as(&alice).await,
///     Err(fencelock::Error::WouldDeadlock { .. }) // no upgrade
/// ));
/// a.unlock().await?;
/// b.unlock().await?;
///
/// let w = lock.write_as(&alice).await?;
/// let r = lock.read_as(&alice).await?; // the writer may read: a downgrade
/// w.unlock().await?;
/// let b = lock.try_read_as(&bob).await?; // the write lock is gone, the read is kept
/// r.unlock().await?;
/// b.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<Inner>,
}

/// The lock's name, keys and settings, computed once per handle.
struct Inner {
    shared: Arc<Shared>,
    name: String,
    lock_key: Vec<u8>,
    fence_key: Vec<u8>,
    /// Where waiting readers, and waiting writers, hear of releases that may let them in.
    read_channel: Vec<u8>,
    write_channel: Vec<u8>,
    lease: Lease,
    lease_ms: u64,
    fence_memory_ms: u64,
    /// How long a waiting writer's marker outlives its last attempt.
    marker_ms: u64,
    wait_timeout: Option<Duration>,
    writer_preference: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

impl Mode {
    /// The kind of the hold's field, as the scripts name it.
    fn code(self) -> &'static str {
        match self {
            Mode::Read => "r",
            Mode::Write => "w",
        }
    }
}

/// One owner's request for a read or write hold: what the grant core acquires, holds and
/// releases.
struct Claim {
    lock: Arc<Inner>,
    owner: Arc<str>,
    mode: Mode,
    /// Whether a refused attempt will be followed by more (a waiting writer leaves a marker,
    /// an attempt that tries once does not).
    waits: bool,
}

impl Claim {
    /// The hold's field in the lock's hash.
    fn field(&self, token: &OwnerToken) -> String {
        format!("{}{}{}", self.mode.code(), token.as_str(), self.owner)
    }

    fn leaves_marker(&self) -> bool {
        self.mode == Mode::Write && self.waits && self.lock.writer_preference
    }
}

/// Turns the acquire script's refusal of an upgrade into its typed error.
fn refuse_upgrade(result: Result<Held<Claim>>, name: &str) -> Result<Held<Claim>> {
    match result {
        Err(Error::Redis(e)) if e.code() == Some(DEADLOCK_CODE) => Err(Error::WouldDeadlock {
            name: name.to_owned(),
            reason: "the owner holds read holds and asked to write; give them back first",
        }),
        other => other,
    }
}

impl RwLock {
    pub(crate) fn new(
        shared: Arc<Shared>,
        keys: &LockKeys,
        options: &RwLockOptions,
    ) -> Result<Self> {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let client = &shared.options;
        let fence_memory_ms = client.fence_memory_ms();
        // A marker is a waiting writer's place: it outlives the pauses between the writer's
        // attempts, and still frees the readers soon after its writer died.
        let marker_ms = client.place_ms();
        Ok(RwLock {
            inner: Arc::new(Inner {
                name: keys.display_name(),
                lock_key: keys.key(RWLOCK.lock),
                fence_key: keys.fence_key(),
                read_channel: keys.key(RWLOCK.wake_readers),
                write_channel: keys.key(RWLOCK.wake_writers),
                lease,
                lease_ms,
                fence_memory_ms,
                marker_ms,
                wait_timeout: options.wait_timeout,
                writer_preference: options.writer_preference,
                shared,
            }),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease each hold of this lock gets.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    fn claim(&self, holder: &Holder, mode: Mode, waits: bool) -> Arc<Claim> {
        Arc::new(Claim {
            lock: Arc::clone(&self.inner),
            owner: Arc::clone(holder.owner()),
            mode,
            waits,
        })
    }

    async fn acquire(
        &self,
        holder: &Holder,
        mode: Mode,
        timeout: Option<Duration>,
    ) -> Result<Held<Claim>> {
        let result = grant::acquire(&self.claim(holder, mode, true), timeout).await;
        refuse_upgrade(result, &self.inner.name)
    }

    async fn try_acquire(&self, holder: &Holder, mode: Mode) -> Result<Held<Claim>> {
        let result = grant::try_acquire(&self.claim(holder, mode, false)).await;
        refuse_upgrade(result, &self.inner.name)
    }

    /// Waits until `holder` has a read hold, or until the lock's
    /// [`wait_timeout`](RwLockOptions::wait_timeout) if it has one.
    ///
    /// A read hold is granted at once unless another owner holds the write lock, or a writer
    /// with preference waits and `holder` holds nothing of this lock yet. Otherwise the caller
    /// sleeps until a release may let it in (or, if the announcement is lost, at most the
    /// client's [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the
    /// blocking holds' remaining lease), then tries again.
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
    /// its token.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.rwlock("prices")?;
    /// let writer = lock.write_as(&client.holder()?).await?;
    /// let reader = tokio::spawn({
    ///     let (lock, holder) = (lock.clone(), client.holder()?);
    ///     async move { lock.read_as(&holder).await.map(|guard| guard.fence()) }
    /// });
    /// let written = writer.fence();
    /// writer.unlock().await?; // wakes every waiting reader
    /// assert!(reader.await.expect("task")? > written);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_as(&self, holder: &Holder) -> Result<RwLockReadGuard> {
        let held = self
            .acquire(holder, Mode::Read, self.inner.wait_timeout)
            .await?;
        Ok(RwLockReadGuard { held })
    }

    /// Waits at most `timeout` for a read hold. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: fencelock::RwLock, holder: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match lock.read_timeout_as(&holder, Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("a writer is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_timeout_as(
        &self,
        holder: &Holder,
        timeout: Duration,
    ) -> Result<RwLockReadGuard> {
        let held = self.acquire(holder, Mode::Read, Some(timeout)).await?;
        Ok(RwLockReadGuard { held })
    }

    /// Tries once to take a read hold for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner writes, or a writer with
    /// preference waits and `holder` holds nothing of this lock, with the time until what is in
    /// the way expires unless renewed; otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.rwlock("config")?;
    /// let writer = lock.try_write_as(&client.holder()?).await?;
    /// match lock.try_read_as(&client.holder()?).await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// writer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read_as(&self, holder: &Holder) -> Result<RwLockReadGuard> {
        let held = self.try_acquire(holder, Mode::Read).await?;
        Ok(RwLockReadGuard { held })
    }

    /// Waits until `holder` has a write hold, or until the lock's
    /// [`wait_timeout`](RwLockOptions::wait_timeout) if it has one.
    ///
    /// A write hold is granted at once when no other owner holds anything of the lock (the
    /// owner's own write holds and, after a downgrade, its own read holds do not count). While
    /// it waits with [`writer_preference`](RwLockOptions::writer_preference), owners that hold
    /// nothing get no new read holds, so the readers drain. An owner holding only read holds is
    /// refused at once: the upgrade would wait for itself.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when `holder` holds read holds and
    /// no write hold; otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, a hold that may have
    /// been granted is given back in the background, and the writer's place as a waiting writer
    /// is removed with it, so readers are not held back by a writer that left.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.rwlock("catalog")?;
    /// let reader = lock.read_as(&client.holder()?).await?;
    /// let writer = tokio::spawn({
    ///     let (lock, holder) = (lock.clone(), client.holder()?);
    ///     async move { lock.write_as(&holder).await.map(|guard| guard.fence()) }
    /// });
    /// let read = reader.fence();
    /// reader.unlock().await?; // the last reader leaves: a writer is woken
    /// assert!(writer.await.expect("task")? > read);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_as(&self, holder: &Holder) -> Result<RwLockWriteGuard> {
        let held = self
            .acquire(holder, Mode::Write, self.inner.wait_timeout)
            .await?;
        Ok(RwLockWriteGuard { held })
    }

    /// Waits at most `timeout` for a write hold. See [`RwLock::write`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as [`RwLock::write`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: fencelock::RwLock, holder: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match lock.write_timeout_as(&holder, Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("readers are busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_timeout_as(
        &self,
        holder: &Holder,
        timeout: Duration,
    ) -> Result<RwLockWriteGuard> {
        let held = self.acquire(holder, Mode::Write, Some(timeout)).await?;
        Ok(RwLockWriteGuard { held })
    }

    /// Tries once to take a write hold for `holder`, without waiting (and without holding
    /// readers back).
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds anything of the lock, with
    /// the time until those holds expire unless renewed;
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) as for [`RwLock::write`]; otherwise
    /// as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.rwlock("schema")?;
    /// let migrator = client.holder_named("migrator")?;
    /// let outer = lock.try_write_as(&migrator).await?;
    /// let inner = lock.try_write_as(&migrator).await?; // reentrant
    /// assert_eq!(inner.fence(), outer.fence());
    /// inner.unlock().await?;
    /// outer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write_as(&self, holder: &Holder) -> Result<RwLockWriteGuard> {
        let held = self.try_acquire(holder, Mode::Write).await?;
        Ok(RwLockWriteGuard { held })
    }

    /// A holder of its own for one hold: what the methods without a [`Holder`] take holds
    /// for, so that their holds are never reentrant.
    fn own_holder(&self) -> Result<Holder> {
        Ok(Holder::new(&self.inner.shared.id, &random_id()?))
    }

    /// Waits for a read hold of a holder of its own, as [`read_as`](RwLock::read_as) does:
    /// for the common case where nobody takes the lock again while holding it. A later call
    /// is another owner, so a read followed by a write on one task waits for the read to be
    /// given back.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read_as`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.rwlock("catalog")?;
    /// let (a, b) = (lock.read().await?, lock.read().await?); // readers share it
    /// assert!(lock.try_write().await.is_err());
    /// a.unlock().await?;
    /// b.unlock().await?;
    /// lock.write().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> Result<RwLockReadGuard> {
        self.read_as(&self.own_holder()?).await
    }

    /// Waits for the write hold for a holder of its own, as [`write_as`](RwLock::write_as)
    /// does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::write_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        self.write_as(&self.own_holder()?).await
    }

    /// Waits at most `timeout` for a read hold of a holder of its own, as
    /// [`read_timeout_as`](RwLock::read_timeout_as) does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::read_timeout_as`] and [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn read_timeout(&self, timeout: Duration) -> Result<RwLockReadGuard> {
        self.read_timeout_as(&self.own_holder()?, timeout).await
    }

    /// Waits at most `timeout` for the write hold for a holder of its own, as
    /// [`write_timeout_as`](RwLock::write_timeout_as) does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::write_timeout_as`] and [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn write_timeout(&self, timeout: Duration) -> Result<RwLockWriteGuard> {
        self.write_timeout_as(&self.own_holder()?, timeout).await
    }

    /// Tries once to take a read hold for a holder of its own, as
    /// [`try_read_as`](RwLock::try_read_as) does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::try_read_as`] and [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn try_read(&self) -> Result<RwLockReadGuard> {
        self.try_read_as(&self.own_holder()?).await
    }

    /// Tries once to take the write hold for a holder of its own, as
    /// [`try_write_as`](RwLock::try_write_as) does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::try_write_as`] and [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn try_write(&self) -> Result<RwLockWriteGuard> {
        self.try_write_as(&self.own_holder()?).await
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .field("writer_preference", &self.inner.writer_preference)
            .finish()
    }
}

impl Resource for Claim {
    fn name(&self) -> &str {
        &self.lock.name
    }

    fn kind(&self) -> &'static str {
        match self.mode {
            Mode::Read => "rwlock_read",
            Mode::Write => "rwlock_write",
        }
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
        match self.mode {
            Mode::Read => &self.lock.read_channel,
            Mode::Write => &self.lock.write_channel,
        }
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let lock = &self.lock;
        let marker_ms = if self.leaves_marker() {
            lock.marker_ms
        } else {
            0
        };
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(lock.lock_key.as_slice())
            .key(lock.fence_key.as_slice())
            .arg(self.mode.code())
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(lock.lease_ms)
            .arg(lock.fence_memory_ms)
            .arg(marker_ms);
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let lock = &self.lock;
        let mut invocation = RELEASE.on(&self.shared().conn).prepare_invoke();
        invocation
            .key(lock.lock_key.as_slice())
            .arg(self.mode.code())
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(lock.read_channel.as_slice())
            .arg(lock.write_channel.as_slice());
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        let mut invocation = EXTEND.prepare_invoke();
        invocation
            .key(self.lock.lock_key.as_slice())
            .arg(self.field(token))
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.lock.lock_key.clone(),
            member: self.field(token),
            kind: RenewKind::HashExpiry,
        }]
    }

    fn keeps_place_while_waiting(&self) -> bool {
        self.leaves_marker()
    }
}

/// The docs both guards share, for each with its own words.
macro_rules! guard_methods {
    ($guard:ident, $hold:literal, $take:literal) => {
        $crate::guard::guard! {
            $guard {
                fence:
                #[doc = concat!("The fencing token of this ", $hold, " hold (see [`RwLock`], Fencing).")]
                name:
                /// The lock's name.
                valid_until:
                /// The instant until which this hold is certainly held: the time the last
                /// successful acquire or renewal was sent, plus the lease, minus a drift allowance
                /// of 1% + 2 ms.
                is_held:
                /// Whether this hold is still held as far as this process knows, without asking
                /// Redis: the lost signal has not fired and the validity deadline has not passed.
                lost:
                /// Completes when this hold is lost: when renewal finds it gone, or when the
                /// validity deadline passes without a successful renewal. Stop relying on the lock
                /// when it fires.
                ///
                /// # Cancel safety
                ///
                /// Cancel safe; call it as often as you like, from `select!` loops too.
                ///
                /// # Examples
                ///
                /// ```no_run
                #[doc = concat!("# async fn demo(guard: fencelock::", stringify!($guard), ") {")]
                /// tokio::select! {
                ///     reason = guard.lost() => eprintln!("stopping: {reason}"),
                ///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {} // the work
                /// }
                /// # }
                /// ```
                extend:
                /// Makes this hold's lease last at least `lease` from now, if it is still held;
                /// the lock's other holds keep theirs. It never shortens the hold: with less
                /// than the time left, nothing changes. A renewed lease is renewed as before,
                /// which never cuts an extension short: renewals take over when the extension
                /// has run down to the lock's own lease length.
                ///
                /// # Errors
                ///
                /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was lost or has expired;
                /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
                /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
                ///
                /// # Cancel safety
                ///
                /// Cancel safe: a dropped extension either reached Redis or did not; the validity
                /// deadline only moves on a confirmed reply.
                ///
                /// # Examples
                ///
                /// ```
                /// # #[tokio::main(flavor = "current_thread")]
                /// # async fn main() -> Result<(), fencelock::Error> {
                /// # let server = fencelock_testkit::RedisServer::start();
                /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
                /// use std::time::Duration;
                /// use fencelock::{Lease, RwLockOptions};
                ///
                /// let options = RwLockOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
                /// let lock = client.rwlock_with_options("export", options)?;
                #[doc = concat!("let guard = lock.", $take, "().await?;")]
                /// guard.extend(Duration::from_secs(60)).await?;
                /// guard.unlock().await?;
                /// # Ok(())
                /// # }
                /// ```
                release unlock:
                #[doc = concat!("Gives this ", $hold, " hold back and reports whether it was still held until then.")]
                ///
                /// A release whose reply was lost is resent; if the resend finds the hold gone
                /// while the validity deadline has not passed, the first send released it, so this
                /// reports success rather than a false error.
                ///
                /// # Errors
                ///
                /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold had already expired:
                /// whatever it protected was unprotected for a while.
                /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; the hold
                /// then ends with its lease.
                ///
                /// # Cancel safety
                ///
                /// Cancel safe: if the future is dropped before Redis confirmed, the release goes
                /// on in the background as for a dropped guard.
                ///
                /// # Examples
                ///
                /// See [`RwLock`].
                release_no_earlier_than unlock_no_earlier_than:
                /// Gives this hold back, but not before `at`, as
                /// [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than):
                /// when `at` is still ahead, the hold is left to end by itself at `at` instead of being
                /// given back now; otherwise this is [`unlock`](Self::unlock).
                ///
                /// # Errors
                ///
                /// As [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
                ///
                /// # Cancel safety
                ///
                /// Cancel safe: the request is handed to the client's background task when this is
                /// called, so dropping the future, polled or not, only stops waiting for the answer;
                /// the hold is still kept until `at`.
                ///
                /// # Examples
                ///
                /// See [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
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
    };
}

/// Proof of one read hold of an [`RwLock`], with its own lease and fencing token.
///
/// Release it with [`unlock`](RwLockReadGuard::unlock) to learn whether it was still held.
/// Dropping the guard gives the hold back in the background, best effort; if that cannot reach
/// Redis, the hold ends with its lease. The other holds of the lock, the owner's included, are
/// untouched either way.
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
/// let guard = client.rwlock("report")?.read_as(&client.holder()?).await?;
/// assert!(guard.is_held());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues giving its hold back to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct RwLockReadGuard {
    held: Held<Claim>,
}

guard_methods!(RwLockReadGuard, "read", "read");

/// Proof of one write hold of an [`RwLock`], with its own lease and fencing token.
///
/// Release it with [`unlock`](RwLockWriteGuard::unlock) to learn whether it was still held.
/// Dropping the guard gives the hold back in the background, best effort; if that cannot reach
/// Redis, the hold ends with its lease. The owner's other holds, read holds taken while writing
/// included, are untouched either way.
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
/// let guard = client.rwlock("report")?.write_as(&client.holder()?).await?;
/// assert!(guard.is_held());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues giving its hold back to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct RwLockWriteGuard {
    held: Held<Claim>,
}

guard_methods!(RwLockWriteGuard, "write", "write");

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<RwLock>();
        is_send_sync::<RwLockOptions>();
        is_send_sync::<RwLockReadGuard>();
        is_send_sync::<RwLockWriteGuard>();
    }

    #[test]
    fn writer_preference_is_on_by_default() {
        assert!(RwLockOptions::default().writer_preference);
        assert!(
            !RwLockOptions::default()
                .writer_preference(false)
                .writer_preference
        );
    }
}

/// The scripts, run directly against a real server.
#[cfg(test)]
mod script_tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const LOCK: &str = "t:{n}:rw";
    const FENCE: &str = "t:{n}:fence";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    async fn acquire(
        c: &mut MultiplexedConnection,
        mode: &str,
        token: &str,
        owner: &str,
    ) -> Vec<i64> {
        ACQUIRE
            .key(LOCK)
            .key(FENCE)
            .arg(mode)
            .arg(token)
            .arg(owner)
            .arg(10_000)
            .arg(60_000)
            .arg(0)
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    async fn release(c: &mut MultiplexedConnection, mode: &str, token: &str, owner: &str) -> i64 {
        RELEASE
            .plain()
            .key(LOCK)
            .arg(mode)
            .arg(token)
            .arg(owner)
            .arg("t:{n}:rw-wake-r")
            .arg("t:{n}:rw-wake-w")
            .invoke_async(c)
            .await
            .expect("release")
    }

    async fn fields(c: &mut MultiplexedConnection) -> Vec<String> {
        let mut fields: Vec<String> = redis::cmd("HKEYS")
            .arg(LOCK)
            .query_async(c)
            .await
            .expect("hkeys");
        fields.sort();
        fields
    }

    #[tokio::test]
    async fn resent_acquires_are_the_same_grant_and_stranger_releases_change_nothing() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let read = acquire(&mut c, "r", "t1:", "c:a").await;
        assert_eq!(read[0], 1);
        assert_eq!(acquire(&mut c, "r", "t1:", "c:a").await, read, "a resend");
        let other = acquire(&mut c, "r", "t2:", "c:b").await;
        assert_eq!(other, read, "read holds held together share the fence");
        assert_eq!(fields(&mut c).await, ["fence-r", "rt1:c:a", "rt2:c:b"]);

        // A token never granted, a hold of the other kind, a hold of another owner: nothing.
        assert_eq!(release(&mut c, "r", "t3:", "c:a").await, 0);
        assert_eq!(release(&mut c, "w", "t1:", "c:a").await, 0);
        assert_eq!(release(&mut c, "r", "t1:", "c:b").await, 0);
        assert_eq!(fields(&mut c).await, ["fence-r", "rt1:c:a", "rt2:c:b"]);
        assert_eq!(release(&mut c, "r", "t1:", "c:a").await, 1);
        assert_eq!(release(&mut c, "r", "t1:", "c:a").await, 0, "a resend");
        assert_eq!(release(&mut c, "r", "t2:", "c:b").await, 1);
        assert!(fields(&mut c).await.is_empty(), "the key is gone");

        let write = acquire(&mut c, "w", "t4:", "c:a").await;
        assert!(write[1] > read[1]);
        assert_eq!(acquire(&mut c, "w", "t4:", "c:a").await, write, "a resend");
        assert_eq!(fields(&mut c).await, ["fence-w", "wt4:c:a"]);
    }
}
