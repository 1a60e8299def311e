//! The entry point: a connection to Redis shared by every lock made from it.

use std::fmt;
use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::IntoConnectionInfo;

use crate::election::Election;
use crate::error::{Error, Result};
use crate::fair::FairMutex;
use crate::holds::{Holds, Registered};
use crate::keeper::Keeper;
use crate::keys::LockKeys;
use crate::multi::MultiMutex;
use crate::mutex::Mutex;
use crate::notify::{Notifier, Source, Timing};
use crate::observe;
use crate::options::{ClientOptions, MutexOptions};
use crate::quorum::Quorum;
use crate::reentrant::{Holder, ReentrantMutex, MAX_HOLDER_LEN};
use crate::rwlock::{RwLock, RwLockOptions};
use crate::semaphore::{Semaphore, SemaphoreOptions};
use crate::shared::Shared;
use crate::token::random_id;
use crate::transport::conn::Conn;
use crate::transport::server::{self, Server};
use crate::transport::{check_access, single_server};

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
    /// Connects with default options.
    ///
    /// Accepts what the `redis` crate accepts: a URL such as `redis://127.0.0.1:6379/`,
    /// `redis://user:password@host/`, `rediss://host/` for TLS, or `redis+unix:///path`, and a
    /// [`redis::ConnectionInfo`]. From a [`redis::Client`], use [`Client::from_redis`].
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime, as [`Client::connect_with_options`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when the URL is malformed, saying
    /// what is expected; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached;
    /// also when Redis refuses the credentials or requires a password the URL lacks,
    /// which [`Error::is_auth_failure`](crate::Error::is_auth_failure) tells apart;
    /// [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) when the server is a Redis
    /// older than 6.2, read from its `HELLO` reply at connect.
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a `rediss://` URL when fencelock was
    /// built without its `tls` feature.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// See [`Client`].
    pub async fn connect<T: IntoConnectionInfo>(target: T) -> Result<Client> {
        Client::connect_with_options(target, ClientOptions::default()).await
    }

    /// Connects with the given options.
    ///
    /// The client starts its renewal and notification tasks on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime (as `tokio::spawn` does).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for an option out of range;
    /// [`Error::Redis`](crate::Error::Redis) as for [`Client::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// use fencelock::{Client, ClientOptions};
    ///
    /// let options = ClientOptions::default().prefix("payments:");
    /// let client = Client::connect_with_options(url.as_str(), options).await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with_options<T: IntoConnectionInfo>(
        target: T,
        options: ClientOptions,
    ) -> Result<Client> {
        let redis = single_server(target, &options)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(options.connection_timeout))
            .set_number_of_retries(1);
        let mut manager = ConnectionManager::new_with_config(redis.clone(), config).await?;
        check_access(&mut manager).await?;
        let server = server::read(&mut manager).await?;
        Client::assemble(
            Conn::Single(manager),
            Source::Single(redis),
            server,
            options,
        )
    }

    /// Connects to the server an existing [`redis::Client`] is configured for, so that a
    /// service that already talks to Redis configures it once. The address, database,
    /// credentials and TLS settings are taken from it; fencelock opens connections of its own
    /// (its lock commands and its release notifications must not queue behind the service's
    /// commands), with `options`' timeouts.
    ///
    /// To start from a [`redis::ConnectionInfo`], pass it to [`Client::connect_with_options`]:
    /// it is accepted wherever a URL is.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime, as [`Client::connect_with_options`].
    ///
    /// # Errors
    ///
    /// As [`Client::connect_with_options`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// let redis = redis::Client::open(url.as_str())?; // the service's own client
    /// let locks = fencelock::Client::from_redis(&redis, fencelock::ClientOptions::default()).await?;
    /// locks.mutex("migrations")?.lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_redis(redis: &redis::Client, options: ClientOptions) -> Result<Client> {
        Client::connect_with_options(redis.get_connection_info().clone(), options).await
    }

    /// A client over a connection made for some deployment, with its notification source and
    /// the server read at connect; starts the renewal and notification tasks.
    pub(crate) fn assemble(
        conn: Conn,
        source: Source,
        server: Option<Server>,
        options: ClientOptions,
    ) -> Result<Client> {
        Client::assemble_quorum(Quorum::single(conn), vec![source], server, options)
    }

    /// A client whose leases live on `nodes`, notified through every source.
    pub(crate) fn assemble_quorum(
        nodes: Quorum,
        sources: Vec<Source>,
        server: Option<Server>,
        options: ClientOptions,
    ) -> Result<Client> {
        observe::describe();
        let nodes = Arc::new(nodes);
        let conn = nodes.first().clone();
        let keeper = Keeper::spawn(Arc::clone(&nodes), options.renew_batch);
        let notifier = Notifier::spawn_all(sources, Timing::of(&options));
        Ok(Client {
            shared: Arc::new(Shared {
                conn,
                nodes,
                id: random_id()?,
                options,
                keeper,
                notifier,
                holds: Holds::default(),
                server,
            }),
        })
    }

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
    /// See [`MutexOptions`].
    pub fn mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<Mutex> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Mutex::new(Arc::clone(&self.shared), keys, options)
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
        self.election_with_options(name, MutexOptions::default())
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
    /// use fencelock::{Lease, MutexOptions};
    ///
    /// // A crashed leader is replaced within 5 s; a pause of 5 s costs the leadership.
    /// let options = MutexOptions::default().lease(Lease::Renewed(Duration::from_secs(5)));
    /// let election = client.election_with_options("scheduler", options)?;
    /// # let _ = election;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<Election> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Election::new(Arc::clone(&self.shared), keys, options)
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
            .map(|Registered { lease, release }| {
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
        self.fair_mutex_with_options(name, MutexOptions::default())
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
    /// use fencelock::MutexOptions;
    ///
    /// let options = MutexOptions::default().wait_timeout(Duration::from_secs(30));
    /// let turns = client.fair_mutex_with_options("printer", options)?;
    /// # let _ = turns;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_mutex_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: MutexOptions,
    ) -> Result<FairMutex> {
        self.shared.require_single("FairMutex")?;
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        FairMutex::new(Arc::clone(&self.shared), keys, options)
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
        self.reentrant_mutex_with_options(name, MutexOptions::default())
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
    /// use fencelock::{Lease, MutexOptions};
    ///
    /// let options = MutexOptions::default()
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
        options: MutexOptions,
    ) -> Result<ReentrantMutex> {
        self.shared.require_single("ReentrantMutex")?;
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        ReentrantMutex::new(Arc::clone(&self.shared), &keys, &options)
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
        self.rwlock_with_options(name, RwLockOptions::default())
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
    /// See [`RwLockOptions`].
    pub fn rwlock_with_options(
        &self,
        name: impl AsRef<[u8]>,
        options: RwLockOptions,
    ) -> Result<RwLock> {
        self.shared.require_single("RwLock")?;
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        RwLock::new(Arc::clone(&self.shared), &keys, &options)
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
        self.semaphore_with_options(name, permits, SemaphoreOptions::default())
    }

    /// A distributed semaphore with its own options. See [`Client::semaphore`].
    ///
    /// # Errors
    ///
    /// As [`Client::semaphore`]; [`Error::InvalidOption`] for a lease out of range.
    ///
    /// # Examples
    ///
    /// See [`SemaphoreOptions`].
    pub fn semaphore_with_options(
        &self,
        name: impl AsRef<[u8]>,
        permits: u32,
        options: SemaphoreOptions,
    ) -> Result<Semaphore> {
        self.shared.require_single("Semaphore")?;
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        Semaphore::new(Arc::clone(&self.shared), keys, permits, options)
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
        self.multi_mutex_with_options(names, MutexOptions::default())
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
    pub fn multi_mutex_with_options<I>(&self, names: I, options: MutexOptions) -> Result<MultiMutex>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.shared.require_single("MultiMutex")?;
        MultiMutex::new(Arc::clone(&self.shared), names, options)
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
    use crate::{Client, ClientOptions, Error};

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
