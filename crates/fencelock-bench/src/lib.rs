//! `fencelock-bench`: fencelock measured beside the limit of the same Redis and beside the libraries
//! its users would otherwise pick, in one run, against the same server, reported as ratios.
//!
//! Each scenario is a module with a `measure` function (the numbers) and a `run` function (the
//! numbers, printed and written under the results folder as JSON, Markdown and a PNG chart).
//! The binary is a thin layer over [`main`].

mod cli;
pub mod election;
pub mod error;
pub mod grants;
pub mod handoff;
pub mod latency;
pub mod machine;
pub mod market;
pub mod peers;
pub mod progress;
pub mod redisinfo;
pub mod redlock;
pub mod renewal;
pub mod report;
pub mod server;
pub mod stuck;
pub mod takeover;
pub mod uncontended;
pub mod waits;

use std::path::PathBuf;
use std::time::Duration;

use tokio::task::JoinSet;

pub use cli::main;
pub use error::{Error, Result};

use machine::RunInfo;

/// What every scenario is run with.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The measured window of each measurement (the market has its own).
    pub duration: Duration,
    /// The length of each market simulation run.
    pub market_duration: Duration,
    /// Concurrent tasks of the uncontended scenario.
    pub tasks: Vec<usize>,
    /// Worker counts of the contended scenarios.
    pub workers: Vec<usize>,
    /// How long a holder holds in the handoff mode.
    pub hold: Duration,
    /// Lease counts of the renewal scenario.
    pub leases: Vec<usize>,
    /// The lease of both sides of the election scenario.
    pub election_lease: Duration,
    /// Rounds of each takeover measurement of the election scenario.
    pub election_rounds: u32,
    /// Observer counts of the election scenario.
    pub observers: Vec<usize>,
    /// The leases of the takeover scenario.
    pub takeover_leases: Vec<Duration>,
    /// Rounds of each measurement of the takeover and stuck scenarios.
    pub takeover_rounds: u32,
    /// The `fencelock-bench` binary, run again for the election's candidates and observers and
    /// the takeover's holders.
    pub program: PathBuf,
    /// Where results are written.
    pub out: PathBuf,
    /// Where peers are installed.
    pub peers_dir: PathBuf,
    /// Which peer settings to measure, by worker variant (`rslock`, `redis-py-1ms`, …); all
    /// when empty.
    pub peers: Vec<String>,
    /// The circumstances of this run.
    pub run_info: RunInfo,
}

impl Settings {
    /// The defaults of a full run, writing to `out` and installing peers into `peers_dir`.
    pub fn new(out: PathBuf, peers_dir: PathBuf) -> Settings {
        Settings {
            duration: Duration::from_secs(5),
            market_duration: Duration::from_secs(60),
            tasks: vec![1, 64],
            workers: vec![4, 16, 64],
            hold: Duration::from_millis(1),
            leases: vec![10_000, 100_000],
            election_lease: Duration::from_secs(2),
            election_rounds: 7,
            observers: vec![0, 1, 10, 100],
            takeover_leases: [3, 10, 30].map(Duration::from_secs).to_vec(),
            takeover_rounds: 5,
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fencelock-bench")),
            out,
            peers_dir,
            peers: Vec::new(),
            run_info: RunInfo::collect(server_version()),
        }
    }
}

/// The server the bench starts (`REDIS_SERVER`, else `redis-server`), as its `--version`
/// names it: `Redis 7.0.15` from `Redis server v=7.0.15 …`, `Valkey 8.1.8` from
/// `Valkey server v=8.1.8 …`; `unknown` when it does not say.
pub fn server_version() -> String {
    let program = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            let mut words = text.split_whitespace();
            let product = words.next()?;
            let version = words.find_map(|w| w.strip_prefix("v="))?;
            Some(format!("{product} {version}"))
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The workspace's `bench/` folder, where results and installed peers live by default.
pub fn bench_dir() -> PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/fencelock-bench sits two levels below the workspace root.
    crate_dir
        .ancestors()
        .nth(2)
        .unwrap_or(crate_dir)
        .join("bench")
}

/// Waits for every task of `set` (the `who` of a run: workers, players) and returns their
/// outputs, or the first error, or [`Error::Stuck`] when they are not all done within `bound`
/// of the call. The tasks still running when it returns are aborted.
pub(crate) async fn join_within<T: 'static>(
    mut set: JoinSet<Result<T>>,
    bound: Duration,
    who: &str,
) -> Result<Vec<T>> {
    let all = async {
        let mut outputs = Vec::with_capacity(set.len());
        while let Some(joined) = set.join_next().await {
            let output = joined
                .map_err(|e| Error::Stuck(format!("one of the {who} ended abnormally: {e}")))?;
            outputs.push(output?);
        }
        Ok(outputs)
    };
    // Dropping `set` on return aborts what still runs.
    tokio::time::timeout(bound, all).await.unwrap_or_else(|_| {
        Err(Error::Stuck(format!(
            "{who} still running {bound:?} after the start"
        )))
    })
}
