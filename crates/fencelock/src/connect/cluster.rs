//! A client of a Redis Cluster: each script runs on the one master that serves its name's
//! slot. Without the `cluster` feature a cluster is refused with
//! [`Error::Unsupported`](crate::Error::Unsupported).

#[cfg(not(feature = "cluster"))]
use std::convert::Infallible;

#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
use redis::ConnectionInfo;

use crate::client::Client;
use crate::error::Result;
use crate::options::ClientOptions;
use crate::transport::cluster::cluster_nodes;
#[cfg(feature = "cluster")]
use crate::transport::cluster::ClusterSource;
#[cfg(feature = "cluster")]
use crate::transport::conn::{Announce, Conn};
#[cfg(feature = "cluster")]
use crate::transport::pubsub::Source;
#[cfg(feature = "cluster")]
use crate::transport::server;

/// Connects to the cluster some of whose `nodes` are given.
pub(super) async fn connect(nodes: Vec<ConnectionInfo>, options: ClientOptions) -> Result<Client> {
    connect_to(cluster_nodes(nodes, &options)?, options).await
}

#[cfg(feature = "cluster")]
async fn connect_to(
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
async fn connect_to(never: Infallible, _: ClientOptions) -> Result<Client> {
    match never {}
}

#[cfg(all(test, not(feature = "cluster")))]
mod tests {
    use crate::client::Client;
    use crate::connect::Deployment;
    use crate::error::Error;
    use crate::options::ClientOptions;

    #[tokio::test]
    async fn without_the_feature_a_cluster_is_refused_by_name() {
        let cluster = || Deployment::cluster(["redis://127.0.0.1:7000/"]).expect("an address");
        let refused = Client::connect(cluster()).await;
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
        let refused = Client::connect_with_options(cluster(), options);
        assert!(matches!(refused.await, Err(Error::InvalidOption { .. })));
    }
}
