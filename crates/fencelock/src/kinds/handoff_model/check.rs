//! The checker: a breadth-first search over every reachable state, each stored as a 64-bit
//! fingerprint with the fingerprint and action it was first reached by, so that a violation
//! comes with the shortest trace to it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::config::Config;
use super::invariants::Invariant;
use super::scripts::{Answered, Channel, Effects, Script};
use super::state::{Message, Phase, State, Sub, Value};
use super::step::{apply, enabled, Action};

/// A 64-bit hasher that mixes every word it is given (the fingerprint of a state).
#[derive(Default)]
pub(crate) struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A hasher for keys that are fingerprints already.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("only fingerprints are hashed")
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn fingerprint(state: &State) -> u64 {
    let mut hasher = Mix::default();
    state.hash(&mut hasher);
    hasher.finish()
}

/// One step of a trace: the action, what it did on Redis, and the state after it.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) action: Action,
    pub(crate) effects: Effects,
    pub(crate) after: State,
}

/// A broken invariant, and the shortest trace to it.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) invariant: Invariant,
    pub(crate) why: String,
    pub(crate) trace: Vec<Step>,
}

/// What a search explored.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) states: usize,
    /// The longest shortest path: the level of the last state the search reached.
    pub(crate) depth: usize,
    pub(crate) found: Option<Found>,
    /// Whether every reachable state was explored (not cut short by the limit or a finding).
    pub(crate) complete: bool,
}

/// Explores every state reachable under `config` breadth first, checking `invariants` in each;
/// stops at the first state that breaks one, or once more than `limit` states were seen.
pub(crate) fn explore(config: &Config, invariants: &[Invariant], limit: usize) -> Report {
    let search = search(config, limit, |_, step| {
        first_broken(&step.after, config, invariants)
    });
    Report {
        states: search.states,
        depth: search.depth,
        found: search.found.map(|((invariant, why), trace)| Found {
            invariant,
            why,
            trace,
        }),
        complete: search.complete,
    }
}

/// The shortest trace of `config` to a step that `goal` picks (given the state before it), if
/// one is found among at most `limit` states.
pub(crate) fn shortest(
    config: &Config,
    limit: usize,
    goal: impl Fn(&State, &Step) -> bool,
) -> Option<Vec<Step>> {
    search(config, limit, |before, step| {
        goal(before, step).then_some(())
    })
    .found
    .map(|((), trace)| trace)
}

/// What a search explored, and what stopped it with the shortest trace to it.
struct Search<R> {
    states: usize,
    depth: usize,
    found: Option<(R, Vec<Step>)>,
    complete: bool,
}

/// Explores every state reachable under `config` breadth first until `stop` answers for a
/// step (given the state before it), or once more than `limit` states were seen.
fn search<R>(
    config: &Config,
    limit: usize,
    mut stop: impl FnMut(&State, &Step) -> Option<R>,
) -> Search<R> {
    let initial = State::initial(config);
    let mut seen: HashMap<u64, (u64, Option<Action>), BuildHasherDefault<Identity>> =
        HashMap::default();
    seen.insert(fingerprint(&initial), (0, None));
    let mut level = vec![initial];
    let mut depth = 0;
    let mut actions = Vec::new();
    while !level.is_empty() {
        let mut next_level = Vec::new();
        for state in &level {
            let from = fingerprint(state);
            enabled(state, config, &mut actions);
            for &action in &actions {
                let (after, effects) = apply(state, config, action);
                let key = fingerprint(&after);
                if seen.contains_key(&key) {
                    continue;
                }
                seen.insert(key, (from, Some(action)));
                let step = Step {
                    action,
                    effects,
                    after,
                };
                if let Some(found) = stop(state, &step) {
                    return Search {
                        states: seen.len(),
                        depth: depth + 1,
                        found: Some((found, trace_to(key, &seen, config))),
                        complete: false,
                    };
                }
                next_level.push(after);
            }
        }
        if !next_level.is_empty() {
            depth += 1;
        }
        if seen.len() > limit {
            return Search {
                states: seen.len(),
                depth,
                found: None,
                complete: false,
            };
        }
        level = next_level;
    }
    Search {
        states: seen.len(),
        depth,
        found: None,
        complete: true,
    }
}

fn first_broken(
    state: &State,
    config: &Config,
    invariants: &[Invariant],
) -> Option<(Invariant, String)> {
    invariants
        .iter()
        .find_map(|i| i.broken(state, config).map(|why| (*i, why)))
}

/// The actions from the initial state to `last`, followed back, and the states again.
fn trace_to(
    last: u64,
    seen: &HashMap<u64, (u64, Option<Action>), BuildHasherDefault<Identity>>,
    config: &Config,
) -> Vec<Step> {
    let mut actions = Vec::new();
    let mut at = last;
    while let Some(&(from, Some(action))) = seen.get(&at) {
        actions.push(action);
        at = from;
    }
    actions.reverse();
    let mut state = State::initial(config);
    actions
        .into_iter()
        .map(|action| {
            let (after, effects) = apply(&state, config, action);
            state = after;
            Step {
                action,
                effects,
                after,
            }
        })
        .collect()
}

/// A trace, one line per step: the action (a script by its file), what Redis answered and
/// published, and the lock's value, the line and each client after it.
pub(crate) fn show(trace: &[Step], config: &Config) -> String {
    let mut out = String::new();
    for (at, step) in trace.iter().enumerate() {
        let _ = writeln!(out, "{:>3}. {}", at + 1, describe(step, config).trim_end());
        let _ = writeln!(out, "       {}", summary(&step.after, config));
    }
    out
}

fn describe(step: &Step, config: &Config) -> String {
    let mut out = match step.action {
        Action::Run(c, lane) => {
            let run = step.effects.run.expect("a script ran");
            let answer = match run.answered {
                Answered::Granted => "{1, fence}".to_owned(),
                Answered::Refused { ttl } => format!("{{0, {ttl} ticks}}"),
                Answered::Code(code) => code.to_string(),
            };
            let args = if run.script == Script::Acquire && run.refused_before {
                " refused_before"
            } else {
                ""
            };
            format!(
                "Redis runs {} for {}{args} (client {c}, {lane:?}) -> {answer}",
                run.script.path(config.lock),
                run.token
            )
        }
        action => format!("{action:?}"),
    };
    for published in step.effects.published.as_slice() {
        let channel = match published.channel {
            Channel::Client(c) => format!("wake:c{c}"),
            Channel::Name => "wake".to_owned(),
        };
        let token = published.note.token;
        let payload = match published.note.message {
            Message::Offer => format!("{token}"),
            Message::Standby => format!("{token}?<offer ms>"),
            Message::Freed => format!("~{token}"),
            Message::Grant => format!("{token}<fence>"),
        };
        let _ = write!(out, "; PUBLISH {channel} {payload}");
    }
    out
}

fn summary(state: &State, config: &Config) -> String {
    let value = match state.server.value {
        Value::Absent => "absent".to_owned(),
        Value::Released => "~fence".to_owned(),
        Value::Held(h) => format!(
            "{}<fence>{}{} ttl {}",
            h.holder,
            if h.marked { "+" } else { "" },
            if h.offered { "?" } else { "" },
            h.ttl,
        ),
    };
    let places: Vec<String> = state
        .server
        .places
        .as_slice()
        .iter()
        .map(|p| format!("{}@{}", p.token, p.ends))
        .collect();
    let clients: Vec<String> = state
        .clients
        .iter()
        .take(usize::from(config.clients))
        .enumerate()
        .map(|(at, c)| {
            let phase = match c.phase {
                Phase::Idle => "idle".to_owned(),
                Phase::Waiting(w) => format!(
                    "waits{}{}",
                    if w.sending { " sending" } else { "" },
                    if config.timely {
                        format!(" timer {}", w.timer)
                    } else {
                        String::new()
                    }
                ),
                Phase::Holding { valid, .. } => format!("holds valid {valid}"),
                Phase::Crashed => "crashed".to_owned(),
            };
            let sub = match c.sub {
                Sub::Off => " pubsub off".to_owned(),
                Sub::On(node) if node == state.server.master => String::new(),
                Sub::On(_) => " pubsub on replica".to_owned(),
                Sub::HalfOpen(_) => " half-open".to_owned(),
            };
            format!(
                "c{at}.{} {phase}{sub}{}",
                c.generation,
                if c.frozen { " frozen" } else { "" }
            )
        })
        .collect();
    format!(
        "value {value}; places [{}]; {}",
        places.join(" "),
        clients.join(", ")
    )
}
