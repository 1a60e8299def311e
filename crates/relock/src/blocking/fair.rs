//! The blocking fair mutex and its guard.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::error::Result;
use crate::options::Lease;
use crate::token::Fence;

/// A distributed mutex for blocking code that serves waiters in the order they arrived.
///
/// The blocking counterpart of [`relock::FairMutex`](crate::FairMutex): when the lock is
/// released it goes to the waiter that has waited longest, across every process, whichever
/// thread it waits on. The handle is cheap to clone and to send to other threads.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), relock::Error> {
/// # let server = relock_testkit::RedisServer::start();
/// # let client = relock::blocking::Client::connect(server.url().as_str())?;
/// let mutex = client.fair_mutex("lottery")?;
///
/// let guard = mutex.lock()?;
/// println!("drawing with fence {}", guard.fence());
/// assert!(mutex.try_lock().is_err());
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FairMutex {
    mutex: crate::FairMutex,
    runtime: Arc<Runtime>,
}

handle_methods!(FairMutex, mutex);

impl FairMutex {
    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The lease each grant of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.mutex.lease()
    }

    /// Blocks until the lock is acquired, or until the mutex's
    /// [`wait_timeout`](crate::MutexOptions::wait_timeout) if it has one. The caller takes a
    /// place in line and is woken when its turn comes, as
    /// [`relock::FairMutex::lock`](crate::FairMutex::lock) does.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another Redis
    /// type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached after a few
    /// resends; [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio
    /// runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::blocking::Client::connect(server.url().as_str())?;
    /// let mutex = client.fair_mutex("invoices")?;
    /// let first = mutex.lock()?;
    /// let waiter = std::thread::spawn({
    ///     let mutex = mutex.clone();
    ///     move || mutex.lock().map(|guard| guard.fence())
    /// });
    /// let before = first.fence();
    /// first.unlock()?; // wakes the waiter at once
    /// let after = waiter.join().expect("no panic")?;
    /// assert!(after > before);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<FairMutexGuard> {
        self.runtime.hold(self.mutex.lock())
    }

    /// Blocks at most `timeout` for the lock. See [`FairMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`FairMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: relock::blocking::FairMutex) -> Result<(), relock::Error> {
    /// use std::time::Duration;
    /// match mutex.lock_timeout(Duration::from_secs(2)) {
    ///     Ok(guard) => guard.unlock()?,
    ///     Err(relock::Error::Timeout { .. }) => println!("another instance is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_timeout(&self, timeout: Duration) -> Result<FairMutexGuard> {
        self.runtime.hold(self.mutex.lock_timeout(timeout))
    }

    /// Tries once to take the lock, without waiting: granted only when it is free and nobody
    /// waits for it.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds it or others wait for it;
    /// otherwise as [`FairMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::blocking::Client::connect(server.url().as_str())?;
    /// let mutex = client.fair_mutex("cron:cleanup")?;
    /// let guard = mutex.try_lock()?;
    /// match mutex.try_lock() {
    ///     Err(relock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self) -> Result<FairMutexGuard> {
        self.runtime.hold(self.mutex.try_lock())
    }
}

/// Proof of holding a blocking [`FairMutex`], with its lease and fencing token.
///
/// Release it with [`unlock`](FairMutexGuard::unlock) to learn whether it was still held.
/// Dropping the guard releases the lock before `drop` returns, ignoring errors (see
/// [the module documentation](super)); if that release cannot reach Redis, the lock frees
/// itself when its lease ends. A renewed lease is renewed by the client's runtime while the
/// guard lives, whatever the holding thread does.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), relock::Error> {
/// # let server = relock_testkit::RedisServer::start();
/// # let client = relock::blocking::Client::connect(server.url().as_str())?;
/// let mutex = client.fair_mutex("reindex")?;
/// {
///     let guard = mutex.lock()?;
///     assert!(guard.is_held());
///     // ... the work ...
/// } // released here
/// mutex.try_lock()?.unlock()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock right away"]
pub struct FairMutexGuard {
    held: Held<crate::FairMutexGuard>,
}

impl FairMutexGuard {
    /// The fencing token of this grant: larger than that of every earlier grant of the name.
    pub fn fence(&self) -> Fence {
        self.held.guard().fence()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.guard().name()
    }

    /// Releases the lock and reports whether it was still held until then, as
    /// [`relock::FairMutexGuard::unlock`](crate::FairMutexGuard::unlock) does: the first
    /// waiter is woken.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or been
    /// taken: whatever the guard protected was unprotected for a while.
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; the lock then frees
    /// itself when its lease ends. [`Error::BlockingInAsync`](crate::Error::BlockingInAsync)
    /// inside a tokio runtime, where the lock is released in the background instead.
    ///
    /// # Examples
    ///
    /// See [`FairMutex`].
    pub fn unlock(self) -> Result<()> {
        self.held.release()
    }
}

guard_methods!(FairMutexGuard, unlock, "lock");
