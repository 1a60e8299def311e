//! The fair mutex across real OS processes, against a real `redis-server`.
//!
//! - `first_come_first_served_across_processes`: while the orchestrator holds the lock, 6
//!   worker processes join the line one after another; once it is released they must get the
//!   lock in exactly that order, one at a time.
//! - `one_wake_up_per_hand_off_however_long_the_line`: with 6 waiters, then with 24 (4
//!   processes × 6 tasks), every hand-off must cost about two script calls (the release and
//!   the first waiter's attempt), counted by the server in `INFO commandstats`: a release that
//!   woke more than the first waiter would add refused attempts per hand-off.
//! - `a_stuck_head_waiter_costs_the_next_the_window_*`: the first in line is killed (with and
//!   without a pattern subscriber that makes its channel seem heard), frozen with SIGSTOP, or
//!   cut off half-open; the release offers it its turn all the same (it may be reconnecting),
//!   and the live waiter behind it holds the lock once the offer's window has passed, within
//!   1 s of the release (its 30 s lease would be the failure). The frozen and
//!   the half-open one come back while the live one holds, and must not take their stale
//!   offer for a grant.

use crate::common::handoff::{
    a_stuck_head_waiter_costs_the_next_the_window, one_wake_up_per_hand_off, run_line, Arrival,
    Kind, Stuck,
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
        "fair::a_stuck_head_waiter_costs_the_next_the_window_killed",
        || a_stuck_head_waiter_costs_the_next_the_window(Kind::Fair, Stuck::Killed),
    ),
    (
        "fair::a_stuck_head_waiter_costs_the_next_the_window_killed_behind_a_tap",
        || a_stuck_head_waiter_costs_the_next_the_window(Kind::Fair, Stuck::KilledBehindATap),
    ),
    (
        "fair::a_stuck_head_waiter_costs_the_next_the_window_frozen",
        || a_stuck_head_waiter_costs_the_next_the_window(Kind::Fair, Stuck::Frozen),
    ),
    (
        "fair::a_stuck_head_waiter_costs_the_next_the_window_half_open",
        || a_stuck_head_waiter_costs_the_next_the_window(Kind::Fair, Stuck::HalfOpen),
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
