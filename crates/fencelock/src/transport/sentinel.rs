//! Redis Sentinel's connections: the sentinels are asked for the master of a service, which
//! is followed across failovers ([`SentinelConn`]). Without the `sentinel` feature only the
//! checks of the addresses and options stay, then a refusal.

#[cfg(feature = "sentinel")]
mod master;

#[cfg(not(feature = "sentinel"))]
use std::convert::Infallible;

#[cfg(feature = "sentinel")]
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::IntoConnectionInfo;
#[cfg(feature = "sentinel")]
use redis::{ConnectionInfo, RedisConnectionInfo};

#[cfg(not(feature = "sentinel"))]
use crate::error::Error;
use crate::error::Result;
use crate::options::ClientOptions;
use crate::transport::{addresses, Role};

#[cfg(feature = "sentinel")]
pub(crate) use master::SentinelConn;

/// How a [`Client`] connected through Sentinel authenticates to the master the sentinels name;
/// and the guide to Sentinel and to waiting for replicas.
///
#[doc = include_str!("../../docs/rustdoc-links.md")]
#[doc = include_str!("../../docs/sentinel.md")]
///
/// # Examples
///
/// ```no_run
/// use fencelock::{Client, Deployment, SentinelOptions};
///
/// # async fn demo() -> Result<(), fencelock::Error> {
/// let sentinels = ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"];
/// let nodes = SentinelOptions::default().master_username("app").master_password("s3cret");
/// let client =
///     Client::connect(Deployment::sentinel(sentinels, "orders")?.sentinel_options(nodes)).await?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct SentinelOptions {
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

impl SentinelOptions {
    /// The ACL user to authenticate as on the master. Default: none (the `default` user when
    /// a password is set).
    pub fn master_username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password for the master (and for any node promoted in its place). Default: none.
    pub fn master_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The database number on the master. Default: 0.
    pub fn master_db(mut self, db: i64) -> Self {
        self.db = db;
        self
    }

    #[cfg(feature = "sentinel")]
    fn node_connection_info(&self) -> SentinelNodeConnectionInfo {
        let mut redis = RedisConnectionInfo::default().set_db(self.db);
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        SentinelNodeConnectionInfo::default().set_redis_connection_info(redis)
    }
}

impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .finish()
    }
}

/// The client that asks the sentinels for the master of `service_name`, and the sentinels'
/// addresses, with the options checked: all that connecting to
/// [`Deployment::sentinel`](crate::Deployment::sentinel) does before it connects.
#[cfg(feature = "sentinel")]
pub(crate) fn sentinel_resolver<I>(
    sentinels: I,
    service_name: &str,
    nodes: &SentinelOptions,
    options: &ClientOptions,
) -> Result<(SentinelClient, Vec<ConnectionInfo>)>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    let sentinels = addresses(sentinels, options, Role::Sentinel)?;
    let resolver = SentinelClient::build(
        sentinels.clone(),
        // Owned: the `redis` crate takes a `String` here unless its TLS support is built.
        String::from(service_name),
        Some(nodes.node_connection_info()),
        SentinelServerType::Master,
    )?;
    Ok((resolver, sentinels))
}

/// Checks the sentinels' addresses and the options, then refuses: this build leaves Sentinel
/// out.
#[cfg(not(feature = "sentinel"))]
pub(crate) fn sentinel_resolver<I>(
    sentinels: I,
    _: &str,
    _: &SentinelOptions,
    options: &ClientOptions,
) -> Result<Infallible>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    addresses(sentinels, options, Role::Sentinel)?;
    Err(Error::Unsupported {
        what: "Redis Sentinel",
        deployment: "this build of fencelock (its `sentinel` feature is off)",
    })
}
