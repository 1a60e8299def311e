//! The Mutex (and the MultiMutex over the same names) against a plain model of who holds what.
//!
//! Random sequences of operations by three owners, each with its own client, on two names: a
//! mutex's try_lock, unlock and extend, a multi-lock's try_lock, unlock and extend over both
//! names, and the end of a lease, modelled by deleting the name's key. Unlock and extend act on
//! one of the guards taken so far, stale ones included, so that most of them reach Redis. Every
//! operation runs against a real redis-server and against the model; every reply must be the
//! one the model predicts, each name's key must exist exactly when the model says the name is
//! held, and each name's fences must strictly increase.

use std::time::Duration;

use crate::common;
use fencelock::{Client, Error, Fence, Lease, LockOptions, MultiMutexGuard, MutexGuard};
use fencelock_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};
use redis::aio::MultiplexedConnection;

const OWNERS: usize = 3;
const NAMES: [&str; 2] = ["left", "right"];

/// Long enough that nothing expires within a case unless an operation says so.
const LEASE: Duration = Duration::from_secs(60);

/// `pick` chooses among the guards of that kind not yet unlocked (modulo their number).
#[derive(Clone, Copy, Debug)]
enum Op {
    TryLock {
        owner: usize,
        name: usize,
    },
    Unlock {
        pick: usize,
    },
    Extend {
        pick: usize,
    },
    /// The lease of a name ends, whoever holds it.
    Expire {
        name: usize,
    },
    /// Both names; `reversed` gives them in the other order.
    MultiTryLock {
        owner: usize,
        reversed: bool,
    },
    MultiUnlock {
        pick: usize,
    },
    MultiExtend {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    let name = 0..NAMES.len();
    let pick = 0..4usize;
    prop_oneof![
        4 => (owner.clone(), name.clone()).prop_map(|(owner, name)| Op::TryLock { owner, name }),
        3 => pick.clone().prop_map(|pick| Op::Unlock { pick }),
        2 => pick.clone().prop_map(|pick| Op::Extend { pick }),
        2 => name.prop_map(|name| Op::Expire { name }),
        3 => (owner, any::<bool>())
            .prop_map(|(owner, reversed)| Op::MultiTryLock { owner, reversed }),
        2 => pick.clone().prop_map(|pick| Op::MultiUnlock { pick }),
        2 => pick.prop_map(|pick| Op::MultiExtend { pick }),
    ]
}

/// What an operation replied, in the model's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    Ok,
    Held,
    NotHeld,
    /// No guard of that kind was left to act on: nothing was sent.
    NoGuard,
}

/// Tells grants apart in the model.
type GrantId = u64;

/// Who holds each name, as far as the model knows.
#[derive(Debug, Default)]
struct Model {
    holder: [Option<GrantId>; 2],
    next: GrantId,
}

impl Model {
    /// A new grant of `names` if none of them is held.
    fn grant(&mut self, names: &[usize]) -> Option<GrantId> {
        if names.iter().any(|&n| self.holder[n].is_some()) {
            return None;
        }
        self.next += 1;
        for &n in names {
            self.holder[n] = Some(self.next);
        }
        Some(self.next)
    }

    /// `Ok` if `grant` still holds every one of `names`.
    fn check(&self, grant: GrantId, names: &[usize]) -> Reply {
        if names.iter().all(|&n| self.holder[n] == Some(grant)) {
            Reply::Ok
        } else {
            Reply::NotHeld
        }
    }

    /// Releases what `grant` still holds of `names`: `Ok` if that was all of them.
    fn release(&mut self, grant: GrantId, names: &[usize]) -> Reply {
        let reply = self.check(grant, names);
        for &n in names {
            if self.holder[n] == Some(grant) {
                self.holder[n] = None;
            }
        }
        reply
    }
}

fn reply_of<T>(result: fencelock::Result<T>) -> Result<(Reply, Option<T>), TestCaseError> {
    match result {
        Ok(value) => Ok((Reply::Ok, Some(value))),
        Err(Error::Held { .. }) => Ok((Reply::Held, None)),
        Err(Error::NotHeld { .. }) => Ok((Reply::NotHeld, None)),
        Err(other) => Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

fn pick<T>(guards: &[T], pick: usize) -> Option<usize> {
    (!guards.is_empty()).then(|| pick % guards.len())
}

/// One case: the owners' clients, the guards they took and have not unlocked (stale or not,
/// each with its grant and names), the model, and the last fence seen per name.
struct Case {
    clients: Vec<Client>,
    singles: Vec<(MutexGuard, GrantId, usize)>,
    multis: Vec<(MultiMutexGuard, GrantId)>,
    model: Model,
    last_fence: [Option<Fence>; 2],
    conn: MultiplexedConnection,
}

const BOTH: [usize; 2] = [0, 1];

impl Case {
    fn options() -> LockOptions {
        LockOptions::default().lease(Lease::Fixed(LEASE))
    }

    fn record_fence(&mut self, name: usize, fence: Fence) -> Result<(), TestCaseError> {
        if let Some(last) = self.last_fence[name] {
            prop_assert!(fence > last, "{}: fence {fence} after {last}", NAMES[name]);
        }
        self.last_fence[name] = Some(fence);
        Ok(())
    }

    /// Runs `op` for real and in the model: (what Redis replied, what the model predicts).
    async fn run(&mut self, op: Op) -> Result<(Reply, Reply), TestCaseError> {
        Ok(match op {
            Op::TryLock { owner, name } => {
                let mutex = self.clients[owner]
                    .mutex_with_options(NAMES[name], Self::options())
                    .map_err(fail)?;
                let (real, guard) = reply_of(mutex.try_lock().await)?;
                let granted = self.model.grant(&[name]);
                if let Some(guard) = guard {
                    self.record_fence(name, guard.fence())?;
                    if let Some(grant) = granted {
                        self.singles.push((guard, grant, name));
                    }
                }
                (real, granted.map_or(Reply::Held, |_| Reply::Ok))
            }
            Op::Unlock { pick: p } => match pick(&self.singles, p) {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some(at) => {
                    let (guard, grant, name) = self.singles.remove(at);
                    let (real, _) = reply_of(guard.unlock().await)?;
                    (real, self.model.release(grant, &[name]))
                }
            },
            Op::Extend { pick: p } => match pick(&self.singles, p) {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some(at) => {
                    let (guard, grant, name) = &self.singles[at];
                    let (real, _) = reply_of(guard.extend(LEASE).await)?;
                    (real, self.model.check(*grant, &[*name]))
                }
            },
            Op::Expire { name } => {
                redis::cmd("DEL")
                    .arg(format!("fencelock:{{{}}}:mutex", NAMES[name]))
                    .exec_async(&mut self.conn)
                    .await
                    .map_err(fail)?;
                self.model.holder[name] = None;
                (Reply::Ok, Reply::Ok)
            }
            Op::MultiTryLock { owner, reversed } => {
                let names = if reversed {
                    [NAMES[1], NAMES[0]]
                } else {
                    NAMES
                };
                let multi = self.clients[owner]
                    .multi_mutex_with_options(names, Self::options())
                    .map_err(fail)?;
                let (real, guard) = reply_of(multi.try_lock().await)?;
                let granted = self.model.grant(&BOTH);
                if let Some(guard) = guard {
                    for (i, name) in NAMES.iter().enumerate() {
                        let fence = guard.fence_of(name).ok_or_else(|| fail("no fence"))?;
                        self.record_fence(i, fence)?;
                    }
                    if let Some(grant) = granted {
                        self.multis.push((guard, grant));
                    }
                }
                (real, granted.map_or(Reply::Held, |_| Reply::Ok))
            }
            Op::MultiUnlock { pick: p } => match pick(&self.multis, p) {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some(at) => {
                    let (guard, grant) = self.multis.remove(at);
                    let (real, _) = reply_of(guard.unlock().await)?;
                    (real, self.model.release(grant, &BOTH))
                }
            },
            Op::MultiExtend { pick: p } => match pick(&self.multis, p) {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some(at) => {
                    let (guard, grant) = &self.multis[at];
                    let (real, _) = reply_of(guard.extend(LEASE).await)?;
                    (real, self.model.check(*grant, &BOTH))
                }
            },
        })
    }

    /// Each name's key holds a lock exactly when the model has a holder for it (a released
    /// one keeps only the name's last fence: `~<fence>`).
    async fn check_keys(&mut self) -> Result<(), TestCaseError> {
        for (i, name) in NAMES.iter().enumerate() {
            let value: Option<String> = redis::cmd("GET")
                .arg(format!("fencelock:{{{name}}}:mutex"))
                .query_async(&mut self.conn)
                .await
                .map_err(fail)?;
            let held = value.is_some_and(|v| !v.starts_with('~'));
            prop_assert_eq!(
                held,
                self.model.holder[i].is_some(),
                "key of {} against the model {:?}",
                name,
                self.model
            );
        }
        Ok(())
    }
}

async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..OWNERS {
        clients.push(common::client(&server).await);
    }
    let conn = redis::Client::open(server.url().as_str())
        .map_err(fail)?
        .get_multiplexed_async_connection()
        .await
        .map_err(fail)?;
    let mut case = Case {
        clients,
        singles: Vec::new(),
        multis: Vec::new(),
        model: Model::default(),
        last_fence: [None, None],
        conn,
    };
    for (step, op) in ops.into_iter().enumerate() {
        let (real, model) = case.run(op).await?;
        prop_assert_eq!(real, model, "step {}: {:?}", step, op);
        case.check_keys().await?;
    }
    Ok(())
}

proptest! {
    // Shrunk failures are kept with the crate, and replayed before new cases are generated.
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/mutex_model.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn replies_match_the_model(ops in prop::collection::vec(op(), 5..=25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(fail)?;
        runtime.block_on(run_case(ops))?;
    }
}
