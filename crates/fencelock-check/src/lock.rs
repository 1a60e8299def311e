//! Each strategy's acquire and release, as a worker runs them. The naive locks issue exactly the
//! commands their seed describes, from a client that polls every 100 ms (seed 000's loop);
//! fencelock's primitives are used through their public API.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencelock::{Client, ClientOptions, Deployment as Redis, Guard, Handle, Lease, LockOptions};
use fencelock_testkit::process::monotonic_nanos;
use nix::sys::signal::{raise, Signal};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};

use crate::args::WorkerArgs;
use crate::error::{CheckError, Result};
use crate::event::{Event, EventLog};
use crate::fault::Fault;
use crate::handoff::SLOW_REPLY_LEASES;
use crate::strategy::{Deployment, Strategy};

/// How long a naive waiter sleeps between two tries (seed 000: `Thread.sleep(100)`).
const NAIVE_POLL: Duration = Duration::from_millis(100);
/// How long a fencelock waiter whose attempt failed on an unreachable Redis waits before the next.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(100);
/// How long a RedLock client waits for each master: short, so that a paused master costs little.
const REDLOCK_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// How long a grant waits for the replica's acknowledgement, with `wait_for_replicas`.
const REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(100);

/// How an acquire attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is held, with the grant's fence when the strategy is fenced.
    Held {
        /// The fence to pass to the resource.
        fence: Option<u64>,
        /// Whether the hold is shared (a reader's), so that other shared holds may overlap it.
        shared: bool,
    },
    /// The attempt ended without the lock.
    GaveUp(String),
}

/// A worker's lock, of one strategy.
#[derive(Debug)]
pub enum Locker {
    /// One of the seeds' naive locks.
    Naive(Box<NaiveLock>),
    /// One of fencelock's primitives.
    Fencelock(Box<FencelockLock>),
}

impl Locker {
    /// Connects to the lock's servers that `args` name, and makes one lock for each of its
    /// lanes' names, all on the same client, for the leases `args` give.
    ///
    /// # Errors
    ///
    /// When a URL is malformed, the lock's Redis cannot be reached, or fencelock refuses the name
    /// or an option.
    pub async fn connect_lanes(args: &WorkerArgs) -> Result<Vec<Locker>> {
        let lease = args.lease();
        let names = (0..args.lanes()).map(|lane| args.lane_name(lane));
        if args.strategy.is_fencelock() {
            let client = connect_client(args).await?;
            names
                .map(|name| {
                    FencelockLock::new(&client, args.strategy, &name, lease)
                        .map(|lock| Locker::Fencelock(Box::new(lock)))
                })
                .collect()
        } else {
            let conn = ConnectionManager::new(redis::Client::open(first_url(args)?)?).await?;
            Ok(names
                .map(|name| {
                    Locker::Naive(Box::new(NaiveLock::new(
                        args.strategy,
                        conn.clone(),
                        name,
                        lease,
                    )))
                })
                .collect())
        }
    }

    /// Tries for the lock until `timeout`. With `crash_in_acquire`, a strategy whose acquire
    /// takes several commands dies (SIGKILL) right after the one that made it the holder.
    ///
    /// # Errors
    ///
    /// When the event log is closed, or the process cannot kill itself.
    pub async fn acquire(
        &mut self,
        timeout: Duration,
        crash_in_acquire: bool,
        log: &mut EventLog,
    ) -> Result<Acquired> {
        match self {
            Locker::Naive(lock) => lock.acquire(timeout, crash_in_acquire, log).await,
            Locker::Fencelock(lock) => Ok(lock.acquire(timeout).await),
        }
    }

    /// Releases the lock as the strategy does; a failed release is the strategy's business and
    /// shows in the history, not as an error.
    pub async fn release(&mut self) {
        match self {
            Locker::Naive(lock) => lock.release().await,
            Locker::Fencelock(lock) => lock.release().await,
        }
    }

    /// Whether the lock's Redis records the grant just acquired: its name held, with the
    /// guard's fence. `None` for a naive lock, or when the lock's Redis could not be read.
    pub async fn granted_on_server(&self) -> Option<bool> {
        match self {
            Locker::Naive(_) => None,
            Locker::Fencelock(lock) => lock.granted_on_server().await,
        }
    }
}

fn first_url(args: &WorkerArgs) -> Result<&str> {
    args.lock_urls
        .first()
        .map(String::as_str)
        .ok_or_else(|| CheckError::Usage("no lock server".into()))
}

/// Reports the crash and kills this process with SIGKILL: no destructor, no release.
///
/// # Errors
///
/// Only if the signal cannot be raised, or the log is closed.
pub fn crash(log: &mut EventLog) -> Result<()> {
    log.emit(&Event::Crash {
        t: monotonic_nanos(),
    })?;
    raise(Signal::SIGKILL)?;
    Err(CheckError::Worker("still alive after SIGKILL".into()))
}

/// One try of a naive lock went wrong in a way its seed does not recover from.
enum TryFailure {
    /// The seed's code throws here and its `tryLock` returns false.
    GiveUp(&'static str),
    /// The Redis call failed (the server is restarting, say); the poll loop tries again.
    Redis,
}

impl From<redis::RedisError> for TryFailure {
    fn from(_: redis::RedisError) -> Self {
        TryFailure::Redis
    }
}

/// A naive lock from the seeds.
pub struct NaiveLock {
    strategy: Strategy,
    conn: ConnectionManager,
    key: String,
    lease: Duration,
    /// The random value of the current hold (`token-no-renewal`).
    token: String,
    tokens_issued: u64,
    compare_and_delete: Script,
}

impl std::fmt::Debug for NaiveLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaiveLock")
            .field("strategy", &self.strategy)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl NaiveLock {
    fn new(strategy: Strategy, conn: ConnectionManager, key: String, lease: Duration) -> Self {
        NaiveLock {
            strategy,
            conn,
            key,
            lease,
            token: String::new(),
            tokens_issued: 0,
            compare_and_delete: Script::new(include_str!("lua/compare_and_delete.lua")),
        }
    }

    async fn acquire(
        &mut self,
        timeout: Duration,
        crash_in_acquire: bool,
        log: &mut EventLog,
    ) -> Result<Acquired> {
        let started = Instant::now();
        loop {
            match self.try_once(crash_in_acquire, log).await {
                Ok(true) => {
                    return Ok(Acquired::Held {
                        fence: None,
                        shared: false,
                    })
                }
                Ok(false) | Err(TryFailure::Redis) => {}
                Err(TryFailure::GiveUp(why)) => return Ok(Acquired::GaveUp(why.to_owned())),
            }
            if started.elapsed() >= timeout {
                return Ok(Acquired::GaveUp("timeout".to_owned()));
            }
            tokio::time::sleep(NAIVE_POLL).await;
        }
    }

    /// The lease in whole seconds, for `EX` and `EXPIRE`.
    fn lease_secs(&self) -> u64 {
        self.lease.as_secs().max(1)
    }

    async fn try_once(
        &mut self,
        crash_in_acquire: bool,
        log: &mut EventLog,
    ) -> std::result::Result<bool, TryFailure> {
        let key = self.key.as_str();
        match self.strategy {
            Strategy::ExistsThenSet => {
                let exists: bool = self.conn.exists(key).await?;
                if exists {
                    return Ok(false);
                }
                let () = self.conn.set(key, 1).await?;
                Ok(true)
            }
            Strategy::SetnxExpire => {
                let set: bool = self.conn.set_nx(key, 1).await?;
                if !set {
                    return Ok(false);
                }
                if crash_in_acquire {
                    crash(log).map_err(|_| TryFailure::GiveUp("cannot crash"))?;
                }
                let lease = i64::try_from(self.lease_secs()).unwrap_or(i64::MAX);
                let _: bool = self.conn.expire(key, lease).await?;
                Ok(true)
            }
            Strategy::SetnxGetset => self.try_timestamp_lock().await,
            Strategy::SetNxExConstant => {
                let reply: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(1)
                    .arg("EX")
                    .arg(self.lease_secs())
                    .arg("NX")
                    .query_async(&mut self.conn)
                    .await?;
                Ok(reply.is_some())
            }
            Strategy::TokenNoRenewal => {
                self.tokens_issued += 1;
                let token = format!(
                    "{}-{}-{}",
                    std::process::id(),
                    self.tokens_issued,
                    monotonic_nanos()
                );
                let reply: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("EX")
                    .arg(self.lease_secs())
                    .arg("NX")
                    .query_async(&mut self.conn)
                    .await?;
                self.token = token;
                Ok(reply.is_some())
            }
            _ => Err(TryFailure::GiveUp("not a naive strategy")),
        }
    }

    /// Seed 000's `innerTryLock`, line by line.
    async fn try_timestamp_lock(&mut self) -> std::result::Result<bool, TryFailure> {
        let key = self.key.as_str();
        let now = wall_millis();
        let lease = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        let expiry = now + lease + 1;
        let set: bool = self.conn.set_nx(key, expiry).await?;
        if set {
            return Ok(true);
        }
        // checkIfLockTimeout: Long.valueOf(jedis.get(key)) throws on a key deleted meanwhile,
        // and tryLock's catch turns that into a failed acquire.
        let stored: Option<i64> = self.conn.get(key).await?;
        let stored = stored.ok_or(TryFailure::GiveUp("GET found no lock (seed 000 throws)"))?;
        if now > stored {
            let previous: Option<i64> = self.conn.getset(key, expiry).await?;
            let previous =
                previous.ok_or(TryFailure::GiveUp("GETSET found no lock (seed 000 throws)"))?;
            if now > previous {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn release(&mut self) {
        let key = self.key.clone();
        let _ = match self.strategy {
            Strategy::TokenNoRenewal => self
                .compare_and_delete
                .key(&key)
                .arg(&self.token)
                .invoke_async::<i64>(&mut self.conn)
                .await
                .map(drop),
            Strategy::SetnxGetset => {
                // realseLock: delete unless the timestamp now stored has passed; a missing key
                // throws in the seed, so nothing is deleted.
                let stored: redis::RedisResult<Option<i64>> = self.conn.get(&key).await;
                match stored {
                    Ok(Some(stored)) if wall_millis() <= stored => {
                        self.conn.del::<_, i64>(&key).await.map(drop)
                    }
                    other => other.map(drop),
                }
            }
            _ => self.conn.del::<_, i64>(&key).await.map(drop),
        };
    }
}

/// Milliseconds of the wall clock, as `System.currentTimeMillis()`.
fn wall_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One of fencelock's primitives, and the guard of the current hold.
#[derive(Debug)]
pub struct FencelockLock {
    fenced: bool,
    /// The client, and the name whose grant it reads back from the lock's Redis after each
    /// acquire, under the faults that go after a handoff.
    client: Client,
    name: String,
    /// What the holds take; a read-write lock takes every other one shared, with `shared`.
    exclusive: Handle,
    shared: Option<Handle>,
    /// Whether each section takes the lock twice as the same holder and releases the inner
    /// hold inside it: the outer hold must keep the lock (a reentrant mutex).
    reenters: bool,
    guard: Option<Guard>,
    /// Holds taken so far.
    holds: u64,
}

/// Connects the one fencelock client a worker's lanes share.
async fn connect_client(args: &WorkerArgs) -> Result<Client> {
    let strategy = args.strategy;
    let urls = args.lock_urls.iter().map(String::as_str);
    Ok(match strategy.deployment() {
        Deployment::Redlock => {
            let options = ClientOptions::default().node_timeout(REDLOCK_NODE_TIMEOUT);
            Client::connect_with_options(Redis::redlock(urls)?, options).await?
        }
        Deployment::Sentinel => {
            let service = args
                .service
                .as_deref()
                .ok_or_else(|| CheckError::Usage("sentinels without a service".into()))?;
            let options = if strategy == Strategy::FencelockSentinelWait {
                ClientOptions::default().wait_for_replicas(1, REPLICA_ACK_TIMEOUT)
            } else {
                ClientOptions::default()
            };
            Client::connect_with_options(Redis::sentinel(urls, service)?, options).await?
        }
        Deployment::Cluster => {
            let options = if strategy == Strategy::FencelockClusterWait {
                ClientOptions::default().wait_for_replicas(1, REPLICA_ACK_TIMEOUT)
            } else {
                ClientOptions::default()
            };
            Client::connect_with_options(Redis::cluster(urls)?, options).await?
        }
        // The fence memory as short as the lease, so that the clock step past it comes after
        // a quiet the run can afford.
        Deployment::Single if args.fault == Fault::ClockBackIdle => {
            let options = ClientOptions::default().fence_memory(args.lease());
            Client::connect_with_options(first_url(args)?, options).await?
        }
        // Replies may come back later than a lease: they must come back, not time out.
        Deployment::Single if args.fault.delays_replies() => {
            let options =
                ClientOptions::default().response_timeout(args.lease() * SLOW_REPLY_LEASES);
            Client::connect_with_options(first_url(args)?, options).await?
        }
        Deployment::Single => Client::connect(first_url(args)?).await?,
    })
}

impl FencelockLock {
    fn new(client: &Client, strategy: Strategy, name: &str, lease: Duration) -> Result<Self> {
        let options = LockOptions::default().lease(Lease::Renewed(lease));
        let (exclusive, shared): (Handle, Option<Handle>) = match strategy {
            Strategy::FencelockFairFenced => {
                (client.fair_mutex_with_options(name, options)?.into(), None)
            }
            Strategy::FencelockRwlockFenced => {
                let lock = client.rwlock_with_options(name, options)?;
                (lock.write_handle().into(), Some(lock.read_handle().into()))
            }
            Strategy::FencelockSemaphoreFenced => (
                client
                    .semaphore_with_options(name, 1, options)?
                    .permits_handle(1)?
                    .into(),
                None,
            ),
            Strategy::FencelockReentrantFenced => (
                client
                    .reentrant_mutex_with_options(name, options)?
                    .handle_as(&client.holder()?)
                    .into(),
                None,
            ),
            // The lane's name is the first: the guard's fence is its.
            Strategy::FencelockMultiFenced => (
                client
                    .multi_mutex_with_options([name.to_owned(), format!("{name}:pair")], options)?
                    .into(),
                None,
            ),
            _ => (client.mutex_with_options(name, options)?.into(), None),
        };
        Ok(FencelockLock {
            fenced: strategy.is_fenced(),
            client: client.clone(),
            name: name.to_owned(),
            exclusive,
            shared,
            reenters: strategy == Strategy::FencelockReentrantFenced,
            guard: None,
            holds: 0,
        })
    }

    async fn acquire(&mut self, timeout: Duration) -> Acquired {
        self.holds += 1;
        let (handle, shared) = match &self.shared {
            Some(shared) if self.holds.is_multiple_of(2) => (shared, true),
            _ => (&self.exclusive, false),
        };
        let granted = if self.reenters {
            reenter(handle, timeout).await
        } else {
            handle.lock_timeout(timeout).await
        };
        match granted {
            Ok(guard) => {
                let fence = self.fenced.then(|| guard.fence().get());
                self.guard = Some(guard);
                Acquired::Held { fence, shared }
            }
            Err(fencelock::Error::Timeout { .. }) => Acquired::GaveUp("timeout".to_owned()),
            Err(e) => {
                // Redis down or paused: the attempt failed; do not spin on it.
                tokio::time::sleep(RETRY_AFTER_ERROR).await;
                Acquired::GaveUp(e.to_string())
            }
        }
    }

    async fn granted_on_server(&self) -> Option<bool> {
        let fence = self.guard.as_ref()?.fence();
        let held = self.client.locks_named(&self.name).await.ok()?;
        Some(held.iter().any(|info| info.fence == Some(fence)))
    }

    async fn release(&mut self) {
        // A refused unlock (the lease was lost) is what the history shows as an overlap or a
        // refused write; it needs no handling here.
        if let Some(guard) = self.guard.take() {
            let _ = guard.unlock().await;
        }
    }
}

/// Takes the reentrant lock, takes it again as the same holder and releases that inner hold:
/// the outer one must still keep everyone else out.
async fn reenter(lock: &Handle, timeout: Duration) -> fencelock::Result<Guard> {
    let outer = lock.lock_timeout(timeout).await?;
    let inner = lock.lock_timeout(timeout).await?;
    inner.unlock().await?;
    Ok(outer)
}
