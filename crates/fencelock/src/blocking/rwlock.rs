//! The blocking read-write lock and its guards.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::error::Result;
use crate::options::Lease;
use crate::reentrant::Holder;
use crate::token::Fence;

/// A distributed read-write lock for blocking code: many readers or one writer at a time for
/// a name, across every process that uses the same Redis.
///
/// The blocking counterpart of [`fencelock::RwLock`](crate::RwLock): holds are taken for a
/// [`Holder`], each with its own guard and lease; a holder may read while it writes, and a
/// waiting writer keeps new readers out when the lock prefers writers (the default).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
/// let lock = client.rwlock("catalog")?;
/// let (alice, bob) = (client.holder()?, client.holder()?);
/// let a = lock.read_as(&alice)?;
/// let b = lock.read_as(&bob)?; // readers share the lock
/// assert!(lock.try_write_as(&client.holder()?).is_err());
/// a.unlock()?;
/// b.unlock()?;
/// lock.try_write_as(&alice)?.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    lock: crate::RwLock,
    runtime: Arc<Runtime>,
}

handle_methods!(RwLock, lock);

impl RwLock {
    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The lease each hold of this lock gets.
    pub fn lease(&self) -> Lease {
        self.lock.lease()
    }

    /// Blocks until `holder` has a read hold, or until the lock's wait timeout if it has one,
    /// as [`fencelock::RwLock::read_as`](crate::RwLock::read_as) does.
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
    /// See [`RwLock`].
    pub fn read_as(&self, holder: &Holder) -> Result<RwLockReadGuard> {
        self.runtime.hold(self.lock.read_as(holder))
    }

    /// Blocks at most `timeout` for a read hold. See [`RwLock::read`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: fencelock::blocking::RwLock, me: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// let guard = lock.read_timeout_as(&me, std::time::Duration::from_secs(2))?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_timeout_as(&self, holder: &Holder, timeout: Duration) -> Result<RwLockReadGuard> {
        self.runtime
            .hold(self.lock.read_timeout_as(holder, timeout))
    }

    /// Tries once to take a read hold for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner writes, or a writer with
    /// preference waits; otherwise as [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// See [`RwLock`].
    pub fn try_read_as(&self, holder: &Holder) -> Result<RwLockReadGuard> {
        self.runtime.hold(self.lock.try_read_as(holder))
    }

    /// Blocks until `holder` has the write hold, or until the lock's wait timeout if it has
    /// one, as [`fencelock::RwLock::write_as`](crate::RwLock::write_as) does.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) when `holder` holds a read hold
    /// (it would wait for itself); otherwise as [`RwLock::read`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("prices")?;
    /// let reader = lock.read_as(&client.holder()?)?;
    /// let writer = std::thread::spawn({
    ///     let lock = lock.clone();
    ///     let me = client.holder()?;
    ///     move || lock.write_as(&me).map(|guard| guard.fence())
    /// });
    /// let before = reader.fence();
    /// reader.unlock()?; // lets the writer in
    /// assert!(writer.join().expect("no panic")? > before);
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_as(&self, holder: &Holder) -> Result<RwLockWriteGuard> {
        self.runtime.hold(self.lock.write_as(holder))
    }

    /// Blocks at most `timeout` for the write hold. See [`RwLock::write`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`RwLock::write`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: fencelock::blocking::RwLock, me: fencelock::Holder) -> Result<(), fencelock::Error> {
    /// let guard = lock.write_timeout_as(&me, std::time::Duration::from_secs(2))?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_timeout_as(&self, holder: &Holder, timeout: Duration) -> Result<RwLockWriteGuard> {
        self.runtime
            .hold(self.lock.write_timeout_as(holder, timeout))
    }

    /// Tries once to take the write hold for `holder`, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds the lock; otherwise as
    /// [`RwLock::write`].
    ///
    /// # Examples
    ///
    /// See [`RwLock`].
    pub fn try_write_as(&self, holder: &Holder) -> Result<RwLockWriteGuard> {
        self.runtime.hold(self.lock.try_write_as(holder))
    }

    /// Blocks for a read hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::read`](crate::RwLock::read) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.read()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(&self) -> Result<RwLockReadGuard> {
        self.runtime.hold(self.lock.read())
    }

    /// Blocks for the write hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::write`](crate::RwLock::write) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.write()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(&self) -> Result<RwLockWriteGuard> {
        self.runtime.hold(self.lock.write())
    }

    /// Blocks at most `timeout` for a read hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::read_timeout`](crate::RwLock::read_timeout) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read_timeout_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.read_timeout(std::time::Duration::from_secs(1))?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> Result<RwLockReadGuard> {
        self.runtime.hold(self.lock.read_timeout(timeout))
    }

    /// Blocks at most `timeout` for the write hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::write_timeout`](crate::RwLock::write_timeout) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::write_timeout_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.write_timeout(std::time::Duration::from_secs(1))?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_timeout(&self, timeout: Duration) -> Result<RwLockWriteGuard> {
        self.runtime.hold(self.lock.write_timeout(timeout))
    }

    /// Tries once to take a read hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::try_read`](crate::RwLock::try_read) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::try_read_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.try_read()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read(&self) -> Result<RwLockReadGuard> {
        self.runtime.hold(self.lock.try_read())
    }

    /// Tries once to take the write hold, for a holder of its own (never reentrant), as
    /// [`fencelock::RwLock::try_write`](crate::RwLock::try_write) does.
    ///
    /// # Errors
    ///
    /// As [`RwLock::try_write_as`]; [`Error::Entropy`](crate::Error::Entropy) when the operating
    /// system's random number generator fails.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let lock = client.rwlock("catalog")?;
    /// lock.try_write()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write(&self) -> Result<RwLockWriteGuard> {
        self.runtime.hold(self.lock.try_write())
    }
}

/// Proof of one read hold of a blocking [`RwLock`], with its own lease and fencing token.
///
/// Give it back with [`unlock`](RwLockReadGuard::unlock) to learn whether it was still held.
/// Dropping the guard gives the hold back before `drop` returns, ignoring errors; the
/// owner's other holds are untouched.
///
/// # Examples
///
/// See [`RwLock`].
#[must_use = "dropping the guard gives its hold back before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether it was still held"]
pub struct RwLockReadGuard {
    held: Held<crate::RwLockReadGuard>,
}

/// Proof of the write hold of a blocking [`RwLock`], with its own lease and fencing token.
///
/// Give it back with [`unlock`](RwLockWriteGuard::unlock) to learn whether it was still held.
/// Dropping the guard gives the hold back before `drop` returns, ignoring errors; the
/// owner's other holds, read holds taken while writing included, are untouched.
///
/// # Examples
///
/// See [`RwLock::write`].
#[must_use = "dropping the guard gives its hold back before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether it was still held"]
pub struct RwLockWriteGuard {
    held: Held<crate::RwLockWriteGuard>,
}

/// The methods of one kind of hold.
macro_rules! hold_methods {
    ($guard:ident, $hold:literal, $what:literal) => {
        impl $guard {
            #[doc = concat!("The fencing token of this ", $hold, " hold (see [`fencelock::RwLock`](crate::RwLock), Fencing).")]
            pub fn fence(&self) -> Fence {
                self.held.guard().fence()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.held.guard().name()
            }

            #[doc = concat!("Gives this ", $hold, " hold back and reports whether it was still held until then.")]
            ///
            /// # Errors
            ///
            /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold had already expired;
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio
            /// runtime, where the hold is given back in the background instead.
            ///
            /// # Examples
            ///
            /// See [`RwLock`].
            pub fn unlock(self) -> Result<()> {
                self.held.release()
            }
        }

        guard_methods!($guard, unlock, $what);
    };
}

hold_methods!(RwLockReadGuard, "read", "read hold");
hold_methods!(RwLockWriteGuard, "write", "write hold");
