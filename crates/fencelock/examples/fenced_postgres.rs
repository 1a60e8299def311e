//! A fenced write to PostgreSQL: the database itself refuses a holder that was paused past its
//! lease, because a later holder has written with a larger fencing token.
//!
//! `cargo run -p fencelock --example fenced_postgres` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`) and the PostgreSQL at `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1/postgres`), where it creates the table `accounts`.
//!
//! Each row carries the fence of the last write to it, and every write is one statement:
//! `UPDATE ... SET ..., fence = $f WHERE id = $id AND fence < $f`. A write with an older fence
//! updates 0 rows. A fence is a `u64` and the column a `BIGINT` (an `i64`): a fence is the
//! Redis server's clock in microseconds (about 1.8 × 10^15 in 2026), and `i64::MAX` is that
//! clock in the year 294,000, so `i64::try_from` never fails in practice, and would refuse the
//! write rather than wrap if it did.

use std::error::Error;
use std::time::Duration;

use fencelock::{Client, Fence, Lease, LockOptions};
use tokio_postgres::NoTls;

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS accounts (
        id      TEXT PRIMARY KEY,
        balance BIGINT NOT NULL,
        fence   BIGINT NOT NULL DEFAULT 0
    );
    INSERT INTO accounts (id, balance) VALUES ('alice', 0) ON CONFLICT (id) DO NOTHING;";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1/postgres".into());
    let (db, connection) = tokio_postgres::connect(&database_url, NoTls).await?;
    let connection = tokio::spawn(connection);
    db.batch_execute(SCHEMA).await?;

    // Two holders, as two instances of a service would be. A fixed lease is one nobody
    // renews: what a renewed lease becomes while its process is stopped.
    let lease = Duration::from_secs(1);
    let options = LockOptions::default().lease(Lease::Fixed(lease));
    let first = Client::connect(redis_url.as_str()).await?;
    let second = Client::connect(redis_url.as_str()).await?;

    let stale = first
        .mutex_with_options("account:alice", options.clone())?
        .lock()
        .await?;
    println!(
        "holder 1: locked (fence {}), held: {}",
        stale.fence(),
        stale.is_held()
    );
    // Holder 1 has checked its lock and is about to write when it stalls (a GC pause, a
    // stopped VM) past its lease.
    tokio::time::sleep(lease * 2).await;

    let current = second
        .mutex_with_options("account:alice", options)?
        .lock()
        .await?;
    let rows = write_balance(&db, "alice", 200, current.fence()).await?;
    println!(
        "holder 2: locked (fence {}), wrote 200: {rows} row updated",
        current.fence()
    );
    current.unlock().await?;

    // Holder 1 wakes and carries on with the write it had decided on.
    let rows = write_balance(&db, "alice", 100, stale.fence()).await?;
    println!(
        "holder 1: wrote 100 with fence {}: {rows} rows updated",
        stale.fence()
    );
    if rows == 0 {
        println!("holder 1: refused by the database, its lease had ended");
    }

    drop(db);
    connection.await??;
    first.shutdown().await?;
    second.shutdown().await?;
    Ok(())
}

/// Sets an account's balance unless a write with a later fence got there first. Returns the
/// number of rows updated: 0 when refused.
async fn write_balance(
    db: &tokio_postgres::Client,
    id: &str,
    balance: i64,
    fence: Fence,
) -> Result<u64, Box<dyn Error>> {
    let fence = i64::try_from(fence.get())?;
    let rows = db
        .execute(
            "UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2",
            &[&balance, &fence, &id],
        )
        .await?;
    Ok(rows)
}
