//! The blocking client: an async client on a runtime of its own.

use std::fmt;
use std::sync::Arc;

use redis::IntoConnectionInfo;

use super::runtime::Runtime;
use super::{Election, FairMutex, MultiMutex, Mutex, ReentrantMutex, RwLock, Semaphore};
use crate::error::Result;
use crate::inspect::LockInfo;
use crate::options::{ClientOptions, MutexOptions};
use crate::reentrant::Holder;
use crate::rwlock::RwLockOptions;
use crate::semaphore::SemaphoreOptions;
use crate::transport::sentinel::SentinelOptions;

/// A connection to Redis for blocking code, and the runtime its background work runs on.
///
/// The blocking counterpart of [`fencelock::Client`](crate::Client): the same connections,
/// options and deployments, with one worker thread of its own that renews leases and receives
/// release notifications while callers block. One per process is the intended use; cloning is
/// cheap and shares all of it. See [the module documentation](super) for when to use it.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = fencelock::blocking::Client::connect(url.as_str())?;
/// let guard = client.mutex("nightly-report")?.lock()?;
/// // ... the work only one instance may do ...
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    // Dropped before the runtime: the async client's tasks end with their last handle.
    client: crate::Client,
    runtime: Arc<Runtime>,
}

impl Client {
    /// Connects with default options: [`fencelock::Client::connect`](crate::Client::connect),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect`](crate::Client::connect);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Client`].
    pub fn connect<T: IntoConnectionInfo>(target: T) -> Result<Client> {
        Client::connect_with_options(target, ClientOptions::default())
    }

    /// Connects with the given options:
    /// [`fencelock::Client::connect_with_options`](crate::Client::connect_with_options), blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_with_options`](crate::Client::connect_with_options), and
    /// [`Error::Redis`](crate::Error::Redis) when the runtime's thread cannot be started;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// use fencelock::ClientOptions;
    ///
    /// let options = ClientOptions::default().prefix("payments:");
    /// let client = fencelock::blocking::Client::connect_with_options(url.as_str(), options)?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_with_options<T: IntoConnectionInfo>(
        target: T,
        options: ClientOptions,
    ) -> Result<Client> {
        Client::start(|| crate::Client::connect_with_options(target, options))
    }

    /// Connects to several independent Redis masters for RedLock, with default options:
    /// [`fencelock::Client::connect_redlock`](crate::Client::connect_redlock), blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_redlock`](crate::Client::connect_redlock);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let servers: Vec<_> = (0..3).map(|_| fencelock_testkit::RedisServer::start()).collect();
    /// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    /// let client = fencelock::blocking::Client::connect_redlock(urls)?;
    /// let guard = client.mutex("nightly-report")?.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_redlock<I, T>(masters: I) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::connect_redlock_with_options(masters, ClientOptions::default())
    }

    /// Connects to several independent Redis masters for RedLock:
    /// [`fencelock::Client::connect_redlock_with_options`](crate::Client::connect_redlock_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_redlock_with_options`](crate::Client::connect_redlock_with_options);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::ClientOptions;
    ///
    /// let masters = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
    /// let options = ClientOptions::default().node_timeout(Duration::from_millis(50));
    /// let client = fencelock::blocking::Client::connect_redlock_with_options(masters, options)?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_redlock_with_options<I, T>(masters: I, options: ClientOptions) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::start(|| crate::Client::connect_redlock_with_options(masters, options))
    }

    /// Connects to a Redis Cluster with default options:
    /// [`fencelock::Client::connect_cluster`](crate::Client::connect_cluster), blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_cluster`](crate::Client::connect_cluster);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), fencelock::Error> {
    /// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"];
    /// let client = fencelock::blocking::Client::connect_cluster(nodes)?;
    /// let guard = client.mutex("nightly-report")?.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_cluster<I, T>(nodes: I) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::connect_cluster_with_options(nodes, ClientOptions::default())
    }

    /// Connects to a Redis Cluster:
    /// [`fencelock::Client::connect_cluster_with_options`](crate::Client::connect_cluster_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_cluster_with_options`](crate::Client::connect_cluster_with_options);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Client::connect_cluster`].
    pub fn connect_cluster_with_options<I, T>(nodes: I, options: ClientOptions) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::start(|| crate::Client::connect_cluster_with_options(nodes, options))
    }

    /// Connects through Redis Sentinel with default options:
    /// [`fencelock::Client::connect_sentinel`](crate::Client::connect_sentinel), blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_sentinel`](crate::Client::connect_sentinel);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), fencelock::Error> {
    /// let sentinels = ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/"];
    /// let client = fencelock::blocking::Client::connect_sentinel(sentinels, "locks")?;
    /// let guard = client.mutex("nightly-report")?.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_sentinel<I>(sentinels: I, service_name: &str) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        Client::connect_sentinel_with_options(
            sentinels,
            service_name,
            SentinelOptions::default(),
            ClientOptions::default(),
        )
    }

    /// Connects through Redis Sentinel with credentials for the master and client options:
    /// [`fencelock::Client::connect_sentinel_with_options`](crate::Client::connect_sentinel_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Client::connect_sentinel_with_options`](crate::Client::connect_sentinel_with_options);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Client::connect_sentinel`] and [`SentinelOptions`].
    pub fn connect_sentinel_with_options<I>(
        sentinels: I,
        service_name: &str,
        nodes: SentinelOptions,
        options: ClientOptions,
    ) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        Client::start(|| {
            crate::Client::connect_sentinel_with_options(sentinels, service_name, nodes, options)
        })
    }

    /// Starts a runtime and connects on it: the async client's tasks are spawned there.
    fn start<F, C>(connect: C) -> Result<Client>
    where
        C: FnOnce() -> F,
        F: std::future::Future<Output = Result<crate::Client>>,
    {
        let runtime = Runtime::start()?;
        let client = runtime.block_on(connect())??;
        Ok(Client { client, runtime })
    }

    /// A distributed mutex named `name`, with the client's default lease and no wait limit.
    /// See [`fencelock::Client::mutex`](crate::Client::mutex).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name.
    ///
    /// # Examples
    ///
    /// See [`Mutex`].
    pub fn mutex(&self, name: impl AsRef<[u8]>) -> Result<Mutex> {
        self.mutex_with_options(name, MutexOptions::default())
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
    /// See [`MutexGuard::extend`](super::MutexGuard::extend).
    pub fn mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<Mutex> {
        let mutex = self.client.mutex_with_options(name, options)?;
        Ok(Mutex::new(mutex, self.runtime()))
    }

    /// A leader election: [`fencelock::Client::election`](crate::Client::election).
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
        self.election_with_options(name, MutexOptions::default())
    }

    /// A leader election with its own options:
    /// [`fencelock::Client::election_with_options`](crate::Client::election_with_options).
    ///
    /// # Errors
    ///
    /// As [`Client::election`]; [`Error::InvalidOption`](crate::Error::InvalidOption) for a
    /// lease out of range.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn election_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<Election> {
        let election = self.client.election_with_options(name, options)?;
        Ok(Election::new(election, self.runtime()))
    }

    /// A new owner with a random id, for reentrant and read-write locks:
    /// [`fencelock::Client::holder`](crate::Client::holder).
    ///
    /// # Errors
    ///
    /// [`Error::Entropy`](crate::Error::Entropy) when the operating system's random number
    /// generator fails.
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn holder(&self) -> Result<Holder> {
        self.client.holder()
    }

    /// The owner named `id` within this client:
    /// [`fencelock::Client::holder_named`](crate::Client::holder_named).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) when `id` is empty, longer than
    /// 128 bytes, or contains `:`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// let worker = client.holder_named("worker-3")?;
    /// assert_eq!(worker.id(), "worker-3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder_named(&self, id: impl AsRef<str>) -> Result<Holder> {
        self.client.holder_named(id)
    }

    /// A reentrant mutex named `name`:
    /// [`fencelock::Client::reentrant_mutex`](crate::Client::reentrant_mutex).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`ReentrantMutex`].
    pub fn reentrant_mutex(&self, name: impl AsRef<[u8]>) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with_options(name, MutexOptions::default())
    }

    /// A reentrant mutex with its own options. See [`Client::reentrant_mutex`].
    ///
    /// # Errors
    ///
    /// As [`Client::reentrant_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::MutexOptions;
    ///
    /// let options = MutexOptions::default().wait_timeout(Duration::from_secs(5));
    /// let lock = client.reentrant_mutex_with_options("ledger", options)?;
    /// # let _ = lock;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reentrant_mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<ReentrantMutex> {
        let lock = self.client.reentrant_mutex_with_options(name, options)?;
        Ok(ReentrantMutex::new(lock, self.runtime()))
    }

    /// A read-write lock named `name`: [`fencelock::Client::rwlock`](crate::Client::rwlock).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`RwLock`].
    pub fn rwlock(&self, name: impl AsRef<[u8]>) -> Result<RwLock> {
        self.rwlock_with_options(name, RwLockOptions::default())
    }

    /// A read-write lock with its own options. See [`Client::rwlock`].
    ///
    /// # Errors
    ///
    /// As [`Client::rwlock`]; [`Error::InvalidOption`](crate::Error::InvalidOption) for a
    /// lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use fencelock::RwLockOptions;
    ///
    /// let lock = client.rwlock_with_options("catalog", RwLockOptions::default().writer_preference(false))?;
    /// # let _ = lock;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rwlock_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: RwLockOptions,
    ) -> Result<RwLock> {
        let lock = self.client.rwlock_with_options(name, options)?;
        Ok(RwLock::new(lock, self.runtime()))
    }

    /// A semaphore named `name` with `permits` permits in all:
    /// [`fencelock::Client::semaphore`](crate::Client::semaphore).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for zero permits;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`Semaphore`].
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        self.semaphore_with_options(name, permits, SemaphoreOptions::default())
    }

    /// A semaphore with its own options. See [`Client::semaphore`].
    ///
    /// # Errors
    ///
    /// As [`Client::semaphore`], and for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::SemaphoreOptions;
    ///
    /// let options = SemaphoreOptions::default().wait_timeout(Duration::from_secs(5));
    /// let exports = client.semaphore_with_options("exports", 3, options)?;
    /// # let _ = exports;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore_with_options(
        &self,
        name: impl AsRef<[u8]>,
        permits: u32,
        options: SemaphoreOptions,
    ) -> Result<Semaphore> {
        let semaphore = self.client.semaphore_with_options(name, permits, options)?;
        Ok(Semaphore::new(semaphore, self.runtime()))
    }

    /// A fair mutex named `name`, whose waiters are served in order:
    /// [`fencelock::Client::fair_mutex`](crate::Client::fair_mutex).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`FairMutex`].
    pub fn fair_mutex(&self, name: impl AsRef<[u8]>) -> Result<FairMutex> {
        self.fair_mutex_with_options(name, MutexOptions::default())
    }

    /// A fair mutex with its own options. See [`Client::fair_mutex`].
    ///
    /// # Errors
    ///
    /// As [`Client::fair_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::MutexOptions;
    ///
    /// let options = MutexOptions::default().wait_timeout(Duration::from_secs(30));
    /// let counter = client.fair_mutex_with_options("ticket-counter", options)?;
    /// # let _ = counter;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<FairMutex> {
        let mutex = self.client.fair_mutex_with_options(name, options)?;
        Ok(FairMutex::new(mutex, self.runtime()))
    }

    /// A lock of several names at once:
    /// [`fencelock::Client::multi_mutex`](crate::Client::multi_mutex).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for no names, more than
    /// [`MAX_MULTI_NAMES`](crate::MAX_MULTI_NAMES) names, or an empty or too long name;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client.
    ///
    /// # Examples
    ///
    /// See [`MultiMutex`].
    pub fn multi_mutex<I>(&self, names: I) -> Result<MultiMutex>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.multi_mutex_with_options(names, MutexOptions::default())
    }

    /// A lock of several names with its own options. See [`Client::multi_mutex`].
    ///
    /// # Errors
    ///
    /// As [`Client::multi_mutex`];
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::{Lease, MutexOptions};
    ///
    /// let options = MutexOptions::default().lease(Lease::Renewed(Duration::from_secs(5)));
    /// let transfer = client.multi_mutex_with_options(["account:17", "account:42"], options)?;
    /// # let _ = transfer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn multi_mutex_with_options<I>(&self, names: I, options: MutexOptions) -> Result<MultiMutex>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mutex = self.client.multi_mutex_with_options(names, options)?;
        Ok(MultiMutex::new(mutex, self.runtime()))
    }

    /// The locks of every kind held now whose names match `pattern`, a Redis glob:
    /// [`fencelock::Client::locks`](crate::Client::locks), blocking.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock client;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// use fencelock::LockKind;
    ///
    /// let options = fencelock::ClientOptions::default().holder_label("billing-7");
    /// let client = fencelock::blocking::Client::connect_with_options(url.as_str(), options)?;
    /// let guard = client.mutex("invoices:2026-11")?.lock()?;
    /// let permit = client.semaphore("invoices:pdf", 4)?.acquire()?;
    /// let held = client.locks("invoices:*")?;
    /// assert_eq!(held[0].name, "invoices:2026-11");
    /// assert_eq!(held[0].holder.as_deref(), Some("billing-7"));
    /// assert_eq!(held[0].fence, Some(guard.fence()));
    /// assert_eq!(held[1].kind, LockKind::Semaphore);
    /// # guard.unlock()?;
    /// # permit.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        self.runtime.block_on(self.client.locks(pattern))?
    }

    /// The locks of every kind held now under exactly `name`:
    /// [`fencelock::Client::locks_named`](crate::Client::locks_named), blocking.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an unusable name; otherwise as
    /// [`Client::locks`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// for lock in client.locks_named("catalog")? {
    ///     println!("{}: {} holds", lock.kind, lock.holds);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn locks_named(&self, name: impl AsRef<[u8]>) -> Result<Vec<LockInfo>> {
        self.runtime.block_on(self.client.locks_named(name))?
    }

    /// The mutex `name` if it is held now:
    /// [`fencelock::Client::lock_info`](crate::Client::lock_info), blocking.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an unusable name;
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type;
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
    /// assert!(client.lock_info("report")?.is_none());
    /// let guard = client.mutex("report")?.lock()?;
    /// let info = client.lock_info("report")?.expect("held");
    /// assert!(info.remaining.is_some());
    /// # guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_info(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        self.runtime.block_on(self.client.lock_info(name))?
    }

    /// Releases every lock held under `name`, of every kind, whoever holds it, wakes their
    /// waiters, and returns what was removed:
    /// [`fencelock::Client::force_unlock`](crate::Client::force_unlock), blocking. A holder that is
    /// still alive learns it lost the lock at its next renewal.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an unusable name; otherwise as
    /// [`Client::locks`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: fencelock::blocking::Client) -> Result<(), fencelock::Error> {
    /// let removed = client.force_unlock("nightly")?;
    /// println!("removed {} locks", removed.len());
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Vec<LockInfo>> {
        self.runtime.block_on(self.client.force_unlock(name))?
    }

    /// Gives back every lock this client holds and stops its background work:
    /// [`fencelock::Client::shutdown`](crate::Client::shutdown), blocking.
    ///
    /// A blocking guard dropped outside a runtime releases before `drop` returns, so a
    /// program whose guards all go out of scope needs no shutdown. Call it before exiting
    /// when guards may still be alive: held by other threads (which the process ends without
    /// unwinding), dropped inside a runtime, or kept in a `static`. Every guard of the client
    /// then reports not held, and its `unlock` and `extend` return
    /// [`Error::Shutdown`](crate::Error::Shutdown).
    ///
    /// Dropping the client does not shut it down, though dropping could block: the lock
    /// handles made from it outlive it (`Client::connect(url)?.mutex("jobs")?` drops the
    /// client at once) and must go on working.
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
    /// let guard = client.mutex("nightly-report")?.lock()?;
    /// // ... the work ...
    /// client.shutdown()?;
    /// assert!(!guard.is_held());
    /// assert!(matches!(guard.unlock(), Err(fencelock::Error::Shutdown)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn shutdown(&self) -> Result<()> {
        self.runtime.block_on(self.client.shutdown())?
    }

    /// This client's random identity (128 bits from the OS, as 22 characters).
    pub fn id(&self) -> &str {
        self.client.id()
    }

    /// The options the client was built with.
    pub fn options(&self) -> &ClientOptions {
        self.client.options()
    }

    fn runtime(&self) -> Arc<Runtime> {
        Arc::clone(&self.runtime)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Client")
            .field(&self.client)
            .finish()
    }
}
