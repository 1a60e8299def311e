//! The client's one background task for leases: it renews every renewed lease in batches (one
//! script call renews up to `renew_batch` leases), and runs the best-effort releases of dropped
//! guards and cancelled acquires. A shutdown hands it the releases of every live hold; it
//! waits for those and for the releases still under way, then stops.

use std::collections::{BTreeSet, HashMap};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::core::holds::Release;
use crate::core::lease::{LeaseState, Lost};
use crate::core::nodes::Nodes;
use crate::core::observe::Renewing;
use crate::core::EXPIRIES;
use crate::race::{self, Branch};
use crate::transport::conn::Slot;
use crate::transport::script::Lua;

/// Renews many leases of any kind in one call.
static RENEW_BATCH: Lua = Lua::new(&[EXPIRIES, include_str!("renew_batch.lua")]);

/// How a primitive stores a holder, and so how the batch renewal finds and extends it (see
/// `renew_batch.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[expect(dead_code, reason = "the kinds of the primitives that follow")]
pub(crate) enum RenewKind {
    /// The key's string value starts with the member.
    Value,
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
            RenewKind::HashField => "h",
            RenewKind::HashExpiry => "he",
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
    pub(crate) fn spawn(nodes: Arc<Nodes>, batch: usize) -> Keeper {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, nodes, batch));
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

struct Entry {
    watched: Watched,
    due: Instant,
    /// The renewal in flight, if one is.
    renewing: Option<Renewing>,
}

/// The result of one batch call: when it was sent, which leases it covered, and for each lease
/// whether enough nodes renewed every one of its keys (`Some(true)`), enough nodes no longer
/// hold it (`Some(false)`), or too few answered to tell (`None`).
type BatchOutcome = (Instant, Vec<u64>, Vec<Option<bool>>);

/// One answer per lease from one node's per-key replies (`None` for a key whose call failed):
/// renewed when every key was, lost when any key is no longer held, unknown otherwise.
fn lease_answers(replies: &[Option<i64>], keys_per_lease: &[usize]) -> Vec<Option<bool>> {
    let mut replies = replies.iter();
    keys_per_lease
        .iter()
        .map(|&n| {
            let keys: Vec<Option<i64>> = replies.by_ref().take(n).copied().collect();
            if keys.iter().any(|r| matches!(r, Some(r) if *r != 1)) {
                Some(false)
            } else if keys.iter().all(Option::is_some) {
                Some(true)
            } else {
                None
            }
        })
        .collect()
}

/// Each lease's verdict over every node's per-key replies.
fn verdicts(
    nodes: &Nodes,
    answers: &[Vec<Option<i64>>],
    keys_per_lease: &[usize],
) -> Vec<Option<bool>> {
    let per_node: Vec<Vec<Option<bool>>> = answers
        .iter()
        .map(|replies| lease_answers(replies, keys_per_lease))
        .collect();
    (0..keys_per_lease.len())
        .map(|lease| {
            let said = |renewed: bool| {
                per_node
                    .iter()
                    .filter(|node| node.get(lease) == Some(&Some(renewed)))
                    .count()
            };
            nodes.verdict(said(true), said(false))
        })
        .collect()
}

/// One renewal script call: its invocation, and where each of its keys stands in the batch.
struct Call {
    invocation: ScriptInvocation<'static>,
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
        asked.spawn(async move {
            (
                index,
                nodes
                    .ask_all::<Vec<i64>>(&Arc::new(call.invocation), "")
                    .await,
            )
        });
    }
    let mut answers = vec![vec![None; keys]; nodes.len()];
    while let Some(Ok((index, per_node))) = asked.join_next().await {
        for (node, replies) in per_node.into_iter().enumerate() {
            let Some(Ok(replies)) = replies else { continue };
            for (&position, reply) in positions[index].iter().zip(replies) {
                answers[node][position] = Some(reply);
            }
        }
    }
    answers
}

struct Renewals {
    nodes: Arc<Nodes>,
    batch: usize,
    entries: HashMap<u64, Entry>,
    schedule: BTreeSet<(Instant, u64)>,
    in_flight: JoinSet<BatchOutcome>,
}

async fn run(mut commands: mpsc::UnboundedReceiver<Command>, nodes: Arc<Nodes>, batch: usize) {
    let mut renewals = Renewals {
        nodes,
        batch,
        entries: HashMap::new(),
        schedule: BTreeSet::new(),
        in_flight: JoinSet::new(),
    };
    let mut releases = JoinSet::new();
    loop {
        let next_due = renewals.schedule.first().map(|&(due, _)| due);
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
        // From the send, as the validity deadline: timed from the reply instead, the renewal
        // would come a round trip later than the lease allows for.
        let due = watched.granted_at + watched.lease.lease() / 3;
        self.schedule.insert((due, id));
        self.entries.insert(
            id,
            Entry {
                watched,
                due,
                renewing: None,
            },
        );
    }

    fn forget(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id) {
            self.schedule.remove(&(entry.due, id));
        }
    }

    /// Sends every lease that is due, plus those due within a twelfth of their lease, so that
    /// leases taken at nearby moments share one call instead of one call each.
    fn send_due(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.schedule.first() {
            let early = self
                .entries
                .get(&id)
                .map_or(Duration::ZERO, |e| e.watched.lease.lease() / 12);
            if at > now + early {
                break;
            }
            self.schedule.pop_first();
            if self.entries.contains_key(&id) {
                due.push(id);
            }
        }
        for chunk in due.chunks(self.batch) {
            self.send_batch(chunk.to_vec());
        }
    }

    /// One script call for these leases on a single deployment; one per shard where the
    /// deployment shards keys (a script may only touch keys of one slot there). Each call's
    /// reply has one entry per key, in order.
    fn send_batch(&mut self, ids: Vec<u64>) {
        let mut calls: HashMap<Option<Slot>, Call> = HashMap::new();
        let mut keys_per_lease = Vec::with_capacity(ids.len());
        let mut position = 0;
        for id in &ids {
            let Some(entry) = self.entries.get_mut(id) else {
                keys_per_lease.push(0);
                continue;
            };
            entry.renewing = Some(entry.watched.lease.hold().renewing());
            for renewal in &entry.watched.renewals {
                let shard = self.nodes.first().shard_of(&renewal.key);
                let call = calls.entry(shard).or_insert_with(|| Call {
                    invocation: RENEW_BATCH.plain().prepare_invoke(),
                    positions: Vec::new(),
                });
                call.invocation
                    .key(renewal.key.as_slice())
                    .arg(renewal.kind.code())
                    .arg(renewal.member.as_str())
                    .arg(entry.watched.lease.lease_ms());
                call.positions.push(position);
                position += 1;
            }
            keys_per_lease.push(entry.watched.renewals.len());
        }
        let nodes = Arc::clone(&self.nodes);
        let calls = calls.into_values().collect();
        self.in_flight.spawn(async move {
            let sent_at = Instant::now();
            let answers = ask_calls(&nodes, calls, position).await;
            (sent_at, ids, verdicts(&nodes, &answers, &keys_per_lease))
        });
    }

    fn apply(&mut self, (sent_at, ids, verdicts): BatchOutcome) {
        let now = Instant::now();
        for (i, id) in ids.into_iter().enumerate() {
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            let lease = Arc::clone(&entry.watched.lease);
            let verdict = verdicts.get(i).copied().flatten();
            let next = match verdict {
                Some(true) if lease.renewed(sent_at, lease.lease()) => {
                    Some(sent_at + lease.lease() / 3)
                }
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
                    Some(now + (left / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)))
                }
            };
            if let Some(renewing) = entry.renewing.take() {
                renewing.ended(verdict == Some(true), lease.is_lost());
            }
            match next {
                Some(due) => {
                    entry.due = due;
                    self.schedule.insert((due, id));
                }
                None => {
                    self.entries.remove(&id);
                }
            }
        }
    }
}
