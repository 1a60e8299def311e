//! Exercises the multi-process helpers; this binary is its own worker.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::panic::{self, AssertUnwindSafe};
use std::process::{Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use fencelock_testkit::process::{
    env_parse, env_var, hear, monotonic_nanos, run_scenarios, say, say_all, spawn_worker,
    start_barrier, worker_command, worker_index, worker_role, Event, Workers, DONE,
};
use fencelock_testkit::{check_no_overlap, RedisServer};
use nix::errno::Errno;
use nix::sys::signal;
use nix::unistd::Pid;

/// Bounds the waits of the scenarios below; none should come near it.
const LIMIT: Duration = Duration::from_secs(30);
/// How long a worker that should never finish by itself sleeps.
const FOREVER: Duration = Duration::from_secs(60);

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
    let out = std::process::Command::new(fencelock_testkit::redis_cli_path())
        .args(["-p", &port, "INCR", "counter"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success());
}

/// Worker: after the start barrier, reports `ROUNDS` lines naming itself and its greeting
/// `GREETING`, then `DONE`.
fn reporter() {
    let rounds: usize = env_parse("ROUNDS");
    let greeting = env_var("GREETING");
    start_barrier();
    let index = worker_index();
    say_all((0..rounds).map(|round| format!("{index} {round} {greeting}")));
    say(DONE);
}

/// Worker: echoes every line it hears, prefixed with its index, until `STOP`.
fn echo() {
    let index = worker_index();
    say("READY");
    for line in std::io::stdin().lines() {
        let line = line.expect("read from the orchestrator");
        if line == "STOP" {
            return;
        }
        say(&format!("{index} {line}"));
    }
}

/// Worker: says `HELD`, then on `GO` reports a harmless line and a lost lock, and stays.
fn loser() {
    say("HELD");
    hear("GO");
    say("NOTE all fine");
    say("LOST its lease");
    thread::sleep(FOREVER);
}

/// Worker: prints one line and exits without the `DONE` its orchestrator waits for.
fn quitter() {
    say("partial");
}

/// Worker: prints nothing and never finishes by itself.
fn sleeper() {
    thread::sleep(FOREVER);
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

/// Runs `f`, which must panic, with the panic message kept out of the test output, and
/// returns the message.
fn expect_panic(f: impl FnOnce()) -> String {
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(hook);
    let payload = outcome.expect_err("expected a panic");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Whether process `pid` still exists, reaped or not: signal 0 checks without signalling.
fn process_exists(pid: u32) -> bool {
    // Never 0 or negative: those would address process groups.
    assert!(pid > 1, "not a worker's pid: {pid}");
    let pid = Pid::from_raw(i32::try_from(pid).expect("pid fits in pid_t"));
    match signal::kill(pid, None) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(e) => panic!("cannot check process {pid}: {e}"),
    }
}

fn workers_meet_at_the_barrier_and_report() {
    let envs = [("ROUNDS", "50".to_owned()), ("GREETING", "hi".to_owned())];
    let mut workers = Workers::spawn("reporter", 3, &envs);
    workers.start_together(Instant::now() + LIMIT);
    let deadline = Instant::now() + LIMIT;
    let mut counts = [0usize; 3];
    workers.collect_until(DONE, deadline, |i, line| {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[0], i.to_string(), "worker {i} knows its index");
        assert_eq!(
            fields[1],
            counts[i].to_string(),
            "worker {i}'s lines in order"
        );
        assert_eq!(fields[2], "hi");
        counts[i] += 1;
    });
    workers.reap_all_successful(deadline);
    assert_eq!(counts, [50; 3]);
}

fn send_reaches_one_worker_broadcast_all() {
    let mut workers = Workers::spawn("echo", 2, &[]);
    workers.expect_from_all("READY", Instant::now() + LIMIT);
    workers.send(1, "to one");
    assert_eq!(
        workers.next_event(Instant::now() + LIMIT),
        Event::Line(1, "1 to one".to_owned())
    );
    workers.broadcast("STOP");
    let deadline = Instant::now() + LIMIT;
    let mut closed = [false; 2];
    for _ in 0..2 {
        match workers.next_event(deadline) {
            Event::Closed(i) => closed[i] = true,
            other => panic!("expected the outputs to close, got {other:?}"),
        }
    }
    assert_eq!(closed, [true; 2]);
    workers.reap_all_successful(deadline);
}

fn refuse_line_catches_the_refused_line_only() {
    let mut workers = Workers::spawn("loser", 1, &[]);
    workers.expect_from_all("HELD", Instant::now() + LIMIT);
    workers.refuse_line("LOST");
    workers.broadcast("GO");
    let deadline = Instant::now() + LIMIT;
    // Lines arrive on their own time: look again until the refused one is seen.
    let message = expect_panic(|| {
        while Instant::now() < deadline {
            workers.refuse_line("LOST");
            thread::sleep(Duration::from_millis(5));
        }
    });
    assert!(message.contains("\"LOST its lease\""), "{message}");
}

fn collect_until_fails_when_a_worker_ends_early() {
    let workers = Workers::spawn("quitter", 2, &[]);
    let mut seen = 0;
    let message = expect_panic(|| {
        workers.collect_until("DONE", Instant::now() + LIMIT, |_, line| {
            assert_eq!(line, "partial");
            seen += 1;
        });
    });
    assert!(
        message.contains("closed its output before \"DONE\""),
        "{message}"
    );
    assert!(seen >= 1, "the lines before the end were handed on");
}

fn waits_end_at_their_deadline() {
    let workers = Workers::spawn("sleeper", 1, &[]);
    let started = Instant::now();
    let message = expect_panic(|| {
        workers.expect_from_all("READY", Instant::now() + Duration::from_millis(200));
    });
    assert!(
        message.contains("no output before the deadline"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    let mut workers = workers;
    let message = expect_panic(|| {
        workers.reap(0, Instant::now() + Duration::from_millis(200));
    });
    assert!(message.contains("still runs at its deadline"), "{message}");
}

fn reap_killed_tells_a_kill_from_an_exit() {
    let mut workers = Workers::spawn("sleeper", 1, &[]);
    workers.kill(0);
    workers.reap_killed(0, Instant::now() + LIMIT);

    let mut workers = Workers::spawn("quitter", 1, &[]);
    let message = expect_panic(|| workers.reap_killed(0, Instant::now() + LIMIT));
    assert!(message.contains("did not die of SIGKILL"), "{message}");
}

fn dropping_kills_and_reaps_every_worker() {
    let workers = Workers::spawn("sleeper", 3, &[]);
    let pids: Vec<u32> = (0..3).map(|i| workers.pid(i)).collect();
    assert!(pids.iter().all(|&pid| process_exists(pid)));
    let started = Instant::now();
    drop(workers);
    assert!(started.elapsed() < Duration::from_secs(5));
    for pid in pids {
        assert!(!process_exists(pid), "worker {pid} survived the drop");
    }
}

fn a_failed_assertion_leaves_no_worker_behind() {
    let mut pids = Vec::new();
    let message = expect_panic(|| {
        let workers = Workers::spawn("sleeper", 2, &[]);
        pids.extend((0..2).map(|i| workers.pid(i)));
        panic!("a failed assertion");
    });
    assert_eq!(message, "a failed assertion");
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(!process_exists(pid), "worker {pid} outlived the panic");
    }
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
            "reporter" => reporter(),
            "echo" => echo(),
            "loser" => loser(),
            "quitter" => quitter(),
            "sleeper" => sleeper(),
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
        (
            "workers_meet_at_the_barrier_and_report",
            workers_meet_at_the_barrier_and_report,
        ),
        (
            "send_reaches_one_worker_broadcast_all",
            send_reaches_one_worker_broadcast_all,
        ),
        (
            "refuse_line_catches_the_refused_line_only",
            refuse_line_catches_the_refused_line_only,
        ),
        (
            "collect_until_fails_when_a_worker_ends_early",
            collect_until_fails_when_a_worker_ends_early,
        ),
        ("waits_end_at_their_deadline", waits_end_at_their_deadline),
        (
            "reap_killed_tells_a_kill_from_an_exit",
            reap_killed_tells_a_kill_from_an_exit,
        ),
        (
            "dropping_kills_and_reaps_every_worker",
            dropping_kills_and_reaps_every_worker,
        ),
        (
            "a_failed_assertion_leaves_no_worker_behind",
            a_failed_assertion_leaves_no_worker_behind,
        ),
    ]);
}
