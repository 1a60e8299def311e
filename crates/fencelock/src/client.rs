//! The entry point: a connection to Redis shared by every lock made from it.

use std::fmt;
use std::sync::Arc;

use crate::core::live_holds::Registered;
use crate::core::shared::Shared;
use crate::error::{Error, Result};
use crate::keys::{Layout, LockKeys};
use crate::kinds::election::Election;
use crate::kinds::fair::FairMutex;
use crate::kinds::foreign::ForeignMutex;
use crate::kinds::multi::MultiMutex;
use crate::kinds::mutex::Mutex;
use crate::kinds::reentrant::{Holder, ReentrantMutex, MAX_HOLDER_LEN};
use crate::kinds::rwlock::RwLock;
use crate::kinds::semaphore::Semaphore;
use crate::options::{ClientOptions, LockOptions};
use crate::token::random_id;

/// A connection to Redis and the background work every lock made from it shares.
///
/// One `Client` per process is the intended use: it holds one multiplexed connection for lock
/// commands, one pub/sub connection (opened in the background as the client is made) for
/// release notifications, and one task that renews every renewed lease in batches and runs the
/// releases of dropped guards. Cloning is cheap and shares all of it. Commands are never retried silently except
/// where the lock token makes a retry idempotent; the connection reconnects in the background
/// after a failure.
///
/// Call [`shutdown`](Client::shutdown) before the program exits: a guard dropped on the way
/// out only queues its release to the background task, which the runtime stops as `main`
/// returns, and the lock then stays held until its lease ends.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = fencelock::Client::connect(url.as_str()).await?;
/// let guard = client.mutex("nightly-report")?.lock().await?;
/// // ... the work only one instance may do ...
/// guard.unlock().await?;
/// client.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
}

impl Client {
    /// A distributed mutex named `name`, with the client's default lease and no wait limit.
    ///
    /// Making the handle talks to nobody; it is cheap to create and to clone. Any process that
    /// makes a mutex of the same name through the same Redis and key prefix contends for the
    /// same lock. Names are bytes: any `&str`, `String`, `&[u8]` or `Vec<u8>` of 1 to
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// let mutex = client.mutex("lottery:2026-11-22")?;
    /// assert!(client.mutex("").is_err());
    /// # let _ = mutex;
    /// # Ok(())
    /// # }
    /// ```
    pub fn mutex(&self, name: impl AsRef<[u8]>) -> Result<Mutex> {
        self.mutex_with_options(name, LockOptions::default())
    }

    /// A distributed mutex with its own options. See [`Client::mutex`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) as for [`Client::mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// See [`LockOptions`].
    pub fn mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<Mutex> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Mutex::new(Arc::clone(&self.shared), keys, &options)
    }

    /// A leader election named `name`, with the client's default lease and no wait limit on a
    /// campaign.
    ///
    /// Making the handle talks to nobody. Every process that makes an election of the same
    /// name through the same Redis and key prefix takes part in the same election. Its keys
    /// are apart from those of a mutex of the same name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn election(&self, name: impl AsRef<[u8]>) -> Result<Election> {
        self.election_with_options(name, LockOptions::default())
    }

    /// A leader election with its own lease, and a wait limit on each campaign. See
    /// [`Client::election`].
    ///
    /// # Errors
    ///
    /// As [`Client::election`]; [`Error::InvalidOption`](crate::Error::InvalidOption) for a
    /// lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::{Lease, LockOptions};
    ///
    /// // A crashed leader is replaced within 5 s; a pause of 5 s costs the leadership.
    /// let options = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(5)));
    /// let election = client.election_with_options("scheduler", options)?;
    /// # let _ = election;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<Election> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Election::new(Arc::clone(&self.shared), keys, &options)
    }

    /// Gives back every lock this client holds and stops its background work: what to call
    /// before the program exits.
    ///
    /// Every hold of every lock made from the client (any primitive, renewed or fixed lease)
    /// is released at once, and the shutdown waits for Redis to answer those releases and the
    /// releases of dropped guards still under way, for at most the client's
    /// [`shutdown_timeout`](ClientOptions::shutdown_timeout) (5 s by default). Then the
    /// renewal task and the notification tasks stop, and their connections close.
    ///
    /// This is needed because dropping a guard only queues its release to the client's
    /// background task: when `main` returns (or `?` leaves it) right after, the runtime shuts
    /// down first and the lock stays held until its lease ends, up to 30 s by default.
    ///
    /// After it, every guard of the client reports [`is_held`](crate::MutexGuard::is_held)
    /// `false`, its `lost()` completes with [`Lost::Shutdown`](crate::Lost::Shutdown), and its
    /// `unlock` and `extend` return [`Error::Shutdown`]; dropping it does nothing. Every
    /// acquire returns [`Error::Shutdown`], and a `lock()` waiting when the shutdown began
    /// returns it too.
    ///
    /// A client and its clones are one client: shutting down through any clone shuts down all
    /// of them, and every lock handle made from any of them. Shutting down again returns at
    /// once. Dropping a client does not shut it down: its handles and guards keep it alive.
    ///
    /// It is called `shutdown`, not `close`, because it does more than close connections: it
    /// gives back locks and ends background work first, as tokio's `Runtime::shutdown_timeout`
    /// and Redisson's `RedissonClient.shutdown()` do.
    ///
    /// # Errors
    ///
    /// [`Error::ShutdownIncomplete`] when Redis did not answer every release within the
    /// shutdown timeout: those locks end with their leases. The client is shut down all the
    /// same.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, the one future of the crate that is not: the client is shut down and
    /// every hold given up as soon as it is first polled, and dropping the future undoes none
    /// of that. The releases go on in the background, but nothing waits for them any more, so
    /// a program that exits right after may leave locks held until their leases end. Await it
    /// to the end.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// let client = fencelock::Client::connect(url.as_str()).await?;
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// // ... the work; an early `return` or `?` would drop the guard ...
    /// client.shutdown().await?;
    /// assert!(!guard.is_held());
    /// assert!(matches!(guard.unlock().await, Err(fencelock::Error::Shutdown)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) -> Result<()> {
        let shared = &self.shared;
        let releases = shared
            .holds
            .shut_down()
            .into_iter()
            .map(|Registered { lease, release, .. }| {
                lease.shut_down();
                release
            })
            .collect();
        shared.notifier.stop();
        let unanswered = shared
            .keeper
            .shut_down(releases, shared.options.shutdown_timeout)
            .await;
        if unanswered > 0 {
            return Err(Error::ShutdownIncomplete { unanswered });
        }
        Ok(())
    }

    /// This client's random identity (128 bits from the OS, as 22 characters).
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The options the client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.shared.options
    }
}

impl Client {
    /// A fair distributed mutex named `name`, with the client's default lease and no wait
    /// limit.
    ///
    /// Making the handle talks to nobody. Names are bytes, as for [`Client::mutex`]; a fair
    /// mutex and a [`Mutex`](crate::Mutex) of the same name are different locks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client, which offers only
    /// [`Mutex`](crate::Mutex).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// let turns = client.fair_mutex("printer")?;
    /// # let _ = turns;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_mutex(&self, name: impl AsRef<[u8]>) -> Result<FairMutex> {
        self.fair_mutex_with_options(name, LockOptions::default())
    }

    /// A fair distributed mutex with its own options. See [`Client::fair_mutex`].
    ///
    /// # Errors
    ///
    /// As [`Client::fair_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::LockOptions;
    ///
    /// let options = LockOptions::default().wait_timeout(Duration::from_secs(30));
    /// let turns = client.fair_mutex_with_options("printer", options)?;
    /// # let _ = turns;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<FairMutex> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        FairMutex::new(Arc::clone(&self.shared), keys, &options)
    }

    /// A mutex kept in another library's [`Layout`], so that this service and the services
    /// that take the same lock with that library (redis-py, python-redis-lock, pottery,
    /// node-redlock, redis-semaphore, go-redsync, rslock, Redisson) exclude each other. The key
    /// is the one that library makes of `name` ([`Layout::key`]); the client's key prefix is
    /// not added. See [`ForeignMutex`] for what it shares with them and what it does not give,
    /// and [`topics::sharing`](crate::topics::sharing) for each library's options that must
    /// agree.
    ///
    /// Making the handle talks to nobody.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name, a name
    /// that is not UTF-8 in a layout whose library names locks with text, or, on a cluster, a
    /// python-redis-lock name whose key and signal list fall in different slots;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`ForeignMutex`].
    pub fn foreign_mutex(&self, layout: Layout, name: impl AsRef<[u8]>) -> Result<ForeignMutex> {
        self.foreign_mutex_with_options(layout, name, LockOptions::default())
    }

    /// A mutex kept in another library's [`Layout`], with its own options. See
    /// [`Client::foreign_mutex`].
    ///
    /// # Errors
    ///
    /// As [`Client::foreign_mutex`]; [`Error::InvalidOption`](crate::Error::InvalidOption) for
    /// a lease out of range, a lease of python-redis-lock's layout that is not whole seconds,
    /// or a zero [`poll_interval`](LockOptions::poll_interval).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::{Layout, Lease, LockOptions};
    ///
    /// // python-redis-lock's `Lock(r, "reports", expire=60, auto_renewal=True)`.
    /// let options = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(60)));
    /// let lock = client.foreign_mutex_with_options(Layout::PythonRedisLock, "reports", options)?;
    /// # let _ = lock;
    /// # Ok(())
    /// # }
    /// ```
    pub fn foreign_mutex_with_options(
        &self,
        layout: Layout,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<ForeignMutex> {
        ForeignMutex::new(Arc::clone(&self.shared), layout, name.as_ref(), &options)
    }
}

impl Client {
    /// A new owner with a random id (128 bits from the OS), for reentrant locks.
    ///
    /// # Errors
    ///
    /// [`Error::Entropy`](crate::Error::Entropy) when the operating system's random number
    /// generator fails.
    ///
    /// # Examples
    ///
    /// See [`Holder`].
    pub fn holder(&self) -> Result<Holder> {
        Ok(Holder::new(&self.shared.id, &random_id()?))
    }

    /// The owner named `id` within this client: every call with the same `id` gives the same
    /// owner, so a holder can be found again by name (a worker slot, a job id).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) when `id` is empty, longer than
    /// 128 bytes, or contains `:`.
    ///
    /// # Examples
    ///
    /// See [`Holder`].
    pub fn holder_named(&self, id: impl AsRef<str>) -> Result<Holder> {
        let id = id.as_ref();
        if id.is_empty() || id.len() > MAX_HOLDER_LEN || id.contains(':') {
            return Err(Error::InvalidOption {
                option: "holder_named",
                reason: format!(
                    "a holder id has 1 to {MAX_HOLDER_LEN} bytes and no `:`, got {} bytes",
                    id.len()
                ),
            });
        }
        Ok(Holder::new(&self.shared.id, id))
    }

    /// A reentrant mutex named `name`, with the client's default lease and no wait limit.
    ///
    /// Making the handle talks to nobody. The reentrant mutex has its own keys: it does not
    /// exclude a [`Mutex`](crate::Mutex) of the same name, but shares its fence sequence.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client, which offers only
    /// [`Mutex`](crate::Mutex).
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn reentrant_mutex(&self, name: impl AsRef<[u8]>) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with_options(name, LockOptions::default())
    }

    /// A reentrant mutex with its own options. See [`Client::reentrant_mutex`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) as for [`Client::reentrant_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::{Lease, LockOptions};
    ///
    /// let options = LockOptions::default()
    ///     .lease(Lease::Renewed(Duration::from_secs(10)))
    ///     .wait_timeout(Duration::from_secs(2));
    /// let mutex = client.reentrant_mutex_with_options("ledger", options)?;
    /// # let _ = mutex;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reentrant_mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<ReentrantMutex> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        ReentrantMutex::new(Arc::clone(&self.shared), keys, &options)
    }
}

impl Client {
    /// A distributed read-write lock named `name`, with the client's default lease, no wait
    /// limit, and writer preference.
    ///
    /// Making the handle talks to nobody. The read-write lock has its own keys: it does not
    /// exclude a [`Mutex`](crate::Mutex) of the same name, but shares its fence sequence.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client, which offers only
    /// [`Mutex`](crate::Mutex).
    ///
    /// # Examples
    ///
    /// See [`RwLock`].
    pub fn rwlock(&self, name: impl AsRef<[u8]>) -> Result<RwLock> {
        self.rwlock_with_options(name, LockOptions::default())
    }

    /// A distributed read-write lock with its own options. See [`Client::rwlock`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) as for [`Client::rwlock`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// See [`LockOptions`].
    pub fn rwlock_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: LockOptions,
    ) -> Result<RwLock> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        RwLock::new(Arc::clone(&self.shared), keys, &options)
    }
}

impl Client {
    /// A distributed semaphore named `name` with `permits` permits in all, the client's default
    /// lease and no wait limit.
    ///
    /// Making the handle talks to nobody. `permits` is the total this handle stores in Redis
    /// when none is stored yet (see [`Semaphore`] for how processes agree on the total). Names
    /// are bytes, as for [`Client::mutex`]; a semaphore and a mutex of the same name do not
    /// interfere.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty or too long name; [`Error::InvalidOption`] for zero
    /// permits; [`Error::Unsupported`] on a RedLock client, which offers only [`Mutex`](crate::Mutex).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// let uploads = client.semaphore("uploads", 4)?;
    /// assert!(client.semaphore("uploads", 0).is_err());
    /// # let _ = uploads;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        self.semaphore_with_options(name, permits, LockOptions::default())
    }

    /// A distributed semaphore with its own options. See [`Client::semaphore`].
    ///
    /// # Errors
    ///
    /// As [`Client::semaphore`]; [`Error::InvalidOption`] for a lease out of range.
    ///
    /// # Examples
    ///
    /// See [`LockOptions`].
    pub fn semaphore_with_options(
        &self,
        name: impl AsRef<[u8]>,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Semaphore::new(Arc::clone(&self.shared), keys, permits, &options)
    }
}

impl Client {
    /// A lock of several [`Mutex`](crate::Mutex) names taken together, all or none, with the
    /// client's default lease and no wait limit.
    ///
    /// Names are bytes, each as for [`Client::mutex`]. A name given more than once is locked
    /// once: the lock has each distinct name once, in the order of first appearance, so
    /// locking both accounts of a transfer works when they are the same account. Making the
    /// handle talks to nobody.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for no names, more than
    /// [`MAX_MULTI_NAMES`](crate::MAX_MULTI_NAMES) names, or an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
    /// let transfer = client.multi_mutex(["account:17", "account:42"])?;
    /// assert_eq!(client.multi_mutex(["a", "a"])?.names().count(), 1);
    /// assert!(client.multi_mutex(Vec::<String>::new()).is_err());
    /// # let _ = transfer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn multi_mutex<I>(&self, names: I) -> Result<MultiMutex>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.multi_mutex_with_options(names, LockOptions::default())
    }

    /// A lock of several names with its own options: the lease applies to every name, the wait
    /// timeout to the whole set. See [`Client::multi_mutex`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) as for [`Client::multi_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// See [`MultiMutexGuard::extend`](crate::MultiMutexGuard::extend).
    pub fn multi_mutex_with_options<I>(&self, names: I, options: LockOptions) -> Result<MultiMutex>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        MultiMutex::new(Arc::clone(&self.shared), names, &options)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.shared.id)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use crate::client::Client;
    use crate::error::Error;
    use crate::options::ClientOptions;

    #[tokio::test]
    async fn without_the_feature_tls_is_refused_by_name() {
        let refused = Client::connect("rediss://127.0.0.1:6380/").await;
        assert!(
            matches!(
                refused,
                Err(Error::Unsupported {
                    what: "TLS (`rediss://`)",
                    ..
                })
            ),
            "{refused:?}"
        );
        let options = ClientOptions::default().tls_root_certificate("");
        let refused = Client::connect_with_options("redis://127.0.0.1:6379/", options).await;
        assert!(
            matches!(
                refused,
                Err(Error::InvalidOption {
                    option: "tls_root_certificate",
                    ..
                })
            ),
            "{refused:?}"
        );
    }
}
