//! The distributed mutex: one holder at a time per name. Its storage, one key per name:
//!
//! - `<prefix>{<name>}:mutex`: held, the holder's token and fence (`value/value.lua` gives
//!   the forms); released, the name's last fence;
//! - `<prefix>{<name>}:mutex-waiters`: the waiters' places (each a token, the lease it asks for
//!   and its label) -> when the place ends;
//! - a release that offers the lock to a waiter says so on that waiter's client's own channel,
//!   `<prefix>{<name>}:wake:<client tag>` (and tells the waiter behind it how long the offer
//!   lasts); one that offers it to nobody announces itself on `<prefix>{<name>}:wake`.
//!
//! A [`MultiMutex`](crate::MultiMutex) and a [`FairMutex`](crate::FairMutex) keep their
//! values in the same forms, so that every kind of mutex of one name takes fences that rise.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::transport::script::Invocation;

use crate::core::grant;
use crate::core::guard::Guard;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::notify::Target;
use crate::core::shared::Shared;
use crate::core::stored::{LockKind, Shape, Stored};
use crate::core::{FENCE, FORCE_PARTS};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::kinds::value::{self, held_value, place_member, TAKE, VALUE};
use crate::options::{Lease, LockOptions};
use crate::token::{Fence, OwnerToken};
use crate::transport::script::Lua;

pub(super) static ACQUIRE: Lua = Lua::new(&[FENCE, VALUE, include_str!("mutex/acquire.lua")]);
pub(super) static RELEASE: Lua = Lua::new(&[FENCE, VALUE, include_str!("mutex/release.lua")]);
static RAISE: Lua = Lua::new(&[VALUE, include_str!("mutex/raise.lua")]);
static FORCE: Lua = Lua::new(&[
    FENCE,
    VALUE,
    FORCE_PARTS,
    TAKE,
    include_str!("mutex/force.lua"),
]);

/// Where a mutex keeps its state under a name (`<prefix>{<name>}:<suffix>`).
pub(crate) const LOCK_KEY: &str = "mutex";
/// The waiters' places: token -> when the place ends.
pub(crate) const PLACES: &str = "mutex-waiters";
/// Where releases that offer the lock to nobody are announced; a waiter a release offers the
/// lock to is told on `<wake>:<client tag>`.
pub(crate) const WAKE: &str = "wake";

/// What inspection reads of a mutex, and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LOCK_KEY,
    shape: Shape::Value,
    places: Some(PLACES),
    channels: &[WAKE],
    judge: |name, raw, _| held_value(name, LockKind::Mutex, raw),
    force: &FORCE,
    force_keys: &[LOCK_KEY, PLACES],
};

/// A distributed mutex: at most one holder at a time for a name, across every process that uses
/// the same Redis.
///
/// Acquiring is one round trip (one script: `GET`, then `SET PX` with a random owner token).
/// Each grant carries a lease: if the holder dies, the lock frees itself when the lease ends.
/// By default the lease is renewed in the background while the guard lives, so a long critical
/// section keeps the lock, and a crashed process loses it within one lease. Each grant also
/// gets a [`Fence`]. A refused waiter takes a place among the lock's waiters, and a release
/// grants the lock, in the same script, to the waiter whose place ends first (the one that
/// tried least recently) and tells it by a notification addressed to its client: a handoff
/// costs the release alone however many processes wait. The lock is not fair: a request that
/// finds the lock free (its holder's lease ended) takes it whoever waits, and waiters are
/// served by the age of their last attempt, not of their arrival (use
/// [`FairMutex`](crate::FairMutex) for turns in order).
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
    grant: Arc<MutexGrant>,
}

/// Proof of holding a [`Mutex`]: a [`Guard`](crate::Guard) of a mutex.
pub type MutexGuard = Guard<MutexGrant>;

/// A mutex's name, keys and settings, computed once per handle: what its grants are of.
pub struct MutexGrant {
    lock: Lock,
    /// Held: the holder's token and fence; released: the name's last fence, as
    /// `value/value.lua` describes.
    lock_key: Vec<u8>,
    /// The waiters' places: token, lease and label -> when the place ends.
    places_key: Vec<u8>,
    /// Where releases that grant nobody are announced: what its scripts are given.
    wake_channel: Vec<u8>,
    /// Where this client's waiters with a place are told that a release offered them the
    /// lock: the message is written to one client, not to every waiting one.
    waiter_channel: Vec<u8>,
    /// How long a refused waiter's place among the waiters lasts, in ms; 0 for no place
    /// (where several masters would each keep their own line).
    place_ms: u64,
}

impl Mutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: &LockOptions) -> Result<Self> {
        let place_ms = if shared.nodes.keep_waiters_in_line() {
            shared.options.place_ms()
        } else {
            0
        };
        let waiter_channel = keys.client_channel(WAKE, &shared.id);
        let lock = Lock::new::<MutexGrant>(shared, keys, options)?;
        Ok(Mutex {
            grant: Arc::new(MutexGrant {
                lock_key: lock.key(LOCK_KEY),
                places_key: lock.key(PLACES),
                wake_channel: lock.key(WAKE),
                waiter_channel,
                place_ms,
                lock,
            }),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.grant.lock.name
    }

    /// The lease each grant of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.grant.lock.lease
    }

    /// Waits until the lock is acquired, or until the mutex's
    /// [`wait_timeout`](crate::LockOptions::wait_timeout) if it has one.
    ///
    /// While the lock is held by another owner, the caller takes a place among its waiters and
    /// sleeps. When its turn comes, the holder's release offers it the lock and tells it, and
    /// `lock()` claims the offer with one request and returns (the message alone proves
    /// nothing: a stale or relayed one costs that request, which Redis refuses); a first waiter
    /// that cannot claim costs the next one the
    /// [`handoff_window`](crate::ClientOptions::handoff_window). A release that offers it to nobody (on RedLock,
    /// where the masters keep no places) is announced, and the caller tries again. If a
    /// message is lost, the caller tries again after at most the client's
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback), and never past the holder's
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
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another Redis type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the wait limit
    /// (without one, for the client's [`outage_limit`](crate::ClientOptions::outage_limit)): the
    /// last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the lock may have been
    /// granted without the caller knowing (by its own request, or by a release that handed it
    /// over): it is released in the background, by owner token, so a cancelled `lock()`
    /// leaves the lock free, or hands it to the next waiter. A waiter's place among the
    /// waiters is given up the same way (or ends by itself within three wake fallbacks).
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
    pub async fn lock(&self) -> Result<MutexGuard> {
        let held = grant::acquire(&self.grant, self.grant.lock.wait_timeout).await?;
        Ok(Guard::new(held))
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
        let held = grant::acquire(&self.grant, Some(timeout)).await?;
        Ok(Guard::new(held))
    }

    /// Tries once to take the lock, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds it (a waiter a release
    /// offered it to, too), with the time its lease (or the offer) still runs;
    /// [`Error::LateGrant`](crate::Error::LateGrant) when Redis granted it but answered too late
    /// to trust the lease (the grant is given back); otherwise as [`Mutex::lock`].
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
        let held = grant::try_acquire(&self.grant).await?;
        Ok(Guard::new(held))
    }

    /// Waits for the lock as [`lock`](Mutex::lock) does, runs `work` while it is held, and
    /// releases it: [`Guard::using`](crate::Guard::using) in one call. `work` gets the grant's fence; it is
    /// stopped (its future dropped) if the lock is lost first.
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`] while waiting, then as [`Guard::using`](crate::Guard::using).
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
        f.debug_tuple("Mutex").field(&self.grant.lock).finish()
    }
}

impl MutexGrant {
    /// A waiter's place among the waiters: its token, the lease it asks for and its label
    /// (`value/value.lua`), so that a release can grant it the lock.
    fn place_of(&self, token: &OwnerToken) -> String {
        place_member(token, self.lock.lease_ms, self.lock.label())
    }
}

impl Kind for MutexGrant {
    const NAME: &'static str = "mutex";
    const GUARD: &'static str = "MutexGuard";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::Mutex;
    const ON_SEVERAL_NODES: bool = true;

    fn lock(&self) -> &Lock {
        &self.lock
    }

    fn wake_channel(&self) -> &[u8] {
        &self.wake_channel
    }

    /// A waiter with a place listens on its client's own channel, where a release names it,
    /// and on the name's channel, where releases that name nobody are announced (a
    /// multi-lock's, an operator's forced one).
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        let own = (self.place_ms > 0).then_some(&self.waiter_channel);
        own.into_iter()
            .chain(std::iter::once(&self.wake_channel))
            .map(Vec::as_slice)
    }

    fn acquire(&self, token: &OwnerToken, waits: bool, refused_before: bool) -> Invocation {
        let mut invocation = ACQUIRE.invocation(self.lock.shared.nodes.first());
        invocation
            .key(self.lock_key.as_slice())
            .key(self.places_key.as_slice())
            .arg(token.as_str())
            .arg(self.lock.lease_ms)
            .arg(self.lock.label())
            .arg(if waits { self.place_ms } else { 0 })
            .arg(u8::from(refused_before))
            .arg(u8::from(waits));
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let mut invocation = RELEASE.invocation(self.lock.shared.nodes.first());
        invocation
            .key(self.lock_key.as_slice())
            .key(self.places_key.as_slice())
            .arg(token.as_str())
            .arg(self.wake_channel.as_slice())
            .arg(self.lock.fence_memory_ms())
            .arg(self.place_of(token))
            .arg(self.lock.handoff_window_ms());
        invocation
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        value::extend(&self.lock, &self.lock_key, token, lease_ms)
    }

    fn raise_fence(&self, token: &OwnerToken, fence: u64) -> Option<Invocation> {
        let mut invocation = RAISE.invocation(self.lock.shared.nodes.first());
        invocation
            .key(self.lock_key.as_slice())
            .arg(token.as_str())
            .arg(fence);
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

#[cfg(test)]
mod tests;
