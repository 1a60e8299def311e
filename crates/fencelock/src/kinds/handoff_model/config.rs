//! What one run of the model explores: the lock, the protocol (the scripts as they are, or one
//! of the broken variants), how many clients and rounds, the lengths of time in ticks, and how
//! many faults of each kind the environment may inject.

/// The lock whose scripts the model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lock {
    /// `kinds/mutex/*.lua`: waiters served by the end of their place, unheard ones skipped.
    Mutex,
    /// `kinds/fair/*.lua`: waiters served in order of arrival, nobody skipped.
    Fair,
}

/// The protocol the model runs: the scripts and client as they are, or a variant that breaks
/// one of their rules, so that a test can show the checker finds what that rule prevents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Variant {
    /// The handoff by offer and claim, as the scripts and `core/acquire.rs` do it.
    Fixed,
    /// The handoff of older versions: a release grants the waiter its whole lease and announces
    /// `<token><fence>`, and the waiter holds on hearing it, its validity counted from its
    /// last refusal.
    TrustAnnouncedGrant,
    /// A release writes the waiter's value with its whole lease instead of the window, and
    /// relies on PUBLISH's count to know the waiter will claim it.
    GrantForLease,
    /// The fair line skips a waiter whose client heard nothing, as a Mutex's does.
    FairSkipsUnheard,
    /// A renewal or an extension of a token lengthens the lock's value whenever it starts with
    /// the token, an offer its waiter has not claimed included (the scripts before offers
    /// were marked).
    RenewOffers,
    /// A FairMutex waiter whose place ended keeps its turn while its entry is still in line:
    /// the line stops at the caller's own entry, ended or not, and a refusal keeps the entry
    /// where it is (the scripts before an ended place lost its turn).
    FairKeepsEndedTurn,
}

/// Lengths of time, in ticks. A tick is the model's unit of time: every expiry and every timer
/// counts down by one when time passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Times {
    /// A grant's lease.
    pub(crate) lease: u8,
    /// The handoff window: how long an offer lasts.
    pub(crate) window: u8,
    /// The waiter's fallback timer (`wake_fallback`).
    pub(crate) fallback: u8,
    /// How long a place lasts without a refusal renewing it.
    pub(crate) place: u8,
}

impl Times {
    /// The smallest lengths that keep every ordering the protocol cares about: the window
    /// shorter than the fallback (so that a standby message matters), the fallback shorter
    /// than a place (so that a waiter that retries in time keeps its place), the lease as long
    /// as a place.
    pub(crate) const SMALL: Times = Times {
        lease: 3,
        window: 1,
        fallback: 2,
        place: 3,
    };

    /// How long an offer lasts: the window, or the waiter's lease if shorter.
    pub(crate) fn offer(&self) -> u8 {
        self.window.min(self.lease)
    }
}

/// How many faults of each kind the environment may inject in one run (each use spends one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    /// A client process stops for good (its pub/sub connection may stay counted: half-open).
    pub(crate) crash: u8,
    /// A client process pauses (its messages buffer) and resumes later.
    pub(crate) freeze: u8,
    /// A pub/sub connection drops with its messages in flight; the client reconnects.
    pub(crate) drop: u8,
    /// A message is delivered twice.
    pub(crate) duplicate: u8,
    /// The master fails over to its replica (caught up); pub/sub connections stay where they
    /// were, on the demoted node, which relays what the new master publishes.
    pub(crate) failover: u8,
    /// A reply is lost and the client sends the same request again.
    pub(crate) resend: u8,
    /// A reply is held back past any deadline (in a timely run; otherwise every reply may be).
    pub(crate) late: u8,
    /// A waiter gives up (a timeout or a dropped future).
    pub(crate) cancel: u8,
    /// A holder's keeper renews the lease.
    pub(crate) renew: u8,
}

/// One run of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Config {
    pub(crate) lock: Lock,
    pub(crate) variant: Variant,
    /// How many clients (processes, one waiter each), at most [`MAX_CLIENTS`].
    pub(crate) clients: u8,
    /// How many times each client calls `lock()`.
    pub(crate) rounds: u8,
    pub(crate) times: Times,
    pub(crate) faults: Faults,
    /// Whether every healthy client acts before time passes: its messages are read, its
    /// requests run and answered and its timers fire within the tick they are due. Without
    /// it, any delay is possible and timers mean nothing (any retry may come at any time),
    /// which is what safety is checked under; with it, only the faults listed delay a client,
    /// which is what the bounds on handoff latency and order need.
    pub(crate) timely: bool,
    /// A pattern subscription (`PSUBSCRIBE`) on the master: every PUBLISH counts one receiver
    /// more, so no waiter is ever skipped as unheard.
    pub(crate) tap: bool,
    /// The clients whose pub/sub connection is on the replica from the start (a bit each):
    /// they hear what the master publishes, relayed, but the master does not count them.
    pub(crate) on_replica: u8,
}

/// The most clients a run may have.
pub(crate) const MAX_CLIENTS: usize = 3;

impl Config {
    /// A run of `lock`'s fixed protocol, with `clients` clients of `rounds` rounds, no faults,
    /// not timely.
    pub(crate) fn new(lock: Lock, clients: u8, rounds: u8) -> Config {
        assert!(
            usize::from(clients) <= MAX_CLIENTS,
            "at most {MAX_CLIENTS} clients"
        );
        Config {
            lock,
            variant: Variant::Fixed,
            clients,
            rounds,
            times: Times::SMALL,
            faults: Faults::default(),
            timely: false,
            tap: false,
            on_replica: 0,
        }
    }

    pub(crate) fn variant(mut self, variant: Variant) -> Config {
        self.variant = variant;
        self
    }

    pub(crate) fn faults(mut self, faults: Faults) -> Config {
        self.faults = faults;
        self
    }

    pub(crate) fn timely(mut self) -> Config {
        self.timely = true;
        self
    }

    pub(crate) fn tap(mut self) -> Config {
        self.tap = true;
        self
    }

    pub(crate) fn on_replica(mut self, client: u8) -> Config {
        self.on_replica |= 1 << client;
        self
    }

    /// Whether a release skips a waiter whose client heard nothing.
    pub(crate) fn skips_unheard(&self) -> bool {
        self.lock == Lock::Mutex || self.variant == Variant::FairSkipsUnheard
    }

    /// How long a release writes a waiter's value for.
    pub(crate) fn handed_ttl(&self) -> u8 {
        match self.variant {
            Variant::TrustAnnouncedGrant | Variant::GrantForLease => self.times.lease,
            Variant::Fixed
            | Variant::FairSkipsUnheard
            | Variant::RenewOffers
            | Variant::FairKeepsEndedTurn => self.times.offer(),
        }
    }

    /// Whether a release's handoff writes an offer (`+?`) to be claimed, rather than the old
    /// handoff's grant.
    pub(crate) fn hands_over_offers(&self) -> bool {
        self.variant != Variant::TrustAnnouncedGrant
    }

    /// Whether a renewal or an extension lengthens an offer its waiter has not claimed.
    pub(crate) fn renews_offers(&self) -> bool {
        self.variant == Variant::RenewOffers
    }

    /// Whether a FairMutex waiter whose place ended keeps its turn.
    pub(crate) fn keeps_ended_turn(&self) -> bool {
        self.variant == Variant::FairKeepsEndedTurn
    }
}
