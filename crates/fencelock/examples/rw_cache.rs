//! A read-write cache: readers share a cached value under a read lock; on a miss, one writer
//! refreshes it from the slow source while the other readers wait, and they all read the new
//! value instead of each fetching it again.
//!
//! `cargo run -p fencelock --example rw_cache` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`), for the lock and the cache. Eight readers start at once on a cold
//! cache; the source is fetched once.

use std::error::Error;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::{Client, RwLock};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

const CACHE_KEY: &str = "cache:exchange-rates";
const READERS: u32 = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str()).await?;
    let mut cache = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = cache.del(CACHE_KEY).await?; // start cold, as after a deploy
    let lock = client.rwlock(CACHE_KEY)?;
    let fetches = Arc::new(AtomicU32::new(0));

    let mut readers = tokio::task::JoinSet::new();
    for reader in 1..=READERS {
        let (lock, cache, fetches) = (lock.clone(), cache.clone(), fetches.clone());
        readers.spawn(async move {
            let rates = cached_rates(&lock, cache, &fetches).await?;
            println!("reader {reader}: {rates}");
            Ok::<_, Box<dyn Error + Send + Sync>>(())
        });
    }
    while let Some(done) = readers.join_next().await {
        done??;
    }
    let fetches = fetches.load(Ordering::SeqCst);
    println!("{READERS} readers, {fetches} fetch(es) from the source");
    client.shutdown().await?;
    Ok(())
}

/// The cached rates; on a miss, fetches them under the write lock, unless another writer did
/// while this one waited for it.
async fn cached_rates(
    lock: &RwLock,
    mut cache: MultiplexedConnection,
    fetches: &AtomicU32,
) -> Result<String, Box<dyn Error + Send + Sync>> {
    let read = lock.read().await?;
    let cached: Option<String> = cache.get(CACHE_KEY).await?;
    read.unlock().await?;
    if let Some(rates) = cached {
        return Ok(rates);
    }
    let write = lock.write().await?;
    let rates = match cache.get(CACHE_KEY).await? {
        Some(rates) => rates,
        None => {
            let rates = fetch_rates(fetches).await;
            let _: () = cache.set_ex(CACHE_KEY, &rates, 60).await?;
            rates
        }
    };
    write.unlock().await?;
    Ok(rates)
}

/// The slow source: an upstream service, a heavy query.
async fn fetch_rates(fetches: &AtomicU32) -> String {
    fetches.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    "EUR/USD 1.08, EUR/GBP 0.85".to_owned()
}
