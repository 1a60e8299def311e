//! The model's actions: what a client does (`core/acquire.rs`'s waiting loop, `core/notify.rs`'s
//! reading of messages, a guard's unlock, the keeper's renewal), what Redis runs (one script,
//! atomically: `scripts.rs`), and what the environment does (time passing, faults).

use super::config::{Config, Lock, Variant};
use super::scripts::{Answered, Effects, Redis, Script};
use super::state::{
    Answer, Client, Message, Phase, Reply, Request, Sent, State, Sub, Value, Wait, Wake,
};

/// Which of a client's request queues: its waiting or holding task's, or its background
/// tasks' (the keeper's renewals and give-backs), which Redis may run in either order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    Task,
    Background,
}

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// The client calls `lock()`: a new token, and an acquire sent.
    Start(u8),
    /// A sleeping waiter tries again (its timer, or a wake): an acquire sent.
    Retry(u8),
    /// The client reads the reply at the head of its connection.
    Read(u8),
    /// The client's notifier reads the message at the head of its pub/sub connection.
    Hear(u8),
    /// The holder's guard releases.
    Unlock(u8),
    /// The holder's keeper renews its lease.
    Renew(u8),
    /// A waiter gives up: its attempt's drop releases its token in the background.
    Cancel(u8),
    /// Redis runs the script at the head of one of the client's queues.
    Run(u8, Lane),
    /// One tick passes.
    Tick,
    /// The places (and line) expire, every place in them having ended.
    ExpirePlaces,
    /// The client's pub/sub connection drops, with what it had not delivered.
    DropConnection(u8),
    /// The client's pub/sub connection is back (on the node the URL now names), and every
    /// waiter is woken to retry.
    Reconnect(u8),
    /// The message at the head of the client's pub/sub connection comes twice.
    Duplicate(u8),
    /// The client process dies; with `true` its pub/sub connection stays counted (half-open).
    Crash(u8, bool),
    /// The client process pauses.
    Freeze(u8),
    Resume(u8),
    /// The replica takes over as master.
    Failover,
    /// The reply at the head of the client's connection is lost: it sends the request again.
    LoseReply(u8),
    /// The client's acquire on its way is held back: its reply may come past its validity.
    HoldBack(u8),
    /// A request a crashed client sent never reaches Redis.
    LoseRequest(u8, Lane),
}

/// Every action enabled in `state`.
pub(crate) fn enabled(state: &State, config: &Config, actions: &mut Vec<Action>) {
    actions.clear();
    for c in 0..config.clients {
        client_actions(state, c, actions);
        fault_actions(state, config, c, actions);
    }
    if may_tick(state, config) {
        actions.push(Action::Tick);
    }
    let places = &state.server.places;
    if !places.is_empty() && places.as_slice().iter().all(|p| !p.is_live()) {
        actions.push(Action::ExpirePlaces);
    }
    if state.budget.failover > 0 {
        actions.push(Action::Failover);
    }
}

fn client_actions(state: &State, c: u8, actions: &mut Vec<Action>) {
    let client = state.client(c);
    for (lane, queue) in [
        (Lane::Task, &client.requests),
        (Lane::Background, &client.background),
    ] {
        if !queue.is_empty() {
            actions.push(Action::Run(c, lane));
        }
    }
    if !client.runs() {
        return;
    }
    if !client.replies.is_empty() {
        actions.push(Action::Read(c));
    }
    if !client.inbox.is_empty() {
        actions.push(Action::Hear(c));
    }
    if client.sub == Sub::Off {
        actions.push(Action::Reconnect(c));
    }
    match client.phase {
        Phase::Idle if client.rounds > 0 => actions.push(Action::Start(c)),
        Phase::Waiting(wait) => {
            if !wait.sending {
                actions.push(Action::Retry(c));
            }
            if state.budget.cancel > 0 {
                actions.push(Action::Cancel(c));
            }
        }
        Phase::Holding { valid, renewing } => {
            actions.push(Action::Unlock(c));
            if valid > 0 && !renewing && state.budget.renew > 0 {
                actions.push(Action::Renew(c));
            }
        }
        Phase::Idle | Phase::Crashed => {}
    }
}

fn fault_actions(state: &State, config: &Config, c: u8, actions: &mut Vec<Action>) {
    let client = state.client(c);
    let budget = &state.budget;
    if client.phase == Phase::Crashed {
        for (lane, queue) in [
            (Lane::Task, &client.requests),
            (Lane::Background, &client.background),
        ] {
            if !queue.is_empty() {
                actions.push(Action::LoseRequest(c, lane));
            }
        }
        return;
    }
    if budget.crash > 0 {
        actions.push(Action::Crash(c, false));
        if matches!(client.sub, Sub::On(_)) {
            actions.push(Action::Crash(c, true));
        }
    }
    // Outside a timely run any client may stay idle for any time: a pause adds nothing.
    if config.timely && budget.freeze > 0 && !client.frozen {
        actions.push(Action::Freeze(c));
    }
    if client.frozen {
        actions.push(Action::Resume(c));
    }
    if budget.drop > 0 && matches!(client.sub, Sub::On(_)) {
        actions.push(Action::DropConnection(c));
    }
    if budget.duplicate > 0 && !client.inbox.is_empty() {
        actions.push(Action::Duplicate(c));
    }
    if let Some(head) = client.replies.first()
        && budget.resend > 0
        && matches!(head.reply, Reply::Granted | Reply::Refused { .. })
    {
        actions.push(Action::LoseReply(c));
    }
    let sending = matches!(client.phase, Phase::Waiting(w) if w.sending);
    if budget.late > 0 && !client.late && sending {
        actions.push(Action::HoldBack(c));
    }
}

/// Whether time may pass: not while an acquire's reply would come too late without a fault
/// holding it back, and in a timely run not while a running client has something due.
fn may_tick(state: &State, config: &Config) -> bool {
    state
        .clients
        .iter()
        .take(usize::from(config.clients))
        .all(|client| !((config.timely && has_due(client)) || turns_late(client, config)))
}

/// Whether one more tick would make the client's acquire on its way too late to trust, when
/// no fault holds it back.
fn turns_late(client: &Client, config: &Config) -> bool {
    if client.late || client.phase == Phase::Crashed {
        return false;
    }
    let due = config.times.lease - 1;
    let sent = client
        .requests
        .as_slice()
        .iter()
        .any(|s| matches!(s.request, Request::Acquire { age, .. } if age >= due));
    let answered = client
        .replies
        .as_slice()
        .iter()
        .any(|a| matches!(a.reply, Reply::Granted | Reply::Refused { .. }) && a.age >= due);
    sent || answered
}

/// Whether a client has something to do before time passes: Redis runs what it sent, and a
/// running client reads its replies and messages, reconnects while it waits, and fires its
/// due timer.
fn has_due(client: &Client) -> bool {
    if client.phase == Phase::Crashed {
        return false;
    }
    if !client.requests.is_empty() || !client.background.is_empty() {
        return true;
    }
    if client.frozen {
        return false;
    }
    let waiting = matches!(client.phase, Phase::Waiting(_));
    !client.inbox.is_empty()
        || (!client.replies.is_empty() && !client.late)
        || (waiting && client.sub == Sub::Off)
        || matches!(client.phase, Phase::Waiting(w) if !w.sending && w.timer == 0)
}

/// The state after `action`, and what it did on Redis.
pub(crate) fn apply(state: &State, config: &Config, action: Action) -> (State, Effects) {
    let mut next = *state;
    let mut effects = Effects::default();
    match action {
        Action::Start(c) => start(&mut next, c),
        Action::Retry(c) => retry(next.client_mut(c)),
        Action::Read(c) => read(&mut next, config, c),
        Action::Hear(c) => hear(&mut next, config, c),
        Action::Unlock(c) => {
            let client = next.client_mut(c);
            client.requests.push(Sent {
                request: Request::Release,
                generation: client.generation,
            });
            client.phase = Phase::Idle;
        }
        Action::Renew(c) => {
            next.budget.renew -= 1;
            let client = next.client_mut(c);
            client.background.push(Sent {
                request: Request::Extend { age: 0 },
                generation: client.generation,
            });
            if let Phase::Holding { renewing, .. } = &mut client.phase {
                *renewing = true;
            }
        }
        Action::Cancel(c) => {
            next.budget.cancel -= 1;
            let client = next.client_mut(c);
            client.requests.push(Sent {
                request: Request::Release,
                generation: client.generation,
            });
            client.phase = Phase::Idle;
            stop_standby(&mut next, c);
        }
        Action::Run(c, lane) => run(&mut next, config, c, lane, &mut effects),
        Action::Tick => tick(&mut next, config),
        Action::ExpirePlaces => next.server.places.clear(),
        Action::DropConnection(c) => {
            next.budget.drop -= 1;
            let client = next.client_mut(c);
            client.sub = Sub::Off;
            client.inbox.clear();
            stop_standby(&mut next, c);
        }
        Action::Reconnect(c) => {
            let master = next.server.master;
            let client = next.client_mut(c);
            client.sub = Sub::On(master);
            if let Phase::Waiting(wait) = &mut client.phase {
                rouse(wait, Wake::Now, config);
            }
        }
        Action::Duplicate(c) => {
            next.budget.duplicate -= 1;
            let inbox = &mut next.client_mut(c).inbox;
            if let Some(head) = inbox.first() {
                inbox.insert(0, head);
            }
        }
        Action::Crash(c, half_open) => {
            next.budget.crash -= 1;
            let client = next.client_mut(c);
            client.sub = match client.sub {
                Sub::On(node) if half_open => Sub::HalfOpen(node),
                _ => Sub::Off,
            };
            client.phase = Phase::Crashed;
            client.frozen = false;
            client.inbox.clear();
            client.replies.clear();
            stop_standby(&mut next, c);
        }
        Action::Freeze(c) => {
            next.budget.freeze -= 1;
            next.client_mut(c).frozen = true;
            stop_standby(&mut next, c);
        }
        Action::Resume(c) => next.client_mut(c).frozen = false,
        Action::Failover => {
            next.budget.failover -= 1;
            next.server.master = 1 - next.server.master;
        }
        Action::LoseReply(c) => {
            next.budget.resend -= 1;
            let client = next.client_mut(c);
            let lost = client.replies.remove(0);
            client.requests.push(Sent {
                request: Request::Acquire {
                    refused_before: lost.refused_before,
                    age: 0,
                },
                generation: lost.generation,
            });
        }
        Action::HoldBack(c) => {
            next.budget.late -= 1;
            next.client_mut(c).late = true;
        }
        Action::LoseRequest(c, lane) => {
            let client = next.client_mut(c);
            match lane {
                Lane::Task => client.requests.remove(0),
                Lane::Background => client.background.remove(0),
            };
        }
    }
    (next, effects)
}

/// `lock()`: a new token, tried at once.
fn start(state: &mut State, c: u8) {
    let client = state.client_mut(c);
    client.rounds -= 1;
    client.generation += 1;
    client.phase = Phase::Waiting(Wait {
        target: client.generation,
        ..Wait::default()
    });
    retry(client);
}

/// An acquire sent by the waiter (`Attempt::send`).
fn retry(client: &mut Client) {
    let generation = client.generation;
    if let Phase::Waiting(wait) = &mut client.phase {
        client.requests.push(Sent {
            request: Request::Acquire {
                refused_before: wait.refused,
                age: 0,
            },
            generation,
        });
        wait.sending = true;
        wait.timer = 0;
        wait.wake = None;
    }
}

/// Redis runs the script at the head of a queue; the answer goes back to a client that is
/// still there to read it.
fn run(state: &mut State, config: &Config, c: u8, lane: Lane, effects: &mut Effects) {
    let client = state.client_mut(c);
    let sent = match lane {
        Lane::Task => client.requests.remove(0),
        Lane::Background => client.background.remove(0),
    };
    let token = super::state::Token {
        client: c,
        generation: sent.generation,
    };
    let (script, refused_before, age) = match sent.request {
        Request::Acquire {
            refused_before,
            age,
        } => (Script::Acquire, refused_before, age),
        Request::Release => (Script::Release, false, 0),
        Request::Extend { age } => (Script::Extend, false, age),
    };
    let answered = Redis::new(state, config, effects).run(script, token, refused_before);
    let reply = match answered {
        _ if script == Script::Release => return,
        Answered::Granted => Reply::Granted,
        Answered::Refused { ttl } => Reply::Refused { ttl },
        Answered::Code(code) => Reply::Extended { ok: code == 1 },
    };
    let client = state.client_mut(c);
    if client.phase != Phase::Crashed {
        client.replies.push(Answer {
            generation: sent.generation,
            reply,
            refused_before,
            age,
        });
    }
}

/// The client reads a reply: an acquire's decides its wait (`wait_for_grant`, and
/// `Nodes::acquire`'s late grant), an extension's its lease (`LeaseState::renewed`).
fn read(state: &mut State, config: &Config, c: u8) {
    let lease = config.times.lease;
    let client = state.client_mut(c);
    let answer = client.replies.remove(0);
    if matches!(answer.reply, Reply::Granted | Reply::Refused { .. }) {
        client.late = false;
    }
    if answer.generation != client.generation {
        return;
    }
    match (&mut client.phase, answer.reply) {
        (Phase::Waiting(wait), Reply::Granted) if wait.sending => {
            if answer.age < lease {
                client.phase = Phase::Holding {
                    valid: lease - answer.age,
                    renewing: false,
                };
                return;
            }
            // Too late to trust: given back in the background, and the attempt goes on with
            // a new token; the registration keeps the old one until the next refusal.
            client.background.push(Sent {
                request: Request::Release,
                generation: client.generation,
            });
            client.generation += 1;
            wait.refused = false;
            wait.sending = false;
            wait.timer = 0;
        }
        (Phase::Waiting(wait), Reply::Refused { ttl }) if wait.sending => {
            wait.refused = true;
            wait.target = answer.generation;
            wait.sending = false;
            if config.variant == Variant::TrustAnnouncedGrant {
                wait.since_refusal = answer.age;
            }
            wait.timer = if config.timely {
                ttl.min(config.times.fallback).max(1)
            } else {
                0
            };
            if let Some(wake) = wait.wake.take() {
                rouse(wait, wake, config);
            }
        }
        (Phase::Holding { valid, renewing }, Reply::Extended { ok }) => {
            *renewing = false;
            if !ok {
                *valid = 0;
            } else if *valid > 0 {
                *valid = (*valid).max(lease.saturating_sub(answer.age));
            }
        }
        _ => {}
    }
}

/// The notifier reads a message (`dispatch`, `Target::addressed_by`).
fn hear(state: &mut State, config: &Config, c: u8) {
    let lease = config.times.lease;
    let client = state.client_mut(c);
    let note = client.inbox.remove(0);
    let Phase::Waiting(wait) = &mut client.phase else {
        return;
    };
    let addressed = match note.message {
        Message::Freed => config.lock == Lock::Mutex,
        _ => note.token.generation == wait.target,
    };
    if !addressed {
        return;
    }
    if note.message == Message::Grant {
        let valid = lease.saturating_sub(wait.since_refusal);
        if wait.refused && valid > 0 {
            client.phase = Phase::Holding {
                valid,
                renewing: false,
            };
            return;
        }
    }
    let wake = if note.message == Message::Standby {
        Wake::AfterOffer
    } else {
        Wake::Now
    };
    rouse(wait, wake, config);
}

/// A wake for the waiter: taken now if it sleeps, kept for its next sleep if it is sending.
/// Only a timely run keeps timers.
fn rouse(wait: &mut Wait, wake: Wake, config: &Config) {
    if !config.timely {
        return;
    }
    if wait.sending {
        wait.wake = Some(match (wait.wake, wake) {
            (Some(Wake::AfterOffer), Wake::AfterOffer) => Wake::AfterOffer,
            (None, wake) => wake,
            _ => Wake::Now,
        });
        return;
    }
    wait.timer = match wake {
        Wake::Now => 0,
        Wake::AfterOffer => wait.timer.min(config.handed_ttl()),
    };
}

/// The standby told by the last handoff can no longer act on it.
fn stop_standby(state: &mut State, c: u8) {
    if matches!(state.ghost.standby, Some((token, _)) if token.client == c) {
        state.ghost.standby = None;
    }
}

/// One tick: every expiry and timer counts down, every age up.
fn tick(state: &mut State, config: &Config) {
    let times = config.times;
    if let Value::Held(hold) = &mut state.server.value {
        hold.ttl -= 1;
        if hold.offered {
            hold.unclaimed_for = (hold.unclaimed_for + 1).min(times.window + 1);
        }
        if hold.ttl == 0 {
            state.server.value = Value::Absent;
        }
    }
    for place in state.server.places.as_mut_slice() {
        place.ends = place.ends.saturating_sub(1);
    }
    if config.lock == Lock::Mutex {
        state
            .server
            .places
            .as_mut_slice()
            .sort_by_key(|p| (p.ends, p.token));
    }
    for place in state.ghost.arrivals.as_mut_slice() {
        place.ends -= 1;
    }
    state.ghost.arrivals.retain(|p| p.is_live());
    if let Some((_, age)) = &mut state.ghost.standby {
        *age = (*age + 1).min(times.window + 2);
    }
    for client in state.clients.iter_mut().take(usize::from(config.clients)) {
        age_client(client, config);
    }
}

fn age_client(client: &mut Client, config: &Config) {
    let lease = config.times.lease;
    let older = |age: &mut u8| *age = (*age + 1).min(lease);
    for sent in client
        .requests
        .as_mut_slice()
        .iter_mut()
        .chain(client.background.as_mut_slice())
    {
        if let Request::Acquire { age, .. } | Request::Extend { age } = &mut sent.request {
            older(age);
        }
    }
    for answer in client.replies.as_mut_slice() {
        older(&mut answer.age);
    }
    match &mut client.phase {
        Phase::Holding { valid, .. } => *valid = valid.saturating_sub(1),
        Phase::Waiting(wait) => {
            wait.timer = wait.timer.saturating_sub(1);
            if config.variant == Variant::TrustAnnouncedGrant {
                older(&mut wait.since_refusal);
            }
        }
        Phase::Idle | Phase::Crashed => {}
    }
}
