//! Attempts to acquire, and the waiting loop: one owner token's attempts (with the release of a
//! grant whose caller gave up), the wait for a release between them, and the turn of a grant
//! into a [`Held`]. [`take`] is the one way in, for every kind and every way to wait.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::held::{first_fence, release_of, AnyAcquire, AnyKind, Held};
use crate::core::kind::{Kind, Lock};
use crate::core::lease::{valid_until, LeaseState};
use crate::core::live_holds::HeldNames;
use crate::core::nodes::{Acquired, Request};
use crate::core::notify::{Target, Waiter, Wake};
use crate::core::observe::{Acquiring, Holding};
use crate::core::waits::Checker;
use crate::cycle::Task;
use crate::error::{Error, Result};
use crate::options::{self, ClientOptions, ReplicaAck};
use crate::race::{self, Branch};
use crate::token::{jitter_fraction, Fence, OwnerToken};
use crate::transport::conn::ReplicationMark;
use crate::transport::script::Invocation;

/// The pause before a waiter's first retry while Redis cannot be reached.
const OUTAGE_PAUSE: Duration = Duration::from_millis(20);

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

/// Acquires a grant of `grant`'s kind as `wait` says: what every handle's acquire comes to.
pub(crate) async fn take<K: Kind>(grant: &Arc<K>, wait: options::Wait) -> Result<Held<K>> {
    let grant = K::for_acquire(grant)?;
    let held = match wait {
        options::Wait::AsConfigured => acquire(&grant, grant.lock().wait_timeout).await,
        options::Wait::AtMost(timeout) => acquire(&grant, Some(timeout)).await,
        options::Wait::No => try_acquire(&grant).await,
    };
    held.map_err(|e| grant.acquire_error(e))
}

impl<K: Kind> AnyKind for K {
    fn lock(&self) -> &Lock {
        Kind::lock(self)
    }

    fn release(&self, token: &OwnerToken) -> Invocation {
        Kind::release(self, token)
    }

    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation {
        Kind::extend(self, token, lease_ms)
    }

    fn guard_name(&self) -> &'static str {
        K::GUARD
    }

    fn handle_name(&self) -> &'static str {
        K::HANDLE
    }

    fn describe(&self, guard: &mut std::fmt::DebugStruct<'_, '_>) {
        Kind::describe(self, guard);
    }

    fn acquire_any(self: Arc<Self>, wait: options::Wait) -> AnyAcquire {
        Box::pin(async move { take(&self, wait).await.map(Held::erased) })
    }
}

/// Tries once to acquire.
async fn try_acquire<K: Kind>(grant: &Arc<K>) -> Result<Held<K>> {
    let acquiring = Acquiring::start(&grant.lock().name, K::NAME);
    acquiring
        .run(try_once(grant, &acquiring), Held::fence)
        .await
}

async fn try_once<K: Kind>(grant: &Arc<K>, acquiring: &Acquiring) -> Result<Held<K>> {
    let mut attempt = Attempt::new(grant, false)?;
    match attempt.send().await? {
        Reply::Granted { fences, sent_at } => attempt.hold(fences, sent_at).await,
        Reply::Held { remaining } => {
            acquiring.found_held();
            Err(Error::Held {
                name: grant.lock().name.clone(),
                remaining,
            })
        }
    }
}

/// Waits until acquired, or until `timeout` if there is one.
async fn acquire<K: Kind>(grant: &Arc<K>, timeout: Option<Duration>) -> Result<Held<K>> {
    let acquiring = Acquiring::start(&grant.lock().name, K::NAME);
    acquiring
        .run(wait_for_grant(grant, timeout, &acquiring), Held::fence)
        .await
}

async fn wait_for_grant<K: Kind>(
    grant: &Arc<K>,
    timeout: Option<Duration>,
    acquiring: &Acquiring,
) -> Result<Held<K>> {
    let started = Instant::now();
    let deadline = timeout.and_then(|t| started.checked_add(t));
    let mut attempt = Attempt::new(grant, true)?;
    let shared = &grant.lock().shared;
    let notifier = &shared.notifier;
    // Register before the attempt, so that a release between the attempt and the wait below is
    // announced to this waiter instead of lost. A name this client is not listening to is
    // tried once first: most locks are free, and a subscription costs a round trip; one it
    // listens to already (a task of it waited there a moment ago) needs no second try.
    let mut found_held = false;
    if !grant.wake_channels().all(|c| notifier.listens_to(c)) {
        if let Reply::Granted { fences, sent_at } = attempt.send_through_outage(deadline).await? {
            return attempt.hold(fences, sent_at).await;
        }
        acquiring.found_held();
        found_held = true;
    }
    let mut waiting_as = attempt.token.clone();
    let waiters = Waiters::register(grant.as_ref(), grant.wake_target(&waiting_as)).await;
    let mut woken_by: Option<&Waiter> = None;
    let lock = grant.lock();
    let checker = lock.wait_check.map(|(every, refuses)| {
        Checker::new(
            shared.waits(),
            K::LOCK_KIND,
            grant.names_taken(),
            every,
            refuses,
        )
    });
    let mut next_check = checker.as_ref().map(|c| started + c.every());
    let checked = AtomicBool::new(false);
    loop {
        // Every wake ends here: a message is never taken as a grant. A release that offered
        // this waiter the lock is claimed by this request, which finds the waiter's own token
        // and makes the offer's expiry its lease; a stale, repeated or relayed message costs
        // one refused request.
        let remaining = match attempt.send_through_outage(deadline).await? {
            Reply::Granted { fences, sent_at } => return attempt.hold(fences, sent_at).await,
            Reply::Held { remaining } => remaining,
        };
        if attempt.token != waiting_as {
            // A grant that came too late was given back: releases now address the new token.
            waiting_as = attempt.token.clone();
            waiters.retarget(&grant.wake_target(&waiting_as));
        }
        if !std::mem::replace(&mut found_held, true) {
            acquiring.found_held();
        }
        if let Some(waiter) = woken_by.take() {
            waiters.refused_after_wake(waiter);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::Timeout {
                name: grant.lock().name.clone(),
                waited: now - started,
            });
        }
        let wake_at = now + nap(grant.retry_interval(), remaining);
        let mut wake_at = deadline.map_or(wake_at, |d| d.min(wake_at));
        // Sleep until a release wakes this waiter, or its timer runs out. An offer to the
        // waiter ahead shortens the timer to that offer's end: if nobody claims it, the lock
        // is free then.
        loop {
            let until = wake_at;
            let woken = pin!(async {
                Ok(
                    match tokio::time::timeout_at(until, waiters.woken()).await {
                        Ok(Some((waiter, wake))) => Woke::Release(waiter, wake),
                        Ok(None) | Err(_) => Woke::Timer,
                    },
                )
            });
            let shut_down = pin!(async {
                shared.holds.shutting_down().await;
                Err(Error::Shutdown)
            });
            let check_at = next_check;
            let deadlock = pin!(async {
                let (Some(checker), Some(at)) = (&checker, check_at) else {
                    return std::future::pending().await;
                };
                tokio::time::sleep_until(at).await;
                match checker.check().await {
                    Ok(Some(cycle)) if checker.refuses => Err(Error::Deadlock {
                        name: lock.name.clone(),
                        cycle,
                    }),
                    // No cycle to give up for, or a check that could not run, which is no
                    // reason to stop waiting: the next may.
                    _ => {
                        checked.store(true, Ordering::Relaxed);
                        Ok(Woke::Checked)
                    }
                }
            });
            let outcome = race::first([woken as Branch<'_, _>, shut_down, deadlock]).await;
            // The next check comes an interval after this one ended; one a wake cut short runs
            // again at once.
            if let Some(checker) = &checker
                && checked.swap(false, Ordering::Relaxed)
            {
                next_check = Some(Instant::now() + checker.every());
            }
            match outcome? {
                Woke::Release(_, Wake::After(offer)) => {
                    wake_at = wake_at.min(Instant::now() + offer);
                }
                Woke::Release(waiter, Wake::Now) => {
                    woken_by = Some(waiter);
                    break;
                }
                Woke::Timer => break,
                // The wait was recorded (and checked): it goes on as it was, asking nothing.
                Woke::Checked => {}
            }
        }
    }
}

/// What ended one sleep of a waiter.
enum Woke<'w> {
    /// A release concerning it was announced, on this registration.
    Release(&'w Waiter, Wake),
    /// Its timer ran out.
    Timer,
    /// Its wait was recorded (and, with a deadlock check, checked) and goes on.
    Checked,
}

/// A waiter's registrations, one per wake channel of the resource. The first is kept apart so
/// that a lock of one channel waits exactly as it would without the others.
struct Waiters {
    first: Option<Waiter>,
    more: Vec<Waiter>,
}

impl Waiters {
    async fn register<K: Kind>(grant: &K, target: Target) -> Waiters {
        let (first, more) = {
            let mut channels = grant.wake_channels().map(<[u8]>::to_vec);
            (channels.next(), channels.collect::<Vec<_>>())
        };
        let notifier = &grant.lock().shared.notifier;
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

    /// Completes when a release is announced on any channel, with the registration woken and
    /// what it is to do.
    async fn woken(&self) -> Option<(&Waiter, Wake)> {
        let Some(first) = &self.first else {
            return std::future::pending().await;
        };
        if self.more.is_empty() {
            let wake = first.woken().await;
            return Some((first, wake));
        }
        let mut pending: Vec<_> = std::iter::once(first)
            .chain(&self.more)
            .map(|waiter| Box::pin(async move { (waiter, waiter.woken().await) }))
            .collect();
        poll_fn(|cx| {
            pending
                .iter_mut()
                .find_map(|woken| match woken.as_mut().poll(cx) {
                    Poll::Ready(woke) => Some(woke),
                    Poll::Pending => None,
                })
                .map_or(Poll::Pending, |woke| Poll::Ready(Some(woke)))
        })
        .await
    }

    /// Waits for releases addressed to `target` from now on.
    fn retarget(&self, target: &Target) {
        for waiter in self.first.iter().chain(&self.more) {
            waiter.retarget(target.clone());
        }
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
/// [`OUTAGE_PAUSE`] up to the wake fallback, jittered, until the waiter's deadline or, without
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
            pause: OUTAGE_PAUSE,
            longest_pause: options.wake_fallback.max(OUTAGE_PAUSE),
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
struct Attempt<'a, K: Kind> {
    grant: &'a Arc<K>,
    token: OwnerToken,
    armed: bool,
    /// Whether the caller waits when refused (and may take a place among the waiters).
    waits: bool,
    /// Whether Redis refused a request of this token: it may keep a place among the waiters,
    /// which a grant takes it out of.
    refused: bool,
    /// Each node's connection as the last request was sent, when the client waits for
    /// replicas: the `WAIT` must go where the grant was written.
    marks: Vec<ReplicationMark>,
}

impl<'a, K: Kind> Attempt<'a, K> {
    /// An attempt of a client that was not shut down.
    fn new(grant: &'a Arc<K>, waits: bool) -> Result<Self> {
        let shared = &grant.lock().shared;
        if shared.holds.is_shut_down() {
            return Err(Error::Shutdown);
        }
        Ok(Attempt {
            grant,
            token: grant.new_token()?,
            armed: false,
            waits,
            refused: false,
            marks: Vec::new(),
        })
    }

    /// Sends the acquire script to the nodes, resending with the same token while they do
    /// not answer. A grant that fell short (too few nodes, or too late) is released and the
    /// attempt goes on with a new token.
    async fn send(&mut self) -> Result<Reply> {
        let grant = self.grant.as_ref();
        let lock = grant.lock();
        let invocation = grant.acquire(&self.token, self.waits, self.refused);
        // From the first send on, a grant may exist whether or not its reply arrives.
        self.armed = true;
        let (lease, drift) = (lock.lease.duration(), lock.shared.options.drift);
        if lock.shared.options.replica_ack.is_some() {
            self.marks = lock.shared.nodes.replication_marks();
        }
        let token = &self.token;
        let outcome = lock
            .shared
            .nodes
            .acquire(
                &Request::from(invocation),
                |fence| grant.raise_fence(token, fence),
                |sent_at| valid_until(sent_at, lease, drift),
                &lock.name,
            )
            .await;
        if outcome.spent {
            lock.shared.keeper.release(release_of(grant, &self.token));
            self.token = grant.new_token()?;
            self.refused = false;
            self.armed = false;
        }
        match outcome.decided? {
            Acquired::Granted { fences, sent_at } => Ok(Reply::Granted { fences, sent_at }),
            Acquired::Refused { remaining } => {
                if !outcome.spent {
                    // Others hold it, so nothing is stored under our token, unless the
                    // attempt took a place in a line (which a release may offer the lock to).
                    self.armed = self.waits && grant.keeps_place_while_waiting();
                    self.refused = true;
                }
                Ok(Reply::Held { remaining })
            }
        }
    }

    /// [`send`](Attempt::send) for a waiter: while Redis cannot be reached, tries again until
    /// Redis answers or the [`Outage`] ends, and then returns the last error. The attempt keeps
    /// its token, so a grant whose reply was lost becomes the caller's.
    async fn send_through_outage(&mut self, deadline: Option<Instant>) -> Result<Reply> {
        let mut outage = None;
        loop {
            match self.send().await {
                Err(e) if e.is_unavailable() => {
                    let options = &self.grant.lock().shared.options;
                    let outage = outage.get_or_insert_with(|| Outage::begin(options, deadline));
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
    async fn hold(mut self, fences: Vec<Fence>, sent_at: Instant) -> Result<Held<K>> {
        if let Some(ack) = self.grant.lock().shared.options.replica_ack {
            self.confirm_replicated(ack).await?;
        }
        self.into_held(fences, sent_at).await
    }

    /// Waits for the replicas to acknowledge the grant (`WAIT` on each node); when too few did,
    /// or the wait failed, releases the grant before returning the refusal, so that nobody
    /// finds it held by a caller that was refused.
    async fn confirm_replicated(&mut self, ack: ReplicaAck) -> Result<()> {
        let lock = self.grant.lock();
        let acknowledged = lock
            .shared
            .nodes
            .replicas_acknowledged(
                self.grant.wake_channel(),
                ack.replicas,
                ack.timeout,
                &self.marks,
                &lock.name,
            )
            .await;
        let refusal = match acknowledged {
            Ok(acknowledged) if acknowledged >= ack.replicas => return Ok(()),
            Ok(acknowledged) => Error::NotReplicated {
                name: lock.name.clone(),
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
        let lock = self.grant.lock();
        let release = self.grant.release(&self.token);
        if lock
            .shared
            .nodes
            .owned(&Request::from(release), &lock.name, || true)
            .await
            .is_ok()
        {
            self.armed = false;
        }
    }

    /// Registers the grant among the client's holds and hands it to its guard; when the
    /// client was shut down while the grant was on its way, releases it and refuses.
    async fn into_held(mut self, fences: Vec<Fence>, sent_at: Instant) -> Result<Held<K>> {
        let grant = self.grant;
        let lock = grant.lock();
        let lease = Arc::new(LeaseState::new(
            lock.lease.duration(),
            lock.shared.options.drift,
            sent_at,
            Holding::granted(&lock.name, K::NAME, first_fence(&fences)),
        ));
        let release = release_of(grant.as_ref(), &self.token);
        let taken = HeldNames {
            task: Task::current(),
            kind: K::LOCK_KIND,
            names: grant.names_taken(),
        };
        if let Err(release) = lock
            .shared
            .holds
            .register(Arc::clone(&lease), release, taken)
        {
            // Still armed: if this is cancelled, or Redis does not answer within the shutdown's
            // time, the attempt's drop releases in the background.
            let within = lock.shared.options.shutdown_timeout;
            if tokio::time::timeout(within, release).await == Ok(true) {
                self.armed = false;
            }
            return Err(Error::Shutdown);
        }
        self.armed = false;
        if lock.lease.is_renewed() {
            lock.shared
                .keeper
                .watch(Arc::clone(&lease), grant.renewals(&self.token), sent_at);
        }
        Ok(Held::new(
            Arc::clone(grant),
            self.token.clone(),
            fences,
            lease,
        ))
    }
}

impl<K: Kind> Drop for Attempt<'_, K> {
    fn drop(&mut self) {
        if self.armed {
            let grant = self.grant.as_ref();
            grant
                .lock()
                .shared
                .keeper
                .release(release_of(grant, &self.token));
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
