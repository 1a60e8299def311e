//! Connections, whatever the deployment behind them: one server, a Sentinel deployment's
//! master, or a Redis Cluster. What sits above sends its scripts and commands through
//! [`Conn`](conn::Conn) and never asks which kind of Redis it talks to.

pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod sentinel;
pub(crate) mod server;
