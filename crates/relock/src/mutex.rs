//! The distributed mutex: one holder at a time per name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;

use crate::client::Shared;
use crate::error::{Error, Result};
use crate::keeper::Watched;
use crate::keys::LockKeys;
use crate::lease::{LeaseState, Lost};
use crate::options::{lease_millis, Lease, MutexOptions};
use crate::scripts::{MUTEX_ACQUIRE, MUTEX_EXTEND, MUTEX_RELEASE};
use crate::token::{jitter_fraction, Fence, OwnerToken};

/// How often one acquire or release is sent again after Redis did not answer. Safe because the
/// owner token makes both idempotent.
const SEND_ATTEMPTS: u32 = 3;

/// The pause before resending, doubled each time.
const RESEND_PAUSE: Duration = Duration::from_millis(20);

/// A distributed mutex: at most one holder at a time for a name, across every process that uses
/// the same Redis.
///
/// Acquiring is one round trip (one script: `GET`, then `SET PX` with a random owner token).
/// Each grant carries a lease: if the holder dies, the lock frees itself when the lease ends.
/// By default the lease is renewed in the background while the guard lives, so a long critical
/// section keeps the lock, and a crashed process loses it within one lease. Each grant also
/// gets a [`Fence`]. Waiters are woken by a notification when the lock is released.
///
/// Use it to make one instance of a service do a thing at a time. Do not use it where two
/// holders at once would corrupt data unless the resource also checks the fencing token: a
/// process can be paused past its lease (see the crate documentation).
///
/// The handle is cheap to clone and touches Redis only when asked to lock.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), relock::Error> {
/// # let server = relock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = relock::Client::connect(url.as_str()).await?;
/// let mutex = client.mutex("lottery")?;
///
/// let guard = mutex.lock().await?;
/// println!("drawing with fence {}", guard.fence());
/// assert!(mutex.try_lock().await.is_err());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Mutex {
    shared: Arc<Shared>,
    names: Arc<Names>,
    lease: Lease,
    lease_ms: u64,
    wait_timeout: Option<Duration>,
}

/// The name and everything derived from it, computed once per handle.
struct Names {
    display: String,
    lock_key: Vec<u8>,
    fence_key: Vec<u8>,
    wake_channel: Vec<u8>,
}

impl Mutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: MutexOptions) -> Result<Self> {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let names = Names {
            display: keys.display_name(),
            lock_key: keys.key("mutex"),
            fence_key: keys.fence_key(),
            wake_channel: keys.wake_channel(),
        };
        Ok(Mutex {
            shared,
            names: Arc::new(names),
            lease,
            lease_ms,
            wait_timeout: options.wait_timeout,
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.names.display
    }

    /// The lease each grant of this mutex gets.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Waits until the lock is acquired, or until the mutex's
    /// [`wait_timeout`](MutexOptions::wait_timeout) if it has one.
    ///
    /// While the lock is held by another owner, the caller sleeps until a release is announced
    /// (or, if an announcement is lost, at most the client's
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback) and never past the holder's
    /// remaining lease), then tries again.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the wait limit passes; [`Error::WrongType`] when the lock's key
    /// holds another Redis type; [`Error::Redis`] when Redis cannot be reached after a few
    /// resends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the lock may have been
    /// granted without the caller knowing: it is released in the background, by owner token,
    /// so a cancelled `lock()` leaves the lock free.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.mutex("invoices")?;
    /// let first = mutex.lock().await?;
    /// let waiter = tokio::spawn({
    ///     let mutex = mutex.clone();
    ///     async move { mutex.lock().await.map(|guard| guard.fence()) }
    /// });
    /// let before = first.fence();
    /// first.unlock().await?; // wakes the waiter at once
    /// let after = waiter.await.expect("task")?;
    /// assert!(after > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<MutexGuard> {
        self.acquire(self.wait_timeout).await
    }

    /// Waits at most `timeout` for the lock. See [`Mutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] after `timeout`; otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: relock::Mutex) -> Result<(), relock::Error> {
    /// use std::time::Duration;
    /// match mutex.lock_timeout(Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(relock::Error::Timeout { .. }) => println!("another instance is busy"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard> {
        self.acquire(Some(timeout)).await
    }

    /// Tries once to take the lock, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::Held`] when another owner holds it, with the time its lease still runs;
    /// otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::Client::connect(server.url().as_str()).await?;
    /// let mutex = client.mutex("cron:cleanup")?;
    /// let guard = mutex.try_lock().await?;
    /// match mutex.try_lock().await {
    ///     Err(relock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let mut attempt = Attempt::new(self)?;
        match attempt.send().await? {
            Reply::Granted { fence, sent_at } => Ok(attempt.into_guard(fence, sent_at)),
            Reply::Held { remaining } => Err(Error::Held {
                name: self.names.display.clone(),
                remaining,
            }),
        }
    }

    async fn acquire(&self, timeout: Option<Duration>) -> Result<MutexGuard> {
        let started = Instant::now();
        let deadline = timeout.and_then(|t| started.checked_add(t));
        let mut attempt = Attempt::new(self)?;
        if let Reply::Granted { fence, sent_at } = attempt.send().await? {
            return Ok(attempt.into_guard(fence, sent_at));
        }
        // Subscribe before the next attempt: a release between that attempt and the wait below
        // is then announced to this waiter instead of lost.
        let waiter = self
            .shared
            .notifier
            .wait_on(self.names.wake_channel.clone())
            .await;
        loop {
            let remaining = match attempt.send().await? {
                Reply::Granted { fence, sent_at } => return Ok(attempt.into_guard(fence, sent_at)),
                Reply::Held { remaining } => remaining,
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout {
                    name: self.names.display.clone(),
                    waited: now - started,
                });
            }
            let wake_at = now + self.nap(remaining);
            let wake_at = deadline.map_or(wake_at, |d| d.min(wake_at));
            tokio::select! {
                () = waiter.woken() => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// How long a waiter sleeps when no notification comes: the jittered fallback, cut to the
    /// holder's remaining lease so that an expiry is noticed as soon as it happens.
    fn nap(&self, remaining: Option<Duration>) -> Duration {
        let fallback = self.shared.options.wake_fallback;
        let jittered = fallback.mul_f64(0.5 + 0.5 * jitter_fraction());
        let nap = remaining.map_or(jittered, |r| r.min(jittered));
        nap.max(Duration::from_millis(1))
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.names.display)
            .field("lease", &self.lease)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

/// What one acquire request found.
enum Reply {
    Granted { fence: Fence, sent_at: Instant },
    Held { remaining: Option<Duration> },
}

/// One owner token's attempts to acquire. While `armed`, a request may have been granted
/// without the reply reaching us; dropping the attempt then releases that token in the
/// background, which is what makes a cancelled `lock()` leave the lock free.
struct Attempt<'a> {
    mutex: &'a Mutex,
    token: OwnerToken,
    armed: bool,
}

impl<'a> Attempt<'a> {
    fn new(mutex: &'a Mutex) -> Result<Self> {
        Ok(Attempt {
            mutex,
            token: OwnerToken::new()?,
            armed: false,
        })
    }

    /// Sends the acquire script, resending with the same token when Redis does not answer.
    async fn send(&mut self) -> Result<Reply> {
        let m = self.mutex;
        let mut pause = RESEND_PAUSE;
        let mut tries = 0;
        loop {
            tries += 1;
            self.armed = true;
            let sent_at = Instant::now();
            let reply = MUTEX_ACQUIRE
                .key(m.names.lock_key.as_slice())
                .key(m.names.fence_key.as_slice())
                .arg(self.token.as_str())
                .arg(m.lease_ms)
                .arg(duration_ms(m.shared.options.fence_memory))
                .arg(m.shared.options.holder_label.as_str())
                .invoke_async::<Vec<i64>>(&mut m.shared.conn.clone())
                .await
                .map_err(|e| Error::from_redis(e, &m.names.display));
            match reply {
                Ok(reply) => return self.interpret(&reply, sent_at),
                Err(e) if e.is_unavailable() && tries < SEND_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn interpret(&mut self, reply: &[i64], sent_at: Instant) -> Result<Reply> {
        match *reply {
            [1, fence] if fence > 0 => Ok(Reply::Granted {
                fence: Fence::new(fence.unsigned_abs()),
                sent_at,
            }),
            [0, pttl] => {
                // Another owner holds it, so nothing under our token exists.
                self.armed = false;
                Ok(Reply::Held {
                    remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
                })
            }
            _ => Err(Error::UnexpectedReply {
                detail: format!("acquire replied {reply:?}"),
            }),
        }
    }

    fn into_guard(mut self, fence: Fence, sent_at: Instant) -> MutexGuard {
        self.armed = false;
        let m = self.mutex;
        let lease = Arc::new(LeaseState::new(m.lease.duration(), m.lease_ms, sent_at));
        if m.lease.is_renewed() {
            m.shared.keeper.watch(Watched {
                lease: Arc::clone(&lease),
                key: m.names.lock_key.clone(),
                token: self.token.as_str().to_owned(),
            });
        }
        MutexGuard {
            mutex: m.clone(),
            token: self.token.clone(),
            fence,
            lease,
            released: false,
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(self.mutex, &self.token);
        }
    }
}

fn release_in_background(mutex: &Mutex, token: &OwnerToken) {
    let conn = mutex.shared.conn.clone();
    let names = Arc::clone(&mutex.names);
    let token = token.clone();
    mutex.shared.keeper.release(Box::pin(async move {
        let _ = release(conn, &names, &token).await;
    }));
}

/// Runs the release script once: 1 released, 0 the key is gone, -1 another owner holds it.
async fn release(mut conn: ConnectionManager, names: &Names, token: &OwnerToken) -> Result<i64> {
    MUTEX_RELEASE
        .key(names.lock_key.as_slice())
        .arg(token.as_str())
        .arg(names.wake_channel.as_slice())
        .invoke_async::<i64>(&mut conn)
        .await
        .map_err(|e| Error::from_redis(e, &names.display))
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Proof of holding a [`Mutex`], with its lease and fencing token.
///
/// Release it with [`unlock`](MutexGuard::unlock) to learn whether it was still held. Dropping
/// the guard releases the lock in the background, best effort; if that release cannot reach
/// Redis, the lock frees itself when its lease ends.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), relock::Error> {
/// # let server = relock_testkit::RedisServer::start();
/// # let client = relock::Client::connect(server.url().as_str()).await?;
/// let guard = client.mutex("reindex")?.lock().await?;
/// assert!(guard.is_held());
/// tokio::select! {
///     reason = guard.lost() => panic!("lost the lock: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock right away"]
pub struct MutexGuard {
    mutex: Mutex,
    token: OwnerToken,
    fence: Fence,
    lease: Arc<LeaseState>,
    released: bool,
}

impl MutexGuard {
    /// The fencing token of this grant: larger than that of every earlier grant of the name.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The instant until which the lock is certainly held: the time the last successful
    /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
    pub fn valid_until(&self) -> std::time::Instant {
        self.lease.deadline().into_std()
    }

    /// Whether the lock is still held as far as this process knows, without asking Redis:
    /// the lost signal has not fired and the validity deadline has not passed.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Completes when the lock is lost: when renewal finds it deleted or taken, or when the
    /// validity deadline passes without a successful renewal (Redis unreachable or paused).
    /// Stop touching the protected resource when it fires.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; call it as often as you like, from `select!` loops too.
    ///
    /// # Examples
    ///
    /// See [`MutexGuard`].
    pub async fn lost(&self) -> Lost {
        self.lease.lost().await
    }

    /// Sets the lease to `lease` from now, if the lock is still held. For a renewed lease the
    /// renewal task goes on renewing with the mutex's own lease length afterwards.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the lock was lost; [`Error::InvalidOption`] for a lease out of
    /// range; [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped extension either reached Redis or did not; the validity deadline
    /// only moves on a confirmed reply.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::Client::connect(server.url().as_str()).await?;
    /// use std::time::Duration;
    /// use relock::{Lease, MutexOptions};
    ///
    /// let options = MutexOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
    /// let guard = client.mutex_with_options("export", options)?.lock().await?;
    /// guard.extend(Duration::from_secs(60)).await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = lease_millis(lease)?;
        let m = &self.mutex;
        let sent_at = Instant::now();
        let reply = MUTEX_EXTEND
            .key(m.names.lock_key.as_slice())
            .arg(self.token.as_str())
            .arg(lease_ms)
            .invoke_async::<i64>(&mut m.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &m.names.display))?;
        if reply == 1 && self.lease.renewed(sent_at, lease) {
            return Ok(());
        }
        if reply != 1 {
            self.lease.mark_lost(Lost::Revoked);
        }
        Err(self.not_held())
    }

    /// Releases the lock and reports whether it was still held until then.
    ///
    /// A release whose reply was lost is resent; if the resend finds the key gone while the
    /// validity deadline has not passed, the first send released it (nobody else can have
    /// taken a lock that was still validly ours), so this reports success rather than a false
    /// error.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the lock had already expired or been taken: whatever the guard
    /// protected was unprotected for a while. [`Error::Redis`] when Redis cannot be reached;
    /// the lock then frees itself when its lease ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
    /// background as for a dropped guard.
    ///
    /// # Examples
    ///
    /// See [`Mutex`].
    pub async fn unlock(mut self) -> Result<()> {
        self.stop_renewing();
        let deadline = self.lease.deadline();
        let mut resent = false;
        let mut pause = RESEND_PAUSE;
        let mut tries = 0;
        loop {
            tries += 1;
            let conn = self.mutex.shared.conn.clone();
            match release(conn, &self.mutex.names, &self.token).await {
                Ok(1) => {
                    self.released = true;
                    return Ok(());
                }
                Ok(0) if resent && Instant::now() < deadline => {
                    self.released = true;
                    return Ok(());
                }
                Ok(_) => {
                    self.released = true;
                    self.lease.mark_lost(Lost::Revoked);
                    return Err(self.not_held());
                }
                Err(e) if e.is_unavailable() && tries < SEND_ATTEMPTS => {
                    resent = true;
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn stop_renewing(&self) {
        if self.mutex.lease.is_renewed() {
            self.mutex.shared.keeper.forget(self.lease.id());
        }
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.mutex.names.display.clone(),
        }
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if !self.released {
            self.stop_renewing();
            release_in_background(&self.mutex, &self.token);
        }
    }
}

impl fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &self.mutex.names.display)
            .field("fence", &self.fence)
            .field("held", &self.is_held())
            .finish()
    }
}
