//! The blocking client: an async client on a runtime of its own.

use std::fmt;
use std::sync::Arc;

use redis::IntoConnectionInfo;

use super::runtime::Runtime;
use super::Mutex;
use crate::error::Result;
use crate::options::{ClientOptions, MutexOptions};
use crate::sentinel::SentinelOptions;

/// A connection to Redis for blocking code, and the runtime its background work runs on.
///
/// The blocking counterpart of [`relock::Client`](crate::Client): the same connections,
/// options and deployments, with one worker thread of its own that renews leases and receives
/// release notifications while callers block. One per process is the intended use; cloning is
/// cheap and shares all of it. See [the module documentation](super) for when to use it.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), relock::Error> {
/// # let server = relock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = relock::blocking::Client::connect(url.as_str())?;
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
    /// Connects with default options: [`relock::Client::connect`](crate::Client::connect),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect`](crate::Client::connect);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Client`].
    pub fn connect<T: IntoConnectionInfo>(target: T) -> Result<Client> {
        Client::connect_with_options(target, ClientOptions::default())
    }

    /// Connects with the given options:
    /// [`relock::Client::connect_with_options`](crate::Client::connect_with_options), blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_with_options`](crate::Client::connect_with_options), and
    /// [`Error::Redis`](crate::Error::Redis) when the runtime's thread cannot be started;
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// use relock::ClientOptions;
    ///
    /// let options = ClientOptions::default().prefix("payments:");
    /// let client = relock::blocking::Client::connect_with_options(url.as_str(), options)?;
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
    /// [`relock::Client::connect_redlock`](crate::Client::connect_redlock), blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_redlock`](crate::Client::connect_redlock);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), relock::Error> {
    /// # let servers: Vec<_> = (0..3).map(|_| relock_testkit::RedisServer::start()).collect();
    /// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    /// let client = relock::blocking::Client::connect_redlock(urls)?;
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
    /// [`relock::Client::connect_redlock_with_options`](crate::Client::connect_redlock_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_redlock_with_options`](crate::Client::connect_redlock_with_options);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), relock::Error> {
    /// use std::time::Duration;
    /// use relock::ClientOptions;
    ///
    /// let masters = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
    /// let options = ClientOptions::default().node_timeout(Duration::from_millis(50));
    /// let client = relock::blocking::Client::connect_redlock_with_options(masters, options)?;
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
    /// [`relock::Client::connect_cluster`](crate::Client::connect_cluster), blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_cluster`](crate::Client::connect_cluster);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), relock::Error> {
    /// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"];
    /// let client = relock::blocking::Client::connect_cluster(nodes)?;
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
    /// [`relock::Client::connect_cluster_with_options`](crate::Client::connect_cluster_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_cluster_with_options`](crate::Client::connect_cluster_with_options);
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
    /// [`relock::Client::connect_sentinel`](crate::Client::connect_sentinel), blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_sentinel`](crate::Client::connect_sentinel);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), relock::Error> {
    /// let sentinels = ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/"];
    /// let client = relock::blocking::Client::connect_sentinel(sentinels, "locks")?;
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
    /// [`relock::Client::connect_sentinel_with_options`](crate::Client::connect_sentinel_with_options),
    /// blocking.
    ///
    /// # Errors
    ///
    /// As [`relock::Client::connect_sentinel_with_options`](crate::Client::connect_sentinel_with_options);
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
    /// See [`relock::Client::mutex`](crate::Client::mutex).
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
