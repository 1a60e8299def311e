//! Connecting to Redis Cluster: every key of a lock name shares the name's hash tag, so each
//! script runs on the one master that serves the name's slot, and releases are announced with
//! sharded pub/sub on that master (plain pub/sub, broadcast to every node, on Redis 6.2).

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{IntoConnectionInfo, ProtocolVersion};

use crate::client::{addresses, Client};
use crate::conn::{Announce, Conn};
use crate::error::Result;
use crate::notify::Source;
use crate::options::ClientOptions;
use crate::server;

impl Client {
    /// Connects to a Redis Cluster with default options. See
    /// [`Client::connect_cluster_with_options`].
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`Client::connect_cluster_with_options`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let cluster = relock_testkit::RedisCluster::start();
    /// # let nodes = cluster.urls();
    /// // nodes: ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", ...]
    /// let client = relock::Client::connect_cluster(nodes).await?;
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<I, T>(nodes: I) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        Client::connect_cluster_with_options(nodes, ClientOptions::default()).await
    }

    /// Connects to a Redis Cluster: `nodes` are some of its nodes (one that answers is
    /// enough), from which the client learns the others and the slots each serves.
    /// Credentials and TLS come from the first node's URL and apply to every node.
    ///
    /// Every primitive works as on one server: a name's keys share its hash tag, so each
    /// operation is one script on the master of the name's slot. The client follows `MOVED`
    /// and `ASK` redirections, so locks survive slot migrations and failovers; waiters
    /// subscribe with sharded pub/sub (`SSUBSCRIBE`) on the master of each name. On Redis 6.2,
    /// which has no sharded pub/sub, releases are announced with `PUBLISH`, which the cluster
    /// broadcasts to every node (see [`DeploymentWarning::BroadcastReleases`](crate::DeploymentWarning::BroadcastReleases)). A
    /// [`MultiMutex`](crate::MultiMutex) over names of several slots takes them slot by slot
    /// (see its documentation), and the batch renewal sends one script per slot. See
    /// [the guide](crate#deployments) for what each deployment guarantees.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for an option out of range or no
    /// nodes; [`Error::Redis`](crate::Error::Redis) when an address is malformed or no node can
    /// be reached; [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) when a master
    /// runs a Redis older than 6.2.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use relock::{Client, ClientOptions};
    ///
    /// # async fn demo() -> Result<(), relock::Error> {
    /// let nodes = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"];
    /// let options = ClientOptions::default().response_timeout(Duration::from_secs(2));
    /// let client = Client::connect_cluster_with_options(nodes, options).await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster_with_options<I, T>(
        nodes: I,
        options: ClientOptions,
    ) -> Result<Client>
    where
        I: IntoIterator<Item = T>,
        T: IntoConnectionInfo,
    {
        let (commands, nodes) = cluster_nodes(nodes, &options)?;
        let mut conn = commands.get_async_connection().await?;
        let server = server::read_cluster(&mut conn).await?;
        // A server that does not say its version is taken to be a current one.
        let announce = match &server {
            Some(server) if !server.has_sharded_pubsub() => Announce::Broadcast,
            _ => Announce::Sharded,
        };
        Client::assemble(
            Conn::Cluster(conn, announce),
            Source::Cluster(ClusterSource {
                nodes,
                options: options.clone(),
                announce,
            }),
            server,
            options,
        )
    }
}

/// The client of the cluster and its nodes' addresses, with the options checked: all that
/// [`Client::connect_cluster_with_options`] does before it connects.
pub(crate) fn cluster_nodes<I, T>(
    nodes: I,
    options: &ClientOptions,
) -> Result<(ClusterClient, Vec<redis::ConnectionInfo>)>
where
    I: IntoIterator<Item = T>,
    T: IntoConnectionInfo,
{
    let nodes = addresses(nodes, options, "nodes", "cluster node")?;
    let commands = builder(nodes.clone(), options).build()?;
    Ok((commands, nodes))
}

/// What the notification task needs to open its own cluster connection, which receives the
/// messages (RESP3 pushes) of every master.
#[derive(Clone)]
pub(crate) struct ClusterSource {
    nodes: Vec<redis::ConnectionInfo>,
    options: ClientOptions,
    announce: Announce,
}

impl ClusterSource {
    /// How releases are announced, so how waiters subscribe.
    pub(crate) fn announce(&self) -> Announce {
        self.announce
    }

    /// A client whose connections deliver pushes to `pushes`.
    pub(crate) fn client(
        &self,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> redis::RedisResult<ClusterClient> {
        builder(self.nodes.clone(), &self.options)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
    }
}

fn builder(nodes: Vec<redis::ConnectionInfo>, options: &ClientOptions) -> ClusterClientBuilder {
    let builder = ClusterClientBuilder::new(nodes)
        .connection_timeout(options.connection_timeout)
        .response_timeout(options.response_timeout);
    match options.tls.certificates() {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    }
}
