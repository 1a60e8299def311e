//! The `relock` command: run a command while holding a distributed lock on Redis, and inspect
//! or release locks. The binary's `main` only calls [`main`]; everything else is here, on top of
//! the `relock` library.
//!
//! ```text
//! relock run NAME [--semaphore N [--permits K] | --read | --write | --fair]
//!                  [--lease 30s] [--wait 10s | --no-wait] [--kill-grace 5s] -- CMD [ARGS...]
//! relock status [PATTERN] [--json]
//! relock unlock NAME --force
//! ```
//!
//! Redis is found from `--redis URL`, else `REDIS_URL`, else `redis://127.0.0.1:6379`;
//! `rediss://` and `redis://user:password@host` work. `--redlock URL,URL,...` holds mutexes on
//! a majority of independent masters instead, `--cluster URL,URL,...` uses a Redis Cluster and
//! `--sentinel URL,... --service NAME` the master a Sentinel deployment names. Exit codes are
//! in [`exit`].

pub mod exit;

mod config;
mod duration;
mod lock;
mod output;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use relock::{Client, ClientOptions, SentinelOptions};

pub use config::{Action, Config, RunPlan, Target};
pub use duration::{parse_duration, DurationError};
pub use lock::{Wait, Want};

const EXAMPLES: &str = "\
Examples:
  relock run nightly-report -- ./report.sh --date today
  relock run --no-wait --lease 1m backup -- pg_dump -f /backups/db.sql mydb
  relock run --semaphore 4 uploads -- ./upload.sh
  relock status
  relock status 'backup*' --json
  relock unlock nightly-report --force
  relock --redlock redis://a:6379,redis://b:6379,redis://c:6379 run report -- ./report.sh
  relock --cluster redis://node1:6379,redis://node2:6379 run --fair printer -- lp report.pdf
  relock --sentinel redis://s1:26379,redis://s2:26379 --service orders run report -- ./report.sh";

/// Distributed locks on Redis, for shell scripts and cron jobs.
#[derive(Debug, Parser)]
#[command(name = "relock", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// Redis to use.
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis: String,
    /// Independent Redis masters for RedLock (comma-separated or repeated; 3 or 5): a lock is
    /// held when a majority granted it. Only mutexes (`run` without a kind flag).
    #[arg(long, global = true, value_name = "URL", value_delimiter = ',')]
    redlock: Vec<String>,
    /// Nodes of a Redis Cluster (comma-separated or repeated; one that answers is enough):
    /// every kind of lock runs on the master of its name's slot.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        value_delimiter = ',',
        conflicts_with = "redlock"
    )]
    cluster: Vec<String>,
    /// Sentinels of a Redis Sentinel deployment (comma-separated or repeated), with
    /// --service: locks run on the master they name, followed across failovers.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        value_delimiter = ',',
        requires = "service",
        conflicts_with_all = ["redlock", "cluster"]
    )]
    sentinel: Vec<String>,
    /// The name the sentinels monitor the master under (with --sentinel).
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel")]
    service: Option<String>,
    /// Namespace of the lock keys; must match the programs you coordinate with.
    #[arg(long, global = true, default_value = "relock:")]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock; release it when the command exits.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Show the locks of every kind that are held: holders, fencing token, lease, waiters.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Release the locks under a name whoever holds them (for holders known to be gone).
    #[command(after_help = UNLOCK_HELP)]
    Unlock(UnlockArgs),
}

const RUN_HELP: &str = "\
The lock is a mutex unless one of --semaphore, --read, --write or --fair says otherwise; each
kind has its own keys, so a mutex and a semaphore of one name do not exclude each other. A
semaphore's total is stored in Redis by the first run that finds none, and that stored total
rules for every run until it expires; give every run of a name the same N.

The lock's lease is renewed while the command runs. The command gets RELOCK_NAME and
RELOCK_FENCE (the fencing token: pass it to what you write to, so stale writers can be
refused). If the lock is lost (Redis unreachable past the lease, or the lock removed), the
command's process group gets SIGTERM, then SIGKILL after --kill-grace, and relock exits 75.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to relock are passed to the command; the lock is
released when it exits. relock exits with the command's code (128+N if killed by signal N).

Exit codes: 64 bad usage, 69 Redis unreachable, 70 unexpected Redis error, 73 held (--no-wait),
74 timed out (--wait), 75 lock lost, 77 credentials refused, 127 command not started.

Examples:
  relock run lottery -- ./draw-winners.sh
  relock run --wait 30s --lease 2m reindex -- ./reindex --full
  relock run --no-wait cron:cleanup -- sh -c 'cleanup && notify'
  relock run --semaphore 3 --permits 2 render -- ./render --threads 8
  relock run --read catalog -- ./export-catalog
  relock run --write catalog -- ./import-catalog
  relock run --fair --wait 10m printer -- lp report.pdf";

const STATUS_HELP: &str = "\
PATTERN is a glob over lock names (* any characters, ? one, [abc] a set); default all.
Every kind is listed: mutex, reentrant-mutex, rwlock, semaphore, fair-mutex. HOLDER is the
holder's host/pid (a read-write lock's holder id; a semaphore records none). HELD is the
holds: `2 read`, `1 write`, `2/3 permits` of a semaphore. REMAINING is the longest lease of
the holds. WAITING counts the clients (usually processes) waiting for a release, and the
waiters queued in Redis: a mutex's waiters, a fair mutex's line, a read-write lock's
writers waiting first.

Examples:
  relock status
  relock status 'nightly-*' --json | jq '.[].holder'";

const UNLOCK_HELP: &str = "\
Releases the locks of every kind held under NAME and wakes their waiters; the fence sequence,
a fair mutex's line and a semaphore's total are kept. Prints what it removed, or exits 78 when
nothing was held. A holder that is still alive
learns at its next renewal that it lost the lock.

Examples:
  relock unlock nightly-report --force";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("primitive").args(["semaphore", "read", "write", "fair"])))]
struct RunArgs {
    /// The lock's name.
    name: String,
    /// Take permits of a semaphore of N permits in all instead of a mutex: up to N runs at once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    semaphore: Option<u32>,
    /// With --semaphore: how many permits this run takes.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 1,
        requires = "semaphore",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    permits: u32,
    /// Take a read hold of a read-write lock: runs alongside other readers, never a writer.
    #[arg(long)]
    read: bool,
    /// Take the write hold of a read-write lock: runs alone; waiting writers go before new
    /// readers.
    #[arg(long)]
    write: bool,
    /// Take a fair mutex: waiting runs get it in the order they asked for it.
    #[arg(long)]
    fair: bool,
    /// Lease of the lock: how long it outlives relock if relock dies (renewed every third).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    lease: Duration,
    /// Wait at most this long for the lock (default: wait as long as it takes).
    #[arg(long, value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Do not wait: exit 73 at once if the lock is held, saying by whom.
    #[arg(long)]
    no_wait: bool,
    /// After a lost lock, how long the command has to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_grace: Duration,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// Glob over lock names.
    #[arg(default_value = "*")]
    pattern: String,
    /// Print JSON (an array of objects) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct UnlockArgs {
    /// The lock's name.
    name: String,
    /// Required: this releases a lock someone else holds.
    #[arg(long)]
    force: bool,
}

/// A failure, with the exit code it maps to and the one-line message to print.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// The process exit code.
    pub fn code(&self) -> u8 {
        self.code
    }
}

impl From<relock::Error> for Failure {
    fn from(err: relock::Error) -> Self {
        use relock::Error as E;
        let code = match &err {
            E::InvalidName { .. }
            | E::InvalidOption { .. }
            | E::Unsupported { .. }
            | E::UnsupportedServer { .. } => exit::USAGE,
            E::Held { .. } => exit::HELD,
            E::Timeout { .. } => exit::TIMEOUT,
            E::NotHeld { .. } => exit::LOST,
            _ if err.is_auth_failure() => exit::NOPERM,
            _ if err.is_bad_target() => exit::USAGE,
            _ if err.is_unavailable() => exit::UNAVAILABLE,
            _ => exit::SOFTWARE,
        };
        Failure::new(code, err.to_string())
    }
}

/// Parses the command line, runs the command, prints a one-line message on failure, and
/// returns the exit code.
pub fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args_os()) {
        Ok(config) => config,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("relock: cannot start: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    match runtime.block_on(dispatch(config)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("relock: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(config: Config) -> Result<u8, Failure> {
    let client = connect(&config.target, config.options).await?;
    match config.action {
        Action::Run(plan) => run::run(&client, plan).await,
        Action::Status { pattern, json } => status(&client, &pattern, json).await,
        Action::Unlock { name } => unlock(&client, &name).await,
    }
}

async fn connect(target: &Target, options: ClientOptions) -> Result<Client, Failure> {
    let options = options.holder_label(holder_label());
    let client = match target {
        Target::Single(url) => Client::connect_with_options(url.as_str(), options).await,
        Target::RedLock(masters) => {
            Client::connect_redlock_with_options(masters.iter().map(String::as_str), options).await
        }
        Target::Cluster(nodes) => {
            Client::connect_cluster_with_options(nodes.iter().map(String::as_str), options).await
        }
        Target::Sentinel { sentinels, service } => {
            Client::connect_sentinel_with_options(
                sentinels.iter().map(String::as_str),
                service,
                SentinelOptions::default(),
                options,
            )
            .await
        }
    };
    client.map_err(|e| {
        let failure = Failure::from(e);
        let message = format!("cannot use Redis at {target}: {}", failure.message);
        Failure::new(failure.code, message)
    })
}

/// `host/pid`, shown to operators as the holder of this process's locks.
fn holder_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace(':', "_"))
        .unwrap_or_else(|_| "unknown-host".to_owned());
    let mut label = format!("{host}/{}", std::process::id());
    label.truncate(128);
    label
}

async fn status(client: &Client, pattern: &str, json: bool) -> Result<u8, Failure> {
    let locks = client.locks(pattern).await?;
    let text = if json {
        output::json(&locks)
    } else {
        output::table(&locks)
    };
    output::print(&text);
    Ok(exit::SUCCESS)
}

async fn unlock(client: &Client, name: &str) -> Result<u8, Failure> {
    let removed = client.force_unlock(name).await?;
    if removed.is_empty() {
        return Err(Failure::new(
            exit::NOT_HELD,
            format!("no lock named {name:?} is held"),
        ));
    }
    let mut said = String::new();
    for info in &removed {
        said.push_str(&format!("removed {}\n", output::describe(info)));
    }
    output::print(&said);
    Ok(exit::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_reads_as_documented() {
        let cli = Cli::try_parse_from([
            "relock",
            "run",
            "job",
            "--no-wait",
            "--lease",
            "1m",
            "--",
            "echo",
            "--lease",
        ])
        .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert_eq!(run.command, ["echo", "--lease"]);
        assert_eq!(run.lease, Duration::from_secs(60));
        assert!(run.no_wait);
        assert!(Cli::try_parse_from([
            "relock",
            "run",
            "job",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "x"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["relock", "run", "job", "--lease", "30", "--", "x"]).is_err());
        assert!(Cli::try_parse_from(["relock", "run", "job"]).is_err());
    }

    fn want(args: &[&str]) -> Result<Want, clap::Error> {
        let mut line = vec!["relock", "run"];
        line.extend_from_slice(args);
        line.extend_from_slice(&["--", "true"]);
        match Config::from_args(line)?.action {
            Action::Run(plan) => Ok(plan.want),
            other => panic!("run, got {other:?}"),
        }
    }

    #[test]
    fn one_kind_of_lock_per_run() {
        assert_eq!(want(&["job"]).expect("mutex"), Want::Mutex);
        assert_eq!(
            want(&["--semaphore", "3", "job"]).expect("semaphore"),
            Want::Semaphore {
                total: 3,
                permits: 1
            }
        );
        assert_eq!(
            want(&["job", "--semaphore", "3", "--permits", "2"]).expect("permits"),
            Want::Semaphore {
                total: 3,
                permits: 2
            }
        );
        assert_eq!(want(&["--read", "job"]).expect("read"), Want::Read);
        assert_eq!(want(&["--write", "job"]).expect("write"), Want::Write);
        assert_eq!(want(&["--fair", "job"]).expect("fair"), Want::Fair);
        for conflicting in [
            &["--read", "--write", "job"][..],
            &["--fair", "--semaphore", "2", "job"],
            &["--read", "--fair", "job"],
            &["--permits", "2", "job"],
            &["--semaphore", "0", "job"],
            &["--semaphore", "2", "--permits", "0", "job"],
        ] {
            assert!(want(conflicting).is_err(), "{conflicting:?}");
        }
    }
}
