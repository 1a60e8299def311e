//! The rslock worker: the peers' worker protocol (../README.md) on rslock's `LockManager`.
//!
//! Usage: `rslock-worker rslock URL NAME COUNTER MODE ITERATIONS LEASE_MS [hold_ms=N] [gap_ms=N]`,
//! or `rslock-worker rslock --version`.

use std::process::ExitCode;
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};
use redis::AsyncCommands;
use rslock::{Lock, LockManager};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

/// The Cargo.lock this worker is built with: its `rslock` entry is the version that runs.
const LOCKFILE: &str = include_str!("../Cargo.lock");

type Fallible<T> = Result<T, String>;

struct Args {
    url: String,
    name: String,
    counter: String,
    mode: String,
    iterations: u64,
    lease: Duration,
    hold: Duration,
    gap: Duration,
}

fn parse() -> Fallible<Option<Args>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("rslock") {
        return Err("the first argument is the peer, and this worker runs `rslock`".to_owned());
    }
    if args.get(1).map(String::as_str) == Some("--version") {
        return Ok(None);
    }
    if args.len() < 7 {
        return Err(
            "usage: rslock-worker rslock URL NAME COUNTER MODE ITERATIONS LEASE_MS [hold_ms=N] \
             [gap_ms=N]"
                .to_owned(),
        );
    }
    let number = |what: &str, text: &str| {
        text.parse::<u64>()
            .map_err(|_| format!("{what} is not a whole number: {text:?}"))
    };
    let mut parsed = Args {
        url: args[1].clone(),
        name: args[2].clone(),
        counter: args[3].clone(),
        mode: args[4].clone(),
        iterations: number("ITERATIONS", &args[5])?,
        lease: Duration::from_millis(number("LEASE_MS", &args[6])?),
        hold: Duration::from_millis(2),
        gap: Duration::ZERO,
    };
    for option in &args[7..] {
        match option.split_once('=') {
            Some(("hold_ms", ms)) => parsed.hold = Duration::from_millis(number("hold_ms", ms)?),
            Some(("gap_ms", ms)) => parsed.gap = Duration::from_millis(number("gap_ms", ms)?),
            _ => return Err(format!("unknown option {option:?}")),
        }
    }
    Ok(Some(parsed))
}

fn version() -> Fallible<String> {
    let mut lines = LOCKFILE.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"rslock\"" {
            if let Some(version) = lines
                .next()
                .and_then(|l| l.strip_prefix("version = \""))
                .and_then(|l| l.strip_suffix('"'))
            {
                return Ok(version.to_owned());
            }
        }
    }
    Err("no rslock in Cargo.lock".to_owned())
}

/// CLOCK_MONOTONIC in nanoseconds: the clock every worker stamps its lines with, so that the
/// stamps of processes in different languages compare.
fn now() -> u128 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::from(t).as_nanos())
        .unwrap_or(0)
}

fn say(line: &str) {
    println!("{line}");
}

struct Worker {
    args: Args,
    manager: LockManager,
    redis: redis::aio::MultiplexedConnection,
    stdin: Lines<BufReader<Stdin>>,
}

impl Worker {
    async fn line(&mut self) -> Fallible<Option<String>> {
        self.stdin
            .next_line()
            .await
            .map_err(|e| format!("reading stdin: {e}"))
    }

    /// Waits until the lock is held: rslock's `acquire_no_guard` tries 3 times, 0-200 ms
    /// apart, and starts again until it wins.
    async fn acquire(&self) -> Fallible<Lock> {
        self.manager
            .acquire_no_guard(self.args.name.as_bytes(), self.args.lease)
            .await
            .map_err(|e| format!("acquire: {e}"))
    }

    /// One attempt, no retry.
    async fn try_acquire(&self) -> Fallible<Option<Lock>> {
        let mut once = LockManager::new(vec![self.args.url.clone()]);
        once.set_retry(1, Duration::from_millis(1));
        match once.lock(self.args.name.as_bytes(), self.args.lease).await {
            Ok(lock) => Ok(Some(lock)),
            Err(rslock::LockError::Unavailable) => Ok(None),
            Err(e) => Err(format!("try: {e}")),
        }
    }

    async fn critical_section(&mut self) -> Fallible<()> {
        let redis = &mut self.redis;
        let counter = self.args.counter.as_str();
        let err = |e: redis::RedisError| format!("critical section: {e}");
        let inside: i64 = redis
            .incr(format!("{counter}:inside"), 1)
            .await
            .map_err(err)?;
        if inside != 1 {
            let _: i64 = redis
                .incr(format!("{counter}:overlaps"), 1)
                .await
                .map_err(err)?;
            say(&format!("OVERLAP {inside}"));
        }
        let value: Option<i64> = redis.get(counter).await.map_err(err)?;
        tokio::time::sleep(self.args.hold).await;
        let () = redis
            .set(counter, value.unwrap_or(0) + 1)
            .await
            .map_err(err)?;
        let _: i64 = redis
            .decr(format!("{counter}:inside"), 1)
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn run_loop(&mut self) -> Fallible<()> {
        for _ in 0..self.args.iterations {
            let lock = self.acquire().await?;
            let enter = now();
            self.critical_section().await?;
            let exit = now();
            self.manager.unlock(&lock).await;
            say(&format!("SECTION {enter} {exit}"));
            tokio::time::sleep(self.args.gap).await;
        }
        Ok(())
    }

    /// Holds until told `RELEASE` (or stdin closes), extending the lease every third of it:
    /// rslock does not renew by itself.
    async fn run_hold(&mut self) -> Fallible<()> {
        let mut lock = self.acquire().await?;
        say(&format!("HELD {}", now()));
        let mut lost = false;
        let mut renew = tokio::time::interval(self.args.lease / 3);
        renew.tick().await;
        loop {
            tokio::select! {
                line = self.line() => {
                    match line?.as_deref() {
                        Some("RELEASE") | None => break,
                        Some(other) => return Err(format!("unexpected line {other:?}")),
                    }
                }
                _ = renew.tick(), if !lost => {
                    match self.manager.extend(&lock, self.args.lease).await {
                        Ok(extended) => lock = extended,
                        Err(_) => {
                            lost = true;
                            say(&format!("LOST {}", now()));
                        }
                    }
                }
            }
        }
        self.manager.unlock(&lock).await;
        say(&format!("RELEASED {}", now()));
        Ok(())
    }

    async fn run_wait(&mut self) -> Fallible<()> {
        let lock = match self.try_acquire().await? {
            Some(lock) => lock,
            None => {
                say(&format!("WAITING {}", now()));
                self.acquire().await?
            }
        };
        say(&format!("ACQUIRED {}", now()));
        self.manager.unlock(&lock).await;
        say(&format!("RELEASED {}", now()));
        Ok(())
    }
}

async fn run(args: Args) -> Fallible<()> {
    let client = redis::Client::open(args.url.as_str()).map_err(|e| format!("URL: {e}"))?;
    let redis = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let manager = LockManager::new(vec![args.url.clone()]);
    let stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut worker = Worker {
        args,
        manager,
        redis,
        stdin,
    };
    say("READY");
    match worker.line().await?.as_deref() {
        Some("GO") => {}
        other => return Err(format!("expected GO, read {other:?}")),
    }
    match worker.args.mode.as_str() {
        "loop" => worker.run_loop().await?,
        "hold" => worker.run_hold().await?,
        "wait" => worker.run_wait().await?,
        other => return Err(format!("unknown mode {other:?}")),
    }
    say("DONE");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let outcome = match parse() {
        Ok(None) => version().map(|v| say(&format!("rslock {v}"))),
        Ok(Some(args)) => run(args).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rslock-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
