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
    /// The settings could not be read, for example because an ACL user may not run
    /// `CONFIG GET`.
    Unreadable {
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
            DeploymentWarning::Unreadable { reason } => {
                write!(f, "cannot read the server's settings: {reason}")
            }
        }
    }
}

impl Client {
    /// Reads the server's memory and persistence settings (`CONFIG GET`) and says which of
    /// them weaken the locks: an eviction policy that may delete lock keys, no append-only
    /// file; and, from the version read at connect, what the server lacks (a cluster of
    /// Redis 6.2 broadcasts every release). An empty list means none of these; it says nothing
    /// about replication or clocks (see
    /// [the guide](crate#what-the-lock-guarantees-and-what-it-does-not)).
    ///
    /// On a cluster, the settings of the node the command reaches; on a RedLock client, of the
    /// first master. Settings that cannot be read are reported as
    /// [`DeploymentWarning::Unreadable`], not as an error.
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
        // One parameter per `CONFIG GET`: Redis 6.2 takes no more.
        let reply = redis::pipe()
            .cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory*")
            .cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async::<(Vec<(String, String)>, Vec<(String, String)>)>(
                &mut self.shared.nodes.first().clone(),
            )
            .await;
        let mut found = self.version_warnings();
        match reply {
            Ok((memory, persistence)) => found.extend(warnings(&[memory, persistence].concat())),
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                return Err(e.into())
            }
            Err(e) => found.push(DeploymentWarning::Unreadable {
                reason: e.to_string(),
            }),
        }
        Ok(found)
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

fn warnings(settings: &[(String, String)]) -> Vec<DeploymentWarning> {
    let get = |name: &str| {
        settings
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let mut found = Vec::new();
    let limited = get("maxmemory").is_some_and(|m| m != "0");
    if let Some(policy) = get("maxmemory-policy") {
        if limited && policy != "noeviction" {
            found.push(DeploymentWarning::EvictsLockKeys {
                policy: policy.to_owned(),
            });
        }
    }
    if get("appendonly") == Some("no") {
        found.push(DeploymentWarning::NoAppendOnlyFile);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

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
