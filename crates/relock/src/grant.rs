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
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::time::Instant;

use crate::client::Shared;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keeper::Renewal;
use crate::lease::{LeaseState, Lost};
use crate::notify::{Target, Waiter};
use crate::observe::{self, Acquiring, Hold};
use crate::options::{lease_millis, Lease, ReplicaAck};
use crate::redlock;
use crate::token::{jitter_fraction, Fence, OwnerToken};

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
    if let Reply::Granted { fences, sent_at } = attempt.send().await? {
        return attempt.hold(fences, sent_at).await;
    }
    acquiring.found_held();
    // Subscribe before the next attempt: a release between that attempt and the wait below is
    // then announced to this waiter instead of lost.
    let waiters = Waiters::register(resource, resource.wake_target(&attempt.token)).await;
    let mut woken_by = None;
    loop {
        let remaining = match attempt.send().await? {
            Reply::Granted { fences, sent_at } => return attempt.hold(fences, sent_at).await,
            Reply::Held { remaining } => remaining,
        };
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
        woken_by = tokio::time::timeout_at(wake_at, waiters.woken())
            .await
            .unwrap_or(None);
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
fn nap(fallback: Duration, remaining: Option<Duration>) -> Duration {
    let jittered = fallback.mul_f64(0.5 + 0.5 * jitter_fraction());
    let nap = remaining.map_or(jittered, |r| r.min(jittered));
    nap.max(Duration::from_millis(1))
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
    fn new(resource: &'a Arc<R>) -> Result<Self> {
        Ok(Attempt {
            resource,
            token: OwnerToken::new()?,
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

    /// Turns the grant into a held lock, once as many replicas as the client asks for
    /// acknowledged it.
    async fn hold(mut self, fences: Vec<Fence>, sent_at: Instant) -> Result<Held<R>> {
        if let Some(ack) = self.resource.shared().options.replica_ack {
            self.confirm_replicated(ack).await?;
        }
        Ok(self.into_held(fences, sent_at))
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

    fn into_held(mut self, fences: Vec<Fence>, sent_at: Instant) -> Held<R> {
        self.armed = false;
        let r = self.resource;
        let lease = Arc::new(LeaseState::new(
            r.lease().duration(),
            r.lease_ms(),
            r.shared().options.drift,
            sent_at,
            Hold::granted(r.as_ref(), first_fence(&fences)),
        ));
        if r.lease().is_renewed() {
            r.shared()
                .keeper
                .watch(Arc::clone(&lease), r.renewals(&self.token));
        }
        Held {
            resource: Arc::clone(r),
            token: self.token.clone(),
            fences,
            lease,
            released: false,
        }
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

fn release_in_background<R: Resource>(resource: &R, token: &OwnerToken) {
    if resource.shared().nodes.is_distributed() {
        return redlock::release_in_background(resource, token);
    }
    let invocation = resource.release_script(token);
    let mut conn = resource.shared().conn.clone();
    resource.shared().keeper.release(Box::pin(async move {
        let _ = invocation.invoke_async::<i64>(&mut conn).await;
    }));
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

    #[expect(dead_code, reason = "for primitives that address their holders")]
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
        observe::extension(&self.lease, self.send_extend(lease)).await
    }

    async fn send_extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = lease_millis(lease)?;
        let r = &self.resource;
        if r.shared().nodes.is_distributed() {
            return redlock::extend(r.as_ref(), &self.token, &self.lease, lease, lease_ms).await;
        }
        let sent_at = Instant::now();
        let reply = r
            .extend_script(&self.token, lease_ms)
            .invoke_async::<i64>(&mut r.shared().conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, r.name()))?;
        if reply == 1 && self.lease.renewed(sent_at, lease) {
            return Ok(());
        }
        if reply != 1 {
            self.lease.mark_lost(Lost::Revoked);
        }
        Err(self.not_held())
    }

    /// Releases, resending when Redis does not answer. If a resend finds nothing held while
    /// the validity deadline has not passed, an earlier send released it: nobody else can have
    /// taken a lock that was still validly ours.
    pub(crate) async fn unlock(self) -> Result<()> {
        let lease = Arc::clone(&self.lease);
        observe::release(&lease, self.release()).await
    }

    async fn release(mut self) -> Result<()> {
        self.stop_renewing();
        if self.resource.shared().nodes.is_distributed() {
            self.released = true;
            return redlock::unlock(self.resource.as_ref(), &self.token, &self.lease).await;
        }
        let deadline = self.lease.deadline();
        let invocation = self.resource.release_script(&self.token);
        let mut conn = self.resource.shared().conn.clone();
        let sent = invoke_resending::<i64>(&mut conn, &invocation, self.resource.name()).await;
        match sent.reply? {
            1 => {
                self.released = true;
                Ok(())
            }
            0 if sent.resent && Instant::now() < deadline => {
                self.released = true;
                Ok(())
            }
            _ => {
                self.released = true;
                self.lease.mark_lost(Lost::Revoked);
                Err(self.not_held())
            }
        }
    }

    fn stop_renewing(&self) {
        if self.resource.lease().is_renewed() {
            self.resource.shared().keeper.forget(self.lease.id());
        }
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.resource.name().to_owned(),
        }
    }
}

impl<R: Resource> Drop for Held<R> {
    fn drop(&mut self) {
        if !self.released {
            self.stop_renewing();
            release_in_background(self.resource.as_ref(), &self.token);
            self.lease.hold().dropped();
        }
    }
}
