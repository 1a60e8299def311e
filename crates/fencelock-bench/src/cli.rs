//! The command line: which scenarios to run and with what settings.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::report::Output;
use crate::{
    bench_dir, election, handoff, market, peers, redlock, renewal, stuck, takeover, uncontended,
    waits, Result, Settings,
};

/// fencelock measured beside the limit of the same Redis and beside its peers, in one run.
#[derive(Debug, Parser)]
#[command(name = "fencelock-bench", version)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// Measured window of each measurement (`500ms`, `5s`, `1m`).
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Length of each market simulation run; the book's is 60 s.
    #[arg(long, global = true, default_value = "60s", value_parser = parse_duration)]
    market_duration: Duration,
    /// Worker counts of the contended scenarios.
    #[arg(long, global = true, value_delimiter = ',', default_value = "4,16,64")]
    workers: Vec<usize>,
    /// Concurrent tasks of the uncontended scenario.
    #[arg(long, global = true, value_delimiter = ',', default_value = "1,64")]
    tasks: Vec<usize>,
    /// Lease counts of the renewal scenario.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "10000,100000"
    )]
    leases: Vec<usize>,
    /// Lease of both sides of the election scenario (etcd rounds it up to whole seconds).
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    election_lease: Duration,
    /// Rounds of each takeover measurement of the election scenario.
    #[arg(long, global = true, default_value = "7", value_parser = clap::value_parser!(u32).range(1..=1000))]
    election_rounds: u32,
    /// Observer counts of the election scenario.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "0,1,10,100"
    )]
    observers: Vec<usize>,
    /// Leases of the takeover scenario.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "3s,10s,30s",
        value_parser = parse_duration
    )]
    takeover_leases: Vec<Duration>,
    /// Rounds of each measurement of the takeover and stuck scenarios.
    #[arg(long, global = true, default_value = "5", value_parser = clap::value_parser!(u32).range(1..=1000))]
    takeover_rounds: u32,
    /// Where results are written [default: bench/results].
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Peer settings to measure, e.g. `rslock-1ms,etcd` [default: all]: rslock, rslock-1ms,
    /// redis-py, redis-py-1ms, python-redis-lock, pottery, pottery-1ms, redlock, redlock-1ms,
    /// redis-semaphore, redis-semaphore-1ms, etcd.
    #[arg(long, global = true, value_delimiter = ',')]
    peers: Vec<String>,
    /// Where peers are installed [default: bench/peers].
    #[arg(long, global = true)]
    peers_dir: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
enum Scenario {
    /// Every scenario, in order.
    All,
    /// 1: lock+unlock cycles on distinct names vs bare round trips.
    Uncontended,
    /// 2: one name, W workers, every grant handed to a waiting worker.
    Handoff,
    /// 3: the peers beside fencelock, installed under the peers folder.
    Peers,
    /// 4: RedLock acquire latency on 5 masters vs 1.
    Redlock,
    /// 5: one client holding many renewed leases.
    Renewal,
    /// 6: the market simulation of "Redis in Action" 6.2.
    Market,
    /// 7: leader election takeover and observers, beside etcd.
    Election,
    /// 8: a lock's holder killed, terminated or paused, at each lease.
    Takeover,
    /// 9: the next waiter behind a first waiter that cannot claim the lock it is offered.
    Stuck,
    /// 10: what recording every wait for the wait-for graph costs.
    Waits,
    /// A fencelock election candidate driven on stdin, for the election scenario.
    #[command(hide = true)]
    ElectCandidate {
        url: String,
        name: String,
        lease_ms: u64,
    },
    /// Fencelock clients observing an election, for the election scenario.
    #[command(hide = true)]
    ElectObservers {
        url: String,
        name: String,
        count: usize,
    },
    /// A fencelock client holding or waiting for a mutex, driven on stdin, for the takeover
    /// scenario.
    #[command(hide = true)]
    LeaseHolder {
        url: String,
        name: String,
        lease_ms: u64,
        /// A FairMutex rather than a Mutex.
        #[arg(long)]
        fair: bool,
    },
}

/// Runs the command line and returns the process exit code: 0, 1 when a scenario failed, 2
/// on bad usage.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = Settings::new(
        cli.out
            .clone()
            .unwrap_or_else(|| bench_dir().join("results")),
        cli.peers_dir
            .clone()
            .unwrap_or_else(|| bench_dir().join("peers")),
    );
    settings.duration = cli.duration;
    settings.market_duration = cli.market_duration;
    settings.workers = cli.workers.clone();
    settings.tasks = cli.tasks.clone();
    settings.leases = cli.leases.clone();
    settings.peers = cli.peers.clone();
    settings.election_lease = cli.election_lease;
    settings.election_rounds = cli.election_rounds;
    settings.observers = cli.observers.clone();
    settings.takeover_leases = cli.takeover_leases.clone();
    settings.takeover_rounds = cli.takeover_rounds;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fencelock-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match &cli.scenario {
        Scenario::ElectCandidate {
            url,
            name,
            lease_ms,
        } => runtime.block_on(election::candidate_process(url, name, *lease_ms)),
        Scenario::ElectObservers { url, name, count } => {
            runtime.block_on(election::observers_process(url, name, *count))
        }
        Scenario::LeaseHolder {
            url,
            name,
            lease_ms,
            fair,
        } => runtime.block_on(takeover::holder_process(url, name, *lease_ms, *fair)),
        scenario => runtime.block_on(run(scenario, &settings)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fencelock-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(scenario: &Scenario, settings: &Settings) -> Result<()> {
    let output = Output::new(&settings.out)?;
    let run = settings.run_info.clone();
    println!(
        "fencelock-bench {} on {} cores ({}), {}, commit {}",
        run.date, run.cores, run.cpu_model, run.server, run.git_commit
    );
    let all = *scenario == Scenario::All;
    let chosen = |one: Scenario| all || *scenario == one;
    if chosen(Scenario::Uncontended) {
        uncontended::run(settings, &output).await?;
    }
    if chosen(Scenario::Handoff) {
        handoff::run(settings, &output).await?;
    }
    if chosen(Scenario::Peers) {
        peers::run(settings, &output).await?;
    }
    if chosen(Scenario::Redlock) {
        redlock::run(settings, &output).await?;
    }
    if chosen(Scenario::Renewal) {
        renewal::run(settings, &output).await?;
    }
    if chosen(Scenario::Market) {
        market::run(settings, &output).await?;
    }
    if chosen(Scenario::Election) {
        election::run(settings, &output).await?;
    }
    if chosen(Scenario::Takeover) {
        takeover::run(settings, &output).await?;
    }
    if chosen(Scenario::Stuck) {
        stuck::run(settings, &output).await?;
    }
    if chosen(Scenario::Waits) {
        waits::run(settings, &output).await?;
    }
    Ok(())
}

/// Parses `500ms`, `5s`, `2m` or a plain number of seconds.
fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("bad duration {text:?}: use e.g. 500ms, 5s or 2m");
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(bad()),
    };
    let duration = Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
    // A bound that keeps every deadline computed from it far from overflowing.
    if duration > Duration::from_secs(24 * 3600) {
        return Err(format!("duration {text:?} is longer than a day"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1e300s").is_err());
        assert!(parse_duration("25h").is_err());
    }
}
