//! `Client::connect_cluster`: each script runs on the one master that serves its name's
//! slot. Without the `cluster` feature the constructors stay, and refuse with
//! [`Error::Unsupported`](crate::Error::Unsupported).

#[cfg(not(feature = "cluster"))]
use std::convert::Infallible;

#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
use redis::IntoConnectionInfo;

use crate::client::Client;
use crate::error::Result;
#[cfg(feature = "cluster")]
use crate::notify::Source;
use crate::options::ClientOptions;
use crate::transport::cluster::cluster_nodes;
#[cfg(feature = "cluster")]
use crate::transport::cluster::ClusterSource;
#[cfg(feature = "cluster")]
use crate::transport::conn::{Announce, Conn};
#[cfg(feature = "cluster")]
use crate::transport::server;

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
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let cluster = fencelock_testkit::RedisCluster::start();
    /// # let nodes = cluster.urls();
    /// // nodes: ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", ...]
    /// let client = fencelock::Client::connect_cluster(nodes).await?;
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
    /// nodes; [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address is
    /// malformed or a unix socket; [`Error::Redis`](crate::Error::Redis) when no node can be
    /// reached; [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) when a master
    /// runs a Redis older than 6.2; [`Error::Unsupported`](crate::Error::Unsupported) when
    /// fencelock was built without its `cluster` feature.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use fencelock::{Client, ClientOptions};
    ///
    /// # async fn demo() -> Result<(), fencelock::Error> {
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
        connect(cluster_nodes(nodes, &options)?, options).await
    }
}

/// Connects to the cluster, its client and addresses checked.
#[cfg(feature = "cluster")]
async fn connect(
    (commands, nodes): (ClusterClient, Vec<redis::ConnectionInfo>),
    options: ClientOptions,
) -> Result<Client> {
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

#[cfg(not(feature = "cluster"))]
async fn connect(never: Infallible, _: ClientOptions) -> Result<Client> {
    match never {}
}

#[cfg(all(test, not(feature = "cluster")))]
mod tests {
    use crate::{Client, ClientOptions, Error};

    #[tokio::test]
    async fn without_the_feature_a_cluster_is_refused_by_name() {
        let refused = Client::connect_cluster(["redis://127.0.0.1:7000/"]).await;
        assert!(
            matches!(
                refused,
                Err(Error::Unsupported {
                    what: "Redis Cluster",
                    ..
                })
            ),
            "{refused:?}"
        );
        // Options are still checked first: a bad one is reported as such.
        let options = ClientOptions::default().prefix("{bad}");
        let refused = Client::connect_cluster_with_options(["redis://127.0.0.1:7000/"], options);
        assert!(matches!(refused.await, Err(Error::InvalidOption { .. })));
    }
}
