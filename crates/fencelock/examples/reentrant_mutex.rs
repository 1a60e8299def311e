//! A reentrant mutex can be taken again by the owner that holds it: shipping an order locks it,
//! and charging the order, which ships calls and which also runs on its own, locks it too.
//! Owners are named explicitly with a `Holder` (one per request here), never by thread: async
//! tasks move between threads.
//!
//! `cargo run -p fencelock --example reentrant_mutex` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`). The request that ships takes the lock twice (the second time at
//! once, with the same fence); another request is refused until the shipping request has
//! released both holds.

use std::error::Error;

use fencelock::{Client, Holder, Optional, ReentrantMutex};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str()).await?;
    let order = client.reentrant_mutex("order:42")?;
    let (shipping, refund) = (client.holder()?, client.holder()?);

    ship(&order, &shipping, &refund).await?;
    // Both holds are released: the other request gets the order now.
    let guard = order.try_lock(&refund).await?;
    println!("refund: locked the order (fence {})", guard.fence());
    guard.unlock().await?;
    client.shutdown().await?;
    Ok(())
}

/// Ships the order, charging it first; another request (`refund`) is kept out meanwhile.
async fn ship(
    order: &ReentrantMutex,
    shipping: &Holder,
    refund: &Holder,
) -> Result<(), Box<dyn Error>> {
    let guard = order.lock(shipping).await?;
    println!("ship: locked the order (fence {})", guard.fence());
    charge(order, shipping).await?;
    // Charging released its hold; this one still keeps the order.
    match order.try_lock(refund).await.optional()? {
        None => println!("refund: the order is busy"),
        Some(_) => return Err("another request locked an order being shipped".into()),
    }
    guard.unlock().await?;
    Ok(())
}

/// Charges the order: it locks the order itself, since it is also called on its own.
async fn charge(order: &ReentrantMutex, holder: &Holder) -> Result<(), Box<dyn Error>> {
    let guard = order.lock(holder).await?; // the same holder: granted at once
    println!("charge: locked the order again (fence {})", guard.fence());
    guard.unlock().await?; // one hold of two: the order stays locked
    Ok(())
}
