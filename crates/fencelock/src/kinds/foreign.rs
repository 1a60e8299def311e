//! Locks kept in another library's layout, so that a Rust service takes the same lock as the
//! Python, Node, Go or Java services it shares a resource with: [`Layout`] (`keys.rs`, with the
//! keys each library names) says which library, [`ForeignMutex`] is the lock. One file per
//! layout family owns its scripts:
//!
//! - `token.rs`: redis-py's `Lock`, node-redlock, go-redsync, pottery, redis-semaphore's
//!   `Mutex` and rslock, one string key holding a random token;
//! - `python_redis_lock.rs`: python-redis-lock, the same with a signal list that wakes waiters;
//! - `redisson.rs`: Redisson's `RLock`, a hash of its holder's entries and an unlock channel.
//!
//! No prefix of the client's is added: the key is what the other library makes of the name.

mod python_redis_lock;
mod redisson;
mod token;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::notify::Target;
use crate::core::shared::Shared;
use crate::core::stored::{remaining_pttl, LockInfo, LockKind};
use crate::error::{Error, Result};
use crate::keys::{redisson_channel, signal_list, Layout, LockKeys};
use crate::options::LockOptions;
use crate::token::OwnerToken;
use crate::transport::script::Lua;

/// An operator's release of a lock in any of the layouts (`foreign/force.lua`).
static FORCE: Lua = Lua::new(&[include_str!("foreign/force.lua")]);

/// How often a waiter tries again where nothing announces a release, unless its options say:
/// redis-py's own pause between tries.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How a layout keeps a lock: what is written once per family of layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// One string key holding a token.
    Token,
    /// A token's key and a signal list.
    PythonRedisLock,
    /// A hash of the holder's entries, and an unlock channel.
    Redisson,
}

impl Family {
    /// What `foreign/force.lua` calls the family.
    fn code(self) -> &'static str {
        match self {
            Family::Token => "token",
            Family::PythonRedisLock => "python-redis-lock",
            Family::Redisson => "redisson",
        }
    }

    fn of(layout: Layout) -> Family {
        match layout {
            Layout::PythonRedisLock => Family::PythonRedisLock,
            Layout::Redisson => Family::Redisson,
            _ => Family::Token,
        }
    }
}

/// A mutex kept in another library's [`Layout`]: it and that library's lock of the same name
/// exclude each other, and each side's release frees it for the other.
///
/// It is a [`Handle`], whose methods are written there, and keeps everything else of this
/// crate's locks: a lease renewed in the background while the guard lives, the lost signal
/// when a renewal finds the lock gone or taken, waits with a deadline,
/// [`using`](Handle::using), cancel-safe acquires, the [`blocking`](crate::blocking) façade.
/// What the other library's layout has no room for, it does not give: no fencing token (its
/// guard's [`fence`](Guard::fence) is 1 for every grant, which fences nothing: never pass it
/// on), no fair order among waiters, no wake of one chosen waiter per release. A release
/// wakes the other library's waiters where its layout lets it (python-redis-lock's signal
/// list, Redisson's unlock message); our waiters in Redisson's layout are woken by the unlock
/// message of either side, and in the other layouts, where nothing is announced to them, try
/// again every [`poll_interval`](LockOptions::poll_interval), jittered down to half of it, as
/// those libraries' waiters do; never later than the holder's expiry. A key of another Redis
/// type (a lock of another layout under the same key) is
/// [`Error::WrongType`](crate::Error::WrongType).
///
/// It runs on one server, Sentinel or Cluster; a RedLock client (several masters) refuses it.
///
/// Use it to join locks that services in other languages already take. For locks only Rust
/// services take, use [`Mutex`](crate::Mutex): it fences, and hands off with one wake.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// use fencelock::Layout;
///
/// let client = fencelock::Client::connect(url.as_str()).await?;
/// // The lock a Python service takes with `redis.Redis().lock("jobs:nightly")`.
/// let lock = client.foreign_mutex(Layout::RedisPy, "jobs:nightly")?;
/// let guard = lock.lock().await?;
/// assert!(lock.try_lock().await.is_err());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// A release in Redisson's layout wakes the waiters of either side:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// use fencelock::Layout;
///
/// let lock = client.foreign_mutex(Layout::Redisson, "invoices")?;
/// let first = lock.lock().await?;
/// let waiter = tokio::spawn({
///     let lock = lock.clone();
///     async move { lock.lock().await.map(|guard| guard.name().to_owned()) }
/// });
/// first.unlock().await?; // publishes Redisson's unlock message, which wakes the waiter
/// assert_eq!(waiter.await.expect("task")?, "invoices");
/// # Ok(())
/// # }
/// ```
pub type ForeignMutex = Handle<ForeignGrant>;

/// Proof of holding a [`ForeignMutex`]: a [`Guard`](crate::Guard) whose fence is always 1: the
/// layouts have no fencing token.
pub type ForeignMutexGuard = Guard<ForeignGrant>;

/// A foreign mutex's layout, keys and settings, computed once per handle: what its grants are
/// of.
pub struct ForeignGrant {
    lock: Lock,
    layout: Layout,
    family: Family,
    /// The lock's key, as the other library names it.
    key: Vec<u8>,
    /// python-redis-lock's signal list; empty in the other layouts.
    signal: Vec<u8>,
    /// Redisson's unlock channel; empty in the other layouts.
    channel: Vec<u8>,
    /// How long a waiter pauses between tries where no release is announced.
    poll: Duration,
}

impl ForeignMutex {
    pub(crate) fn new(
        shared: Arc<Shared>,
        layout: Layout,
        name: &[u8],
        options: &LockOptions,
    ) -> Result<Self> {
        // Validates the name's length; the prefix is none of the other library's.
        let keys = LockKeys::new("", name)?;
        if layout.names_are_text() && std::str::from_utf8(name).is_err() {
            return Err(Error::InvalidName {
                reason: "the name is not UTF-8, and the layout's library names locks with text",
            });
        }
        let family = Family::of(layout);
        let poll = options.poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL);
        if poll.is_zero() {
            return Err(Error::InvalidOption {
                option: "poll_interval",
                reason: "a waiter must pause between tries: it is zero".to_owned(),
            });
        }
        let key = layout.key(name);
        let (signal, channel) = match family {
            Family::Token => (Vec::new(), Vec::new()),
            Family::PythonRedisLock => (signal_list(name), Vec::new()),
            Family::Redisson => (Vec::new(), redisson_channel(name)),
        };
        let lock = Lock::new::<ForeignGrant>(shared, keys, options)?;
        if family == Family::PythonRedisLock && lock.lease_ms % 1000 != 0 {
            return Err(Error::InvalidOption {
                option: "lease",
                reason: format!(
                    "python-redis-lock keeps its expiry in whole seconds, and {:?} is not",
                    lock.lease.duration()
                ),
            });
        }
        let beside = if signal.is_empty() { &channel } else { &signal };
        if !beside.is_empty() && !lock.same_shard(&key, beside) {
            return Err(Error::InvalidName {
                reason: "on a cluster, the lock's key and its signal list or channel fall in \
                         different slots: give the name a hash tag, such as {jobs}:nightly",
            });
        }
        Ok(Handle::of(Arc::new(ForeignGrant {
            lock,
            layout,
            family,
            key,
            signal,
            channel,
            poll,
        })))
    }

    /// The layout the lock is kept in.
    pub fn layout(&self) -> Layout {
        self.grant.layout
    }

    /// The lock's key in Redis, as the other library names it.
    pub fn key(&self) -> &[u8] {
        &self.grant.key
    }

    /// Who holds the lock, as [`Client::locks`](crate::Client::locks) lists the locks under the
    /// client's prefix (which a foreign key does not carry): `None` when nobody holds it. Its
    /// kind is [`LockKind::ForeignMutex`]; it has no fence and no label. A Redisson lock names
    /// its holder's field (`<client id>:<thread id>`) and counts its entries as holds; the
    /// other layouts keep a random token, which names no process. Redisson's waiting clients
    /// are those listening on its unlock channel; the other layouts' waiters poll, unseen.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the key holds another Redis type (a lock of another
    /// layout); [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.foreign_mutex(fencelock::Layout::RedisPy, "jobs:nightly")?;
    /// assert!(lock.info().await?.is_none());
    /// let guard = lock.lock().await?;
    /// assert!(lock.info().await?.expect("held").remaining.is_some());
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn info(&self) -> Result<Option<LockInfo>> {
        let grant = &self.grant;
        let mut pipe = redis::pipe();
        match grant.family {
            Family::Redisson => pipe.cmd("HGETALL").arg(&grant.key),
            Family::Token | Family::PythonRedisLock => pipe.get(&grant.key),
        };
        pipe.pttl(&grant.key);
        if !grant.channel.is_empty() {
            pipe.cmd("PUBSUB").arg("NUMSUB").arg(&grant.channel);
        }
        let replies: Vec<redis::Value> = grant.lock.read(&pipe).await?;
        let mut replies = replies.into_iter();
        let held = match grant.family {
            Family::Redisson => {
                let fields: Vec<(Vec<u8>, u64)> = decoded(replies.next())?;
                (!fields.is_empty()).then_some(Held::Fields(fields))
            }
            Family::Token | Family::PythonRedisLock => {
                decoded::<Option<Vec<u8>>>(replies.next())?.map(|_| Held::Token)
            }
        };
        let pttl: i64 = decoded(replies.next())?;
        let listening: Vec<(Vec<u8>, u64)> = match replies.next() {
            Some(reply) => decoded(Some(reply))?,
            None => Vec::new(),
        };
        Ok(held.map(|held| {
            let mut info = grant.info(held, pttl);
            info.waiting_clients = listening.iter().map(|(_, n)| n).sum();
            info
        }))
    }

    /// Releases the lock whoever holds it, with the effects of the other library's own release
    /// (python-redis-lock's waiter woken through its signal list, Redisson's unlock message
    /// published), and returns what was removed: `None` when nobody held it. For operators
    /// clearing a lock whose holder is known to be gone; a holder of this crate learns it lost
    /// the lock at its next renewal, one of the other library when it next extends or releases.
    /// A key of another Redis type is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release happens entirely or not at all, though a cancelled call may
    /// have happened without its caller knowing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let lock = client.foreign_mutex(fencelock::Layout::PythonRedisLock, "reports")?;
    /// let stuck = lock.lock().await?;
    /// assert!(lock.force_unlock().await?.is_some());
    /// assert!(lock.try_lock().await.is_ok(), "free again");
    /// # drop(stuck);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self) -> Result<Option<LockInfo>> {
        let grant = &self.grant;
        let mut invocation = FORCE.invocation();
        invocation.key(grant.key.as_slice());
        match grant.family {
            Family::PythonRedisLock => {
                invocation
                    .key(grant.signal.as_slice())
                    .arg(grant.family.code())
                    .arg(python_redis_lock::SIGNAL_EXPIRE_MS);
            }
            Family::Redisson => {
                invocation
                    .arg(grant.family.code())
                    .arg(grant.channel.as_slice())
                    .arg(redisson::UNLOCK_MESSAGE);
            }
            Family::Token => {
                invocation.arg(grant.family.code());
            }
        }
        type Removed = (Option<Vec<u8>>, i64, Vec<(Vec<u8>, u64)>);
        let (value, pttl, fields): Removed = grant.lock.call(invocation).await?;
        let held = match (value, fields.is_empty()) {
            (Some(_), _) => Some(Held::Token),
            (None, false) => Some(Held::Fields(fields)),
            (None, true) => None,
        };
        Ok(held.map(|held| grant.info(held, pttl)))
    }
}

impl Guard<ForeignGrant> {
    /// The layout the lock is kept in.
    pub fn layout(&self) -> Layout {
        self.held.grant().layout
    }
}

impl ForeignGrant {
    /// The lock as inspection lists it.
    fn info(&self, held: Held, pttl: i64) -> LockInfo {
        let mut info = LockInfo::new(self.lock.keys.name(), LockKind::ForeignMutex);
        match held {
            Held::Token => info.holds = 1,
            Held::Fields(fields) => {
                for (field, entries) in fields {
                    info.holds += entries;
                    info.add_holder(String::from_utf8_lossy(&field).into_owned());
                }
            }
        }
        info.remaining = remaining_pttl(pttl);
        info
    }
}

/// What a foreign lock's key holds while held.
enum Held {
    /// A token (no process named).
    Token,
    /// Redisson's holders, each with its count of entries.
    Fields(Vec<(Vec<u8>, u64)>),
}

/// A pipeline's reply, as `T`.
fn decoded<T: redis::FromRedisValue>(reply: Option<redis::Value>) -> Result<T> {
    let reply = reply.ok_or_else(|| Error::UnexpectedReply {
        detail: "a reply short of its pipeline".to_owned(),
    })?;
    T::from_redis_value(reply).map_err(|e| Error::UnexpectedReply {
        detail: e.to_string(),
    })
}

impl Kind for ForeignGrant {
    const NAME: &'static str = "foreign-mutex";
    const GUARD: &'static str = "ForeignMutexGuard";
    const HANDLE: &'static str = "ForeignMutex";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::ForeignMutex;

    fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The lock's key: what a `WAIT` for replicas is routed by. Releases are announced on
    /// [`wake_channels`](Kind::wake_channels) only.
    fn wake_channel(&self) -> &[u8] {
        &self.key
    }

    /// Redisson's channel; none in the layouts whose waiters poll.
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        (!self.channel.is_empty())
            .then_some(self.channel.as_slice())
            .into_iter()
    }

    fn acquire(&self, token: &OwnerToken, _waits: bool, _refused: bool) -> Invocation {
        match self.family {
            Family::Token => token::acquire(&self.key, token, self.lock.lease_ms),
            Family::PythonRedisLock => {
                python_redis_lock::acquire(&self.key, token, self.lock.lease_ms / 1000)
            }
            Family::Redisson => redisson::acquire(&self.key, token, self.lock.lease_ms),
        }
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        match self.family {
            Family::Token => token::release(&self.key, token),
            Family::PythonRedisLock => python_redis_lock::release(&self.key, &self.signal, token),
            Family::Redisson => redisson::release(&self.key, &self.channel, token),
        }
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        match self.family {
            Family::Token | Family::PythonRedisLock => token::extend(&self.key, token, lease_ms),
            Family::Redisson => redisson::extend(&self.key, token, lease_ms),
        }
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        let kind = match self.family {
            // Their extend matches the value exactly; so does their renewal.
            Family::Token | Family::PythonRedisLock => RenewKind::ExactValue,
            Family::Redisson => RenewKind::HashField,
        };
        vec![Renewal {
            key: self.key.clone(),
            member: token.as_str().to_owned(),
            kind,
        }]
    }

    fn wake_target(&self, _token: &OwnerToken) -> Target {
        Target::Message(redisson::UNLOCK_MESSAGE.to_vec())
    }

    fn new_token(&self) -> Result<OwnerToken> {
        let client = self.lock.client_id();
        match self.family {
            Family::Redisson => Ok(redisson::new_holder(client)),
            Family::Token | Family::PythonRedisLock => OwnerToken::of_client(client),
        }
    }

    fn retry_interval(&self) -> Duration {
        if self.channel.is_empty() {
            self.poll
        } else {
            self.lock.wake_fallback()
        }
    }

    fn describe(&self, guard: &mut fmt::DebugStruct<'_, '_>) {
        guard.field("layout", &self.layout);
    }
}
