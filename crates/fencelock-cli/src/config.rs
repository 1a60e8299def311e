//! The command line read into what fencelock is to do, and checked, before anything connects:
//! bad usage is refused without a Redis, and the fuzz targets reach every check.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use fencelock::ClientOptions;

use crate::elect::{ElectPlan, LeaderArgs};
use crate::holds;
use crate::lock::{Wait, Want};
use crate::{Cli, Command, LockArgs, RunArgs, StatusArgs, TopArgs, UnlockArgs};

/// A command line, read and checked: where Redis is, the client's options and what to do.
#[derive(Debug)]
#[non_exhaustive]
pub struct Config {
    /// The deployment to connect to.
    pub target: Target,
    /// The client's options, checked (the key prefix).
    pub options: ClientOptions,
    /// What to do once connected.
    pub action: Action,
}

/// The Redis deployment a command line names.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// One server: `--redis`, else `REDIS_URL`, else `redis://127.0.0.1:6379`.
    Single(String),
    /// Independent masters for RedLock (`--redlock`), at least one.
    RedLock(Vec<String>),
    /// Nodes of a Redis Cluster (`--cluster`), at least one.
    Cluster(Vec<String>),
    /// Sentinels (`--sentinel`, at least one) and the service whose master they name.
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The name the sentinels monitor the master under (`--service`).
        service: String,
    },
}

/// How `fencelock status --graph` prints the wait-for graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    /// Lines for people: each lock, its holders and waiters, then each deadlock.
    Text,
    /// One JSON object: `locks`, `cycles`, `complete`.
    Json,
    /// Graphviz dot: tasks and locks as nodes, holds and waits as edges, cycles in red.
    Dot,
}

/// What fencelock is to do once connected.
#[derive(Debug)]
#[non_exhaustive]
pub enum Action {
    /// `fencelock run`.
    Run(RunPlan),
    /// `fencelock hold`: take the lock, print its fence, hold it until standard input ends or a
    /// signal comes.
    Hold(LockPlan),
    /// `fencelock status`: the locks whose names match the glob `pattern`.
    Status {
        /// Glob over lock names.
        pattern: String,
        /// JSON instead of a table.
        json: bool,
        /// The wait-for graph (`--graph`), as text, JSON or Graphviz dot (`--dot`), instead of
        /// the table of locks.
        graph: Option<GraphFormat>,
        /// The one lock named `pattern` kept in another library's layout (`--layout`), instead
        /// of the locks under the prefix.
        layout: Option<fencelock::Layout>,
    },
    /// `fencelock top`: a live view of the locks whose names match `pattern`.
    Top {
        /// Glob over lock names.
        pattern: String,
        /// The first sort key.
        sort: crate::SortKey,
    },
    /// `fencelock unlock NAME --force`.
    Unlock {
        /// The lock's name.
        name: String,
        /// The lock kept in another library's layout (`--layout`), instead of every kind
        /// under the prefix.
        layout: Option<fencelock::Layout>,
    },
    /// `fencelock elect`.
    Elect(ElectPlan),
    /// `fencelock leader NAME`: who leads the election.
    Leader {
        /// The election's name.
        name: String,
        /// Print each change until interrupted.
        watch: bool,
        /// JSON instead of text.
        json: bool,
    },
}

/// The lock `fencelock run` or `fencelock hold` takes, and how.
#[derive(Debug)]
#[non_exhaustive]
pub struct LockPlan {
    /// The lock's name.
    pub name: String,
    /// The kind of lock, and a semaphore's permits.
    pub want: Want,
    /// The lease, renewed while the lock is held.
    pub lease: Duration,
    /// How long to wait for the lock.
    pub wait: Wait,
    /// What to do when the lock is busy (held, or the wait ran out).
    pub busy: Busy,
    /// Whether to report progress on standard error while waiting.
    pub verbose: bool,
    /// How long after it was taken the lock is kept at least, however soon it is released.
    pub hold_at_least: Option<Duration>,
    /// Give up when the wait closes a cycle of waits, checked after this long and again every
    /// such interval (`--deadlock-check`).
    pub deadlock_check: Option<Duration>,
}

/// What `fencelock` does when the lock is busy: held by another (`--no-wait`) or still held
/// when `--wait` ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Busy {
    /// The exit code instead of [`HELD`](crate::exit::HELD) and
    /// [`TIMEOUT`](crate::exit::TIMEOUT) (`-E`).
    pub exit_code: Option<u8>,
    /// Print nothing (`-q`).
    pub quiet: bool,
}

/// `fencelock run`: the lock to hold, and the command to run while it is held.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunPlan {
    /// The lock and how to take it.
    pub lock: LockPlan,
    /// After a lost lock, how long the command has between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// The command and its arguments: at least the program.
    pub command: Vec<String>,
}

impl Config {
    /// Reads and checks a command line, program name first as [`std::env::args_os`] gives
    /// it: everything `fencelock` does before it connects. Reads `REDIS_URL` when `--redis` is
    /// not given, and `FENCELOCK_HOLDS` (the locks the `fencelock run` around it holds), and
    /// nothing else.
    ///
    /// # Errors
    ///
    /// A [`clap::Error`] to print: bad usage (it goes to standard error and fencelock exits
    /// [`USAGE`](crate::exit::USAGE)), or the help or version that was asked for.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock_cli::{Action, Config, Target};
    ///
    /// let config = Config::from_args(["fencelock", "--cluster", "redis://a,redis://b", "status"])?;
    /// assert_eq!(config.target, Target::Cluster(vec!["redis://a".into(), "redis://b".into()]));
    /// assert!(matches!(config.action, Action::Status { .. }));
    /// assert!(Config::from_args(["fencelock", "unlock", "report"]).is_err());
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn from_args<I, T>(argv: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let Cli {
            redis,
            redlock,
            cluster,
            sentinel,
            service,
            prefix,
            command,
        } = Cli::try_parse_from(argv)?;
        let handed = holds::handed().map_err(|e| usage(ErrorKind::InvalidValue, e))?;
        let options = ClientOptions::default()
            .prefix(prefix)
            .inherited_holds(handed);
        options
            .validate()
            .map_err(|e| usage(ErrorKind::InvalidValue, format!("--prefix: {e}")))?;
        let target = match (redlock, cluster, sentinel, service) {
            (masters, ..) if !masters.is_empty() => Target::RedLock(masters),
            (_, nodes, ..) if !nodes.is_empty() => Target::Cluster(nodes),
            (.., sentinels, Some(service)) if !sentinels.is_empty() => {
                Target::Sentinel { sentinels, service }
            }
            (.., sentinels, service) if !sentinels.is_empty() || service.is_some() => {
                return Err(usage(
                    ErrorKind::MissingRequiredArgument,
                    "--sentinel and --service go together",
                ));
            }
            _ => Target::Single(redis),
        };
        Ok(Config {
            target,
            options,
            action: Action::of(command)?,
        })
    }
}

impl Action {
    fn of(command: Command) -> Result<Action, clap::Error> {
        Ok(match command {
            Command::Run(RunArgs {
                lock,
                kill_grace,
                command,
            }) => Action::Run(RunPlan {
                lock: LockPlan::of(lock),
                kill_grace,
                command,
            }),
            Command::Hold(args) => Action::Hold(LockPlan::of(args.lock)),
            Command::Top(TopArgs { pattern, sort }) => Action::Top { pattern, sort },
            Command::Status(StatusArgs {
                pattern,
                json,
                graph,
                dot,
                layout,
            }) => Action::Status {
                pattern,
                json,
                layout,
                graph: match (graph || dot, dot, json) {
                    (false, _, _) => None,
                    (true, true, _) => Some(GraphFormat::Dot),
                    (true, false, true) => Some(GraphFormat::Json),
                    (true, false, false) => Some(GraphFormat::Text),
                },
            },
            Command::Elect(args) => Action::Elect(ElectPlan::of(args)),
            Command::Leader(LeaderArgs { name, watch, json }) => {
                Action::Leader { name, watch, json }
            }
            Command::Unlock(UnlockArgs {
                name,
                force: true,
                layout,
            }) => Action::Unlock { name, layout },
            Command::Unlock(UnlockArgs {
                name, force: false, ..
            }) => {
                return Err(usage(
                    ErrorKind::MissingRequiredArgument,
                    format!(
                        "refusing to release {name:?} without --force (it may be held by a live \
                         process)"
                    ),
                ));
            }
        })
    }
}

impl LockPlan {
    fn of(args: LockArgs) -> LockPlan {
        let want = match (
            args.layout,
            args.semaphore,
            args.read,
            args.write,
            args.fair,
        ) {
            (Some(layout), ..) => Want::Foreign(layout),
            (None, Some(total), ..) => Want::Semaphore {
                total,
                permits: args.permits,
            },
            (None, None, true, ..) => Want::Read,
            (None, None, _, true, _) => Want::Write,
            (None, None, _, _, true) => Want::Fair,
            (None, None, false, false, false) => Want::Mutex,
        };
        let wait = match (args.no_wait, args.wait) {
            (true, _) => Wait::No,
            (false, Some(limit)) => Wait::AtMost(limit),
            (false, None) => Wait::Forever,
        };
        LockPlan {
            name: args.name,
            want,
            lease: args.lease,
            wait,
            busy: Busy {
                exit_code: args.conflict_exit_code,
                quiet: args.quiet,
            },
            verbose: args.verbose,
            hold_at_least: args.hold_at_least,
            deadlock_check: args.deadlock_check,
        }
    }
}

/// A usage error found after parsing, printed as clap prints its own.
fn usage(kind: ErrorKind, message: impl fmt::Display) -> clap::Error {
    Cli::command().error(kind, message)
}

/// The deployment as messages name it, with passwords left out.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Single(url) => f.write_str(&redacted(url)),
            Target::RedLock(masters) => write!(f, "RedLock masters {}", redacted_list(masters)),
            Target::Cluster(nodes) => write!(f, "cluster nodes {}", redacted_list(nodes)),
            Target::Sentinel { sentinels, service } => write!(
                f,
                "master {service:?} of sentinels {}",
                redacted_list(sentinels)
            ),
        }
    }
}

/// The URLs without their passwords, comma-separated.
fn redacted_list(urls: &[String]) -> String {
    urls.iter()
        .map(|url| redacted(url))
        .collect::<Vec<_>>()
        .join(",")
}

/// The URL without its password.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<Config, clap::Error> {
        Config::from_args(std::iter::once("fencelock").chain(args.iter().copied()))
    }

    #[test]
    fn the_argument_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redacted("redis://app:s3cret@db:6379/0"),
            "redis://app:***@db:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1"), "redis://127.0.0.1");
        let sentinels = Target::Sentinel {
            sentinels: vec!["redis://:pw@s1".into(), "redis://s2".into()],
            service: "orders".into(),
        };
        assert_eq!(
            sentinels.to_string(),
            "master \"orders\" of sentinels redis://:***@s1,redis://s2"
        );
    }

    #[test]
    fn one_deployment_is_named() {
        let target = |args: &[&str]| config(args).map(|c| c.target);
        assert_eq!(
            target(&["--redis", "redis://db", "status"]).expect("single"),
            Target::Single("redis://db".into())
        );
        assert_eq!(
            target(&[
                "--redlock",
                "redis://a,redis://b",
                "--redlock",
                "redis://c",
                "status"
            ])
            .expect("redlock"),
            Target::RedLock(vec![
                "redis://a".into(),
                "redis://b".into(),
                "redis://c".into()
            ])
        );
        assert_eq!(
            target(&["--sentinel", "redis://s", "--service", "orders", "status"])
                .expect("sentinel"),
            Target::Sentinel {
                sentinels: vec!["redis://s".into()],
                service: "orders".into()
            }
        );
        for refused in [
            &["--sentinel", "redis://s", "status"][..],
            &["--service", "orders", "status"],
            &["--cluster", "redis://a", "--redlock", "redis://b", "status"],
        ] {
            assert!(target(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn usage_is_refused_before_connecting() {
        for refused in [
            &["--prefix", "{app}:", "status"][..],
            &["unlock", "report"],
            &["run", "--lease", "1y", "job", "--", "true"],
        ] {
            let err = config(refused).expect_err("refused");
            assert!(err.use_stderr(), "{refused:?}");
        }
        let Action::Run(plan) = config(&["run", "--no-wait", "job", "--", "true"])
            .expect("run")
            .action
        else {
            panic!("run")
        };
        assert_eq!(
            (plan.lock.wait, plan.lock.lease),
            (Wait::No, Duration::from_secs(30))
        );
    }
}
