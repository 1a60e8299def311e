//! Model-based test of the FairMutex: random sequences of `try_lock`, `lock` (joining the
//! line), `unlock` (handing over to the first waiter) and cancelled waits by four owners run
//! against a real redis-server and against an in-memory model of the holder and the line;
//! every reply, every hand-off and the line's length must match the model's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::common::client_with;
use fencelock::{ClientOptions, Error, FairMutex, FairMutexGuard, Lease, LockOptions};
use fencelock_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tokio::task::JoinHandle;

const OWNERS: usize = 4;
const LINE_KEY: &str = "fencelock:{model}:fair-line";
const PROMPTLY: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug)]
enum Op {
    TryLock(usize),
    Lock(usize),
    Unlock(usize),
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..OWNERS).prop_map(Op::TryLock),
        3 => (0..OWNERS).prop_map(Op::Lock),
        3 => (0..OWNERS).prop_map(Op::Unlock),
        1 => (0..OWNERS).prop_map(Op::Cancel),
    ]
}

/// What each owner is doing, for real.
enum Owner {
    Idle,
    Holding(FairMutexGuard),
    Waiting(JoinHandle<fencelock::Result<FairMutexGuard>>),
}

/// Who holds the lock and who waits in which order, in memory.
#[derive(Debug, Default)]
struct Model {
    holder: Option<usize>,
    line: VecDeque<usize>,
}

fn line_len(server: &RedisServer) -> usize {
    server
        .cli(&["ZCARD", LINE_KEY])
        .trim()
        .parse()
        .expect("ZCARD")
}

/// Polls until the line in Redis is `len` long.
async fn line_reaches(server: &RedisServer, len: usize) -> Result<(), TestCaseError> {
    let deadline = Instant::now() + PROMPTLY;
    while line_len(server) != len {
        prop_assert!(
            Instant::now() < deadline,
            "the line stays at {} waiters, the model has {}",
            line_len(server),
            len
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let server = RedisServer::start();
    // Hand-offs must come from wake-ups, never from this fallback timer.
    let options = ClientOptions::default().wake_fallback(Duration::from_secs(10));
    let lease = LockOptions::default().lease(Lease::Fixed(Duration::from_secs(60)));
    let mut handles: Vec<FairMutex> = Vec::new();
    for _ in 0..=OWNERS {
        let c = client_with(&server, options.clone()).await;
        handles.push(
            c.fair_mutex_with_options("model", lease.clone())
                .expect("name"),
        );
    }
    // Never holds or waits: it only checks that nobody can jump the line.
    let outsider = handles
        .pop()
        .expect("one handle per owner and the outsider");
    let mut owners: Vec<Owner> = (0..OWNERS).map(|_| Owner::Idle).collect();
    let mut model = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::TryLock(o) => {
                if !matches!(owners[o], Owner::Idle) {
                    continue;
                }
                let expected = model.holder.is_none() && model.line.is_empty();
                match handles[o].try_lock().await {
                    Ok(guard) => {
                        prop_assert!(
                            expected,
                            "step {}: try_lock took a lock it should not",
                            step
                        );
                        owners[o] = Owner::Holding(guard);
                        model.holder = Some(o);
                    }
                    Err(Error::Held { .. }) => {
                        prop_assert!(!expected, "step {}: try_lock refused a free lock", step);
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("step {step}: {e}"))),
                }
            }
            Op::Lock(o) => {
                if !matches!(owners[o], Owner::Idle) {
                    continue;
                }
                let fair = handles[o].clone();
                let task = tokio::spawn(async move { fair.lock().await });
                if model.holder.is_none() && model.line.is_empty() {
                    let guard = tokio::time::timeout(PROMPTLY, task)
                        .await
                        .map_err(|_| {
                            TestCaseError::fail(format!("step {step}: a free lock made {o} wait"))
                        })?
                        .expect("task")
                        .expect("lock");
                    owners[o] = Owner::Holding(guard);
                    model.holder = Some(o);
                } else {
                    model.line.push_back(o);
                    line_reaches(&server, model.line.len()).await?;
                    prop_assert!(
                        !task.is_finished(),
                        "step {}: {} did not wait its turn",
                        step,
                        o
                    );
                    owners[o] = Owner::Waiting(task);
                }
            }
            Op::Unlock(o) => {
                let guard = match std::mem::replace(&mut owners[o], Owner::Idle) {
                    Owner::Holding(guard) => guard,
                    other => {
                        owners[o] = other;
                        continue;
                    }
                };
                let unlocked = guard.unlock().await;
                prop_assert!(unlocked.is_ok(), "step {}: {:?}", step, unlocked);
                model.holder = None;
                let Some(next) = model.line.pop_front() else {
                    continue;
                };
                // Free for an instant, but promised to the first waiter.
                prop_assert!(
                    matches!(outsider.try_lock().await, Err(Error::Held { .. })),
                    "step {}: try_lock jumped the line",
                    step
                );
                let Owner::Waiting(task) = std::mem::replace(&mut owners[next], Owner::Idle) else {
                    return Err(TestCaseError::fail(format!(
                        "step {step}: {next} was not waiting"
                    )));
                };
                let guard = tokio::time::timeout(PROMPTLY, task)
                    .await
                    .map_err(|_| {
                        TestCaseError::fail(format!("step {step}: {next} was not handed the lock"))
                    })?
                    .expect("task")
                    .expect("lock");
                owners[next] = Owner::Holding(guard);
                model.holder = Some(next);
                for (i, owner) in owners.iter().enumerate() {
                    if let Owner::Waiting(task) = owner {
                        prop_assert!(!task.is_finished(), "step {}: {} jumped the line", step, i);
                    }
                }
            }
            Op::Cancel(o) => {
                let task = match std::mem::replace(&mut owners[o], Owner::Idle) {
                    Owner::Waiting(task) => task,
                    other => {
                        owners[o] = other;
                        continue;
                    }
                };
                task.abort();
                let _ = task.await;
                model.line.retain(|&w| w != o);
                line_reaches(&server, model.line.len()).await?;
            }
        }
        prop_assert_eq!(line_len(&server), model.line.len(), "step {}", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        // Relative to the package, where cargo runs integration tests.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/fair_model.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_fair_mutex_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(ops))?;
    }
}
