//! A RedLock client: its leases live on a majority of independent masters; the quorum's
//! requests themselves are the core's (`core/nodes.rs`).

use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::client::Client;
use crate::core::nodes::Nodes;
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::transport::conn::Conn;
use crate::transport::pubsub::Source;
use crate::transport::server::{self, Server};
use crate::transport::{addresses, check_access, Role};

/// Connects to each of the `masters`; one that is down costs one vote per request, no error.
pub(super) async fn connect(
    masters: Vec<ConnectionInfo>,
    options: ClientOptions,
) -> Result<Client> {
    let mut conns = Vec::new();
    let mut sources = Vec::new();
    for redis in master_servers(masters, &options)? {
        conns.push(Conn::Single(lazy_connection(&redis, &options)?));
        sources.push(Source::Single(redis));
    }
    check_masters_access(&conns, options.node_timeout).await?;
    let server = oldest_master(&conns, options.node_timeout).await?;
    let Some(nodes) = Nodes::of(conns, options.node_timeout) else {
        return Err(Error::InvalidOption {
            option: "masters",
            reason: "RedLock needs at least one master".into(),
        });
    };
    Client::assemble_nodes(nodes, sources, server, options)
}

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

/// The client of each master, with the options checked: all that connecting to
/// [`Deployment::redlock`](crate::Deployment::redlock) does before it makes connections.
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
        if let Ok(Ok(Err(refused))) = checked
            && refused.is_auth_failure()
        {
            return Err(refused);
        }
    }
    Ok(())
}
