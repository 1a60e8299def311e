//! What a guard knows about its lease: the validity deadline and the lost signal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex as StdMutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::observe::Holding;
use crate::options::Drift;

/// Why a held lock was lost.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(guard: fencelock::MutexGuard) {
/// tokio::select! {
///     reason = guard.lost() => eprintln!("stopping: {reason}"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lost {
    /// The validity deadline passed without a successful renewal: Redis was unreachable or too
    /// slow, or the lease was fixed and not extended in time.
    Expired,
    /// Redis no longer holds the lock for this owner: its key was deleted or taken over.
    Revoked,
    /// The client was shut down ([`Client::shutdown`](crate::Client::shutdown)), which gave
    /// the lock back.
    Shutdown,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Expired => f.write_str("lease expired before it could be renewed"),
            Lost::Revoked => f.write_str("lock was removed or taken by another owner"),
            Lost::Shutdown => f.write_str("the client was shut down and gave the lock back"),
        }
    }
}

static NEXT_LEASE_ID: AtomicU64 = AtomicU64::new(1);

/// The lease of one grant, shared by its guard and the client's renewal task.
#[derive(Debug)]
pub(crate) struct LeaseState {
    id: u64,
    lease: Duration,
    drift: Drift,
    deadline: StdMutex<Instant>,
    lost: CancellationToken,
    reason: OnceLock<Lost>,
    hold: Holding,
}

impl LeaseState {
    /// A lease granted by a request sent at `sent_at`. The validity deadline counts from the
    /// send, not the reply: the server started the lease no earlier than that.
    pub(crate) fn new(lease: Duration, drift: Drift, sent_at: Instant, hold: Holding) -> Self {
        LeaseState {
            id: NEXT_LEASE_ID.fetch_add(1, Ordering::Relaxed),
            lease,
            drift,
            deadline: StdMutex::new(valid_until(sent_at, lease, drift)),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            hold,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// The grant as observability reports it.
    pub(crate) fn hold(&self) -> &Holding {
        &self.hold
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Held as far as this process can tell: not lost, and inside the validity deadline.
    pub(crate) fn is_held(&self) -> bool {
        !self.is_lost() && Instant::now() < self.deadline()
    }

    /// Records a renewal (or extension) to `lease` sent at `sent_at` that Redis confirmed.
    /// A confirmation that arrives after the old deadline changes nothing: the lock may already
    /// have been free in between, so it counts as lost.
    ///
    /// Keeping the later of the two deadlines is sound because no script ever shortens a held
    /// lease (extensions, renewals and resent grants only lengthen it): Redis's expiry is at
    /// least every deadline a confirmation gave, whatever order they were sent and answered in.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) -> bool {
        self.renewed_until(Instant::now(), valid_until(sent_at, lease, self.drift))
    }

    /// [`renewed`](LeaseState::renewed), confirmed at `now`, to a validity `valid` the caller
    /// computed (once for a batch of leases of one length).
    pub(crate) fn renewed_until(&self, now: Instant, valid: Instant) -> bool {
        let mut deadline = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_lost() {
            return false;
        }
        if now >= *deadline {
            drop(deadline);
            self.mark_lost(Lost::Expired);
            return false;
        }
        *deadline = (*deadline).max(valid);
        true
    }

    /// Ends the hold for a shutdown, before its release is sent: the guard stops counting on
    /// the lock from now on.
    pub(crate) fn shut_down(&self) {
        self.hold.shut_down();
        self.mark_lost(Lost::Shutdown);
    }

    /// Fires the lost signal; the first reason given is the one reported.
    pub(crate) fn mark_lost(&self, reason: Lost) {
        if self.reason.set(reason).is_ok() {
            self.hold.lost(reason);
        }
        self.lost.cancel();
    }

    /// Whether the lost signal fired: its reason is set first, so reading it is enough (and
    /// cheaper than asking the signal, which renewals do for every lease).
    pub(crate) fn is_lost(&self) -> bool {
        self.reason.get().is_some()
    }

    /// Completes when the lease is lost: revoked, or past its deadline without renewal.
    pub(crate) async fn lost(&self) -> Lost {
        loop {
            let deadline = self.deadline();
            if tokio::time::timeout_at(deadline, self.lost.cancelled())
                .await
                .is_ok()
            {
                break;
            }
            if Instant::now() >= self.deadline() {
                self.mark_lost(Lost::Expired);
                break;
            }
        }
        self.reason.get().copied().unwrap_or(Lost::Expired)
    }
}

/// When a lease granted by a request sent at `sent_at` stops being counted on.
pub(crate) fn valid_until(sent_at: Instant, lease: Duration, drift: Drift) -> Instant {
    sent_at + lease.saturating_sub(drift.of(lease))
}
