//! `Client::connect_sentinel`: the client asks the sentinels for the master of a service and
//! follows it across failovers. Without the `sentinel` feature the constructors stay, and
//! refuse with [`Error::Unsupported`](crate::Error::Unsupported).

#[cfg(not(feature = "sentinel"))]
use std::convert::Infallible;
#[cfg(feature = "sentinel")]
use std::time::Duration;

#[cfg(feature = "sentinel")]
use redis::sentinel::SentinelClient;
use redis::IntoConnectionInfo;
#[cfg(feature = "sentinel")]
use redis::{AsyncConnectionConfig, ConnectionInfo};

use crate::client::Client;
use crate::error::Result;
#[cfg(feature = "sentinel")]
use crate::notify::Source;
use crate::options::ClientOptions;
#[cfg(feature = "sentinel")]
use crate::transport::conn::Conn;
#[cfg(feature = "sentinel")]
use crate::transport::sentinel::SentinelConn;
use crate::transport::sentinel::{sentinel_resolver, SentinelOptions};
#[cfg(feature = "sentinel")]
use crate::transport::server;

impl Client {
    /// Connects through Redis Sentinel with default options: asks the sentinels for the
    /// master of `service_name` and sends every lock command to it.
    ///
    /// `sentinels` are the sentinels' addresses, in any form the `redis` crate accepts
    /// (`redis://127.0.0.1:26379/`); the first that answers is asked. When a command finds
    /// the master unreachable or demoted, or a sentinel announces a new master, the client
    /// asks again and further commands go to the new master; the lock commands that can be
    /// resent safely (acquire and release, idempotent by owner token) are resent, other
    /// operations return an error for which
    /// [`Error::is_unavailable`](crate::Error::is_unavailable) is true. Waiters subscribe on
    /// the master too and follow it the same way. See
    /// [following failovers](crate::SentinelOptions#following-failovers) for the details.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime, as [`Client::connect_with_options`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for an empty list of sentinels;
    /// [`Error::InvalidAddress`](crate::Error::InvalidAddress) when an address is malformed;
    /// [`Error::Redis`](crate::Error::Redis) when no sentinel answers,
    /// none names a master for `service_name`, or the master cannot be reached;
    /// [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) when the master is a Redis
    /// older than 6.2; [`Error::Unsupported`](crate::Error::Unsupported) when fencelock was built
    /// without its `sentinel` feature.
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
    /// # let group = fencelock_testkit::SentinelGroup::start();
    /// # let sentinels = group.sentinel_urls();
    /// # let service = group.service_name();
    /// // sentinels: ["redis://127.0.0.1:26379/", ...]
    /// let client = fencelock::Client::connect_sentinel(sentinels, service).await?;
    /// let guard = client.mutex("nightly-report")?.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_sentinel<I>(sentinels: I, service_name: &str) -> Result<Client>
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
        .await
    }

    /// Connects through Redis Sentinel with credentials for the master and client options.
    /// See [`Client::connect_sentinel`].
    ///
    /// The options' timeouts apply to the master connection; asking the sentinels for the
    /// master is bounded by twice their sum.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime, as [`Client::connect_with_options`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`](crate::Error::InvalidOption) for an option out of range or no
    /// sentinels; [`Error::Redis`](crate::Error::Redis) as for [`Client::connect_sentinel`],
    /// and when the master refuses the credentials;
    /// [`Error::UnsupportedServer`](crate::Error::UnsupportedServer) as for
    /// [`Client::connect_sentinel`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left behind.
    ///
    /// # Examples
    ///
    /// See [`SentinelOptions`].
    pub async fn connect_sentinel_with_options<I>(
        sentinels: I,
        service_name: &str,
        nodes: SentinelOptions,
        options: ClientOptions,
    ) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: IntoConnectionInfo,
    {
        let resolver = sentinel_resolver(sentinels, service_name, &nodes, &options)?;
        connect(resolver, service_name, options).await
    }
}

/// Connects to the master the sentinels name, through the checked resolver.
#[cfg(feature = "sentinel")]
async fn connect(
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
async fn connect(never: Infallible, _: &str, _: ClientOptions) -> Result<Client> {
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
    use crate::{Client, Error};

    #[tokio::test]
    async fn without_the_feature_sentinel_is_refused_by_name() {
        let refused = Client::connect_sentinel(["redis://127.0.0.1:26379/"], "locks").await;
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
