//! The fair mutex: one holder at a time per name, and waiters served in order of arrival.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::ScriptInvocation;

use crate::error::Result;
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::FAIR;
use crate::keys::LockKeys;
use crate::notify::Target;
use crate::options::{Lease, MutexOptions};
use crate::scripts::{announcing_script, Announcing, MUTEX_EXTEND};
use crate::shared::Shared;
use crate::token::{Fence, OwnerToken};

static ACQUIRE: LazyLock<Announcing> =
    announcing_script!("fence.lua", "mutex_value.lua", "fair_acquire.lua");
static RELEASE: LazyLock<Announcing> = announcing_script!("mutex_value.lua", "fair_release.lua");

/// A distributed mutex that serves waiters in the order they arrived: at most one holder at a
/// time for a name, and when it is released, the lock goes to the waiter that has waited
/// longest, across every process that uses the same Redis.
///
/// It has the same leases, renewal, fencing tokens and lost signal as [`Mutex`](crate::Mutex),
/// and one more promise: nobody jumps the line. A release wakes only the first waiter, so a
/// hand-off costs two script calls however many wait. [`try_lock`](FairMutex::try_lock) takes
/// the lock only when it is free and nobody waits for it.
///
/// Use it where the order of turns matters. [`Mutex`](crate::Mutex) also wakes the waiter
/// that has waited longest and lets none starve, but promises no order: a request that finds
/// its lock free (and not kept for a woken waiter) takes it, whoever waits.
///
/// The handle is cheap to clone and touches Redis only when asked to lock.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let url = server.url();
/// let client = fencelock::Client::connect(url.as_str()).await?;
/// let counter = client.fair_mutex("ticket-counter")?;
///
/// let guard = counter.lock().await?;
/// println!("serving with fence {}", guard.fence());
/// assert!(counter.try_lock().await.is_err());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
#[doc = include_str!("../docs/rustdoc-links.md")]
#[doc = include_str!("../docs/fair.md")]
#[derive(Clone)]
pub struct FairMutex {
    /// Attempts that take a place in line when refused.
    waiting: Arc<Inner>,
    /// Attempts that take no place: `try_lock`.
    trying: Arc<Inner>,
}

/// The lock's name, keys and settings, computed once per handle.
struct Keys {
    shared: Arc<Shared>,
    name: String,
    lock_key: Vec<u8>,
    line_key: Vec<u8>,
    places_key: Vec<u8>,
    /// The name's wake channel: what the scripts are given, and what waiters also listen on.
    wake_channel: Vec<u8>,
    /// This client's own channel of the name, where a release names its woken waiter: Redis
    /// writes the message to that one client, not to every waiting one.
    waiter_channel: Vec<u8>,
    lease: Lease,
    lease_ms: u64,
    fence_memory_ms: u64,
    wait_timeout: Option<Duration>,
}

/// The lock as one kind of attempt sees it: with a place in line kept while refused, or none.
struct Inner {
    keys: Arc<Keys>,
    /// How long a place in line lasts without an attempt, in ms; 0 for no place.
    place_ms: u64,
}

impl FairMutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: MutexOptions) -> Result<Self> {
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        let client = &shared.options;
        let fence_memory_ms = client.fence_memory_ms();
        let place_ms = client.place_ms();
        let keys = Arc::new(Keys {
            name: keys.display_name(),
            lock_key: keys.key(FAIR.lock),
            line_key: keys.key(FAIR.line),
            places_key: keys.key(FAIR.places),
            wake_channel: keys.key(FAIR.wake),
            waiter_channel: keys.client_channel(FAIR.wake, &shared.id),
            lease,
            lease_ms,
            fence_memory_ms,
            wait_timeout: options.wait_timeout,
            shared,
        });
        Ok(FairMutex {
            waiting: Arc::new(Inner {
                keys: Arc::clone(&keys),
                place_ms,
            }),
            trying: Arc::new(Inner { keys, place_ms: 0 }),
        })
    }

    /// The lock's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.waiting.keys.name
    }

    /// The lease each grant of this lock gets.
    pub fn lease(&self) -> Lease {
        self.waiting.keys.lease
    }

    /// Waits for the lock, in line behind the waiters that came first, or until the mutex's
    /// [`wait_timeout`](MutexOptions::wait_timeout) if it has one.
    ///
    /// The first attempt that finds the lock taken (or free but promised to an earlier
    /// waiter) puts the caller at the back of the line. A release wakes only the first waiter;
    /// every waiter also tries again at most every
    /// [`wake_fallback`](crate::ClientOptions::wake_fallback), which keeps its place alive. A
    /// place not kept alive for three fallbacks plus the response timeout (a crashed process)
    /// is dropped, by the Redis server's clock, and the line moves up. When the holder's lease
    /// ends without a release, the first waiter takes the lock as soon as it ends.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes (the caller leaves the
    /// line); [`Error::WrongType`](crate::Error::WrongType) when a key of the lock holds another
    /// Redis type; [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the
    /// wait limit (without one, for the client's
    /// [`outage_limit`](crate::ClientOptions::outage_limit)): the last error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. A dropped `lock()` leaves the line in the background; if its request was
    /// granted without the caller knowing, that grant is released, and the next waiter is
    /// woken.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let fair = client.fair_mutex("queue-demo")?;
    /// let first = fair.lock().await?;
    /// let mut waiters = Vec::new();
    /// for i in 0..3 {
    ///     let fair = fair.clone();
    ///     waiters.push(tokio::spawn(async move {
    ///         let guard = fair.lock().await?;
    ///         guard.unlock().await.map(|()| i)
    ///     }));
    ///     // Let each waiter join the line before the next one comes.
    ///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    /// }
    /// first.unlock().await?; // wakes waiter 0 alone; its release wakes waiter 1, and so on
    /// for (i, waiter) in waiters.into_iter().enumerate() {
    ///     assert_eq!(waiter.await.expect("task")?, i);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<FairMutexGuard> {
        let held = grant::acquire(&self.waiting, self.waiting.keys.wait_timeout).await?;
        Ok(FairMutexGuard { held })
    }

    /// Waits at most `timeout` for the lock. See [`FairMutex::lock`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) after `timeout`, having left the line;
    /// otherwise as [`FairMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FairMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fair: fencelock::FairMutex) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    /// match fair.lock_timeout(Duration::from_secs(2)).await {
    ///     Ok(guard) => guard.unlock().await?,
    ///     Err(fencelock::Error::Timeout { .. }) => println!("gave up my place in line"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<FairMutexGuard> {
        let held = grant::acquire(&self.waiting, Some(timeout)).await?;
        Ok(FairMutexGuard { held })
    }

    /// Tries once to take the lock, without waiting and without a place in line. It succeeds
    /// only when the lock is free and nobody waits for it: it never jumps the line.
    ///
    /// # Errors
    ///
    /// [`Error::Held`](crate::Error::Held) when another owner holds the lock, with the time
    /// its lease still runs, or when the lock is free but promised to the first waiter, with
    /// the time until that waiter's place ends unless it takes the lock; otherwise as
    /// [`FairMutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FairMutex::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let fair = client.fair_mutex("cron:compact")?;
    /// let guard = fair.try_lock().await?;
    /// match fair.try_lock().await {
    ///     Err(fencelock::Error::Held { remaining, .. }) => assert!(remaining.is_some()),
    ///     other => panic!("expected Held, got {other:?}"),
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self) -> Result<FairMutexGuard> {
        let held = grant::try_acquire(&self.trying).await?;
        Ok(FairMutexGuard { held })
    }

    /// Waits for the lock as [`lock`](FairMutex::lock) does, runs `work` while it is held,
    /// and gives it back: [`FairMutexGuard::using`] in one call. See [`Mutex::using`](crate::Mutex::using).
    ///
    /// # Errors
    ///
    /// As [`FairMutex::lock`] while waiting, then as [`FairMutexGuard::using`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FairMutex::lock`] while waiting; afterwards dropping the future drops
    /// `work` and gives the lock back in the background.
    ///
    /// # Examples
    ///
    /// See [`Mutex::using`](crate::Mutex::using).
    pub async fn using<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock().await?.using(work).await
    }
}

impl fmt::Debug for FairMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = &self.waiting.keys;
        f.debug_struct("FairMutex")
            .field("name", &keys.name)
            .field("lease", &keys.lease)
            .field("wait_timeout", &keys.wait_timeout)
            .finish()
    }
}

impl Resource for Inner {
    fn name(&self) -> &str {
        &self.keys.name
    }

    fn kind(&self) -> &'static str {
        "fair_mutex"
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.keys.shared
    }

    fn lease(&self) -> Lease {
        self.keys.lease
    }

    fn lease_ms(&self) -> u64 {
        self.keys.lease_ms
    }

    fn wake_channel(&self) -> &[u8] {
        &self.keys.wake_channel
    }

    /// A waiter is named on its client's own channel of the name, and listens on the name's
    /// channel too, where inspection counts the clients that wait.
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        [&self.keys.waiter_channel, &self.keys.wake_channel]
            .into_iter()
            .map(Vec::as_slice)
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let k = &self.keys;
        let mut invocation = ACQUIRE.on(&self.shared().conn).prepare_invoke();
        invocation
            .key(k.lock_key.as_slice())
            .key(k.line_key.as_slice())
            .key(k.places_key.as_slice())
            .arg(token.as_str())
            .arg(k.lease_ms)
            .arg(k.shared.options.holder_label.as_str())
            .arg(self.place_ms)
            .arg(k.wake_channel.as_slice());
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let k = &self.keys;
        let mut invocation = RELEASE.on(&self.shared().conn).prepare_invoke();
        invocation
            .key(k.lock_key.as_slice())
            .key(k.line_key.as_slice())
            .key(k.places_key.as_slice())
            .arg(token.as_str())
            .arg(k.wake_channel.as_slice())
            .arg(k.fence_memory_ms);
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        // The lock's value is laid out as a mutex's, so the mutex's extension serves.
        let mut invocation = MUTEX_EXTEND.prepare_invoke();
        invocation
            .key(self.keys.lock_key.as_slice())
            .arg(token.as_str())
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.keys.lock_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::Value,
        }]
    }

    fn keeps_place_while_waiting(&self) -> bool {
        self.place_ms > 0
    }

    fn wake_target(&self, token: &OwnerToken) -> Target {
        Target::Token(token.as_str().as_bytes().to_vec())
    }
}

/// Proof of holding a [`FairMutex`], with its lease and fencing token.
///
/// Release it with [`unlock`](FairMutexGuard::unlock) to learn whether it was still held.
/// Dropping the guard releases the lock in the background, best effort, and the first waiter
/// is woken; if that release cannot reach Redis, the lock frees itself when its lease ends.
/// A drop only queues the release to the client's background task, which ends with the
/// runtime: before the program exits, call [`Client::shutdown`](crate::Client::shutdown), which
/// gives back every lock still held and waits for the releases queued.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let guard = client.fair_mutex("settlement")?.lock().await?;
/// assert!(guard.is_held());
/// tokio::select! {
///     reason = guard.lost() => panic!("lost the lock: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard only queues its release to the client's background task; call `unlock`, or `Client::shutdown` before the program exits"]
pub struct FairMutexGuard {
    held: Held<Inner>,
}

guard! {
    FairMutexGuard {
        fence:
        /// The fencing token of this grant: larger than that of every earlier grant of the name.
        name:
        /// The lock's name.
        valid_until:
        /// The instant until which the lock is certainly held: the time the last successful
        /// acquire or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether the lock is still held as far as this process knows, without asking Redis:
        /// the lost signal has not fired and the validity deadline has not passed.
        lost:
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
        /// See [`FairMutexGuard`].
        extend:
        /// Makes the lease last at least `lease` from now, if the lock is still held. It
        /// never shortens it: with less than the time left, nothing changes. A renewed lease
        /// is renewed as before, which never cuts an extension short: renewals take over when
        /// the extension has run down to the lock's own lease length.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was lost;
        /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
        /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
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
        /// # async fn main() -> Result<(), fencelock::Error> {
        /// # let server = fencelock_testkit::RedisServer::start();
        /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
        /// use std::time::Duration;
        /// use fencelock::{Lease, MutexOptions};
        ///
        /// let options = MutexOptions::default().lease(Lease::Fixed(Duration::from_secs(5)));
        /// let guard = client.fair_mutex_with_options("audit", options)?.lock().await?;
        /// guard.extend(Duration::from_secs(60)).await?;
        /// guard.unlock().await?;
        /// # Ok(())
        /// # }
        /// ```
        release unlock:
        /// Releases the lock, wakes the first waiter, and reports whether the lock was still held
        /// until then.
        ///
        /// A release whose reply was lost is resent; if the resend finds the key gone while the
        /// validity deadline has not passed, the first send released it, so this reports success
        /// rather than a false error.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock had already expired or been
        /// taken: whatever the guard protected was unprotected for a while.
        /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; the lock then frees
        /// itself when its lease ends.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the release goes on in the
        /// background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`FairMutex`].
        release_no_earlier_than unlock_no_earlier_than:
        /// Releases the lock, but not before `at`, as
        /// [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than): when `at`
        /// is still ahead, the lock is left to end by itself at `at` instead of being given back now;
        /// otherwise this is [`unlock`](FairMutexGuard::unlock).
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: the request is handed to the client's background task when this is
        /// called, so dropping the future, polled or not, only stops waiting for the answer;
        /// the lock is still kept until `at`.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::unlock_no_earlier_than`](crate::MutexGuard::unlock_no_earlier_than).
        using:
        /// Runs `work` while the lock is held, then releases it, as
        /// [`MutexGuard::using`](crate::MutexGuard::using): `work` gets the fence and is stopped when
        /// the lock is lost.
        ///
        /// # Errors
        ///
        /// As [`MutexGuard::using`](crate::MutexGuard::using).
        ///
        /// # Cancel safety
        ///
        /// Dropping the future drops `work` and releases it in the background, as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`MutexGuard::using`](crate::MutexGuard::using).
        debug: []
    }
}

/// The fair mutex's scripts, run directly against a real server.
#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;

    const LOCK: &str = "t:{f}:fair";
    const LINE: &str = "t:{f}:fair-line";
    const PLACES: &str = "t:{f}:fair-places";
    const WAKE: &str = "t:{f}:fair-wake";

    async fn conn(server: &RedisServer) -> MultiplexedConnection {
        redis::Client::open(server.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    async fn acquire(c: &mut MultiplexedConnection, token: &str, place_ms: u64) -> Vec<i64> {
        ACQUIRE
            .plain()
            .key(LOCK)
            .key(LINE)
            .key(PLACES)
            .arg(token)
            .arg(10_000)
            .arg("")
            .arg(place_ms)
            .arg(WAKE)
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    async fn release(c: &mut MultiplexedConnection, token: &str) -> i64 {
        RELEASE
            .plain()
            .key(LOCK)
            .key(LINE)
            .key(PLACES)
            .arg(token)
            .arg(WAKE)
            .arg(60_000)
            .invoke_async(c)
            .await
            .expect("release")
    }

    fn line(server: &RedisServer) -> String {
        server.cli(&["ZRANGE", LINE, "0", "-1"])
    }

    #[tokio::test]
    async fn the_line_is_served_in_order_and_retries_are_idempotent() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let granted = acquire(&mut c, "a:", 5_000).await;
        assert_eq!(granted[0], 1);
        assert_eq!(acquire(&mut c, "a:", 5_000).await, granted, "a retry");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0);
        assert_eq!(acquire(&mut c, "c:", 5_000).await[0], 0);
        assert_eq!(
            acquire(&mut c, "b:", 5_000).await[0],
            0,
            "b keeps its place"
        );
        assert_eq!(acquire(&mut c, "t:", 0).await[0], 0, "no place taken");
        assert_eq!(line(&server), "b:\nc:");
        let ttl: i64 = server.cli(&["PTTL", PLACES]).parse().expect("pttl");
        assert!(ttl > 4_000 && ttl <= 5_000, "{ttl}");

        assert_eq!(release(&mut c, "b:").await, -1, "b does not hold it");
        assert_eq!(line(&server), "c:", "but b left the line");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0);
        assert_eq!(line(&server), "c:\nb:", "and joins at the back again");
        assert_eq!(release(&mut c, "a:").await, 1);
        // Free, but promised to c: neither b nor a newcomer may take it.
        let refused = acquire(&mut c, "b:", 5_000).await;
        assert_eq!(refused[0], 0);
        assert!(
            refused[1] > 4_000 && refused[1] <= 5_000,
            "c's place: {refused:?}"
        );
        assert_eq!(acquire(&mut c, "t:", 0).await[0], 0);
        let c_grant = acquire(&mut c, "c:", 5_000).await;
        assert_eq!(c_grant[0], 1);
        assert!(c_grant[1] > granted[1]);
        assert_eq!(line(&server), "b:");
        assert_eq!(release(&mut c, "c:").await, 1);
        assert_eq!(release(&mut c, "c:").await, 0);
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 1);
        assert_eq!(line(&server), "");
    }

    #[tokio::test]
    async fn places_that_ran_out_are_dropped_by_the_servers_clock() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "a:", 5_000).await;
        acquire(&mut c, "dead:", 5_000).await;
        acquire(&mut c, "b:", 5_000).await;
        server.cli(&["ZADD", PLACES, "1", "dead:"]);
        release(&mut c, "a:").await;
        // The release dropped the dead waiter and keeps the lock for b, out of the line now.
        assert_eq!(line(&server), "");
        assert!(server.cli(&["GET", LOCK]).ends_with(">b:"));
        assert_eq!(acquire(&mut c, "n:", 0).await[0], 0, "kept for b");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 1);
        // A waiter in line without a place is dropped rather than blocking the line.
        acquire(&mut c, "x:", 5_000).await;
        server.cli(&["ZREM", PLACES, "x:"]);
        release(&mut c, "b:").await;
        assert_eq!(acquire(&mut c, "y:", 0).await[0], 1);
    }

    #[tokio::test]
    async fn a_shorter_place_does_not_cut_the_line_short_under_a_longer_one() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "a:", 5_000).await;
        // Clients with other fallbacks take places of other lengths on one name.
        acquire(&mut c, "long:", 60_000).await;
        acquire(&mut c, "short:", 200).await;
        for key in [LINE, PLACES] {
            let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("pttl");
            assert!(
                ttl > 59_000,
                "{key} expires in {ttl} ms, before the long place"
            );
        }
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn is_send_sync<T: Send + Sync + 'static>() {}
        is_send_sync::<FairMutex>();
        is_send_sync::<FairMutexGuard>();
    }
}
