//! The model's state: what Redis holds for one lock name, what each client knows and has on
//! its way, and the ghost records the invariants read. Every time is relative (ticks left, or
//! ticks since), so that the state space is finite; every collection is held inline, so that a
//! state is one flat value to hash and copy.

use super::config::{Config, MAX_CLIENTS};

/// A short sequence held inline. Unused slots stay at their default, so that two sequences
/// with the same items are equal and hash alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Seq<T, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Default for Seq<T, N> {
    fn default() -> Self {
        Seq {
            len: 0,
            items: [T::default(); N],
        }
    }
}

impl<T: Copy + Default, const N: usize> Seq<T, N> {
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        &self.items[..self.len()]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        let len = self.len();
        &mut self.items[..len]
    }

    pub(crate) fn first(&self) -> Option<T> {
        self.as_slice().first().copied()
    }

    pub(crate) fn push(&mut self, item: T) {
        self.insert(self.len(), item);
    }

    /// Inserts `item` at `at`. A sequence that would outgrow its room is a bound of the model
    /// set too small for the run, not a state to explore.
    pub(crate) fn insert(&mut self, at: usize, item: T) {
        assert!(
            self.len() < N,
            "a bound of the model ({N} items) is too small for this run"
        );
        let len = self.len();
        self.items[at..=len].rotate_right(1);
        self.items[at] = item;
        self.len += 1;
    }

    pub(crate) fn remove(&mut self, at: usize) -> T {
        let item = self.items[at];
        let len = self.len();
        self.items[at..len].rotate_left(1);
        self.len -= 1;
        self.items[self.len()] = T::default();
        item
    }

    pub(crate) fn position(&self, f: impl Fn(&T) -> bool) -> Option<usize> {
        self.as_slice().iter().position(f)
    }

    pub(crate) fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        let mut at = 0;
        while at < self.len() {
            if keep(&self.items[at]) {
                at += 1;
            } else {
                self.remove(at);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Seq::default();
    }
}

/// An owner token: the client that drew it and which of its tokens it is (from 1). Ordered as
/// the scripts order place members with equal scores: `c<client>.<generation>:` compares by client,
/// then by generation (both one digit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Token {
    pub(crate) client: u8,
    pub(crate) generation: u8,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}.{}:", self.client, self.generation)
    }
}

/// The lock key's value (`value.lua`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Value {
    #[default]
    Absent,
    /// `~fence`: released, the last fence kept (its memory outlasts any run of the model).
    Released,
    Held(Hold),
}

/// A held value: `token fence [+[?]]`, and its expiry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Hold {
    pub(crate) holder: Token,
    /// `+`: a refused waiter was seen, so the release looks for the line.
    pub(crate) marked: bool,
    /// `+?`: written by a release's handoff for its waiter, which has not claimed it yet
    /// (its own acquire makes it a plain hold); never renewed or extended until then.
    pub(crate) offered: bool,
    /// Ticks until the key expires (at least 1 while it exists).
    pub(crate) ttl: u8,
    /// Ghost: ticks since a handoff wrote it, while offered.
    pub(crate) unclaimed_for: u8,
}

/// A waiter's place: a member of the places (and, for a FairMutex, of the line), and the
/// ticks until it ends (0: ended, still stored until a script drops it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Place {
    pub(crate) token: Token,
    pub(crate) ends: u8,
}

impl Place {
    pub(crate) fn is_live(&self) -> bool {
        self.ends > 0
    }
}

/// Room for places: a live one per client and the ended ones of tokens given up.
pub(crate) const MAX_PLACES: usize = 6;

/// What Redis holds for the name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Server {
    pub(crate) value: Value,
    /// A Mutex's places, ordered as `ZRANGE` gives them (by end, then member); a FairMutex's
    /// line with each member's place, in order of arrival.
    pub(crate) places: Seq<Place, MAX_PLACES>,
    /// Which node is the master: 0 or 1. The replica is caught up whenever it takes over, so
    /// one copy of the data serves both; the nodes differ only by who counts a PUBLISH.
    pub(crate) master: u8,
}

/// A release message (the payload a script publishes), as a client's notifier reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Message {
    /// `<token>` on the waiter's client's channel: an offer, to claim by asking again.
    #[default]
    Offer,
    /// `<token>?<ms>`: the lock was offered to the waiter ahead for `ms`.
    Standby,
    /// `~<token>` on the name's channel: released to nobody.
    Freed,
    /// `<token><fence>` (the broken variant that trusts it): a grant announced.
    Grant,
}

/// A message on its way to a client, and the token it names (the releaser's, for `Freed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Note {
    pub(crate) message: Message,
    pub(crate) token: Token,
}

/// Where a client's pub/sub connection is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Sub {
    /// Dropped, not yet reconnected: nothing heard, nothing counted.
    #[default]
    Off,
    /// Subscribed on node 0 or 1: hears every PUBLISH of the master (a replica relays); the
    /// master counts it only if it is the master.
    On(u8),
    /// The process is gone but the node still counts the connection.
    HalfOpen(u8),
}

/// A request a client sent, in order on its connection, that Redis has not run yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Request {
    /// `acquire.lua` for a waiter (`waits`, a place when refused).
    Acquire {
        refused_before: bool,
        /// Ticks since sent (at most the lease: older is too late anyway).
        age: u8,
    },
    /// `release.lua` by the token.
    #[default]
    Release,
    /// `extend.lua` to the lease.
    Extend { age: u8 },
}

/// A request, its token's generation (a release's or an extension's), as queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Sent {
    pub(crate) request: Request,
    pub(crate) generation: u8,
}

/// A reply on its way back to a client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Answer {
    pub(crate) generation: u8,
    pub(crate) reply: Reply,
    /// The acquire's `refused_before`, for a resend of the same request.
    pub(crate) refused_before: bool,
    /// Ticks since its request was sent.
    pub(crate) age: u8,
}

/// What a script answered, as the client reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Reply {
    /// `{1, fence}`.
    #[default]
    Granted,
    /// `{0, ms}`: held by another, for this many ticks (rounded up).
    Refused { ttl: u8 },
    /// `extend.lua`: 1, or 0 / -1.
    Extended { ok: bool },
}

/// What woke a waiter while it was busy, kept for its next sleep (`notify.rs`'s `Wake`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Wake {
    #[default]
    Now,
    /// After the offer to the waiter ahead has had its time.
    AfterOffer,
}

/// A client inside `lock()` (`wait_for_grant`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Wait {
    /// The generation its registration is addressed by: the token's, except between a late grant
    /// and the next refusal (`retarget`).
    pub(crate) target: u8,
    /// Whether Redis refused this token (its next acquire says `refused_before`).
    pub(crate) refused: bool,
    /// An acquire is on its way.
    pub(crate) sending: bool,
    /// While sleeping, ticks until the timer fires (timely runs only; 0 otherwise).
    pub(crate) timer: u8,
    /// A wake that came while sending.
    pub(crate) wake: Option<Wake>,
    /// Ticks since the last refused acquire was sent (the broken variant that trusts
    /// announced grants counts its validity from there; 0 otherwise).
    pub(crate) since_refusal: u8,
}

/// Where a client is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// Between calls of `lock()`.
    #[default]
    Idle,
    Waiting(Wait),
    /// Holds a guard; `valid`: ticks of validity left (0: expired, the guard knows it lost
    /// the lock); `renewing`: an extension is on its way.
    Holding {
        valid: u8,
        renewing: bool,
    },
    /// Gone for good.
    Crashed,
}

/// One client process with one waiting task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Client {
    pub(crate) phase: Phase,
    /// Its current token's generation (0: none drawn yet).
    pub(crate) generation: u8,
    /// Calls of `lock()` left.
    pub(crate) rounds: u8,
    pub(crate) sub: Sub,
    pub(crate) frozen: bool,
    /// Its acquire on the way is held back by a fault: its reply may come at any time, even
    /// past the validity it would give. Without it, a reply comes before the validity ends
    /// (and, in a timely run, within the tick).
    pub(crate) late: bool,
    /// Messages heard by the connection, not yet read by the waiter, in order.
    pub(crate) inbox: Seq<Note, 5>,
    /// Requests of the waiting or holding task, in order: acquires and its own releases.
    pub(crate) requests: Seq<Sent, 3>,
    /// Requests of the background tasks (the keeper's renewals, give-backs of late grants).
    pub(crate) background: Seq<Sent, 3>,
    /// Replies not yet read, in order.
    pub(crate) replies: Seq<Answer, 3>,
}

impl Client {
    pub(crate) fn token(&self, client: u8) -> Token {
        Token {
            client,
            generation: self.generation,
        }
    }

    /// Whether the process is running: neither crashed nor paused.
    pub(crate) fn runs(&self) -> bool {
        !self.frozen && self.phase != Phase::Crashed
    }

    /// Whether this client waits with `token`.
    pub(crate) fn waits_as(&self, token: Token) -> bool {
        matches!(self.phase, Phase::Waiting(_)) && self.generation == token.generation
    }
}

/// Ghost state: records that no real component keeps, for the invariants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Ghost {
    /// The waiter told `<token>?<ms>` by the last handoff, while it can act on it (running,
    /// waiting with that token, its connection up), and the ticks since.
    pub(crate) standby: Option<(Token, u8)>,
    /// The fair line as arrivals made it: a waiter joins at the back when refused without a
    /// place, keeps its turn while its place lasts, and leaves it when served (offered or
    /// granted the lock), when its place ends, or when it gives up.
    pub(crate) arrivals: Seq<Place, MAX_PLACES>,
    /// A FairMutex served someone while a live waiter that arrived earlier still had its turn.
    pub(crate) passed: Option<(Token, Token)>,
}

/// Fault budgets left.
pub(crate) type Budget = super::config::Faults;

/// The whole state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) server: Server,
    pub(crate) clients: [Client; MAX_CLIENTS],
    pub(crate) budget: Budget,
    pub(crate) ghost: Ghost,
}

impl State {
    /// Nobody holds or waits; every client subscribed where the run puts it.
    pub(crate) fn initial(config: &Config) -> State {
        let mut clients = [Client::default(); MAX_CLIENTS];
        for (at, client) in clients
            .iter_mut()
            .enumerate()
            .take(usize::from(config.clients))
        {
            client.rounds = config.rounds;
            client.sub = Sub::On(u8::from(config.on_replica & (1 << at) != 0));
        }
        State {
            server: Server::default(),
            clients,
            budget: config.faults,
            ghost: Ghost::default(),
        }
    }

    pub(crate) fn client(&self, client: u8) -> &Client {
        &self.clients[usize::from(client)]
    }

    pub(crate) fn client_mut(&mut self, client: u8) -> &mut Client {
        &mut self.clients[usize::from(client)]
    }
}
