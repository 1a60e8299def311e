//! The traces the replay runs: seeded random walks of the fixed protocol, and the shortest
//! traces to steps worth seeing on a server.

use super::super::check::{shortest, Step};
use super::super::config::{Config, Faults, Lock};
use super::super::scripts::{Answered, Channel, Run, Script};
use super::super::state::{Hold, Message, Phase, State, Sub, Value};
use super::super::step::{apply, enabled, Action, Lane};

/// One trace of the model, to replay.
pub(super) struct Trace {
    pub(super) name: String,
    pub(super) config: Config,
    pub(super) steps: Vec<Step>,
}

/// Random walks per set of faults and kind.
const WALKS: u64 = 36;

/// The most steps of one walk (most settle sooner: every client done and nothing on its way).
const WALK_STEPS: usize = 60;

/// The most states a search for a goal's shortest trace explores.
const GOAL_STATES: usize = 400_000;

/// Every trace: the goals' shortest traces first, then the walks.
pub(super) fn all() -> Vec<Trace> {
    let mut traces = goal_traces();
    for lock in [Lock::Mutex, Lock::Fair] {
        for (faults, config) in walk_runs(lock) {
            for seed in 0..WALKS {
                traces.push(Trace {
                    name: format!("{lock:?}, {faults}, walk {seed}"),
                    config,
                    steps: walk(&config, seed),
                });
            }
        }
    }
    traces
}

/// The runs walked, each with the faults that matter to scripts.
fn walk_runs(lock: Lock) -> [(&'static str, Config); 5] {
    let none = Faults::default();
    [
        ("3 clients", Config::new(lock, 3, 1)),
        (
            "2 clients of 2 rounds, late, renew, resend, cancel",
            Config::new(lock, 2, 2).faults(Faults {
                late: 1,
                renew: 2,
                resend: 1,
                cancel: 1,
                ..none
            }),
        ),
        (
            "3 clients, timely, a tap, a crash (maybe half-open)",
            Config::new(lock, 3, 1)
                .timely()
                .tap()
                .faults(Faults { crash: 1, ..none }),
        ),
        (
            "3 clients, timely, a crash (maybe half-open), a pause, a duplicate",
            Config::new(lock, 3, 1).timely().faults(Faults {
                crash: 1,
                freeze: 1,
                duplicate: 1,
                ..none
            }),
        ),
        (
            "3 clients, timely, one on the replica, a dropped connection, a failover",
            Config::new(lock, 3, 1)
                .timely()
                .on_replica(0)
                .faults(Faults {
                    drop: 1,
                    failover: 1,
                    ..none
                }),
        ),
    ]
}

/// A walk of `config`: at each step one of the enabled actions, picked by `seed`.
fn walk(config: &Config, seed: u64) -> Vec<Step> {
    let mut draw = SplitMix(seed);
    let mut state = State::initial(config);
    let mut actions = Vec::new();
    let mut steps = Vec::new();
    while steps.len() < WALK_STEPS && !settled(&state, config) {
        enabled(&state, config, &mut actions);
        let Some(&action) = actions.get(draw.below(actions.len())) else {
            break;
        };
        let (after, effects) = apply(&state, config, action);
        steps.push(Step {
            action,
            effects,
            after,
        });
        state = after;
    }
    steps
}

/// Whether every client is done (no round left, or crashed) with nothing on its way.
fn settled(state: &State, config: &Config) -> bool {
    state
        .clients
        .iter()
        .take(usize::from(config.clients))
        .all(|client| {
            let done =
                client.rounds == 0 && client.phase == Phase::Idle || client.phase == Phase::Crashed;
            done && client.requests.is_empty() && client.background.is_empty()
        })
}

/// A small seeded generator (SplitMix64): the same walks on every machine.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 for 0).
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n).unwrap_or(u64::MAX).max(1);
        usize::try_from(self.next() % n).unwrap_or(0)
    }
}

/// A step worth seeing on a server, and the run whose shortest trace to it is replayed.
struct Goal {
    name: &'static str,
    config: Config,
    reached: fn(&State, &Step) -> bool,
}

fn goal_traces() -> Vec<Trace> {
    goals()
        .into_iter()
        .map(|goal| {
            let steps = shortest(&goal.config, GOAL_STATES, goal.reached).unwrap_or_else(|| {
                panic!(
                    "{:?}: {} not reached (at most {GOAL_STATES} states)",
                    goal.config.lock, goal.name
                )
            });
            Trace {
                name: format!("{:?}, shortest to: {}", goal.config.lock, goal.name),
                config: goal.config,
                steps,
            }
        })
        .collect()
}

fn goals() -> Vec<Goal> {
    let mut goals = Vec::new();
    for lock in [Lock::Mutex, Lock::Fair] {
        goals.extend(goals_of_both(lock));
    }
    goals.extend(mutex_goals());
    goals.extend(fair_goals());
    goals
}

fn goals_of_both(lock: Lock) -> Vec<Goal> {
    let plain = Config::new(lock, 3, 1);
    let timely = plain.timely();
    let faults = Faults::default();
    let resent = Config::new(lock, 2, 1).faults(Faults {
        resend: 1,
        ..faults
    });
    let late = Config::new(lock, 2, 1).faults(Faults { late: 1, ..faults });
    let given_up = Config::new(lock, 2, 1).faults(Faults {
        cancel: 1,
        ..faults
    });
    let half_open = timely.faults(Faults { crash: 1, ..faults });
    let relayed = timely.on_replica(0).faults(Faults {
        failover: 1,
        ..faults
    });
    vec![
        Goal {
            name: "an offer claimed",
            config: plain,
            reached: |before, step| ran_on_offer(before, step, Script::Acquire, Answered::Granted),
        },
        Goal {
            name: "a grant asked for again after its reply was lost",
            config: resent,
            reached: |before, step| {
                ran(step, Script::Acquire, Answered::Granted).is_some_and(|run| {
                    hold(before).is_some_and(|h| h.holder == run.token && !h.offered)
                })
            },
        },
        Goal {
            name: "a standby told of an offer ahead",
            config: timely,
            reached: |_, step| published(step, Message::Standby) > 0,
        },
        Goal {
            name: "a late grant given back",
            config: late,
            reached: |_, step| {
                matches!(step.action, Action::Run(_, Lane::Background))
                    && ran_script(step, Script::Release)
            },
        },
        Goal {
            name: "an offered waiter that gives up",
            config: given_up,
            reached: |before, step| ran_on_offer(before, step, Script::Release, Answered::Code(1)),
        },
        Goal {
            name: "an offer counted only by a half-open connection",
            config: half_open,
            reached: |before, step| {
                offered_to(before, step, |sub, _| matches!(sub, Sub::HalfOpen(_)))
            },
        },
        Goal {
            name: "an offer heard only through the replica",
            config: relayed,
            reached: |before, step| {
                offered_to(
                    before,
                    step,
                    |sub, master| matches!(sub, Sub::On(n) if n != master),
                )
            },
        },
        Goal {
            name: "an offer expired unclaimed",
            config: half_open,
            reached: |before, step| {
                step.action == Action::Tick && hold(before).is_some_and(|h| h.offered && h.ttl == 1)
            },
        },
        Goal {
            name: "places expired",
            config: plain,
            reached: |_, step| step.action == Action::ExpirePlaces,
        },
    ]
}

fn mutex_goals() -> Vec<Goal> {
    let (_, stale) = super::super::renewal_after_release();
    let timely = Config::new(Lock::Mutex, 3, 1).timely();
    let faults = Faults::default();
    let crashed = timely.faults(Faults { crash: 1, ..faults });
    vec![
        Goal {
            name: "a stale place offered the lock, and its token's renewal refused",
            config: stale,
            reached: |before, step| {
                ran_on_offer(before, step, Script::Extend, Answered::Code(0))
                    && !matches!(step.after.clients[0].phase, Phase::Waiting(_))
                    && !matches!(step.after.clients[1].phase, Phase::Waiting(_))
            },
        },
        Goal {
            name: "an unheard waiter skipped",
            config: crashed,
            reached: |_, step| published(step, Message::Offer) > 1,
        },
        Goal {
            name: "an offer counted only by a pattern subscription",
            config: crashed.tap(),
            reached: |before, step| offered_to(before, step, |sub, _| sub == Sub::Off),
        },
        Goal {
            name: "a release to nobody announced",
            config: Config::new(Lock::Mutex, 2, 1).faults(Faults {
                cancel: 1,
                ..faults
            }),
            reached: |_, step| published(step, Message::Freed) > 0,
        },
    ]
}

fn fair_goals() -> Vec<Goal> {
    let (_, paused) = super::super::paused_past_a_place();
    vec![
        Goal {
            name: "a free lock offered to the first in line by an acquire",
            config: Config::new(Lock::Fair, 3, 1),
            reached: |before, step| {
                ran(step, Script::Acquire, Answered::Refused { ttl: 1 }).is_some()
                    && hold(before).is_none()
                    && published(step, Message::Offer) > 0
            },
        },
        Goal {
            name: "a waiter whose place ended, refused, sent to the back of the line",
            config: paused.faults(Faults {
                renew: 1,
                ..paused.faults
            }),
            reached: |before, step| {
                let Some(run) = step.effects.run else {
                    return false;
                };
                let places = before.server.places.as_slice();
                let ended = places.iter().any(|p| p.token == run.token && !p.is_live());
                let after = step.after.server.places.as_slice();
                let last = after.last().is_some_and(|p| p.token == run.token);
                run.script == Script::Acquire && ended && last && after.len() > 1
            },
        },
        Goal {
            name: "a waiter whose place ended passed over for the live one behind",
            config: paused,
            reached: |before, step| {
                let Some(run) = step.effects.run else {
                    return false;
                };
                let first = before.server.places.first();
                run.script == Script::Acquire
                    && first.is_some_and(|p| p.token == run.token && !p.is_live())
                    && published(step, Message::Offer) > 0
            },
        },
    ]
}

fn hold(state: &State) -> Option<Hold> {
    match state.server.value {
        Value::Held(hold) => Some(hold),
        Value::Absent | Value::Released => None,
    }
}

fn ran(step: &Step, script: Script, answered: Answered) -> Option<Run> {
    step.effects
        .run
        .filter(|run| run.script == script && run.answered == answered)
}

fn ran_script(step: &Step, script: Script) -> bool {
    step.effects.run.is_some_and(|run| run.script == script)
}

/// Whether `script` ran for the token an offer was made to, answering `answered`.
fn ran_on_offer(before: &State, step: &Step, script: Script, answered: Answered) -> bool {
    ran(step, script, answered)
        .is_some_and(|run| hold(before).is_some_and(|h| h.offered && h.holder == run.token))
}

/// How many of the step's payloads were `message`.
fn published(step: &Step, message: Message) -> usize {
    step.effects
        .published
        .as_slice()
        .iter()
        .filter(|p| p.note.message == message)
        .count()
}

/// Whether the step offered the lock to a client whose connection `listens` (given the master).
fn offered_to(before: &State, step: &Step, listens: impl Fn(Sub, u8) -> bool) -> bool {
    step.effects.published.as_slice().iter().any(|p| {
        p.note.message == Message::Offer
            && matches!(p.channel, Channel::Client(c)
                if listens(before.client(c).sub, before.server.master))
    })
}
