//! Configuration of a [`RedisServer`](crate::RedisServer) before it starts.

use std::path::PathBuf;

use crate::{FakedClock, RedisServer};

/// How to configure a [`RedisServer`] before starting it.
///
/// Every setter consumes and returns the options so they chain:
///
/// ```no_run
/// use fencelock_testkit::{RedisServer, ServerOptions};
///
/// let server = RedisServer::start_with(
///     ServerOptions::default()
///         .password("s3cret")
///         .acl_user("app", "apppass", &["~fencelock:*", "+@all"])
///         .args(["--maxmemory", "1mb"]),
/// );
/// ```
///
/// The default is a plain standalone server: no persistence, no password,
/// no extra users, not a replica.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    pub(crate) aof_always: bool,
    pub(crate) password: Option<String>,
    pub(crate) acl_users: Vec<AclUser>,
    pub(crate) replica_of: Option<ReplicaOf>,
    pub(crate) extra_args: Vec<String>,
    pub(crate) sentinel: Option<SentinelMonitor>,
    pub(crate) tls: Option<TlsClients>,
    /// The server binary, when not the one under test ([`crate::redis_server_path`]).
    pub(crate) program: Option<PathBuf>,
    /// Environment variables of the server process.
    pub(crate) env: Vec<(String, String)>,
}

/// Whether a TLS server asks its clients for certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsClients {
    /// A client may present a certificate; one that does must be signed by the kit's CA.
    Optional,
    /// Every client must present a certificate signed by the kit's CA.
    Required,
}

/// What a server started in sentinel mode monitors (see [`crate::SentinelGroup`]).
#[derive(Clone, Debug)]
pub(crate) struct SentinelMonitor {
    pub(crate) service: String,
    pub(crate) master_port: u16,
    pub(crate) quorum: u32,
    pub(crate) down_after_ms: u64,
    pub(crate) failover_timeout_ms: u64,
    pub(crate) master_password: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct AclUser {
    pub(crate) name: String,
    pub(crate) password: String,
    pub(crate) rules: Vec<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct ReplicaOf {
    pub(crate) port: u16,
    pub(crate) master_password: Option<String>,
}

impl ServerOptions {
    /// Turns on the append-only file with `appendfsync always`, stored in the
    /// server's own directory, so [`RedisServer::restart`] reloads every
    /// acknowledged write even after [`RedisServer::kill9`].
    ///
    /// Default: persistence off (`appendonly no`, no RDB snapshots).
    #[must_use = "setters return the updated options"]
    pub fn aof_always(mut self) -> Self {
        self.aof_always = true;
        self
    }

    /// Sets `requirepass`, the password of the `default` user.
    /// [`RedisServer::cli`] then authenticates with it.
    ///
    /// Default: no password.
    #[must_use = "setters return the updated options"]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Adds an ACL user, written to the config as
    /// `user NAME on >PASSWORD RULES...`; `rules` are ACL rules such as
    /// `"~fencelock:*"`, `"+@all"` or `"-debug"`. May be called several times.
    ///
    /// Default: only the built-in `default` user.
    #[must_use = "setters return the updated options"]
    pub fn acl_user(
        mut self,
        name: impl Into<String>,
        password: impl Into<String>,
        rules: &[&str],
    ) -> Self {
        self.acl_users.push(AclUser {
            name: name.into(),
            password: password.into(),
            rules: rules.iter().map(|r| (*r).to_owned()).collect(),
        });
        self
    }

    /// Makes the server a replica of `master` (`replicaof 127.0.0.1 PORT`),
    /// authenticating with the master's password if it has one.
    ///
    /// Only the master's port and password are recorded, so the replica
    /// follows the master across [`RedisServer::restart`].
    ///
    /// Default: a master.
    #[must_use = "setters return the updated options"]
    pub fn replica_of(mut self, master: &RedisServer) -> Self {
        self.replica_of = Some(ReplicaOf {
            port: master.port(),
            master_password: master.password().map(str::to_owned),
        });
        self
    }

    /// Appends one raw command-line argument, e.g. `"--maxmemory"`.
    /// Arguments come after the generated config and so override it.
    ///
    /// Default: none.
    #[must_use = "setters return the updated options"]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Appends raw command-line arguments, e.g. `["--maxmemory", "1mb"]`.
    /// Arguments come after the generated config and so override it.
    ///
    /// Default: none.
    #[must_use = "setters return the updated options"]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Also listens with TLS on a second port ([`RedisServer::tls_url`]), with certificates
    /// made when the server starts: a CA, a server certificate for `127.0.0.1` and
    /// `localhost`, and a client certificate ([`RedisServer::tls_ca_pem`] and its siblings).
    /// Clients may present the client certificate; they need not. The plain port stays open
    /// for the kit's own probes and `redis-cli`.
    pub fn tls(mut self) -> Self {
        self.tls = Some(TlsClients::Optional);
        self
    }

    /// As [`tls`](Self::tls), and every TLS client must present a certificate signed by the
    /// kit's CA (`tls-auth-clients yes`).
    pub fn tls_client_auth(mut self) -> Self {
        self.tls = Some(TlsClients::Required);
        self
    }

    /// Runs the server under `clock`: its wall clock (`TIME`, key expiry) is the true one plus
    /// the clock's offset, which the test steps while the server runs. The server is the
    /// binary the clock names (see [`FakedClock`]), not the one under test.
    ///
    /// Default: the true clock.
    #[must_use = "setters return the updated options"]
    pub fn faked_clock(mut self, clock: &FakedClock) -> Self {
        self.program = Some(clock.server().to_path_buf());
        self.env.extend(clock.env());
        self
    }

    /// Runs the server as a sentinel (`--sentinel`) monitoring `monitor`'s master. Sentinel
    /// rewrites its config file, which lives in the server's own writable directory.
    pub(crate) fn sentinel(mut self, monitor: SentinelMonitor) -> Self {
        self.sentinel = Some(monitor);
        self.extra_args.push("--sentinel".to_owned());
        self
    }

    /// Renders the config file. The port is deliberately absent: it is passed
    /// on the command line so a retry on another port needs no rewrite.
    pub(crate) fn config_file(&self, dir: &str, logfile: &str) -> String {
        let mut lines = vec![
            format!("bind {}", quote("127.0.0.1")),
            format!("protected-mode {}", quote("no")),
            format!("daemonize {}", quote("no")),
            format!("save {}", quote("")),
            format!("dir {}", quote(dir)),
            format!("logfile {}", quote(logfile)),
            // Redis waits 5 s by default for more replicas before a diskless
            // full sync; tests would pay that on every replica start.
            format!("repl-diskless-sync-delay {}", quote("0")),
        ];
        if self.aof_always {
            lines.push(format!("appendonly {}", quote("yes")));
            lines.push(format!("appendfsync {}", quote("always")));
        } else {
            lines.push(format!("appendonly {}", quote("no")));
        }
        if let Some(password) = &self.password {
            lines.push(format!("requirepass {}", quote(password)));
        }
        for user in &self.acl_users {
            let mut line = format!(
                "user {} {} {}",
                quote(&user.name),
                quote("on"),
                quote(&format!(">{}", user.password))
            );
            for rule in &user.rules {
                line.push(' ');
                line.push_str(&quote(rule));
            }
            lines.push(line);
        }
        if let Some(replica) = &self.replica_of {
            lines.push(format!(
                "replicaof {} {}",
                quote("127.0.0.1"),
                quote(&replica.port.to_string())
            ));
            if let Some(password) = &replica.master_password {
                lines.push(format!("masterauth {}", quote(password)));
            }
        }
        if let Some(monitor) = &self.sentinel {
            lines.extend(monitor.config_lines());
        }
        if let Some(clients) = self.tls {
            let auth = match clients {
                TlsClients::Optional => "optional",
                TlsClients::Required => "yes",
            };
            for (option, file) in [
                ("tls-cert-file", crate::tls::SERVER_CERT),
                ("tls-key-file", crate::tls::SERVER_KEY),
                ("tls-ca-cert-file", crate::tls::CA_CERT),
            ] {
                lines.push(format!("{option} {}", quote(&format!("{dir}/{file}"))));
            }
            lines.push(format!("tls-auth-clients {}", quote(auth)));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

impl SentinelMonitor {
    fn config_lines(&self) -> Vec<String> {
        let service = quote(&self.service);
        let mut lines = vec![
            format!(
                "sentinel monitor {service} {} {} {}",
                quote("127.0.0.1"),
                quote(&self.master_port.to_string()),
                quote(&self.quorum.to_string())
            ),
            format!(
                "sentinel down-after-milliseconds {service} {}",
                quote(&self.down_after_ms.to_string())
            ),
            format!(
                "sentinel failover-timeout {service} {}",
                quote(&self.failover_timeout_ms.to_string())
            ),
        ];
        if let Some(password) = &self.master_password {
            lines.push(format!("sentinel auth-pass {service} {}", quote(password)));
        }
        lines
    }
}

/// Quotes a config token so spaces, quotes and `#` survive Redis's
/// config tokenizer (`sdssplitargs`).
fn quote(token: &str) -> String {
    let mut out = String::with_capacity(token.len() + 2);
    out.push('"');
    for c in token.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_quotes_awkward_tokens() {
        let opts = ServerOptions::default().password("p \"q\"").acl_user(
            "app",
            "a#b",
            &["~fencelock:*", "+@all"],
        );
        let conf = opts.config_file("/tmp/x y", "/tmp/x y/redis.log");
        assert!(conf.contains("dir \"/tmp/x y\"\n"), "{conf}");
        assert!(conf.contains("requirepass \"p \\\"q\\\"\"\n"), "{conf}");
        assert!(
            conf.contains("user \"app\" \"on\" \">a#b\" \"~fencelock:*\" \"+@all\"\n"),
            "{conf}"
        );
        assert!(conf.contains("appendonly \"no\"\n"), "{conf}");
    }
}
