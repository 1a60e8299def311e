//! A fair mutex serves its waiters first come, first served: five print jobs arrive one after
//! another while the printer is busy, and they print in the order they arrived, whichever of
//! them happens to run first when the printer is free. A `Mutex` hands the lock to a waiter at
//! each release too, but promises no order: it serves the waiter that tried least recently,
//! and a request that finds it free takes it at once.
//!
//! `cargo run -p fencelock --example fair_mutex` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`). The jobs here are tasks of one program; they could as well be
//! processes on many machines.

use std::error::Error;
use std::time::Duration;

use fencelock::{Client, FairMutex, Fence, LockKind};
use tokio::task::JoinSet;

const JOBS: u64 = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str()).await?;
    let printer = client.fair_mutex("printer")?;

    let busy = printer.lock().await?;
    let mut jobs = JoinSet::new();
    for job in 1..=JOBS {
        println!("job {job}: waiting for the printer");
        jobs.spawn(print_job(printer.clone(), job));
        // The next job arrives once this one has its place in line, so that the order of
        // arrival is certain.
        wait_for_line(&client, job).await?;
    }
    busy.unlock().await?;
    while let Some(job) = jobs.join_next().await {
        job??;
    }
    client.shutdown().await?;
    Ok(())
}

/// Waits for the printer, then prints: what each instance of a service runs.
async fn print_job(printer: FairMutex, job: u64) -> Result<(), Box<dyn Error + Send + Sync>> {
    let guard = printer.lock().await?;
    print(job, guard.fence()).await;
    guard.unlock().await?;
    Ok(())
}

/// Stands for the printing: what the printer is sent carries the fence, so that it can refuse
/// a job whose lease ended while another job printed.
async fn print(job: u64, fence: Fence) {
    println!("job {job}: printing (fence {fence})");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Waits until `count` jobs wait in the printer's line, as `fencelock status` shows it.
async fn wait_for_line(client: &Client, count: u64) -> Result<(), Box<dyn Error + Send + Sync>> {
    for _ in 0..500 {
        let locks = client.locks_named("printer").await?;
        let line = locks.iter().find(|lock| lock.kind == LockKind::FairMutex);
        if line.and_then(|lock| lock.queued) >= Some(count) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("job {count} did not join the line within 5 s").into())
}
