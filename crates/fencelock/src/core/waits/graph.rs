//! The wait-for graph: who holds each lock and who waits for it, by the records and by what
//! Redis holds, and the deadlocks among them.
//!
//! A set of waiting tasks is deadlocked when every holder of everything each of them waits for
//! is itself one of them: then none can ever go on. For a lock one task holds at a time that
//! needs one record naming the hold; for a semaphore or a read-write lock, records naming as
//! many holds as Redis keeps. A holder that recorded no wait (it runs, or waits without the
//! check) takes its waiters out of the set: it may release. Each cycle inside the set is
//! reported.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::core::stored::LockInfo;
use crate::core::waits::holders::Holders;
use crate::core::waits::record::{read_records, Wait};
use crate::cycle::{CycleStep, LockKind, TaskId, WaitCycle};
use crate::error::Result;
use crate::token::Fence;
use crate::transport::conn::Conn;

/// Every lock with holders or recorded waiters, who holds it and who waits for it, and the
/// deadlocks among them: what [`Client::wait_graph`](crate::Client::wait_graph) returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitGraph {
    /// Each lock, by name then kind.
    pub locks: Vec<LockWaits>,
    /// Each deadlock found, the one whose first wait began first first.
    pub cycles: Vec<WaitCycle>,
    /// `false` when there were more recorded waits than
    /// [`MAX_RECORDED_WAITS`](crate::MAX_RECORDED_WAITS): the graph shows part of them.
    pub complete: bool,
    /// Waiters Redis shows that recorded no wait, in all ([`LockWaits::unrecorded`]): a
    /// deadlock through them cannot be seen.
    pub unrecorded: u64,
}

impl WaitGraph {
    /// What the graph can say of deadlocks: a cycle it found, none, or none among the waits it
    /// could see while some waiters recorded none (they have waited less than their client's
    /// [`record_waits`](crate::ClientOptions::record_waits), or record nothing) or more waits
    /// were recorded than it read.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let graph = client.wait_graph("*").await?;
    /// assert_eq!(graph.verdict(), fencelock::Verdict::NoDeadlock);
    /// # Ok(())
    /// # }
    /// ```
    pub fn verdict(&self) -> Verdict {
        if !self.cycles.is_empty() {
            Verdict::Deadlock
        } else if self.unrecorded > 0 || !self.complete {
            Verdict::Unknown
        } else {
            Verdict::NoDeadlock
        }
    }
}

/// What a [`WaitGraph`] can say of deadlocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It found at least one cycle of waits.
    Deadlock,
    /// Every waiter Redis shows recorded its wait, every record was read, and no cycle is
    /// among them.
    NoDeadlock,
    /// No cycle among the waits it read, but it could not see them all: some waiters recorded
    /// no wait yet, or too many were recorded to read.
    Unknown,
}

/// One lock of a [`WaitGraph`]: its holders and its waiters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockWaits {
    /// The lock's name.
    pub name: String,
    /// Its kind.
    pub kind: LockKind,
    /// What inspection reads of it ([`Client::locks`](crate::Client::locks)); `None` when Redis holds no hold of it
    /// (a lock released while its waiters were read).
    pub info: Option<LockInfo>,
    /// Its holders: each task whose wait record names a hold of it, then each label Redis
    /// keeps for a hold no record names.
    pub holders: Vec<GraphHolder>,
    /// The waiters that recorded their wait for it.
    pub waiters: Vec<GraphWaiter>,
    /// The waiters Redis shows for it that recorded no wait: for a mutex or a fair mutex, the
    /// places beyond the recorded waiters; for the other kinds, the clients listening for its
    /// releases beyond those of the recorded waiters (a client stays subscribed a few wake
    /// fallbacks after its last wait, so this may count one that no longer waits).
    pub unrecorded: u64,
}

/// A holder in a [`WaitGraph`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphHolder {
    /// The holding task, when it recorded a wait of its own (else its task is not known).
    pub task: Option<TaskId>,
    /// Its client's label, when known.
    pub label: Option<String>,
    /// When the hold was granted, from its fence (the server's clock at the grant), for the
    /// kinds whose one holder's fence Redis keeps.
    pub since: Option<SystemTime>,
    /// The hold's fence, where Redis keeps it.
    pub fence: Option<Fence>,
}

/// A waiter in a [`WaitGraph`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphWaiter {
    /// The waiting task.
    pub task: TaskId,
    /// Its client's label, when it has one.
    pub label: Option<String>,
    /// When its wait began, by its client's clock.
    pub since: SystemTime,
    /// How long it had waited when the graph was read, by this client's clock.
    pub waited: Duration,
    /// The tasks it waits for: the holders of the lock that recorded a wait of their own.
    pub waits_for: Vec<TaskId>,
}

/// The graph of the locks `listing` lists (the façade's walk of every kind's storage) and of
/// every record under `prefix`; a lock a record waits for that the listing left out (outside
/// its pattern, or released since) is read by name through `holders`. `page` is told how many
/// keys each `SCAN` call of the records' walk returned.
pub(crate) async fn read(
    conn: &Conn,
    prefix: &str,
    holders: &dyn Holders,
    listing: impl Future<Output = Result<Vec<LockInfo>>>,
    page: &(dyn Fn(usize) + Sync),
) -> Result<WaitGraph> {
    let (records, complete) = read_records(conn, prefix, page).await?;
    let mut infos = listing.await?;
    let listed: BTreeSet<(LockKind, String)> =
        infos.iter().map(|i| (i.kind, i.name.clone())).collect();
    let extra: BTreeSet<String> = records
        .iter()
        .flat_map(|record| &record.waits_for)
        .filter(|wanted| !listed.contains(*wanted))
        .map(|(_, name)| name.clone())
        .collect();
    for info in holders
        .held(conn, prefix, extra.into_iter().collect())
        .await?
    {
        if !listed.contains(&(info.kind, info.name.clone())) {
            infos.push(info);
        }
    }
    Ok(graph(records, infos, complete, SystemTime::now()))
}

/// The tasks holding each lock, by the records, when they are all its holders: one record of a
/// hold of a lock one holder holds at a time (which Redis must show held), or as many holds as
/// Redis keeps of a semaphore or a read-write lock; none for a lock nobody holds. `None` for a
/// lock some holder of which recorded no wait.
fn recorded_holders(
    records: &[Wait],
    infos: &[LockInfo],
) -> HashMap<(LockKind, String), Option<BTreeSet<usize>>> {
    let mut holds: HashMap<(LockKind, String), (BTreeSet<usize>, u64)> = HashMap::new();
    for (at, record) in records.iter().enumerate() {
        for held in &record.holds {
            let entry = holds.entry(held.clone()).or_default();
            entry.0.insert(at);
            entry.1 += 1;
        }
    }
    let stored: HashMap<(LockKind, &str), u64> = infos
        .iter()
        .map(|i| ((i.kind, i.name.as_str()), i.holds))
        .collect();
    let mut out = HashMap::new();
    for record in records {
        for wanted in &record.waits_for {
            let (tasks, count) = holds.get(wanted).cloned().unwrap_or_default();
            let in_redis = stored.get(&(wanted.0, wanted.1.as_str())).copied();
            // Free: held by nobody Redis or a record knows of. No obstacle (a multi-lock waits
            // for its other names).
            if tasks.is_empty() && in_redis.is_none() {
                out.insert(wanted.clone(), Some(BTreeSet::new()));
                continue;
            }
            let all_known = !tasks.is_empty()
                && match (wanted.0, in_redis) {
                    (kind, Some(_)) if kind.is_exclusive() => true,
                    (_, Some(held)) => count == held,
                    (_, None) => false,
                };
            out.insert(wanted.clone(), all_known.then_some(tasks));
        }
    }
    out
}

/// Each cycle among the deadlocked waits of `records` (see the module's documentation).
pub(crate) fn find_cycles(records: &[Wait], infos: &[LockInfo], now: SystemTime) -> Vec<WaitCycle> {
    let holders = recorded_holders(records, infos);
    // What each waiting task waits for: every holder of every lock it waits for, when all of
    // them are known.
    let waits_on: Vec<Option<BTreeMap<usize, (LockKind, String)>>> = records
        .iter()
        .map(|record| {
            let mut on = BTreeMap::new();
            for wanted in &record.waits_for {
                for &holder in holders.get(wanted)?.as_ref()? {
                    on.entry(holder).or_insert_with(|| wanted.clone());
                }
            }
            (!on.is_empty()).then_some(on)
        })
        .collect();
    let mut stuck: BTreeSet<usize> = (0..records.len())
        .filter(|&at| waits_on[at].is_some())
        .collect();
    loop {
        let free: Vec<usize> = stuck
            .iter()
            .copied()
            .filter(|at| {
                waits_on[*at]
                    .as_ref()
                    .is_some_and(|on| on.keys().any(|h| !stuck.contains(h)))
            })
            .collect();
        if free.is_empty() {
            break;
        }
        for at in free {
            stuck.remove(&at);
        }
    }
    // From each stuck task, follow the holder it waits for (the first stuck one) until a task
    // comes again: the tasks from its first visit on are a cycle.
    let mut seen: BTreeSet<Vec<usize>> = BTreeSet::new();
    let mut cycles = Vec::new();
    let mut order: Vec<usize> = stuck.iter().copied().collect();
    order.sort_by_key(|&at| (records[at].since, records[at].task.clone()));
    for start in order {
        let mut path = vec![start];
        let cycle = loop {
            let at = *path.last().unwrap_or(&start);
            let Some(next) = waits_on[at]
                .as_ref()
                .and_then(|on| on.keys().copied().find(|h| stuck.contains(h)))
            else {
                break None;
            };
            if let Some(first) = path.iter().position(|&p| p == next) {
                break Some(path.split_off(first));
            }
            path.push(next);
        };
        let Some(mut members) = cycle else { continue };
        // Starting with the task whose wait began first.
        let first = (0..members.len())
            .min_by_key(|&i| (records[members[i]].since, records[members[i]].task.clone()))
            .unwrap_or(0);
        members.rotate_left(first);
        let mut key = members.clone();
        key.sort_unstable();
        if !seen.insert(key) {
            continue;
        }
        let steps = (0..members.len())
            .filter_map(|i| {
                let (w, h) = (members[i], members[(i + 1) % members.len()]);
                let (kind, name) = waits_on[w].as_ref()?.get(&h)?.clone();
                let waiter = &records[w];
                Some(CycleStep {
                    waiter: waiter.task.clone(),
                    waiter_label: label(&waiter.label),
                    name,
                    kind,
                    since: waiter.since,
                    waited: now.duration_since(waiter.since).unwrap_or_default(),
                    holder: records[h].task.clone(),
                    holder_label: label(&records[h].label),
                })
            })
            .collect();
        cycles.push(WaitCycle::new(steps));
    }
    cycles
}

fn label(label: &str) -> Option<String> {
    (!label.is_empty()).then(|| label.to_owned())
}

/// The graph of `records` and `infos`, read at `now`.
pub(crate) fn graph(
    records: Vec<Wait>,
    infos: Vec<LockInfo>,
    complete: bool,
    now: SystemTime,
) -> WaitGraph {
    let cycles = find_cycles(&records, &infos, now);
    let mut locks: BTreeMap<(String, LockKind), LockWaits> = BTreeMap::new();
    for info in infos {
        locks.insert(
            (info.name.clone(), info.kind),
            LockWaits {
                name: info.name.clone(),
                kind: info.kind,
                info: Some(info),
                holders: Vec::new(),
                waiters: Vec::new(),
                unrecorded: 0,
            },
        );
    }
    for record in &records {
        for held in &record.holds {
            let lock = locks
                .entry((held.1.clone(), held.0))
                .or_insert_with(|| empty(held));
            if lock
                .holders
                .iter()
                .any(|h| h.task.as_ref() == Some(&record.task))
            {
                continue;
            }
            let fence = lock.info.as_ref().and_then(|i| i.fence);
            lock.holders.push(GraphHolder {
                task: Some(record.task.clone()),
                label: label(&record.label),
                since: fence.filter(|_| held.0.is_exclusive()).map(fence_time),
                fence: fence.filter(|_| held.0.is_exclusive()),
            });
        }
    }
    for lock in locks.values_mut() {
        let Some(info) = &lock.info else { continue };
        let recorded: Vec<String> = lock
            .holders
            .iter()
            .filter_map(|h| h.label.clone())
            .collect();
        let exclusive = lock.kind.is_exclusive();
        if exclusive && !lock.holders.is_empty() {
            continue;
        }
        let mut unrecorded: Vec<GraphHolder> = info
            .holders
            .iter()
            .filter(|l| !recorded.contains(l))
            .map(|l| GraphHolder {
                task: None,
                label: Some(l.clone()),
                since: info.fence.filter(|_| exclusive).map(fence_time),
                fence: info.fence.filter(|_| exclusive),
            })
            .collect();
        if unrecorded.is_empty() && lock.holders.is_empty() {
            unrecorded.push(GraphHolder {
                task: None,
                label: None,
                since: info.fence.filter(|_| exclusive).map(fence_time),
                fence: info.fence.filter(|_| exclusive),
            });
        }
        lock.holders.extend(unrecorded);
    }
    for record in &records {
        for wanted in &record.waits_for {
            let lock = locks
                .entry((wanted.1.clone(), wanted.0))
                .or_insert_with(|| empty(wanted));
            let waits_for = lock.holders.iter().filter_map(|h| h.task.clone()).collect();
            lock.waiters.push(GraphWaiter {
                task: record.task.clone(),
                label: label(&record.label),
                since: record.since,
                waited: now.duration_since(record.since).unwrap_or_default(),
                waits_for,
            });
        }
    }
    for lock in locks.values_mut() {
        lock.waiters
            .sort_by(|a, b| (a.since, &a.task).cmp(&(b.since, &b.task)));
        lock.unrecorded = unrecorded(lock);
    }
    let unrecorded = locks.values().map(|lock| lock.unrecorded).sum();
    WaitGraph {
        locks: locks.into_values().collect(),
        cycles,
        complete,
        unrecorded,
    }
}

/// How many waiters Redis shows for `lock` beyond its recorded ones: the waiting tasks a mutex
/// or fair mutex keeps a place for, exactly; for the other kinds, the more of the waiters they
/// record (a read-write lock's writers) and of the clients listening for their releases.
fn unrecorded(lock: &LockWaits) -> u64 {
    let Some(info) = &lock.info else {
        return 0;
    };
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let tasks = count(lock.waiters.len());
    let queued = info.queued.map(|queued| queued.saturating_sub(tasks));
    if matches!(lock.kind, LockKind::Mutex | LockKind::FairMutex)
        && let Some(queued) = queued
    {
        return queued;
    }
    let clients: BTreeSet<&str> = lock
        .waiters
        .iter()
        .map(|w| w.task.client.as_str())
        .collect();
    let listening = info.waiting_clients.saturating_sub(count(clients.len()));
    queued.unwrap_or(0).max(listening)
}

fn empty((kind, name): &(LockKind, String)) -> LockWaits {
    LockWaits {
        name: name.clone(),
        kind: *kind,
        info: None,
        holders: Vec::new(),
        waiters: Vec::new(),
        unrecorded: 0,
    }
}

/// A fence's time: the server's clock in microseconds at the grant (raised above the last
/// fence of the name when the clock stood still or stepped back, by a few microseconds).
fn fence_time(fence: Fence) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(fence.get())
}
