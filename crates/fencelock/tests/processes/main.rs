//! fencelock across real OS processes, against real servers: exclusion, hand-offs, killed,
//! frozen and exiting holders, one module per primitive or concern.
//!
//! A harness-less binary that is its own worker: run without a worker role it is the
//! orchestrator, and runs every module's scenarios as libtest would (filters included:
//! `cargo test -p fencelock --test processes -- mutex::`); started by a scenario with a role, it
//! plays that role. Roles are named after their module, so that no two modules' roles meet.

#[path = "../common/mod.rs"]
mod common;
mod election;
mod fair;
mod multi;
mod mutex;
mod peers;
mod rwlock;
mod semaphore;
mod shutdown;
mod waits;

use fencelock_testkit::process::{run_scenarios, worker_role};

/// What each module lists: its scenarios, or its worker roles, each by name.
type Named = &'static [(&'static str, fn())];

/// Every module's scenarios.
const SCENARIOS: [Named; 9] = [
    election::SCENARIOS,
    fair::SCENARIOS,
    multi::SCENARIOS,
    mutex::SCENARIOS,
    peers::SCENARIOS,
    rwlock::SCENARIOS,
    semaphore::SCENARIOS,
    shutdown::SCENARIOS,
    waits::SCENARIOS,
];

/// Every module's worker roles.
const WORKERS: [Named; 9] = [
    common::handoff::WORKERS,
    election::WORKERS,
    multi::WORKERS,
    mutex::WORKERS,
    peers::WORKERS,
    rwlock::WORKERS,
    semaphore::WORKERS,
    shutdown::WORKERS,
    waits::WORKERS,
];

fn main() {
    let workers = WORKERS.concat();
    if let Some(role) = worker_role() {
        match workers.iter().find(|(name, _)| *name == role) {
            Some((_, work)) => work(),
            None => panic!("unknown worker role {role:?}"),
        }
        return;
    }
    for (i, (role, _)) in workers.iter().enumerate() {
        assert!(
            workers[..i].iter().all(|(other, _)| other != role),
            "two workers share the role {role:?}"
        );
    }
    run_scenarios(&SCENARIOS.concat());
}
