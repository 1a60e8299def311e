//! The same locks for code that is not async: every call blocks the calling thread.
//!
//! A [`blocking::Client`](Client) owns a small tokio runtime of its own (one worker thread)
//! and an async [`fencelock::Client`](crate::Client) running on it. Each blocking call runs the
//! async one to completion on the calling thread, while the worker thread keeps renewing
//! leases and receiving release notifications: a thread that holds a lock and blocks on
//! something else for longer than the lease keeps the lock, as an async task would. Guards,
//! leases, fences, errors and what the locks guarantee are those of the async API.
//!
//! Use it in programs without a tokio runtime: command-line tools, threads of a synchronous
//! server, scripts. Do not use it inside async code: blocking there would stall the runtime's
//! threads, so every blocking call made inside a tokio runtime (in a task, in `block_on`,
//! in `spawn_blocking` too) returns [`Error::BlockingInAsync`](crate::Error::BlockingInAsync)
//! instead of blocking. Use the async API there.
//!
//! Dropping a guard releases the lock before `drop` returns, ignoring errors: when Redis does
//! not answer, the drop returns after the few resends an `unlock` makes (each bounded by the
//! client's [`response_timeout`](crate::ClientOptions::response_timeout)) and the lock ends
//! with its lease. Dropped inside a runtime, a guard releases in the background instead, on
//! the client's runtime. That runtime shuts down when the client and every handle and guard
//! made from it are dropped, after giving the releases still under way a second to finish.
//! Before the program exits with guards still alive (held by other threads, which the process
//! ends without unwinding), call [`Client::shutdown`], which gives their locks back.
//!
//! # Examples
//!
//! ```
//! # fn main() -> Result<(), fencelock::Error> {
//! # let server = fencelock_testkit::RedisServer::start();
//! # let url = server.url();
//! use std::thread;
//!
//! let client = fencelock::blocking::Client::connect(url.as_str())?;
//! let mutex = client.mutex("nightly-report")?;
//! let workers: Vec<_> = (0..2)
//!     .map(|_| {
//!         let mutex = mutex.clone();
//!         thread::spawn(move || -> Result<u64, fencelock::Error> {
//!             let guard = mutex.lock()?;
//!             // ... the work only one thread of one instance may do ...
//!             let fence = guard.fence().get();
//!             guard.unlock()?;
//!             Ok(fence)
//!         })
//!     })
//!     .collect();
//! for worker in workers {
//!     let fence = worker.join().expect("no panic")?;
//!     assert!(fence > 0);
//! }
//! # Ok(())
//! # }
//! ```

mod client;
mod election;
mod fair;
mod multi;
mod mutex;
mod reentrant;
mod runtime;
mod rwlock;
mod semaphore;

pub use client::Client;
pub use election::{Election, LeaderWatch, Leadership};
pub use fair::{FairMutex, FairMutexGuard};
pub use multi::{MultiMutex, MultiMutexGuard};
pub use mutex::{Mutex, MutexGuard};
pub use reentrant::{ReentrantMutex, ReentrantMutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};

/// What every blocking handle shares: its making from the async handle of the same name, and
/// its `Debug`. `$lock` is the field holding the async handle.
macro_rules! handle_methods {
    ($handle:ident, $lock:ident) => {
        impl $handle {
            pub(crate) fn new(
                $lock: $crate::$handle,
                runtime: std::sync::Arc<$crate::blocking::runtime::Runtime>,
            ) -> Self {
                $handle { $lock, runtime }
            }
        }

        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($handle)))
                    .field(&self.$lock)
                    .finish()
            }
        }
    };
}

use handle_methods;

/// What every blocking guard shares: validity, the lost signal, extension, its `Debug`, and
/// holding the async guard of the same name, released by its method `$release`.
macro_rules! guard_methods {
    ($guard:ident, $release:ident, $what:literal) => {
        $crate::blocking::runtime::async_guard!($crate::$guard, $release);

        impl $crate::blocking::runtime::BlockingGuard for $guard {
            type Async = $crate::$guard;

            fn from_held(held: $crate::blocking::runtime::Held<$crate::$guard>) -> Self {
                $guard { held }
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($guard)))
                    .field(self.held.guard())
                    .finish()
            }
        }

        impl $guard {
            #[doc = concat!("The instant until which the ", $what, " is certainly held: the")]
            /// time the last successful acquire or renewal was sent, plus the lease, minus a
            /// drift allowance of 1% + 2 ms.
            pub fn valid_until(&self) -> std::time::Instant {
                self.held.valid_until()
            }

            #[doc = concat!("Whether the ", $what, " is still held as far as this process")]
            /// knows, without asking Redis: the lost signal has not fired and the validity
            /// deadline has not passed.
            pub fn is_held(&self) -> bool {
                self.held.is_held()
            }

            #[doc = concat!("Blocks until the ", $what, " is lost, or at most `timeout`;")]
            /// `Ok(None)` when it is still held then. It is lost when renewal finds it
            /// deleted or taken, or when the validity deadline passes without a successful
            /// renewal. Renewal goes on in the client's runtime whether or not anyone waits
            /// here: call it to learn of a loss, or use [`is_held`](Self::is_held) between
            /// steps of the work.
            ///
            /// # Errors
            ///
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio
            /// runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: fencelock::blocking::", stringify!($guard), ") -> Result<(), fencelock::Error> {")]
            /// use std::time::Duration;
            ///
            /// if let Some(reason) = guard.wait_lost(Duration::from_secs(1))? {
            ///     eprintln!("stopping: {reason}");
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn wait_lost(
                &self,
                timeout: std::time::Duration,
            ) -> $crate::Result<Option<$crate::Lost>> {
                self.held.wait_lost(timeout)
            }

            #[doc = concat!("Makes the lease of the ", $what, " last at least `lease` from now,")]
            /// if it is still held. It never shortens the lease: with less than the time left,
            /// nothing changes. A renewed lease is renewed as before, which never cuts an
            /// extension short.
            ///
            /// # Errors
            ///
            /// [`Error::NotHeld`](crate::Error::NotHeld) when it was lost;
            /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
            /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio
            /// runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: fencelock::blocking::", stringify!($guard), ") -> Result<(), fencelock::Error> {")]
            /// guard.extend(std::time::Duration::from_secs(60))?;
            /// # Ok(())
            /// # }
            /// ```
            pub fn extend(&self, lease: std::time::Duration) -> $crate::Result<()> {
                self.held.extend(lease)
            }
        }
    };
}

use guard_methods;

#[cfg(test)]
mod tests {
    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<super::Client>();
        is_send_sync::<super::Mutex>();
        is_send_sync::<super::MutexGuard>();
        is_send_sync::<super::ReentrantMutex>();
        is_send_sync::<super::ReentrantMutexGuard>();
        is_send_sync::<super::RwLock>();
        is_send_sync::<super::RwLockReadGuard>();
        is_send_sync::<super::RwLockWriteGuard>();
        is_send_sync::<super::Semaphore>();
        is_send_sync::<super::SemaphorePermit>();
        is_send_sync::<super::FairMutex>();
        is_send_sync::<super::FairMutexGuard>();
        is_send_sync::<super::MultiMutex>();
        is_send_sync::<super::MultiMutexGuard>();
        is_send_sync::<super::Election>();
        is_send_sync::<super::Leadership>();
        is_send_sync::<super::LeaderWatch>();
    }
}
