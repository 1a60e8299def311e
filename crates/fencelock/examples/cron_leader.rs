//! A cron leader: every instance of a service runs this; one at a time is the leader and runs
//! the schedule, the others wait to take over.
//!
//! `cargo run -p fencelock --example cron_leader` uses Redis at `REDIS_URL`, or a private one
//! when it is unset. The leader runs `TICKS` jobs (default 3), one every `TICK_MS` (default
//! 1000), then steps down. `LEASE_MS` (default 10000) bounds how long a crashed leader keeps
//! the others waiting.
//!
//! The holder label is `POD_NAME` (set it from the pod's `metadata.name` in Kubernetes), so
//! `fencelock status` shows which pod leads. `SIGTERM`, which Kubernetes sends to stop a pod,
//! releases the lock at once: the next instance takes over without waiting for the lease.

use std::error::Error;
use std::time::Duration;

use fencelock::{Client, ClientOptions, Lease};
use fencelock_testkit::RedisServer;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (url, _redis) = RedisServer::from_env_or_start();
    let pod = std::env::var("POD_NAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    let ticks: u32 = setting("TICKS", 3)?;
    let tick = Duration::from_millis(setting("TICK_MS", 1000)?);
    let lease = Duration::from_millis(setting("LEASE_MS", 10_000)?);

    let options = ClientOptions::default()
        .holder_label(pod.as_str())
        .default_lease(Lease::Renewed(lease));
    let client = Client::connect_with_options(url.as_str(), options).await?;
    let leadership = client.mutex("cron:leader")?;
    let mut terminate = signal(SignalKind::terminate())?;
    println!("{pod}: waiting to lead");

    let guard = tokio::select! {
        guard = leadership.lock() => guard?,
        _ = terminate.recv() => {
            // An acquire cut short may have been granted meanwhile: give it back before exit.
            client.shutdown().await?;
            return Ok(());
        }
    };
    println!("{pod}: leader (fence {})", guard.fence());
    let mut schedule = tokio::time::interval(tick);
    for run in 1..=ticks {
        tokio::select! {
            _ = schedule.tick() => println!("{pod}: job {run} (fence {})", guard.fence()),
            // Another instance may lead by now: stop scheduling at once. Exiting lets the
            // pod restart and wait to lead again.
            lost = guard.lost() => return Err(format!("{pod}: leadership lost: {lost}").into()),
            _ = terminate.recv() => break,
        }
    }
    guard.unlock().await?;
    client.shutdown().await?;
    println!("{pod}: stepped down");
    Ok(())
}

/// The environment variable `name` as a number, or `default` when it is unset.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> Result<T, Box<dyn Error>> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .map_err(|_| format!("{name}={value:?} is not a number").into()),
        Err(_) => Ok(default),
    }
}
