//! The fair mutex: one holder at a time per name, and waiters served in order of arrival.

use std::sync::Arc;

use crate::transport::script::Invocation;

use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::notify::Target;
use crate::core::shared::Shared;
use crate::core::stored::{LockKind, Shape, Stored};
use crate::core::{FENCE, FORCE_PARTS};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::kinds::value::{self, held_value, place_member, TAKE, VALUE};
use crate::options::LockOptions;
use crate::token::OwnerToken;
use crate::transport::script::Lua;

/// The fair lock's line as a release reads it, shared by its scripts.
const LINE_PARTS: &str = include_str!("fair/line.lua");

// Seen by the kinds, for the mutex's model, which replays its traces on these scripts too.
pub(super) static ACQUIRE: Lua =
    Lua::new(&[FENCE, VALUE, LINE_PARTS, include_str!("fair/acquire.lua")]);
pub(super) static RELEASE: Lua =
    Lua::new(&[FENCE, VALUE, LINE_PARTS, include_str!("fair/release.lua")]);
static FORCE: Lua = Lua::new(&[
    FENCE,
    VALUE,
    LINE_PARTS,
    FORCE_PARTS,
    TAKE,
    include_str!("fair/force.lua"),
]);

/// Where a fair mutex keeps its state under a name (`<prefix>{<name>}:<suffix>`): its holder,
/// laid out as a mutex's.
const LOCK_KEY: &str = "fair";
/// The waiters' places: token -> when the place ends.
const PLACES: &str = "fair-places";
/// The waiters in line, first come first.
const LINE: &str = "fair-line";
/// What every waiter listens on, where inspection counts them; a waiter a release offers the
/// lock to is told on `<wake>:<client tag>`.
const WAKE: &str = "fair-wake";

/// What inspection reads of a fair mutex, and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LOCK_KEY,
    shape: Shape::Value,
    places: Some(PLACES),
    channels: &[WAKE],
    judge: |name, raw, _| held_value(name, LockKind::FairMutex, raw),
    force: &FORCE,
    force_keys: &[LOCK_KEY, LINE, PLACES],
};

/// A distributed mutex that serves waiters in the order they arrived: at most one holder at a
/// time for a name, and when it is released, the lock goes to the waiter that has waited
/// longest, across every process that uses the same Redis. A [`Handle`]: its methods are
/// written there.
///
/// It has the same leases, renewal, fencing tokens and lost signal as [`Mutex`](crate::Mutex),
/// and one more promise: nobody jumps the line. The first attempt of
/// [`lock`](Handle::lock) that finds the lock taken (or free, with earlier waiters in line)
/// puts the caller at the back of the line. A release offers the lock, in the same script, to
/// the first waiter in line and tells only that waiter, which claims it with one request of
/// its own, so a handoff costs two script calls however many wait; a first waiter that does
/// not claim within the [`handoff_window`](crate::ClientOptions::handoff_window) (its process
/// gone, frozen or cut off) loses its turn, and the waiter behind it, told of the offer, takes
/// the lock then: a lost waiter costs the line the window, never its lease. Every waiter also
/// tries again at most every [`wake_fallback`](crate::ClientOptions::wake_fallback), which
/// keeps its place alive. A place not kept alive for three fallbacks plus the response timeout
/// (a process that stopped or died) is dropped, by the Redis server's clock, and the line
/// moves up. When the holder's lease ends without a release, the first attempt that finds the
/// lock free offers it to the first waiter in line. A waiter that gives up (a timeout, a
/// cancelled `lock()`) leaves the line. [`try_lock`](Handle::try_lock) takes the lock only
/// when it is free and nobody waits for it; when it is free but waiters are in line, it offers
/// it to the first of them, and its [`Error::Held`](crate::Error::Held) gives the offer's
/// expiry as the time left.
///
/// Use it where the order of turns matters. [`Mutex`](crate::Mutex) also hands the lock to a
/// waiter at each release and lets none starve, but promises no order: it serves the waiter
/// that tried least recently, and a request that finds its lock free (its holder's lease
/// ended) takes it, whoever waits.
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
/// Waiters served in order:
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
/// first.unlock().await?; // grants it to waiter 0; its release to waiter 1, and so on
/// for (i, waiter) in waiters.into_iter().enumerate() {
///     assert_eq!(waiter.await.expect("task")?, i);
/// }
/// # Ok(())
/// # }
/// ```
///
#[doc = include_str!("../../docs/rustdoc-links.md")]
#[doc = include_str!("../../docs/fair.md")]
pub type FairMutex = Handle<FairGrant>;

/// Proof of holding a [`FairMutex`]: a [`Guard`](crate::Guard) of a fair mutex. Its drop
/// hands the lock to the first waiter in line, as its `unlock` does.
pub type FairMutexGuard = Guard<FairGrant>;

/// A fair mutex's name, keys and settings, computed once per handle: what its grants are of.
pub struct FairGrant {
    lock: Lock,
    lock_key: Vec<u8>,
    line_key: Vec<u8>,
    places_key: Vec<u8>,
    /// The name's wake channel: what the scripts are given, and what waiters also listen on,
    /// where inspection counts them.
    wake_channel: Vec<u8>,
    /// This client's own channel of the name, where a release tells a waiter it granted the
    /// lock to: Redis writes the message to that one client, not to every waiting one.
    waiter_channel: Vec<u8>,
    /// How long a place in line lasts without an attempt, in ms.
    place_ms: u64,
}

impl FairMutex {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: &LockOptions) -> Result<Self> {
        let place_ms = shared.place_ms();
        let waiter_channel = keys.client_channel(WAKE, shared.client_id());
        let lock = Lock::new::<FairGrant>(shared, keys, options)?;
        Ok(Handle::of(Arc::new(FairGrant {
            lock_key: lock.key(LOCK_KEY),
            line_key: lock.key(LINE),
            places_key: lock.key(PLACES),
            wake_channel: lock.key(WAKE),
            waiter_channel,
            place_ms,
            lock,
        })))
    }
}

impl Kind for FairGrant {
    const NAME: &'static str = "fair_mutex";
    const GUARD: &'static str = "FairMutexGuard";
    const HANDLE: &'static str = "FairMutex";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::FairMutex;

    fn lock(&self) -> &Lock {
        &self.lock
    }

    fn wake_channel(&self) -> &[u8] {
        &self.wake_channel
    }

    /// A waiter is named on its client's own channel of the name, and listens on the name's
    /// channel too, where inspection counts the clients that wait.
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        [&self.waiter_channel, &self.wake_channel]
            .into_iter()
            .map(Vec::as_slice)
    }

    fn acquire(&self, token: &OwnerToken, waits: bool, _refused_before: bool) -> Invocation {
        let mut invocation = ACQUIRE.invocation();
        invocation
            .key(self.lock_key.as_slice())
            .key(self.line_key.as_slice())
            .key(self.places_key.as_slice())
            .arg(token.as_str())
            .arg(self.lock.lease_ms)
            .arg(self.lock.label())
            .arg(if waits { self.place_ms } else { 0 })
            .arg(self.wake_channel.as_slice())
            .arg(self.lock.handoff_window_ms());
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let mut invocation = RELEASE.invocation();
        invocation
            .key(self.lock_key.as_slice())
            .key(self.line_key.as_slice())
            .key(self.places_key.as_slice())
            .arg(token.as_str())
            .arg(self.wake_channel.as_slice())
            .arg(self.lock.fence_memory_ms())
            .arg(place_member(token, self.lock.lease_ms, self.lock.label()))
            .arg(self.lock.handoff_window_ms());
        invocation
    }

    /// The lock's value is laid out as a mutex's, so the mutex's extension serves.
    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        value::extend(&self.lock_key, token, lease_ms)
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.lock_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::Value,
        }]
    }

    fn keeps_place_while_waiting(&self) -> bool {
        true
    }

    fn wake_target(&self, token: &OwnerToken) -> Target {
        Target::Token(token.as_str().as_bytes().to_vec())
    }
}

/// The fair mutex's scripts, run directly against a real server.
#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::{announced_on, conn};

    const LOCK: &str = "t:{f}:fair";
    const LINE: &str = "t:{f}:fair-line";
    const PLACES: &str = "t:{f}:fair-places";
    const WAKE: &str = "t:{f}:fair-wake";

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
            .arg(WINDOW)
            .invoke_async(c)
            .await
            .expect("acquire")
    }

    /// How long the tests' releases offer the lock to the first in line, in ms.
    const WINDOW: u64 = 1_000;

    /// The fence of the value the lock holds.
    fn held_fence(server: &RedisServer) -> i64 {
        let value = server.cli(&["GET", LOCK]);
        value
            .split(':')
            .nth(1)
            .and_then(|f| f.trim_end_matches(['+', '?']).parse().ok())
            .unwrap_or_else(|| panic!("a held value with a fence: {value}"))
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
            .arg(place(token))
            .arg(WINDOW)
            .invoke_async(c)
            .await
            .expect("release")
    }

    /// A release by `token` while its client's channel has a listener, and what it announced.
    async fn release_heard(server: &RedisServer, token: &'static str, expect: i64) -> Vec<String> {
        let mut c = conn(server).await;
        announced_on(server, WAKE, async move {
            assert_eq!(release(&mut c, token).await, expect, "release by {token}");
        })
        .await
    }

    /// A waiter's place member, as the scripts store it: every test waiter asks for 10 s.
    fn place(token: &str) -> String {
        format!("{token}10000")
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
        assert_eq!(line(&server), "b:10000\nc:10000");
        // Twice the place, given by the first refusal; the next ones found it long enough.
        let ttl: i64 = server.cli(&["PTTL", PLACES]).parse().expect("pttl");
        assert!(ttl > 9_000 && ttl <= 10_000, "{ttl}");

        assert_eq!(release(&mut c, "b:").await, -1, "b does not hold it");
        assert_eq!(line(&server), "c:10000", "but b left the line");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0);
        assert_eq!(
            line(&server),
            "c:10000\nb:10000",
            "and joins at the back again"
        );

        // The release offers the lock to c, first in line, and tells b, behind it, for how
        // long.
        let heard = release_heard(&server, "a:", 1).await;
        assert_eq!(heard, ["c:".to_owned(), format!("b:?{WINDOW}")]);
        let fence = held_fence(&server);
        assert!(fence > granted[1], "fences rise");
        assert!(server
            .cli(&["GET", LOCK])
            .starts_with(&format!("c:{fence}")));
        assert_eq!(line(&server), "b:10000");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0, "held by c");
        assert_eq!(acquire(&mut c, "t:", 0).await[0], 0);
        assert_eq!(
            acquire(&mut c, "c:", 5_000).await,
            [1, fence],
            "c's next attempt claims the offer"
        );
        let ttl: i64 = server.cli(&["PTTL", LOCK]).parse().expect("pttl");
        assert!(ttl > 9_000, "claimed for c's lease: {ttl}");
        let heard = release_heard(&server, "c:", 1).await;
        assert_eq!(heard, ["b:"]);
        assert_eq!(release(&mut c, "c:").await, -1, "b holds it now");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 1);
        assert_eq!(line(&server), "");
    }

    #[tokio::test]
    async fn waiters_out_of_time_are_dropped_and_one_that_hears_nothing_keeps_its_turn() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "a:", 5_000).await;
        for waiter in ["late:", "deaf.1:", "b:"] {
            assert_eq!(acquire(&mut c, waiter, 5_000).await[0], 0);
        }
        // `late:` stopped trying: its place ended by the server's clock. `deaf.1:`'s client
        // hears nothing on its channel (`fair-wake:deaf`) right now: it may be reconnecting,
        // so it is offered its turn all the same.
        server.cli(&["ZADD", PLACES, "1", &place("late:")]);
        let heard = release_heard(&server, "a:", 1).await;
        assert_eq!(heard, [format!("b:?{WINDOW}")], "b hears of deaf's offer");
        assert_eq!(line(&server), "b:10000");
        assert!(server.cli(&["GET", LOCK]).starts_with("deaf.1:"));
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0, "offered to deaf");
        // deaf never claims: the offer ends with the window, and b, first in line, takes it.
        server.cli(&["PEXPIRE", LOCK, "1"]);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert_eq!(acquire(&mut c, "n:", 0).await[0], 0, "b waits ahead of n");
        assert!(server.cli(&["GET", LOCK]).starts_with("b:"), "offered to b");
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 1);
        assert_eq!(
            acquire(&mut c, "deaf.1:", 5_000).await[0],
            0,
            "too late: its claim is refused, and it joins the back of the line"
        );
        assert_eq!(line(&server), "deaf.1:10000");
        assert_eq!(release(&mut c, "deaf.1:").await, -1, "deaf gives up");
        // A waiter in line without a place is dropped rather than blocking the line.
        acquire(&mut c, "x:", 5_000).await;
        server.cli(&["ZREM", PLACES, &place("x:")]);
        assert!(release_heard(&server, "b:", 1).await.is_empty());
        assert_eq!(acquire(&mut c, "y:", 0).await[0], 1);
    }

    #[tokio::test]
    async fn a_waiter_whose_place_ended_loses_its_turn_when_it_comes_back() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        acquire(&mut c, "h:", 5_000).await;
        for waiter in ["gone:", "b:"] {
            assert_eq!(acquire(&mut c, waiter, 5_000).await[0], 0);
        }
        // `gone:` stopped trying for longer than its place lasts (its process was frozen); the
        // holder's lease ended meanwhile.
        server.cli(&["ZADD", PLACES, "1", &place("gone:")]);
        server.cli(&["DEL", LOCK]);
        // Back, it finds the lock free with its own entry still first in line: that entry ended,
        // so b:, live behind it, is offered the lock and gone: goes to the back.
        assert_eq!(
            acquire(&mut c, "gone:", 5_000).await[0],
            0,
            "no longer first"
        );
        assert!(
            server.cli(&["GET", LOCK]).starts_with("b:"),
            "offered to b:"
        );
        assert_eq!(line(&server), "gone:10000");
        // A waiter whose ended place is still in line while the lock is held also rejoins at the
        // back, not where it was.
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 1, "b: claims");
        assert_eq!(acquire(&mut c, "c:", 5_000).await[0], 0);
        server.cli(&["ZADD", PLACES, "1", &place("gone:")]);
        assert_eq!(acquire(&mut c, "gone:", 5_000).await[0], 0);
        assert_eq!(line(&server), "c:10000\ngone:10000");
    }

    #[tokio::test]
    async fn a_forced_release_offers_the_lock_to_the_first_in_line() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let taken = acquire(&mut c, "a:", 5_000).await;
        assert_eq!(acquire(&mut c, "b:", 5_000).await[0], 0);
        let mut f = c.clone();
        let heard = announced_on(&server, WAKE, async move {
            let (_, value, ..): (i64, Option<String>, i64, Vec<String>, u64) = FORCE
                .plain()
                .key(LOCK)
                .key(LINE)
                .key(PLACES)
                .arg(WAKE)
                .arg(60_000)
                .arg(WINDOW)
                .invoke_async(&mut f)
                .await
                .expect("force");
            assert!(
                value.is_some_and(|v| v.starts_with("a:")),
                "a's hold removed"
            );
        })
        .await;
        assert_eq!(heard, ["b:"], "an offer to b, first in line");
        let fence = held_fence(&server);
        assert!(fence > taken[1]);
        assert!(server
            .cli(&["GET", LOCK])
            .starts_with(&format!("b:{fence}")));
        assert_eq!(acquire(&mut c, "b:", 5_000).await, [1, fence]);
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
