//! Reading the server's settings for what can make locks less safe than the guide says:
//! eviction of keys with an expiry, and no append-only file; and what the server's version
//! costs.

use std::fmt;

use crate::client::Client;
use crate::error::Result;

/// A server setting that weakens what a lock guarantees; see [`Client::deployment_warnings`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeploymentWarning {
    /// `maxmemory` is set and `maxmemory-policy` may evict keys with an expiry, which every
    /// lock key has: under memory pressure Redis may delete a held lock, and another owner
    /// takes it while the first still believes it holds it. Use `noeviction`.
    EvictsLockKeys {
        /// The server's `maxmemory-policy`.
        policy: String,
    },
    /// `appendonly` is off: a restart forgets every lock (snapshots, if any, are older than
    /// the locks that matter). Fences keep rising regardless.
    NoAppendOnlyFile,
    /// The cluster's masters run a Redis without sharded pub/sub (6.2): every release is
    /// announced with `PUBLISH`, which the cluster broadcasts to every node, instead of on the
    /// name's shard only. Locks work the same; each release costs a message on every node.
    /// Redis 7.0 and Valkey announce on the shard.
    BroadcastReleases {
        /// The oldest master's server, such as `Redis 6.2.14`.
        server: String,
    },
    /// Some settings could not be read, for example because the ACL user may not run `INFO`
    /// (see [the ACL user's commands](crate::topics::security)): nothing is known of them.
    Unreadable {
        /// Which settings: `maxmemory and maxmemory-policy` or `appendonly`.
        settings: &'static str,
        /// What Redis answered.
        reason: String,
    },
}

impl fmt::Display for DeploymentWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeploymentWarning::EvictsLockKeys { policy } => write!(
                f,
                "maxmemory-policy {policy} may evict held locks under memory pressure; use noeviction"
            ),
            DeploymentWarning::NoAppendOnlyFile => {
                write!(f, "appendonly is off: a restart forgets every held lock")
            }
            DeploymentWarning::BroadcastReleases { server } => write!(
                f,
                "{server} has no sharded pub/sub: every release is broadcast to every node of \
                 the cluster; Redis 7.0 and Valkey announce it on the name's shard only"
            ),
            DeploymentWarning::Unreadable { settings, reason } => {
                write!(f, "cannot read the server's {settings}: {reason}")
            }
        }
    }
}

impl Client {
    /// Reads the server's memory and persistence settings (`INFO memory`, `INFO
    /// persistence`) and says which of them weaken the locks: an eviction policy that may
    /// delete lock keys, no append-only file; and, from the version read at connect, what the
    /// server lacks (a cluster of Redis 6.2 broadcasts every release). An empty list means
    /// none of these; it says nothing about replication or clocks (see
    /// [the guide](crate#what-the-lock-guarantees-and-what-it-does-not)).
    ///
    /// `INFO` rather than `CONFIG GET`: managed services that refuse `CONFIG` (ElastiCache,
    /// Memorystore, Azure) answer it, and an ACL user needs only `+info`
    /// ([its commands](crate::topics::security)). On a cluster, the settings of every master,
    /// each warning once; on a RedLock client, of the first master. Settings that cannot be
    /// read (an ACL user without `+info`, a server that refuses `INFO`) are reported as one
    /// [`DeploymentWarning::Unreadable`] each, not as an error.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start_with(
    /// #     fencelock_testkit::ServerOptions::default().args(["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]));
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// for warning in client.deployment_warnings().await? {
    ///     eprintln!("fencelock: {warning}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn deployment_warnings(&self) -> Result<Vec<DeploymentWarning>> {
        let mut found = self.version_warnings();
        // One section per `INFO`: Redis 6.2 takes no more, and each degrades on its own.
        for (section, settings) in SECTIONS {
            let reply = redis::cmd("INFO")
                .arg(section)
                .query_async::<redis::Value>(&mut self.shared.nodes.first().clone())
                .await;
            let texts = match reply {
                Ok(value) => node_texts(value),
                Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                    return Err(e.into())
                }
                Err(e) => vec![Err(e.to_string())],
            };
            for text in texts {
                match text {
                    Ok(text) => found.extend(warnings(&info_settings(&text))),
                    Err(reason) => found.push(DeploymentWarning::Unreadable { settings, reason }),
                }
            }
        }
        // A cluster's masters usually share their settings: each warning once.
        let mut unique = Vec::with_capacity(found.len());
        for warning in found {
            if !unique.contains(&warning) {
                unique.push(warning);
            }
        }
        Ok(unique)
    }

    /// What the server read at connect lacks.
    fn version_warnings(&self) -> Vec<DeploymentWarning> {
        let conn = self.shared.nodes.first();
        match &self.shared.server {
            Some(server) if conn.is_sharded() && !conn.announces_sharded() => {
                vec![DeploymentWarning::BroadcastReleases {
                    server: server.to_string(),
                }]
            }
            _ => Vec::new(),
        }
    }
}

/// The `INFO` sections read, and the settings each tells.
const SECTIONS: [(&str, &str); 2] = [
    ("memory", "maxmemory and maxmemory-policy"),
    ("persistence", "appendonly"),
];

/// The text of each node's `INFO` reply: one for a single server, one per master for a cluster
/// (which answers with a map of node to reply); an error reply as its message.
fn node_texts(value: redis::Value) -> Vec<std::result::Result<String, String>> {
    match value {
        redis::Value::Map(nodes) => nodes
            .into_iter()
            .flat_map(|(_, reply)| node_texts(reply))
            .collect(),
        redis::Value::ServerError(e) => vec![Err(e.to_string())],
        other => vec![redis::from_redis_value::<String>(other).map_err(|e| e.to_string())],
    }
}

/// The settings an `INFO` text tells, under the names `CONFIG GET` gives them.
fn info_settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .filter_map(|(field, value)| match field {
            "maxmemory" => Some(("maxmemory", value.to_owned())),
            "maxmemory_policy" => Some(("maxmemory-policy", value.to_owned())),
            "aof_enabled" => Some(("appendonly", if value == "1" { "yes" } else { "no" }.into())),
            _ => None,
        })
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

fn warnings(settings: &[(String, String)]) -> Vec<DeploymentWarning> {
    let get = |name: &str| {
        settings
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let mut found = Vec::new();
    let limited = get("maxmemory").is_some_and(|m| m != "0");
    if let Some(policy) = get("maxmemory-policy")
        && limited
        && policy != "noeviction"
    {
        found.push(DeploymentWarning::EvictsLockKeys {
            policy: policy.to_owned(),
        });
    }
    if get("appendonly") == Some("no") {
        found.push(DeploymentWarning::NoAppendOnlyFile);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_tells_the_settings_config_get_would() {
        let memory = "# Memory\r\nused_memory:1000\r\nmaxmemory:1048576\r\n\
                      maxmemory_human:1.00M\r\nmaxmemory_policy:volatile-lru\r\n";
        let persistence = "# Persistence\r\nloading:0\r\naof_enabled:0\r\n";
        let settings = [info_settings(memory), info_settings(persistence)].concat();
        assert_eq!(
            warnings(&settings),
            vec![
                DeploymentWarning::EvictsLockKeys {
                    policy: "volatile-lru".into()
                },
                DeploymentWarning::NoAppendOnlyFile
            ]
        );
        assert!(warnings(&info_settings("aof_enabled:1\r\nmaxmemory:0\r\n")).is_empty());
    }

    fn settings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn eviction_matters_only_with_a_memory_limit() {
        let unlimited = settings(&[
            ("maxmemory", "0"),
            ("maxmemory-policy", "allkeys-lru"),
            ("appendonly", "yes"),
        ]);
        assert!(warnings(&unlimited).is_empty());
        let evicting = settings(&[
            ("maxmemory", "1048576"),
            ("maxmemory-policy", "volatile-ttl"),
            ("appendonly", "yes"),
        ]);
        assert_eq!(
            warnings(&evicting),
            vec![DeploymentWarning::EvictsLockKeys {
                policy: "volatile-ttl".into()
            }]
        );
        let safe = settings(&[
            ("maxmemory", "1048576"),
            ("maxmemory-policy", "noeviction"),
            ("appendonly", "no"),
        ]);
        assert_eq!(warnings(&safe), vec![DeploymentWarning::NoAppendOnlyFile]);
    }
}
