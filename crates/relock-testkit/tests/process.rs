//! Exercises the multi-process helpers; this binary is its own worker.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Output, Stdio};
use std::thread;
use std::time::Duration;

use relock_testkit::process::{
    monotonic_nanos, run_scenarios, spawn_worker, worker_command, worker_role,
};
use relock_testkit::{check_no_overlap, RedisServer};

const HOLD: Duration = Duration::from_millis(100);

/// Worker: records a `start end` pair around a short sleep, as a lock
/// holder would around its critical section. `START_AT` (monotonic ns) makes
/// concurrent workers begin together; `HOLD_MS` sets the sleep.
fn stamp() {
    let env_u64 = |name| std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap());
    if let Some(start_at) = env_u64("START_AT") {
        let now = monotonic_nanos();
        thread::sleep(Duration::from_nanos(start_at.saturating_sub(now)));
    }
    let hold = env_u64("HOLD_MS").map_or(HOLD, Duration::from_millis);
    let start = monotonic_nanos();
    thread::sleep(hold);
    println!("{start} {}", monotonic_nanos());
}

/// Worker: increments a counter on the server named by `REDIS_PORT`,
/// proving workers can reach a server owned by the orchestrator.
fn incr() {
    let port = std::env::var("REDIS_PORT").expect("REDIS_PORT");
    let out = std::process::Command::new(relock_testkit::redis_cli_path())
        .args(["-p", &port, "INCR", "counter"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success());
}

/// Worker: a suite with one passing and one failing scenario, to check
/// what `run_scenarios` prints and how it exits.
fn failing_suite() -> ! {
    // The deliberate panic would only clutter the outer test's output.
    std::panic::set_hook(Box::new(|_| {}));
    run_scenarios(&[("good", || {}), ("bad", || panic!("deliberate"))])
}

fn parse_interval(out: &Output) -> (u64, u64) {
    assert!(out.status.success(), "worker failed: {:?}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

fn clock_is_shared_across_processes() {
    let before = monotonic_nanos();
    let out = spawn_worker("stamp", &[]).wait_with_output().unwrap();
    let after = monotonic_nanos();
    let (start, end) = parse_interval(&out);
    assert!(before < start && start < end && end < after);
    assert!(end - start >= HOLD.as_nanos() as u64);
}

fn overlap_is_detected_across_processes() {
    // One after the other: disjoint.
    let mut sequential: Vec<_> = (0..2)
        .map(|_| parse_interval(&spawn_worker("stamp", &[]).wait_with_output().unwrap()))
        .collect();
    check_no_overlap(&mut sequential).unwrap();

    // Side by side: both start at the same instant and hold for a while,
    // so process start-up jitter cannot pull them apart.
    let start_at = monotonic_nanos() + 300_000_000;
    let envs = [
        ("START_AT", start_at.to_string()),
        ("HOLD_MS", "300".to_owned()),
    ];
    let children: Vec<_> = (0..2).map(|_| spawn_worker("stamp", &envs)).collect();
    let mut concurrent: Vec<_> = children
        .into_iter()
        .map(|c| parse_interval(&c.wait_with_output().unwrap()))
        .collect();
    assert!(check_no_overlap(&mut concurrent).is_err());
}

fn workers_reach_orchestrator_server() {
    let server = RedisServer::start();
    let children: Vec<_> = (0..3)
        .map(|_| spawn_worker("incr", &[("REDIS_PORT", server.port().to_string())]))
        .collect();
    for child in children {
        assert!(child.wait_with_output().unwrap().status.success());
    }
    assert_eq!(server.cli(&["GET", "counter"]), "3");
}

fn run_suite(args: &[&str]) -> (Option<i32>, String) {
    let out = worker_command("failing-suite", &[])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn run_scenarios_reports_like_libtest() {
    let (code, out) = run_suite(&[]);
    assert_eq!(code, Some(101), "{out}");
    assert!(out.contains("running 2 tests\n"), "{out}");
    assert!(out.contains("test good ... ok\n"), "{out}");
    assert!(out.contains("test bad ... FAILED\n"), "{out}");
    assert!(
        out.contains(
            "\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; \
             0 filtered out; finished in "
        ),
        "{out}"
    );

    let (code, out) = run_suite(&["--nocapture", "goo"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out;"),
        "{out}"
    );

    let (code, out) = run_suite(&["--list", "--format", "terse"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "good: test\nbad: test\n");
}

fn main() {
    if let Some(role) = worker_role() {
        match role.as_str() {
            "stamp" => stamp(),
            "incr" => incr(),
            "failing-suite" => failing_suite(),
            other => panic!("unknown worker role {other:?}"),
        }
        return;
    }
    run_scenarios(&[
        (
            "clock_is_shared_across_processes",
            clock_is_shared_across_processes,
        ),
        (
            "overlap_is_detected_across_processes",
            overlap_is_detected_across_processes,
        ),
        (
            "workers_reach_orchestrator_server",
            workers_reach_orchestrator_server,
        ),
        (
            "run_scenarios_reports_like_libtest",
            run_scenarios_reports_like_libtest,
        ),
    ]);
}
