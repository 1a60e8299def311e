//! The server behind a connection: which product and version it is, read once at connect, and
//! what fencelock does differently on each.
//!
//! The version comes from `HELLO` without arguments, which answers the server's name and
//! version without changing the protocol and which Redis lets every user run, whatever its
//! ACL rules. Where `HELLO` says nothing (Redis 6.0 wants a protocol version, older servers
//! have no `HELLO`), `INFO server` names the version.

use std::fmt;

use redis::aio::ConnectionLike;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisError, Value};

use crate::error::{Error, Result};

/// The oldest Redis fencelock supports: the oldest the suite runs on, and the first whose ACL
/// rules can limit a user's channels to the lock prefix. Every Valkey release (7.2 onwards)
/// is supported.
const OLDEST_REDIS: Version = Version(6, 2, 0);
/// [`OLDEST_REDIS`] as the error names it.
const OLDEST_SUPPORTED: &str = "Redis 6.2";
/// The first Redis with sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
#[cfg(feature = "cluster")]
const SHARDED_PUBSUB: Version = Version(7, 0, 0);

/// A server product and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Server {
    product: Product,
    version: Version,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Product {
    /// Redis, or a server that answers as Redis does.
    Redis,
    Valkey,
}

/// `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl Server {
    /// Whether the server has sharded pub/sub, so that a cluster announces a release on the
    /// name's shard only instead of broadcasting it to every node.
    #[cfg(feature = "cluster")]
    pub(crate) fn has_sharded_pubsub(&self) -> bool {
        self.product == Product::Valkey || self.version >= SHARDED_PUBSUB
    }

    /// The server, or [`Error::UnsupportedServer`] when it is older than the oldest one
    /// supported.
    fn supported(self) -> Result<Server> {
        if self.product == Product::Redis && self.version < OLDEST_REDIS {
            return Err(Error::UnsupportedServer {
                server: self.to_string(),
                oldest: OLDEST_SUPPORTED,
            });
        }
        Ok(self)
    }

    /// The server described by a `HELLO` reply: a map (RESP3) or a flat list of field names
    /// and values (RESP2) with `server` and `version`.
    fn from_hello(reply: &Value) -> Option<Server> {
        let pairs: Vec<(&Value, &Value)> = match reply {
            Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
            Value::Array(items) => items
                .chunks_exact(2)
                .map(|pair| (&pair[0], &pair[1]))
                .collect(),
            _ => return None,
        };
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| text(key).as_deref() == Some(name))
                .and_then(|(_, value)| text(value))
        };
        Some(Server {
            product: product(&field("server")?),
            version: Version::parse(&field("version")?)?,
        })
    }

    /// The server described by an `INFO server` reply: `redis_version`, or Valkey's
    /// `server_name` and `valkey_version`.
    fn from_info(info: &str) -> Option<Server> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
        };
        let product = product(field("server_name").unwrap_or("redis"));
        let version = match product {
            Product::Redis => field("redis_version")?,
            Product::Valkey => field("valkey_version")?,
        };
        Some(Server {
            product,
            version: Version::parse(version)?,
        })
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Version(major, minor, patch) = self.version;
        let product = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        write!(f, "{product} {major}.{minor}.{patch}")
    }
}

fn product(name: &str) -> Product {
    if name.eq_ignore_ascii_case("valkey") {
        Product::Valkey
    } else {
        Product::Redis
    }
}

impl Version {
    /// `7.2.4`, `6.2.14`, `8.1.8-rc1`: the leading numbers; a missing patch counts as 0.
    fn parse(text: &str) -> Option<Version> {
        let mut numbers = text.trim().split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = numbers.next()??;
        let minor = numbers.next()??;
        let patch = numbers.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        _ => None,
    }
}

/// The server behind `conn`, refused when it is too old. `None` when it does not say: a
/// server (or a proxy) that answers neither `HELLO` nor `INFO` in a known shape is taken to be
/// a current one.
///
/// # Errors
///
/// [`Error::UnsupportedServer`] for a server older than the oldest supported;
/// [`Error::Redis`] when it cannot be reached.
pub(crate) async fn read<C: ConnectionLike>(conn: &mut C) -> Result<Option<Server>> {
    let hello = match redis::cmd("HELLO").query_async::<Value>(conn).await {
        Ok(reply) => Server::from_hello(&reply),
        Err(e) if is_unreachable(&e) => return Err(e.into()),
        Err(_) => None,
    };
    let server = match hello {
        Some(server) => Some(server),
        None => from_info(conn).await?,
    };
    server.map(Server::supported).transpose()
}

/// The oldest server among the masters of a cluster, each refused when too old, so that a
/// cluster in the middle of an upgrade gets what its oldest master can do.
///
/// # Errors
///
/// As [`read`].
#[cfg(feature = "cluster")]
pub(crate) async fn read_cluster(conn: &mut ClusterConnection) -> Result<Option<Server>> {
    let hellos = ask_every_master(conn, redis::cmd("HELLO")).await?;
    let mut servers: Vec<Server> = hellos.iter().filter_map(Server::from_hello).collect();
    if servers.len() < hellos.len() {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let infos = ask_every_master(conn, info).await?;
        servers.extend(
            infos
                .iter()
                .filter_map(text)
                .filter_map(|info| Server::from_info(&info)),
        );
    }
    let servers = servers
        .into_iter()
        .map(Server::supported)
        .collect::<Result<Vec<_>>>()?;
    Ok(oldest(servers))
}

/// Each master's reply to `cmd` (an error reply among them); none when the command failed
/// as a whole other than by the cluster being unreachable.
#[cfg(feature = "cluster")]
async fn ask_every_master(conn: &mut ClusterConnection, cmd: redis::Cmd) -> Result<Vec<Value>> {
    let every_master = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    match conn.route_command(cmd, every_master).await {
        // One reply per master, keyed by its address.
        Ok(Value::Map(by_master)) => Ok(by_master.into_iter().map(|(_, reply)| reply).collect()),
        Ok(_) => Ok(Vec::new()),
        Err(e) if is_unreachable(&e) => Err(e.into()),
        Err(_) => Ok(Vec::new()),
    }
}

/// The oldest of `servers`: what every one of them can do.
pub(crate) fn oldest(servers: impl IntoIterator<Item = Server>) -> Option<Server> {
    servers.into_iter().min_by_key(|server| server.version)
}

/// The server as `INFO server` names it, for a server whose `HELLO` said nothing.
async fn from_info<C: ConnectionLike>(conn: &mut C) -> Result<Option<Server>> {
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => Ok(Server::from_info(&info)),
        Err(e) if is_unreachable(&e) => Err(e.into()),
        Err(_) => Ok(None),
    }
}

fn is_unreachable(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn hello(server: &str, version: &str) -> Value {
        Value::Array(vec![
            bulk("server"),
            bulk(server),
            bulk("version"),
            bulk(version),
            bulk("proto"),
            Value::Int(2),
        ])
    }

    #[test]
    fn the_server_is_read_from_hello_in_either_protocol() {
        let resp2 = Server::from_hello(&hello("redis", "6.2.14")).expect("resp2");
        assert_eq!(resp2.to_string(), "Redis 6.2.14");
        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("valkey")),
            (bulk("version"), bulk("8.1.8")),
        ]);
        let valkey = Server::from_hello(&resp3).expect("resp3");
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert_eq!(Server::from_hello(&Value::Nil), None);
        assert_eq!(Server::from_hello(&hello("redis", "seven")), None);
    }

    #[test]
    fn redis_older_than_6_2_is_refused_and_valkey_never() {
        for (server, version, supported) in [
            ("redis", "6.0.16", false),
            ("redis", "5.0.14", false),
            ("redis", "6.2.0", true),
            ("redis", "7.0.15", true),
            ("valkey", "7.2.4", true),
            ("valkey", "8.1.8", true),
        ] {
            let found = Server::from_hello(&hello(server, version)).expect("parsed");
            match found.supported() {
                Ok(_) => assert!(supported, "{server} {version} accepted"),
                Err(e) => {
                    assert!(!supported, "{server} {version} refused");
                    let message = e.to_string();
                    assert!(
                        message.contains(version) && message.contains("Redis 6.2"),
                        "names both versions: {message}"
                    );
                }
            }
        }
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn sharded_pubsub_comes_with_redis_7_and_every_valkey() {
        let has = |server, version| {
            Server::from_hello(&hello(server, version))
                .expect("parsed")
                .has_sharded_pubsub()
        };
        assert!(!has("redis", "6.2.14"));
        assert!(has("redis", "7.0.0"));
        assert!(has("valkey", "7.2.4"));
    }

    #[test]
    fn info_names_a_server_whose_hello_says_nothing() {
        let info = "# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n";
        let server = Server::from_info(info).expect("parsed");
        assert_eq!(server.to_string(), "Redis 6.0.16");
        assert!(server.supported().is_err());
        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";
        let server = Server::from_info(valkey).expect("parsed");
        assert_eq!(server.to_string(), "Valkey 8.1.8");
        assert_eq!(Version::parse("7.2"), Some(Version(7, 2, 0)));
        assert_eq!(Version::parse("8.1.8-rc1"), Some(Version(8, 1, 8)));
    }
}
