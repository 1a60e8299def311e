//! The distributed read-write lock: many readers or one writer per name, held by explicit
//! owners, each hold with its own lease.

use std::fmt;
use std::marker::PhantomData;
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
use crate::kinds::reentrant::Holder;
use crate::options::{Lease, LockOptions};
use crate::token::{random_id, Fence, OwnerToken};
use crate::transport::script::Lua;

/// The helpers that read and tidy the lock's hash, which every script starts with.
const STATE: &str = include_str!("rwlock/state.lua");

static ACQUIRE: Lua = Lua::new(&[FENCE, EXPIRIES, STATE, include_str!("rwlock/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[EXPIRIES, STATE, include_str!("rwlock/release.lua")]);
static EXTEND: Lua = Lua::new(&[EXPIRIES, STATE, include_str!("rwlock/extend.lua")]);
static FORCE: Lua = Lua::new(&[FORCE_PARTS, include_str!("rwlock/force.lua")]);

/// Where a read-write lock keeps its state under a name (`<prefix>{<name>}:<suffix>`): one
/// hash of every hold with its own expiry, waiting writers' markers and the two fences.
const LOCK_KEY: &str = "rw";
/// Where releases that may let readers in are announced.
const WAKE_READERS: &str = "rw-wake-r";
/// Where releases that may let a writer in are announced.
const WAKE_WRITERS: &str = "rw-wake-w";

/// What inspection reads of a read-write lock, and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LOCK_KEY,
    shape: Shape::Hash,
    places: None,
    channels: &[WAKE_READERS, WAKE_WRITERS],
    judge: |name, raw, now_ms| rwlock(name, &raw.fields, now_ms),
    force: &FORCE,
    force_keys: &[LOCK_KEY],
};

/// A read-write lock's hash: `r<token><owner>` / `w<token><owner>` holds and `q<token><owner>`
/// waiting writers, each valued with its expiry in server ms; `fence-r`, `fence-w`.
fn rwlock(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], now_ms: i64) -> Option<LockInfo> {
    let mut info = LockInfo::new(name, LockKind::RwLock);
    let (mut writes, mut queued, mut latest) = (0u64, 0u64, None::<i64>);
    let (mut fence_r, mut fence_w) = (None, None);
    for (field, value) in fields {
        match field.as_slice() {
            b"fence-r" => fence_r = parse_number(value),
            b"fence-w" => fence_w = parse_number(value),
            [mode @ (b'r' | b'w' | b'q'), rest @ ..] => {
                // `<22-character token>:<client id>:<holder id>`
                let Some(at) = rest.iter().position(|&b| b == b':') else {
                    continue;
                };
                let expiry = parse_number::<i64>(value).unwrap_or(0);
                if expiry <= now_ms {
                    continue;
                }
                if *mode == b'q' {
                    queued += 1;
                    continue;
                }
                let owner = &rest[at + 1..];
                let holder = owner
                    .iter()
                    .position(|&b| b == b':')
                    .map_or(owner, |at| &owner[at + 1..]);
                info.add_holder(String::from_utf8_lossy(holder).into_owned());
                info.holds += 1;
                if *mode == b'w' {
                    writes += 1;
                }
                latest = latest.max(Some(expiry));
            }
            _ => {}
        }
    }
    if info.holds == 0 {
        return None;
    }
    info.write_holds = Some(writes);
    info.queued = Some(queued);
    info.fence = if writes > 0 { fence_w } else { fence_r }.map(Fence::new);
    info.remaining = latest.map(|at| remaining_until(at, now_ms));
    Some(info)
}

const DEADLOCK_CODE: &str = "FENCELOCK_DEADLOCK";

#[doc = include_str!("../../docs/rustdoc-links.md")]
#[doc = include_str!("../../docs/rwlock.md")]
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

/// A read-write lock's name, keys and settings, computed once per handle.
#[derive(Clone)]
struct Inner {
    lock: Lock,
    lock_key: Vec<u8>,
    fence_key: Vec<u8>,
    read_channel: Vec<u8>,
    write_channel: Vec<u8>,
    /// How long a waiting writer's marker lasts without an attempt, in ms.
    marker_ms: u64,
    writer_preference: bool,
}

/// Which side of a read-write lock a hold is on: [`Read`] or [`Write`].
pub trait Side: Send + Sync + 'static {
    /// The hold's code in its field of the lock's hash.
    const CODE: &'static str;
    /// The kind's name in spans and metrics.
    const NAME: &'static str;
    /// Its guard's name.
    const GUARD: &'static str;
}

/// The read side of an [`RwLock`].
pub struct Read;

/// The write side of an [`RwLock`].
pub struct Write;

impl Side for Read {
    const CODE: &'static str = "r";
    const NAME: &'static str = "rwlock_read";
    const GUARD: &'static str = "RwLockReadGuard";
}

impl Side for Write {
    const CODE: &'static str = "w";
    const NAME: &'static str = "rwlock_write";
    const GUARD: &'static str = "RwLockWriteGuard";
}

/// One owner's claim on one side of an [`RwLock`]: what its read or write holds are of.
pub struct RwGrant<S> {
    rwlock: Arc<Inner>,
    /// The owner the holds are taken for; none is sent while `own_each` is set.
    owner: Arc<str>,
    /// Whether each acquire is an owner of its own, so that its holds are never reentrant:
    /// it then tries for a claim of a fresh owner ([`Kind::for_acquire`]).
    own_each: bool,
    side: PhantomData<S>,
}

/// Proof of one read hold of an [`RwLock`]: a [`Guard`](crate::Guard) of the read side.
pub type RwLockReadGuard = Guard<RwGrant<Read>>;

/// Proof of one write hold of an [`RwLock`]: a [`Guard`](crate::Guard) of the write side.
pub type RwLockWriteGuard = Guard<RwGrant<Write>>;

impl<S: Side> RwGrant<S> {
    fn field(&self, token: &OwnerToken) -> String {
        format!("{}{}{}", S::CODE, token.as_str(), self.owner)
    }

    /// Whether a waiting attempt of this side leaves a marker that keeps new readers out.
    fn leaves_marker(&self) -> bool {
        S::CODE == Write::CODE && self.rwlock.writer_preference
    }
}

impl RwLock {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: &LockOptions) -> Result<Self> {
        // A marker is a waiting writer's place: it outlives the pauses between the writer's
        // attempts, and still frees the readers soon after its writer died.
        let marker_ms = shared.place_ms();
        let lock = Lock::new::<RwGrant<Write>>(shared, keys, options)?;
        Ok(RwLock {
            inner: Arc::new(Inner {
                lock_key: lock.key(LOCK_KEY),
                fence_key: lock.keys.fence_key(),
                read_channel: lock.key(WAKE_READERS),
                write_channel: lock.key(WAKE_WRITERS),
                marker_ms,
                writer_preference: true,
                lock,
            }),
        })
    }

    /// This lock with writers of this handle preferred, or not: whether a writer of it, while
    /// it waits, keeps owners that hold nothing from taking new read holds, so that a steady
    /// stream of readers cannot keep it out forever. Without it, a writer gets in only at a
    /// moment when no reader holds the lock. It is the writer's setting that counts: every
    /// reader honours a waiting writer's preference. Default: `true`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// let catalog = client.rwlock("catalog")?.writer_preference(false);
    /// # let _ = catalog;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "returns a handle with the preference; the handle it was called on keeps its own"]
    pub fn writer_preference(self, prefer: bool) -> RwLock {
        let mut inner = (*self.inner).clone();
        inner.writer_preference = prefer;
        RwLock {
            inner: Arc::new(inner),
        }
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.lock.name
    }

    /// The lease each hold of this lock gets.
    pub fn lease(&self) -> Lease {
        self.inner.lock.lease
    }

    /// A handle of `S`'s side whose holds are `owner`'s, or each an owner's of its own.
    fn claim<S: Side>(&self, owner: Arc<str>, own_each: bool) -> Handle<RwGrant<S>> {
        Handle::of(Arc::new(RwGrant {
            rwlock: Arc::clone(&self.inner),
            owner,
            own_each,
            side: PhantomData,
        }))
    }

    /// Read holds of this lock for `holder`: a [`Handle`] whose
    /// [`lock`](Handle::lock), [`lock_timeout`](Handle::lock_timeout) and
    /// [`try_lock`](Handle::try_lock) are [`read_as`](RwLock::read_as),
    /// [`read_timeout_as`](RwLock::read_timeout_as) and [`try_read_as`](RwLock::try_read_as),
    /// for code that takes locks of any kind ([`Handle`] without a kind).
    ///
    /// # Examples
    ///
    /// See [`RwLock::read_handle`].
    pub fn read_handle_as(&self, holder: &Holder) -> Handle<RwGrant<Read>> {
        self.claim(Arc::clone(holder.owner()), false)
    }

    /// Write holds of this lock for `holder`: a [`Handle`] whose acquires are
    /// [`write_as`](RwLock::write_as) and its forms. See [`RwLock::read_handle_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read_handle`].
    pub fn write_handle_as(&self, holder: &Holder) -> Handle<RwGrant<Write>> {
        self.claim(Arc::clone(holder.owner()), false)
    }

    /// Read holds of this lock, each for a holder of its own: a [`Handle`] whose acquires
    /// are [`read`](RwLock::read) and its forms, for code that takes locks of any kind
    /// ([`Handle`] without a kind).
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
    /// let catalog = client.rwlock("catalog")?;
    /// let (read, write): (Handle, Handle) =
    ///     (catalog.read_handle().into(), catalog.write_handle().into());
    /// let (a, b) = (read.lock().await?, read.lock().await?); // readers share it
    /// assert!(write.try_lock().await.is_err());
    /// a.unlock().await?;
    /// b.unlock().await?;
    /// write.lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_handle(&self) -> Handle<RwGrant<Read>> {
        self.claim(Arc::from(""), true)
    }

    /// The write hold of this lock, each for a holder of its own: a [`Handle`] whose acquires
    /// are [`write`](RwLock::write) and its forms. See [`RwLock::read_handle`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read_handle`].
    pub fn write_handle(&self) -> Handle<RwGrant<Write>> {
        self.claim(Arc::from(""), true)
    }

    /// Waits until `holder` has a read hold, as [`Handle::lock`] does.
    ///
    /// A read hold is granted at once unless another owner holds the write lock, or a writer
    /// with preference waits and `holder` holds nothing of this lock yet. Otherwise the caller
    /// sleeps until a release may let it in.
    ///
    /// # Errors
    ///
    /// As [`Handle::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Handle::lock`]: a hold granted to a dropped acquire is given back
    /// alone.
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
        self.read_handle_as(holder).lock().await
    }

    /// Waits at most `timeout` for a read hold. See [`RwLock::read_as`].
    ///
    /// # Errors
    ///
    /// As [`Handle::lock_timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read_as`].
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
        self.read_handle_as(holder).lock_timeout(timeout).await
    }

    /// Tries once to take a read hold for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner writes, or a writer with
    /// preference waits and `holder` holds nothing of this lock, with the time until what is in
    /// the way expires unless renewed; otherwise as [`Handle::try_lock`].
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
        self.read_handle_as(holder).try_lock().await
    }

    /// Waits until `holder` has a write hold, as [`Handle::lock`] does.
    ///
    /// A write hold is granted at once when no other owner holds anything of the lock (the
    /// owner's own write holds and, after a downgrade, its own read holds do not count). While
    /// it waits with [`writer_preference`](RwLock::writer_preference), owners that hold
    /// nothing get no new read holds, so the readers drain. An owner holding only read holds is
    /// refused at once: the upgrade would wait for itself.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when `holder` holds read holds and
    /// no write hold; otherwise as [`Handle::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Handle::lock`]: a hold that may have been granted to a dropped
    /// acquire is given back in the background, and the writer's place as a waiting writer is
    /// removed with it, so readers are not held back by a writer that left.
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
        self.write_handle_as(holder).lock().await
    }

    /// Waits at most `timeout` for a write hold. See [`RwLock::write_as`].
    ///
    /// # Errors
    ///
    /// As [`Handle::lock_timeout`] and [`RwLock::write_as`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
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
        self.write_handle_as(holder).lock_timeout(timeout).await
    }

    /// Tries once to take a write hold for `holder`, without waiting (and without holding
    /// readers back).
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds anything of the lock, with
    /// the time until those holds expire unless renewed;
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) as for [`RwLock::write_as`];
    /// otherwise as [`Handle::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
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
        self.write_handle_as(holder).try_lock().await
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
        self.read_handle().lock().await
    }

    /// Waits for the write hold for a holder of its own, as [`write_as`](RwLock::write_as)
    /// does. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// As [`RwLock::write_as`] and [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write_as`].
    ///
    /// # Examples
    ///
    /// See [`RwLock::read`].
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        self.write_handle().lock().await
    }

    /// Waits at most `timeout` for a read hold of a holder of its own. See [`RwLock::read`].
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
        self.read_handle().lock_timeout(timeout).await
    }

    /// Waits at most `timeout` for the write hold for a holder of its own. See
    /// [`RwLock::read`].
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
        self.write_handle().lock_timeout(timeout).await
    }

    /// Tries once to take a read hold for a holder of its own. See [`RwLock::read`].
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
        self.read_handle().try_lock().await
    }

    /// Tries once to take the write hold for a holder of its own. See [`RwLock::read`].
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
        self.write_handle().try_lock().await
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("lock", &self.inner.lock)
            .field("writer_preference", &self.inner.writer_preference)
            .finish()
    }
}

impl<S: Side> Kind for RwGrant<S> {
    const NAME: &'static str = S::NAME;
    const GUARD: &'static str = S::GUARD;
    const HANDLE: &'static str = "RwLock";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::RwLock;

    fn for_acquire(grant: &Arc<Self>) -> Result<Arc<Self>> {
        if !grant.own_each {
            return Ok(Arc::clone(grant));
        }
        let holder = Holder::new(grant.rwlock.lock.client_id(), &random_id()?);
        Ok(Arc::new(RwGrant {
            rwlock: Arc::clone(&grant.rwlock),
            owner: Arc::clone(holder.owner()),
            own_each: false,
            side: PhantomData,
        }))
    }

    /// An upgrade the script refuses, since it would wait for the owner's own read holds.
    fn acquire_error(&self, error: Error) -> Error {
        match error {
            Error::Redis(e) if e.code() == Some(DEADLOCK_CODE) => Error::WouldDeadlock {
                name: self.rwlock.lock.name.clone(),
                reason: "the owner holds read holds and asked to write; give them back first",
            },
            other => other,
        }
    }

    fn lock(&self) -> &Lock {
        &self.rwlock.lock
    }

    fn wake_channel(&self) -> &[u8] {
        if S::CODE == Read::CODE {
            &self.rwlock.read_channel
        } else {
            &self.rwlock.write_channel
        }
    }

    fn acquire(&self, token: &OwnerToken, waits: bool, _refused_before: bool) -> Invocation {
        let rw = &self.rwlock;
        let marker_ms = if waits && self.leaves_marker() {
            rw.marker_ms
        } else {
            0
        };
        let mut invocation = ACQUIRE.invocation();
        invocation
            .key(rw.lock_key.as_slice())
            .key(rw.fence_key.as_slice())
            .arg(S::CODE)
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(rw.lock.lease_ms)
            .arg(rw.lock.fence_memory_ms())
            .arg(marker_ms);
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let rw = &self.rwlock;
        let mut invocation = RELEASE.invocation();
        invocation
            .key(rw.lock_key.as_slice())
            .arg(S::CODE)
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(rw.read_channel.as_slice())
            .arg(rw.write_channel.as_slice());
        invocation
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        let rw = &self.rwlock;
        let mut invocation = EXTEND.invocation();
        invocation
            .key(rw.lock_key.as_slice())
            .arg(self.field(token))
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.rwlock.lock_key.clone(),
            member: self.field(token),
            kind: RenewKind::HashExpiry,
        }]
    }

    fn keeps_place_while_waiting(&self) -> bool {
        self.leaves_marker()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<RwLock>();
        is_send_sync::<RwLockReadGuard>();
        is_send_sync::<RwLockWriteGuard>();
    }
}

/// The scripts, run directly against a real server.
#[cfg(test)]
mod script_tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::conn;

    const LOCK: &str = "t:{n}:rw";
    const FENCE: &str = "t:{n}:fence";

    async fn acquire(
        c: &mut MultiplexedConnection,
        mode: &str,
        token: &str,
        owner: &str,
    ) -> Vec<i64> {
        ACQUIRE
            .plain()
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
    fn an_rwlock_lists_live_holds_only_by_the_server_s_clock() {
        let now = 1_000_000;
        let hash = fields(&[
            (&format!("r{TOKEN_A}client1:alice"), "1000500"),
            (&format!("r{TOKEN_B}client2:bob"), "1002000"),
            // Expired but not purged yet: not held.
            (&format!("w{TOKEN_A}client3:carol"), "999999"),
            (&format!("q{TOKEN_B}client4:dave"), "1000100"),
            ("fence-r", "41"),
            ("fence-w", "40"),
        ]);
        let info = rwlock(b"n", &hash, now).expect("held");
        assert_eq!(info.holders, ["alice", "bob"]);
        assert_eq!(info.holder, None);
        assert_eq!((info.holds, info.write_holds), (2, Some(0)));
        assert_eq!(info.queued, Some(1));
        assert_eq!(info.fence, Some(Fence::new(41)));
        assert_eq!(info.remaining, Some(Duration::from_millis(2000)));

        let writing = fields(&[
            (&format!("w{TOKEN_A}client3:carol"), "1000300"),
            ("fence-w", "40"),
        ]);
        let info = rwlock(b"n", &writing, now).expect("held");
        assert_eq!(
            (info.write_holds, info.fence),
            (Some(1), Some(Fence::new(40)))
        );
        assert_eq!(info.holder.as_deref(), Some("carol"));

        let only_expired_and_waiting = fields(&[
            (&format!("r{TOKEN_A}client1:alice"), "1000000"),
            (&format!("q{TOKEN_B}client4:dave"), "1000100"),
        ]);
        assert!(rwlock(b"n", &only_expired_and_waiting, now).is_none());
    }
}
