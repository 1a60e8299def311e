//! A grant held: its kind, owner token, fences and lease, and what can be done with it
//! (extend, release, release no earlier than a point, run work under it) and what its drop
//! does. Every guard is made of one. [`AnyKind`] is what a held grant needs of its kind, which a
//! grant of any kind can be turned into.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::core::kind::Lock;
use crate::core::lease::{LeaseState, Lost};
use crate::core::live_holds::Release;
use crate::core::nodes::{Owned, Request};
use crate::core::observe;
use crate::error::{Error, Result};
use crate::options::{lease_millis, Wait, MIN_LEASE};
use crate::race::{self, Either};
use crate::token::{Fence, OwnerToken};
use crate::transport::script::Invocation;

/// What a held grant needs of its kind, whatever the kind: the part of
/// [`Kind`](crate::core::kind::Kind) a guard uses after the grant, and the acquire a handle of
/// any kind makes, which a grant of any kind can be turned into (`Guard` and `Handle` without a
/// kind). Every kind has it (`core/acquire.rs`).
pub trait AnyKind: Send + Sync + 'static {
    /// See [`Kind::lock`](crate::core::kind::Kind::lock).
    fn lock(&self) -> &Lock;
    /// See [`Kind::release`](crate::core::kind::Kind::release).
    fn release(&self, token: &OwnerToken) -> Invocation;
    /// See [`Kind::extend`](crate::core::kind::Kind::extend).
    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation;
    /// See [`Kind::GUARD`](crate::core::kind::Kind::GUARD).
    fn guard_name(&self) -> &'static str;
    /// See [`Kind::HANDLE`](crate::core::kind::Kind::HANDLE).
    fn handle_name(&self) -> &'static str;
    /// See [`Kind::describe`](crate::core::kind::Kind::describe).
    fn describe(&self, guard: &mut std::fmt::DebugStruct<'_, '_>);
    /// Acquires a grant of this one's kind as `wait` says, held as a grant of any kind.
    fn acquire_any(self: Arc<Self>, wait: Wait) -> AnyAcquire;
}

/// An acquire of a grant of any kind, under way.
pub(crate) type AnyAcquire = Pin<Box<dyn Future<Output = Result<Held<dyn AnyKind>>> + Send>>;

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

/// A grant held.
pub struct Held<K: ?Sized + AnyKind> {
    grant: Arc<K>,
    token: OwnerToken,
    /// One per name locked, in the order the kind names them; never empty.
    fences: Vec<Fence>,
    lease: Arc<LeaseState>,
    released: bool,
}

impl<K: ?Sized + AnyKind> Held<K> {
    /// A grant of `grant` to `token`, registered with the client's holds already.
    pub(crate) fn new(
        grant: Arc<K>,
        token: OwnerToken,
        fences: Vec<Fence>,
        lease: Arc<LeaseState>,
    ) -> Held<K> {
        Held {
            grant,
            token,
            fences,
            lease,
            released: false,
        }
    }

    pub(crate) fn grant(&self) -> &K {
        &self.grant
    }

    /// The same grant, held as a grant of any kind.
    pub(crate) fn erased(mut self) -> Held<dyn AnyKind>
    where
        K: Sized,
    {
        // This hold is handed over: its drop must release nothing.
        self.released = true;
        Held {
            grant: Arc::clone(&self.grant) as Arc<dyn AnyKind>,
            token: self.token.clone(),
            fences: std::mem::take(&mut self.fences),
            lease: Arc::clone(&self.lease),
            released: false,
        }
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
            self.grant.as_ref(),
            &self.token,
            &self.lease,
            lease,
            Extension::AtLeast,
        );
        observe::extension(self.lease.hold(), || self.lease.is_lost(), extended).await
    }

    /// For a reply saying that Redis no longer holds this grant: fires the lost signal and
    /// returns the error to report.
    pub(crate) fn revoked(&self) -> Error {
        revoked(self.grant.as_ref(), &self.lease)
    }

    /// Releases, resending when Redis does not answer. If a resend finds nothing held while
    /// the validity deadline has not passed, an earlier send released it: nobody else can have
    /// taken a lock that was still validly ours, short of a forced removal in between, which
    /// this cannot tell from it without a trace of every release (`docs/faults.md`).
    pub(crate) async fn unlock(self) -> Result<()> {
        let lease = Arc::clone(&self.lease);
        observe::release(lease.hold(), self.release()).await
    }

    async fn release(mut self) -> Result<()> {
        self.stop_renewing();
        let lock = self.grant.lock();
        if !lock.shared.holds.is_live(self.lease.id()) {
            // The client's shutdown released it.
            self.released = true;
            return Err(Error::Shutdown);
        }
        let deadline = self.lease.deadline();
        let invocation = self.grant.release(&self.token);
        // On an error the hold stays registered: the drop releases it in the background.
        let owned = lock
            .shared
            .nodes
            .owned(&Request::from(invocation), &lock.name, || {
                Instant::now() < deadline
            })
            .await?;
        self.end_hold();
        match owned {
            Owned::Done => Ok(()),
            // Too few nodes answered while the lock was still valid: the silent ones free it
            // when its lease ends.
            Owned::Unknown { .. } if Instant::now() < deadline => Ok(()),
            Owned::NotHeld | Owned::Unknown { .. } => {
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
    ) -> impl Future<Output = Result<()>> + Send + 'static
    where
        K: Send + Sync,
    {
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
                    observe::release(lease.hold(), answered).await
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
        let grant = Arc::clone(&self.grant);
        let token = self.token.clone();
        let lease = Arc::clone(&self.lease);
        let keep: Release = Box::pin(async move {
            let kept = send_extend(grant.as_ref(), &token, &lease, left, Extension::Exactly);
            let kept = kept.await;
            let reached = !kept.as_ref().is_err_and(Error::is_unavailable);
            let _ = answer.send(kept);
            reached
        });
        self.grant.lock().shared.keeper.release(keep);
        answered
    }

    /// Nothing is left to release, by the guard's drop or by a shutdown. Until then the hold
    /// stays registered, so that an unlock cancelled or failed on its way still leaves the
    /// release to the drop.
    fn end_hold(&mut self) {
        self.released = true;
        self.grant.lock().shared.holds.take(self.lease.id());
    }

    fn stop_renewing(&self) {
        let lock = self.grant.lock();
        if lock.lease.is_renewed() {
            lock.shared.keeper.forget(self.lease.id());
        }
    }

    fn not_held(&self) -> Error {
        not_held(self.grant.as_ref())
    }
}

/// What [`Held::unlock_no_earlier_than`] does: release now, or keep the lock until a point
/// and wait for that request's answer.
enum Later<K: ?Sized + AnyKind> {
    Now(Held<K>),
    Kept(Arc<LeaseState>, oneshot::Receiver<Result<()>>),
}

/// Extends the grant of `token` to at least (or, `Exactly`, to) `lease` from now,
/// owner-checked on the nodes, and moves the guard's deadline on a confirmed reply.
async fn send_extend<K: ?Sized + AnyKind>(
    grant: &K,
    token: &OwnerToken,
    state: &LeaseState,
    lease: Duration,
    how: Extension,
) -> Result<()> {
    let lease_ms = lease_millis(lease)?;
    let lock = grant.lock();
    if lock.shared.holds.is_shut_down() {
        return Err(Error::Shutdown);
    }
    let mut invocation = grant.extend(token, lease_ms);
    if how == Extension::Exactly {
        // Every extend script reads a last argument `exactly` as leave to shorten.
        invocation.arg("exactly");
    }
    let sent_at = Instant::now();
    match lock
        .shared
        .nodes
        .owned(&Request::from(invocation), &lock.name, || false)
        .await?
    {
        Owned::Done if state.renewed(sent_at, lease) => Ok(()),
        Owned::Done => Err(not_held(grant)),
        Owned::NotHeld => Err(revoked(grant, state)),
        Owned::Unknown { answered } => Err(Error::NoQuorum {
            name: lock.name.clone(),
            answered,
            needed: lock.shared.nodes.majority(),
        }),
    }
}

/// For a reply saying that Redis no longer holds a grant: fires its lost signal and returns
/// the error to report.
fn revoked<K: ?Sized + AnyKind>(grant: &K, state: &LeaseState) -> Error {
    state.mark_lost(Lost::Revoked);
    not_held(grant)
}

fn not_held<K: ?Sized + AnyKind>(grant: &K) -> Error {
    Error::NotHeld {
        name: grant.lock().name.clone(),
    }
}

impl<K: ?Sized + AnyKind> Drop for Held<K> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewing();
        let shared = &self.grant.lock().shared;
        // Nothing to take when the client's shutdown released the hold already.
        if let Some(release) = shared.holds.take(self.lease.id()) {
            shared.keeper.release(release);
            self.lease.hold().dropped();
        }
    }
}

/// The fence of the first name of a grant: the one a grant of a single name is known by.
pub(crate) fn first_fence(fences: &[Fence]) -> Fence {
    fences.first().copied().unwrap_or(Fence::new(0))
}

/// The release of whatever `token` holds of `grant`, sent when run, and again while Redis does
/// not answer, for as long as a grant of the lock's lease could last: for a dropped guard, a
/// cancelled acquire, or a hold a shutdown gives back.
pub(crate) fn release_of<K: ?Sized + AnyKind>(grant: &K, token: &OwnerToken) -> Release {
    let lock = grant.lock();
    lock.shared.nodes.release_of(
        grant.release(token),
        lock.name.clone(),
        lock.lease.duration(),
    )
}
