//! The cron leader: every instance of a service runs the same scheduled job at the same time
//! (cron on each machine, a timer in each replica); the one that takes the lock runs it, the
//! others skip this run.
//!
//! `cargo run -p fencelock --example cron_leader` runs the job once, against the Redis at
//! `REDIS_URL` (default `redis://127.0.0.1/`). Start several at once: one cleans up, the
//! others print that they skip. Start another a minute later: it skips too, since the lock
//! is kept for five minutes from the start of the run, so that an instance whose clock or
//! scheduler fires a few seconds late does not run the job a second time.
//!
//! The holder label is `POD_NAME` (set it from the pod's `metadata.name` in Kubernetes), so
//! `fencelock status` shows which instance ran the job. For one leader that runs a schedule
//! while the others stand by, see the `leader_election` example.

use std::error::Error;
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Fence, Mutex, Optional};

/// How long after the start of a run the others keep skipping it.
const HOLD_AT_LEAST: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let pod = std::env::var("POD_NAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    let options = ClientOptions::default().holder_label(pod.as_str());
    let client = Client::connect_with_options(url.as_str(), options).await?;

    let ran = run_unless_another_does(&client.mutex("cron:cleanup")?, &pod).await;
    // Whatever happened above, give back what is held before exiting: a `?` there dropped the
    // guard, and a dropped guard only queues its release to the client's background task.
    client.shutdown().await?;
    ran
}

/// Runs the job if this instance takes the lock; another instance holding it means skip.
async fn run_unless_another_does(lock: &Mutex, pod: &str) -> Result<(), Box<dyn Error>> {
    let Some(guard) = lock.try_lock().await.optional()? else {
        println!("{pod}: another instance runs the cleanup, skipping");
        return Ok(());
    };
    let started = Instant::now();
    clean_up(pod, guard.fence()).await?;
    // Not `unlock`: the lock stays until five minutes after the start, then expires by itself.
    guard
        .unlock_no_earlier_than(started + HOLD_AT_LEAST)
        .await?;
    println!("{pod}: cleaned up");
    Ok(())
}

/// The job. What it writes to keeps the fence and refuses a write with a lower one.
async fn clean_up(pod: &str, fence: Fence) -> Result<(), Box<dyn Error>> {
    println!("{pod}: cleaning up (fence {fence})");
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}
