//! The blocking mutex and its guard, and the shape the blocking fair mutex shares with them.

/// Defines a blocking mutex `$handle`, made by `Client::$make` around the async handle of the
/// same name, and its guard `$guard`. The doc comments before `$handle` open the handle's
/// documentation; the rest is the same for every such mutex but for how it serves waiters:
/// - `lock`: how `lock` waits, a clause ending in a comma;
/// - `try_lock`: the summary line of `try_lock`;
/// - `held`: when `try_lock` returns `Error::Held`, a clause ending in a semicolon;
/// - `unlock`: what `unlock` does besides releasing, starting with `": "`, or `""`.
macro_rules! mutex_type {
    (
        $(#[$doc:meta])*
        $handle:ident, $guard:ident, made by $make:ident;
        lock: $lock_waits:literal,
        try_lock: $try_lock:literal,
        held: $held:literal,
        unlock: $unlock_also:literal $(,)?
    ) => {
        $(#[$doc])*
        ///
        /// # Examples
        ///
        /// ```
        /// # fn main() -> Result<(), fencelock::Error> {
        /// # let server = fencelock_testkit::RedisServer::start();
        /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
        #[doc = concat!("let mutex = client.", stringify!($make), "(\"lottery\")?;")]
        ///
        /// let guard = mutex.lock()?;
        /// println!("drawing with fence {}", guard.fence());
        /// assert!(mutex.try_lock().is_err());
        /// guard.unlock()?;
        /// # Ok(())
        /// # }
        /// ```
        #[derive(Clone)]
        pub struct $handle {
            mutex: $crate::$handle,
            runtime: std::sync::Arc<$crate::blocking::runtime::Runtime>,
        }

        impl $handle {
            /// The lock's name (lossily decoded where it is not UTF-8).
            pub fn name(&self) -> &str {
                self.mutex.name()
            }

            /// The lease each grant of this mutex gets.
            pub fn lease(&self) -> $crate::Lease {
                self.mutex.lease()
            }

            /// Blocks until the lock is acquired, or until the mutex's
            /// [`wait_timeout`](crate::MutexOptions::wait_timeout) if it has one.
            #[doc = concat!($lock_waits, " as [`fencelock::", stringify!($handle), "::lock`](crate::", stringify!($handle), "::lock) does.")]
            ///
            /// # Errors
            ///
            /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
            /// [`Error::WrongType`](crate::Error::WrongType) when the lock's key holds another
            /// Redis type; [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until
            /// the wait limit (without one, for the client's
            /// [`outage_limit`](crate::ClientOptions::outage_limit)): the last error;
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> Result<(), fencelock::Error> {
            /// # let server = fencelock_testkit::RedisServer::start();
            /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
            #[doc = concat!("let mutex = client.", stringify!($make), "(\"invoices\")?;")]
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
            pub fn lock(&self) -> $crate::Result<$guard> {
                self.runtime.hold(self.mutex.lock())
            }

            #[doc = concat!("Blocks at most `timeout` for the lock. See [`", stringify!($handle), "::lock`].")]
            ///
            /// # Errors
            ///
            /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`; otherwise as
            #[doc = concat!("[`", stringify!($handle), "::lock`].")]
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(mutex: fencelock::blocking::", stringify!($handle), ") -> Result<(), fencelock::Error> {")]
            /// use std::time::Duration;
            /// match mutex.lock_timeout(Duration::from_secs(2)) {
            ///     Ok(guard) => guard.unlock()?,
            ///     Err(fencelock::Error::Timeout { .. }) => println!("another instance is busy"),
            ///     Err(e) => return Err(e),
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn lock_timeout(&self, timeout: std::time::Duration) -> $crate::Result<$guard> {
                self.runtime.hold(self.mutex.lock_timeout(timeout))
            }

            #[doc = $try_lock]
            ///
            /// # Errors
            ///
            #[doc = concat!("[`Error::Held`](crate::Error::Held) ", $held, " otherwise as [`", stringify!($handle), "::lock`].")]
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> Result<(), fencelock::Error> {
            /// # let server = fencelock_testkit::RedisServer::start();
            /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
            #[doc = concat!("let mutex = client.", stringify!($make), "(\"cron:cleanup\")?;")]
            /// let guard = mutex.try_lock()?;
            /// match mutex.try_lock() {
            ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
            ///     other => panic!("expected Held, got {other:?}"),
            /// }
            /// guard.unlock()?;
            /// # Ok(())
            /// # }
            /// ```
            pub fn try_lock(&self) -> $crate::Result<$guard> {
                self.runtime.hold(self.mutex.try_lock())
            }
        }

        $crate::blocking::handle_methods!($handle, mutex);

        #[doc = concat!("Proof of holding a blocking [`", stringify!($handle), "`], with its lease and fencing token.")]
        ///
        #[doc = concat!("Release it with [`unlock`](", stringify!($guard), "::unlock) to learn whether it was still held.")]
        /// Dropping the guard releases the lock before `drop` returns, ignoring errors (see
        /// [the module documentation](super)); if that release cannot reach Redis, the lock
        /// frees itself when its lease ends. A renewed lease is renewed by the client's runtime
        /// while the guard lives, whatever the holding thread does.
        ///
        /// # Examples
        ///
        /// ```
        /// # fn main() -> Result<(), fencelock::Error> {
        /// # let server = fencelock_testkit::RedisServer::start();
        /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
        #[doc = concat!("let mutex = client.", stringify!($make), "(\"reindex\")?;")]
        /// {
        ///     let guard = mutex.lock()?;
        ///     assert!(guard.is_held());
        ///     // ... the work ...
        /// } // released here
        /// mutex.try_lock()?.unlock()?;
        /// # Ok(())
        /// # }
        /// ```
        #[must_use = "dropping the guard releases the lock before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether it was still held"]
        pub struct $guard {
            held: $crate::blocking::runtime::Held<$crate::$guard>,
        }

        impl $guard {
            /// The fencing token of this grant: larger than that of every earlier grant of the
            /// name.
            pub fn fence(&self) -> $crate::Fence {
                self.held.guard().fence()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.held.guard().name()
            }

            /// Releases the lock and reports whether it was still held until then, as
            #[doc = concat!("[`fencelock::", stringify!($guard), "::unlock`](crate::", stringify!($guard), "::unlock) does", $unlock_also, ".")]
            ///
            /// # Errors
            ///
            /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or
            /// been taken: whatever the guard protected was unprotected for a while.
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; the lock then
            /// frees itself when its lease ends.
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime,
            /// where the lock is released in the background instead.
            ///
            /// # Examples
            ///
            #[doc = concat!("See [`", stringify!($handle), "`].")]
            pub fn unlock(self) -> $crate::Result<()> {
                self.held.release()
            }

            /// Releases the lock, but not before `at`: when `at` is still ahead, the lock is
            /// left to end by itself at `at`, as
            #[doc = concat!("[`fencelock::", stringify!($guard), "::unlock_no_earlier_than`](crate::", stringify!($guard), "::unlock_no_earlier_than) does.")]
            ///
            /// # Errors
            ///
            /// As [`fencelock::MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than);
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime,
            /// where the lock is released in the background at once instead.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> Result<(), fencelock::Error> {
            /// # let server = fencelock_testkit::RedisServer::start();
            /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
            /// use std::time::{Duration, Instant};
            ///
            #[doc = concat!("let mutex = client.", stringify!($make), "(\"cron:invoices\")?;")]
            /// let started = Instant::now();
            /// let guard = mutex.lock()?;
            /// // ... the job ...
            /// guard.unlock_no_earlier_than(started + Duration::from_secs(60))?;
            /// assert!(mutex.try_lock().is_err(), "a late instance skips it");
            /// # Ok(())
            /// # }
            /// ```
            pub fn unlock_no_earlier_than(self, at: std::time::Instant) -> $crate::Result<()> {
                self.held.release_with(|guard| guard.unlock_no_earlier_than(at))
            }
        }

        $crate::blocking::guard_methods!($guard, unlock, "lock");
    };
}

pub(super) use mutex_type;

mutex_type! {
    /// A distributed mutex for blocking code: at most one holder at a time for a name, across
    /// every process that uses the same Redis.
    ///
    /// The blocking counterpart of [`fencelock::Mutex`](crate::Mutex), with its leases, renewal,
    /// fencing tokens and notified waiters; see there for what it guarantees. The handle is
    /// cheap to clone and to send to other threads, and touches Redis only when asked to lock.
    Mutex, MutexGuard, made by mutex;
    lock: "While another owner holds it, the thread sleeps until a release is announced, then tries again,",
    try_lock: "Tries once to take the lock, without waiting for another owner to release it.",
    held: "when another owner holds it, with the time its lease still runs;",
    unlock: "",
}
