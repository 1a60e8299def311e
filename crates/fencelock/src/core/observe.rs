//! What fencelock reports about its locks with the `tracing` or the `metrics` feature: a span for
//! each acquire, renewal and release, a warning for each lease lost, and histograms of waits
//! and holds with counters of outcomes (`docs/observability.md` lists them).
//!
//! The lock code calls in here unconditionally, once per operation (`grant.rs`, `keeper.rs`,
//! `lease.rs`). Without the features every type here is empty and every call does nothing, so
//! the features are decided in this module only.

// What only one feature reports is unused under the other one, or under neither.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use std::future::Future;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::time::Duration;

#[cfg(any(feature = "tracing", feature = "metrics"))]
use tokio::time::Instant;

#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::error::Error;
use crate::error::Result;
use crate::token::Fence;

/// The metrics' names, shared by their descriptions and their reports.
#[cfg(feature = "metrics")]
mod name {
    pub(super) const WAIT_SECONDS: &str = "fencelock_wait_seconds";
    pub(super) const HOLD_SECONDS: &str = "fencelock_hold_seconds";
    pub(super) const ACQUISITIONS: &str = "fencelock_acquisitions_total";
    pub(super) const CONTENDED: &str = "fencelock_contended_total";
    pub(super) const RENEWALS: &str = "fencelock_renewals_total";
    pub(super) const LOST: &str = "fencelock_lost_total";
}

/// Gives the installed metrics recorder the units and help texts. Called for every client
/// built, not once per process: a recorder installed after the first client would miss them.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{describe_counter, describe_histogram, Unit};
        describe_histogram!(
            name::WAIT_SECONDS,
            Unit::Seconds,
            "Time from an acquire call to its grant."
        );
        describe_histogram!(
            name::HOLD_SECONDS,
            Unit::Seconds,
            "Time from a grant to its release or to the loss of its lease."
        );
        describe_counter!(
            name::ACQUISITIONS,
            Unit::Count,
            "Acquire calls ended, by outcome: granted, held (try_* refused), timeout, error."
        );
        describe_counter!(
            name::CONTENDED,
            Unit::Count,
            "Acquire calls that found the lock held at least once."
        );
        describe_counter!(
            name::RENEWALS,
            Unit::Count,
            "Lease renewals and extensions, by outcome: renewed, failed."
        );
        describe_counter!(
            name::LOST,
            Unit::Count,
            "Leases lost while held: revoked, or expired without a renewal."
        );
    }
}

/// One acquire call, from the call to its outcome.
pub(crate) struct Acquiring {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    /// Whether the call found the lock held; recorded in the span at the end, so that the
    /// field is there once, whatever its value.
    #[cfg(feature = "tracing")]
    contended: AtomicBool,
    #[cfg(feature = "metrics")]
    kind: &'static str,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    called_at: Instant,
}

impl Acquiring {
    /// An acquire of the lock `lock` of kind `kind`, called now.
    pub(crate) fn start(lock: &str, kind: &'static str) -> Acquiring {
        Acquiring {
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!(
                "fencelock.acquire",
                lock,
                kind,
                outcome = tracing::field::Empty,
                fence = tracing::field::Empty,
                waited_ms = tracing::field::Empty,
                contended = tracing::field::Empty,
                error = tracing::field::Empty,
            ),
            #[cfg(feature = "tracing")]
            contended: AtomicBool::new(false),
            #[cfg(feature = "metrics")]
            kind,
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            called_at: Instant::now(),
        }
    }

    /// Runs `acquire` inside the call's span and reports how it ended.
    pub(crate) async fn run<T>(
        &self,
        acquire: impl Future<Output = Result<T>>,
        fence_of: impl Fn(&T) -> Fence,
    ) -> Result<T> {
        #[cfg(feature = "tracing")]
        let acquire = tracing::Instrument::instrument(acquire, self.span.clone());
        let result = acquire.await;
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        self.ended(result.as_ref().map(fence_of));
        result
    }

    /// The call found the lock held, for the first time: it is contended.
    pub(crate) fn found_held(&self) {
        #[cfg(feature = "tracing")]
        self.contended.store(true, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(name::CONTENDED, "kind" => self.kind).increment(1);
    }

    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn ended(&self, result: std::result::Result<Fence, &Error>) {
        let outcome = match result {
            Ok(_) => "granted",
            Err(Error::Held { .. }) => "held",
            Err(Error::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        let waited = self.called_at.elapsed();
        #[cfg(feature = "tracing")]
        {
            self.span.record("outcome", outcome);
            self.span
                .record("contended", self.contended.load(Ordering::Relaxed));
            self.span.record("waited_ms", millis(waited));
            match result {
                Ok(fence) => self.span.record("fence", fence.get()),
                Err(e) => self.span.record("error", tracing::field::display(e)),
            };
        }
        #[cfg(feature = "metrics")]
        {
            metrics::counter!(name::ACQUISITIONS, "kind" => self.kind, "outcome" => outcome)
                .increment(1);
            if result.is_ok() {
                metrics::histogram!(name::WAIT_SECONDS, "kind" => self.kind).record(waited);
            }
        }
    }
}

/// One grant, from the grant to its release or to the loss of its lease: what its renewals,
/// release and loss are reported with.
#[derive(Debug)]
pub(crate) struct Holding {
    #[cfg(feature = "tracing")]
    lock: Box<str>,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    kind: &'static str,
    #[cfg(feature = "tracing")]
    fence: u64,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    granted_at: Instant,
    /// Set when the hold ended, by a release or a loss, whichever came first: a renewal
    /// answered after the release, finding the lock gone, does not make it a lost one.
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    ended: AtomicBool,
}

impl Holding {
    /// A grant of `resource` under `fence`, made now.
    pub(crate) fn granted(lock: &str, kind: &'static str, fence: Fence) -> Holding {
        Holding {
            #[cfg(feature = "tracing")]
            lock: lock.into(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            kind,
            #[cfg(feature = "tracing")]
            fence: fence.get(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            granted_at: Instant::now(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            ended: AtomicBool::new(false),
        }
    }

    /// The lease was found lost (reported once, and not after the hold ended).
    pub(crate) fn lost(&self, reason: impl std::fmt::Display) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        if let Some(held) = self.end() {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                lock = &*self.lock,
                kind = self.kind,
                fence = self.fence,
                held_ms = millis(held),
                %reason,
                "fencelock lease lost"
            );
            #[cfg(feature = "metrics")]
            metrics::counter!(name::LOST, "kind" => self.kind).increment(1);
        }
    }

    /// The guard was dropped: its release runs in the background, unobserved.
    pub(crate) fn dropped(&self) {
        self.released_in_background("dropped");
    }

    /// The client was shut down: the release runs in the background, waited for by the
    /// shutdown, and the hold ends now (so its loss is not reported as one).
    pub(crate) fn shut_down(&self) {
        self.released_in_background("shutdown");
    }

    fn released_in_background(&self, outcome: &'static str) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        let held = self.end();
        #[cfg(feature = "tracing")]
        {
            let span = self.release_span();
            span.record("outcome", outcome);
            if let Some(held) = held {
                span.record("held_ms", millis(held));
            }
        }
    }

    /// A renewal of this lease, sent now.
    pub(crate) fn renewing(&self) -> Renewing {
        Renewing {
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!(
                "fencelock.renew",
                lock = &*self.lock,
                kind = self.kind,
                fence = self.fence,
                outcome = tracing::field::Empty,
            ),
            #[cfg(feature = "metrics")]
            kind: self.kind,
        }
    }

    /// Ends the hold, the first time only: how long it lasted.
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn end(&self) -> Option<Duration> {
        if self.ended.swap(true, Ordering::AcqRel) {
            return None;
        }
        let held = self.granted_at.elapsed();
        #[cfg(feature = "metrics")]
        metrics::histogram!(name::HOLD_SECONDS, "kind" => self.kind).record(held);
        Some(held)
    }

    #[cfg(feature = "tracing")]
    fn release_span(&self) -> tracing::Span {
        tracing::debug_span!(
            "fencelock.release",
            lock = &*self.lock,
            kind = self.kind,
            fence = self.fence,
            outcome = tracing::field::Empty,
            held_ms = tracing::field::Empty,
            error = tracing::field::Empty,
        )
    }
}

/// Runs the release of `lease` inside a release span, and ends the hold when it is released.
pub(crate) async fn release(
    hold: &Holding,
    release: impl Future<Output = Result<()>>,
) -> Result<()> {
    #[cfg(feature = "tracing")]
    let span = hold.release_span();
    #[cfg(feature = "tracing")]
    let release = tracing::Instrument::instrument(release, span.clone());
    let result = release.await;
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    let held = match result {
        Ok(()) => hold.end(),
        Err(_) => None,
    };
    #[cfg(feature = "tracing")]
    {
        span.record(
            "outcome",
            match &result {
                Ok(()) => "released",
                Err(Error::NotHeld { .. }) => "not_held",
                Err(_) => "error",
            },
        );
        if let Some(held) = held {
            span.record("held_ms", millis(held));
        }
        if let Err(e) = &result {
            span.record("error", tracing::field::display(e));
        }
    }
    result
}

/// Runs an extension of `lease` inside a renewal span and reports how it ended.
pub(crate) async fn extension(
    hold: &Holding,
    is_lost: impl Fn() -> bool,
    extend: impl Future<Output = Result<()>>,
) -> Result<()> {
    let renewing = hold.renewing();
    #[cfg(feature = "tracing")]
    let extend = tracing::Instrument::instrument(extend, renewing.span.clone());
    let result = extend.await;
    renewing.ended(result.is_ok(), is_lost());
    result
}

/// One renewal of one lease: by the client's renewal task, or an explicit extension.
pub(crate) struct Renewing {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    #[cfg(feature = "metrics")]
    kind: &'static str,
}

impl Renewing {
    /// Reports the renewal as renewed, or as failed because the lease is lost (which wins) or
    /// because too few answered in time.
    pub(crate) fn ended(self, renewed: bool, lost: bool) {
        #[cfg(feature = "tracing")]
        self.span.record(
            "outcome",
            match (lost, renewed) {
                (true, _) => "lost",
                (false, true) => "renewed",
                (false, false) => "error",
            },
        );
        #[cfg(feature = "metrics")]
        {
            let outcome = if renewed && !lost {
                "renewed"
            } else {
                "failed"
            };
            metrics::counter!(name::RENEWALS, "kind" => self.kind, "outcome" => outcome)
                .increment(1);
        }
    }
}

#[cfg(feature = "tracing")]
fn millis(duration: Duration) -> f64 {
    // Whole microseconds: finer digits would be noise.
    duration.as_micros() as f64 / 1000.0
}
