//! The ReentrantMutex against a model: random sequences of operations by three owners run
//! against a real redis-server and against a plain in-memory re-entry count; every reply, every
//! fence and the stored owner and count must match the model after every step.

use std::time::{Duration, Instant};

use crate::common::{client, ms};
use fencelock::{Error, Fence, Holder, ReentrantMutex, ReentrantMutexGuard};
use fencelock_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const OWNERS: usize = 3;
const KEY: &str = "fencelock:{model}:rmutex";

#[derive(Clone, Debug)]
enum Op {
    /// `lock_timeout` with a short wait: granted at once, or times out.
    Lock(usize),
    TryLock(usize),
    /// Unlocks the live guard at this index (modulo their number).
    Unlock(usize),
    /// Drops the live guard at this index: released in the background.
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..OWNERS).prop_map(Op::Lock),
        2 => (0..OWNERS).prop_map(Op::TryLock),
        2 => any::<usize>().prop_map(Op::Unlock),
        1 => any::<usize>().prop_map(Op::Drop),
    ]
}

/// What the lock should be: who holds it, how many holds, with which fence.
#[derive(Debug, Default)]
struct Model {
    owner: Option<usize>,
    count: usize,
    fence: Option<Fence>,
    /// The largest fence granted so far: a new owner's must exceed it.
    last_fence: Option<Fence>,
}

impl Model {
    fn grants(&self, owner: usize) -> bool {
        self.owner.is_none_or(|o| o == owner)
    }

    fn granted(&mut self, owner: usize, fence: Fence) -> Result<(), TestCaseError> {
        match self.fence {
            Some(held) => prop_assert_eq!(fence, held, "a re-entry shares the owner's fence"),
            None => prop_assert!(
                self.last_fence.is_none_or(|last| fence > last),
                "a new owner's fence {} must exceed {:?}",
                fence,
                self.last_fence
            ),
        }
        self.owner = Some(owner);
        self.count += 1;
        self.fence = Some(fence);
        self.last_fence = Some(fence);
        Ok(())
    }

    fn released(&mut self) {
        self.count -= 1;
        if self.count == 0 {
            self.owner = None;
            self.fence = None;
        }
    }
}

/// The owner and count Redis stores, as (owner string, count).
fn stored(server: &RedisServer) -> Option<(String, usize)> {
    let owner = server.cli(&["HGET", KEY, "owner"]);
    if owner.is_empty() {
        return None;
    }
    let count = server.cli(&["HGET", KEY, "count"]).parse().expect("count");
    Some((owner, count))
}

fn owner_string(holder: &Holder) -> String {
    format!("{}:{}", holder.client_id(), holder.id())
}

fn expected(model: &Model, holders: &[Holder]) -> Option<(String, usize)> {
    model
        .owner
        .map(|o| (owner_string(&holders[o]), model.count))
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mutex: ReentrantMutex = c.reentrant_mutex("model").expect("name");
    let holders: Vec<Holder> = (0..OWNERS).map(|_| c.holder().expect("holder")).collect();
    let mut model = Model::default();
    let mut guards: Vec<ReentrantMutexGuard> = Vec::new();

    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Lock(o) | Op::TryLock(o) => {
                let result = match op {
                    Op::Lock(_) => mutex.lock_timeout(&holders[o], ms(30)).await,
                    _ => mutex.try_lock(&holders[o]).await,
                };
                match (model.grants(o), result) {
                    (true, Ok(guard)) => {
                        model.granted(o, guard.fence())?;
                        guards.push(guard);
                    }
                    (false, Err(Error::Held { .. })) if matches!(op, Op::TryLock(_)) => {}
                    (false, Err(Error::Timeout { .. })) if matches!(op, Op::Lock(_)) => {}
                    (grants, other) => {
                        prop_assert!(
                            false,
                            "step {step} {op:?}: model grants={grants}, got {other:?}"
                        )
                    }
                }
            }
            Op::Unlock(i) | Op::Drop(i) => {
                if guards.is_empty() {
                    continue;
                }
                let guard = guards.remove(i % guards.len());
                model.released();
                if matches!(op, Op::Unlock(_)) {
                    let result = guard.unlock().await;
                    prop_assert!(result.is_ok(), "step {step} {op:?}: {result:?}");
                } else {
                    drop(guard);
                    // The release runs in the background: wait for it, within bounds.
                    let want = expected(&model, &holders);
                    let start = Instant::now();
                    while stored(&server) != want && start.elapsed() < Duration::from_secs(2) {
                        tokio::time::sleep(ms(5)).await;
                    }
                }
            }
        }
        prop_assert_eq!(
            stored(&server),
            expected(&model, &holders),
            "step {} {:?}: stored owner and count",
            step,
            op
        );
    }
    for guard in guards {
        model.released();
        prop_assert!(guard.unlock().await.is_ok());
    }
    prop_assert_eq!(server.cli(&["EXISTS", KEY]), "0", "nothing left");
    Ok(())
}

proptest! {
    // Shrunk failures are kept with the crate's other regressions, and re-run first.
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/reentrant_model.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_reentrant_mutex_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..=25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(ops))?;
    }
}
