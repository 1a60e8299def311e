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

use std::sync::Arc;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::notify::Target;
use crate::core::shared::Shared;
use crate::core::stored::{LockKind, Shape, Stored};
use crate::core::{FENCE, FORCE_PARTS};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::kinds::value::{self, held_value, place_member, TAKE, VALUE};
use crate::options::LockOptions;
use crate::token::OwnerToken;
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
/// the same Redis. A [`Handle`]: its methods are written there.
///
/// Acquiring is one round trip (one script: `GET`, then `SET PX` with a random owner token).
/// Each grant carries a lease: if the holder dies, the lock frees itself when the lease ends.
/// By default the lease is renewed in the background while the guard lives, so a long critical
/// section keeps the lock, and a crashed process loses it within one lease. Each grant also
/// gets a [`Fence`](crate::Fence). A refused waiter takes a place among the lock's waiters,
/// and a release offers the lock, in the same script, to the waiter whose place ends first
/// (the one that tried least recently) and tells it by a notification addressed to its
/// client: the waiter claims the offer with one request of its own, so a handoff costs two
/// script calls however many processes wait, and a waiter that cannot claim costs the next
/// one the [`handoff_window`](crate::ClientOptions::handoff_window). On RedLock, where the
/// masters keep no places, a release offers the lock to nobody and announces itself, and the
/// waiters try again. The lock is not fair: a request that finds the lock free (its holder's lease
/// ended) takes it whoever waits, and waiters are served by the age of their last attempt,
/// not of their arrival (use [`FairMutex`](crate::FairMutex) for turns in order).
///
/// Use it to make one instance of a service do a thing at a time. Do not use it where two
/// holders at once would corrupt data unless the resource also checks the fencing token: a
/// process can be paused past its lease (see the crate documentation).
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
pub type Mutex = Handle<MutexGrant>;

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
        let place_ms = if shared.keeps_waiters_in_line() {
            shared.place_ms()
        } else {
            0
        };
        let waiter_channel = keys.client_channel(WAKE, shared.client_id());
        let lock = Lock::new::<MutexGrant>(shared, keys, options)?;
        Ok(Handle::of(Arc::new(MutexGrant {
            lock_key: lock.key(LOCK_KEY),
            places_key: lock.key(PLACES),
            wake_channel: lock.key(WAKE),
            waiter_channel,
            place_ms,
            lock,
        })))
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
    const HANDLE: &'static str = "Mutex";
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
        let mut invocation = ACQUIRE.invocation();
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
        let mut invocation = RELEASE.invocation();
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
        value::extend(&self.lock_key, token, lease_ms)
    }

    fn raise_fence(&self, token: &OwnerToken, fence: u64) -> Option<Invocation> {
        let mut invocation = RAISE.invocation();
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
