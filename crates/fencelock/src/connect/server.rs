//! A client of one Redis server.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::ConnectionInfo;

use crate::client::Client;
use crate::error::Result;
use crate::options::ClientOptions;
use crate::transport::conn::Conn;
use crate::transport::pubsub::Source;
use crate::transport::server;
use crate::transport::{check_access, single_server};

/// Connects to the server at `address`: one connection for commands, checked to answer and
/// to accept the credentials, and the server's version read.
pub(super) async fn connect(address: ConnectionInfo, options: ClientOptions) -> Result<Client> {
    let redis = single_server(address, &options)?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(options.response_timeout))
        .set_connection_timeout(Some(options.connection_timeout))
        .set_number_of_retries(1);
    let mut manager = ConnectionManager::new_with_config(redis.clone(), config).await?;
    check_access(&mut manager).await?;
    let server = server::read(&mut manager).await?;
    Client::assemble(
        Conn::Single(manager),
        Source::Single(redis),
        server,
        options,
    )
}
