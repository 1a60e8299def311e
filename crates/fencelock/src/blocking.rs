//! The same locks for code that is not async: a [`Client`] that runs the async one on a
//! runtime of its own, a [`block_on`](Client::block_on) that runs any of the crate's
//! operations to completion on the calling thread, and one [`Guard`] that blocks where the
//! async guard awaits.
//!
//! A blocking client owns a small tokio runtime (one worker thread) and an async
//! [`fencelock::Client`](crate::Client) running on it, which it dereferences to: lock handles
//! are the async ones (`client.mutex("jobs")?`), and the client blocks on what they return
//! (`client.lock(mutex.lock())?`). While the calling thread blocks, the worker thread keeps
//! renewing leases and receiving release notifications: a thread that holds a lock and blocks
//! on something else for longer than the lease keeps the lock, as an async task would.
//! Leases, fences, errors and what the locks guarantee are those of the async API.
//!
//! Use it in programs without a tokio runtime: command-line tools, threads of a synchronous
//! server, scripts. Do not use it inside async code: blocking there would stall the runtime's
//! threads, so every blocking call made inside a tokio runtime (in a task, in `block_on`, in
//! `spawn_blocking` too) returns [`Error::BlockingInAsync`](crate::Error::BlockingInAsync)
//! instead of blocking. Use the async API there.
//!
//! Dropping a guard releases the lock before `drop` returns, ignoring errors: when Redis does
//! not answer, the drop returns after the few resends an `unlock` makes (each bounded by the
//! client's [`response_timeout`](crate::ClientOptions::response_timeout)) and the lock ends
//! with its lease. Dropped inside a runtime, a guard releases in the background instead, on
//! the client's runtime. That runtime shuts down when the client and every guard made from it
//! are dropped, after giving the releases still under way a second to finish. Before the
//! program exits with guards still alive (held by other threads, which the process ends
//! without unwinding), call [`Client::shutdown`], which gives their locks back.
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
//!         let (client, mutex) = (client.clone(), mutex.clone());
//!         thread::spawn(move || -> Result<u64, fencelock::Error> {
//!             let guard = client.lock(mutex.lock())?;
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
//! client.shutdown()?;
//! # Ok(())
//! # }
//! ```

mod runtime;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::connect::IntoDeployment;
use crate::core::held::AnyKind;
use crate::core::kind::Kind;
use crate::core::lease::Lost;
use crate::error::Result;
use crate::kinds::election::Candidate;
use crate::kinds::semaphore::PermitGrant;
use crate::options::ClientOptions;
use runtime::{inside_runtime, refuse_inside_runtime, Runtime};

/// A client for code that is not async: the async [`fencelock::Client`](crate::Client), which
/// it dereferences to for making lock handles, on a runtime of its own that it blocks on.
///
/// Cloning is cheap and shares the client and its runtime.
///
/// # Examples
///
/// See [the module](self).
#[derive(Clone)]
pub struct Client {
    client: crate::Client,
    runtime: Arc<Runtime>,
}

impl Client {
    /// Connects to `deployment` with default options, as
    /// [`fencelock::Client::connect`](crate::Client::connect) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect`](crate::Client::connect);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [the module](self).
    pub fn connect(deployment: impl IntoDeployment) -> Result<Client> {
        Client::connect_with_options(deployment, ClientOptions::default())
    }

    /// Connects to `deployment` with the given options, as
    /// [`fencelock::Client::connect_with_options`](crate::Client::connect_with_options) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_with_options`](crate::Client::connect_with_options);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use fencelock::{blocking, ClientOptions};
    ///
    /// # fn demo() -> Result<(), fencelock::Error> {
    /// let options = ClientOptions::default().holder_label("report-job");
    /// let client = blocking::Client::connect_with_options("redis://127.0.0.1/", options)?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_with_options(
        deployment: impl IntoDeployment,
        options: ClientOptions,
    ) -> Result<Client> {
        let runtime = Runtime::start()?;
        let client =
            runtime.block_on(crate::Client::connect_with_options(deployment, options))??;
        Ok(Client { client, runtime })
    }

    /// Runs one of the crate's operations to completion on the calling thread: whatever an
    /// async handle returns, such as `semaphore.available()`, `election.leader()`,
    /// `client.locks("*")` or `watch.next()`. For an acquire, whose guard must block too, use
    /// [`lock`](Client::lock).
    ///
    /// # Errors
    ///
    /// The operation's own; [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside
    /// a tokio runtime (nothing is run).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let exports = client.semaphore("exports", 3)?;
    /// let permit = client.lock(exports.acquire())?;
    /// assert_eq!(client.block_on(exports.available())?, 2);
    /// permit.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn block_on<T>(&self, operation: impl Future<Output = Result<T>>) -> Result<T> {
        self.runtime.block_on(operation)?
    }

    /// Runs an acquire to completion on the calling thread (`mutex.lock()`,
    /// `semaphore.acquire_many(2)`, `rwlock.read()`, `election.campaign(value)`, ...) and
    /// returns its guard, whose release blocks too.
    ///
    /// # Errors
    ///
    /// The acquire's own; [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a
    /// tokio runtime (nothing is run).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let mutex = client.mutex("cron:cleanup")?;
    /// let guard = client.lock(mutex.lock())?;
    /// assert!(client.lock(mutex.try_lock()).is_err());
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock<K: Kind>(
        &self,
        acquire: impl Future<Output = Result<crate::Guard<K>>>,
    ) -> Result<Guard<K>> {
        let guard = self.block_on(acquire)?;
        Ok(Guard {
            guard: Some(guard),
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// Gives back every lock still held by a guard of this client and waits for Redis, as
    /// [`fencelock::Client::shutdown`](crate::Client::shutdown) does.
    ///
    /// A guard that goes out of scope releases its lock as it is dropped, so a single-threaded
    /// program whose guards all go out of scope needs no shutdown. Call it before exiting
    /// when guards may still be alive: held by other threads (which the process ends without
    /// unwinding), dropped inside a runtime, or kept in a `static`. Every guard of the client
    /// then reports not held, and its `unlock` and `extend` return
    /// [`Error::Shutdown`](crate::Error::Shutdown).
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::shutdown`](crate::Client::shutdown);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// let client = fencelock::blocking::Client::connect(url.as_str())?;
    /// let guard = client.lock(client.mutex("nightly-report")?.lock())?;
    /// // ... the work ...
    /// client.shutdown()?;
    /// assert!(!guard.is_held());
    /// assert!(matches!(guard.unlock(), Err(fencelock::Error::Shutdown)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn shutdown(&self) -> Result<()> {
        self.block_on(self.client.shutdown())
    }
}

/// The async client, for making lock handles and reading what needs no Redis.
impl Deref for Client {
    type Target = crate::Client;

    fn deref(&self) -> &crate::Client {
        &self.client
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Client")
            .field(&self.client)
            .finish()
    }
}

/// Proof of holding a lock, for code that is not async: the async
/// [`fencelock::Guard`](crate::Guard), which it dereferences to for what needs no Redis
/// (`fence`, `name`, `valid_until`, `is_held`, a permit's `permits`, a multi-lock's `fences`),
/// with the rest blocking.
///
/// Dropping it releases the lock before `drop` returns (in the background inside a runtime),
/// ignoring errors; [`unlock`](Guard::unlock) says whether it was still held.
///
/// # Examples
///
/// See [the module](self).
#[must_use = "dropping the guard releases the lock before `drop` returns (in the background inside a runtime), ignoring errors; call `unlock` to learn whether it was still held"]
pub struct Guard<K: ?Sized + AnyKind = dyn AnyKind> {
    /// Always `Some` until released or dropped, which take it.
    guard: Option<crate::Guard<K>>,
    runtime: Arc<Runtime>,
}

/// A guard of any kind, as [`fencelock::Guard`](crate::Guard) without a kind.
impl<K: Kind> From<Guard<K>> for Guard {
    fn from(mut guard: Guard<K>) -> Guard {
        Guard {
            guard: guard.guard.take().map(crate::Guard::from),
            runtime: Arc::clone(&guard.runtime),
        }
    }
}

impl<K: ?Sized + AnyKind> Guard<K> {
    /// Blocks until the lock is lost, or at most `timeout`; `None` when it was still held
    /// then. See [`fencelock::Guard::lost`](crate::Guard::lost).
    ///
    /// # Errors
    ///
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: fencelock::blocking::Guard) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// if let Some(reason) = guard.wait_lost(Duration::from_secs(5))? {
    ///     eprintln!("stop the work: {reason}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<Option<Lost>> {
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, self.held().lost()).await.ok() })
    }

    /// Makes the lease last at least `lease` from now, as
    /// [`fencelock::Guard::extend`](crate::Guard::extend) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Guard::extend`](crate::Guard::extend);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: fencelock::blocking::Guard) -> Result<(), fencelock::Error> {
    /// guard.extend(std::time::Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.runtime.block_on(self.held().extend(lease))?
    }

    /// Releases the lock and reports whether it was still held until then, as
    /// [`fencelock::Guard::unlock`](crate::Guard::unlock) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Guard::unlock`](crate::Guard::unlock);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime (the
    /// guard is then dropped, which releases in the background).
    ///
    /// # Examples
    ///
    /// See [the module](self).
    pub fn unlock(self) -> Result<()> {
        self.release_with(crate::Guard::unlock)
    }

    /// Releases the lock, but not before `at`, as
    /// [`fencelock::Guard::unlock_no_earlier_than`](crate::Guard::unlock_no_earlier_than)
    /// does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Guard::unlock_no_earlier_than`](crate::Guard::unlock_no_earlier_than);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn job(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use std::time::{Duration, Instant};
    ///
    /// let started = Instant::now();
    /// let guard = client.lock(client.mutex("cron:invoices")?.try_lock())?;
    /// // ... the job ...
    /// guard.unlock_no_earlier_than(started + Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock_no_earlier_than(self, at: Instant) -> Result<()> {
        self.release_with(|guard| guard.unlock_no_earlier_than(at))
    }

    fn held(&self) -> &crate::Guard<K> {
        let Some(guard) = &self.guard else {
            unreachable!("the guard is only taken by a release and the drop, which consume it")
        };
        guard
    }

    fn release_with<F, Fut>(mut self, release: F) -> Result<()>
    where
        F: FnOnce(crate::Guard<K>) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        refuse_inside_runtime()?;
        match self.guard.take() {
            Some(guard) => self.runtime.block_on(release(guard))?,
            None => Ok(()),
        }
    }
}

impl Guard<PermitGrant> {
    /// Gives the permits back, as [`unlock`](Guard::unlock) does.
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Examples
    ///
    /// See [`Client::block_on`].
    pub fn release(self) -> Result<()> {
        self.unlock()
    }
}

impl Guard<Candidate> {
    /// Publishes `value` as the leader's value, as
    /// [`fencelock::Leadership::proclaim`](crate::Guard::proclaim) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Leadership::proclaim`](crate::Guard::proclaim);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// let election = client.election("primary")?;
    /// let leadership = client.lock(election.campaign("10.0.0.7:5432 (starting)"))?;
    /// leadership.proclaim("10.0.0.7:5432")?;
    /// let leader = client.block_on(election.leader())?.expect("leads");
    /// assert_eq!(leader.value(), "10.0.0.7:5432");
    /// leadership.resign()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn proclaim(&self, value: impl AsRef<str>) -> Result<()> {
        self.runtime.block_on(self.held().proclaim(value))?
    }

    /// Gives leadership up at once, as [`unlock`](Guard::unlock) does.
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Examples
    ///
    /// See [`proclaim`](Guard::proclaim).
    pub fn resign(self) -> Result<()> {
        self.unlock()
    }
}

/// The async guard, for what needs no Redis.
impl<K: ?Sized + AnyKind> Deref for Guard<K> {
    type Target = crate::Guard<K>;

    fn deref(&self) -> &crate::Guard<K> {
        self.held()
    }
}

impl<K: ?Sized + AnyKind> fmt::Debug for Guard<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Guard").field(self.held()).finish()
    }
}

impl<K: ?Sized + AnyKind> Drop for Guard<K> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        if inside_runtime() {
            self.runtime.release_in_background(async {
                let _ = guard.unlock().await;
            });
        } else {
            let _ = self.runtime.block_on(guard.unlock());
        }
    }
}

#[cfg(test)]
mod tests {
    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<super::Client>();
        is_send_sync::<super::Guard>();
        is_send_sync::<super::Guard<crate::kinds::mutex::MutexGrant>>();
        is_send_sync::<super::Guard<super::PermitGrant>>();
        is_send_sync::<super::Guard<super::Candidate>>();
    }
}
