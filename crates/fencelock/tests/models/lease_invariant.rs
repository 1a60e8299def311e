//! A guard never claims more validity than Redis holds for it.
//!
//! For every primitive, random sequences of extensions (shorter and longer than the lease),
//! pauses, cut-offs of the holder (a proxy that stops forwarding), extensions sent into a cut-off
//! that arrive after their caller gave up, and a contender that tries to take the lock, check
//! after each step:
//! - while the guard says it is held, its `valid_until` is no later than the expiry Redis holds
//!   for that grant (read by another client, through inspection);
//! - nobody else is granted the lock while the guard says it is held.
//!
//! The reported sequences that broke this (a long lease extended by a short one; a renewed
//! lease extended by a long one and then renewed) are replayed on every primitive as well.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Guard, Handle, Lease, LockKind, LockOptions};
use fencelock_testkit::{Proxy, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};

/// Every primitive with a guard; a read-write lock once per mode.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Fair,
    Multi,
    Reentrant,
    Read,
    Write,
    Semaphore,
}

impl Kind {
    /// The lock `name` of this kind as `client` takes it (a multi-lock: `name` and `name` +
    /// "-2"; a reentrant mutex: for a holder of its own).
    fn handle(self, client: &Client, name: &str, options: LockOptions) -> Handle {
        ok(match self {
            Kind::Mutex => client.mutex_with_options(name, options).map(Handle::from),
            Kind::Fair => client
                .fair_mutex_with_options(name, options)
                .map(Handle::from),
            Kind::Multi => client
                .multi_mutex_with_options(names(name), options)
                .map(Handle::from),
            Kind::Reentrant => client
                .reentrant_mutex_with_options(name, options)
                .and_then(|lock| Ok(lock.handle_as(&client.holder()?).into())),
            Kind::Read => client
                .rwlock_with_options(name, options)
                .map(|lock| lock.read_handle().into()),
            Kind::Write => client
                .rwlock_with_options(name, options)
                .map(|lock| lock.write_handle().into()),
            Kind::Semaphore => client
                .semaphore_with_options(name, 1, options)
                .and_then(|semaphore| semaphore.permits_handle(1))
                .map(Handle::from),
        })
    }

    /// Takes the lock `name`.
    async fn take(self, client: &Client, name: &str, lease: Lease) -> Guard {
        let options = LockOptions::default().lease(lease);
        ok(self.handle(client, name, options).lock().await)
    }

    /// One attempt by another client to take what the guard holds; whether it was granted.
    /// A grant is released at once.
    async fn contend(self, client: &Client, name: &str) -> bool {
        // A writer is what a read hold keeps out.
        let contender = match self {
            Kind::Read => Kind::Write,
            kind => kind,
        };
        let granted = contender
            .handle(client, name, LockOptions::default())
            .try_lock()
            .await
            .map(drop);
        match granted {
            Ok(()) => true,
            Err(fencelock::Error::Held { .. }) => false,
            Err(e) => panic!("the contender's attempt failed: {e}"),
        }
    }

    /// How long Redis still holds the grant, as another client reads it: for a lock of several
    /// names, the shortest of theirs. `None` when it holds nothing.
    async fn remaining(self, client: &Client, name: &str) -> Option<Duration> {
        let kind = match self {
            Kind::Mutex | Kind::Multi => LockKind::Mutex,
            Kind::Fair => LockKind::FairMutex,
            Kind::Reentrant => LockKind::ReentrantMutex,
            Kind::Read | Kind::Write => LockKind::RwLock,
            Kind::Semaphore => LockKind::Semaphore,
        };
        let lock_names = match self {
            Kind::Multi => names(name).to_vec(),
            _ => vec![name.to_owned()],
        };
        let mut shortest: Option<Duration> = None;
        for lock_name in lock_names {
            let infos = ok(client.locks_named(&lock_name).await);
            let info = infos.into_iter().find(|info| info.kind == kind)?;
            let remaining = info.remaining?;
            shortest = Some(shortest.map_or(remaining, |s| s.min(remaining)));
        }
        shortest
    }
}

fn names(name: &str) -> [String; 2] {
    [name.to_owned(), format!("{name}-2")]
}

#[track_caller]
fn ok<T>(result: fencelock::Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

/// One step of a sequence.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `extend` by this many ms, waiting for its answer.
    Extend(u64),
    /// Nothing for this many ms: renewals (if any) go on.
    Pause(u64),
    /// The holder cut off for this many ms: renewals and requests do not get through.
    CutOff(u64),
    /// An extension by this many ms sent into a cut-off and given up by its caller; the link
    /// heals later and Redis runs it then.
    ExtendLost(u64),
    /// Another client tries to take the lock.
    Contend,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::sample::select(vec![100u64, 400, 1_500, 4_000]).prop_map(Op::Extend),
        2 => prop::sample::select(vec![50u64, 300, 700]).prop_map(Op::Pause),
        2 => prop::sample::select(vec![300u64, 900]).prop_map(Op::CutOff),
        1 => prop::sample::select(vec![100u64, 4_000]).prop_map(Op::ExtendLost),
        2 => Just(Op::Contend),
    ]
}

fn lease() -> impl Strategy<Value = Lease> {
    prop_oneof![
        Just(Lease::Fixed(Duration::from_millis(600))),
        Just(Lease::Fixed(Duration::from_secs(3))),
        Just(Lease::Renewed(Duration::from_millis(600))),
    ]
}

/// A server, a proxy the holder goes through, and a client that talks to the server directly.
struct Bench {
    _server: RedisServer,
    proxy: Proxy,
    direct: Client,
}

impl Bench {
    async fn start(server: RedisServer) -> Bench {
        let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into());
        let direct = ok(Client::connect(server.url().as_str()).await);
        Bench {
            _server: server,
            proxy,
            direct,
        }
    }

    /// A client of the holder, through the proxy, that gives up on a request after 150 ms.
    async fn holder_client(&self) -> Client {
        let options = ClientOptions::default().response_timeout(Duration::from_millis(150));
        ok(Client::connect_with_options(self.proxy.url().as_str(), options).await)
    }
}

static CASE: AtomicU64 = AtomicU64::new(0);

/// Runs one sequence on `kind`, checking the invariant after every step.
async fn run_case(bench: &Bench, kind: Kind, lease: Lease, ops: &[Op]) -> Result<(), String> {
    let name = format!("lease-{}", CASE.fetch_add(1, Ordering::Relaxed));
    bench.proxy.set_cut(false);
    let client = bench.holder_client().await;
    let guard = kind.take(&client, &name, lease).await;
    check(bench, kind, &name, &guard, "after the grant").await?;
    for (step, &op) in ops.iter().enumerate() {
        match op {
            Op::Extend(ms) => {
                let _ = guard.extend(Duration::from_millis(ms)).await;
            }
            Op::Pause(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Op::CutOff(ms) => {
                bench.proxy.set_cut(true);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                bench.proxy.set_cut(false);
            }
            Op::ExtendLost(ms) => {
                bench.proxy.set_cut(true);
                let extend = guard.extend(Duration::from_millis(ms));
                let _ = tokio::time::timeout(Duration::from_millis(50), extend).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
                bench.proxy.set_cut(false);
                // Let the late request reach Redis before the next check.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Op::Contend => {
                if kind.contend(&bench.direct, &name).await && guard.is_held() {
                    return Err(format!(
                        "step {step} ({op:?}): another client was granted the lock while the \
                         guard says it is held"
                    ));
                }
            }
        }
        check(bench, kind, &name, &guard, &format!("step {step} ({op:?})")).await?;
    }
    bench.proxy.set_cut(false);
    Ok(())
}

/// While the guard says it holds, its deadline is no later than Redis's expiry for the grant.
/// The deadline is read first, and Redis's expiry bounded from above by the time its answer
/// arrived: a failure is a deadline Redis certainly did not hold.
async fn check(
    bench: &Bench,
    kind: Kind,
    name: &str,
    guard: &Guard,
    when: &str,
) -> Result<(), String> {
    let deadline = guard.valid_until();
    if !guard.is_held() {
        return Ok(());
    }
    let remaining = kind.remaining(&bench.direct, name).await;
    let answered = Instant::now();
    let held_until = remaining.map(|r| answered + r + Duration::from_millis(2));
    match held_until {
        Some(until) if deadline <= until => Ok(()),
        Some(until) => Err(format!(
            "{when}: the guard claims {:?} more than Redis holds (valid for {:?}, Redis {:?})",
            deadline - until,
            deadline.saturating_duration_since(answered),
            remaining
        )),
        None if Instant::now() < deadline && guard.is_held() => Err(format!(
            "{when}: the guard says it is held for {:?} more, Redis holds nothing",
            deadline.saturating_duration_since(answered)
        )),
        None => Ok(()),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn replay_reported(kind: Kind) {
    let rt = runtime();
    rt.block_on(async {
        let bench = Bench::start(RedisServer::start()).await;
        // A long fixed lease cut short by a shorter extension, then another client's attempt
        // once that shorter lease would have ended.
        let long_then_short = [Op::Extend(100), Op::Pause(300), Op::Contend];
        let fixed = Lease::Fixed(Duration::from_secs(3));
        if let Err(e) = run_case(&bench, kind, fixed, &long_then_short).await {
            panic!("{kind:?}, a long lease extended by a short one: {e}");
        }
        // A renewed lease extended far beyond its length, then renewed, then cut off.
        let renewed = Lease::Renewed(Duration::from_millis(600));
        let short_then_long = [
            Op::Extend(4_000),
            Op::Pause(700),
            Op::CutOff(900),
            Op::Contend,
        ];
        if let Err(e) = run_case(&bench, kind, renewed, &short_then_long).await {
            panic!("{kind:?}, a renewed lease extended by a long one: {e}");
        }
    });
}

fn property(kind: Kind) {
    let rt = runtime();
    let bench = rt.block_on(Bench::start(RedisServer::start()));
    let config = ProptestConfig {
        cases: 6,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/lease_invariant.txt",
        ))),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let strategy = (lease(), prop::collection::vec(op(), 2..=6));
    let result = runner.run(&strategy, |(lease, ops)| {
        rt.block_on(run_case(&bench, kind, lease, &ops))
            .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{kind:?}: {e}");
    }
}

macro_rules! every_primitive {
    ($($test:ident, $replay:ident: $kind:expr;)+) => {$(
        #[test]
        fn $test() {
            property($kind);
        }

        #[test]
        fn $replay() {
            replay_reported($kind);
        }
    )+};
}

every_primitive! {
    mutex_never_overstates, mutex_reported_sequences: Kind::Mutex;
    fair_mutex_never_overstates, fair_mutex_reported_sequences: Kind::Fair;
    multi_mutex_never_overstates, multi_mutex_reported_sequences: Kind::Multi;
    reentrant_mutex_never_overstates, reentrant_mutex_reported_sequences: Kind::Reentrant;
    read_hold_never_overstates, read_hold_reported_sequences: Kind::Read;
    write_hold_never_overstates, write_hold_reported_sequences: Kind::Write;
    semaphore_never_overstates, semaphore_reported_sequences: Kind::Semaphore;
}
