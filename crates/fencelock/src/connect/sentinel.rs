//! A client of a Sentinel deployment: it asks the sentinels for the master of a service and
//! follows it across failovers. Without the `sentinel` feature a Sentinel deployment is
//! refused with [`Error::Unsupported`](crate::Error::Unsupported).

#[cfg(not(feature = "sentinel"))]
use std::convert::Infallible;
#[cfg(feature = "sentinel")]
use std::time::Duration;

#[cfg(feature = "sentinel")]
use redis::sentinel::SentinelClient;
#[cfg(feature = "sentinel")]
use redis::AsyncConnectionConfig;
use redis::ConnectionInfo;

use crate::client::Client;
use crate::error::Result;
use crate::options::ClientOptions;
#[cfg(feature = "sentinel")]
use crate::transport::conn::Conn;
#[cfg(feature = "sentinel")]
use crate::transport::pubsub::Source;
#[cfg(feature = "sentinel")]
use crate::transport::sentinel::SentinelConn;
use crate::transport::sentinel::{sentinel_resolver, SentinelOptions};
#[cfg(feature = "sentinel")]
use crate::transport::server;

/// Connects to the master of `service` that the `sentinels` name.
pub(super) async fn connect(
    sentinels: Vec<ConnectionInfo>,
    service: &str,
    nodes: SentinelOptions,
    options: ClientOptions,
) -> Result<Client> {
    let resolver = sentinel_resolver(sentinels, service, &nodes, &options)?;
    connect_to(resolver, service, options).await
}

/// Connects to the master the sentinels name, through the checked resolver.
#[cfg(feature = "sentinel")]
async fn connect_to(
    (resolver, sentinels): (SentinelClient, Vec<ConnectionInfo>),
    service_name: &str,
    options: ClientOptions,
) -> Result<Client> {
    let config = AsyncConnectionConfig::new()
        .set_response_timeout(Some(options.response_timeout))
        .set_connection_timeout(Some(options.connection_timeout));
    let conn = SentinelConn::connect(
        resolver,
        service_name.to_owned(),
        sentinels,
        config,
        resolve_timeout(&options),
    )
    .await?;
    let server = server::read(&mut conn.clone()).await?;
    Client::assemble(
        Conn::Sentinel(conn.clone()),
        Source::Sentinel(conn),
        server,
        options,
    )
}

#[cfg(not(feature = "sentinel"))]
async fn connect_to(never: Infallible, _: &str, _: ClientOptions) -> Result<Client> {
    match never {}
}

/// A resolution asks a sentinel (connect, then a reply) and checks the named master's role
/// (connect, then a reply).
#[cfg(feature = "sentinel")]
fn resolve_timeout(options: &ClientOptions) -> Duration {
    (options.connection_timeout + options.response_timeout) * 2
}

#[cfg(all(test, not(feature = "sentinel")))]
mod tests {
    use crate::client::Client;
    use crate::connect::Deployment;
    use crate::error::Error;

    #[tokio::test]
    async fn without_the_feature_sentinel_is_refused_by_name() {
        let sentinel = Deployment::sentinel(["redis://127.0.0.1:26379/"], "locks");
        let refused = Client::connect(sentinel.expect("an address")).await;
        assert!(
            matches!(
                refused,
                Err(Error::Unsupported {
                    what: "Redis Sentinel",
                    ..
                })
            ),
            "{refused:?}"
        );
    }
}
