//! What must hold in every reachable state.

use super::config::{Config, Lock};
use super::state::{Phase, State, Token, Value};

/// An invariant the checker holds every state to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Invariant {
    /// (a) No two clients believe they hold with validity left, and one that believes it
    /// does is backed by the master's value: its token, an expiry no earlier than its
    /// validity.
    BackedHolder,
    /// (b) A release's offer nobody claims holds the lock for less than the window.
    OfferWithinWindow,
    /// (b) The waiter a handoff told `<token>?<ms>` (the first in line behind the one
    /// offered), if it can act, sees the lock taken within the window: it, or someone, holds
    /// it before more than `window` ticks passed since the handoff.
    StandbyServed,
    /// (c) A FairMutex never serves a waiter while a live one that arrived earlier keeps its
    /// turn.
    FairOrder,
}

impl Invariant {
    pub(crate) const ALL: [Invariant; 4] = [
        Invariant::BackedHolder,
        Invariant::OfferWithinWindow,
        Invariant::StandbyServed,
        Invariant::FairOrder,
    ];

    /// Why `state` breaks this invariant, if it does.
    pub(crate) fn broken(self, state: &State, config: &Config) -> Option<String> {
        match self {
            Invariant::BackedHolder => unbacked_holder(state, config),
            Invariant::OfferWithinWindow => match state.server.value {
                Value::Held(hold) if hold.offered && hold.unclaimed_for >= config.times.window => {
                    Some(format!(
                        "an offer to {} stayed unclaimed for {} ticks, the window is {}",
                        hold.holder, hold.unclaimed_for, config.times.window
                    ))
                }
                _ => None,
            },
            Invariant::StandbyServed => match state.ghost.standby {
                Some((token, age)) if age > config.times.window => Some(format!(
                    "{token}, first in line behind an offer, still waits {age} ticks after the \
                     handoff, the window is {}",
                    config.times.window
                )),
                _ => None,
            },
            Invariant::FairOrder => match state.ghost.passed {
                Some((waiting, served)) if config.lock == Lock::Fair => Some(format!(
                    "{served} was served while {waiting}, a live waiter ahead of it, kept its turn"
                )),
                _ => None,
            },
        }
    }
}

fn unbacked_holder(state: &State, config: &Config) -> Option<String> {
    let believers: Vec<(Token, u8)> = state
        .clients
        .iter()
        .enumerate()
        .take(usize::from(config.clients))
        .filter_map(|(at, client)| match client.phase {
            Phase::Holding { valid, .. } if valid > 0 => {
                let client_id = u8::try_from(at).expect("a few clients");
                Some((client.token(client_id), valid))
            }
            _ => None,
        })
        .collect();
    if let [first, second, ..] = believers.as_slice() {
        return Some(format!(
            "{} and {} both believe they hold the lock",
            first.0, second.0
        ));
    }
    let (token, valid) = *believers.first()?;
    match state.server.value {
        Value::Held(hold) if hold.holder == token && hold.ttl >= valid => None,
        value => Some(format!(
            "{token} believes it holds for {valid} more ticks, Redis holds {value:?}"
        )),
    }
}
