//! The model's traces replayed on the real scripts, on a real Redis: each script a trace runs,
//! the library's own `Lua` runs on a master with a replica, and after every step that touches
//! the server, the server is held against the model's state.
//!
//! # Traces
//!
//! Seeded random walks of the fixed protocol, for each kind under several sets of faults, and
//! the shortest traces to the steps worth seeing on a server ([`traces`]): an offer claimed, a
//! renewal of an own offer refused, a stale place offered the lock, a standby told, an unheard
//! waiter skipped, an offer counted only by a half-open connection or a pattern, a fair waiter
//! whose place ended sent to the back, and so on. The faults that matter to the scripts are
//! replayed: expiries of values and places, the replica relaying what the master publishes,
//! listeners dropped, half-open or counted by pattern, a failover; those of the clients alone
//! (pauses, lost replies, late replies) only shape which scripts run when.
//!
//! # Time
//!
//! A tick is [`TICK_MS`] on the server, far longer than a trace takes to replay, so that
//! nothing ends by the wall clock: the lease, the window and a place are the model's ticks
//! times that. Time passes only when the model's does ([`real::PASS_TIME`]): the lock's
//! expiry and every place's end move one tick earlier; a value with no tick left is deleted at
//! once (as an expiry, to every script), and a place with none ends at the server's present
//! time, so that every later script finds it ended. After every script the ends are rounded
//! to whole ticks, so that places ending in the same tick tie and sort by member, as the model
//! orders them. No verdict depends on how long a step takes, as long as it takes less than a
//! tick.
//!
//! # What is compared
//!
//! After each script: its reply (granted with the fence the value holds, refused with the
//! ticks left, the release's and the extension's code; an extension is run as the keeper's
//! `core/renew_batch.lua` and as `extend.lua`), and every payload it published, on which
//! channel, in order, as a listener on the replica hears them and as each client's listener
//! does. After each step that touches the server or a listener: the lock's value (absent;
//! released, with the last fence drawn; or held: token, fence, `+`, `?`, label and ticks
//! left, a new holder's fence above every fence before, the same holder's unchanged), the
//! places and a FairMutex's line (members, order, ticks until each ends), and the listeners
//! the master counts on each channel and by pattern (`PUBSUB NUMSUB`, `NUMPAT`).
//!
//! # Listeners
//!
//! A client's pub/sub connection is one real subscriber to its own channel and the name's. It
//! sits on the master when the model's connection is on the node that is master, and on the
//! replica otherwise: a failover moves the listeners rather than the data, which the model
//! keeps as one copy, so that the master counts exactly the listeners the model's master
//! does, and the others hear what it publishes relayed. A half-open connection stays
//! subscribed and is no longer read; a pattern subscription on the master stands for the tap.

mod compare;
mod names;
mod real;
mod traces;

use std::time::Instant;

use super::check::show;
use super::scripts::{Answered, Script};
use super::state::{Message, State, Value};
use real::Deployment;
use traces::Trace;

/// A tick of the model, in ms of the server's clock.
const TICK_MS: u64 = 60_000;

#[tokio::test]
async fn the_scripts_on_a_real_server_do_what_the_model_does() {
    let started = Instant::now();
    let traces = traces::all();
    let drawn = started.elapsed();
    let mut deployment = Deployment::start().await;
    let mut seen = Seen::default();
    for trace in &traces {
        replay(&mut deployment, trace).await;
        seen.count(trace);
    }
    println!(
        "replayed {} traces in {:.1?} (drawn in {drawn:.1?}): {seen}",
        traces.len(),
        started.elapsed()
    );
}

/// Replays `trace` step by step, and panics with the trace up to the first step whose outcome
/// on the server differs from the model's.
async fn replay(deployment: &mut Deployment, trace: &Trace) {
    let mut before = State::initial(&trace.config);
    deployment.reset(&trace.config, &before).await;
    for (at, step) in trace.steps.iter().enumerate() {
        if let Err(why) = deployment.replay(&trace.config, &before, step).await {
            panic!(
                "{}: step {} ({:?}) differs on the server: {why}\n{}",
                trace.name,
                at + 1,
                step.action,
                show(&trace.steps[..=at], &trace.config)
            );
        }
        before = step.after;
    }
}

/// What the replayed traces ran, so that a run shows what it covered.
#[derive(Default)]
struct Seen {
    steps: usize,
    acquires: usize,
    claims: usize,
    refusals: usize,
    releases: usize,
    extensions: usize,
    extensions_refused: usize,
    offers: usize,
    standbys: usize,
    freed: usize,
}

impl Seen {
    fn count(&mut self, trace: &Trace) {
        self.steps += trace.steps.len();
        let mut before = State::initial(&trace.config);
        for step in &trace.steps {
            if let Some(run) = step.effects.run {
                let offered = matches!(before.server.value,
                    Value::Held(h) if h.offered && h.holder == run.token);
                let (script, answered) = (run.script, run.answered);
                self.acquires += usize::from(script == Script::Acquire);
                self.claims += usize::from(script == Script::Acquire && offered);
                self.refusals += usize::from(matches!(answered, Answered::Refused { .. }));
                self.releases += usize::from(script == Script::Release);
                self.extensions += usize::from(script == Script::Extend);
                self.extensions_refused +=
                    usize::from(script == Script::Extend && answered != Answered::Code(1));
            }
            for published in step.effects.published.as_slice() {
                match published.note.message {
                    Message::Offer => self.offers += 1,
                    Message::Standby => self.standbys += 1,
                    Message::Freed => self.freed += 1,
                    Message::Grant => {}
                }
            }
            before = step.after;
        }
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} steps; {} acquires ({} claims of an offer, {} refused), {} releases, {} \
             extensions ({} refused); payloads: {} offers, {} standbys, {} releases to nobody",
            self.steps,
            self.acquires,
            self.claims,
            self.refusals,
            self.releases,
            self.extensions,
            self.extensions_refused,
            self.offers,
            self.standbys,
            self.freed
        )
    }
}
