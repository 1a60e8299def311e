//! Leader election: every instance of a service runs this; one at a time leads and runs the
//! scheduler, the others stand by and take over when it stops.
//!
//! `cargo run -p fencelock --example leader_election` campaigns in the election `scheduler` on
//! the Redis at `REDIS_URL` (default `redis://127.0.0.1/`), publishing `POD_NAME` (set it from
//! the pod's `metadata.name` in Kubernetes) as the leader's value, so that everyone can ask who
//! leads (`fencelock leader scheduler`). Start several: one leads and schedules a job every
//! second. `SIGTERM`, which Kubernetes sends to stop a pod, or ctrl-c stops the scheduler and
//! resigns: a standby leads at once, without waiting for the lease. A leader that crashes is
//! replaced once its lease runs out.

use std::error::Error;
use std::time::Duration;

use fencelock::{Client, Fence};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let pod = std::env::var("POD_NAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    let client = Client::connect(url.as_str()).await?;
    let election = client.election("scheduler")?;

    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    println!("{pod}: standing by");
    // Campaigns until `shutdown`: whenever this instance leads, runs the scheduler with the
    // term's fence, and drops it the moment leadership is lost.
    election
        .lead(pod.as_str(), shutdown, |fence| schedule(&pod, fence))
        .await?;
    client.shutdown().await?;
    println!("{pod}: resigned");
    Ok(())
}

/// The leader's work: runs until leadership ends. The fence goes with every job it starts, so
/// that what a job writes to can refuse a leader that was replaced.
async fn schedule(pod: &str, fence: Fence) {
    println!("{pod}: leading (fence {fence})");
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    for job in 1u64.. {
        every_second.tick().await;
        println!("{pod}: job {job} started (fence {fence})");
    }
}
