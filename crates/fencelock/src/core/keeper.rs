//! The client's one background task for leases: it renews every renewed lease in batches (one
//! script call renews up to `renew_batch` leases), and runs the best-effort releases of dropped
//! guards and cancelled acquires. A shutdown hands it the releases of every live hold; it
//! waits for those and for the releases still under way, then stops.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::core::lease::{valid_until, LeaseState, Lost};
use crate::core::live_holds::Release;
use crate::core::nodes::{Nodes, Request};
use crate::core::observe::Renewing;
use crate::core::EXPIRIES;
use crate::options::{self, Drift};
use crate::race::{self, Branch};
use crate::transport::conn::Slot;
use crate::transport::script::Lua;

/// Renews many leases of any kind in one call (also run by the mutex's model replay).
pub(crate) static RENEW_BATCH: Lua = Lua::new(&[EXPIRIES, include_str!("renew_batch.lua")]);

/// How a primitive stores a holder, and so how the batch renewal finds and extends it (see
/// `renew_batch.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[expect(dead_code, reason = "the kinds of the primitives that follow")]
pub(crate) enum RenewKind {
    /// The key's string value starts with the member.
    Value,
    /// The key's string value is the member, exactly: another library's layout, whose tokens
    /// do not end with a mark that keeps one from starting another.
    ExactValue,
    /// The hash has the member as a field.
    HashField,
    /// The hash field named by the member holds that holder's expiry in server milliseconds.
    HashExpiry,
    /// The sorted set has the member, scored by its expiry in server milliseconds.
    ZsetExpiry,
}

impl RenewKind {
    fn code(self) -> &'static str {
        match self {
            RenewKind::Value => "v",
            RenewKind::ExactValue => "x",
            RenewKind::HashField => "h",
            RenewKind::HashExpiry => "e",
            RenewKind::ZsetExpiry => "z",
        }
    }
}

/// One key the batch renewal checks and extends for a grant.
#[derive(Clone, Debug)]
pub struct Renewal {
    pub(crate) key: Vec<u8>,
    pub(crate) member: String,
    pub(crate) kind: RenewKind,
}

/// A lease to keep renewed: every key of it must still be held.
#[derive(Debug)]
struct Watched {
    lease: Arc<LeaseState>,
    renewals: Vec<Renewal>,
    /// When the grant's request was sent: the lease's validity counts from there.
    granted_at: Instant,
}

enum Command {
    Watch(Watched),
    Forget(u64),
    Release(Release),
    ShutDown(ShutDown),
}

/// The last command: run these releases, wait up to `within` for them and for the releases
/// under way, report how many Redis did not answer, and stop.
struct ShutDown {
    releases: Vec<Release>,
    within: Duration,
    done: oneshot::Sender<usize>,
}

/// The handle through which guards talk to the keeper task.
#[derive(Clone, Debug)]
pub(crate) struct Keeper {
    commands: mpsc::UnboundedSender<Command>,
}

impl Keeper {
    /// Starts the task on the current tokio runtime. It ends when every handle is gone.
    pub(crate) fn spawn(nodes: Arc<Nodes>, batch: usize, drift: Drift) -> Keeper {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, nodes, batch, drift));
        Keeper { commands }
    }

    /// Renews this lease every third of its length, the first time a third after
    /// `granted_at` (when the grant's request was sent), until it is forgotten or lost.
    pub(crate) fn watch(
        &self,
        lease: Arc<LeaseState>,
        renewals: Vec<Renewal>,
        granted_at: Instant,
    ) {
        let _ = self.commands.send(Command::Watch(Watched {
            lease,
            renewals,
            granted_at,
        }));
    }

    /// Stops renewing a lease.
    pub(crate) fn forget(&self, lease_id: u64) {
        let _ = self.commands.send(Command::Forget(lease_id));
    }

    /// Runs a release in the background. Without a runtime left to run it, the lease simply
    /// runs out: that is what makes it safe to skip.
    pub(crate) fn release(&self, release: Release) {
        if let Err(refused) = self.commands.send(Command::Release(release)) {
            // The task stopped with a shutdown: the release runs on its own, if it can.
            if let (Command::Release(release), Ok(runtime)) =
                (refused.0, tokio::runtime::Handle::try_current())
            {
                runtime.spawn(release);
            }
        }
    }

    /// Runs `releases`, waits up to `within` for them and for every release under way, and
    /// stops the task (renewals included). Returns how many releases Redis did not answer
    /// in time.
    pub(crate) async fn shut_down(&self, releases: Vec<Release>, within: Duration) -> usize {
        let (done, report) = oneshot::channel();
        let count = releases.len();
        let command = Command::ShutDown(ShutDown {
            releases,
            within,
            done,
        });
        match self.commands.send(command) {
            // No report: the task was stopped with its runtime, its releases unanswered.
            Ok(()) => report.await.unwrap_or(count),
            // The task stopped already (shut down before, or its runtime is gone): the
            // releases run here.
            Err(refused) => match refused.0 {
                Command::ShutDown(last) => {
                    settle(last.releases.into_iter().collect(), within).await
                }
                _ => 0,
            },
        }
    }
}

/// Waits up to `within` for every release of the set; how many were not answered by then
/// (those still running are given up).
async fn settle(mut releases: JoinSet<bool>, within: Duration) -> usize {
    let mut unanswered = releases.len();
    let answers = async {
        while let Some(answered) = releases.join_next().await {
            if matches!(answered, Ok(true)) {
                unanswered -= 1;
            }
        }
    };
    let _ = tokio::time::timeout(within, answers).await;
    unanswered
}

/// The end of the task: the shutdown's releases with those under way and those still queued,
/// then one report to every caller of a shutdown.
async fn finish(
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut releases: JoinSet<bool>,
    last: ShutDown,
) {
    commands.close();
    let within = last.within;
    let mut reports = Vec::new();
    let mut queued = vec![Command::ShutDown(last)];
    while let Ok(command) = commands.try_recv() {
        queued.push(command);
    }
    for command in queued {
        match command {
            Command::Release(release) => {
                releases.spawn(release);
            }
            Command::ShutDown(ShutDown {
                releases: more,
                done,
                ..
            }) => {
                releases.extend(more);
                reports.push(done);
            }
            Command::Watch(_) | Command::Forget(_) => {}
        }
    }
    let unanswered = settle(releases, within).await;
    for done in reports {
        let _ = done.send(unanswered);
    }
}

/// A lease renewed by the keeper, kept in a slab so that a renewal touches it by index, its
/// keys and arguments encoded once, at watch time: a renewal reads the entry and its encoded
/// keys, and the lease itself only when the answer comes.
struct Entry {
    /// The lease's id, kept here so that telling a reused slot apart reads no lease.
    id: u64,
    lease: Arc<LeaseState>,
    /// The first key (most leases have one), then any others.
    first: Encoded,
    more: Vec<Encoded>,
    /// Whether a renewal of it is in flight.
    renewing: Option<Renewing>,
}

/// One key the batch renewal checks and extends, and its argument (its kind's code followed by
/// its member), in one buffer; with the shard the key lives on.
struct Encoded {
    bytes: Box<[u8]>,
    key_len: usize,
    shard: Option<Slot>,
}

impl Encoded {
    fn new(renewal: &Renewal, shard: Option<Slot>) -> Encoded {
        let bytes = [
            renewal.key.as_slice(),
            renewal.kind.code().as_bytes(),
            renewal.member.as_bytes(),
        ]
        .concat();
        Encoded {
            bytes: bytes.into_boxed_slice(),
            key_len: renewal.key.len(),
            shard,
        }
    }

    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    fn argument(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }
}

impl Entry {
    fn keys(&self) -> impl Iterator<Item = &Encoded> {
        std::iter::once(&self.first).chain(&self.more)
    }

    fn key(&self, index: usize) -> Option<&Encoded> {
        match index {
            0 => Some(&self.first),
            _ => self.more.get(index - 1),
        }
    }
}

/// Where a lease sits in the schedule: its slot in the slab and its id, so that a slot reused
/// by a later lease is not taken for the old one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    slot: usize,
    id: u64,
}

/// The result of one batch call: when it was sent, which leases it covered (all of one
/// length), and for each lease whether enough nodes renewed every one of its keys
/// (`Some(true)`), enough nodes no longer hold it (`Some(false)`), or too few answered to tell
/// (`None`).
struct BatchOutcome {
    sent_at: Instant,
    lease: Duration,
    places: Vec<Place>,
    verdicts: Vec<Option<bool>>,
}

/// One node's answer for one lease from its per-key replies (`None` for a key whose call
/// failed): renewed when every key was, lost when any key is no longer held, unknown otherwise.
fn lease_answer(replies: &[Option<i64>]) -> Option<bool> {
    if replies.iter().any(|r| matches!(r, Some(r) if *r != 1)) {
        Some(false)
    } else if replies.iter().all(Option::is_some) {
        Some(true)
    } else {
        None
    }
}

/// Each lease's verdict over every node's per-key replies; `keys_per_lease` says how many of
/// the replies, in order, are each lease's.
fn verdicts(
    nodes: &Nodes,
    answers: &[Vec<Option<i64>>],
    keys_per_lease: &[usize],
) -> Vec<Option<bool>> {
    let mut first = 0;
    keys_per_lease
        .iter()
        .map(|&keys| {
            let (mut yes, mut no) = (0, 0);
            for replies in answers {
                match replies.get(first..first + keys).and_then(lease_answer) {
                    Some(true) => yes += 1,
                    Some(false) => no += 1,
                    None => {}
                }
            }
            first += keys;
            nodes.verdict(yes, no)
        })
        .collect()
}

/// One renewal script call: its command, and where each of its keys stands in the batch.
struct Call {
    request: Request,
    positions: Vec<usize>,
}

/// Runs every call on every node at once and lays the replies out per node, one entry per key
/// of the batch in batch order.
async fn ask_calls(nodes: &Arc<Nodes>, calls: Vec<Call>, keys: usize) -> Vec<Vec<Option<i64>>> {
    let mut asked = JoinSet::new();
    let mut positions = Vec::with_capacity(calls.len());
    for (index, call) in calls.into_iter().enumerate() {
        positions.push(call.positions);
        let nodes = Arc::clone(nodes);
        asked.spawn(async move { (index, nodes.ask_all::<Vec<u8>>(&call.request, "").await) });
    }
    let mut answers = vec![vec![None; keys]; nodes.len()];
    while let Some(Ok((index, per_node))) = asked.join_next().await {
        for (node, replies) in per_node.into_iter().enumerate() {
            let Some(Ok(replies)) = replies else { continue };
            for (&position, reply) in positions[index].iter().zip(replies) {
                answers[node][position] = Some(i64::from(reply == b'1'));
            }
        }
    }
    answers
}

/// When each renewed lease is due. Leases of one length are renewed in the order they were
/// granted or last renewed, so each length has a queue that stays in due order by itself:
/// taking and adding a lease costs no search. A retry after a batch too few nodes answered is
/// due off that order, and waits in a small set of its own.
#[derive(Default)]
struct Schedule {
    /// Per renewal period (a third of the lease), the leases in due order.
    queues: Vec<(Duration, VecDeque<(Instant, Place)>)>,
    retries: BTreeSet<(Instant, Duration, Place)>,
}

impl Schedule {
    fn push(&mut self, period: Duration, due: Instant, place: Place) {
        let at = match self.queues.iter().position(|(p, _)| *p == period) {
            Some(at) => at,
            None => {
                self.queues.push((period, VecDeque::new()));
                self.queues.len() - 1
            }
        };
        self.queues[at].1.push_back((due, place));
    }

    fn retry(&mut self, period: Duration, due: Instant, place: Place) {
        self.retries.insert((due, period, place));
    }

    /// When the next lease is due.
    fn next(&self) -> Option<Instant> {
        let queued = self
            .queues
            .iter()
            .filter_map(|(_, q)| q.front().map(|(due, _)| *due));
        queued
            .chain(self.retries.first().map(|(due, ..)| *due))
            .min()
    }

    /// Takes every lease due by now, and those due within a quarter of their period (a
    /// twelfth of the lease), so that leases taken at nearby moments share one call. A lease
    /// queued slightly out of order (its grant's reply came late) waits at most for the one
    /// before it.
    /// Each lease length's leases due go together, since one call renews leases of one
    /// length; a retry is sent with the leases of its length.
    fn take_due(&mut self, now: Instant, due: &mut Vec<(Duration, Vec<Place>)>) {
        for (period, queue) in &mut self.queues {
            let horizon = now + *period / 4;
            let mut places = Vec::new();
            while queue.front().is_some_and(|(at, _)| *at <= horizon) {
                if let Some((_, place)) = queue.pop_front() {
                    places.push(place);
                }
            }
            if !places.is_empty() {
                due.push((*period, places));
            }
        }
        while let Some(&(at, period, place)) = self.retries.first() {
            if at > now {
                break;
            }
            self.retries.pop_first();
            match due.iter_mut().find(|(p, _)| *p == period) {
                Some((_, places)) => places.push(place),
                None => due.push((period, vec![place])),
            }
        }
    }
}

struct Renewals {
    nodes: Arc<Nodes>,
    batch: usize,
    drift: Drift,
    /// Every lease watched, by slot; `free` lists the empty slots.
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Each watched lease's slot, by lease id: for `forget`, once per unlock.
    by_id: HashMap<u64, usize>,
    schedule: Schedule,
    in_flight: JoinSet<BatchOutcome>,
}

async fn run(
    mut commands: mpsc::UnboundedReceiver<Command>,
    nodes: Arc<Nodes>,
    batch: usize,
    drift: Drift,
) {
    let mut renewals = Renewals {
        nodes,
        batch,
        drift,
        slots: Vec::new(),
        free: Vec::new(),
        by_id: HashMap::new(),
        schedule: Schedule::default(),
        in_flight: JoinSet::new(),
    };
    let mut releases = JoinSet::new();
    loop {
        let next_due = renewals.schedule.next();
        let step = {
            let command = pin!(async { Step::Command(commands.recv().await) });
            let due = pin!(async {
                sleep_until_due(next_due).await;
                Step::Due
            });
            let done = pin!(async {
                match renewals.in_flight.join_next().await {
                    Some(done) => Step::Done(done),
                    // Nothing in flight: only a command or a due renewal can come next.
                    None => std::future::pending().await,
                }
            });
            let released = pin!(async {
                match releases.join_next().await {
                    Some(_) => Step::Released,
                    None => std::future::pending().await,
                }
            });
            race::first([command as Branch<'_, _>, due, done, released]).await
        };
        match step {
            Step::Command(Some(Command::Watch(watched))) => renewals.watch(watched),
            Step::Command(Some(Command::Forget(id))) => renewals.forget(id),
            Step::Command(Some(Command::Release(release))) => {
                releases.spawn(release);
            }
            Step::Command(Some(Command::ShutDown(last))) => {
                return finish(commands, releases, last).await;
            }
            Step::Command(None) => {
                // Every handle is gone, guards included: the releases go on without us.
                releases.detach_all();
                break;
            }
            Step::Due => renewals.send_due(),
            Step::Done(Ok(outcome)) => renewals.apply(outcome),
            Step::Done(Err(_)) | Step::Released => {}
        }
    }
}

/// What woke the keeper task.
enum Step {
    /// A guard's command, or `None` when every handle is gone.
    Command(Option<Command>),
    /// The earliest renewal is due.
    Due,
    /// A batch of renewals finished (or its task failed).
    Done(Result<BatchOutcome, tokio::task::JoinError>),
    /// A background release finished.
    Released,
}

async fn sleep_until_due(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

impl Renewals {
    fn watch(&mut self, watched: Watched) {
        let id = watched.lease.id();
        let conn = self.nodes.first();
        let mut encoded = watched
            .renewals
            .iter()
            .map(|r| Encoded::new(r, conn.shard_of(&r.key)));
        // Every kind renews at least one key.
        let Some(first) = encoded.next() else {
            return;
        };
        let entry = Entry {
            id,
            first,
            more: encoded.collect(),
            lease: watched.lease,
            renewing: None,
        };
        let period = entry.lease.lease() / 3;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(entry);
                slot
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.by_id.insert(id, slot);
        // From the send, as the validity deadline: timed from the reply instead, the renewal
        // would come a round trip later than the lease allows for.
        self.schedule
            .push(period, watched.granted_at + period, Place { slot, id });
    }

    fn forget(&mut self, id: u64) {
        if let Some(slot) = self.by_id.remove(&id) {
            self.vacate(slot);
        }
    }

    fn vacate(&mut self, slot: usize) {
        if let Some(place) = self.slots.get_mut(slot) {
            *place = None;
            self.free.push(slot);
        }
    }

    /// The lease at `place`, if it is still the one watched there.
    fn entry(&mut self, place: Place) -> Option<&mut Entry> {
        self.slots
            .get_mut(place.slot)?
            .as_mut()
            .filter(|entry| entry.id == place.id)
    }

    /// Sends every lease that is due (see [`Schedule::take_due`]), in batches of one length.
    fn send_due(&mut self) {
        let mut due = Vec::new();
        self.schedule.take_due(Instant::now(), &mut due);
        for (period, mut places) in due {
            places.retain(|&place| self.entry(place).is_some_and(|e| e.renewing.is_none()));
            for chunk in places.chunks(self.batch) {
                self.send_batch(period * 3, chunk.to_vec());
            }
        }
    }

    /// One script call for these leases on a single deployment; one per shard where the
    /// deployment shards keys (a script may only touch keys of one slot there). Each call's
    /// reply has one entry per key, in order. The calls are `EVALSHA`s written straight from
    /// each lease's encoded keys and arguments.
    fn send_batch(&mut self, lease: Duration, places: Vec<Place>) {
        // Per shard: the leases' key indices, in batch order, and the bytes of their keys and
        // arguments, so that each command is written once into a buffer of its size.
        let mut shards: Vec<ShardCall> = Vec::new();
        let mut keys_per_lease = Vec::with_capacity(places.len());
        let mut position = 0;
        for place in &places {
            let Some(entry) = self.entry(*place) else {
                keys_per_lease.push(0);
                continue;
            };
            entry.renewing = Some(entry.lease.hold().renewing());
            let mut keys = 0;
            for (key, encoded) in entry.keys().enumerate() {
                let (bytes, shard) = (encoded.bytes.len(), &encoded.shard);
                keys += 1;
                let at = match shards.iter().position(|call| call.shard == *shard) {
                    Some(at) => at,
                    None => {
                        shards.push(ShardCall {
                            shard: *shard,
                            keys: Vec::new(),
                            bytes: 0,
                        });
                        shards.len() - 1
                    }
                };
                shards[at].keys.push((place.slot, key, position));
                shards[at].bytes += bytes;
                position += 1;
            }
            keys_per_lease.push(keys);
        }
        let script = RENEW_BATCH.plain();
        let lease_ms = options::millis(lease);
        let calls = shards
            .into_iter()
            .map(|ShardCall { keys, bytes, .. }| {
                let mut command = redis::Cmd::with_capacity(4 + 2 * keys.len(), bytes + 64);
                command
                    .arg("EVALSHA")
                    .arg(script.get_hash())
                    .arg(keys.len());
                // The keys first, then the argument after the lease: EVALSHA's order.
                for &(slot, key, _) in &keys {
                    if let Some(encoded) = self.slots[slot].as_ref().and_then(|e| e.key(key)) {
                        command.arg(encoded.key());
                    }
                }
                command.arg(lease_ms);
                for &(slot, key, _) in &keys {
                    if let Some(encoded) = self.slots[slot].as_ref().and_then(|e| e.key(key)) {
                        command.arg(encoded.argument());
                    }
                }
                Call {
                    request: Request::evalsha(command, script),
                    positions: keys.into_iter().map(|(_, _, position)| position).collect(),
                }
            })
            .collect();
        let nodes = Arc::clone(&self.nodes);
        self.in_flight.spawn(async move {
            let sent_at = Instant::now();
            let answers = ask_calls(&nodes, calls, position).await;
            BatchOutcome {
                sent_at,
                lease,
                verdicts: verdicts(&nodes, &answers, &keys_per_lease),
                places,
            }
        });
    }

    fn apply(&mut self, outcome: BatchOutcome) {
        let BatchOutcome {
            sent_at,
            lease: length,
            places,
            verdicts,
        } = outcome;
        let now = Instant::now();
        let period = length / 3;
        // Every lease of the batch has one length, and the client one drift: one validity for
        // them all.
        let valid = valid_until(sent_at, length, self.drift);
        for (i, place) in places.into_iter().enumerate() {
            let Some(entry) = self.entry(place) else {
                continue;
            };
            // Borrowed, not cloned: a clone's reference count is a write to a line the
            // holder's task shares, and at scale that miss costs more than the rest.
            let lease = &*entry.lease;
            let verdict = verdicts.get(i).copied().flatten();
            let next = match verdict {
                Some(true) if lease.renewed_until(now, valid) => Some((sent_at + period, false)),
                Some(true) => None,
                Some(false) => {
                    lease.mark_lost(Lost::Revoked);
                    None
                }
                None if now >= lease.deadline() || lease.is_lost() => {
                    lease.mark_lost(Lost::Expired);
                    None
                }
                // Too few nodes answered: try again well before the deadline.
                None => {
                    let left = lease.deadline().saturating_duration_since(now);
                    let wait = (left / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    Some((now + wait, true))
                }
            };
            if let Some(renewing) = entry.renewing.take() {
                renewing.ended(verdict == Some(true), lease.is_lost());
            }
            match next {
                Some((due, false)) => self.schedule.push(period, due, place),
                Some((due, true)) => self.schedule.retry(period, due, place),
                None => {
                    self.by_id.remove(&place.id);
                    self.vacate(place.slot);
                }
            }
        }
    }
}

/// One shard's part of a batch: its leases' keys as (slot, key index, position in the batch)
/// and the bytes of their keys and arguments.
struct ShardCall {
    shard: Option<Slot>,
    keys: Vec<(usize, usize, usize)>,
    bytes: usize,
}

/// The batch renewal's script, run directly against a real server.
#[cfg(test)]
mod tests {
    use fencelock_testkit::RedisServer;
    use redis::aio::MultiplexedConnection;

    use super::*;
    use crate::testing::{conn, pttl};

    #[test]
    fn the_schedule_takes_what_is_due_within_a_quarter_period_in_order() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let place = |slot| Place {
            slot,
            id: slot as u64,
        };
        let mut schedule = Schedule::default();
        assert_eq!(schedule.next(), None);
        // Two lease lengths: periods of 300 ms and of 3 s.
        schedule.push(ms(300), start + ms(100), place(0));
        schedule.push(ms(300), start + ms(200), place(1));
        schedule.push(ms(3_000), start + ms(150), place(2));
        schedule.push(ms(300), start + ms(400), place(3));
        schedule.retry(ms(300), start + ms(50), place(4));
        assert_eq!(schedule.next(), Some(start + ms(50)));
        let mut due = Vec::new();
        schedule.take_due(start + ms(60), &mut due);
        // The 300 ms queue reaches 75 ms ahead, the 3 s one 750 ms; the retry by its time,
        // with the leases of its length.
        assert_eq!(
            due,
            [
                (ms(300), vec![place(0), place(4)]),
                (ms(3_000), vec![place(2)])
            ]
        );
        assert_eq!(schedule.next(), Some(start + ms(200)));
        due.clear();
        schedule.take_due(start + ms(130), &mut due);
        assert_eq!(due, [(ms(300), vec![place(1)])]);
        due.clear();
        schedule.take_due(start + ms(400), &mut due);
        assert_eq!(due, [(ms(300), vec![place(3)])]);
        assert_eq!(schedule.next(), None);
    }

    #[tokio::test]
    async fn batch_renewal_renews_only_what_each_holder_still_holds() {
        let server = RedisServer::start();
        let mut c = conn(&server).await;
        let run = |c: &mut MultiplexedConnection, cmd: &[&str]| {
            let mut c = c.clone();
            let mut command = redis::cmd(cmd[0]);
            for arg in &cmd[1..] {
                command.arg(*arg);
            }
            async move { command.exec_async(&mut c).await.expect("setup command") }
        };
        run(&mut c, &["SET", "v:{1}", "a:1", "PX", "1000"]).await;
        run(&mut c, &["SET", "v:{2}", "x:2", "PX", "1000"]).await;
        run(&mut c, &["HSET", "v:{3}", "f", "v"]).await;
        run(&mut c, &["HSET", "h:{1}", "a:", "1"]).await;
        run(&mut c, &["PEXPIRE", "h:{1}", "1000"]).await;
        // Per-holder expiries: live for a second more for a:, already passed for b:.
        let (secs, micros): (i64, i64) =
            redis::cmd("TIME").query_async(&mut c).await.expect("time");
        let soon = secs * 1000 + micros / 1000 + 1000;
        let ahead = soon.to_string();
        let ahead = ahead.as_str();
        run(&mut c, &["HSET", "he:{1}", "a:", ahead, "b:", "1"]).await;
        run(&mut c, &["PEXPIRE", "he:{1}", "1000"]).await;
        run(&mut c, &["ZADD", "z:{1}", ahead, "a:", "1", "b:"]).await;
        run(&mut c, &["PEXPIRE", "z:{1}", "1000"]).await;
        let renewed: String = RENEW_BATCH
            .plain()
            .key("v:{1}")
            .key("v:{2}")
            .key("v:{3}")
            .key("v:{4}")
            .key("h:{1}")
            .key("h:{1}")
            .key("he:{1}")
            .key("z:{1}")
            .key("z:{1}")
            .key("he:{1}")
            .key("z:{1}")
            .arg(30_000)
            .arg("va:")
            .arg("va:")
            .arg("va:")
            .arg("va:")
            .arg("ha:")
            .arg("hc:")
            .arg("ea:")
            .arg("za:")
            .arg("zc:")
            .arg("eb:")
            .arg("zb:")
            .invoke_async(&mut c)
            .await
            .expect("a wrong-typed key does not fail the batch");
        assert_eq!(renewed, "10001011000");
        for key in ["v:{1}", "h:{1}", "he:{1}", "z:{1}"] {
            assert!(pttl(&mut c, key).await > 1000, "{key} renewed");
        }
        assert!(
            pttl(&mut c, "v:{2}").await <= 1000,
            "a foreign value is untouched"
        );
        // Per-holder expiries: the renewed holder's moves to the server's now + lease; the
        // ended holder's is not revived.
        let expiries: Vec<i64> = redis::cmd("HMGET")
            .arg("he:{1}")
            .arg("a:")
            .arg("b:")
            .query_async(&mut c)
            .await
            .expect("hmget");
        assert!(
            expiries[0] > soon + 20_000 && expiries[1] == 1,
            "{expiries:?}"
        );
        let score: f64 = redis::cmd("ZSCORE")
            .arg("z:{1}")
            .arg("a:")
            .query_async(&mut c)
            .await
            .expect("zscore");
        assert!(score > (soon + 20_000) as f64);

        // Another library's value is renewed only when it is the token, exactly: its tokens
        // carry no end mark, so one may start another.
        run(&mut c, &["SET", "x:{1}", "abc", "PX", "1000"]).await;
        run(&mut c, &["SET", "x:{2}", "abcdef", "PX", "1000"]).await;
        let renewed: String = RENEW_BATCH
            .plain()
            .key("x:{1}")
            .key("x:{2}")
            .arg(30_000)
            .arg("xabc")
            .arg("xabc")
            .invoke_async(&mut c)
            .await
            .expect("renew");
        assert_eq!(renewed, "10", "exact values only");

        // An offer a release made to a token is not renewed until its waiter claims it; a claimed
        // one is.
        run(&mut c, &["SET", "o:{1}", "tok:17+?:host", "PX", "1000"]).await;
        run(&mut c, &["SET", "o:{2}", "tok:17+:host", "PX", "1000"]).await;
        let renewed: String = RENEW_BATCH
            .plain()
            .key("o:{1}")
            .key("o:{2}")
            .arg(30_000)
            .arg("vtok:")
            .arg("vtok:")
            .invoke_async(&mut c)
            .await
            .expect("renew");
        assert_eq!(renewed, "01", "an unclaimed offer is not renewed");
        assert!(
            pttl(&mut c, "x:{2}").await <= 1000,
            "a longer token untouched"
        );

        // A renewal never shortens: an expiry an extension moved beyond the renewal's lease
        // stays where it is, for a key and for a holder.
        let far = soon + 3_600_000;
        run(&mut c, &["SET", "v:{5}", "a:1", "PX", "3600000"]).await;
        run(&mut c, &["HSET", "he:{5}", "a:", &far.to_string()]).await;
        run(&mut c, &["PEXPIRE", "he:{5}", "3600000"]).await;
        let renewed: String = RENEW_BATCH
            .plain()
            .key("v:{5}")
            .key("he:{5}")
            .arg(30_000)
            .arg("va:")
            .arg("ea:")
            .invoke_async(&mut c)
            .await
            .expect("renewal");
        assert_eq!(renewed, "11");
        for key in ["v:{5}", "he:{5}"] {
            assert!(
                pttl(&mut c, key).await > 3_500_000,
                "{key} kept its extension"
            );
        }
        let kept: i64 = redis::cmd("HGET")
            .arg("he:{5}")
            .arg("a:")
            .query_async(&mut c)
            .await
            .expect("hget");
        assert_eq!(kept, far);
    }
}
