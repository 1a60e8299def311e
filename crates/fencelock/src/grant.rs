//! What every primitive shares: attempts to acquire (with the release of a grant whose caller
//! gave up), the waiting loop, and the held grant with its lease, fence, lost signal,
//! extension, release, and release on drop.
//!
//! A primitive only says how to build its scripts' invocations ([`Resource`]); every script
//! follows the same reply conventions, so this module interprets them all:
//! acquire replies `{1, fence, ...}` when granted (one fence per name it locks) and
//! `{0, pttl}` when held by others (`pttl` -1 when unknown);
//! release and extend reply `1` done, `0` nothing held, `-1` held by another owner.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::keeper::{Release, Renewal};
use crate::lease::{LeaseState, Lost};
use crate::notify::{Target, Waiter};
use crate::observe::{self, Acquiring, Hold};
use crate::options::{lease_millis, ClientOptions, Lease, ReplicaAck, MIN_LEASE};
use crate::race::{self, Branch, Either};
use crate::redlock;
use crate::shared::Shared;
use crate::token::{jitter_fraction, Fence, OwnerToken};
use crate::transport::conn::Conn;

/// How often one request is sent in all when Redis does not answer. Resending is safe because
/// the owner token makes acquire and release idempotent.
const SEND_ATTEMPTS: u32 = 3;

/// The pause before resending, doubled each time.
const RESEND_PAUSE: Duration = Duration::from_millis(20);

/// A lock that can be granted: its name, lease, wake channel and scripts.
pub(crate) trait Resource: Send + Sync + 'static {
    /// The name shown in errors.
    fn name(&self) -> &str;
    /// What the primitive is called in spans and metrics: their `kind`.
    fn kind(&self) -> &'static str;
    fn shared(&self) -> &Arc<Shared>;
    fn lease(&self) -> Lease;
    /// The lease in whole milliseconds, checked when the resource was made.
    fn lease_ms(&self) -> u64;
    /// Where releases of this lock are announced.
    fn wake_channel(&self) -> &[u8];

    /// Every channel whose releases may let a refused attempt through; a waiter is woken by a
    /// release on any of them. By default the one [`wake_channel`](Resource::wake_channel).
    ///
    /// A lock of several channels can be refused while the lock of the channel that woke it is
    /// free (another of its names is still held). Its waiter then passes that wake on to the
    /// next waiter of the channel, which the release may have been meant for.
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.wake_channel())
    }
    fn acquire_script(&self, token: &OwnerToken) -> ScriptInvocation<'static>;
    /// The acquire script of an attempt that was refused before. A primitive whose refused
    /// waiters keep a place gives it up when this attempt is granted; the others send the
    /// same script as always.
    fn acquire_script_after_refusal(&self, token: &OwnerToken) -> ScriptInvocation<'static> {
        self.acquire_script(token)
    }
    fn release_script(&self, token: &OwnerToken) -> ScriptInvocation<'static>;
    fn extend_script(&self, token: &OwnerToken, lease_ms: u64) -> ScriptInvocation<'static>;
    /// What the batch renewal checks and extends for a grant to `token`: every key must still
    /// be held for the lease to count as renewed.
    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal>;

    /// Whether a refused attempt leaves state behind that a waiter who gives up must remove
    /// (a place in a queue). The release script must then also remove that state.
    fn keeps_place_while_waiting(&self) -> bool {
        false
    }

    /// Which releases wake a waiter whose attempts use `token`: by default any release.
    fn wake_target(&self, _token: &OwnerToken) -> Target {
        Target::Any
    }

    /// For RedLock: the script that makes a master remember `fence` as this lock's last fence.
    /// Primitives that RedLock does not offer have none.
    fn raise_fence_script(&self, _fence: u64) -> Option<ScriptInvocation<'static>> {
        None
    }
}

/// How an extension moves a grant's expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extension {
    /// To at least the lease from now, never earlier: what `extend` and renewals do, so that
    /// the guard's deadline, the latest it was told of, is never later than Redis's expiry.
    AtLeast,
    /// To exactly the lease from now, earlier or later: only for a grant being given up,
    /// whose guard claims nothing afterwards (a release no earlier than a point).
    Exactly,
}

/// What one acquire request found.
pub(crate) enum Reply {
    Granted {
        fences: Vec<Fence>,
        sent_at: Instant,
    },
    Held {
        remaining: Option<Duration>,
    },
}

/// Tries once to acquire.
pub(crate) async fn try_acquire<R: Resource>(resource: &Arc<R>) -> Result<Held<R>> {
    let acquiring = Acquiring::start(resource.as_ref());
    acquiring.run(try_once(resource, &acquiring)).await
}

async fn try_once<R: Resource>(resource: &Arc<R>, acquiring: &Acquiring) -> Result<Held<R>> {
    let mut attempt = Attempt::new(resource)?;
    match attempt.send().await? {
        Reply::Granted { fences, sent_at } => attempt.hold(fences, sent_at).await,
        Reply::Held { remaining } => {
            acquiring.found_held();
            Err(Error::Held {
                name: resource.name().to_owned(),
                remaining,
            })
        }
    }
}

/// Waits until acquired, or until `timeout` if there is one.
pub(crate) async fn acquire<R: Resource>(
    resource: &Arc<R>,
    timeout: Option<Duration>,
) -> Result<Held<R>> {
    let acquiring = Acquiring::start(resource.as_ref());
    acquiring
        .run(wait_for_grant(resource, timeout, &acquiring))
        .await
}

async fn wait_for_grant<R: Resource>(
    resource: &Arc<R>,
    timeout: Option<Duration>,
    acquiring: &Acquiring,
) -> Result<Held<R>> {
    let started = Instant::now();
    let deadline = timeout.and_then(|t| started.checked_add(t));
    let mut attempt = Attempt::new(resource)?;
    let notifier = &resource.shared().notifier;
    // Register before the attempt, so that a release between the attempt and the wait below is
    // announced to this waiter instead of lost. A name this client is not listening to is
    // tried once first: most locks are free, and a subscription costs a round trip; one it
    // listens to already (a task of it waited there a moment ago) needs no second try.
    let target = resource.wake_target(&attempt.token);
    let mut found_held = false;
    let waiters = if resource.wake_channels().all(|c| notifier.listens_to(c)) {
        Waiters::register(resource, target).await
    } else {
        if let Reply::Granted { fences, sent_at } = attempt.send_through_outage(deadline).await? {
            return attempt.hold(fences, sent_at).await;
        }
        acquiring.found_held();
        found_held = true;
        Waiters::register(resource, target).await
    };
    let mut woken_by = None;
    loop {
        let remaining = match attempt.send_through_outage(deadline).await? {
            Reply::Granted { fences, sent_at } => return attempt.hold(fences, sent_at).await,
            Reply::Held { remaining } => remaining,
        };
        if !std::mem::replace(&mut found_held, true) {
            acquiring.found_held();
        }
        if let Some(waiter) = woken_by.take() {
            waiters.refused_after_wake(waiter);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::Timeout {
                name: resource.name().to_owned(),
                waited: now - started,
            });
        }
        let wake_at = now + nap(resource.shared().options.wake_fallback, remaining);
        let wake_at = deadline.map_or(wake_at, |d| d.min(wake_at));
        let woken = pin!(async {
            Ok(tokio::time::timeout_at(wake_at, waiters.woken())
                .await
                .unwrap_or(None))
        });
        let shut_down = pin!(async {
            resource.shared().holds.shutting_down().await;
            Err(Error::Shutdown)
        });
        woken_by = race::first([woken as Branch<'_, _>, shut_down]).await?;
    }
}

/// A waiter's registrations, one per wake channel of the resource. The first is kept apart so
/// that a lock of one channel waits exactly as it would without the others.
struct Waiters {
    first: Option<Waiter>,
    more: Vec<Waiter>,
}

impl Waiters {
    async fn register<R: Resource>(resource: &Arc<R>, target: Target) -> Waiters {
        let (first, more) = {
            let mut channels = resource.wake_channels().map(<[u8]>::to_vec);
            (channels.next(), channels.collect::<Vec<_>>())
        };
        let notifier = &resource.shared().notifier;
        let mut waiters = Vec::with_capacity(more.len());
        for channel in more {
            waiters.push(notifier.wait_on(channel, target.clone()).await);
        }
        let first = match first {
            Some(channel) => Some(notifier.wait_on(channel, target).await),
            None => None,
        };
        Waiters {
            first,
            more: waiters,
        }
    }

    /// Completes when a release is announced on any channel, with the registration woken.
    async fn woken(&self) -> Option<&Waiter> {
        let Some(first) = &self.first else {
            return std::future::pending().await;
        };
        if self.more.is_empty() {
            first.woken().await;
            return Some(first);
        }
        let mut pending: Vec<_> = std::iter::once(first)
            .chain(&self.more)
            .map(|waiter| {
                Box::pin(async move {
                    waiter.woken().await;
                    waiter
                })
            })
            .collect();
        poll_fn(|cx| {
            pending
                .iter_mut()
                .find_map(|woken| match woken.as_mut().poll(cx) {
                    Poll::Ready(waiter) => Some(waiter),
                    Poll::Pending => None,
                })
                .map_or(Poll::Pending, |waiter| Poll::Ready(Some(waiter)))
        })
        .await
    }

    /// After a refusal that followed a wake on `waiter`'s channel: with several channels the
    /// lock of that channel may be free, held back only by another one, so the wake goes on to
    /// the waiter behind.
    fn refused_after_wake(&self, waiter: &Waiter) {
        if !self.more.is_empty() {
            waiter.pass_on();
        }
    }
}

/// How long a waiter sleeps when no notification comes: the jittered fallback, cut to the
/// holder's remaining lease so that an expiry is noticed as soon as it happens.
pub(crate) fn nap(fallback: Duration, remaining: Option<Duration>) -> Duration {
    let jittered = fallback.mul_f64(0.5 + 0.5 * jitter_fraction());
    let nap = remaining.map_or(jittered, |r| r.min(jittered));
    nap.max(Duration::from_millis(1))
}

/// A waiter's retries while Redis cannot be reached: pauses that double from
/// [`RESEND_PAUSE`] up to the wake fallback, jittered, until the waiter's deadline or, without
/// one, the client's [`outage_limit`](ClientOptions::outage_limit) after the first failure.
struct Outage {
    /// When to give up; `None` for a limit too far away to count.
    until: Option<Instant>,
    pause: Duration,
    longest_pause: Duration,
}

impl Outage {
    fn begin(options: &ClientOptions, deadline: Option<Instant>) -> Outage {
        Outage {
            until: deadline.or_else(|| Instant::now().checked_add(options.outage_limit)),
            pause: RESEND_PAUSE,
            longest_pause: options.wake_fallback.max(RESEND_PAUSE),
        }
    }

    /// How long to pause before trying again, never past the end of the outage's patience:
    /// `None` once it has ended.
    fn next_pause(&mut self) -> Option<Duration> {
        let left = match self.until {
            Some(until) => until
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())?,
            None => Duration::MAX,
        };
        let pause = self.pause.mul_f64(0.5 + 0.5 * jitter_fraction());
        self.pause = (self.pause * 2).min(self.longest_pause);
        Some(pause.min(left))
    }
}

/// One owner token's attempts to acquire. While `armed`, a request may have been granted
/// without the reply reaching us; dropping the attempt then releases that token in the
/// background, which is what makes a cancelled acquire leave the lock free.
struct Attempt<'a, R: Resource> {
    resource: &'a Arc<R>,
    token: OwnerToken,
    armed: bool,
    /// Whether Redis refused this token before (it may keep a place among the waiters).
    refused: bool,
    /// The attempt's own handle on the connection: a `WAIT` after the grant must go where
    /// the grant went.
    conn: Conn,
}

impl<'a, R: Resource> Attempt<'a, R> {
    /// An attempt of a client that was not shut down.
    fn new(resource: &'a Arc<R>) -> Result<Self> {
        if resource.shared().holds.is_shut_down() {
            return Err(Error::Shutdown);
        }
        Ok(Attempt {
            resource,
            token: OwnerToken::of_client(&resource.shared().id)?,
            armed: false,
            refused: false,
            conn: resource.shared().conn.clone(),
        })
    }

    /// Sends the acquire script, resending with the same token when Redis does not answer.
    async fn send(&mut self) -> Result<Reply> {
        if self.resource.shared().nodes.is_distributed() {
            return self.send_to_masters().await;
        }
        let invocation = if self.refused {
            self.resource.acquire_script_after_refusal(&self.token)
        } else {
            self.resource.acquire_script(&self.token)
        };
        // From the first send on, a grant may exist whether or not its reply arrives.
        self.armed = true;
        let sent =
            invoke_resending::<Vec<i64>>(&mut self.conn, &invocation, self.resource.name()).await;
        self.interpret(&sent.reply?, sent.at)
    }

    /// [`send`](Attempt::send) for a waiter: while Redis cannot be reached, tries again until
    /// Redis answers or the [`Outage`] ends, and then returns the last error. The attempt keeps
    /// its token, so a grant whose reply was lost becomes the caller's (RedLock takes a new
    /// token only after releasing the old one's partial grant).
    async fn send_through_outage(&mut self, deadline: Option<Instant>) -> Result<Reply> {
        let mut outage = None;
        loop {
            match self.send().await {
                Err(e) if e.is_unavailable() => {
                    let outage = outage.get_or_insert_with(|| {
                        Outage::begin(&self.resource.shared().options, deadline)
                    });
                    let Some(pause) = outage.next_pause() else {
                        return Err(e);
                    };
                    tokio::time::sleep(pause).await;
                }
                reply => return reply,
            }
        }
    }

    /// Turns the grant into a held lock, once as many replicas as the client asks for
    /// acknowledged it.
    async fn hold(mut self, fences: Vec<Fence>, sent_at: Instant) -> Result<Held<R>> {
        if let Some(ack) = self.resource.shared().options.replica_ack {
            self.confirm_replicated(ack).await?;
        }
        self.into_held(fences, sent_at).await
    }

    /// Waits for the replicas to acknowledge the grant (`WAIT` on the connection the grant
    /// went through); when too few did, or the wait failed, releases the grant before
    /// returning the refusal, so that nobody finds it held by a caller that was refused.
    async fn confirm_replicated(&mut self, ack: ReplicaAck) -> Result<()> {
        let r = self.resource;
        let acknowledged = self
            .conn
            .wait_for_replicas(r.wake_channel(), ack.replicas, ack.timeout)
            .await
            .map_err(|e| Error::from_redis(e, r.name()));
        let refusal = match acknowledged {
            Ok(acknowledged) if acknowledged >= ack.replicas => return Ok(()),
            Ok(acknowledged) => Error::NotReplicated {
                name: r.name().to_owned(),
                acknowledged,
                wanted: ack.replicas,
            },
            Err(e) => e,
        };
        self.release_now().await;
        Err(refusal)
    }

    /// Releases whatever this attempt's token holds, and waits for the answer. Once Redis
    /// answered, nothing is held under the token any more; if it did not, the attempt stays
    /// armed and its drop tries again in the background.
    async fn release_now(&mut self) {
        let invocation = self.resource.release_script(&self.token);
        let sent = invoke_resending::<i64>(&mut self.conn, &invocation, self.resource.name()).await;
        if sent.reply.is_ok() {
            self.armed = false;
        }
    }

    /// [`send`](Attempt::send) on RedLock, asking again when too few masters answered (a
    /// master that just came back answers the second request).
    async fn send_to_masters(&mut self) -> Result<Reply> {
        let mut pause = RESEND_PAUSE;
        let mut tries = 0;
        loop {
            tries += 1;
            self.armed = true;
            match redlock::acquire(self.resource.as_ref(), &mut self.token).await {
                Err(e) if e.is_unavailable() && tries < SEND_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                reply => return reply,
            }
        }
    }

    fn interpret(&mut self, reply: &[i64], sent_at: Instant) -> Result<Reply> {
        match reply {
            [1, fences @ ..] if !fences.is_empty() && fences.iter().all(|&f| f > 0) => {
                Ok(Reply::Granted {
                    fences: fences
                        .iter()
                        .map(|f| Fence::new(f.unsigned_abs()))
                        .collect(),
                    sent_at,
                })
            }
            &[0, pttl] => {
                // Others hold it, so nothing is stored under our token, unless the attempt
                // took a place in a queue.
                self.armed = self.resource.keeps_place_while_waiting();
                self.refused = true;
                Ok(Reply::Held {
                    remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
                })
            }
            _ => Err(Error::UnexpectedReply {
                detail: format!("acquire replied {reply:?}"),
            }),
        }
    }

    /// Registers the grant among the client's holds and hands it to its guard; when the
    /// client was shut down while the grant was on its way, releases it and refuses.
    async fn into_held(mut self, fences: Vec<Fence>, sent_at: Instant) -> Result<Held<R>> {
        let r = self.resource;
        let lease = Arc::new(LeaseState::new(
            r.lease().duration(),
            r.lease_ms(),
            r.shared().options.drift,
            sent_at,
            Hold::granted(r.as_ref(), first_fence(&fences)),
        ));
        let release = release_of(r.as_ref(), &self.token);
        if let Err(release) = r.shared().holds.register(Arc::clone(&lease), release) {
            // Still armed: if this is cancelled, the attempt's drop releases in the background.
            release.await;
            self.armed = false;
            return Err(Error::Shutdown);
        }
        self.armed = false;
        if r.lease().is_renewed() {
            r.shared()
                .keeper
                .watch(Arc::clone(&lease), r.renewals(&self.token), sent_at);
        }
        Ok(Held {
            resource: Arc::clone(r),
            token: self.token.clone(),
            fences,
            lease,
            released: false,
        })
    }
}

impl<R: Resource> Drop for Attempt<'_, R> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(self.resource.as_ref(), &self.token);
        }
    }
}

/// The outcome of a script sent with resends: the reply, when the last send went out, and
/// whether there was more than one.
struct Sent<T> {
    reply: Result<T>,
    at: Instant,
    resent: bool,
}

/// Invokes a script, resending it with growing pauses while Redis does not answer, up to
/// [`SEND_ATTEMPTS`] sends. Only for scripts that are idempotent by owner token.
async fn invoke_resending<T: redis::FromRedisValue>(
    conn: &mut Conn,
    invocation: &ScriptInvocation<'_>,
    name: &str,
) -> Sent<T> {
    let mut pause = RESEND_PAUSE;
    let mut tries = 0;
    loop {
        tries += 1;
        let at = Instant::now();
        let reply = invocation
            .invoke_async::<T>(conn)
            .await
            .map_err(|e| Error::from_redis(e, name));
        match reply {
            Err(e) if e.is_unavailable() && tries < SEND_ATTEMPTS => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            reply => {
                return Sent {
                    reply,
                    at,
                    resent: tries > 1,
                }
            }
        }
    }
}

/// Releases whatever `token` holds in the background, best effort.
pub(crate) fn release_in_background<R: Resource>(resource: &R, token: &OwnerToken) {
    resource
        .shared()
        .keeper
        .release(release_of(resource, token));
}

/// The best-effort release of whatever `token` holds, sent once when run: for a dropped guard,
/// a cancelled acquire, or a hold a shutdown gives back.
fn release_of<R: Resource>(resource: &R, token: &OwnerToken) -> Release {
    if resource.shared().nodes.is_distributed() {
        return redlock::release_of(resource, token);
    }
    let invocation = resource.release_script(token);
    let mut conn = resource.shared().conn.clone();
    Box::pin(async move { invocation.invoke_async::<i64>(&mut conn).await.is_ok() })
}

/// The fence of the first name of a grant: the one a grant of a single name is known by.
fn first_fence(fences: &[Fence]) -> Fence {
    fences.first().copied().unwrap_or(Fence::new(0))
}

/// A grant held: what every public guard is made of.
#[derive(Debug)]
pub(crate) struct Held<R: Resource> {
    resource: Arc<R>,
    token: OwnerToken,
    /// One per name locked, in the order the resource names them; never empty.
    fences: Vec<Fence>,
    lease: Arc<LeaseState>,
    released: bool,
}

impl<R: Resource> Held<R> {
    pub(crate) fn resource(&self) -> &R {
        &self.resource
    }

    /// The fence of the first (usually only) name.
    pub(crate) fn fence(&self) -> Fence {
        first_fence(&self.fences)
    }

    pub(crate) fn fences(&self) -> &[Fence] {
        &self.fences
    }

    pub(crate) fn token(&self) -> &OwnerToken {
        &self.token
    }

    pub(crate) fn valid_until(&self) -> std::time::Instant {
        self.lease.deadline().into_std()
    }

    pub(crate) fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    pub(crate) async fn lost(&self) -> Lost {
        self.lease.lost().await
    }

    pub(crate) async fn extend(&self, lease: Duration) -> Result<()> {
        let extended = send_extend(
            self.resource.as_ref(),
            &self.token,
            &self.lease,
            lease,
            Extension::AtLeast,
        );
        observe::extension(&self.lease, extended).await
    }

    /// For a reply saying that Redis no longer holds this grant: fires the lost signal and
    /// returns the error to report.
    pub(crate) fn revoked(&self) -> Error {
        revoked(self.resource.as_ref(), &self.lease)
    }

    /// Releases, resending when Redis does not answer. If a resend finds nothing held while
    /// the validity deadline has not passed, an earlier send released it: nobody else can have
    /// taken a lock that was still validly ours, short of a forced removal in between, which
    /// this cannot tell from it without a trace of every release (`docs/faults.md`).
    pub(crate) async fn unlock(self) -> Result<()> {
        let lease = Arc::clone(&self.lease);
        observe::release(&lease, self.release()).await
    }

    async fn release(mut self) -> Result<()> {
        self.stop_renewing();
        if !self.resource.shared().holds.is_live(self.lease.id()) {
            // The client's shutdown released it.
            self.released = true;
            return Err(Error::Shutdown);
        }
        if self.resource.shared().nodes.is_distributed() {
            self.end_hold();
            return redlock::unlock(self.resource.as_ref(), &self.token, &self.lease).await;
        }
        let deadline = self.lease.deadline();
        let invocation = self.resource.release_script(&self.token);
        let mut conn = self.resource.shared().conn.clone();
        let sent = invoke_resending::<i64>(&mut conn, &invocation, self.resource.name()).await;
        match sent.reply? {
            1 => {
                self.end_hold();
                Ok(())
            }
            0 if sent.resent && Instant::now() < deadline => {
                self.end_hold();
                Ok(())
            }
            _ => {
                self.end_hold();
                self.lease.mark_lost(Lost::Revoked);
                Err(self.not_held())
            }
        }
    }

    /// Runs `work` with the grant's fence while the grant is held, then releases it. When the
    /// grant is lost first, `work` is dropped where it stands and the grant released in the
    /// background.
    pub(crate) async fn using<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(Fence) -> Fut,
        Fut: Future<Output = T>,
    {
        // Not raced as a `Branch`: `work` need not be `Send`. Work that finished wins a tie.
        match race::biased(work(self.fence()), self.lost()).await {
            Either::Left(value) => self.unlock().await.map(|()| value),
            Either::Right(_) => Err(self.not_held()),
        }
    }

    /// Releases so that the lock is not free before `at`: when `at` is still ahead, the
    /// grant's lease is set to end at `at` (owner-checked, as an extension) and renewal stops,
    /// instead of deleting it; otherwise a plain [`unlock`](Held::unlock).
    ///
    /// Not an `async fn`: the request is handed to the client's background task when this is
    /// called, so that dropping the future, polled or not, leaves the lock to end at `at` as
    /// awaiting it would (a dropped `async fn` future would drop the guard, whose drop frees
    /// the lock at once).
    pub(crate) fn unlock_no_earlier_than(
        self,
        at: std::time::Instant,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let left = at.saturating_duration_since(std::time::Instant::now());
        let later = if left.is_zero() {
            Later::Now(self)
        } else {
            let lease = Arc::clone(&self.lease);
            Later::Kept(lease, self.keep_for(left.max(MIN_LEASE)))
        };
        async move {
            match later {
                Later::Now(held) => held.unlock().await,
                Later::Kept(lease, answer) => {
                    // No answer: the background task stopped with the client's shutdown.
                    let answered = async { answer.await.unwrap_or(Err(Error::Shutdown)) };
                    observe::release(&lease, answered).await
                }
            }
        }
    }

    /// Sends, from the client's background task, the extension that sets the grant's lease
    /// to end `left` from now, and returns where its answer will come. The guard is given up
    /// here and claims nothing afterwards, so the lease may end sooner than it would have: at
    /// `left`, not at the end of a longer lease. Whatever the answer, no release may follow,
    /// neither the drop's nor a shutdown's: it would free the lock before `left` ends.
    /// Unanswered, the lock ends with its lease.
    fn keep_for(mut self, left: Duration) -> oneshot::Receiver<Result<()>> {
        self.stop_renewing();
        self.end_hold();
        let (answer, answered) = oneshot::channel();
        let resource = Arc::clone(&self.resource);
        let token = self.token.clone();
        let lease = Arc::clone(&self.lease);
        let keep: Release = Box::pin(async move {
            let kept = send_extend(resource.as_ref(), &token, &lease, left, Extension::Exactly);
            let kept = kept.await;
            let reached = !kept.as_ref().is_err_and(Error::is_unavailable);
            let _ = answer.send(kept);
            reached
        });
        self.resource.shared().keeper.release(keep);
        answered
    }

    /// Nothing is left to release, by the guard's drop or by a shutdown. Until then the hold
    /// stays registered, so that an unlock cancelled or failed on its way still leaves the
    /// release to the drop.
    fn end_hold(&mut self) {
        self.released = true;
        self.resource.shared().holds.take(self.lease.id());
    }

    fn stop_renewing(&self) {
        if self.resource.lease().is_renewed() {
            self.resource.shared().keeper.forget(self.lease.id());
        }
    }

    fn not_held(&self) -> Error {
        not_held(self.resource.as_ref())
    }
}

/// What [`Held::unlock_no_earlier_than`] does: release now, or keep the lock until a point
/// and wait for that request's answer.
enum Later<R: Resource> {
    Now(Held<R>),
    Kept(Arc<LeaseState>, oneshot::Receiver<Result<()>>),
}

/// Extends the grant of `token` on `resource` to at least (or, `Exactly`, to) `lease` from now,
/// owner-checked, and moves the guard's deadline on a confirmed reply.
async fn send_extend<R: Resource>(
    resource: &R,
    token: &OwnerToken,
    state: &LeaseState,
    lease: Duration,
    how: Extension,
) -> Result<()> {
    let lease_ms = lease_millis(lease)?;
    if resource.shared().holds.is_shut_down() {
        return Err(Error::Shutdown);
    }
    let mut invocation = resource.extend_script(token, lease_ms);
    if how == Extension::Exactly {
        // Every extend script reads a last argument `exactly` as leave to shorten.
        invocation.arg("exactly");
    }
    if resource.shared().nodes.is_distributed() {
        return redlock::extend(resource, invocation, state, lease).await;
    }
    let sent_at = Instant::now();
    let reply = invocation
        .invoke_async::<i64>(&mut resource.shared().conn.clone())
        .await
        .map_err(|e| Error::from_redis(e, resource.name()))?;
    if reply == 1 && state.renewed(sent_at, lease) {
        return Ok(());
    }
    if reply != 1 {
        return Err(revoked(resource, state));
    }
    Err(not_held(resource))
}

/// For a reply saying that Redis no longer holds a grant: fires its lost signal and returns
/// the error to report.
fn revoked<R: Resource>(resource: &R, state: &LeaseState) -> Error {
    state.mark_lost(Lost::Revoked);
    not_held(resource)
}

fn not_held<R: Resource>(resource: &R) -> Error {
    Error::NotHeld {
        name: resource.name().to_owned(),
    }
}

impl<R: Resource> Drop for Held<R> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewing();
        // Nothing to take when the client's shutdown released the hold already.
        if let Some(release) = self.resource.shared().holds.take(self.lease.id()) {
            self.resource.shared().keeper.release(release);
            self.lease.hold().dropped();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outage_pauses_grow_to_the_wake_fallback_and_stop_at_the_limit() {
        let fallback = Duration::from_millis(400);
        let options = ClientOptions::default().wake_fallback(fallback);
        let mut outage = Outage::begin(&options, None);
        let pauses: Vec<Duration> = (0..20).map_while(|_| outage.next_pause()).collect();
        assert_eq!(pauses.len(), 20, "30 s of patience by default");
        assert!(pauses.iter().all(|p| *p <= fallback), "{pauses:?}");
        assert!(
            pauses[19] >= fallback / 2,
            "they grew to the fallback: {pauses:?}"
        );

        let deadline = Instant::now() + Duration::from_millis(30);
        let mut outage = Outage::begin(&options, Some(deadline));
        let pause = outage.next_pause().expect("before the deadline");
        assert!(
            pause <= Duration::from_millis(30),
            "never past the deadline"
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(outage.next_pause(), None, "the deadline ends it");

        let endless = ClientOptions::default().outage_limit(Duration::MAX);
        let mut outage = Outage::begin(&endless, None);
        assert!(
            outage.next_pause().is_some(),
            "a limit beyond counting never ends"
        );
    }
}
