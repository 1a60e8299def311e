//! Connections, whatever the deployment behind them: one server, a Sentinel deployment's
//! master, or a Redis Cluster. What sits above sends its scripts and commands through
//! [`Conn`](conn::Conn) and never asks which kind of Redis it talks to.

pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod server;

use redis::aio::ConnectionLike;
use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::error::{Error, Result};
use crate::options::ClientOptions;

/// The addresses of a deployment's servers, at least one, with the options checked: the
/// first step of every connect function that takes a list. `option` and `what` name the list
/// in the error.
pub(crate) fn addresses<I>(
    targets: I,
    options: &ClientOptions,
    option: &'static str,
    what: &str,
) -> Result<Vec<ConnectionInfo>>
where
    I: IntoIterator,
    I::Item: IntoConnectionInfo,
{
    options.validate()?;
    let addresses = targets
        .into_iter()
        .map(connection_info)
        .collect::<Result<Vec<_>>>()?;
    if addresses.is_empty() {
        return Err(Error::InvalidOption {
            option,
            reason: format!("at least one {what} address is needed"),
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
    Ok(options.open(connection_info(target)?)?)
}

/// The address `target` names. Without the `tls` feature the `redis` crate refuses `rediss://`
/// as a malformed address; fencelock says what is missing instead.
pub(crate) fn connection_info<T: IntoConnectionInfo>(target: T) -> Result<ConnectionInfo> {
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
        Error::from(e)
    })
}

/// Sends one `PING` on a new connection. A server that requires a password the URL lacks
/// accepts the connection and refuses its commands; found here, that is a clear
/// authentication failure (`NOAUTH`) instead of whatever the first lock script runs into
/// (a long script from an unauthenticated client is cut off as a protocol error).
pub(crate) async fn check_access(conn: &mut impl ConnectionLike) -> Result<()> {
    redis::cmd("PING").query_async::<()>(conn).await?;
    Ok(())
}
