//! The `fencelock` command: run a command while holding a distributed lock on Redis, and inspect
//! or release locks. The binary's `main` only calls [`main`]; everything else is here, on top of
//! the `fencelock` library.
//!
//! ```text
//! fencelock run NAME [--semaphore N [--permits K] | -s/--read | -x/--write | --fair |
//!                  --layout LIBRARY]
//!                  [--lease 30s] [-w/--wait 10s | -n/--no-wait] [-E N] [-q] [-v]
//!                  [--hold-at-least 5m] [--deadlock-check[=1s]] [--kill-grace 5s] [--] CMD [ARGS...]
//! fencelock hold NAME [the lock flags of run, without --kill-grace]
//! fencelock status [PATTERN] [--json] [--graph [--json | --dot] | --layout LIBRARY]
//! fencelock top [PATTERN] [--sort name|held|waiters|wait]
//! fencelock unlock NAME --force [--layout LIBRARY]
//! fencelock elect NAME [--value V] [--once] [--lease 30s] [--deadlock-check[=1s]]
//!                 [--kill-grace 5s] [--] CMD [ARGS...]
//! fencelock leader NAME [--watch] [--json]
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
mod elect;
mod holds;
mod lock;
mod output;
mod run;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use fencelock::{Client, ClientOptions, Deployment, Layout, LockInfo, Verdict};

pub use config::{Action, Busy, Config, GraphFormat, LockPlan, RunPlan, Target};
pub use duration::{parse_duration, DurationError};
pub use elect::ElectPlan;
pub use lock::{Wait, Want};
pub use top::SortKey;

const EXAMPLES: &str = "\
Examples:
  fencelock run nightly-report -- ./report.sh --date today
  fencelock run -n --lease 1m backup pg_dump -f /backups/db.sql mydb
  fencelock run -n -q --hold-at-least 5m cron:cleanup ./cleanup.sh
  fencelock hold deploy
  fencelock run --semaphore 4 uploads -- ./upload.sh
  fencelock status
  fencelock status 'backup*' --json
  fencelock unlock nightly-report --force
  fencelock elect scheduler -- ./run-scheduler
  fencelock leader scheduler --watch
  fencelock --redlock redis://a:6379,redis://b:6379,redis://c:6379 run report -- ./report.sh
  fencelock --cluster redis://node1:6379,redis://node2:6379 run --fair printer -- lp report.pdf
  fencelock --sentinel redis://s1:26379,redis://s2:26379 --service orders run report -- ./report.sh";

/// What `fencelock --help` ends with: the examples and every exit code.
fn after_help() -> String {
    format!("{EXAMPLES}\n\n{}", exit::help())
}

/// Distributed locks on Redis, for shell scripts and cron jobs.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version, about, after_help = after_help())]
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
    /// held when a majority granted it. Only plain mutexes (`run` and `hold` without a kind
    /// flag or --deadlock-check).
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
    #[arg(long, global = true, default_value = "fencelock:")]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock; release it when the command exits.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Hold a lock without a command: print its fence, hold it until standard input closes
    /// or a signal comes, then release it (to bracket several steps of a shell script).
    #[command(after_help = HOLD_HELP)]
    Hold(HoldArgs),
    /// Show the held locks under the prefix, elections included: holders, fencing token,
    /// lease, waiters.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// A live view of the locks with holders or waiters, refreshed every second.
    #[command(after_help = TOP_HELP)]
    Top(TopArgs),
    /// Release the locks under a name whoever holds them (for holders known to be gone).
    #[command(after_help = UNLOCK_HELP)]
    Unlock(UnlockArgs),
    /// Run a command whenever this instance leads an election; campaign again when it stops.
    #[command(after_help = elect::ELECT_HELP)]
    Elect(elect::ElectArgs),
    /// Print who leads an election, and with --watch each change.
    #[command(after_help = elect::LEADER_HELP)]
    Leader(elect::LeaderArgs),
}

const RUN_HELP: &str = "\
The lock is a mutex unless one of --semaphore, --read, --write, --fair or --layout says
otherwise; each kind has its own keys, so a mutex and a semaphore of one name do not exclude
each other. With --layout LIBRARY the lock is kept as that library keeps its own (redis-py,
node-redlock, go-redsync, rslock, pottery, redis-semaphore, python-redis-lock, redisson), so
that this run and that library's locks of NAME exclude each other; such a lock has no fencing
token, and `status` and `unlock` reach it with the same --layout and its name. A
semaphore's total is stored in Redis by the first run that finds none, and that stored total
rules for every run until it expires; give every run of a name the same N (a run whose N
differs prints a warning once it holds its permits).

The lock's lease is renewed while the command runs. The command gets FENCELOCK_NAME,
FENCELOCK_FENCE (the fencing token: pass it to what you write to, so stale writers can be
refused) and FENCELOCK_HOLDS (the locks it runs inside, for the fencelock commands it runs: their
waits count as holding them, so that a deadlock through this run is seen). If the lock is lost (Redis unreachable past the lease, or the lock removed), the
command's process group gets SIGTERM, then SIGKILL after --kill-grace, and fencelock exits 75.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to fencelock are passed to the command; the lock is
released when it exits. fencelock exits with the command's code (128+N if killed by signal N).
While it waits, fencelock keeps trying a Redis it cannot reach until --wait runs out (for 30 s
when there is no --wait), then exits 69.

A wait that lasts a second is recorded in Redis, so that `fencelock status --graph` shows who
waits for whom; with --deadlock-check, a run whose wait closes a cycle of waits gives up and
exits 79, naming the cycle, so that the others go on.

Exit codes: `fencelock --help` lists every one; -E N replaces 73 (held, with --no-wait) and 74
(--wait ran out), 75 means the lock was lost and the command stopped, 79 a deadlock.

Examples:
  fencelock run lottery ./draw-winners.sh
  fencelock run -n -q -E 0 --hold-at-least 5m cron:cleanup ./cleanup.sh
  fencelock run -w 1.5 -s catalog ./export-catalog
  fencelock run --wait 30s --lease 2m reindex -- ./reindex --full
  fencelock run --no-wait cron:cleanup -- sh -c 'cleanup && notify'
  fencelock run --semaphore 3 --permits 2 render -- ./render --threads 8
  fencelock run --read catalog -- ./export-catalog
  fencelock run --write catalog -- ./import-catalog
  fencelock run --fair --wait 10m printer -- lp report.pdf
  fencelock run --layout redis-py jobs:nightly ./nightly.sh";

const HOLD_HELP: &str = "\
Takes the lock as `run` does (the same flags), prints its fencing token on a line of its own
on standard output, and holds it, renewing its lease, until standard input reaches its end or
fencelock gets SIGINT, SIGTERM, SIGHUP or SIGQUIT; then releases it and exits 0. It exits 75 if
the lock is lost meanwhile. Standard input is read and thrown away: keep it open for as long
as the lock is to be held (a shell started in the background reads /dev/null, which ends at
once).

Examples:
  coproc fencelock hold deploy; read -r fence <&\"${COPROC[0]}\"
  ./step-one --fence \"$fence\" && ./step-two --fence \"$fence\"
  exec {COPROC[1]}>&-; wait \"$COPROC_PID\"";

const STATUS_HELP: &str = "\
PATTERN is a glob over lock names (* any characters, ? one, [abc] a set); default all.
Every kind under the prefix is listed: mutex (a multi-lock's names too), reentrant-mutex,
rwlock, semaphore, fair-mutex, and election (its leader). A lock kept in another library's
layout has no prefix: --layout LIBRARY with its name shows it; --graph and `top` show it only
through the waits recorded for it. HOLDER is the holder's host/pid (a read-write lock's holder
id, an election's published value), every grant's for a semaphore. HELD is the holds:
`2 read`, `1 write`, `2/3 permits` of a semaphore. REMAINING is the longest lease of the
holds. WAITING counts the clients (usually processes) waiting for a release, and the waiters
queued in Redis: a mutex's waiters, a fair mutex's line, a read-write lock's writers waiting
first. With --json, a failure is reported on standard error as one JSON object too:
{\"error\": \"...\", \"exit_code\": N}.

With --graph, prints the wait-for graph instead: each lock with its holders and the waiters
that recorded their wait (every wait that has lasted a second, by default), the tasks each
waiter waits for, the waiters that recorded none yet, and every deadlock (a cycle of waits);
--json prints it as one object, --dot as Graphviz dot. It exits 79 when it finds a deadlock,
80 when it cannot tell (some waiters recorded no wait) and 0 when there is none.

Examples:
  fencelock status
  fencelock status 'nightly-*' --json | jq '.[].holder'
  fencelock status --layout redis-py jobs:nightly
  fencelock status --graph
  fencelock status --graph --dot | dot -Tsvg > waits.svg";

const UNLOCK_HELP: &str = "\
Releases the locks of every kind held under NAME, under the prefix (an election's leadership
included), and wakes their waiters; the fence sequence, a fair mutex's line and a semaphore's
total are kept. With --layout LIBRARY it releases instead the lock NAME kept in that library's
layout, with that library's own release effects. Prints what it removed, or exits 78 when
nothing was held. A holder that is still alive learns at its next renewal that it lost the
lock.

Examples:
  fencelock unlock nightly-report --force
  fencelock unlock --layout redis-py jobs:nightly --force";

/// What `run` and `hold` share: the lock to take and how.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("primitive").args(["semaphore", "read", "write", "fair", "layout"])))]
struct LockArgs {
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
    /// Take a read hold of a read-write lock: runs alongside other readers, never a writer
    /// (-s, shared, as flock's).
    #[arg(long, short = 's', visible_alias = "shared")]
    read: bool,
    /// Take the write hold of a read-write lock: runs alone; waiting writers go before new
    /// readers (-x, exclusive, as flock's; it excludes -s runs, not plain mutex runs).
    #[arg(long, short = 'x', visible_alias = "exclusive")]
    write: bool,
    /// Take a fair mutex: waiting runs get it in the order they asked for it.
    #[arg(long)]
    fair: bool,
    /// Take a mutex kept in another library's layout, shared with the services that lock NAME
    /// with it: redis-py, node-redlock, go-redsync, rslock, pottery, redis-semaphore,
    /// python-redis-lock or redisson. NAME is that library's name of the lock, with no prefix
    /// added; the command gets no fencing token (FENCELOCK_FENCE is empty).
    #[arg(long, value_name = "LIBRARY", value_parser = parse_layout)]
    layout: Option<Layout>,
    /// Lease of the lock: how long it outlives fencelock if fencelock dies (renewed every third).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    lease: Duration,
    /// Wait at most this long for the lock (default: wait as long as it takes). A bare
    /// number is seconds: -w 1.5.
    #[arg(long, short = 'w', value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Do not wait: exit 73 at once if the lock is held, saying by whom.
    #[arg(long, short = 'n')]
    no_wait: bool,
    /// The exit code when the lock is busy (held with -n, or -w ran out), instead of 73 or 74.
    #[arg(long, short = 'E', value_name = "N")]
    conflict_exit_code: Option<u8>,
    /// Say nothing when the lock is busy (cron then mails no skipped run); other errors are
    /// still printed.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// While waiting, say on standard error every few seconds who holds the lock, how many
    /// wait and for how long this run has waited.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Keep the lock at least this long after it was taken, even when the command ends
    /// sooner: a run that starts shortly after another ended finds it still held (cron jobs
    /// whose instances start seconds apart).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    hold_at_least: Option<Duration>,
    /// Give up, exiting 79, when the wait for the lock closes a cycle of waits (a deadlock:
    /// another run waits for a lock this one holds while holding the one this one waits for),
    /// checked after waiting AFTER (1s when bare) and every AFTER after that; the message names
    /// each step of the cycle. The runs of a cycle that wait with it go on once this one gives
    /// up.
    #[arg(
        long,
        value_name = "AFTER",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1s",
        value_parser = parse_duration
    )]
    deadlock_check: Option<Duration>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    lock: LockArgs,
    /// After a lost lock, how long the command has to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_grace: Duration,
    /// The command and its arguments; `--` before it is needed only when the command starts
    /// with `-`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct HoldArgs {
    #[command(flatten)]
    lock: LockArgs,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// Glob over lock names.
    #[arg(default_value = "*")]
    pattern: String,
    /// Print JSON (an array of objects) instead of a table.
    #[arg(long)]
    json: bool,
    /// Print the wait-for graph: who holds each lock, who waits for it, which task waits for
    /// which, and every deadlock.
    #[arg(long)]
    graph: bool,
    /// Print the wait-for graph as Graphviz dot (implies --graph).
    #[arg(long, conflicts_with = "json")]
    dot: bool,
    /// The lock named PATTERN (a name, not a glob) kept in another library's layout, under
    /// that library's key with no prefix: redis-py, node-redlock, go-redsync, rslock, pottery,
    /// redis-semaphore, python-redis-lock or redisson.
    #[arg(long, value_name = "LIBRARY", value_parser = parse_layout, conflicts_with_all = ["graph", "dot"])]
    layout: Option<Layout>,
}

#[derive(Debug, Args)]
struct TopArgs {
    /// Glob over lock names: only the locks it matches are shown.
    #[arg(default_value = "*")]
    pattern: String,
    /// The first sort key: name, held, waiters or wait (`s` cycles them).
    #[arg(long, default_value = "name", value_parser = parse_sort_key)]
    sort: SortKey,
}

fn parse_sort_key(name: &str) -> Result<SortKey, String> {
    SortKey::parse(name).ok_or_else(|| format!("{name:?} is none of name, held, waiters, wait"))
}

const TOP_HELP: &str = "\
Shows, once a second, each lock with holders or recorded waiters: its kind, its holder's label
(`+N` more holders), how long it has been held, its waiters (recorded waits, or the clients
listening for its release) and the longest recorded wait, marked DEADLOCK when a cycle of waits
goes through it. Keys: q (or Ctrl-C) quits, s changes the sort key. On a pipe it prints one
snapshot.

Examples:
  fencelock top
  fencelock top 'billing:*' --sort wait
  fencelock top > snapshot.txt";

#[derive(Debug, Args)]
struct UnlockArgs {
    /// The lock's name.
    name: String,
    /// Required: this releases a lock someone else holds.
    #[arg(long)]
    force: bool,
    /// Release the lock NAME kept in another library's layout (as `run --layout`), with that
    /// library's own release effects, instead of the locks under the prefix.
    #[arg(long, value_name = "LIBRARY", value_parser = parse_layout)]
    layout: Option<Layout>,
}

/// A `--layout` by its library's name.
fn parse_layout(name: &str) -> Result<Layout, fencelock::Error> {
    name.parse()
}

/// A failure, with the exit code it maps to and the one-line message to print.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    /// What to print; nothing for a busy lock under `--quiet`.
    message: Option<String>,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: Some(message.into()),
        }
    }

    /// A failure that prints nothing.
    fn silent(code: u8) -> Self {
        Failure {
            code,
            message: None,
        }
    }

    /// The process exit code.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// `err` met talking to Redis at `target`, with a message that names where that is.
    fn at(target: &Target, err: fencelock::Error) -> Self {
        let failure = Failure::from(err);
        let said = failure.message.unwrap_or_default();
        let message = format!("cannot use Redis at {target}: {said}");
        Failure::new(failure.code, message)
    }

    /// Prints the message on standard error: a line of text, or for a command asked for
    /// JSON, one JSON object `{"error": message, "exit_code": code}`.
    fn print(&self, json: bool) {
        let Some(message) = &self.message else {
            return;
        };
        if json {
            let error = serde_json::json!({ "error": message, "exit_code": self.code });
            eprintln!("{error}");
        } else {
            eprintln!("fencelock: {message}");
        }
    }
}

impl From<fencelock::Error> for Failure {
    fn from(err: fencelock::Error) -> Self {
        use fencelock::Error as E;
        let code = match &err {
            E::InvalidName { .. }
            | E::InvalidOption { .. }
            | E::InvalidAddress { .. }
            | E::Unsupported { .. }
            | E::UnsupportedServer { .. } => exit::USAGE,
            E::Held { .. } => exit::HELD,
            E::Timeout { .. } => exit::TIMEOUT,
            E::NotHeld { .. } => exit::LOST,
            E::Deadlock { .. } => exit::DEADLOCK,
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
            eprintln!("fencelock: cannot start: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let json = matches!(
        config.action,
        Action::Status { json: true, .. } | Action::Leader { json: true, .. }
    );
    match runtime.block_on(dispatch(config)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.print(json);
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(config: Config) -> Result<u8, Failure> {
    let client = connect(&config.target, config.options).await?;
    let outcome = match config.action {
        Action::Run(plan) => run::run(&client, &config.target, plan).await,
        Action::Hold(plan) => run::hold(&client, &config.target, plan).await,
        Action::Status {
            pattern,
            graph: Some(format),
            ..
        } => graph(&client, &pattern, format).await,
        Action::Status {
            pattern,
            json,
            layout: Some(layout),
            ..
        } => foreign_status(&client, layout, &pattern, json).await,
        Action::Status { pattern, json, .. } => status(&client, &pattern, json).await,
        Action::Top { pattern, sort } => top::top(&client, &pattern, sort).await,
        Action::Unlock {
            name,
            layout: Some(layout),
        } => foreign_unlock(&client, layout, &name).await,
        Action::Unlock { name, .. } => unlock(&client, &name).await,
        Action::Elect(plan) => elect::elect(&client, &config.target, plan).await,
        Action::Leader { name, watch, json } => {
            let args = elect::LeaderArgs { name, watch, json };
            elect::leader(&client, &config.target, args).await
        }
    };
    // A guard an error path dropped only queued its release, and the runtime ends when this
    // returns: the shutdown gives back whatever is still held (a leadership is resigned).
    // The outcome is the action's.
    if let Err(e) = client.shutdown().await {
        eprintln!("fencelock: {e}");
    }
    outcome
}

async fn connect(target: &Target, options: ClientOptions) -> Result<Client, Failure> {
    let deployment = match target {
        Target::Single(url) => Deployment::server(url.as_str()),
        Target::RedLock(masters) => Deployment::redlock(masters.iter().map(String::as_str)),
        Target::Cluster(nodes) => Deployment::cluster(nodes.iter().map(String::as_str)),
        Target::Sentinel { sentinels, service } => {
            Deployment::sentinel(sentinels.iter().map(String::as_str), service)
        }
    };
    let client = match deployment {
        Ok(deployment) => Client::connect_with_options(deployment, options).await,
        Err(e) => Err(e),
    };
    // A wrong address is refused with what is expected there (`Error::InvalidAddress`).
    client.map_err(|e| Failure::at(target, e))
}

/// `host/pid`, shown to operators as the holder of this process's locks.
fn holder_label() -> String {
    ClientOptions::process_label()
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

async fn graph(client: &Client, pattern: &str, format: GraphFormat) -> Result<u8, Failure> {
    let graph = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let line = output::ProgressLine::default();
        let graph = client
            .wait_graph_with_progress(pattern, &|seen| line.show(seen))
            .await;
        line.clear();
        graph?
    } else {
        client.wait_graph(pattern).await?
    };
    output::print(&match format {
        GraphFormat::Text => output::graph_text(&graph),
        GraphFormat::Json => output::graph_json(&graph),
        GraphFormat::Dot => output::graph_dot(&graph),
    });
    Ok(match graph.verdict() {
        Verdict::Deadlock => exit::DEADLOCK,
        Verdict::Unknown => exit::UNSEEN_WAITS,
        _ => exit::SUCCESS,
    })
}

/// `status --layout`: the one lock `name` kept in `layout`.
async fn foreign_status(
    client: &Client,
    layout: Layout,
    name: &str,
    json: bool,
) -> Result<u8, Failure> {
    let lock = client.foreign_mutex(layout, name)?;
    let locks: Vec<LockInfo> = lock.info().await?.into_iter().collect();
    let text = if json {
        output::json(&locks)
    } else {
        output::table(&locks)
    };
    output::print(&text);
    Ok(exit::SUCCESS)
}

/// `unlock --layout --force`: the lock `name` kept in `layout`, released whoever holds it.
async fn foreign_unlock(client: &Client, layout: Layout, name: &str) -> Result<u8, Failure> {
    let lock = client.foreign_mutex(layout, name)?;
    match lock.force_unlock().await? {
        Some(info) => {
            output::print(&format!("removed {}\n", output::describe(&info)));
            Ok(exit::SUCCESS)
        }
        None => Err(Failure::new(
            exit::NOT_HELD,
            format!("no lock named {name:?} is held in {layout}'s layout"),
        )),
    }
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
            "fencelock",
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
        assert_eq!(run.lock.lease, Duration::from_secs(60));
        assert!(run.lock.no_wait);
        assert!(Cli::try_parse_from([
            "fencelock",
            "run",
            "job",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "x"
        ])
        .is_err());
        assert!(
            Cli::try_parse_from(["fencelock", "run", "job", "--lease", "1m30", "--", "x"]).is_err()
        );
        assert!(Cli::try_parse_from(["fencelock", "run", "job"]).is_err());
    }

    fn plan(args: &[&str]) -> Result<RunPlan, clap::Error> {
        let line = ["fencelock", "run"].iter().chain(args);
        match Config::from_args(line)?.action {
            Action::Run(plan) => Ok(plan),
            other => panic!("run, got {other:?}"),
        }
    }

    #[test]
    fn short_flags_read_as_flock_s() {
        let short = plan(&["-n", "-q", "-E", "0", "job", "true"]).expect("short flags");
        assert_eq!(short.lock.wait, Wait::No);
        assert_eq!(
            short.lock.busy,
            Busy {
                exit_code: Some(0),
                quiet: true
            }
        );
        let waiting = plan(&["-w", "1.5", "-s", "-v", "job", "true"]).expect("-w -s");
        assert_eq!(waiting.lock.wait, Wait::AtMost(Duration::from_millis(1500)));
        assert_eq!(waiting.lock.want, Want::Read);
        assert!(waiting.lock.verbose);
        assert_eq!(
            plan(&["-x", "job", "true"]).expect("-x").lock.want,
            Want::Write
        );
        assert!(plan(&["-s", "-x", "job", "true"]).is_err());
        assert!(plan(&["-n", "-w", "1", "job", "true"]).is_err());
        assert!(plan(&["-E", "256", "job", "true"]).is_err());
    }

    #[test]
    fn the_command_needs_no_double_dash() {
        let bare = plan(&["job", "echo", "--lease", "-n"]).expect("bare command");
        assert_eq!(bare.command, ["echo", "--lease", "-n"]);
        assert_eq!(bare.lock.name, "job");
        assert_eq!(bare.lock.wait, Wait::Forever);
        let dashed = plan(&["job", "--", "-weird-program"]).expect("after --");
        assert_eq!(dashed.command, ["-weird-program"]);
        let held = plan(&["--hold-at-least", "5m", "job", "true"]).expect("hold at least");
        assert_eq!(held.lock.hold_at_least, Some(Duration::from_secs(300)));
        assert!(plan(&["job", "--bogus"]).is_err());
        assert!(plan(&["job"]).is_err());
    }

    #[test]
    fn hold_takes_the_lock_flags_and_no_command() {
        let config = Config::from_args(["fencelock", "hold", "-n", "-s", "deploy"]).expect("hold");
        let Action::Hold(plan) = config.action else {
            panic!("hold")
        };
        assert_eq!((plan.want, plan.wait), (Want::Read, Wait::No));
        assert!(Config::from_args(["fencelock", "hold", "deploy", "true"]).is_err());
    }

    fn want(args: &[&str]) -> Result<Want, clap::Error> {
        let mut line = vec!["fencelock", "run"];
        line.extend_from_slice(args);
        line.extend_from_slice(&["--", "true"]);
        match Config::from_args(line)?.action {
            Action::Run(plan) => Ok(plan.lock.want),
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
        assert_eq!(
            want(&["--layout", "python-redis-lock", "job"]).expect("foreign"),
            Want::Foreign(fencelock::Layout::PythonRedisLock)
        );
        assert!(want(&["--layout", "redis", "job"]).is_err());
        for conflicting in [
            &["--read", "--write", "job"][..],
            &["--fair", "--semaphore", "2", "job"],
            &["--read", "--fair", "job"],
            &["--layout", "redis-py", "--fair", "job"],
            &["--permits", "2", "job"],
            &["--semaphore", "0", "job"],
            &["--semaphore", "2", "--permits", "0", "job"],
        ] {
            assert!(want(conflicting).is_err(), "{conflicting:?}");
        }
    }
}
