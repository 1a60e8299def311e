//! The Mutex (and the MultiMutex over the same names) against a plain model of who holds what.
//!
//! Random sequences of operations by three owners, each with its own client, on two names: a
//! mutex's try_lock, unlock and extend, a multi-lock's try_lock, unlock and extend over both
//! names, and the end of a lease, modelled by deleting the name's key. Every operation runs
//! against a real redis-server and against the model; every reply must be the one the model
//! predicts, each name's key must exist exactly when the model says the name is held, and each
//! name's fences must strictly increase.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redis::aio::MultiplexedConnection;
use relock::{Client, Error, Fence, Lease, MultiMutexGuard, MutexGuard, MutexOptions};
use relock_testkit::RedisServer;

const OWNERS: usize = 3;
const NAMES: [&str; 2] = ["left", "right"];

/// Long enough that nothing expires within a case unless an operation says so.
const LEASE: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Op {
    TryLock {
        owner: usize,
        name: usize,
    },
    Unlock {
        owner: usize,
        name: usize,
    },
    Extend {
        owner: usize,
        name: usize,
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
        owner: usize,
    },
    MultiExtend {
        owner: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    let name = 0..NAMES.len();
    prop_oneof![
        4 => (owner.clone(), name.clone()).prop_map(|(owner, name)| Op::TryLock { owner, name }),
        3 => (owner.clone(), name.clone()).prop_map(|(owner, name)| Op::Unlock { owner, name }),
        1 => (owner.clone(), name.clone()).prop_map(|(owner, name)| Op::Extend { owner, name }),
        2 => name.prop_map(|name| Op::Expire { name }),
        3 => (owner.clone(), any::<bool>())
            .prop_map(|(owner, reversed)| Op::MultiTryLock { owner, reversed }),
        2 => owner.clone().prop_map(|owner| Op::MultiUnlock { owner }),
        1 => owner.prop_map(|owner| Op::MultiExtend { owner }),
    ]
}

/// What an operation replied, in the model's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    Ok,
    Held,
    NotHeld,
    /// The owner had no guard to act on: nothing was sent.
    NoGuard,
}

/// One grant: which names Redis should show held by it.
type GrantId = u64;

/// Who holds each name, as far as the model knows.
#[derive(Debug, Default)]
struct Model {
    holder: [Option<GrantId>; 2],
    next: GrantId,
}

impl Model {
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

    /// Whether `grant` still holds every one of `names`.
    fn holds(&self, grant: GrantId, names: &[usize]) -> bool {
        names.iter().all(|&n| self.holder[n] == Some(grant))
    }

    /// Releases what `grant` still holds of `names`: `Ok` if that was all of them.
    fn release(&mut self, grant: GrantId, names: &[usize]) -> Reply {
        let all = self.holds(grant, names);
        for &n in names {
            if self.holder[n] == Some(grant) {
                self.holder[n] = None;
            }
        }
        if all {
            Reply::Ok
        } else {
            Reply::NotHeld
        }
    }
}

/// What each owner really holds.
#[derive(Default)]
struct Owner {
    singles: [Option<(MutexGuard, GrantId)>; 2],
    multi: Option<(MultiMutexGuard, GrantId)>,
}

fn reply_of<T>(result: relock::Result<T>) -> Result<(Reply, Option<T>), TestCaseError> {
    match result {
        Ok(value) => Ok((Reply::Ok, Some(value))),
        Err(Error::Held { .. }) => Ok((Reply::Held, None)),
        Err(Error::NotHeld { .. }) => Ok((Reply::NotHeld, None)),
        Err(other) => Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
}

struct Case {
    clients: Vec<Client>,
    owners: Vec<Owner>,
    model: Model,
    last_fence: [Option<Fence>; 2],
    conn: MultiplexedConnection,
}

impl Case {
    fn options() -> MutexOptions {
        MutexOptions::default().lease(Lease::Fixed(LEASE))
    }

    fn record_fence(&mut self, name: usize, fence: Fence) -> Result<(), TestCaseError> {
        if let Some(last) = self.last_fence[name] {
            prop_assert!(fence > last, "{}: fence {fence} after {last}", NAMES[name]);
        }
        self.last_fence[name] = Some(fence);
        Ok(())
    }

    async fn run(&mut self, op: Op) -> Result<(Reply, Reply), TestCaseError> {
        let both = [0, 1];
        Ok(match op {
            Op::TryLock { owner, name } => {
                let mutex = self.clients[owner]
                    .mutex_with_options(NAMES[name], Self::options())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (real, guard) = reply_of(mutex.try_lock().await)?;
                let granted = self.model.grant(&[name]);
                if let Some(guard) = guard {
                    self.record_fence(name, guard.fence())?;
                    if let Some(grant) = granted {
                        self.owners[owner].singles[name] = Some((guard, grant));
                    }
                }
                let model = if granted.is_some() {
                    Reply::Ok
                } else {
                    Reply::Held
                };
                (real, model)
            }
            Op::Unlock { owner, name } => match self.owners[owner].singles[name].take() {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some((guard, grant)) => {
                    let (real, _) = reply_of(guard.unlock().await)?;
                    (real, self.model.release(grant, &[name]))
                }
            },
            Op::Extend { owner, name } => match &self.owners[owner].singles[name] {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some((guard, grant)) => {
                    let (real, _) = reply_of(guard.extend(LEASE).await)?;
                    let model = if self.model.holds(*grant, &[name]) {
                        Reply::Ok
                    } else {
                        Reply::NotHeld
                    };
                    (real, model)
                }
            },
            Op::Expire { name } => {
                redis::cmd("DEL")
                    .arg(format!("relock:{{{}}}:mutex", NAMES[name]))
                    .exec_async(&mut self.conn)
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
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
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (real, guard) = reply_of(multi.try_lock().await)?;
                let granted = self.model.grant(&both);
                if let Some(guard) = guard {
                    for (i, name) in NAMES.iter().enumerate() {
                        let fence = guard
                            .fence(name)
                            .ok_or_else(|| TestCaseError::fail("a name without a fence"))?;
                        self.record_fence(i, fence)?;
                    }
                    if let Some(grant) = granted {
                        self.owners[owner].multi = Some((guard, grant));
                    }
                }
                let model = if granted.is_some() {
                    Reply::Ok
                } else {
                    Reply::Held
                };
                (real, model)
            }
            Op::MultiUnlock { owner } => match self.owners[owner].multi.take() {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some((guard, grant)) => {
                    let (real, _) = reply_of(guard.unlock().await)?;
                    (real, self.model.release(grant, &both))
                }
            },
            Op::MultiExtend { owner } => match &self.owners[owner].multi {
                None => (Reply::NoGuard, Reply::NoGuard),
                Some((guard, grant)) => {
                    let (real, _) = reply_of(guard.extend(LEASE).await)?;
                    let model = if self.model.holds(*grant, &both) {
                        Reply::Ok
                    } else {
                        Reply::NotHeld
                    };
                    (real, model)
                }
            },
        })
    }

    /// Each name's key exists exactly when the model has a holder for it.
    async fn check_keys(&mut self) -> Result<(), TestCaseError> {
        for (i, name) in NAMES.iter().enumerate() {
            let exists: bool = redis::cmd("EXISTS")
                .arg(format!("relock:{{{name}}}:mutex"))
                .query_async(&mut self.conn)
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                exists,
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
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut case = Case {
        clients,
        owners: (0..OWNERS).map(|_| Owner::default()).collect(),
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
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn replies_match_the_model(ops in prop::collection::vec(op(), 1..=25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime.block_on(run_case(ops))?;
    }
}
