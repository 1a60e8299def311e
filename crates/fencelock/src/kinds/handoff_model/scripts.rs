//! Redis's side: one function per script, each run atomically on the state as the Lua runs on
//! the server. Each follows its file line by line (`kinds/mutex/acquire.lua`, `release.lua`,
//! `extend.lua`, `value.lua`'s `hand_over` and `places_line`; `kinds/fair/acquire.lua`,
//! `release.lua`, `line.lua`), so that a reader can hold one against the other, and the replay
//! can hold the model's outcome against the real script's.

use super::config::{Config, Lock, Variant};
use super::state::{Client, Hold, Message, Note, Phase, Place, Seq, State, Sub, Token, Value};

/// A script the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Script {
    Acquire,
    Release,
    Extend,
}

impl Script {
    /// The file it stands for.
    pub(crate) fn path(self, lock: Lock) -> &'static str {
        match (lock, self) {
            (Lock::Mutex, Script::Acquire) => "kinds/mutex/acquire.lua",
            (Lock::Mutex, Script::Release) => "kinds/mutex/release.lua",
            (Lock::Fair, Script::Acquire) => "kinds/fair/acquire.lua",
            (Lock::Fair, Script::Release) => "kinds/fair/release.lua",
            (_, Script::Extend) => "kinds/value/extend.lua",
        }
    }
}

/// What a script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Answered {
    /// `{1, fence}`.
    Granted,
    /// `{0, ms}`, in ticks rounded up.
    Refused { ttl: u8 },
    /// `release.lua`'s or `extend.lua`'s integer.
    Code(i8),
}

/// Where a message went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Channel {
    /// `<wake>:<client tag>`.
    Client(u8),
    /// `<wake>`.
    #[default]
    Name,
}

/// One PUBLISH of a script.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Published {
    pub(crate) channel: Channel,
    pub(crate) note: Note,
}

/// One script run: which, by which token, with which `refused_before` (an acquire's), and
/// its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Run {
    pub(crate) script: Script,
    pub(crate) token: Token,
    pub(crate) refused_before: bool,
    pub(crate) answered: Answered,
}

/// What a step did on Redis, for the trace and the replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Effects {
    pub(crate) run: Option<Run>,
    pub(crate) published: Seq<Published, 8>,
}

/// The most candidates `hand_over` and a line's `take` look at (`value.lua`, `line.lua`).
const CANDIDATES: usize = 16;

/// How many members `places_line`'s `peek` reads (`ZRANGE places 0 2`).
const PEEKED: usize = 3;

/// A line of waiters as `hand_over` reads it.
#[derive(Clone, Copy)]
enum Line {
    /// `places_line(places, except)`: by end of place, skipping ended places and `except`.
    Places { except: Token },
    /// `fair_line(line, places, stop)`: in order of arrival, up to `stop`.
    Fair { stop: Option<Token> },
}

/// What `hand_over` did.
struct Handed {
    /// Someone was offered the lock (the Lua's `offer`, truthy).
    offered: bool,
    /// A waiter's value was written (a fence drawn), heard or not.
    written: bool,
}

/// The server running one script on the state.
pub(crate) struct Redis<'a> {
    state: &'a mut State,
    config: &'a Config,
    effects: &'a mut Effects,
    /// Whom this script served (offered or granted the lock), for the fair order.
    served: Option<Token>,
}

impl<'a> Redis<'a> {
    pub(crate) fn new(state: &'a mut State, config: &'a Config, effects: &'a mut Effects) -> Self {
        Redis {
            state,
            config,
            effects,
            served: None,
        }
    }

    /// Runs `script` for `token` and records it in the effects.
    pub(crate) fn run(mut self, script: Script, token: Token, refused_before: bool) -> Answered {
        let answered = match (self.config.lock, script) {
            (Lock::Mutex, Script::Acquire) => self.mutex_acquire(token, refused_before),
            (Lock::Mutex, Script::Release) => self.mutex_release(token),
            (Lock::Fair, Script::Acquire) => self.fair_acquire(token),
            (Lock::Fair, Script::Release) => self.fair_release(token),
            (_, Script::Extend) => self.extend(token),
        };
        self.check_fair_order();
        self.effects.run = Some(Run {
            script,
            token,
            refused_before,
            answered,
        });
        answered
    }

    /// `kinds/mutex/acquire.lua`, for a waiter (a place when refused, the value marked).
    fn mutex_acquire(&mut self, token: Token, refused_before: bool) -> Answered {
        match self.state.server.value {
            Value::Held(hold) if hold.holder == token && hold.offered => {
                self.claim();
                Answered::Granted
            }
            Value::Held(hold) if hold.holder == token => {
                self.lengthen_to_lease();
                if refused_before {
                    self.remove_place(token);
                }
                Answered::Granted
            }
            Value::Held(hold) => {
                self.take_place_by_end(token);
                self.mark();
                Answered::Refused { ttl: hold.ttl }
            }
            Value::Absent | Value::Released => {
                if refused_before {
                    self.remove_place(token);
                }
                self.grant(token, refused_before);
                Answered::Granted
            }
        }
    }

    /// `kinds/mutex/release.lua`.
    fn mutex_release(&mut self, token: Token) -> Answered {
        let line = Line::Places { except: token };
        match self.state.server.value {
            Value::Held(hold) if hold.holder != token => {
                self.remove_place(token);
                Answered::Code(-1)
            }
            Value::Held(hold) => {
                if !hold.marked {
                    self.state.server.value = Value::Released;
                    return Answered::Code(1);
                }
                if !self.hand_over(line).offered {
                    self.state.server.value = Value::Released;
                    self.publish(
                        Channel::Name,
                        Note {
                            message: Message::Freed,
                            token,
                        },
                    );
                }
                Answered::Code(1)
            }
            Value::Absent | Value::Released => {
                self.remove_place(token);
                let handed = self.hand_over(line);
                if !handed.offered && handed.written {
                    self.state.server.value = Value::Released;
                }
                Answered::Code(0)
            }
        }
    }

    /// `kinds/fair/acquire.lua`, for a waiter.
    fn fair_acquire(&mut self, token: Token) -> Answered {
        match self.state.server.value {
            Value::Held(hold) if hold.holder == token => {
                if hold.offered {
                    self.claim();
                } else {
                    self.lengthen_to_lease();
                }
                Answered::Granted
            }
            Value::Held(hold) => {
                self.mark();
                self.join_line(token);
                Answered::Refused { ttl: hold.ttl }
            }
            Value::Absent | Value::Released => {
                let handed = self.hand_over(Line::Fair { stop: Some(token) });
                if handed.offered {
                    self.join_line(token);
                    return Answered::Refused {
                        ttl: self.config.handed_ttl(),
                    };
                }
                let waited = self.state.server.places.position(|p| p.token == token);
                if let Some(at) = waited {
                    self.leave_line(at);
                }
                self.grant(token, waited.is_some());
                Answered::Granted
            }
        }
    }

    /// `kinds/fair/release.lua`.
    fn fair_release(&mut self, token: Token) -> Answered {
        let line = Line::Fair { stop: None };
        match self.state.server.value {
            Value::Held(hold) if hold.holder != token => {
                self.leave_line_of(token);
                Answered::Code(-1)
            }
            Value::Held(hold) => {
                if !hold.marked || !self.hand_over(line).offered {
                    self.state.server.value = Value::Released;
                }
                Answered::Code(1)
            }
            Value::Absent | Value::Released => {
                self.leave_line_of(token);
                self.hand_over(line);
                Answered::Code(0)
            }
        }
    }

    /// `kinds/value/extend.lua`, to the lease (and `core/renew_batch.lua`'s kind `v`, which
    /// renews the same values).
    fn extend(&mut self, token: Token) -> Answered {
        let lease = self.config.times.lease;
        let renews_offers = self.config.renews_offers();
        match &mut self.state.server.value {
            Value::Held(hold) if hold.holder == token && hold.offered && !renews_offers => {
                Answered::Code(0)
            }
            Value::Held(hold) if hold.holder == token => {
                hold.ttl = hold.ttl.max(lease);
                Answered::Code(1)
            }
            Value::Held(_) => Answered::Code(-1),
            Value::Absent | Value::Released => Answered::Code(0),
        }
    }

    /// The claim of an offer by its waiter's own acquire: `SET key claimed(value) PX lease`,
    /// a plain hold from now on.
    fn claim(&mut self) {
        let lease = self.config.times.lease;
        if let Value::Held(hold) = &mut self.state.server.value {
            hold.ttl = lease;
            hold.offered = false;
            hold.unclaimed_for = 0;
        }
        self.state.ghost.standby = None;
    }

    /// A grant asked for again (its reply lost): `PEXPIRE key lease` when it has less left.
    fn lengthen_to_lease(&mut self) {
        let lease = self.config.times.lease;
        if let Value::Held(hold) = &mut self.state.server.value {
            hold.ttl = hold.ttl.max(lease);
        }
        self.state.ghost.standby = None;
    }

    /// A free lock granted to its caller for the lease.
    fn grant(&mut self, token: Token, marked: bool) {
        self.state.server.value = Value::Held(Hold {
            holder: token,
            marked,
            offered: false,
            ttl: self.config.times.lease,
            unclaimed_for: 0,
        });
        self.state.ghost.standby = None;
        self.served = Some(token);
    }

    /// `SET key marked(value) KEEPTTL`.
    fn mark(&mut self) {
        if let Value::Held(hold) = &mut self.state.server.value {
            hold.marked = true;
        }
    }

    /// `hand_over` (`value.lua`): the lock offered to the first candidate of `line` whose
    /// client listens (or to the first, for a line that skips nobody), announced after it is
    /// written; the candidate behind it told to retry once the offer has had its time.
    fn hand_over(&mut self, line: Line) -> Handed {
        let mut written = false;
        for _ in 0..CANDIDATES {
            let Some(waiter) = self.take(line) else {
                break;
            };
            written = true;
            self.state.server.value = Value::Held(Hold {
                holder: waiter,
                marked: true,
                offered: self.config.hands_over_offers(),
                ttl: self.config.handed_ttl(),
                unclaimed_for: 0,
            });
            let message = if self.config.variant == Variant::TrustAnnouncedGrant {
                Message::Grant
            } else {
                Message::Offer
            };
            let heard = self.publish(
                Channel::Client(waiter.client),
                Note {
                    message,
                    token: waiter,
                },
            );
            if heard > 0 || !self.config.skips_unheard() {
                let behind = self.peek(line);
                if let Some(behind) = behind {
                    self.publish(
                        Channel::Client(behind.client),
                        Note {
                            message: Message::Standby,
                            token: behind,
                        },
                    );
                }
                self.state.ghost.standby = behind
                    .filter(|b| self.can_act_on_standby(*b))
                    .map(|b| (b, 0));
                self.served = Some(waiter);
                return Handed {
                    offered: true,
                    written,
                };
            }
        }
        Handed {
            offered: false,
            written,
        }
    }

    /// `line.take()`: the next candidate, taken out of the line, or `None`. A fair line stops
    /// at its caller's own entry while that place lasts; an ended one is dropped like any
    /// other.
    fn take(&mut self, line: Line) -> Option<Token> {
        let keeps_ended_turn = self.config.keeps_ended_turn();
        let places = &mut self.state.server.places;
        for _ in 0..CANDIDATES {
            let first = places.first()?;
            if let Line::Fair { stop: Some(stop) } = line
                && first.token == stop
                && (first.is_live() || keeps_ended_turn)
            {
                return None;
            }
            places.remove(0);
            let excepted = matches!(line, Line::Places { except } if except == first.token);
            if first.is_live() && !excepted {
                return Some(first.token);
            }
        }
        None
    }

    /// `line.peek()`: the candidate after the one taken, left in the line.
    fn peek(&self, line: Line) -> Option<Token> {
        let places = self.state.server.places.as_slice();
        match line {
            Line::Places { except } => places
                .iter()
                .take(PEEKED)
                .find(|p| p.is_live() && p.token != except)
                .map(|p| p.token),
            Line::Fair { stop } => places
                .first()
                .filter(|p| Some(p.token) != stop && p.is_live())
                .map(|p| p.token),
        }
    }

    /// A Mutex's refusal: `ZADD places <now + place> member`, ordered by end, then member.
    fn take_place_by_end(&mut self, token: Token) {
        self.remove_place(token);
        let place = Place {
            token,
            ends: self.config.times.place,
        };
        let places = &mut self.state.server.places;
        let at = places
            .position(|p| (p.ends, p.token) > (place.ends, place.token))
            .unwrap_or(places.len());
        places.insert(at, place);
    }

    /// A FairMutex's refusal (`refuse()`): a member whose place lasts keeps its turn; a new
    /// one, or one whose place ended (`ZSCORE` at most now: taken out of the line), joins the
    /// back of the line.
    fn join_line(&mut self, token: Token) {
        let ends = self.config.times.place;
        let keeps_ended_turn = self.config.keeps_ended_turn();
        let places = &mut self.state.server.places;
        match places.position(|p| p.token == token) {
            Some(at) if places.as_slice()[at].is_live() || keeps_ended_turn => {
                places.as_mut_slice()[at].ends = ends;
            }
            Some(at) => {
                places.remove(at);
                places.push(Place { token, ends });
            }
            None => places.push(Place { token, ends }),
        }
        let arrivals = &mut self.state.ghost.arrivals;
        match arrivals.position(|p| p.token == token) {
            Some(at) => arrivals.as_mut_slice()[at].ends = ends,
            None => arrivals.push(Place { token, ends }),
        }
    }

    /// `ZREM places member`.
    fn remove_place(&mut self, token: Token) {
        self.state.server.places.retain(|p| p.token != token);
    }

    /// `leave_line()` for `token`: out of the line and the places, real and ghost.
    fn leave_line_of(&mut self, token: Token) {
        if let Some(at) = self.state.server.places.position(|p| p.token == token) {
            self.leave_line(at);
        }
        self.state.ghost.arrivals.retain(|p| p.token != token);
    }

    fn leave_line(&mut self, at: usize) {
        self.state.server.places.remove(at);
    }

    /// `PUBLISH`: delivered to every client listening on `channel`, on either node (a replica
    /// relays what its master publishes); answered with the receivers the master counts.
    fn publish(&mut self, channel: Channel, note: Note) -> u8 {
        self.effects.published.push(Published { channel, note });
        let master = self.state.server.master;
        let mut count = u8::from(self.config.tap);
        let clients = usize::from(self.config.clients);
        for (at, client) in self.state.clients.iter_mut().enumerate().take(clients) {
            if matches!(channel, Channel::Client(c) if usize::from(c) != at) {
                continue;
            }
            match client.sub {
                Sub::On(node) => {
                    count += u8::from(node == master);
                    if may_heed(client, note, self.config) {
                        client.inbox.push(note);
                    }
                }
                Sub::HalfOpen(node) => count += u8::from(node == master),
                Sub::Off => {}
            }
        }
        count
    }

    /// Whether the client told `<token>?<ms>` will act on it in time: the run is timely, and
    /// the client runs, waits with that token as its registration's target, and its
    /// connection hears it.
    fn can_act_on_standby(&self, token: Token) -> bool {
        if !self.config.timely {
            return false;
        }
        let client = self.state.client(token.client);
        let targets = matches!(client.phase, Phase::Waiting(w) if w.target == token.generation);
        client.runs() && targets && matches!(client.sub, Sub::On(_))
    }

    /// A FairMutex must not serve anyone while a live waiter that arrived before it still has
    /// its turn. A waiter whose offer ended unclaimed lost its turn when it was served; one
    /// whose place ended lost it then; one that gave up is no live waiter.
    fn check_fair_order(&mut self) {
        if self.config.lock != Lock::Fair {
            return;
        }
        let Some(served) = self.served else {
            return;
        };
        if !matches!(self.state.server.value, Value::Held(h) if h.holder == served) {
            return;
        }
        let arrivals = self.state.ghost.arrivals;
        let ahead = match arrivals.position(|p| p.token == served) {
            Some(at) => &arrivals.as_slice()[..at],
            None => arrivals.as_slice(),
        };
        let passed = ahead
            .iter()
            .find(|p| self.state.client(p.token.client).waits_as(p.token));
        if let Some(passed) = passed {
            self.state.ghost.passed = Some((passed.token, served));
        }
        self.state.ghost.arrivals.retain(|p| p.token != served);
    }
}

/// Whether a message can still matter to `client` once read: a message names a token, and
/// only the waiter whose registration targets that token acts on it; `~` wakes any waiter.
/// Outside a timely run a waiter may retry at any time anyway, so a wake changes nothing: only
/// the announced grant that the broken variant trusts is kept.
fn may_heed(client: &Client, note: Note, config: &Config) -> bool {
    if note.message != Message::Grant && !config.timely {
        return false;
    }
    if note.message == Message::Freed {
        // Read by no waiter, it would only cost a waiter that starts later one retry.
        return config.lock == Lock::Mutex && matches!(client.phase, Phase::Waiting(_));
    }
    let target = match client.phase {
        Phase::Waiting(w) => w.target,
        _ => client.generation,
    };
    note.token.generation == client.generation || note.token.generation == target
}
