//! The fair mutex across real OS processes, against a real `redis-server`.
//!
//! - `first_come_first_served_across_processes`: while the orchestrator holds the lock, 6
//!   worker processes join the line one after another; once it is released they must get the
//!   lock in exactly that order, one at a time.
//! - `one_wake_up_per_hand_off_however_long_the_line`: with 6 waiters, then with 24 (4
//!   processes × 6 tasks), every hand-off must cost about two script calls (the release and
//!   the first waiter's attempt), counted by the server in `INFO commandstats`: a release that
//!   woke more than the first waiter would add refused attempts per hand-off.
//! - `a_killed_head_waiter_is_skipped`: the first in line is killed with SIGKILL; the release
//!   hands the lock to the live waiter behind it within 50 ms.

use crate::common::handoff::{
    a_killed_head_waiter_is_skipped, one_wake_up_per_hand_off, run_line, Arrival, Kind,
};
use fencelock_testkit::RedisServer;

/// The scenarios, named as libtest names the tests of module `fair`. Their workers are
/// [`handoff`](crate::common::handoff)'s.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[
    (
        "fair::first_come_first_served_across_processes",
        first_come_first_served_across_processes,
    ),
    (
        "fair::one_wake_up_per_hand_off_however_long_the_line",
        one_wake_up_per_hand_off_however_long_the_line,
    ),
    (
        "fair::a_killed_head_waiter_is_skipped",
        a_killed_head_waiter_is_skipped_by_the_release,
    ),
];

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

fn first_come_first_served_across_processes() {
    let server = RedisServer::start();
    let run = run_line(Kind::Fair, &server, 6, 1, Arrival::OneByOne);
    let order: Vec<usize> = run.sections.iter().map(|s| s.worker).collect();
    println!(
        "    order of the turns: {order:?}; {} script calls for {} hand-offs",
        run.calls, run.hand_offs
    );
    assert_eq!(
        order,
        (0..6).collect::<Vec<_>>(),
        "the lock was not taken in the order the workers joined the line"
    );
    assert!(
        run.calls <= 2 * run.hand_offs + 2,
        "{} script calls for {} hand-offs",
        run.calls,
        run.hand_offs
    );
}

fn one_wake_up_per_hand_off_however_long_the_line() {
    one_wake_up_per_hand_off(Kind::Fair);
}

fn a_killed_head_waiter_is_skipped_by_the_release() {
    a_killed_head_waiter_is_skipped(Kind::Fair);
}
