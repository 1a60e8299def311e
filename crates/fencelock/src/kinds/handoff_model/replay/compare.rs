//! What the replay holds the server to: the model's state after a step, its script's answer,
//! and what the script published, each compared with what the server holds, answered and
//! sent.

use super::super::config::{Config, Lock, MAX_CLIENTS};
use super::super::scripts::{Answered, Channel, Effects, Run};
use super::super::state::{Hold, Message, Place, State, Sub, Value};
use super::names::{label, member, token, Lengths, Names};
use super::TICK_MS;

/// What a script answered on the server.
#[derive(Debug)]
pub(super) enum Answer {
    /// An acquire's `{1, fence}` or `{0, ms}`.
    Acquired(Vec<i64>),
    /// A release's code.
    Code(i64),
    /// The keeper's renewal (`'1'` or `'0'`) and the guard's extension (1, 0 or -1).
    Renewed { renewed: String, extended: i64 },
}

/// Payloads heard after a script, each with its channel.
#[derive(Default)]
pub(super) struct Heard {
    /// By the listener on the replica: everything published.
    pub(super) witness: Vec<(String, String)>,
    /// By the tap on the master, when the run has one.
    pub(super) tap: Option<Vec<(String, String)>>,
    /// By each client's listener that is read.
    pub(super) clients: [Option<Vec<(String, String)>>; MAX_CLIENTS],
}

/// What the master holds for the lock, and the listeners it counts.
pub(super) struct Snapshot {
    /// The server's clock, ms.
    pub(super) now: u64,
    pub(super) value: Option<String>,
    pub(super) pttl: i64,
    /// The places, each with when it ends, in the order of the sorted set.
    pub(super) places: Vec<(String, f64)>,
    /// A FairMutex's line, in order.
    pub(super) line: Option<Vec<String>>,
    /// Subscribers on the name's channel, then on each client's.
    pub(super) counted: Vec<i64>,
    /// Pattern subscriptions.
    pub(super) patterns: i64,
}

/// The fences a trace has seen: the last drawn, and the current holder's.
#[derive(Default)]
pub(super) struct Fences {
    last: Option<u64>,
}

/// A held value as the server stores it: `token fence [+[?]] [:label]`.
#[derive(Debug, PartialEq, Eq)]
struct Stored {
    token: String,
    fence: u64,
    marked: bool,
    offered: bool,
    label: String,
}

fn parse_held(value: &str) -> Option<Stored> {
    let end = value.find(':')? + 1;
    let (token, rest) = value.split_at(end);
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (fence, rest) = rest.split_at(digits);
    let (marked, rest) = strip(rest, '+');
    let (offered, rest) = strip(rest, '?');
    Some(Stored {
        token: token.to_owned(),
        fence: fence.parse().ok()?,
        marked,
        offered,
        label: rest.strip_prefix(':').unwrap_or(rest).to_owned(),
    })
}

fn strip(text: &str, mark: char) -> (bool, &str) {
    match text.strip_prefix(mark) {
        Some(rest) => (true, rest),
        None => (false, text),
    }
}

/// Whole ticks left of `ms` (rounded up: a tick begun is a tick left), none below 0.
fn ticks(ms: f64) -> i64 {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a few ticks, rounded up already"
    )]
    let ticks = (ms / TICK_MS as f64).ceil() as i64;
    ticks.max(0)
}

/// The script's reply against the model's answer.
pub(super) fn answer(
    config: &Config,
    run: Run,
    answer: &Answer,
    value: Option<&str>,
) -> Result<(), String> {
    let agrees = match (run.answered, answer) {
        (Answered::Granted, Answer::Acquired(reply)) => {
            let held = value.and_then(parse_held);
            reply.first() == Some(&1)
                && held.is_some_and(|held| {
                    held.token == token(run.token)
                        && reply.get(1).and_then(|f| u64::try_from(*f).ok()) == Some(held.fence)
                })
        }
        (Answered::Refused { ttl }, Answer::Acquired(reply)) => {
            #[expect(clippy::cast_precision_loss, reason = "ms of a few ticks")]
            let left = reply.get(1).map(|ms| ticks(*ms as f64));
            reply.first() == Some(&0) && left == Some(i64::from(ttl))
        }
        (Answered::Code(code), Answer::Code(reply)) => i64::from(code) == *reply,
        (Answered::Code(code), Answer::Renewed { renewed, extended }) => {
            let batch = if code == 1 { "1" } else { "0" };
            i64::from(code) == *extended && renewed == batch
        }
        _ => false,
    };
    match agrees {
        true => Ok(()),
        false => Err(format!(
            "{} for {} answered {answer:?} (the lock holds {value:?}); the model's: {:?}",
            run.script.path(config.lock),
            run.token,
            run.answered
        )),
    }
}

/// What the script published, as each listener heard it, against the model's PUBLISHes.
pub(super) fn published(
    config: &Config,
    before: &State,
    effects: &Effects,
    heard: &Heard,
) -> Result<(), String> {
    let names = Names::of(config.lock);
    let lengths = Lengths::of(config);
    let expected: Vec<(String, String)> = effects
        .published
        .as_slice()
        .iter()
        .map(|p| {
            let channel = match p.channel {
                Channel::Client(c) => names.channel_of(usize::from(c)),
                Channel::Name => names.wake.to_owned(),
            };
            let waiter = token(p.note.token);
            let payload = match p.note.message {
                Message::Offer => waiter,
                Message::Standby => format!("{waiter}?{}", lengths.window.min(lengths.lease)),
                Message::Freed => format!("~{waiter}"),
                Message::Grant => format!("{waiter}<fence>"),
            };
            (channel, payload)
        })
        .collect();
    same(
        "published (heard on the replica)",
        &heard.witness,
        &expected,
    )?;
    if let Some(tap) = &heard.tap {
        same("heard by the tap", tap, &expected)?;
    }
    for (c, heard) in heard.clients.iter().enumerate() {
        let Some(heard) = heard else {
            continue;
        };
        let own = names.channel_of(c);
        let to_client: Vec<(String, String)> = expected
            .iter()
            .filter(|(channel, _)| *channel == own || channel == names.wake)
            .cloned()
            .collect();
        let node = match before.client(u8::try_from(c).expect("a few clients")).sub {
            Sub::On(node) if node != before.server.master => "on the replica",
            _ => "on the master",
        };
        same(&format!("heard by client {c} {node}"), heard, &to_client)?;
    }
    Ok(())
}

fn same(what: &str, real: &[(String, String)], model: &[(String, String)]) -> Result<(), String> {
    match real == model {
        true => Ok(()),
        false => Err(format!("{what}: {real:?}; the model's: {model:?}")),
    }
}

/// The server's state against the model's `after` a step from `before`.
pub(super) fn state(
    config: &Config,
    before: &State,
    after: &State,
    snapshot: &Snapshot,
    fences: &mut Fences,
) -> Result<(), String> {
    value(before, after, snapshot, fences)?;
    places(config, after, snapshot)?;
    counted(config, after, snapshot)
}

fn value(
    before: &State,
    after: &State,
    snapshot: &Snapshot,
    fences: &mut Fences,
) -> Result<(), String> {
    let real = snapshot.value.as_deref();
    let differs = |why: &str| Err(format!("the lock holds {real:?}: {why}"));
    match (after.server.value, real) {
        (Value::Absent, None) => Ok(()),
        (Value::Released, Some(released)) => {
            let fence: Option<u64> = released.strip_prefix('~').and_then(|f| f.parse().ok());
            match fence {
                Some(fence) if fences.last.is_none_or(|last| fence >= last) => {
                    fences.last = Some(fence);
                    Ok(())
                }
                _ => differs("the model's is released, with the last fence drawn"),
            }
        }
        (Value::Held(hold), Some(value)) => {
            let Some(stored) = parse_held(value) else {
                return differs("no held value");
            };
            held(before, hold, &stored, snapshot.pttl, fences).or_else(|why| differs(&why))
        }
        (model, _) => differs(&format!("the model's is {model:?}")),
    }
}

/// A held value against the model's hold: token, marks, label, ticks left, and a fence that
/// is new (above every fence before) for a new holder and unchanged for the same one.
fn held(
    before: &State,
    hold: Hold,
    stored: &Stored,
    pttl: i64,
    fences: &mut Fences,
) -> Result<(), String> {
    let expected = Stored {
        token: token(hold.holder),
        fence: stored.fence,
        marked: hold.marked,
        offered: hold.offered,
        label: label(hold.holder.client),
    };
    if *stored != expected {
        return Err(format!("the model's is {hold:?}"));
    }
    #[expect(clippy::cast_precision_loss, reason = "ms of a few ticks")]
    let left = ticks(pttl as f64);
    if left != i64::from(hold.ttl) {
        return Err(format!("{left} ticks left, the model's {}", hold.ttl));
    }
    let same_holder = matches!(before.server.value, Value::Held(h) if h.holder == hold.holder);
    let fence_agrees = match (same_holder, fences.last) {
        (true, last) => last == Some(stored.fence),
        (false, last) => last.is_none_or(|last| stored.fence > last),
    };
    if !fence_agrees {
        return Err(format!(
            "fence {} after {:?}, for {} holder",
            stored.fence,
            fences.last,
            if same_holder { "the same" } else { "a new" }
        ));
    }
    fences.last = Some(stored.fence);
    Ok(())
}

/// The places (and a FairMutex's line): members, order, and whole ticks until each ends.
fn places(config: &Config, after: &State, snapshot: &Snapshot) -> Result<(), String> {
    let lengths = Lengths::of(config);
    let model: Vec<(String, i64)> = after
        .server
        .places
        .as_slice()
        .iter()
        .map(|p: &Place| (member(p.token, &lengths), i64::from(p.ends)))
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "ms since 1970 fit a double")]
    let now = snapshot.now as f64;
    let real: Vec<(String, i64)> = snapshot
        .places
        .iter()
        .map(|(member, ends)| (member.clone(), ticks(ends - now)))
        .collect();
    let in_order = match (config.lock, &snapshot.line) {
        (Lock::Fair, Some(line)) => {
            let ends = |m: &String| real.iter().find(|(r, _)| r == m).map(|(_, e)| *e);
            let by_line: Option<Vec<(String, i64)>> = line
                .iter()
                .map(|m| ends(m).map(|e| (m.clone(), e)))
                .collect();
            by_line.filter(|_| line.len() == real.len())
        }
        _ => Some(real.clone()),
    };
    match in_order == Some(model.clone()) {
        true => Ok(()),
        false => Err(format!(
            "places (member, ticks left) {real:?}, line {:?}; the model's, in order: {model:?}",
            snapshot.line
        )),
    }
}

/// The listeners the master counts: on each client's channel, on the name's, and by pattern.
fn counted(config: &Config, after: &State, snapshot: &Snapshot) -> Result<(), String> {
    let master = after.server.master;
    let counts = |c: usize| {
        let sub = after.clients[c].sub;
        let on_master = matches!(sub, Sub::On(n) | Sub::HalfOpen(n) if n == master);
        i64::from(c < usize::from(config.clients) && on_master)
    };
    let clients: Vec<i64> = (0..MAX_CLIENTS).map(counts).collect();
    let expected: Vec<i64> = std::iter::once(clients.iter().sum())
        .chain(clients.iter().copied())
        .collect();
    let patterns = i64::from(config.tap);
    match snapshot.counted == expected && snapshot.patterns == patterns {
        true => Ok(()),
        false => Err(format!(
            "the master counts {:?} listeners (name, then each client) and {} patterns; the \
             model's: {expected:?} and {patterns}",
            snapshot.counted, snapshot.patterns
        )),
    }
}

#[test]
fn a_stored_value_is_read_with_its_marks_and_label() {
    let offered = parse_held("c1.2:1700000000000123+?:h1").expect("held");
    assert_eq!(
        offered,
        Stored {
            token: "c1.2:".to_owned(),
            fence: 1_700_000_000_000_123,
            marked: true,
            offered: true,
            label: "h1".to_owned(),
        }
    );
    let plain = parse_held("c0.1:17:h0").expect("held");
    assert!(!plain.marked && !plain.offered && plain.label == "h0");
    assert_eq!(parse_held("~17"), None);
}
