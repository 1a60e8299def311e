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

use crate::transport::script::Invocation;
use tokio::time::Instant;

use crate::core::acquire;
use crate::core::guard::Guard;
use crate::core::handle::Handle;
use crate::core::keeper::{RenewKind, Renewal};
use crate::core::kind::{Kind, Lock};
use crate::core::lease::Lost;
use crate::core::notify::{Target, Waiter};
use crate::core::shared::Shared;
use crate::core::stored::{remaining_pttl, LockInfo, LockKind, Raw, Shape, Stored};
use crate::core::{FENCE, FORCE_PARTS};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::kinds::{mutex, value};
use crate::options::{Lease, LockOptions};
use crate::race::{self, Either};
use crate::token::{jitter_fraction, Fence, OwnerToken};
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[FENCE, include_str!("election/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[include_str!("election/release.lua")]);
static PROCLAIM: Lua = Lua::new(&[include_str!("election/proclaim.lua")]);
static READ_LEADER: Lua = Lua::new(&[include_str!("election/leader.lua")]);
static FORCE: Lua = Lua::new(&[FORCE_PARTS, include_str!("election/force.lua")]);

/// Where an election keeps its state under a name (`<prefix>{<name>}:<suffix>`): the leader's
/// token, fence, since when and value.
pub(crate) const LEADER_KEY: &str = "election";
/// Where every change of leader is announced, for observers: the leader key's suffix and
/// `-changes`, which the forced release derives from the key.
pub(crate) const CHANGES: &str = "election-changes";
/// Where candidates wait: a mutex's channel of the same name.
const WAKE: &str = mutex::WAKE;

/// What inspection reads of an election (its leader, as a holder), and its forced release.
pub(crate) static STORED: Stored = Stored {
    key: LEADER_KEY,
    shape: Shape::Value,
    places: None,
    channels: &[WAKE],
    judge: |name, raw, _| leader_held(name, raw),
    force: &FORCE,
    force_keys: &[LEADER_KEY],
};

/// The leader an election's key holds, as inspection lists it: its published value as the
/// holder, its fence, its lease left.
fn leader_held(name: &[u8], raw: &Raw) -> Option<LockInfo> {
    let leader = parse_leader(raw.value.as_deref()?)?;
    let mut info = LockInfo::new(name, LockKind::Election);
    info.add_holder(leader.value);
    info.fence = Some(leader.fence);
    info.holds = 1;
    info.remaining = remaining_pttl(raw.pttl);
    Some(info)
}

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
    lock: Lock,
    leader_key: Vec<u8>,
    fence_key: Vec<u8>,
    /// Where resignations wake waiting candidates.
    wake_channel: Vec<u8>,
    /// Where every change of leader is announced to observers.
    leader_channel: Vec<u8>,
}

/// One campaign: the election and the value its candidate publishes.
pub struct Candidate {
    election: Arc<Inner>,
    value: String,
}

/// Proof of leading an [`Election`]: a [`Guard`](crate::Guard) of a candidate that won.
/// [`resign`](Guard::resign) hands leadership over at once, [`proclaim`](Guard::proclaim)
/// publishes a new value; dropping it resigns in the background.
pub type Leadership = Guard<Candidate>;

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
    pub(crate) fn new(shared: Arc<Shared>, keys: LockKeys, options: &LockOptions) -> Result<Self> {
        let lock = Lock::new::<Candidate>(shared, keys, options)?;
        Ok(Election {
            inner: Arc::new(Inner {
                leader_key: lock.key(LEADER_KEY),
                fence_key: lock.keys.fence_key(),
                wake_channel: lock.key(WAKE),
                leader_channel: lock.key(CHANGES),
                lock,
            }),
        })
    }

    /// The election's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        &self.inner.lock.name
    }

    /// The lease of each leadership: how long a crashed leader keeps the election.
    pub fn lease(&self) -> Lease {
        self.inner.lock.lease
    }

    /// Waits until this candidate leads, publishing `value` as its leader's value, or until the
    /// election's [`wait_timeout`](crate::LockOptions::wait_timeout) if it has one.
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
        self.campaign_handle(value).lock().await
    }

    /// A candidate publishing `value`: a [`Handle`] whose [`lock`](Handle::lock) is
    /// [`campaign(value)`](Election::campaign), and whose
    /// [`lock_timeout`](Handle::lock_timeout) and [`try_lock`](Handle::try_lock) campaign
    /// for at most a time, or once; for code that takes locks of any kind ([`Handle`] without
    /// a kind).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let election = client.election("compaction")?;
    /// let leading = election.campaign_handle("a").try_lock().await?;
    /// assert!(election.campaign_handle("b").try_lock().await.is_err());
    /// leading.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn campaign_handle(&self, value: impl Into<String>) -> Handle<Candidate> {
        Handle::of(Arc::new(Candidate {
            election: Arc::clone(&self.inner),
            value: value.into(),
        }))
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
        let mut backoff = Backoff::new(self.inner.lock.lease.duration());
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
            .field("name", &self.inner.lock.name)
            .field("lease", &self.inner.lock.lease)
            .field("wait_timeout", &self.inner.lock.wait_timeout)
            .finish()
    }
}

impl Inner {
    /// The leader and its remaining lease, or `None` when nobody leads.
    async fn read(&self) -> Result<Option<(Leader, Option<Duration>)>> {
        let mut read = READ_LEADER.invocation();
        read.key(self.leader_key.as_slice());
        let reply: Option<(Vec<u8>, i64)> = self.lock.call(read).await?;
        let Some((stored, pttl)) = reply else {
            return Ok(None);
        };
        let leader = parse_leader(&stored).ok_or_else(|| Error::UnexpectedReply {
            detail: format!(
                "the leader key of election {:?} holds {:?}",
                self.lock.name,
                String::from_utf8_lossy(&stored)
            ),
        })?;
        let remaining = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok(Some((leader, remaining)))
    }
}

/// Reads a stored leader: `token:fence:since:value` (see `election/acquire.lua`).
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

impl Kind for Candidate {
    const NAME: &'static str = "election";
    const GUARD: &'static str = "Leadership";
    const HANDLE: &'static str = "Election";
    const LOCK_KIND: crate::cycle::LockKind = crate::cycle::LockKind::Election;

    fn lock(&self) -> &Lock {
        &self.election.lock
    }

    fn wake_channel(&self) -> &[u8] {
        &self.election.wake_channel
    }

    fn acquire(&self, token: &OwnerToken, _waits: bool, _refused_before: bool) -> Invocation {
        let e = &self.election;
        let mut invocation = ACQUIRE.invocation();
        invocation
            .key(e.leader_key.as_slice())
            .key(e.fence_key.as_slice())
            .arg(token.as_str())
            .arg(e.lock.lease_ms)
            .arg(e.lock.fence_memory_ms())
            .arg(self.value.as_str())
            .arg(e.leader_channel.as_slice());
        invocation
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        let e = &self.election;
        let mut invocation = RELEASE.invocation();
        invocation
            .key(e.leader_key.as_slice())
            .arg(token.as_str())
            .arg(e.wake_channel.as_slice())
            .arg(e.leader_channel.as_slice());
        invocation
    }

    /// The leader key's value starts with the owner token, as a mutex's does.
    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        let e = &self.election;
        value::extend(&e.leader_key, token, lease_ms)
    }

    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal> {
        vec![Renewal {
            key: self.election.leader_key.clone(),
            member: token.as_str().to_owned(),
            kind: RenewKind::Value,
        }]
    }
}

impl Guard<Candidate> {
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
        let e = &self.held.grant().election;
        if e.lock.is_shut_down() {
            // The shutdown resigned this leadership, or is about to: a proclamation would find
            // it gone, or make the resigned leader look alive to observers.
            return Err(Error::Shutdown);
        }
        let mut proclamation = PROCLAIM.invocation();
        proclamation
            .key(e.leader_key.as_slice())
            .arg(self.held.token().as_str())
            .arg(value.as_ref())
            .arg(e.leader_channel.as_slice());
        let reply: i64 = e.lock.call(proclamation).await?;
        if reply == 1 {
            Ok(())
        } else {
            Err(self.held.revoked())
        }
    }

    /// Gives leadership up at once, so that a standby leads: [`unlock`](Guard::unlock), by
    /// the name an election's users know. Reports whether it was still held until then.
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Guard::unlock`].
    ///
    /// # Examples
    ///
    /// See [`Election::campaign`].
    pub async fn resign(self) -> Result<()> {
        self.unlock().await
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
            let waiter = e.lock.listen(e.leader_channel.clone(), Target::Any).await;
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
            let nap = acquire::nap(e.lock.wake_fallback(), remaining);
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
            .field("name", &self.election.lock.name)
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

/// The election's scripts, run directly against a real server.
#[cfg(test)]
mod script_tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::conn;

    use crate::testing::announced_on;

    const LEADER: &str = "t:{e}:election";
    const LEADER_FENCE: &str = "t:{e}:fence";
    const CANDIDATES: &str = "t:{e}:wake";
    const OBSERVERS: &str = "t:{e}:election-changes";

    async fn campaign(c: &mut MultiplexedConnection, token: &str, value: &str) -> Vec<i64> {
        ACQUIRE
            .plain()
            .key(LEADER)
            .key(LEADER_FENCE)
            .arg(token)
            .arg(10_000)
            .arg(60_000)
            .arg(value)
            .arg(OBSERVERS)
            .invoke_async(c)
            .await
            .expect("campaign")
    }

    async fn leader(c: &mut MultiplexedConnection) -> Option<(String, i64)> {
        READ_LEADER
            .plain()
            .key(LEADER)
            .invoke_async(c)
            .await
            .expect("leader")
    }

    #[tokio::test]
    async fn election_scripts_check_the_owner_and_keep_fence_since_and_lease() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        assert_eq!(leader(&mut c).await, None);
        let won = campaign(&mut c, "a:", "v:1").await;
        assert_eq!(won[0], 1);
        let (stored, pttl) = leader(&mut c).await.expect("a leader");
        let fields: Vec<&str> = stored.splitn(4, ':').collect();
        assert_eq!((fields[0], fields[1]), ("a", won[1].to_string().as_str()));
        assert_eq!(fields[3], "v:1");
        assert!(pttl > 9_000 && pttl <= 10_000, "{pttl}");
        assert_eq!(
            campaign(&mut c, "a:", "other").await,
            won,
            "a retry is idempotent"
        );
        assert_eq!(campaign(&mut c, "b:", "v").await[0], 0);

        let proclaim = |c: &mut MultiplexedConnection, token: &'static str| {
            let mut c = c.clone();
            async move {
                PROCLAIM
                    .plain()
                    .key(LEADER)
                    .arg(token)
                    .arg("v:2")
                    .arg(OBSERVERS)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("proclaim")
            }
        };
        let mut p = c.clone();
        let payloads = announced_on(&server, OBSERVERS, async move {
            assert_eq!(proclaim(&mut p, "b:").await, -1, "a foreign proclamation");
            assert_eq!(proclaim(&mut p, "a:").await, 1);
        })
        .await;
        assert_eq!(
            payloads,
            ["*"],
            "only the leader's proclamation is announced"
        );
        let (proclaimed, pttl) = leader(&mut c).await.expect("a leader");
        assert_eq!(
            proclaimed,
            format!("{}:{}:{}:v:2", fields[0], fields[1], fields[2])
        );
        assert!(pttl > 0, "the lease is kept: {pttl}");

        let release = |c: &mut MultiplexedConnection, token: &'static str| {
            let mut c = c.clone();
            async move {
                RELEASE
                    .plain()
                    .key(LEADER)
                    .arg(token)
                    .arg(CANDIDATES)
                    .arg(OBSERVERS)
                    .invoke_async::<i64>(&mut c)
                    .await
                    .expect("release")
            }
        };
        let mut r = c.clone();
        let payloads = announced_on(&server, CANDIDATES, async move {
            assert_eq!(release(&mut r, "b:").await, -1, "a foreign resignation");
            assert_eq!(release(&mut r, "a:").await, 1);
            assert_eq!(release(&mut r, "a:").await, 0, "nobody leads");
        })
        .await;
        assert_eq!(
            payloads,
            [""],
            "one wake per process, for the resignation only"
        );
        assert_eq!(proclaim(&mut c, "a:").await, 0, "nothing to proclaim");
        assert_eq!(leader(&mut c).await, None);
        assert!(campaign(&mut c, "b:", "w").await[1] > won[1], "fences rise");
    }
}
