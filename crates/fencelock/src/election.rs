//! Leader election: one candidate of a name leads, the others wait to take over, and anyone can
//! read or watch who leads.
//!
//! A leader is the holder of a lock key, granted, renewed and released by the grant core as a
//! [`Mutex`](crate::Mutex) is, whose value also carries the leader's published value and the
//! server time its leadership began. Every change of leader (a grant, a proclaimed value, a
//! resignation) is announced on the election's own channel, which observers listen on; an
//! expiry without a resignation is noticed by their fallback timer, cut to the leader's
//! remaining lease.

use std::fmt;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::ScriptInvocation;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::grant::{self, Held, Resource};
use crate::guard::guard;
use crate::keeper::{RenewKind, Renewal};
use crate::keys::layout::ELECTION;
use crate::keys::LockKeys;
use crate::lease::Lost;
use crate::notify::{Target, Waiter};
use crate::options::{Lease, MutexOptions};
use crate::race::{self, Either};
use crate::scripts::{
    ELECTION_ACQUIRE, ELECTION_LEADER, ELECTION_PROCLAIM, ELECTION_RELEASE, MUTEX_EXTEND,
};
use crate::shared::Shared;
use crate::token::{jitter_fraction, Fence, OwnerToken};

/// The first pause of [`Election::lead`] after a failed campaign or a lost leadership; it
/// doubles up to the lease.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A leader election among the instances of a service: at most one candidate of a name leads at
/// a time, across every process that uses the same Redis.
///
/// A candidate [`campaign`](Election::campaign)s with a value it publishes (its address, host
/// and pid, ...) and waits until it leads; it then holds a [`Leadership`] whose lease is renewed
/// in the background, as a [`MutexGuard`](crate::MutexGuard)'s is. When the leader resigns, a
/// waiting candidate takes over at once; when it dies, within one lease. Anyone can ask who
/// leads ([`leader`](Election::leader)) or follow each change ([`observe`](Election::observe)).
/// [`lead`](Election::lead) runs the usual loop: campaign, run a task while leading, stop it when
/// leadership is lost, campaign again.
///
/// Use it instead of a [`Mutex`](crate::Mutex) when the lock is held for the life of a process
/// (a scheduler, a single consumer) and others need to know who holds it. As with a mutex, a
/// leader paused past its lease may still act after another took over: pass the
/// [`fence`](Leadership::fence) to what the leader writes to ([`topics::election`] says what a
/// leader is guaranteed, and the settings' trade-offs).
///
/// [`topics::election`]: crate::topics::election
///
/// Offered on one server, Sentinel and Cluster clients; a RedLock client refuses it.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("host-a:4242").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.value(), "host-a:4242");
/// assert_eq!(leader.fence(), leadership.fence());
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Election {
    inner: Arc<Inner>,
}

/// The election's name, keys and settings, computed once per handle.
struct Inner {
    shared: Arc<Shared>,
    name: String,
    leader_key: Vec<u8>,
    fence_key: Vec<u8>,
    /// Where resignations wake waiting candidates.
    wake_channel: Vec<u8>,
    /// Where every change of leader is announced to observers.
    leader_channel: Vec<u8>,
    lease: Lease,
    lease_ms: u64,
    wait_timeout: Option<Duration>,
}

/// One campaign: the election and the value its candidate publishes.
struct Candidate {
    election: Arc<Inner>,
    value: String,
}

/// Who leads an election: the value the leader published, its fence and since when it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    value: String,
    fence: Fence,
    since: SystemTime,
}

impl Leader {
    /// The value the leader published when it won, or last [proclaimed](Leadership::proclaim)
    /// (lossily decoded where it is not UTF-8).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The fencing token of this leadership: larger than that of every earlier leadership of
    /// the election.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// When this leadership began, by the Redis server's clock.
    pub fn since(&self) -> SystemTime {
        self.since
    }
}

impl Election {
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: MutexOptions) -> Result<Self> {
        shared.require_single("leader election")?;
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let lease_ms = lease.millis()?;
        Ok(Election {
            inner: Arc::new(Inner {
                name: keys.display_name(),
                leader_key: keys.key(ELECTION.leader),
                fence_key: keys.fence_key(),
                wake_channel: keys.key(ELECTION.wake),
                leader_channel: keys.key(ELECTION.changes),
                lease,
                lease_ms,
                wait_timeout: options.wait_timeout,
                shared,
            }),
        })
    }

    /// The election's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The lease of each leadership: how long a crashed leader keeps the election.
    pub fn lease(&self) -> Lease {
        self.inner.lease
    }

    /// Waits until this candidate leads, publishing `value` as its leader's value, or until the
    /// election's [`wait_timeout`](MutexOptions::wait_timeout) if it has one.
    ///
    /// While another candidate leads, the caller sleeps until a resignation is announced (or at
    /// most the client's [`wake_fallback`](crate::ClientOptions::wake_fallback), never past the
    /// leader's remaining lease), then tries again, as [`Mutex::lock`](crate::Mutex::lock) does;
    /// as it does too, it keeps trying while Redis cannot be reached, until the wait limit or,
    /// without one, for the client's [`outage_limit`](crate::ClientOptions::outage_limit).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when the wait limit passes;
    /// [`Error::WrongType`](crate::Error::WrongType) when the election's key holds another Redis
    /// type; [`Error::Redis`](crate::Error::Redis) when Redis stays unreachable until the wait
    /// limit (without one, for the client's outage limit): the last error;
    /// [`Error::Shutdown`](crate::Error::Shutdown) when the client is shut down, before or
    /// while campaigning.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped after a request went out, the candidate may have
    /// won without knowing: that leadership is resigned in the background, by owner token.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let election = client.election("compaction")?;
    /// let first = election.campaign("a").await?;
    /// let standby = tokio::spawn({
    ///     let election = election.clone();
    ///     async move { election.campaign("b").await.map(|l| l.fence()) }
    /// });
    /// let before = first.fence();
    /// first.resign().await?; // the standby takes over at once
    /// assert!(standby.await.expect("task")? > before);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let candidate = Arc::new(Candidate {
            election: Arc::clone(&self.inner),
            value: value.into(),
        });
        let held = grant::acquire(&candidate, self.inner.wait_timeout).await?;
        Ok(Leadership { held })
    }

    /// Who leads now, or `None` when nobody does.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when the election's key holds another
    /// Redis type; [`Error::UnexpectedReply`](crate::Error::UnexpectedReply) when it holds a
    /// value fencelock did not write; [`Error::Redis`](crate::Error::Redis) when Redis cannot be
    /// reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: fencelock::Election) -> Result<(), fencelock::Error> {
    /// match election.leader().await? {
    ///     Some(leader) => println!("{} leads with fence {}", leader.value(), leader.fence()),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.inner.read().await?.map(|(leader, _)| leader))
    }

    /// Follows the election's leader: see [`LeaderWatch`]. Nothing is sent before its first
    /// [`next`](LeaderWatch::next).
    ///
    /// # Examples
    ///
    /// See [`LeaderWatch`].
    pub fn observe(&self) -> LeaderWatch {
        LeaderWatch {
            election: Arc::clone(&self.inner),
            waiter: None,
            last: None,
            wake_at: None,
        }
    }

    /// Campaigns forever: whenever this candidate leads, runs `task(fence)` until leadership
    /// is lost, then campaigns again; returns once `shutdown` completes, resigning first if it
    /// leads.
    ///
    /// The task's future is dropped as soon as leadership is lost (renewal found it taken, or
    /// its validity deadline passed), and is never polled after its validity deadline passed,
    /// even when the whole process was paused past it. A
    /// task that ends by itself ends the leadership too: it is resigned, so that another
    /// candidate can take over. Before each new campaign after a failure or a lost or ended
    /// leadership, the loop pauses for a jittered backoff, from 100 ms doubling up to the
    /// lease; Redis being unreachable, a wait limit passing and too few replicas acknowledging
    /// a won campaign (with [`wait_for_replicas`](crate::ClientOptions::wait_for_replicas))
    /// are such failures.
    ///
    /// On shutdown while leading, the task is dropped first, then the leadership is resigned
    /// and the resignation waited for, so a standby takes over at once. A
    /// [`Client::shutdown`](crate::Client::shutdown) of the election's client ends the loop
    /// too: the client resigns the leadership, and the task is dropped at once.
    ///
    /// # Errors
    ///
    /// The errors of [`campaign`](Election::campaign) that retrying cannot cure:
    /// [`Error::WrongType`](crate::Error::WrongType), and any error Redis answered other than
    /// being unavailable; [`Error::Shutdown`](crate::Error::Shutdown) when the client was shut
    /// down.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`campaign`](Election::campaign): dropping the future drops the task and
    /// resigns in the background. Prefer `shutdown` for a graceful end, which waits for the
    /// resignation.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// use std::time::Duration;
    ///
    /// let election = client.election("scheduler")?;
    /// let shutdown = tokio::time::sleep(Duration::from_millis(300)); // e.g. ctrl_c()
    /// election
    ///     .lead("host-a", shutdown, |fence| async move {
    ///         println!("leading with fence {fence}");
    ///         std::future::pending::<()>().await // run the scheduler
    ///     })
    ///     .await?;
    /// assert!(election.leader().await?.is_none(), "resigned on shutdown");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lead<F, T>(
        &self,
        value: impl Into<String>,
        shutdown: impl Future<Output = ()>,
        mut task: F,
    ) -> Result<()>
    where
        F: FnMut(Fence) -> T,
        T: Future<Output = ()>,
    {
        let value = value.into();
        let mut shutdown = pin!(shutdown);
        let mut backoff = Backoff::new(self.inner.lease.duration());
        loop {
            let campaign = match race::biased(&mut shutdown, self.campaign(value.as_str())).await {
                Either::Left(()) => return Ok(()),
                Either::Right(campaign) => campaign,
            };
            let leadership = match campaign {
                Ok(leadership) => leadership,
                Err(e) if is_transient(&e) => {
                    if backoff.pause_unless(&mut shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            backoff.reset();
            match serve_term(leadership, &mut shutdown, &mut task).await {
                TermEnd::Shutdown => return Ok(()),
                TermEnd::ClientShutDown => return Err(Error::Shutdown),
                TermEnd::Lost | TermEnd::TaskEnded => {}
            }
            if backoff.pause_unless(&mut shutdown).await {
                return Ok(());
            }
        }
    }
}

/// What ended one leadership of [`Election::lead`].
#[derive(PartialEq, Eq)]
enum TermEnd {
    /// The loop's `shutdown` future completed.
    Shutdown,
    /// [`Client::shutdown`](crate::Client::shutdown) gave the leadership back: campaigning
    /// again would be refused.
    ClientShutDown,
    Lost,
    TaskEnded,
}

/// Runs the task of [`Election::lead`] while `leadership` lasts, and resigns when the task
/// ended or `shutdown` came.
async fn serve_term<S, F, T>(
    leadership: Leadership,
    shutdown: &mut Pin<&mut S>,
    task: &mut F,
) -> TermEnd
where
    S: Future<Output = ()>,
    F: FnMut(Fence) -> T,
    T: Future<Output = ()>,
{
    // In this order: after a pause past the lease, the loss is seen before the task is polled
    // again.
    let lost_or_done = race::biased(leadership.lost(), task(leadership.fence()));
    let end = match race::biased(shutdown, lost_or_done).await {
        Either::Left(()) => TermEnd::Shutdown,
        Either::Right(Either::Left(Lost::Shutdown)) => TermEnd::ClientShutDown,
        Either::Right(Either::Left(_)) => TermEnd::Lost,
        Either::Right(Either::Right(())) => TermEnd::TaskEnded,
    };
    if matches!(end, TermEnd::Shutdown | TermEnd::TaskEnded) {
        // An error only says that leadership had ended already.
        let _ = leadership.resign().await;
    }
    end
}

/// Whether campaigning again may succeed where this campaign failed.
fn is_transient(e: &Error) -> bool {
    e.is_unavailable() || matches!(e, Error::Timeout { .. } | Error::NotReplicated { .. })
}

/// The jittered, doubling pause of [`Election::lead`] between campaigns.
struct Backoff {
    next: Duration,
    most: Duration,
}

impl Backoff {
    fn new(most: Duration) -> Backoff {
        Backoff {
            next: FIRST_BACKOFF.min(most),
            most,
        }
    }

    fn reset(&mut self) {
        self.next = FIRST_BACKOFF.min(self.most);
    }

    /// Pauses, unless `shutdown` completes first: then answers `true`.
    async fn pause_unless<S: Future<Output = ()>>(&mut self, shutdown: &mut Pin<&mut S>) -> bool {
        let pause = self.next.mul_f64(0.5 + 0.5 * jitter_fraction());
        self.next = (self.next * 2).min(self.most);
        let slept = race::biased(shutdown, tokio::time::sleep(pause)).await;
        matches!(slept, Either::Left(()))
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.inner.name)
            .field("lease", &self.inner.lease)
            .field("wait_timeout", &self.inner.wait_timeout)
            .finish()
    }
}

impl Inner {
    /// The leader and its remaining lease, or `None` when nobody leads.
    async fn read(&self) -> Result<Option<(Leader, Option<Duration>)>> {
        let reply: Option<(Vec<u8>, i64)> = ELECTION_LEADER
            .key(self.leader_key.as_slice())
            .invoke_async(&mut self.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &self.name))?;
        let Some((stored, pttl)) = reply else {
            return Ok(None);
        };
        let leader = parse_leader(&stored).ok_or_else(|| Error::UnexpectedReply {
            detail: format!(
                "the leader key of election {:?} holds {:?}",
                self.name,
                String::from_utf8_lossy(&stored)
            ),
        })?;
        let remaining = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok(Some((leader, remaining)))
    }
}

/// Reads a stored leader: `token:fence:since:value` (see `lua/election_acquire.lua`).
fn parse_leader(stored: &[u8]) -> Option<Leader> {
    let mut parts = stored.splitn(4, |&b| b == b':');
    let _token = parts.next()?;
    let fence = decimal(parts.next()?)?;
    let since = decimal(parts.next()?)?;
    let value = parts.next()?;
    Some(Leader {
        value: String::from_utf8_lossy(value).into_owned(),
        fence: Fence::new(fence),
        since: UNIX_EPOCH + Duration::from_millis(since),
    })
}

fn decimal(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Resource for Candidate {
    fn name(&self) -> &str {
        &self.election.name
    }

    fn kind(&self) -> &'static str {
        "election"
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.election.shared
    }

    fn lease(&self) -> Lease {
        self.election.lease
    }

    fn lease_ms(&self) -> u64 {
        self.election.lease_ms
    }

    fn wake_channel(&self) -> &[u8] {
        &self.election.wake_channel
    }

    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let e = &self.election;
        let mut invocation = ELECTION_ACQUIRE.on(&e.shared.conn).prepare_invoke();
        invocation
            .key(e.leader_key.as_slice())
            .key(e.fence_key.as_slice())
            .arg(token.as_str())
            .arg(e.lease_ms)
            .arg(e.shared.options.fence_memory_ms())
            .arg(self.value.as_str())
            .arg(e.leader_channel.as_slice());
        invocation
    }

    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        let e = &self.election;
        let mut invocation = ELECTION_RELEASE.on(&e.shared.conn).prepare_invoke();
        invocation
            .key(e.leader_key.as_slice())
            .arg(token.as_str())
            .arg(e.wake_channel.as_slice())
            .arg(e.leader_channel.as_slice());
        invocation
    }

    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static> {
        // The leader key's value starts with the owner token, as a mutex's does.
        let mut invocation = MUTEX_EXTEND.prepare_invoke();
        invocation
            .key(self.election.leader_key.as_slice())
            .arg(token.as_str())
            .arg(lease_ms);
        invocation
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.election.leader_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::Value,
        }]
    }
}

/// Proof of leading an [`Election`], with its lease and fencing token.
///
/// Its lease is renewed in the background while it lives (unless the election's lease is
/// fixed). Watch [`lost`](Leadership::lost) and stop acting as the leader when it fires.
/// [`resign`](Leadership::resign) hands leadership over at once; dropping the guard resigns in
/// the background, best effort, and if that cannot reach Redis the leadership ends with its
/// lease. A drop only queues the resignation to the client's background task, which ends with
/// the runtime: before the program exits, call [`Client::shutdown`](crate::Client::shutdown),
/// which resigns every leadership still held, as it releases every lock, and waits for Redis to
/// answer. After it, the leadership is not held, its `lost()` completes with
/// [`Lost::Shutdown`](crate::Lost::Shutdown), and its `resign`, `extend` and `proclaim` return
/// [`Error::Shutdown`](crate::Error::Shutdown).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let leadership = client.election("consumer")?.campaign("host-a").await?;
/// tokio::select! {
///     reason = leadership.lost() => panic!("no longer leading: {reason}"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {} // the work
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the leadership only queues its resignation to the client's background task; call `resign`, or `Client::shutdown` before the program exits"]
pub struct Leadership {
    held: Held<Candidate>,
}

impl Leadership {
    /// Publishes `value` as the leader's value instead of the one it campaigned with, if this
    /// candidate still leads; the fence, since-when and lease stay as they are. Observers see
    /// the change.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when leadership was lost (the lost signal then
    /// fires); [`Error::Shutdown`](crate::Error::Shutdown) when the client was shut down (nothing
    /// is sent); [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped proclamation either reached Redis or did not; an observer sees
    /// whichever value Redis holds.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let election = client.election("primary")?;
    /// let leadership = election.campaign("10.0.0.7:5432 (starting)").await?;
    /// leadership.proclaim("10.0.0.7:5432").await?;
    /// assert_eq!(election.leader().await?.expect("leads").value(), "10.0.0.7:5432");
    /// # leadership.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn proclaim(&self, value: impl AsRef<str>) -> Result<()> {
        let candidate = self.held.resource();
        let e = &candidate.election;
        if e.shared.holds.is_shut_down() {
            // The shutdown resigned this leadership, or is about to: a proclamation would find
            // it gone, or make the resigned leader look alive to observers.
            return Err(Error::Shutdown);
        }
        let reply: i64 = ELECTION_PROCLAIM
            .on(&e.shared.conn)
            .key(e.leader_key.as_slice())
            .arg(self.held.token().as_str())
            .arg(value.as_ref())
            .arg(e.leader_channel.as_slice())
            .invoke_async(&mut e.shared.conn.clone())
            .await
            .map_err(|err| Error::from_redis(err, &e.name))?;
        if reply == 1 {
            Ok(())
        } else {
            Err(self.held.revoked())
        }
    }
}

guard! {
    Leadership {
        fence:
        /// The fencing token of this leadership: larger than that of every earlier leadership of
        /// the election. Pass it with every write the leader makes.
        name:
        /// The election's name.
        valid_until:
        /// The instant until which this candidate certainly leads: the time the last successful
        /// campaign or renewal was sent, plus the lease, minus a drift allowance of 1% + 2 ms.
        is_held:
        /// Whether this candidate still leads as far as this process knows, without asking Redis:
        /// the lost signal has not fired and the validity deadline has not passed.
        lost:
        /// Completes when leadership is lost: when renewal finds the leader key deleted or taken,
        /// or when the validity deadline passes without a successful renewal (Redis unreachable,
        /// or this process paused). Stop acting as the leader when it fires.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe; call it as often as you like, from `select!` loops too.
        ///
        /// # Examples
        ///
        /// See [`Leadership`].
        extend:
        /// Makes the lease last at least `lease` from now, if this candidate still leads, as
        /// [`MutexGuard::extend`](crate::MutexGuard::extend) does: for an election of fixed
        /// leases, whose leader says by itself how long it goes on leading.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when leadership was lost;
        /// [`Error::InvalidOption`](crate::Error::InvalidOption) for a lease out of range;
        /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: the validity deadline only moves on a confirmed reply.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn demo(leadership: fencelock::Leadership) -> Result<(), fencelock::Error> {
        /// leadership.extend(std::time::Duration::from_secs(60)).await?;
        /// # Ok(())
        /// # }
        /// ```
        release resign:
        /// Ends this leadership at once: a waiting candidate takes over without waiting for the
        /// lease, and observers see nobody lead until it does. Reports whether this candidate still
        /// led until then.
        ///
        /// # Errors
        ///
        /// [`Error::NotHeld`](crate::Error::NotHeld) when leadership had already been lost;
        /// [`Error::Shutdown`](crate::Error::Shutdown) when the client's shutdown resigned it
        /// already; [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached (the
        /// leadership then ends with its lease).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: if the future is dropped before Redis confirmed, the resignation goes on in
        /// the background as for a dropped guard.
        ///
        /// # Examples
        ///
        /// See [`Election`].
        debug: []
    }
}

/// The changes of an election's leader, as [`Election::observe`] returns them: each
/// [`next`](LeaderWatch::next) answers the leader (`Some`) or that nobody leads (`None`).
///
/// The first `next` answers the current state; each later one waits until it differs from the
/// last one answered: a new leader (another fence), a proclaimed value, or nobody leading. It
/// re-reads the leader on every announcement (a campaign won, a value proclaimed, a
/// resignation) and, for announcements lost and leases that ran out without one, at least
/// every [`wake_fallback`](crate::ClientOptions::wake_fallback) and when the leader's lease
/// runs out. Changes that follow each other faster than a read may be seen as one: the watch
/// never misses the latest state, but may skip one in between.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// let election = client.election("scheduler")?;
/// let mut watch = election.observe();
/// assert!(watch.next().await?.is_none(), "nobody leads yet");
/// let leadership = election.campaign("host-a").await?;
/// assert_eq!(watch.next().await?.expect("a leader").value(), "host-a");
/// leadership.resign().await?;
/// assert!(watch.next().await?.is_none());
/// # Ok(())
/// # }
/// ```
pub struct LeaderWatch {
    election: Arc<Inner>,
    /// Registered on the election's channel by the first `next`, before its first read, so
    /// that no announcement after that read is missed.
    waiter: Option<Waiter>,
    /// The state last answered; `None` before the first answer.
    last: Option<Option<Leader>>,
    /// When to read again without an announcement: the fallback, cut to the leader's lease as
    /// the last read found it; `None` to read at once.
    wake_at: Option<Instant>,
}

impl LeaderWatch {
    /// Waits for the next state of the leader that differs from the last one answered (the
    /// first call answers at once): `Some` leader, or `None` when nobody leads.
    ///
    /// # Errors
    ///
    /// As [`Election::leader`]. The watch stays usable: the next call reads again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a state is taken as answered only when the call returns it, so a dropped
    /// call loses nothing.
    ///
    /// # Examples
    ///
    /// See [`LeaderWatch`].
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        let e = Arc::clone(&self.election);
        if self.waiter.is_none() {
            let waiter = e
                .shared
                .notifier
                .wait_on(e.leader_channel.clone(), Target::Any)
                .await;
            self.waiter = Some(waiter);
        }
        loop {
            if let Some(wake_at) = self.wake_at {
                self.wait(wake_at).await;
                // Read at once on the next call if this one is dropped during the read: the
                // wake it used is gone.
                self.wake_at = None;
            }
            let (now, remaining) = match e.read().await? {
                Some((leader, remaining)) => (Some(leader), remaining),
                None => (None, None),
            };
            let nap = grant::nap(e.shared.options.wake_fallback, remaining);
            self.wake_at = Some(Instant::now() + nap);
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
        }
    }

    /// Waits for an announcement, or until `wake_at` for those lost and for a lease that ends
    /// without one. An announcement that came since the last read is kept by the waiter, so a
    /// change between two calls ends this wait at once.
    async fn wait(&self, wake_at: Instant) {
        if let Some(waiter) = &self.waiter {
            let _ = race::biased(waiter.woken(), tokio::time::sleep_until(wake_at)).await;
        }
    }
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.election.name)
            .field("last", &self.last)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_leader_is_read_back_and_anything_else_is_refused() {
        let leader = parse_leader(b"tok:17:1700000000000:host:42").expect("well formed");
        assert_eq!(
            leader.value(),
            "host:42",
            "the value may hold the separator"
        );
        assert_eq!(leader.fence(), Fence::new(17));
        assert_eq!(
            leader.since(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert_eq!(
            parse_leader(b"tok:17:1:").map(|l| l.value),
            Some(String::new())
        );
        for bad in [&b"tok:17:1"[..], b"tok:x:1:v", b"tok:1:-1:v", b"", b"tok"] {
            assert!(
                parse_leader(bad).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
