//! Connections, whatever the deployment behind them: one server, a Sentinel deployment's
//! master, or a Redis Cluster. What sits above sends its scripts and commands through
//! [`Conn`](conn::Conn) and never asks which kind of Redis it talks to.

pub(crate) mod cluster;
pub(crate) mod coalesce;
pub(crate) mod conn;
pub(crate) mod pubsub;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod server;

use redis::aio::ConnectionLike;
use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::error::{Error, Result};
use crate::options::ClientOptions;

/// Which server of a deployment an address names: what the errors about it call it, and
/// the forms of address it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The one server of [`Client::connect`](crate::Client::connect).
    Server,
    /// An independent master of a RedLock client.
    Master,
    /// A node of a Redis Cluster.
    Node,
    /// A sentinel of a Sentinel deployment.
    Sentinel,
}

impl Role {
    /// The option that lists these addresses, in errors.
    fn option(self) -> &'static str {
        match self {
            Role::Server => "url",
            Role::Master => "masters",
            Role::Node => "nodes",
            Role::Sentinel => "sentinels",
        }
    }

    /// The server an address of this role names, in errors.
    fn of(self) -> &'static str {
        match self {
            Role::Server => "the Redis server",
            Role::Master => "a RedLock master",
            Role::Node => "a cluster node",
            Role::Sentinel => "a sentinel",
        }
    }

    /// The forms of address this role takes, as the `redis` crate reads them.
    fn expected(self) -> &'static str {
        match self {
            Role::Server | Role::Master => {
                "redis://[user:password@]host[:port][/db], rediss://... for TLS, or \
                 redis+unix:///path/to/socket[?db=N] (valkey:// and valkeys:// too; the port \
                 is 6379 when left out)"
            }
            Role::Node => {
                "redis://[user:password@]host[:port] or rediss://... for TLS, one per node \
                 and the same user and password on each (not a unix socket: a cluster names \
                 its nodes by address and port)"
            }
            Role::Sentinel => {
                "redis://[user:password@]host:port or rediss://... for TLS, one per sentinel, \
                 with its port (usually 26379; 6379 when left out); the master's credentials \
                 go in SentinelOptions"
            }
        }
    }
}

/// The addresses of a deployment's servers, at least one, with the options checked: the
/// first step of every connect function that takes a list.
pub(crate) fn addresses<I>(
    targets: I,
    options: &ClientOptions,
    role: Role,
) -> Result<Vec<ConnectionInfo>>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    options.validate()?;
    let addresses = targets
        .into_iter()
        .map(|target| connection_info(target, role))
        .collect::<Result<Vec<_>>>()?;
    if addresses.is_empty() {
        return Err(Error::InvalidOption {
            option: role.option(),
            reason: format!("at least one address of {} is needed", role.of()),
        });
    }
    Ok(addresses)
}

/// The client of the one server at `target`, with the options checked: all that
/// [`Client::connect_with_options`] does before it opens a connection.
pub(crate) fn single_server<T: IntoConnectionInfo>(
    target: T,
    options: &ClientOptions,
) -> Result<redis::Client> {
    options.validate()?;
    Ok(options.open(connection_info(target, Role::Server)?)?)
}

/// The address `target` names. Without the `tls` feature the `redis` crate refuses `rediss://`
/// as a malformed address; fencelock says what is missing instead.
pub(crate) fn connection_info<T: IntoConnectionInfo>(
    target: T,
    role: Role,
) -> Result<ConnectionInfo> {
    target.into_connection_info().map_err(|e| {
        if cfg!(not(feature = "tls"))
            && e.kind() == redis::ErrorKind::InvalidClientConfig
            && e.to_string().contains("TLS")
        {
            return Error::Unsupported {
                what: "TLS (`rediss://`)",
                deployment: "this build of fencelock (its `tls` feature is off)",
            };
        }
        invalid_address(e, role)
    })
}

/// The error for addresses of `role` that the `redis` crate refused as unusable settings
/// (`InvalidClientConfig`), saying what is expected; any other error as it is.
pub(crate) fn invalid_address(e: redis::RedisError, role: Role) -> Error {
    if e.kind() != redis::ErrorKind::InvalidClientConfig {
        return Error::from(e);
    }
    // The crate's text is "<description> - InvalidClientConfig[: <detail>]".
    let said = e.to_string().replacen(" - InvalidClientConfig", "", 1);
    let reason = if said == "Redis URL did not parse" {
        "not a URL with a scheme Redis takes".to_owned()
    } else {
        said
    };
    Error::InvalidAddress {
        of: role.of(),
        reason,
        expected: role.expected(),
    }
}

/// Sends one `PING` on a new connection. A server that requires a password the URL lacks
/// accepts the connection and refuses its commands; found here, that is a clear
/// authentication failure (`NOAUTH`) instead of whatever the first lock script runs into
/// (a long script from an unauthenticated client is cut off as a protocol error).
pub(crate) async fn check_access(conn: &mut impl ConnectionLike) -> Result<()> {
    redis::cmd("PING").query_async::<()>(conn).await?;
    Ok(())
}
