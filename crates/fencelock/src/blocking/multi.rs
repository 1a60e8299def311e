//! The blocking lock of several names and its guard.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::error::Result;
use crate::options::Lease;
use crate::token::Fence;

/// A lock of several names at once for blocking code: all of them or none.
///
/// The blocking counterpart of [`fencelock::MultiMutex`](crate::MultiMutex): each name is a
/// [`Mutex`](super::Mutex) name, so a multi-lock and a mutex of one of its names exclude each
/// other, and a grant has one fencing token per name. The handle is cheap to clone and to
/// send to other threads.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
/// let transfer = client.multi_mutex(["account:17", "account:42"])?;
/// let guard = transfer.lock()?;
/// assert!(client.mutex("account:42")?.try_lock().is_err());
/// let fence = guard.fence("account:17").expect("a locked name");
/// println!("debiting with fence {fence}");
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MultiMutex {
    mutex: crate::MultiMutex,
    runtime: Arc<Runtime>,
}

handle_methods!(MultiMutex, mutex);

impl MultiMutex {
    /// The names, in the order given, each once (lossily decoded where not UTF-8).
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.mutex.names()
    }

    /// The lease each grant of this lock gets, on every name.
    pub fn lease(&self) -> Lease {
        self.mutex.lease()
    }

    /// Blocks until every name is acquired, or until the lock's wait timeout if it has one,
    /// as [`fencelock::MultiMutex::lock`](crate::MultiMutex::lock) does.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when a name's key holds another Redis
    /// type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`MultiMutex`].
    pub fn lock(&self) -> Result<MultiMutexGuard> {
        self.runtime.hold(self.mutex.lock())
    }

    /// Blocks at most `timeout` for every name. See [`MultiMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`MultiMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(both: fencelock::blocking::MultiMutex) -> Result<(), fencelock::Error> {
    /// let guard = both.lock_timeout(std::time::Duration::from_secs(2))?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_timeout(&self, timeout: Duration) -> Result<MultiMutexGuard> {
        self.runtime.hold(self.mutex.lock_timeout(timeout))
    }

    /// Tries once to take every name, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds one of the names;
    /// otherwise as [`MultiMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(both: fencelock::blocking::MultiMutex) -> Result<(), fencelock::Error> {
    /// match both.try_lock() {
    ///     Ok(guard) => guard.unlock()?,
    ///     Err(fencelock::Error::Held { name, .. }) => println!("{name} is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self) -> Result<MultiMutexGuard> {
        self.runtime.hold(self.mutex.try_lock())
    }
}

/// Proof of holding every name of a blocking [`MultiMutex`], with a fencing token per name.
///
/// Release it with [`unlock`](MultiMutexGuard::unlock) to learn whether every name was still
/// held. Dropping the guard releases every name before `drop` returns, ignoring errors; if
/// that cannot reach Redis, the names free themselves when their lease ends.
///
/// # Examples
///
/// See [`MultiMutex`].
#[must_use = "dropping the guard releases every name before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether they were still held"]
pub struct MultiMutexGuard {
    held: Held<crate::MultiMutexGuard>,
}

impl MultiMutexGuard {
    /// Each name with the fencing token of this grant for it, in the order the names were
    /// given (each name once).
    pub fn fences(&self) -> impl ExactSizeIterator<Item = (&str, Fence)> + '_ {
        self.held.guard().fences()
    }

    /// The fencing token of one name of this grant, or `None` if the lock does not have that
    /// name.
    pub fn fence(&self, name: impl AsRef<[u8]>) -> Option<Fence> {
        self.held.guard().fence(name)
    }

    /// Releases every name and reports whether all were still held until then, as
    /// [`fencelock::MultiMutexGuard::unlock`](crate::MultiMutexGuard::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when a name had already expired or been
    /// taken; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime, where
    /// the names are released in the background instead.
    ///
    /// # Examples
    ///
    /// See [`MultiMutex`].
    pub fn unlock(self) -> Result<()> {
        self.held.release()
    }
}

guard_methods!(MultiMutexGuard, unlock, "set of names");
