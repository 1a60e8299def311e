//! A multi mutex takes several names at once, all or none: transfers between two accounts, some
//! from alice to bob and some from bob to alice, each lock both accounts. Two `Mutex`es taken
//! one after the other in opposite orders can deadlock (each transfer holding one account and
//! waiting for the other); a `MultiMutex` takes both names in one step, so transfers in both
//! directions run side by side, and none is lost.
//!
//! `cargo run -p fencelock --example multi_mutex` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`), for the locks and for the balances (keys `balance:alice` and
//! `balance:bob`, standing for a database). Each transfer reads both balances, works a moment,
//! and writes both: without the lock, transfers running together would overwrite each other's
//! writes. At the end, the program checks that the balances are what the transfers add up to.

use std::error::Error;
use std::time::Duration;

use fencelock::{Client, MultiMutex};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use tokio::task::JoinSet;

const OPENING: i64 = 100;
/// How many transfers go each way.
const TRANSFERS: i64 = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str()).await?;
    let mut db = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = db.set("balance:alice", OPENING).await?;
    let _: () = db.set("balance:bob", OPENING).await?;

    let mut transfers = JoinSet::new();
    for _ in 0..TRANSFERS {
        let to_bob = client.multi_mutex(["account:alice", "account:bob"])?;
        transfers.spawn(transfer(to_bob, db.clone(), "alice", "bob", 10));
        let to_alice = client.multi_mutex(["account:bob", "account:alice"])?;
        transfers.spawn(transfer(to_alice, db.clone(), "bob", "alice", 7));
    }
    while let Some(done) = transfers.join_next().await {
        done??;
    }

    let alice: i64 = db.get("balance:alice").await?;
    let bob: i64 = db.get("balance:bob").await?;
    let expected = (
        OPENING - TRANSFERS * 10 + TRANSFERS * 7,
        OPENING + TRANSFERS * 10 - TRANSFERS * 7,
    );
    println!("balances: alice {alice}, bob {bob}; expected {expected:?}");
    client.shutdown().await?;
    if (alice, bob) != expected {
        return Err("a transfer was lost".into());
    }
    Ok(())
}

/// Moves `amount` from one account to the other while holding both.
async fn transfer(
    accounts: MultiMutex,
    mut db: MultiplexedConnection,
    from: &str,
    to: &str,
    amount: i64,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let guard = accounts.lock().await?;
    let (from_key, to_key) = (format!("balance:{from}"), format!("balance:{to}"));
    let from_balance: i64 = db.get(&from_key).await?;
    let to_balance: i64 = db.get(&to_key).await?;
    tokio::time::sleep(Duration::from_millis(20)).await; // the transfer's own checks
    let _: () = db.set(&from_key, from_balance - amount).await?;
    let _: () = db.set(&to_key, to_balance + amount).await?;
    // A store that checks fences would be given each account's own (`guard.fence(name)`).
    let fences: Vec<String> = guard
        .fences()
        .map(|(name, fence)| format!("{name} {fence}"))
        .collect();
    println!("{from} -> {to}: {amount} (fences {})", fences.join(", "));
    guard.unlock().await?;
    Ok(())
}
