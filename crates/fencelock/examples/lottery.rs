//! One worker of the noon lottery (seed: many service instances would all run the draw; exactly
//! one must). `cargo xtask demo` starts five of these as separate processes.
//!
//! Usage: `lottery WORKER NOON_EPOCH_MS DRAW_ID`, against the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`).
//!
//! At noon every worker tries the lock once. The winner checks that nobody drew yet (a worker
//! that arrives after the winner released would otherwise draw again), draws, and records the
//! result together with its fencing token. The others report who holds the lock. Every worker
//! shuts its client down before it exits, so that no lock outlives the program.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{Client, ClientOptions, Error};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [worker, noon, draw] = args.as_slice() else {
        return Err("usage: lottery WORKER NOON_EPOCH_MS DRAW_ID".into());
    };
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let noon: u128 = noon.parse()?;
    let me = format!("worker {worker} (pid {})", std::process::id());

    let options = ClientOptions::default()
        .prefix("fencelock-demo:")
        .holder_label(format!("worker-{worker}"));
    let client = Client::connect_with_options(url.as_str(), options).await?;
    let mut results = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let result_key = format!("fencelock-demo:lottery:{draw}:winners");
    println!("{me}: connected, waiting for noon");

    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let until_noon = u64::try_from(noon.saturating_sub(now))?;
    tokio::time::sleep(Duration::from_millis(until_noon)).await;

    let taken_part = take_part(&client, &mut results, &result_key, &me, worker, draw).await;
    // Whatever happened above, give the lock back before exiting: a `?` there dropped the
    // guard, and a dropped guard only queues its release to the client's background task,
    // which ends with `main`. The shutdown releases every lock still held and waits for Redis.
    client.shutdown().await?;
    taken_part
}

/// Tries the lock once; the winner draws unless the draw is done, the others report who holds
/// the lock.
async fn take_part(
    client: &Client,
    results: &mut MultiplexedConnection,
    result_key: &str,
    me: &str,
    worker: &str,
    draw: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let mutex = client.mutex(format!("lottery:{draw}"))?;
    match mutex.try_lock().await {
        Ok(guard) => {
            let fence = guard.fence();
            let already: Option<String> = results.get(result_key).await?;
            if let Some(result) = already {
                println!("{me}: got the lock (fence {fence}) but the draw is done: {result}");
            } else {
                let winners = draw_winners()?;
                // The draw takes a moment; the others must not draw meanwhile.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let record = format!("{winners:?} drawn by worker {worker} under fence {fence}");
                let _: () = results.set_ex(result_key, &record, 3600).await?;
                println!("{me}: DREW THE WINNERS {winners:?} (fence {fence})");
            }
            guard.unlock().await?;
            println!("{me}: released the lock");
        }
        Err(Error::Held { remaining, .. }) => {
            let left = remaining.map_or("no expiry".to_owned(), |r| format!("{r:?}"));
            println!("{me}: another instance holds the lock (lease ends in {left}), not drawing");
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Three distinct ticket numbers out of 1..=1000, from the OS's random source.
fn draw_winners() -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let mut winners = Vec::new();
    while winners.len() < 3 {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
        let ticket = u32::from_le_bytes(bytes) % 1000 + 1;
        if !winners.contains(&ticket) {
            winners.push(ticket);
        }
    }
    winners.sort_unstable();
    Ok(winners)
}
