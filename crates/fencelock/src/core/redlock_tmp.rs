//! RedLock: a [`Mutex`](crate::Mutex) granted by a majority of independent Redis masters.
//!
//! Every request goes to all masters at once (see [`Quorum`](crate::quorum::Quorum)); the grant core in `grant.rs`
//! hands its acquire, extend and release here when the client has more than one node. The
//! scripts are the single-server ones, run on each master.

use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::grant::{release_in_background, Reply, Resource};
use crate::keeper::Release;
use crate::lease::{valid_until, LeaseState, Lost};
use crate::token::{Fence, OwnerToken};

/// One acquire on every master: granted when a majority granted within the lease, the fence
/// raised on a majority, and the validity still positive. Otherwise the masters that granted
/// are released in the background and the attempt goes on with a new token, so that a late
/// release can never remove a later grant.
pub(crate) async fn acquire<R: Resource>(resource: &R, token: &mut OwnerToken) -> Result<Reply> {
    let nodes = &resource.shared().nodes;
    let sent_at = Instant::now();
    let (answers, heard) = nodes
        .ask::<Vec<i64>>(resource.acquire_script(token), |answers, heard| {
            nodes.settles(grants(answers).count(), heard)
        })
        .await;
    let fences: Vec<u64> = grants(&answers).collect();
    if fences.len() >= nodes.majority() {
        if let Some(fence) = raise_fence(resource, &fences).await {
            let lease = resource.lease().duration();
            if Instant::now() < valid_until(sent_at, lease, resource.shared().options.drift) {
                return Ok(Reply::Granted {
                    fences: vec![fence],
                    sent_at,
                });
            }
        }
    }
    release_in_background(resource, token);
    *token = OwnerToken::new()?;
    let refusals: Vec<Duration> = answers
        .iter()
        .flatten()
        .filter_map(|a| refusal(a))
        .collect();
    let answered = answers.iter().flatten().count();
    // Refused because too many masters failed, not because someone else holds it.
    if nodes.verdict(0, heard - answered) == Some(false) {
        return Err(Error::NoQuorum {
            name: resource.name().to_owned(),
            answered,
            needed: nodes.majority(),
        });
    }
    Ok(Reply::Held {
        remaining: refusals.into_iter().min(),
    })
}

/// The fences of the masters that granted.
fn grants(answers: &[Option<Vec<i64>>]) -> impl Iterator<Item = u64> + '_ {
    answers
        .iter()
        .flatten()
        .filter_map(|answer| match *answer.as_slice() {
            [1, fence] if fence > 0 => Some(fence.unsigned_abs()),
            _ => None,
        })
}

/// A master's refusal: the holder's remaining lease there (zero when it has no expiry).
fn refusal(answer: &[i64]) -> Option<Duration> {
    match *answer {
        [0, pttl] => Some(Duration::from_millis(u64::try_from(pttl).unwrap_or(0))),
        _ => None,
    }
}

/// The grant's fence: the highest its masters issued, remembered on a majority so that any
/// later majority includes a master that issues a higher one. `None` when fewer than a
/// majority remembered it.
async fn raise_fence<R: Resource>(resource: &R, fences: &[u64]) -> Option<Fence> {
    let highest = fences.iter().copied().max()?;
    let nodes = &resource.shared().nodes;
    let remembered = |answers: &[Option<i64>]| answers.iter().filter(|a| **a == Some(1)).count();
    let (answers, _) = nodes
        .ask::<i64>(resource.raise_fence_script(highest)?, |answers, heard| {
            nodes.settles(remembered(answers), heard)
        })
        .await;
    (remembered(&answers) >= nodes.majority()).then(|| Fence::new(highest))
}

/// Extends on every master; done when a majority extended within the validity.
pub(crate) async fn extend<R: Resource>(
    resource: &R,
    invocation: ScriptInvocation<'static>,
    state: &LeaseState,
    lease: Duration,
) -> Result<()> {
    let nodes = &resource.shared().nodes;
    let sent_at = Instant::now();
    let answers = ask_owner(resource, invocation).await;
    let (yes, no) = tally(&answers);
    match nodes.verdict(yes, no) {
        Some(true) if state.renewed(sent_at, lease) => Ok(()),
        Some(true) => Err(not_held(resource)),
        Some(false) => {
            state.mark_lost(Lost::Revoked);
            Err(not_held(resource))
        }
        None => Err(Error::NoQuorum {
            name: resource.name().to_owned(),
            answered: yes + no,
            needed: nodes.majority(),
        }),
    }
}

/// Releases on every master. Done when a majority released it, or when too few answered
/// but the lock was still valid: the silent masters free it when its lease ends.
pub(crate) async fn unlock<R: Resource>(
    resource: &R,
    token: &OwnerToken,
    state: &LeaseState,
) -> Result<()> {
    let nodes = &resource.shared().nodes;
    let answers = ask_owner(resource, resource.release_script(token)).await;
    let (yes, no) = tally(&answers);
    match nodes.verdict(yes, no) {
        Some(true) => Ok(()),
        None if Instant::now() < state.deadline() => Ok(()),
        _ => {
            state.mark_lost(Lost::Revoked);
            Err(not_held(resource))
        }
    }
}

/// Runs an owner-checked script (release or extend: `1` done, anything else not held) until a
/// majority answered the same way or too few are left to make one.
async fn ask_owner<R: Resource>(
    resource: &R,
    invocation: ScriptInvocation<'static>,
) -> Vec<Option<i64>> {
    let nodes = &resource.shared().nodes;
    nodes
        .ask::<i64>(invocation, |answers, heard| {
            let (yes, no) = tally(answers);
            nodes.verdict(yes, no).is_some() || nodes.settles(yes, heard)
        })
        .await
        .0
}

/// The background release on every master, for a dropped guard, a cancelled acquire, a
/// refused one or a shutdown; sent once more after a node timeout, for acquire requests still
/// on their way. Answered when a majority answered the first time.
pub(crate) fn release_of<R: Resource>(resource: &R, token: &OwnerToken) -> Release {
    let release = || resource.release_script(token);
    let (first, second) = (release(), release());
    let nodes = Arc::clone(&resource.shared().nodes);
    let pause = resource.shared().options.node_timeout;
    Box::pin(async move {
        let answered = nodes.ask_all::<i64>(first).await.iter().flatten().count();
        tokio::time::sleep(pause).await;
        nodes.ask_all::<i64>(second).await;
        answered >= nodes.majority()
    })
}

/// How many answered 1 (done) and how many answered anything else (not held by this owner).
fn tally(answers: &[Option<i64>]) -> (usize, usize) {
    let yes = answers.iter().filter(|a| **a == Some(1)).count();
    let no = answers
        .iter()
        .filter(|a| matches!(a, Some(r) if *r != 1))
        .count();
    (yes, no)
}

fn not_held<R: Resource>(resource: &R) -> Error {
    Error::NotHeld {
        name: resource.name().to_owned(),
    }
}
