//! `Client::connect_redlock`: a client whose leases live on a majority of independent
//! masters; the quorum's requests themselves are the core's (`redlock.rs`).

use std::time::Duration;

use redis::IntoConnectionInfo;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::notify::Source;
use crate::options::ClientOptions;
use crate::quorum::Quorum;
use crate::transport::conn::Conn;
use crate::transport::server::{self, Server};
use crate::transport::{addresses, check_access, Role};

impl Client {
    /// Connects to several independent Redis masters for RedLock, with default options.
    ///
    /// A lock of this client is held when a majority of the masters (3 of 5) granted it within
    /// its lease; see [`Client::connect_redlock_with_options`].
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`Client::connect_redlock_with_options`].
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
    /// # let servers: Vec<_> = (0..3).map(|_| fencelock_testkit::RedisServer::start()).collect();
    /// # let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    /// let client = fencelock::Client::connect_redlock(urls).await?;
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// println!("held on a majority, fence {}", guard.fence());
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_redlock<I, T>(masters: I) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::connect_redlock_with_options(masters, ClientOptions::default()).await
    }

    /// Connects to several independent Redis masters for RedLock.
    ///
    /// The masters must be independent: not replicas of each other, not nodes of one cluster.
    /// Use an odd number, 3 or 5: a lock needs a majority, so 5 masters survive 2 failures.
    /// Each master is sent one `PING` when the client is built, waiting at most the
    /// [`node_timeout`](ClientOptions::node_timeout): a master that refuses the credentials
    /// fails the connect, and one that is down costs that wait and its vote, nothing else; its
    /// connection is opened again in the background. The masters that answer are also asked
    /// their version, within one more node timeout. Only [`Mutex`](crate::Mutex) is offered: the
    /// other primitives and the inspection calls return [`Error::Unsupported`].
    ///
    /// Each request goes to every master at once and waits at most
    /// [`node_timeout`](ClientOptions::node_timeout) for each. A grant counts from the moment
    /// the request was sent: it is valid for the lease minus the time it took minus the
    /// [`clock_drift`](ClientOptions::clock_drift) margin, and refused (and released
    /// everywhere) when that is not positive. Renewal and [`extend`](crate::MutexGuard::extend)
    /// need a majority within the validity as well; a lease that loses its majority fires the
    /// guard's lost signal.
    ///
    /// How it works, its fencing tokens and what they assume follow the examples.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for fewer than one master, an option out of range, or
    /// [`wait_for_replicas`](ClientOptions::wait_for_replicas), which RedLock does not use;
    /// [`Error::InvalidAddress`] for a malformed URL; [`Error::Redis`] when a master refuses
    /// the credentials or requires a password the URL lacks ([`Error::is_auth_failure`]);
    /// [`Error::UnsupportedServer`] when a master that answers at connect is a Redis older
    /// than 6.2.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// use fencelock::{Client, ClientOptions};
    ///
    /// let masters = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
    /// let options = ClientOptions::default().node_timeout(Duration::from_millis(50));
    /// let client = Client::connect_redlock_with_options(masters, options).await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    ///
    #[doc = include_str!("../../docs/rustdoc-links.md")]
    #[doc = include_str!("../../docs/redlock.md")]
    pub async fn connect_redlock_with_options<I, T>(
        masters: I,
        options: ClientOptions,
    ) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        let mut nodes = Vec::new();
        let mut sources = Vec::new();
        for redis in master_servers(masters, &options)? {
            nodes.push(Conn::Single(lazy_connection(&redis, &options)?));
            sources.push(Source::Single(redis));
        }
        check_masters_access(&nodes, options.node_timeout).await?;
        let server = oldest_master(&nodes, options.node_timeout).await?;
        let Some(quorum) = Quorum::of(nodes, options.node_timeout) else {
            return Err(Error::InvalidOption {
                option: "masters",
                reason: "RedLock needs at least one master".into(),
            });
        };
        Client::assemble_quorum(quorum, sources, server, options)
    }
}

/// The oldest server among the masters that answer within the node timeout, each refused
/// when too old. A master that is down or slow now is not waited for: it costs its vote, not
/// the connect.
async fn oldest_master(nodes: &[Conn], node_timeout: Duration) -> Result<Option<Server>> {
    let reads: Vec<_> = nodes
        .iter()
        .map(|conn| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                tokio::time::timeout(node_timeout, server::read(&mut conn)).await
            })
        })
        .collect();
    let mut servers = Vec::new();
    for read in reads {
        match read.await {
            Ok(Ok(Ok(Some(server)))) => servers.push(server),
            Ok(Ok(Err(too_old @ Error::UnsupportedServer { .. }))) => return Err(too_old),
            // Down, slow, or silent about its version.
            _ => {}
        }
    }
    Ok(server::oldest(servers))
}

/// The client of each master, with the options checked: all that
/// [`Client::connect_redlock_with_options`] does before it makes connections.
pub(crate) fn master_servers<I, T>(
    masters: I,
    options: &ClientOptions,
) -> Result<Vec<redis::Client>>
where
    I: IntoIterator<Item = T>,
    T: IntoConnectionInfo,
{
    let masters = addresses(masters, options, Role::Master)?;
    if options.replica_ack.is_some() {
        // Each master's replicas are its own business: RedLock's answer to losing a master
        // is the majority, not replication.
        return Err(Error::InvalidOption {
            option: "wait_for_replicas",
            reason: "not available on a RedLock client; the majority of masters is what a \
                     lock survives on"
                .into(),
        });
    }
    masters
        .into_iter()
        .map(|master| Ok(options.open(master)?))
        .collect()
}

/// A connection that is opened in the background and reopened after failures, so that a
/// master that is down now costs nothing but its vote.
fn lazy_connection(
    redis: &redis::Client,
    options: &ClientOptions,
) -> Result<redis::aio::ConnectionManager> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(options.node_timeout))
        .set_connection_timeout(Some(options.connection_timeout))
        // A master that refuses connections answers "no vote" at once instead of after a
        // reconnect backoff; the next request tries to connect again.
        .set_number_of_retries(0);
    Ok(redis::aio::ConnectionManager::new_lazy_with_config(
        redis.clone(),
        config,
    )?)
}

/// Sends one `PING` to every master at once, each given the node timeout: a master that
/// refuses the credentials (or requires a password the URL lacks) fails the connect, as on
/// one server; one that is down or silent costs that wait and its vote, nothing else.
async fn check_masters_access(nodes: &[Conn], node_timeout: Duration) -> Result<()> {
    let mut checks = tokio::task::JoinSet::new();
    for conn in nodes {
        let mut conn = conn.clone();
        checks.spawn(
            async move { tokio::time::timeout(node_timeout, check_access(&mut conn)).await },
        );
    }
    while let Some(checked) = checks.join_next().await {
        if let Ok(Ok(Err(refused))) = checked {
            if refused.is_auth_failure() {
                return Err(refused);
            }
        }
    }
    Ok(())
}
