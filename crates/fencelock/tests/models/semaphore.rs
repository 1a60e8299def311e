//! Model-based test of the Semaphore: random sequences of operations by three owners run
//! against a real redis-server and against a plain in-memory model of the semaphore; every
//! reply must match the model's.

use std::time::{Duration, Instant};

use crate::common::client;
use fencelock::{Error, Lease, LockOptions, Semaphore, SemaphorePermit};
use fencelock_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const OWNERS: usize = 3;
/// The total each handle is made with, stored by the first acquire.
const INITIAL_TOTAL: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// The owner tries to take this many permits at once.
    TryAcquire(usize, u32),
    /// The owner gives back one of its grants (the index is taken modulo how many it holds).
    Release(usize, usize),
    /// The owner drops one of its grants, which gives it back in the background.
    Drop(usize, usize),
    /// The owner sets the total.
    SetPermits(usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    prop_oneof![
        4 => (owner.clone(), 1..=5u32).prop_map(|(o, n)| Op::TryAcquire(o, n)),
        3 => (owner.clone(), 0..4usize).prop_map(|(o, i)| Op::Release(o, i)),
        1 => (owner.clone(), 0..4usize).prop_map(|(o, i)| Op::Drop(o, i)),
        1 => (owner, 1..=5u32).prop_map(|(o, t)| Op::SetPermits(o, t)),
    ]
}

/// What the semaphore should be, in memory.
#[derive(Debug, Default)]
struct Model {
    /// The stored total; `None` until the first acquire or `set_permits` stores one.
    total: Option<u32>,
    /// The permit count of each grant each owner holds, in the order granted.
    grants: [Vec<u32>; OWNERS],
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Granted,
    Refused,
    OverTotal,
}

impl Model {
    fn total(&self) -> u32 {
        self.total.unwrap_or(INITIAL_TOTAL)
    }

    fn held(&self) -> u32 {
        self.grants.iter().flatten().sum()
    }

    fn try_acquire(&mut self, owner: usize, n: u32) -> Outcome {
        let total = self.total();
        self.total = Some(total);
        if n > total {
            Outcome::OverTotal
        } else if self.held() + n <= total {
            self.grants[owner].push(n);
            Outcome::Granted
        } else {
            Outcome::Refused
        }
    }

    fn available(&self) -> u32 {
        self.total().saturating_sub(self.held())
    }
}

fn outcome(result: &fencelock::Result<SemaphorePermit>) -> Result<Outcome, String> {
    match result {
        Ok(_) => Ok(Outcome::Granted),
        Err(Error::Held { .. }) => Ok(Outcome::Refused),
        Err(Error::InvalidOption {
            option: "permits", ..
        }) => Ok(Outcome::OverTotal),
        Err(other) => Err(format!("unexpected error {other}")),
    }
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let server = RedisServer::start();
    let options = LockOptions::default().lease(Lease::Fixed(Duration::from_secs(60)));
    let mut handles: Vec<Semaphore> = Vec::new();
    for _ in 0..OWNERS {
        let c = client(&server).await;
        handles.push(
            c.semaphore_with_options("model", INITIAL_TOTAL, options.clone())
                .expect("name"),
        );
    }
    let mut model = Model::default();
    let mut held: [Vec<SemaphorePermit>; OWNERS] = Default::default();
    let mut last_fence = 0;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::TryAcquire(o, n) => {
                let result = handles[o].try_acquire_many(n).await;
                let expected = model.try_acquire(o, n);
                let got = outcome(&result).map_err(TestCaseError::fail)?;
                prop_assert_eq!(&got, &expected, "step {}: {:?}", step, op);
                if let Ok(permit) = result {
                    prop_assert_eq!(permit.permits(), n);
                    prop_assert!(permit.fence().get() > last_fence, "fences rise");
                    last_fence = permit.fence().get();
                    held[o].push(permit);
                }
            }
            Op::Release(o, i) | Op::Drop(o, i) => {
                if held[o].is_empty() {
                    continue;
                }
                let i = i % held[o].len();
                let permit = held[o].remove(i);
                let n = model.grants[o].remove(i);
                prop_assert_eq!(permit.permits(), n);
                if matches!(op, Op::Release(..)) {
                    let released = permit.release().await;
                    prop_assert!(released.is_ok(), "step {}: {:?}", step, released);
                } else {
                    drop(permit);
                    // The background release is done once the permits show as free.
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while handles[o].available().await.expect("available") != model.available() {
                        prop_assert!(
                            Instant::now() < deadline,
                            "step {}: drop gave nothing back",
                            step
                        );
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
            Op::SetPermits(o, total) => {
                handles[o].set_permits(total).await.expect("set_permits");
                model.total = Some(total);
            }
        }
        let observer = &handles[step % OWNERS];
        prop_assert_eq!(
            observer.permits().await.expect("permits"),
            model.total(),
            "step {}",
            step
        );
        prop_assert_eq!(
            observer.available().await.expect("available"),
            model.available(),
            "step {}",
            step
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        // Relative to the package, where cargo runs integration tests.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/semaphore_model.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_semaphore_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(ops))?;
    }
}
