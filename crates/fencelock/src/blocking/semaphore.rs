//! The blocking semaphore and its permit.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::error::Result;
use crate::options::Lease;
use crate::token::Fence;

/// A distributed counting semaphore for blocking code: at most a number of permits held at a
/// time for a name, across every process that uses the same Redis.
///
/// The blocking counterpart of [`fencelock::Semaphore`](crate::Semaphore), with its per-grant
/// leases, renewal and notified waiters. The handle is cheap to clone and to send to other
/// threads.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
/// let exports = client.semaphore("exports", 3)?;
///
/// let permit = exports.acquire()?;
/// let two_more = exports.acquire_many(2)?;
/// assert!(exports.try_acquire().is_err(), "all 3 permits are held");
/// permit.release()?;
/// two_more.release()?;
/// assert_eq!(exports.available()?, 3);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    semaphore: crate::Semaphore,
    runtime: Arc<Runtime>,
}

handle_methods!(Semaphore, semaphore);

impl Semaphore {
    /// The semaphore's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// The lease each grant of this semaphore gets.
    pub fn lease(&self) -> Lease {
        self.semaphore.lease()
    }

    /// Blocks until one permit is granted. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub fn acquire(&self) -> Result<SemaphorePermit> {
        self.acquire_many(1)
    }

    /// Blocks until `n` permits are granted at once, as one grant, or until the semaphore's
    /// wait timeout if it has one, as
    /// [`fencelock::Semaphore::acquire_many`](crate::Semaphore::acquire_many) does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for `n` = 0 or more than the
    /// semaphore's total; [`Error::Timeout`](crate::Error::Timeout) when the wait limit
    /// passes; [`Error::WrongType`](crate::Error::WrongType) when the semaphore's key holds
    /// another Redis type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let gpu = client.semaphore("gpu-slots", 4)?;
    /// let small = gpu.acquire()?;
    /// let waiter = std::thread::spawn({
    ///     let gpu = gpu.clone();
    ///     move || gpu.acquire_many(4).map(|permit| permit.permits())
    /// });
    /// small.release()?; // wakes the waiter at once
    /// assert_eq!(waiter.join().expect("no panic")?, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_many(&self, n: u32) -> Result<SemaphorePermit> {
        self.runtime.hold(self.semaphore.acquire_many(n))
    }

    /// Blocks at most `timeout` for one permit. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(exports: fencelock::blocking::Semaphore) -> Result<(), fencelock::Error> {
    /// let permit = exports.acquire_timeout(std::time::Duration::from_secs(2))?;
    /// permit.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphorePermit> {
        self.acquire_many_timeout(1, timeout)
    }

    /// Blocks at most `timeout` for `n` permits. See [`Semaphore::acquire_many`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
    /// [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(exports: fencelock::blocking::Semaphore) -> Result<(), fencelock::Error> {
    /// let permits = exports.acquire_many_timeout(2, std::time::Duration::from_secs(2))?;
    /// permits.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_many_timeout(&self, n: u32, timeout: Duration) -> Result<SemaphorePermit> {
        self.runtime
            .hold(self.semaphore.acquire_many_timeout(n, timeout))
    }

    /// Tries once to take one permit, without waiting.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire_many`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub fn try_acquire(&self) -> Result<SemaphorePermit> {
        self.try_acquire_many(1)
    }

    /// Tries once to take `n` permits at once, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when fewer than `n` permits are free; otherwise as
    /// [`Semaphore::acquire_many`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(exports: fencelock::blocking::Semaphore) -> Result<(), fencelock::Error> {
    /// match exports.try_acquire_many(2) {
    ///     Ok(permits) => permits.release()?,
    ///     Err(fencelock::Error::Held { .. }) => println!("too busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_many(&self, n: u32) -> Result<SemaphorePermit> {
        self.runtime.hold(self.semaphore.try_acquire_many(n))
    }

    /// Sets the total number of permits, for every process, from now on, as
    /// [`fencelock::Semaphore::set_permits`](crate::Semaphore::set_permits) does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a total of zero;
    /// [`Error::WrongType`](crate::Error::WrongType) when the semaphore's key holds another
    /// Redis type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let workers = client.semaphore("workers", 2)?;
    /// let held = workers.acquire_many(2)?;
    /// workers.set_permits(5)?;
    /// assert_eq!(workers.permits()?, 5);
    /// assert_eq!(workers.available()?, 3);
    /// held.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_permits(&self, total: u32) -> Result<()> {
        self.runtime.block_on(self.semaphore.set_permits(total))?
    }

    /// The total number of permits in force, as
    /// [`fencelock::Semaphore::permits`](crate::Semaphore::permits) reports it.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when the semaphore's key holds another
    /// Redis type; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Semaphore::set_permits`].
    pub fn permits(&self) -> Result<u32> {
        self.runtime.block_on(self.semaphore.permits())?
    }

    /// How many permits are free now, as
    /// [`fencelock::Semaphore::available`](crate::Semaphore::available) reports it.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::permits`].
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub fn available(&self) -> Result<u32> {
        self.runtime.block_on(self.semaphore.available())?
    }
}

/// Proof of holding permits of a blocking [`Semaphore`], as one grant with its own lease.
///
/// Give them back with [`release`](SemaphorePermit::release) to learn whether they were still
/// held. Dropping the permit gives them back before `drop` returns, ignoring errors; if that
/// cannot reach Redis, they are given back when their lease ends.
///
/// # Examples
///
/// See [`Semaphore`].
#[must_use = "dropping the permit gives it back before `drop` returns (in the background inside a runtime), ignoring errors; call `release` to learn whether it was still held"]
pub struct SemaphorePermit {
    held: Held<crate::SemaphorePermit>,
}

impl SemaphorePermit {
    /// How many permits this grant holds.
    pub fn permits(&self) -> u32 {
        self.held.guard().permits()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the
    /// semaphore.
    pub fn fence(&self) -> Fence {
        self.held.guard().fence()
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.held.guard().name()
    }

    /// Gives the permits back and reports whether they were still held until then, as
    /// [`fencelock::SemaphorePermit::release`](crate::SemaphorePermit::release) does.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the grant had already expired or been
    /// removed; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime, where
    /// the permits are given back in the background instead.
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub fn release(self) -> Result<()> {
        self.held.release()
    }
}

guard_methods!(SemaphorePermit, release, "grant");
