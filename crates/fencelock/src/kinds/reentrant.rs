//! The reentrant mutex, and the explicit owners ([`Holder`]) that reentrant locks are held by.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::shared::Shared;
use crate::core::stored::{parse_number, remaining_pttl, LockInfo, LockKind, Shape, Stored};
use crate::core::{FENCE, FORCE_PARTS};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::options::{Lease, LockOptions};
use crate::token::Fence;
use crate::token::OwnerToken;
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[FENCE, include_str!("reentrant/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[include_str!("reentrant/release.lua")]);
static EXTEND: Lua = Lua::new(&[include_str!("reentrant/extend.lua")]);
static FORCE: Lua = Lua::new(&[FORCE_PARTS, include_str!("reentrant/force.lua")]);

/// Where a reentrant mutex keeps its state under a name (`<prefix>{<name>}:<suffix>`): one
/// hash of its owner, hold count, fence, label and holds' tokens.
const LOCK_KEY: &str = "rmutex";
/// Where releases are announced.
const WAKE: &str = "rmutex-wake";

/// What inspection reads of a reentrant mutex, and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LOCK_KEY,
    shape: Shape::Hash,
    places: None,
    channels: &[WAKE],
    judge: |name, raw, _| reentrant(name, &raw.fields, raw.pttl),
    force: &FORCE,
    force_keys: &[LOCK_KEY],
};

/// A reentrant mutex's hash: `owner`, `count`, `fence`, `label`, and one field per hold token.
fn reentrant(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], pttl: i64) -> Option<LockInfo> {
    let field = |wanted: &[u8]| {
        fields
            .iter()
            .find(|(f, _)| f.as_slice() == wanted)
            .map(|(_, v)| v.as_slice())
    };
    // The acquire script takes a hash without an owner for none.
    field(b"owner")?;
    let mut info = LockInfo::new(name, LockKind::ReentrantMutex);
    let tokens = fields.iter().filter(|(f, _)| f.ends_with(b":")).count();
    info.holds = field(b"count")
        .and_then(parse_number)
        .unwrap_or(u64::try_from(tokens).unwrap_or(u64::MAX));
    if info.holds == 0 {
        return None;
    }
    info.fence = field(b"fence").and_then(parse_number).map(Fence::new);
    if let Some(label) = field(b"label") {
        info.add_holder(String::from_utf8_lossy(label).into_owned());
    }
    info.remaining = remaining_pttl(pttl);
    Some(info)
}

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

/// A reentrant mutex's name, keys and settings, computed once per handle.
struct Inner {
    lock: Lock,
    lock_key: Vec<u8>,
    fence_key: Vec<u8>,
    wake_channel: Vec<u8>,
}

/// One owner's claim on a [`ReentrantMutex`]: what its grants are of.
pub struct ReentrantGrant {
    mutex: Arc<Inner>,
    owner: Arc<str>,
}

/// Proof of one hold of a [`ReentrantMutex`]: a [`Guard`](crate::Guard) of a reentrant mutex.
/// Its unlock, or its drop, gives back this hold only: the owner's other guards keep the
/// lock, and their fence is the same (the owner's first hold took it).
pub type ReentrantMutexGuard = Guard<ReentrantGrant>;

impl ReentrantMutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: &LockOptions) -> Result<Self> {
        let lock = Lock::new::<ReentrantGrant>(shared, keys, options)?;
        Ok(ReentrantMutex {
            inner: Arc::new(Inner {
                lock_key: lock.key(LOCK_KEY),
                fence_key: lock.keys.fence_key(),
                wake_channel: lock.key(WAKE),
                lock,
            }),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.lock.name
    }

    /// The lease each hold of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.inner.lock.lease
    }

    /// This mutex as `holder` takes it: a [`Handle`] whose acquires are `holder`'s, for code
    /// that takes locks of any kind ([`Handle`] without a kind). Its
    /// [`lock`](Handle::lock), [`lock_timeout`](Handle::lock_timeout) and
    /// [`try_lock`](Handle::try_lock) are this mutex's with `holder`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let job = client.holder()?;
    /// let ledger: fencelock::Handle = client.reentrant_mutex("ledger")?.handle_as(&job).into();
    /// let outer = ledger.lock().await?;
    /// let inner = ledger.lock().await?; // the same owner enters again
    /// assert_eq!(inner.fence(), outer.fence());
    /// inner.unlock().await?;
    /// outer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn handle_as(&self, holder: &Holder) -> Handle<ReentrantGrant> {
        Handle::of(Arc::new(ReentrantGrant {
            mutex: Arc::clone(&self.inner),
            owner: Arc::clone(holder.owner()),
        }))
    }

    /// Waits until `holder` holds the lock, as [`Handle::lock`] does: if `holder` already
    /// holds it, this adds a hold at once; while another owner holds it, the caller sleeps
    /// until the last of that owner's holds is released.
    ///
    /// # Errors
    ///
    /// As [`Handle::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Handle::lock`]: a hold granted to a dropped `lock` is given back
    /// alone, so the owner's other holds keep their count.
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
        self.handle_as(holder).lock().await
    }

    /// Waits at most `timeout` for `holder` to hold the lock. See [`ReentrantMutex::lock`].
    ///
    /// # Errors
    ///
    /// As [`Handle::lock_timeout`].
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
        self.handle_as(holder).lock_timeout(timeout).await
    }

    /// Tries once to take the lock (or one more hold of it) for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// As [`Handle::try_lock`].
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
        self.handle_as(holder).try_lock().await
    }
}

impl fmt::Debug for ReentrantMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReentrantMutex")
            .field(&self.inner.lock)
            .finish()
    }
}

impl Kind for ReentrantGrant {
    const NAME: &'static str = "reentrant_mutex";
    const GUARD: &'static str = "ReentrantMutexGuard";
    const HANDLE: &'static str = "ReentrantMutex";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::ReentrantMutex;

    fn lock(&self) -> &Lock {
        &self.mutex.lock
    }

    fn wake_channel(&self) -> &[u8] {
        &self.mutex.wake_channel
    }

    fn acquire(&self, token: &OwnerToken, _waits: bool, _refused_before: bool) -> Invocation {
        let m = &self.mutex;
        let mut invocation = ACQUIRE.invocation();
        invocation
            .key(m.lock_key.as_slice())
            .key(m.fence_key.as_slice())
            .arg(token.as_str())
            .arg(&*self.owner)
            .arg(m.lock.lease_ms)
            .arg(m.lock.fence_memory_ms())
            .arg(m.lock.label());
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let m = &self.mutex;
        let mut invocation = RELEASE.invocation();
        invocation
            .key(m.lock_key.as_slice())
            .arg(token.as_str())
            .arg(m.wake_channel.as_slice());
        invocation
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        let m = &self.mutex;
        let mut invocation = EXTEND.invocation();
        invocation
            .key(m.lock_key.as_slice())
            .arg(token.as_str())
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.mutex.lock_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::HashField,
        }]
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
    use crate::testing::conn;

    const LOCK: &str = "t:{n}:rmutex";
    const FENCE: &str = "t:{n}:fence";
    const WAKE: &str = "t:{n}:rmutex-wake";

    async fn acquire(c: &mut MultiplexedConnection, token: &str, owner: &str) -> Vec<i64> {
        ACQUIRE
            .plain()
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
    fn a_reentrant_mutex_counts_the_owner_s_holds() {
        let hash = fields(&[
            ("owner", "client:worker"),
            ("count", "2"),
            ("fence", "99"),
            ("label", "host/7"),
            (TOKEN_A, "1"),
            (TOKEN_B, "1"),
        ]);
        let info = reentrant(b"n", &hash, 800).expect("held");
        assert_eq!((info.holds, info.fence), (2, Some(Fence::new(99))));
        assert_eq!(info.holder.as_deref(), Some("host/7"));
        assert!(reentrant(b"n", &fields(&[("count", "1")]), 800).is_none());
    }
}
