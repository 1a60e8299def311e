//! The blocking reentrant mutex and its guard.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::error::Result;
use crate::options::Lease;
use crate::reentrant::Holder;
use crate::token::Fence;

/// A distributed mutex for blocking code that its holder may lock again while holding it.
///
/// The blocking counterpart of [`fencelock::ReentrantMutex`](crate::ReentrantMutex): locks are
/// taken for a [`Holder`] (from [`Client::holder`](super::Client::holder) or
/// [`Client::holder_named`](super::Client::holder_named)), each hold has its own guard and
/// lease, and the lock is free when every hold of its holder is given back.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
/// let lock = client.reentrant_mutex("ledger")?;
/// let me = client.holder()?;
/// let outer = lock.lock(&me)?;
/// let inner = lock.try_lock(&me)?; // the same holder: granted again
/// assert!(lock.try_lock(&client.holder()?).is_err()); // another holder: refused
/// inner.unlock()?;
/// outer.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ReentrantMutex {
    mutex: crate::ReentrantMutex,
    runtime: Arc<Runtime>,
}

handle_methods!(ReentrantMutex, mutex);

impl ReentrantMutex {
    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The lease each hold of this lock gets.
    pub fn lease(&self) -> Lease {
        self.mutex.lease()
    }

    /// Blocks until `holder` holds the lock (at once if it holds it already), or until the
    /// lock's wait timeout if it has one, as
    /// [`fencelock::ReentrantMutex::lock`](crate::ReentrantMutex::lock) does.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another Redis
    /// type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn lock(&self, holder: &Holder) -> Result<ReentrantMutexGuard> {
        self.runtime.hold(self.mutex.lock(holder))
    }

    /// Blocks at most `timeout` until `holder` holds the lock. See [`ReentrantMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`ReentrantMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: fencelock::blocking::ReentrantMutex, me: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// let guard = lock.lock_timeout(&me, std::time::Duration::from_secs(2))?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_timeout(&self, holder: &Holder, timeout: Duration) -> Result<ReentrantMutexGuard> {
        self.runtime.hold(self.mutex.lock_timeout(holder, timeout))
    }

    /// Tries once to take the lock for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another holder holds it; otherwise as
    /// [`ReentrantMutex::lock`].
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn try_lock(&self, holder: &Holder) -> Result<ReentrantMutexGuard> {
        self.runtime.hold(self.mutex.try_lock(holder))
    }
}

/// Proof of one hold of a blocking [`ReentrantMutex`], with its own lease and fencing token.
///
/// Give it back with [`unlock`](ReentrantMutexGuard::unlock) to learn whether it was still
/// held. Dropping the guard gives this hold back before `drop` returns, ignoring errors; the
/// holder's other holds keep the lock.
///
/// # Examples
///
/// See [`ReentrantMutex`].
#[must_use = "dropping the guard gives its hold back before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether it was still held"]
pub struct ReentrantMutexGuard {
    held: Held<crate::ReentrantMutexGuard>,
}

impl ReentrantMutexGuard {
    /// The fencing token of the holder's grant: every hold of one holder shares it.
    pub fn fence(&self) -> Fence {
        self.held.guard().fence()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.guard().name()
    }

    /// Gives this hold back and reports whether it was still held until then, as
    /// [`fencelock::ReentrantMutexGuard::unlock`](crate::ReentrantMutexGuard::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold had already expired or been
    /// removed; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime, where
    /// the hold is given back in the background instead.
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn unlock(self) -> Result<()> {
        self.held.release()
    }
}

guard_methods!(ReentrantMutexGuard, unlock, "hold");
