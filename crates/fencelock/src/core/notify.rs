//! Release notifications: one pub/sub connection per client, shared by every waiter of every
//! lock name.
//!
//! A waiter registers on a name's wake channel; the first waiter of a name subscribes, the last
//! one to leave unsubscribes. One task owns the connection and sends subscriptions in order, so
//! a late unsubscribe can never undo a newer subscribe. The release message's payload says whom
//! to wake in this process:
//!
//! - empty: one waiter, the longest-waiting one not already woken (a release with no waiter
//!   named: one release costs one retry per waiting process, not one per waiting task);
//! - a decimal number `n`: that many waiters (permits given back to a semaphore);
//! - `*`: every waiter (a writer left, so every reader may enter);
//! - `~` and an id: one waiter, once per id (a release that named no waiter, which every master
//!   of a RedLock client announces);
//! - anything else: the waiter registered with that token. Alone, it is woken to try again: a
//!   release offered it the lock (a mutex's or a fair lock's handoff, sent on the waiter's
//!   client's own channel), which its next attempt claims. Followed by `?` and a number `ms`,
//!   the lock was offered to the waiter just ahead of it for `ms`: it tries again once that
//!   has passed, so that an offer nobody claims keeps it waiting no longer. Followed by a
//!   number alone (an older release's grant with its fence), it is woken to try again too: a
//!   message is never proof of a grant, only the answer to the waiter's own request is.
//!
//! A woken waiter that is dropped before it used its wake passes it on. When the connection
//! drops, every waiter is woken to retry, since messages may have been lost; waiters also retry
//! on a bounded timer, so a lost message delays them but never strands them.
//!
//! A connection can also go silent without closing (a network that drops its packets): every
//! reply the task awaits has a time limit, the connection is pinged when nothing happened on it
//! for a while, and one that does not answer in time is replaced as a dropped one is.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::options::ClientOptions;
use crate::race::{self, Branch};
use crate::transport::pubsub::{
    answers, connect, moved, next_event, subscribe, unsubscribe, Connection, Event, Source,
};

/// Whom a waiter wants to be woken for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any release of the name.
    Any,
    /// Releases addressed to this token (and releases that wake everyone).
    Token(Vec<u8>),
    /// Releases addressed to this token, and releases addressed to nobody in particular.
    AnyOrToken(Vec<u8>),
    /// Releases announced with exactly this message, each waking one waiter, and releases
    /// addressed to nobody in particular: another library's announcements (Redisson's `0`).
    Message(Vec<u8>),
}

impl Target {
    /// Whether a release that names no waiter may wake this one.
    fn takes_any(&self) -> bool {
        matches!(
            self,
            Target::Any | Target::AnyOrToken(_) | Target::Message(_)
        )
    }

    /// How a release addressed by `payload` wakes this waiter, or `None` when it is meant for
    /// another: its token alone, or followed by a number (an older release's grant), wakes it
    /// now; followed by `?` and a number of ms, once an offer to the waiter ahead has had that
    /// long.
    fn addressed_by(&self, payload: &[u8]) -> Option<Wake> {
        let (Target::Token(token) | Target::AnyOrToken(token)) = self else {
            return None;
        };
        let rest = payload.strip_prefix(token.as_slice())?;
        if rest.iter().all(u8::is_ascii_digit) {
            return Some(Wake::Now);
        }
        let ms = rest.strip_prefix(b"?")?;
        let ms: u64 = std::str::from_utf8(ms).ok()?.parse().ok()?;
        Some(Wake::After(Duration::from_millis(ms)))
    }
}

/// The shared registry: which channels have waiters, and how to wake them.
#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<Vec<u8>, Vec<Slot>>,
    /// The latest `~` payloads seen, so that a release announced by several masters wakes one
    /// waiter, not one per master.
    announced: VecDeque<Vec<u8>>,
    /// Per source, the channels its connection is subscribed to right now: a waiter registered
    /// on one of them hears every release from then on, without waiting for a subscription.
    listening: Vec<HashSet<Vec<u8>>>,
}

/// How many `~` payloads are remembered: far more than releases arrive within the spread of
/// the masters' announcements.
const ANNOUNCED_MEMORY: usize = 256;

/// What woke a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Try again now: a release may have freed the lock or offered it to this waiter, or the
    /// connection was lost, and a message with it.
    Now,
    /// The lock was offered to the waiter ahead of this one for this long: try again once it
    /// has passed, unless something else wakes this waiter first.
    After(Duration),
}

impl Wake {
    /// The wake that stands when `self` is still unused and `other` comes: trying now wins,
    /// and of two offers ahead the one that ends first.
    fn and(self, other: Wake) -> Wake {
        match (self, other) {
            (Wake::After(a), Wake::After(b)) => Wake::After(a.min(b)),
            _ => Wake::Now,
        }
    }
}

/// One registered waiter, in registration order within its channel.
#[derive(Debug)]
struct Slot {
    id: u64,
    target: Target,
    notify: Arc<Notify>,
    /// What woke it, while the wake is not yet used.
    wake: Option<Wake>,
}

impl Slot {
    fn wake(&mut self) {
        self.rouse(Wake::Now);
    }

    fn rouse(&mut self, wake: Wake) {
        self.wake = Some(self.wake.map_or(wake, |unused| unused.and(wake)));
        self.notify.notify_one();
    }

    /// Woken to try now, and the wake not yet used.
    fn is_woken(&self) -> bool {
        self.wake == Some(Wake::Now)
    }
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

enum Request {
    Subscribe(Vec<u8>, oneshot::Sender<bool>),
    Unsubscribe(Vec<u8>),
}

/// How long the notification task waits on its connection, from the client's options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// For the connection to open: the connection timeout and a reply's.
    connect_within: Duration,
    /// For the reply to a subscription, an unsubscription or a ping: the response timeout.
    reply_within: Duration,
    /// How long a connection may stay quiet while anyone waits before it is pinged: one wake
    /// fallback, the delay a lost message costs a waiter anyway.
    ping_after: Duration,
    /// How long a channel stays subscribed after its last waiter left: as long as a waiter's
    /// place lasts, so that a task that waits on the same name again soon finds it subscribed
    /// and needs neither a subscription nor a try before it.
    linger: Duration,
}

impl Timing {
    pub(crate) fn of(options: &ClientOptions) -> Timing {
        Timing {
            connect_within: options
                .connection_timeout
                .saturating_add(options.response_timeout),
            reply_within: options.response_timeout,
            ping_after: options.wake_fallback,
            linger: Duration::from_millis(options.place_ms()),
        }
    }
}

/// The client's side of the notification tasks: one per source (one per RedLock master).
#[derive(Debug)]
pub(crate) struct Notifier {
    registry: Arc<StdMutex<Registry>>,
    requests: Vec<mpsc::UnboundedSender<Request>>,
    /// How long a waiter waits for its subscription to be confirmed before it relies on its
    /// retry timer alone (a server that is paused or cut off never confirms): as long as a
    /// new connection and one reply may take.
    confirm_within: Duration,
    /// Cancelled by a shutdown, which ends the tasks and closes their connections.
    stop: CancellationToken,
}

impl Notifier {
    /// Starts one task per source, all waking the same waiters. Each opens its connection at
    /// once, in the background (or, if that fails, at the next subscription), and ends with
    /// the client.
    pub(crate) fn spawn_all(sources: Vec<Source>, timing: Timing) -> Arc<Notifier> {
        let registry = Arc::new(StdMutex::new(Registry {
            listening: vec![HashSet::new(); sources.len()],
            ..Registry::default()
        }));
        let stop = CancellationToken::new();
        let requests = sources
            .into_iter()
            .enumerate()
            .map(|(index, source)| {
                let (requests, rx) = mpsc::unbounded_channel();
                let task = run(source, index, timing, Arc::clone(&registry), rx);
                tokio::spawn(stop.clone().run_until_cancelled_owned(task));
                requests
            })
            .collect();
        Arc::new(Notifier {
            registry,
            requests,
            confirm_within: timing.connect_within,
            stop,
        })
    }

    /// Ends every notification task, for a shutdown. A waiter registered later relies on its
    /// retry timer alone.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether a connection is subscribed to `channel` right now (a waiter of this client
    /// waits on it, or did a moment ago): a waiter registered on it hears the next release.
    pub(crate) fn listens_to(&self, channel: &[u8]) -> bool {
        lock(&self.registry)
            .listening
            .iter()
            .any(|channels| channels.contains(channel))
    }

    /// Registers a waiter on `channel` and waits until the subscription is confirmed, so that a
    /// release after this returns is announced to it. If Redis cannot be subscribed to, the
    /// waiter still works, by its retry timer alone.
    pub(crate) async fn wait_on(self: &Arc<Self>, channel: Vec<u8>, target: Target) -> Waiter {
        let id = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        lock(&self.registry)
            .channels
            .entry(channel.clone())
            .or_default()
            .push(Slot {
                id,
                target,
                notify: Arc::clone(&notify),
                wake: None,
            });
        let waiter = Waiter {
            notifier: Arc::clone(self),
            channel: channel.clone(),
            id,
            notify,
        };
        let confirmations: Vec<_> = self
            .requests
            .iter()
            .filter_map(|requests| {
                let (confirmed, confirmation) = oneshot::channel();
                requests
                    .send(Request::Subscribe(channel.clone(), confirmed))
                    .ok()
                    .map(|()| confirmation)
            })
            .collect();
        // One confirmed subscription is enough: every source announces each release. The
        // others complete in the background.
        let _ = tokio::time::timeout(self.confirm_within, first_confirmed(confirmations)).await;
        waiter
    }

    fn leave(&self, channel: &[u8], id: u64) {
        let mut registry = lock(&self.registry);
        let Some(slots) = registry.channels.get_mut(channel) else {
            return;
        };
        let Some(at) = slots.iter().position(|slot| slot.id == id) else {
            return;
        };
        let slot = slots.remove(at);
        if slot.is_woken() && slot.target.takes_any() {
            // It was woken but gave up before trying: hand the wake to the next waiter.
            wake_any(slots, 1);
        }
        if slots.is_empty() {
            registry.channels.remove(channel);
            for requests in &self.requests {
                let _ = requests.send(Request::Unsubscribe(channel.to_vec()));
            }
        }
    }

    /// The waiter used its wake: what it was.
    fn used_wake(&self, channel: &[u8], id: u64) -> Option<Wake> {
        self.slot(channel, id, |slot| slot.wake.take()).flatten()
    }

    /// Runs `f` on the slot of waiter `id` on `channel`, if it is registered.
    fn slot<T>(&self, channel: &[u8], id: u64, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let mut registry = lock(&self.registry);
        let slot = registry
            .channels
            .get_mut(channel)
            .and_then(|slots| slots.iter_mut().find(|slot| slot.id == id))?;
        Some(f(slot))
    }
}

/// Completes when one subscription is confirmed, or every one has failed.
async fn first_confirmed(mut confirmations: Vec<oneshot::Receiver<bool>>) {
    while !confirmations.is_empty() {
        let (confirmed, at) = poll_fn(|cx| {
            confirmations
                .iter_mut()
                .enumerate()
                .find_map(|(at, c)| match Pin::new(c).poll(cx) {
                    std::task::Poll::Ready(ok) => Some((ok.unwrap_or(false), at)),
                    std::task::Poll::Pending => None,
                })
                .map_or(std::task::Poll::Pending, std::task::Poll::Ready)
        })
        .await;
        if confirmed {
            break;
        }
        confirmations.swap_remove(at);
    }
}

/// One task's registration on a wake channel; dropping it leaves the channel.
#[derive(Debug)]
pub(crate) struct Waiter {
    notifier: Arc<Notifier>,
    channel: Vec<u8>,
    id: u64,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Completes when a release concerning this waiter is announced (or the connection was
    /// lost), with what the waiter is to do. A wake that came while the waiter was busy is
    /// kept for it.
    pub(crate) async fn woken(&self) -> Wake {
        self.notify.notified().await;
        self.notifier
            .used_wake(&self.channel, self.id)
            .unwrap_or(Wake::Now)
    }

    /// Makes the waiter wait for releases addressed to `target` from now on: the attempt it
    /// waits for went on with a new token.
    pub(crate) fn retarget(&self, target: Target) {
        self.notifier
            .slot(&self.channel, self.id, |slot| slot.target = target);
    }
}

impl Waiter {
    /// Wakes the next waiter registered after this one, for a waiter that a release on this
    /// channel woke but that was refused for a reason of its own (another lock it needs too is
    /// held): the release may have freed this channel's lock for a waiter behind it. Passing
    /// only forward, in registration order, ends the chain at the last waiter.
    pub(crate) fn pass_on(&self) {
        let mut registry = lock(&self.notifier.registry);
        let Some(slots) = registry.channels.get_mut(&self.channel) else {
            return;
        };
        if let Some(at) = slots.iter().position(|slot| slot.id == self.id) {
            wake_any(&mut slots[at + 1..], 1);
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.notifier.leave(&self.channel, self.id);
    }
}

fn lock(registry: &StdMutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wakes up to `n` waiters for any release, longest-waiting first, skipping those that still
/// have an unused wake.
fn wake_any(slots: &mut [Slot], n: usize) {
    slots
        .iter_mut()
        .filter(|slot| slot.target.takes_any() && !slot.is_woken())
        .take(n)
        .for_each(Slot::wake);
}

/// Delivers one release message to this process's waiters.
fn dispatch(registry: &StdMutex<Registry>, channel: &[u8], payload: &[u8]) {
    let mut registry = lock(registry);
    if payload.starts_with(b"~") && !first_announcement(&mut registry, payload) {
        return;
    }
    let Some(slots) = registry.channels.get_mut(channel) else {
        return;
    };
    if slots
        .iter()
        .any(|slot| matches!(&slot.target, Target::Message(m) if m == payload))
    {
        wake_any(slots, 1);
        return;
    }
    match payload {
        [] | [b'~', ..] => wake_any(slots, 1),
        b"*" => slots.iter_mut().for_each(Slot::wake),
        digits if digits.iter().all(u8::is_ascii_digit) => {
            let n = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(usize::MAX);
            wake_any(slots, n);
        }
        payload => {
            for slot in slots.iter_mut() {
                if let Some(wake) = slot.target.addressed_by(payload) {
                    slot.rouse(wake);
                }
            }
        }
    }
}

/// Whether a `~` payload is new, remembering it if so.
fn first_announcement(registry: &mut Registry, payload: &[u8]) -> bool {
    if registry.announced.iter().any(|seen| seen == payload) {
        return false;
    }
    if registry.announced.len() == ANNOUNCED_MEMORY {
        registry.announced.pop_front();
    }
    registry.announced.push_back(payload.to_vec());
    true
}

const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

async fn run(
    source: Source,
    index: usize,
    timing: Timing,
    registry: Arc<StdMutex<Registry>>,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    // Opened with the client, so that the first contended wait only subscribes: a connect
    // there would delay the wait by a connection's round trips, on the path a release is
    // announced on. If it fails, the first subscription tries again, as after a drop.
    let mut conn: Option<Connection> =
        connect(&source, timing.connect_within, timing.reply_within).await;
    let mut backoff = RECONNECT_MIN;
    let mut moves = source.moves();
    // Channels nobody waits on any more, still subscribed until the instant given.
    let mut lingering: HashMap<Vec<u8>, Instant> = HashMap::new();
    loop {
        show_listening(&registry, index, conn.as_ref());
        // Reconnect in the background while anyone waits, so that a dropped connection does
        // not leave waiters on their fallback timers for longer than needed.
        let wanted = !lock(&registry).channels.is_empty();
        let (may_ping, may_reconnect) = (conn.is_some() && wanted, conn.is_none() && wanted);
        let step = {
            let request = pin!(async { Step::Request(requests.recv().await) });
            let moved = pin!(async {
                moved(&mut moves).await;
                Step::Moved
            });
            let event = pin!(async { Step::Event(next_event(&mut conn).await) });
            let quiet = pin!(async {
                if !may_ping {
                    return std::future::pending().await;
                }
                tokio::time::sleep(timing.ping_after).await;
                Step::Quiet
            });
            let retry = pin!(async {
                if !may_reconnect {
                    return std::future::pending().await;
                }
                tokio::time::sleep(backoff).await;
                Step::Reconnect
            });
            let first_lingering = lingering.values().min().copied();
            let linger = pin!(async {
                let Some(until) = first_lingering else {
                    return std::future::pending().await;
                };
                tokio::time::sleep_until(until).await;
                Step::Lingered
            });
            race::first([request as Branch<'_, _>, moved, event, quiet, retry, linger]).await
        };
        match step {
            Step::Request(request) => {
                let Some(request) = request else { break };
                if conn.is_none() {
                    conn = connect(&source, timing.connect_within, timing.reply_within).await;
                }
                match request {
                    Request::Subscribe(channel, confirmed) => {
                        lingering.remove(&channel);
                        let ok = match conn.as_mut() {
                            Some(c) => subscribe(c, &channel).await,
                            None => false,
                        };
                        if !ok {
                            conn = None;
                        }
                        let _ = confirmed.send(ok);
                    }
                    Request::Unsubscribe(channel) => {
                        lingering.insert(channel, Instant::now() + timing.linger);
                    }
                }
            }
            Step::Moved => {
                // Releases are announced on the new master now.
                conn = None;
                wake_everyone(&registry);
            }
            Step::Event(event) => match event {
                Some(Event::Message(channel, payload)) => dispatch(&registry, &channel, &payload),
                Some(Event::Interrupted) => wake_everyone(&registry),
                Some(Event::Unsubscribed(channel)) => {
                    if let Some(c) = conn.as_mut()
                        && !resubscribe(c, &registry, &channel).await
                    {
                        conn = None;
                    }
                    // A release may have been announced on the slot's new master already.
                    wake_channel(&registry, &channel);
                }
                None => {
                    conn = None;
                    wake_everyone(&registry);
                }
            },
            Step::Quiet => {
                if let Some(c) = conn.as_mut()
                    && !answers(c).await
                {
                    // Silent: what it should have delivered may be lost.
                    conn = None;
                    wake_everyone(&registry);
                }
            }
            Step::Lingered => {
                let now = Instant::now();
                let ended: Vec<Vec<u8>> = lingering
                    .iter()
                    .filter(|(_, until)| **until <= now)
                    .map(|(channel, _)| channel.clone())
                    .collect();
                for channel in ended {
                    lingering.remove(&channel);
                    let still_wanted = lock(&registry).channels.contains_key(&channel);
                    if let (Some(c), false) = (conn.as_mut(), still_wanted)
                        && !unsubscribe(c, &channel).await
                    {
                        conn = None;
                    }
                }
            }
            Step::Reconnect => {
                conn = reconnect(&source, timing, &registry).await;
                if conn.is_some() {
                    backoff = RECONNECT_MIN;
                    // Releases may have happened while nobody listened.
                    wake_everyone(&registry);
                } else {
                    backoff = (backoff * 2).min(RECONNECT_MAX);
                }
            }
        }
    }
}

/// What woke the notification task.
enum Step {
    /// A waiter's request, or `None` when the client is gone.
    Request(Option<Request>),
    /// The master was announced to have moved.
    Moved,
    /// The connection delivered an event, or closed (`None`).
    Event(Option<Event>),
    /// The connection was quiet for a while, with waiters on it: time to ping it.
    Quiet,
    /// Time to try connecting again, for the waiters still registered.
    Reconnect,
    /// A channel nobody waits on has lingered long enough: time to unsubscribe.
    Lingered,
}

/// Tells waiters which channels source `index` is subscribed to now.
fn show_listening(registry: &StdMutex<Registry>, index: usize, conn: Option<&Connection>) {
    let mut registry = lock(registry);
    let Some(listening) = registry.listening.get_mut(index) else {
        return;
    };
    match conn {
        Some(conn) if listening != conn.subscribed() => listening.clone_from(conn.subscribed()),
        None if !listening.is_empty() => listening.clear(),
        _ => {}
    }
}

/// A new connection subscribed to every channel that has waiters, or `None` when it could not
/// be opened or did not confirm every subscription in time.
async fn reconnect(
    source: &Source,
    timing: Timing,
    registry: &StdMutex<Registry>,
) -> Option<Connection> {
    let mut conn = connect(source, timing.connect_within, timing.reply_within).await?;
    let channels: Vec<Vec<u8>> = lock(registry).channels.keys().cloned().collect();
    for channel in channels {
        if !subscribe(&mut conn, &channel).await {
            return None;
        }
    }
    Some(conn)
}

/// Subscribes again to a channel the server unsubscribed, if anyone still waits on it.
async fn resubscribe(conn: &mut Connection, registry: &StdMutex<Registry>, channel: &[u8]) -> bool {
    conn.forget(channel);
    let wanted = lock(registry).channels.contains_key(channel);
    !wanted || subscribe(conn, channel).await
}

fn wake_everyone(registry: &StdMutex<Registry>) {
    for slots in lock(registry).channels.values_mut() {
        slots.iter_mut().for_each(Slot::wake);
    }
}

fn wake_channel(registry: &StdMutex<Registry>, channel: &[u8]) {
    if let Some(slots) = lock(registry).channels.get_mut(channel) {
        slots.iter_mut().for_each(Slot::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with_waiters(channel: &[u8], n: usize) -> (StdMutex<Registry>, Vec<Arc<Notify>>) {
        let mut registry = Registry::default();
        let notifies: Vec<_> = (0..n).map(|_| Arc::new(Notify::new())).collect();
        let slots = notifies
            .iter()
            .enumerate()
            .map(|(id, notify)| Slot {
                id: id as u64,
                target: Target::Any,
                notify: Arc::clone(notify),
                wake: None,
            })
            .collect();
        registry.channels.insert(channel.to_vec(), slots);
        (StdMutex::new(registry), notifies)
    }

    fn woken(registry: &StdMutex<Registry>, channel: &[u8]) -> usize {
        lock(registry).channels[channel]
            .iter()
            .filter(|slot| slot.is_woken())
            .count()
    }

    #[test]
    fn a_message_to_a_token_wakes_it_to_ask_and_never_carries_a_grant() {
        let registry = StdMutex::new(Registry::default());
        let notify = Arc::new(Notify::new());
        lock(&registry).channels.insert(
            b"c".to_vec(),
            vec![Slot {
                id: 1,
                target: Target::Token(b"tok:".to_vec()),
                notify,
                wake: None,
            }],
        );
        let wake = |registry: &StdMutex<Registry>| lock(registry).channels[&b"c"[..]][0].wake;
        dispatch(&registry, b"c", b"other:");
        assert_eq!(wake(&registry), None, "another waiter's");
        dispatch(&registry, b"c", b"tok:?200");
        assert_eq!(
            wake(&registry),
            Some(Wake::After(Duration::from_millis(200))),
            "an offer to the waiter ahead: ask once it has had its time"
        );
        dispatch(&registry, b"c", b"tok:?50");
        assert_eq!(
            wake(&registry),
            Some(Wake::After(Duration::from_millis(50))),
            "the earlier of two"
        );
        dispatch(&registry, b"c", b"tok:12345");
        assert_eq!(
            wake(&registry),
            Some(Wake::Now),
            "an older release's grant and its fence: ask now, as for an offer"
        );
        dispatch(&registry, b"c", b"tok:?50");
        assert_eq!(wake(&registry), Some(Wake::Now), "asking now stands");
        dispatch(&registry, b"c", b"tok:?x");
        assert_eq!(
            wake(&registry),
            Some(Wake::Now),
            "a malformed payload is ignored"
        );
    }

    #[test]
    fn a_release_announced_by_every_master_wakes_one_waiter() {
        let (registry, _notifies) = registry_with_waiters(b"c", 3);
        for _ in 0..5 {
            dispatch(&registry, b"c", b"~tokenA:");
        }
        assert_eq!(woken(&registry, b"c"), 1);
        dispatch(&registry, b"c", b"~tokenB:");
        assert_eq!(woken(&registry, b"c"), 2, "another release wakes another");
        // Plain releases are not deduplicated: each wakes one.
        let (registry, _notifies) = registry_with_waiters(b"c", 3);
        dispatch(&registry, b"c", b"");
        dispatch(&registry, b"c", b"");
        assert_eq!(woken(&registry, b"c"), 2);
    }
}
