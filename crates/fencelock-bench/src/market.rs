//! Scenario 6, the market simulation of "Redis in Action" 6.2: players list items from their
//! inventories on a market and buy them with their funds. `market:` is a sorted set of
//! `<item>.<seller>` by price, `users:<id>` a hash with `funds`, `inventory:<id>` a set of
//! items. Three ways to keep it consistent: optimistic `WATCH/MULTI/EXEC` that retries when a
//! watched key changed, one fencelock mutex on the whole market, or one fencelock mutex per item.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::latency::{Latencies, LatencySummary};
use crate::progress::Progress;
use crate::redisinfo;
use crate::report::{short_number, Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::{join_within, Settings};

/// How the market is kept consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// `WATCH` the keys read, `MULTI/EXEC` the writes, retry when `EXEC` is aborted.
    Watch,
    /// One fencelock mutex on the whole market.
    CoarseLock,
    /// One fencelock mutex per item.
    FineLocks,
}

impl Variant {
    /// Every variant, in the book's order.
    pub const ALL: [Variant; 3] = [Variant::Watch, Variant::CoarseLock, Variant::FineLocks];

    /// The name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Variant::Watch => "WATCH/MULTI/EXEC",
            Variant::CoarseLock => "fencelock, one market lock",
            Variant::FineLocks => "fencelock, per-item locks",
        }
    }

    /// What the book (seed 003) says of this variant under this load, where it says anything.
    pub fn book(self, sellers: usize, buyers: usize) -> &'static str {
        match (self, sellers, buyers) {
            (Variant::Watch, 1, 1) => "~3 retries, <10 ms",
            (Variant::Watch, 5, 5) => "~250 retries, ~500 ms",
            (Variant::Watch, _, _) => "retries and latency grow",
            (Variant::CoarseLock, _, _) => "no retries, fewer listed than WATCH",
            (Variant::FineLocks, _, _) => "220,000-230,000 ops in 60 s, no retries, <3 ms",
        }
    }
}

/// The loads of the book: sellers and buyers.
pub const LOADS: [(usize, usize); 3] = [(1, 1), (5, 1), (5, 5)];

/// One simulation run.
#[derive(Clone, Debug, Serialize)]
pub struct MarketRun {
    /// How the market was kept consistent.
    pub variant: Variant,
    /// Players listing items.
    pub sellers: usize,
    /// Players buying items.
    pub buyers: usize,
    /// Items listed.
    pub listed: u64,
    /// Items bought.
    pub bought: u64,
    /// `EXEC`s of a purchase aborted by a watched key and tried again.
    pub purchase_retries: u64,
    /// `EXEC`s of a listing aborted and tried again.
    pub listing_retries: u64,
    /// Purchases that found their item gone (bought by another buyer first).
    pub purchases_missed: u64,
    /// From the start of a purchase to its success, retries included.
    pub purchase_latency: LatencySummary,
    /// Listings and purchases, scaled to 60 s to sit beside the book's figures.
    pub operations_per_60s: f64,
}

/// Scenario 6's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Market {
    /// Length of each run.
    pub duration_secs: f64,
    /// Every run.
    pub runs: Vec<MarketRun>,
}

/// The counts shared by one run's players.
#[derive(Default)]
struct Tally {
    listed: AtomicU64,
    bought: AtomicU64,
    purchase_retries: AtomicU64,
    listing_retries: AtomicU64,
    missed: AtomicU64,
}

/// A player's connection to the market: its own Redis connection (WATCH needs one of its own)
/// and, for the lock variants, its own fencelock client, as if each player were its own process.
struct Player {
    conn: MultiplexedConnection,
    locks: Option<fencelock::Client>,
    variant: Variant,
    tally: Arc<Tally>,
}

/// A held market or item lock, when the variant takes one.
struct Held(Option<fencelock::MutexGuard>);

impl Held {
    async fn release(self) -> Result<()> {
        if let Some(guard) = self.0 {
            guard.unlock().await?;
        }
        Ok(())
    }
}

impl Player {
    async fn lock(&self, item: &str) -> Result<Held> {
        let name = match self.variant {
            Variant::Watch => return Ok(Held(None)),
            Variant::CoarseLock => "market:".to_owned(),
            Variant::FineLocks => format!("market:{item}"),
        };
        let client = self
            .locks
            .as_ref()
            .ok_or_else(|| Error::Stuck("a lock variant without a client".to_owned()))?;
        Ok(Held(Some(client.mutex(name)?.lock().await?)))
    }

    /// Moves `item` from the seller's inventory to the market at `price`.
    async fn list_item(&mut self, item: &str, seller: &str, price: u64) -> Result<bool> {
        let inventory = format!("inventory:{seller}");
        let entry = format!("{item}.{seller}");
        let held = self.lock(&entry).await?;
        let listed = loop {
            if self.variant == Variant::Watch {
                redis::cmd("WATCH")
                    .arg(&inventory)
                    .query_async::<()>(&mut self.conn)
                    .await?;
            }
            let owned: bool = redis::cmd("SISMEMBER")
                .arg(&inventory)
                .arg(item)
                .query_async(&mut self.conn)
                .await?;
            if !owned {
                self.unwatch().await?;
                break false;
            }
            let done: Option<(i64, i64)> = redis::pipe()
                .atomic()
                .zadd("market:", &entry, price)
                .srem(&inventory, item)
                .query_async(&mut self.conn)
                .await?;
            if done.is_some() {
                break true;
            }
            self.tally.listing_retries.fetch_add(1, Ordering::Relaxed);
        };
        held.release().await?;
        Ok(listed)
    }

    /// Buys `entry` (`<item>.<seller>`) if it is still listed at `price`.
    async fn purchase_item(
        &mut self,
        buyer: &str,
        entry: &str,
        price: u64,
    ) -> Result<Option<Duration>> {
        let began = Instant::now();
        let (item, seller) = entry
            .rsplit_once('.')
            .ok_or_else(|| Error::Parse(format!("market entry {entry:?}")))?;
        let buyer_key = format!("users:{buyer}");
        let held = self.lock(entry).await?;
        let bought = loop {
            if self.variant == Variant::Watch {
                redis::cmd("WATCH")
                    .arg("market:")
                    .arg(&buyer_key)
                    .query_async::<()>(&mut self.conn)
                    .await?;
            }
            let (listed, funds): (Option<f64>, Option<f64>) = redis::pipe()
                .zscore("market:", entry)
                .hget(&buyer_key, "funds")
                .query_async(&mut self.conn)
                .await?;
            if listed != Some(price as f64) || funds.unwrap_or(0.0) < price as f64 {
                self.unwatch().await?;
                break false;
            }
            let price = i64::try_from(price).unwrap_or(i64::MAX);
            let done: Option<(i64, i64, i64, i64)> = redis::pipe()
                .atomic()
                .hincr(format!("users:{seller}"), "funds", price)
                .hincr(&buyer_key, "funds", -price)
                .sadd(format!("inventory:{buyer}"), item)
                .zrem("market:", entry)
                .query_async(&mut self.conn)
                .await?;
            if done.is_some() {
                break true;
            }
            self.tally.purchase_retries.fetch_add(1, Ordering::Relaxed);
        };
        held.release().await?;
        Ok(bought.then(|| began.elapsed()))
    }

    async fn unwatch(&mut self) -> Result<()> {
        if self.variant == Variant::Watch {
            redis::cmd("UNWATCH")
                .query_async::<()>(&mut self.conn)
                .await?;
        }
        Ok(())
    }
}

async fn seller(mut player: Player, id: String, deadline: Instant) -> Result<Latencies> {
    let mut next = 0u64;
    while Instant::now() < deadline {
        let item = format!("item{next}");
        next += 1;
        redis::cmd("SADD")
            .arg(format!("inventory:{id}"))
            .arg(&item)
            .query_async::<()>(&mut player.conn)
            .await?;
        let price = rand::rng().random_range(1..=100u64);
        if player.list_item(&item, &id, price).await? {
            player.tally.listed.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(Latencies::new())
}

async fn buyer(mut player: Player, id: String, deadline: Instant) -> Result<Latencies> {
    let mut latencies = Latencies::new();
    while Instant::now() < deadline {
        let offers: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg("market:")
            .arg(0)
            .arg(9)
            .arg("WITHSCORES")
            .query_async(&mut player.conn)
            .await?;
        if offers.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let pick = rand::rng().random_range(0..offers.len());
        let Some((entry, price)) = offers.get(pick) else {
            continue;
        };
        match player.purchase_item(&id, entry, *price).await? {
            Some(latency) => {
                latencies.record(latency);
                player.tally.bought.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                player.tally.missed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(latencies)
}

/// Runs one simulation of `duration` against the server at `url`, starting from an empty
/// market.
///
/// # Errors
///
/// A failed Redis or lock operation, or players still running 30 s after the end.
pub async fn simulate(
    url: &str,
    variant: Variant,
    sellers: usize,
    buyers: usize,
    duration: Duration,
) -> Result<MarketRun> {
    let mut admin = redisinfo::connect(url).await?;
    // The previous run may have left a market of hundreds of thousands of items: freed in
    // the background, so that no reply waits for it.
    redis::cmd("FLUSHALL")
        .arg("ASYNC")
        .query_async::<()>(&mut admin)
        .await?;
    let tally = Arc::new(Tally::default());
    let mut players = Vec::new();
    let roles = (0..sellers)
        .map(|n| (true, format!("seller{n}")))
        .chain((0..buyers).map(|n| (false, format!("buyer{n}"))));
    for (sells, id) in roles {
        let funds: u64 = if sells { 0 } else { 1_000_000_000_000 };
        redis::cmd("HSET")
            .arg(format!("users:{id}"))
            .arg("name")
            .arg(&id)
            .arg("funds")
            .arg(funds)
            .query_async::<()>(&mut admin)
            .await?;
        let locks = match variant {
            Variant::Watch => None,
            _ => Some(fencelock::Client::connect(url).await?),
        };
        let player = Player {
            conn: redisinfo::connect(url).await?,
            locks,
            variant,
            tally: Arc::clone(&tally),
        };
        players.push((sells, id, player));
    }
    let deadline = Instant::now() + duration;
    let mut set = JoinSet::new();
    for (sells, id, player) in players {
        if sells {
            set.spawn(seller(player, id, deadline));
        } else {
            set.spawn(buyer(player, id, deadline));
        }
    }
    let mut latencies = Latencies::new();
    for player in join_within(set, duration + Duration::from_secs(30), "players").await? {
        latencies.merge(&player);
    }
    let listed = tally.listed.load(Ordering::Relaxed);
    let bought = tally.bought.load(Ordering::Relaxed);
    Ok(MarketRun {
        variant,
        sellers,
        buyers,
        listed,
        bought,
        purchase_retries: tally.purchase_retries.load(Ordering::Relaxed),
        listing_retries: tally.listing_retries.load(Ordering::Relaxed),
        purchases_missed: tally.missed.load(Ordering::Relaxed),
        purchase_latency: latencies.summary(),
        operations_per_60s: (listed + bought) as f64 * 60.0
            / duration.as_secs_f64().max(f64::MIN_POSITIVE),
    })
}

/// Runs every variant under every load of the book.
///
/// # Errors
///
/// As [`simulate`].
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Market> {
    let server = Server::start()?;
    let url = server.url();
    let mut runs = Vec::new();
    for variant in Variant::ALL {
        for (sellers, buyers) in LOADS {
            let step = format!("{}, {sellers}/{buyers}", variant.label());
            progress.step(&step, settings.market_duration);
            let run = simulate(&url, variant, sellers, buyers, settings.market_duration).await?;
            progress.add_operations(run.listed + run.bought);
            runs.push(run);
        }
    }
    Ok(Market {
        duration_secs: settings.market_duration.as_secs_f64(),
        runs,
    })
}

/// Measures, prints and writes `market.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Market> {
    println!(
        "== market: Redis in Action 6.2, {:.0} s per run",
        settings.market_duration.as_secs_f64()
    );
    let runs = u32::try_from(Variant::ALL.len() * LOADS.len()).unwrap_or(u32::MAX);
    let progress = Progress::new("market", settings.market_duration * runs);
    let results = measure(settings, &progress).await?;
    let summary: Vec<String> = results
        .runs
        .iter()
        .map(|r| {
            let ops = r.operations_per_60s;
            format!("{} {}/{} {ops:.0}", r.variant.label(), r.sellers, r.buyers)
        })
        .collect();
    progress.finish(&format!("ops per 60 s: {}", summary.join(", ")));
    let mut table = Table::new(&[
        "variant",
        "sellers",
        "buyers",
        "listed",
        "bought",
        "purchase retries",
        "retries/purchase",
        "mean ms",
        "p99 ms",
        "ops per 60 s",
        "the book (seed 003)",
    ]);
    let mut bars = Vec::new();
    for run in &results.runs {
        table.row(vec![
            run.variant.label().to_owned(),
            run.sellers.to_string(),
            run.buyers.to_string(),
            run.listed.to_string(),
            run.bought.to_string(),
            run.purchase_retries.to_string(),
            format!(
                "{:.2}",
                run.purchase_retries as f64 / run.bought.max(1) as f64
            ),
            short_number(run.purchase_latency.mean_ms),
            short_number(run.purchase_latency.p99_ms),
            format!("{:.0}", run.operations_per_60s),
            run.variant.book(run.sellers, run.buyers).to_owned(),
        ]);
        bars.push(Bar {
            label: format!("{}, {}/{}", run.variant.label(), run.sellers, run.buyers),
            value: run.operations_per_60s,
        });
    }
    let mut notes = vec![
        "purchase latency: from the start of a purchase to its success, retries included"
            .to_owned(),
        "ops per 60 s: items listed + items bought, scaled to the book's 60 s runs".to_owned(),
    ];
    if results.duration_secs < 60.0 {
        notes.push(format!(
            "runs of {:.0} s, shorter than the book's 60 s",
            results.duration_secs
        ));
    }
    let report = Report {
        scenario: "market".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![(
            "Market simulation (tables 6-1, 6-2, 6-3 of Redis in Action)".to_owned(),
            table,
        )],
        notes,
    };
    let chart = Chart {
        title: "Market: listings + purchases per 60 s (higher is better)".to_owned(),
        unit: "operations per 60 s".to_owned(),
        bars,
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}
