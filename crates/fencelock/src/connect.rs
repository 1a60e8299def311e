//! Where a client's locks live, and connecting to it: one [`Deployment`] value (one server,
//! Sentinel, Cluster or RedLock) and one pair of functions, [`Client::connect`] and
//! [`Client::connect_with_options`]. Each deployment's module checks its addresses and
//! options, connects through the transport layer, and assembles the client.

mod cluster;
pub(crate) mod redlock;
mod sentinel;
mod server;

use std::sync::Arc;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::client::Client;
use crate::core::keeper::Keeper;
use crate::core::live_holds::LiveHolds;
use crate::core::nodes;
use crate::core::notify::{Notifier, Timing};
use crate::core::observe;
use crate::core::shared::Shared;
use crate::error::Result;
use crate::inspect::Inspection;
use crate::options::ClientOptions;
use crate::token::random_id;
use crate::transport::conn::Conn;
use crate::transport::pubsub::Source;
use crate::transport::sentinel::SentinelOptions;
use crate::transport::server::Server;
use crate::transport::{connection_info, Role};

/// Where a client's locks live: one Redis server, a Sentinel deployment, a Redis Cluster, or
/// several independent masters for RedLock. Every lock works the same way on each; which
/// guarantee each gives is in [the guide's table](crate#deployments).
///
/// A URL (`&str` or `String`), a [`redis::ConnectionInfo`] or a [`redis::Client`] is a
/// deployment of one server, so [`Client::connect`] takes any of them directly.
///
/// # Examples
///
/// ```no_run
/// use fencelock::{Client, Deployment};
///
/// # async fn demo() -> Result<(), fencelock::Error> {
/// let one = Client::connect("redis://127.0.0.1/").await?;
/// let sentinel =
///     Client::connect(Deployment::sentinel(["redis://s1:26379", "redis://s2:26379"], "locks")?)
///         .await?;
/// let cluster = Client::connect(Deployment::cluster(["redis://node1:6379"])?).await?;
/// let redlock =
///     Client::connect(Deployment::redlock(["redis://a", "redis://b", "redis://c"])?).await?;
/// # let _ = (one, sentinel, cluster, redlock);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Deployment {
    nodes: Nodes,
}

#[derive(Clone, Debug)]
enum Nodes {
    Server(ConnectionInfo),
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        service: String,
        options: SentinelOptions,
    },
    Cluster(Vec<ConnectionInfo>),
    RedLock(Vec<ConnectionInfo>),
}

impl Deployment {
    /// One Redis server: a URL such as `redis://127.0.0.1:6379/`,
    /// `redis://user:password@host/`, `rediss://host/` for TLS or `redis+unix:///path`, or a
    /// [`redis::ConnectionInfo`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when the address does not
    /// parse, saying what is expected.
    ///
    /// # Examples
    ///
    /// ```
    /// let one = fencelock::Deployment::server("redis://127.0.0.1:6379/")?;
    /// # let _ = one;
    /// # Ok::<(), fencelock::Error>(())
    /// ```
    pub fn server(address: impl IntoConnectionInfo) -> Result<Deployment> {
        Ok(Deployment {
            nodes: Nodes::Server(connection_info(address, Role::Server)?),
        })
    }

    /// A Sentinel deployment: the sentinels' addresses, and the name of the service whose
    /// master holds the locks.
    ///
    /// The client asks the sentinels (the first that answers) for the master of `service` and
    /// sends every lock command to it. When a command finds the master unreachable or demoted,
    /// or a sentinel announces a new master, the client asks again and further commands go to
    /// the new master; the lock commands that can be resent safely (acquire and release,
    /// idempotent by owner token) are resent, other operations return an error for which
    /// [`Error::is_unavailable`](crate::Error::is_unavailable) is true. Waiters subscribe on
    /// the master too and follow it the same way. See
    /// [following failovers](crate::SentinelOptions#following-failovers) for the details.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address does not
    /// parse, saying what is expected.
    ///
    /// # Examples
    ///
    /// See [`Deployment`].
    pub fn sentinel<I>(sentinels: I, service: &str) -> Result<Deployment>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        Ok(Deployment {
            nodes: Nodes::Sentinel {
                sentinels: parse_all(sentinels, Role::Sentinel)?,
                service: service.to_owned(),
                options: SentinelOptions::default(),
            },
        })
    }

    /// This Sentinel deployment, with settings for the sentinels and the master they name
    /// (credentials, TLS, the database). Changes nothing on another deployment.
    ///
    /// # Examples
    ///
    /// See [`SentinelOptions`].
    #[must_use]
    pub fn sentinel_options(mut self, settings: SentinelOptions) -> Deployment {
        if let Nodes::Sentinel { options, .. } = &mut self.nodes {
            *options = settings;
        }
        self
    }

    /// A Redis Cluster: the addresses of some of its nodes (one that answers is enough), from
    /// which the client learns the others and the slots each serves. Credentials and TLS come
    /// from the first node's URL and apply to every node.
    ///
    /// Every kind of lock works as on one server: a name's keys share its hash tag, so each
    /// operation is one script on the master of the name's slot. The client follows `MOVED`
    /// and `ASK` redirections, so locks survive slot migrations and failovers; waiters
    /// subscribe with sharded pub/sub (`SSUBSCRIBE`) on the master of each name. On Redis 6.2,
    /// which has no sharded pub/sub, releases are announced with `PUBLISH`, which the cluster
    /// broadcasts to every node (see
    /// [`DeploymentWarning::BroadcastReleases`](crate::DeploymentWarning::BroadcastReleases)).
    /// A [`MultiMutex`](crate::MultiMutex) over names of several slots is refused, and the
    /// batch renewal sends one script per slot.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address does not
    /// parse, saying what is expected.
    ///
    /// # Examples
    ///
    /// See [`Deployment`].
    pub fn cluster<I>(nodes: I) -> Result<Deployment>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        Ok(Deployment {
            nodes: Nodes::Cluster(parse_all(nodes, Role::Node)?),
        })
    }

    /// Independent Redis masters for RedLock: a lock is held when a majority granted it
    /// within its lease.
    ///
    /// The masters must be independent: not replicas of each other, not nodes of one cluster.
    /// Use an odd number, 3 or 5: a lock needs a majority, so 5 masters survive 2 failures.
    /// Each master is sent one `PING` when the client is built, waiting at most the
    /// [`node_timeout`](crate::ClientOptions::node_timeout): a master that refuses the
    /// credentials fails the connect, and one that is down costs that wait and its vote,
    /// nothing else. Only [`Mutex`](crate::Mutex) runs on several masters: the other kinds and
    /// the inspection calls return [`Error::Unsupported`](crate::Error::Unsupported).
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/redlock.md")]
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address does not
    /// parse, saying what is expected.
    ///
    /// # Examples
    ///
    /// See [`Deployment`].
    pub fn redlock<I>(masters: I) -> Result<Deployment>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        Ok(Deployment {
            nodes: Nodes::RedLock(parse_all(masters, Role::Master)?),
        })
    }
}

/// What [`Client::connect`] takes: a [`Deployment`], or one server's address.
pub trait IntoDeployment: sealed::Sealed {
    /// The deployment.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address does not
    /// parse, saying what is expected.
    fn into_deployment(self) -> Result<Deployment>;
}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for Deployment {}
impl IntoDeployment for Deployment {
    fn into_deployment(self) -> Result<Deployment> {
        Ok(self)
    }
}

macro_rules! one_server {
    ($($address:ty),*) => {$(
        impl sealed::Sealed for $address {}
        impl IntoDeployment for $address {
            fn into_deployment(self) -> Result<Deployment> {
                Deployment::server(self)
            }
        }
    )*};
}
one_server!(&str, String, ConnectionInfo);

impl sealed::Sealed for &redis::Client {}
impl IntoDeployment for &redis::Client {
    fn into_deployment(self) -> Result<Deployment> {
        Deployment::server(self.get_connection_info().clone())
    }
}

impl sealed::Sealed for redis::Client {}
impl IntoDeployment for redis::Client {
    fn into_deployment(self) -> Result<Deployment> {
        (&self).into_deployment()
    }
}

impl Client {
    /// A client over a connection made for some deployment, with its notification source and
    /// the server read at connect; starts the renewal and notification tasks.
    pub(crate) fn assemble(
        conn: Conn,
        source: Source,
        server: Option<Server>,
        options: ClientOptions,
    ) -> Result<Client> {
        Client::assemble_nodes(nodes::Nodes::single(conn), vec![source], server, options)
    }

    /// A client whose leases live on `nodes`, notified through every source.
    pub(crate) fn assemble_nodes(
        nodes: nodes::Nodes,
        sources: Vec<Source>,
        server: Option<Server>,
        options: ClientOptions,
    ) -> Result<Client> {
        observe::describe();
        let nodes = Arc::new(nodes);
        let keeper = Keeper::spawn(Arc::clone(&nodes), options.renew_batch, options.drift);
        let notifier = Notifier::spawn_all(sources, Timing::of(&options));
        Ok(Client {
            shared: Arc::new(Shared {
                nodes,
                id: random_id()?,
                options,
                keeper,
                notifier,
                holds: LiveHolds::default(),
                server,
                holders: &Inspection,
            }),
        })
    }

    /// Connects to `deployment` with default options: a URL of one server, or a
    /// [`Deployment`] of another kind.
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
    /// See [`Client`] and [`Deployment`].
    pub async fn connect(deployment: impl IntoDeployment) -> Result<Client> {
        Client::connect_with_options(deployment, ClientOptions::default()).await
    }

    /// Connects to `deployment` with the given options. The client starts its renewal and
    /// notification tasks on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address does not
    /// parse, saying what is expected;
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for an option out of range, or a
    /// deployment without any address; [`Error::Redis`](crate::Error::Redis) when Redis cannot
    /// be reached, or refuses the credentials or requires a password the URL lacks (which
    /// [`Error::is_auth_failure`](crate::Error::is_auth_failure) tells apart);
    /// [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) when the server is a Redis
    /// older than 6.2, read from its `HELLO` reply at connect;
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a `rediss://` URL, Sentinel or
    /// Cluster when fencelock was built without its `tls`, `sentinel` or `cluster` feature.
    /// On RedLock a master that is down is no error: it costs one vote per request.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use fencelock::{Client, ClientOptions, Lease};
    ///
    /// # async fn demo() -> Result<(), fencelock::Error> {
    /// let options = ClientOptions::default()
    ///     .prefix("billing:locks:")
    ///     .default_lease(Lease::Renewed(Duration::from_secs(10)));
    /// let client = Client::connect_with_options("redis://127.0.0.1/", options).await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with_options(
        deployment: impl IntoDeployment,
        options: ClientOptions,
    ) -> Result<Client> {
        options.validate()?;
        match deployment.into_deployment()?.nodes {
            Nodes::Server(address) => server::connect(address, options).await,
            Nodes::Sentinel {
                sentinels,
                service,
                options: nodes,
            } => sentinel::connect(sentinels, &service, nodes, options).await,
            Nodes::Cluster(nodes) => cluster::connect(nodes, options).await,
            Nodes::RedLock(masters) => redlock::connect(masters, options).await,
        }
    }
}

fn parse_all<I>(addresses: I, role: Role) -> Result<Vec<ConnectionInfo>>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    addresses
        .into_iter()
        .map(|address| connection_info(address, role))
        .collect()
}
