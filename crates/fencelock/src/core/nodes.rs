//! The nodes a client's leases live on, and how many of them must agree: every deployment is a
//! quorum. One server, a Sentinel's master and a Cluster are a quorum of one, whose one answer
//! decides; RedLock is the same quorum over several independent masters, where a majority
//! decides. Acquire, extend, release, the background release and renewal go through here,
//! written once for any number of nodes; what differs between one node and several is
//! decided in this file alone.
//!
//! Every request goes to all nodes at once, each bounded by the node timeout on RedLock (the
//! connection's own response timeout on one node), so a node that is down or paused costs one
//! vote and at most one node timeout, never the whole operation. A request that gets no
//! answer is resent with the same owner token, which makes every script idempotent.
//!
//! Scripts reply by convention: acquire `{1, fence, ...}` when granted (one fence per name it
//! locks) and `{0, pttl}` when held by others (`pttl` -1 when unknown); release and extend `1`
//! done, `0` nothing held, `-1` held by another owner.

use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::core::live_holds::Release;
use crate::error::{Error, Result};
use crate::token::Fence;
use crate::transport::coalesce::Coalescer;
use crate::transport::conn::{Conn, ReplicationMark};
use crate::transport::script::{evalsha, Invocation};

/// How often one request is sent in all when no decision comes because nodes failed to
/// answer. Resending is safe because the owner token makes every script idempotent.
const SEND_ATTEMPTS: u32 = 3;

/// The pause before resending, doubled each time.
const RESEND_PAUSE: Duration = Duration::from_millis(20);

/// The longest pause between two sends of a background release that too few nodes answered.
const RELEASE_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The nodes, and the timeout of each node's answer (none on a single node, where the
/// connection's own response timeout applies).
pub(crate) struct Nodes {
    conns: Vec<Conn>,
    /// Each node's line of script calls, in node order.
    lines: Vec<Arc<Coalescer>>,
    node_timeout: Option<Duration>,
}

/// A request to send to every node, shared by the tasks that send it: a script invocation, or
/// an `EVALSHA` built ahead (the batch renewal writes its many arguments straight into one
/// command), loaded on a node that answers `NOSCRIPT`.
#[derive(Clone)]
pub(crate) struct Request(Arc<Sendable>);

enum Sendable {
    Script(Arc<Invocation>),
    Evalsha {
        command: redis::Cmd,
        script: &'static redis::Script,
    },
}

impl Request {
    /// An `EVALSHA` of `script`, its hash, key count, keys and arguments written already.
    pub(crate) fn evalsha(command: redis::Cmd, script: &'static redis::Script) -> Request {
        Request(Arc::new(Sendable::Evalsha { command, script }))
    }

    /// Sends the request on `conn`; a script call goes through the node's `line`, which
    /// coalesces it with the calls of other tasks, when one is given.
    async fn invoke<T: FromRedisValue>(
        &self,
        conn: &Conn,
        line: Option<&Arc<Coalescer>>,
    ) -> redis::RedisResult<T> {
        let reply = match (self.0.as_ref(), line) {
            (Sendable::Script(invocation), Some(line)) => line.call(conn, invocation).await?,
            (Sendable::Script(invocation), None) => invocation.invoke_async(conn).await?,
            (Sendable::Evalsha { command, script }, _) => {
                evalsha(command, script, &mut conn.clone()).await?
            }
        };
        Ok(T::from_redis_value(reply)?)
    }
}

impl From<Invocation> for Request {
    fn from(invocation: Invocation) -> Request {
        Request(Arc::new(Sendable::Script(Arc::new(invocation))))
    }
}

/// One node's answer to a request: `None` when it was not heard before the question was
/// settled (or within the node timeout), else its reply or its error.
type Answer<T> = Option<Result<T>>;

/// What an acquire request decided.
pub(crate) enum Acquired {
    /// A majority granted it within its validity: the fence of each name locked, raised on a
    /// majority when several nodes issued them.
    Granted {
        fences: Vec<Fence>,
        sent_at: Instant,
    },
    /// Held by others, for `remaining` at least when the holders said.
    Refused { remaining: Option<Duration> },
}

/// An acquire request's outcome: what it decided, and whether it left grants that do not count
/// (some nodes granted without a majority, or too late). Those the caller gives back in the
/// background, and goes on with a new token, so that a late release can never remove a later
/// grant.
pub(crate) struct Acquisition {
    pub(crate) decided: Result<Acquired>,
    pub(crate) spent: bool,
}

/// What an owner-checked request (release or extend) decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owned {
    /// A majority did it.
    Done,
    /// A majority no longer holds it for this owner.
    NotHeld,
    /// Too few of several nodes answered to tell: how many did.
    Unknown { answered: usize },
}

impl Nodes {
    /// A single node: one answer decides.
    pub(crate) fn single(conn: Conn) -> Nodes {
        Nodes {
            conns: vec![conn],
            lines: vec![Arc::default()],
            node_timeout: None,
        }
    }

    /// Independent masters, each given `node_timeout` to answer; `None` without any.
    pub(crate) fn of(conns: Vec<Conn>, node_timeout: Duration) -> Option<Nodes> {
        (!conns.is_empty()).then_some(Nodes {
            lines: conns.iter().map(|_| Arc::default()).collect(),
            conns,
            node_timeout: Some(node_timeout),
        })
    }

    /// The connection of a deployment that is one node; what only such a deployment offers
    /// (inspection, forced release, reading its settings) is refused on several masters.
    pub(crate) fn only(&self, what: &'static str) -> Result<&Conn> {
        match self.conns.as_slice() {
            [conn] => Ok(conn),
            _ => Err(Error::Unsupported {
                what,
                deployment: "a RedLock client (several independent masters)",
            }),
        }
    }

    /// Refuses a kind of lock that keeps its state on one node only, on several masters.
    pub(crate) fn accept(&self, kind: &'static str, on_several_nodes: bool) -> Result<()> {
        if on_several_nodes {
            return Ok(());
        }
        self.only(kind).map(drop)
    }

    /// The first node: every node of one client is the same kind of deployment, so it tells
    /// how they announce releases and route keys.
    pub(crate) fn first(&self) -> &Conn {
        // Both constructors make sure there is one.
        &self.conns[0]
    }

    /// How many nodes there are.
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// How many nodes must agree: more than half.
    pub(crate) fn majority(&self) -> usize {
        majority(self.conns.len())
    }

    /// Whether a waiter's place in line means something: only where one node keeps the line.
    /// Independent masters would each grant the lock to their own first waiter, each maybe
    /// a different one, so that none of them reaches a majority.
    pub(crate) fn keep_waiters_in_line(&self) -> bool {
        self.conns.len() == 1
    }

    /// Runs an acquire script until a majority decides: granted when a majority granted, their
    /// fences raised on a majority by `raise` (several nodes only: on one node the fence it
    /// issued is the one it remembers), and the grant still valid by `valid_until` of its send
    /// once decided. A grant that falls short, or a refusal decided before every node answered,
    /// comes back `spent`, for the caller to release; a grant of a majority that came too late
    /// to trust is [`Error::LateGrant`], spent too.
    pub(crate) async fn acquire(
        &self,
        acquire: &Request,
        raise: impl Fn(u64) -> Option<Invocation>,
        valid_until: impl Fn(Instant) -> Instant,
        name: &str,
    ) -> Acquisition {
        let sent = self
            .ask_resending::<Vec<i64>>(acquire, name, |answers, heard| {
                self.acquire_decided(answers, heard)
            })
            .await;
        let grants: Vec<&[i64]> = granted(&sent.answers).collect();
        let grants_count = grants.len();
        if grants.len() >= self.majority()
            && let Some(fences) = self.fences(&grants, &raise, name).await
        {
            if Instant::now() < valid_until(sent.at) {
                return Acquisition {
                    decided: Ok(Acquired::Granted {
                        fences,
                        sent_at: sent.at,
                    }),
                    spent: false,
                };
            }
            // A grant, but too late to trust: the caller gives it back. No refusal is
            // behind it, so it is no sign of another holder.
            return Acquisition {
                decided: Err(Error::LateGrant {
                    name: name.to_owned(),
                    took: sent.at.elapsed(),
                }),
                spent: true,
            };
        }
        // A refusal decided before every node answered: a node not heard from may still
        // grant the request, and nothing else would release that grant.
        let unheard = sent.answers.iter().any(|a| !matches!(a, Some(Ok(_))));
        let decided = self.refused(sent.answers, grants_count, name);
        Acquisition {
            spent: grants_count > 0 || (unheard && decided.is_ok()),
            decided,
        }
    }

    /// Whether the answers so far decide an acquire as [`refused`](Nodes::refused) reads
    /// them: granted by a majority; refused by a majority of answers once a majority of
    /// grants is out of reach; or short of a majority of answers for good, too many nodes
    /// having failed. Until then the silent nodes are waited for, each for at most the node
    /// timeout: settling as soon as a grant is out of reach would report a lock held elsewhere
    /// as [`Error::NoQuorum`] whenever a node fails faster than the others refuse.
    fn acquire_decided(&self, answers: &[Answer<Vec<i64>>], heard: usize) -> bool {
        let yes = granted(answers).count();
        let answered = answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count();
        yes >= self.majority()
            || (self.settles(yes, heard) && answered >= self.majority())
            || heard - answered > self.conns.len() - self.majority()
    }

    /// The decision of an acquire that was not granted: refused when enough nodes answered,
    /// with the soonest a holder's lease ends (unknown if any holder did not say).
    fn refused(
        &self,
        answers: Vec<Answer<Vec<i64>>>,
        grants: usize,
        name: &str,
    ) -> Result<Acquired> {
        let mut refusals = Vec::with_capacity(answers.len());
        for reply in answers.iter().filter_map(|a| a.as_ref()?.as_ref().ok()) {
            match *reply.as_slice() {
                [1, ..] => {}
                [0, pttl] => refusals.push(u64::try_from(pttl).ok().map(Duration::from_millis)),
                _ => {
                    return Err(Error::UnexpectedReply {
                        detail: format!("acquire replied {reply:?}"),
                    })
                }
            }
        }
        if grants + refusals.len() >= self.majority() {
            let remaining = refusals
                .into_iter()
                .collect::<Option<Vec<Duration>>>()
                .and_then(|r| r.into_iter().min());
            return Ok(Acquired::Refused { remaining });
        }
        Err(self.undecided(answers, name))
    }

    /// The fence of each name a majority granted: the highest any of them issued, remembered
    /// on a majority when several nodes issued fences, so that any later majority includes a
    /// node that issues a higher one. `None` when fewer than a majority remembered it.
    async fn fences(
        &self,
        granted: &[&[i64]],
        raise: &impl Fn(u64) -> Option<Invocation>,
        name: &str,
    ) -> Option<Vec<Fence>> {
        let names = granted.iter().map(|g| g.len() - 1).min()?;
        let highest: Vec<u64> = (1..=names)
            .map(|i| {
                granted
                    .iter()
                    .map(|g| g[i].unsigned_abs())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        if self.conns.len() > 1 {
            let [fence] = highest.as_slice() else {
                // Only locks of one name run on several nodes.
                return None;
            };
            let remembered = |answers: &[Answer<i64>]| {
                answers.iter().filter(|a| matches!(a, Some(Ok(1)))).count()
            };
            let answers = self
                .ask::<i64>(&Request::from(raise(*fence)?), name, |answers, heard| {
                    self.settles(remembered(answers), heard)
                })
                .await;
            if remembered(&answers) < self.majority() {
                return None;
            }
        }
        Some(highest.into_iter().map(Fence::new).collect())
    }

    /// Runs an owner-checked script (release or extend) until a majority answered the same
    /// way, resending while too few answered. After a resend, a node that finds nothing held
    /// counts as done when `freed_by_first_send` says so: the first send, whose reply was
    /// lost, released it.
    pub(crate) async fn owned(
        &self,
        request: &Request,
        name: &str,
        freed_by_first_send: impl Fn() -> bool,
    ) -> Result<Owned> {
        let sent = self
            .ask_resending::<i64>(request, name, |answers, heard| {
                let (yes, no) = tally(answers, false);
                self.verdict(yes, no).is_some() || self.settles(yes, heard)
            })
            .await;
        let (yes, no) = tally(&sent.answers, sent.resent && freed_by_first_send());
        match self.verdict(yes, no) {
            Some(true) => Ok(Owned::Done),
            Some(false) => Ok(Owned::NotHeld),
            None if self.conns.len() == 1 => Err(self.undecided(sent.answers, name)),
            None => Ok(Owned::Unknown { answered: yes + no }),
        }
    }

    /// The release of a grant that no caller waits for, for a dropped guard, a cancelled or
    /// refused acquire, or a shutdown: sent to every node when run, and on several nodes once
    /// more after a node timeout, for acquire requests still on their way to a slow node.
    /// While too few nodes answer, it is sent again, with pauses that double up to
    /// [`RELEASE_PAUSE_MAX`], until a majority answered or `lease` has passed (after which
    /// whatever the grant held has ended by itself). Answered when a majority answered.
    pub(crate) fn release_of(
        self: &Arc<Self>,
        release: Invocation,
        name: String,
        lease: Duration,
    ) -> Release {
        let nodes = Arc::clone(self);
        let release = Request::from(release);
        Box::pin(async move {
            let until = Instant::now() + lease;
            let mut pause = RESEND_PAUSE;
            let mut via = Via::Line;
            loop {
                let answered = nodes
                    .ask_via::<i64>(&release, &name, |_, _| false, via)
                    .await
                    .iter()
                    .filter(|a| matches!(a, Some(Ok(_))))
                    .count();
                if let Some(pause) = nodes.node_timeout {
                    tokio::time::sleep(pause).await;
                    nodes.ask_all::<i64>(&release, &name).await;
                }
                if answered >= nodes.majority() {
                    return true;
                }
                if Instant::now() + pause >= until {
                    return false;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RELEASE_PAUSE_MAX);
                // The first send went through the line, after the acquire it gives back: the
                // next ones cannot overtake it, and so keep out of other tasks' way.
                via = Via::Aside;
            }
        })
    }

    /// Each node's [`ReplicationMark`], taken before a write whose replication
    /// [`replicas_acknowledged`](Self::replicas_acknowledged) will wait for.
    pub(crate) fn replication_marks(&self) -> Vec<ReplicationMark> {
        self.conns.iter().map(Conn::replication_mark).collect()
    }

    /// Waits until `replicas` replicas of each node that granted acknowledged what was written
    /// to it since `marks`, at most `timeout`: how many the fewest-acknowledged of a majority
    /// did.
    pub(crate) async fn replicas_acknowledged(
        &self,
        route_key: &[u8],
        replicas: usize,
        timeout: Duration,
        marks: &[ReplicationMark],
        name: &str,
    ) -> Result<usize> {
        let mut acknowledged = Vec::with_capacity(self.conns.len());
        let mut failure = None;
        for (i, conn) in self.conns.iter().enumerate() {
            let mark = marks.get(i).copied().unwrap_or_default();
            match conn
                .clone()
                .wait_for_replicas(route_key, replicas, timeout, mark)
                .await
            {
                Ok(n) => acknowledged.push(n),
                Err(e) => failure = Some(Error::from_redis(e, name)),
            }
        }
        if acknowledged.len() < self.majority() {
            return Err(failure.unwrap_or(Error::NoQuorum {
                name: name.to_owned(),
                answered: acknowledged.len(),
                needed: self.majority(),
            }));
        }
        acknowledged.sort_unstable_by(|a, b| b.cmp(a));
        Ok(acknowledged[self.majority() - 1])
    }

    /// Runs `invocation` on every node at once, until `settled` says the answers so far decide
    /// the question, or every node was heard. Each node's answer is in node order; errors name
    /// the lock `name`. On several nodes the requests of unsettled nodes go on in the
    /// background, each bounded by the node timeout.
    pub(crate) async fn ask<T>(
        &self,
        invocation: &Request,
        name: &str,
        settled: impl Fn(&[Answer<T>], usize) -> bool,
    ) -> Vec<Answer<T>>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.ask_via(invocation, name, settled, Via::Line).await
    }

    /// [`ask`](Nodes::ask) through each node's line of calls, or beside it.
    async fn ask_via<T>(
        &self,
        invocation: &Request,
        name: &str,
        settled: impl Fn(&[Answer<T>], usize) -> bool,
        via: Via,
    ) -> Vec<Answer<T>>
    where
        T: FromRedisValue + Send + 'static,
    {
        let named = |reply: redis::RedisResult<T>| reply.map_err(|e| Error::from_redis(e, name));
        if let ([conn], [line]) = (self.conns.as_slice(), self.lines.as_slice()) {
            // One node: its answer decides, with nothing to wait for beside it.
            let reply = invocation.invoke::<T>(conn, via.line(line)).await;
            return vec![Some(named(reply))];
        }
        let (answered, mut answers_rx) = mpsc::unbounded_channel();
        for (node, (conn, line)) in self.conns.iter().zip(&self.lines).enumerate() {
            let request = invocation.clone();
            let conn = conn.clone();
            let line = Arc::clone(line);
            let answered = answered.clone();
            let node_timeout = self.node_timeout;
            tokio::spawn(async move {
                let reply = request.invoke::<T>(&conn, via.line(&line));
                let answer = match node_timeout {
                    Some(limit) => tokio::time::timeout(limit, reply).await.ok(),
                    None => Some(reply.await),
                };
                let _ = answered.send((node, answer));
            });
        }
        drop(answered);
        let mut answers: Vec<Answer<T>> = self.conns.iter().map(|_| None).collect();
        let mut heard = 0;
        while let Some((node, answer)) = answers_rx.recv().await {
            heard += 1;
            if let Some(slot) = answers.get_mut(node) {
                *slot = answer.map(named);
            }
            if heard == answers.len() || settled(&answers, heard) {
                break;
            }
        }
        answers
    }

    /// [`ask`](Nodes::ask) until every node answered or timed out.
    pub(crate) async fn ask_all<T>(&self, invocation: &Request, name: &str) -> Vec<Answer<T>>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.ask(invocation, name, |_, _| false).await
    }

    /// The one node's answer to `request`, asked as lease requests are: through the node's line,
    /// sent again while the node cannot be reached. For the own scripts of kinds that run on
    /// one node; on several it is the first node's answer.
    pub(crate) async fn call<T>(&self, request: &Request, name: &str) -> Result<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        let only_first = |answers: &[Answer<T>], _| answers.first().is_some_and(Option::is_some);
        let sent = self.ask_resending(request, name, only_first).await;
        match sent.answers.into_iter().next() {
            Some(Some(reply)) => reply,
            _ => Err(Error::NoQuorum {
                name: name.to_owned(),
                answered: 0,
                needed: 1,
            }),
        }
    }

    /// [`ask`](Nodes::ask), asking again with growing pauses while the answers are undecided
    /// because nodes could not be reached, up to [`SEND_ATTEMPTS`] sends.
    async fn ask_resending<T>(
        &self,
        invocation: &Request,
        name: &str,
        settled: impl Fn(&[Answer<T>], usize) -> bool,
    ) -> Sent<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        let mut pause = RESEND_PAUSE;
        let mut tries = 0;
        loop {
            tries += 1;
            let at = Instant::now();
            let answers = self.ask(invocation, name, &settled).await;
            let unreachable = answers
                .iter()
                .filter(|a| match a {
                    None => true,
                    Some(Err(e)) => e.is_unavailable(),
                    Some(Ok(_)) => false,
                })
                .count();
            if self.conns.len() - unreachable >= self.majority() || tries >= SEND_ATTEMPTS {
                return Sent {
                    answers,
                    at,
                    resent: tries > 1,
                };
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }

    /// The error of a question too few nodes answered: the one node's own, or on several
    /// nodes that no majority answered.
    fn undecided<T>(&self, answers: Vec<Answer<T>>, name: &str) -> Error {
        let answered = answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count();
        let mut failures = answers.into_iter().flatten().filter_map(Result::err);
        match (self.conns.len(), failures.next()) {
            (1, Some(error)) => error,
            _ => Error::NoQuorum {
                name: name.to_owned(),
                answered,
                needed: self.majority(),
            },
        }
    }

    /// Whether `heard` answers settle a yes-or-no question: a majority said yes, or so many
    /// said anything else (or failed) that a majority of yes is out of reach.
    pub(crate) fn settles(&self, yes: usize, heard: usize) -> bool {
        self.verdict(yes, heard - yes).is_some()
    }

    /// Where a verdict stands after some nodes said yes and some said no: decided when a
    /// majority agrees either way, `None` while the silent nodes could still tip it.
    pub(crate) fn verdict(&self, yes: usize, no: usize) -> Option<bool> {
        verdict(self.conns.len(), yes, no)
    }
}

/// How a request goes to a node: through the node's line of calls, coalesced with other
/// tasks' and kept in the order they were made, or beside it.
#[derive(Clone, Copy)]
enum Via {
    Line,
    /// Only for a request whose order against the line's calls no longer matters: a release
    /// sent again after its first send went through the line.
    Aside,
}

impl Via {
    fn line(self, line: &Arc<Coalescer>) -> Option<&Arc<Coalescer>> {
        match self {
            Via::Line => Some(line),
            Via::Aside => None,
        }
    }
}

/// The answers to a request sent with resends: each node's answer, when the last send went
/// out, and whether there was more than one.
struct Sent<T> {
    answers: Vec<Answer<T>>,
    at: Instant,
    resent: bool,
}

/// The replies of the nodes that granted: `[1, fence, ...]` with every fence positive.
fn granted(answers: &[Answer<Vec<i64>>]) -> impl Iterator<Item = &[i64]> + '_ {
    answers
        .iter()
        .filter_map(|a| a.as_ref()?.as_ref().ok())
        .map(Vec::as_slice)
        .filter(|reply| matches!(reply, [1, fences @ ..] if !fences.is_empty() && fences.iter().all(|&f| f > 0)))
}

/// How many answered 1 (done) and how many answered anything else (not held by this owner);
/// with `free_is_done`, a 0 (nothing held) counts as done.
fn tally(answers: &[Answer<i64>], free_is_done: bool) -> (usize, usize) {
    let replies = answers.iter().filter_map(|a| a.as_ref()?.as_ref().ok());
    let (mut yes, mut no) = (0, 0);
    for &reply in replies {
        if reply == 1 || (free_is_done && reply == 0) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    (yes, no)
}

fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

fn verdict(nodes: usize, yes: usize, no: usize) -> Option<bool> {
    if yes >= majority(nodes) {
        Some(true)
    } else if no > nodes - majority(nodes) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_decides_either_way() {
        for (nodes, needed) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            assert_eq!(majority(nodes), needed);
        }
        assert_eq!(verdict(1, 1, 0), Some(true));
        assert_eq!(verdict(1, 0, 1), Some(false));
        assert_eq!(verdict(1, 0, 0), None);
        assert_eq!(verdict(5, 3, 0), Some(true));
        assert_eq!(verdict(5, 2, 2), None, "the fifth node decides");
        assert_eq!(verdict(5, 2, 3), Some(false));
        assert_eq!(verdict(5, 0, 2), None);
    }
}
