//! The RwLock against a model: random sequences of operations by three owners run against a
//! real redis-server and against a plain in-memory list of holds; every reply, every fence and
//! the stored holds must match the model after every step.

use std::time::{Duration, Instant};

use crate::common::{client, ms};
use fencelock::{Error, Fence, Guard, Handle, Holder, RwLock};
use fencelock_testkit::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const OWNERS: usize = 3;
const KEY: &str = "fencelock:{model}:rw";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Read,
    Write,
}

#[derive(Clone, Debug)]
enum Op {
    TryRead(usize),
    TryWrite(usize),
    /// `read_timeout` / `write_timeout` with a short wait: granted at once, or times out.
    Read(usize),
    Write(usize),
    /// Unlocks the live guard at this index (modulo their number).
    Unlock(usize),
    /// Drops the live guard at this index: released in the background.
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..OWNERS).prop_map(Op::TryRead),
        3 => (0..OWNERS).prop_map(Op::TryWrite),
        1 => (0..OWNERS).prop_map(Op::Read),
        1 => (0..OWNERS).prop_map(Op::Write),
        4 => any::<usize>().prop_map(Op::Unlock),
        1 => any::<usize>().prop_map(Op::Drop),
    ]
}

/// What the model says of a request.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Grant,
    Refuse,
    Deadlock,
}

/// The holds, in the order of the live guards, and the fences they must carry.
#[derive(Debug, Default)]
struct Model {
    holds: Vec<(usize, Mode)>,
    read_fence: Option<Fence>,
    write_fence: Option<Fence>,
    last_fence: Option<Fence>,
}

impl Model {
    fn held(&self, owner: usize, mode: Mode) -> usize {
        self.holds
            .iter()
            .filter(|&&(o, m)| o == owner && m == mode)
            .count()
    }

    fn others_hold(&self, owner: usize, mode: Option<Mode>) -> bool {
        self.holds
            .iter()
            .any(|&(o, m)| o != owner && mode.is_none_or(|mode| m == mode))
    }

    fn verdict(&self, owner: usize, mode: Mode) -> Verdict {
        match mode {
            Mode::Read if self.others_hold(owner, Some(Mode::Write)) => Verdict::Refuse,
            Mode::Read => Verdict::Grant,
            Mode::Write
                if self.held(owner, Mode::Read) > 0 && self.held(owner, Mode::Write) == 0 =>
            {
                Verdict::Deadlock
            }
            Mode::Write if self.others_hold(owner, None) => Verdict::Refuse,
            Mode::Write => Verdict::Grant,
        }
    }

    fn granted(&mut self, owner: usize, mode: Mode, fence: Fence) -> Result<(), TestCaseError> {
        let shared = match mode {
            Mode::Read => &mut self.read_fence,
            Mode::Write => &mut self.write_fence,
        };
        match *shared {
            Some(held) => prop_assert_eq!(fence, held, "holds of a kind held together share"),
            None => {
                prop_assert!(
                    self.last_fence.is_none_or(|last| fence > last),
                    "a new {:?} fence {} must exceed {:?}",
                    mode,
                    fence,
                    self.last_fence
                );
                *shared = Some(fence);
                self.last_fence = Some(fence);
            }
        }
        self.holds.push((owner, mode));
        Ok(())
    }

    fn released(&mut self, index: usize) {
        let (_, mode) = self.holds.remove(index);
        if !self.holds.iter().any(|&(_, m)| m == mode) {
            match mode {
                Mode::Read => self.read_fence = None,
                Mode::Write => self.write_fence = None,
            }
        }
    }

    /// The stored holds as (kind, owner string), sorted.
    fn expected(&self, holders: &[Holder]) -> Vec<(char, String)> {
        let mut holds: Vec<(char, String)> = self
            .holds
            .iter()
            .map(|&(o, m)| {
                let kind = if m == Mode::Read { 'r' } else { 'w' };
                (
                    kind,
                    format!("{}:{}", holders[o].client_id(), holders[o].id()),
                )
            })
            .collect();
        holds.sort();
        holds
    }
}

/// The holds and waiting-writer markers Redis stores, as (kind, owner), sorted.
fn stored(server: &RedisServer) -> Vec<(char, String)> {
    let mut holds: Vec<(char, String)> = server
        .cli(&["HKEYS", KEY])
        .lines()
        .filter(|f| !f.starts_with("fence-") && !f.is_empty())
        .map(|f| {
            let kind = f.chars().next().expect("a kind");
            // The kind, then a token (which ends at its one ':'), then the owner.
            let (_, owner) = f.split_once(':').expect("a token");
            (kind, owner.to_owned())
        })
        .collect();
    holds.sort();
    holds
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock: RwLock = c.rwlock("model").expect("name");
    let holders: Vec<Holder> = (0..OWNERS).map(|_| c.holder().expect("holder")).collect();
    let mut model = Model::default();
    let mut guards: Vec<Guard> = Vec::new();

    for (step, op) in ops.into_iter().enumerate() {
        let mut settle = false;
        match op {
            Op::TryRead(o) | Op::TryWrite(o) | Op::Read(o) | Op::Write(o) => {
                let (mode, waits) = match op {
                    Op::TryRead(_) => (Mode::Read, false),
                    Op::Read(_) => (Mode::Read, true),
                    Op::TryWrite(_) => (Mode::Write, false),
                    _ => (Mode::Write, true),
                };
                let holder = &holders[o];
                let side: Handle = match mode {
                    Mode::Read => lock.read_handle_as(holder).into(),
                    Mode::Write => lock.write_handle_as(holder).into(),
                };
                let result = if waits {
                    side.lock_timeout(ms(30)).await
                } else {
                    side.try_lock().await
                };
                let verdict = model.verdict(o, mode);
                match (&verdict, result) {
                    (Verdict::Grant, Ok(guard)) => {
                        model.granted(o, mode, guard.fence())?;
                        guards.push(guard);
                    }
                    (Verdict::Refuse, Err(Error::Held { .. })) if !waits => {}
                    (Verdict::Refuse, Err(Error::Timeout { .. })) if waits => {
                        // A writer that gave up removes its marker in the background.
                        settle = mode == Mode::Write;
                    }
                    (Verdict::Deadlock, Err(Error::WouldDeadlock { .. })) => {}
                    (_, other) => prop_assert!(
                        false,
                        "step {step} {op:?}: model says {verdict:?}, got {:?}",
                        other.map(|g| g.fence())
                    ),
                }
            }
            Op::Unlock(i) | Op::Drop(i) => {
                if guards.is_empty() {
                    continue;
                }
                let index = i % guards.len();
                let guard = guards.remove(index);
                model.released(index);
                if matches!(op, Op::Unlock(_)) {
                    let result = guard.unlock().await;
                    prop_assert!(result.is_ok(), "step {step} {op:?}: {result:?}");
                } else {
                    drop(guard);
                    settle = true;
                }
            }
        }
        if settle {
            // Background releases: wait for them, within bounds.
            let want = model.expected(&holders);
            let start = Instant::now();
            while stored(&server) != want && start.elapsed() < Duration::from_secs(2) {
                tokio::time::sleep(ms(5)).await;
            }
        }
        prop_assert_eq!(
            stored(&server),
            model.expected(&holders),
            "step {} {:?}: stored holds",
            step,
            op
        );
    }
    for guard in guards {
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
            "proptest-regressions/rwlock_model.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_rwlock_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..=25)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(run(ops))?;
    }
}
