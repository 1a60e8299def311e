//! Connecting to Redis Cluster: every key of a lock name shares the name's hash tag, so each
//! script runs on the one master that serves the name's slot, and releases are announced with
//! sharded pub/sub on that master (plain pub/sub, broadcast to every node, on Redis 6.2).
//! Without the `cluster` feature only the checks of the addresses and options stay, then a
//! refusal.

#[cfg(not(feature = "cluster"))]
use std::convert::Infallible;

#[cfg(feature = "cluster")]
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::IntoConnectionInfo;
#[cfg(feature = "cluster")]
use redis::ProtocolVersion;

#[cfg(not(feature = "cluster"))]
use crate::error::Error;
use crate::error::Result;
use crate::options::ClientOptions;
#[cfg(feature = "cluster")]
use crate::transport::conn::Announce;
#[cfg(feature = "cluster")]
use crate::transport::invalid_address;
use crate::transport::{addresses, Role};

/// The client of the cluster and its nodes' addresses, with the options checked: all that
/// connecting to [`Deployment::cluster`](crate::Deployment::cluster) does before it connects.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_nodes<I, T>(
    nodes: I,
    options: &ClientOptions,
) -> Result<(ClusterClient, Vec<redis::ConnectionInfo>)>
where
    I: IntoIterator<Item = T>,
    T: IntoConnectionInfo,
{
    let nodes = addresses(nodes, options, Role::Node)?;
    // The crate refuses some lists as a whole: a unix socket, passwords that differ.
    let commands = builder(nodes.clone(), options)
        .build()
        .map_err(|e| invalid_address(e, Role::Node))?;
    Ok((commands, nodes))
}

/// Checks the nodes' addresses and the options, then refuses: this build leaves Redis Cluster
/// out.
#[cfg(not(feature = "cluster"))]
pub(crate) fn cluster_nodes<I, T>(nodes: I, options: &ClientOptions) -> Result<Infallible>
where
    I: IntoIterator<Item = T>,
    T: IntoConnectionInfo,
{
    addresses(nodes, options, Role::Node)?;
    Err(Error::Unsupported {
        what: "Redis Cluster",
        deployment: "this build of fencelock (its `cluster` feature is off)",
    })
}

/// What the notification task needs to open its own cluster connection, which receives the
/// sharded messages (RESP3 pushes) of every master.
#[cfg(feature = "cluster")]
#[derive(Clone)]
pub(crate) struct ClusterSource {
    pub(crate) nodes: Vec<redis::ConnectionInfo>,
    pub(crate) options: ClientOptions,
    pub(crate) announce: Announce,
}

#[cfg(feature = "cluster")]
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

#[cfg(feature = "cluster")]
fn builder(nodes: Vec<redis::ConnectionInfo>, options: &ClientOptions) -> ClusterClientBuilder {
    let builder = ClusterClientBuilder::new(nodes)
        .connection_timeout(options.connection_timeout)
        .response_timeout(options.response_timeout);
    #[cfg(feature = "tls")]
    if let Some(certificates) = options.tls.certificates() {
        return builder.certs(certificates);
    }
    builder
}
