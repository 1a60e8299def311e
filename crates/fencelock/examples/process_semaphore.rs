//! A semaphore across processes: five worker processes share two permits of `renderers`, so at
//! most two of them render at once, wherever they run.
//!
//! `cargo run -p fencelock --example process_semaphore` starts the five workers itself (copies of
//! this program, given `WORKER`) against the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`). Each worker reports when it starts and ends rendering; from those
//! reports this program counts how many rendered at once, and fails if that ever exceeds the
//! permits.

use std::error::Error;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::Client;

const WORKERS: usize = 5;
const PERMITS: u32 = 2;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [worker] => render(worker).await,
        [] => run_workers().await,
        _ => Err("usage: process_semaphore [WORKER]".into()),
    }
}

/// One worker: what each instance of a service runs.
async fn render(worker: &str) -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str()).await?;
    let renderers = client.semaphore("renderers", PERMITS)?;
    let permit = renderers.acquire().await?;
    println!("worker {worker}: rendering from {} us", now_us()?);
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("worker {worker}: done at {} us", now_us()?);
    permit.release().await?;
    client.shutdown().await?;
    Ok(())
}

/// Starts the workers (with this program's environment, `REDIS_URL` included) and counts,
/// from their reports, the most that rendered at once.
async fn run_workers() -> Result<(), Box<dyn Error>> {
    let program = std::env::current_exe()?;
    let mut workers = Vec::new();
    for worker in 1..=WORKERS {
        let child = tokio::process::Command::new(&program)
            .arg(worker.to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        workers.push(child);
    }
    // (time, +1 at a start, -1 at an end): at the same microsecond an end sorts first.
    let mut changes: Vec<(u64, i32)> = Vec::new();
    for worker in workers {
        let output = worker.wait_with_output().await?;
        let report = String::from_utf8(output.stdout)?;
        print!("{report}");
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        for line in report.lines() {
            let (_, time) = line
                .strip_suffix(" us")
                .and_then(|line| line.rsplit_once(' '))
                .ok_or_else(|| format!("unreadable report {line:?}"))?;
            let change = if line.contains("rendering") { 1 } else { -1 };
            changes.push((time.parse()?, change));
        }
    }
    changes.sort_unstable();
    let most = changes
        .iter()
        .scan(0, |rendering, (_, change)| {
            *rendering += change;
            Some(*rendering)
        })
        .max()
        .unwrap_or(0);
    println!("at most {most} of {WORKERS} workers rendered at once, with {PERMITS} permits");
    if most > i32::try_from(PERMITS)? {
        return Err("more workers rendered at once than there are permits".into());
    }
    Ok(())
}

/// Microseconds since the Unix epoch: one clock for every process of the machine.
fn now_us() -> Result<u128, Box<dyn Error>> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros())
}
