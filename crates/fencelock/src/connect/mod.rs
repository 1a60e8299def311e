//! The constructors of a `Client` on a deployment of several servers: Sentinel, Cluster and
//! RedLock (the single server's are in `client.rs`). Each checks its addresses and options,
//! connects through the transport layer, and assembles the client.

mod cluster;
pub(crate) mod redlock;
mod sentinel;
