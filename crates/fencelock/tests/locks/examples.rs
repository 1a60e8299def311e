//! Runs the programs of `examples/` as users run them, each as its own process against real
//! servers, and checks what they print and how they exit.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fencelock::Client;
use fencelock_testkit::process::{Event, Workers};
use fencelock_testkit::{Postgres, RedisServer};

const EXAMPLES: [&str; 4] = [
    "cron_leader",
    "fenced_postgres",
    "process_semaphore",
    "rw_cache",
];
/// Generous: the examples run for a few seconds, on a machine that may be busy building.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The command that runs example `name`, built first (once per test binary) by the cargo that
/// builds this test, into the same target folder and profile.
fn example(name: &str) -> Command {
    static PROFILE_DIR: OnceLock<PathBuf> = OnceLock::new();
    let profile_dir = PROFILE_DIR.get_or_init(|| {
        // This test runs as <target>/<profile>/deps/examples-<hash>.
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test runs from <target>/<profile>/deps")
            .to_path_buf();
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_owned(),
            Some(other) => other.to_owned(),
        };
        let target = profile_dir.parent().expect("the target folder");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "-p", "fencelock", "--profile", &profile])
            .arg("--target-dir")
            .arg(target)
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        for example in EXAMPLES {
            build.args(["--example", example]);
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the examples failed: {status}");
        profile_dir
    });
    let mut command = Command::new(profile_dir.join("examples").join(name));
    // Only what each test gives: not the Redis or database of whoever runs the tests.
    command.env_remove("REDIS_URL").env_remove("DATABASE_URL");
    command
}

/// Runs one example to its end and returns its lines, failing unless it exits successfully.
fn run_to_end(name: &str, command: Command) -> Vec<String> {
    let mut run = Workers::spawn_commands(name, [command]);
    let deadline = Instant::now() + RUN_LIMIT;
    let mut lines = Vec::new();
    while let Event::Line(_, line) = run.next_event(deadline) {
        lines.push(line);
    }
    let status = run.reap(0, deadline);
    assert!(
        status.success(),
        "{name} failed ({status}), printing {lines:#?}"
    );
    lines
}

/// The number after `fence ` in `line`.
fn fence_in(line: &str) -> u64 {
    line.split("fence ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {line:?}"))
}

fn line_with<'a>(lines: &'a [String], start: &str, part: &str) -> &'a str {
    lines
        .iter()
        .find(|line| line.starts_with(start) && line.contains(part))
        .unwrap_or_else(|| panic!("no line {start:?} … {part:?} in {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn fenced_postgres_refuses_the_holder_paused_past_its_lease() {
    let redis = RedisServer::start();
    let postgres = Postgres::start();
    let mut command = example("fenced_postgres");
    command
        .env("REDIS_URL", redis.url())
        .env("DATABASE_URL", postgres.url());
    let lines = tokio::task::spawn_blocking(move || run_to_end("fenced_postgres", command))
        .await
        .expect("the example's run");

    let stale = fence_in(line_with(&lines, "holder 1: locked", "held: true"));
    let current = line_with(&lines, "holder 2: locked", "wrote 200: 1 row updated");
    let current = fence_in(current);
    assert!(current > stale, "{lines:#?}");
    line_with(&lines, "holder 1: wrote 100", "0 rows updated");

    // What the database holds is the later holder's write, whatever the example printed.
    let (db, connection) = tokio_postgres::connect(&postgres.url(), tokio_postgres::NoTls)
        .await
        .expect("connects to PostgreSQL");
    tokio::spawn(connection);
    let row = db
        .query_one(
            "SELECT balance, fence FROM accounts WHERE id = 'alice'",
            &[],
        )
        .await
        .expect("the account row");
    let (balance, fence): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(balance, 200);
    assert_eq!(u64::try_from(fence).ok(), Some(current));
}

#[tokio::test(flavor = "multi_thread")]
async fn cron_leader_hands_over_at_once_on_sigterm_and_after_a_lease_on_a_crash() {
    const LEASE: Duration = Duration::from_secs(10);
    let redis = RedisServer::start();
    let pods = (0..3).map(|pod| {
        let mut command = example("cron_leader");
        command
            .env("REDIS_URL", redis.url())
            .env("POD_NAME", format!("pod-{pod}"))
            .env("TICKS", "100000")
            .env("TICK_MS", "100")
            .env("LEASE_MS", LEASE.as_millis().to_string());
        command
    });
    let mut pods = Workers::spawn_commands("cron_leader", pods.collect::<Vec<_>>());
    let client = Client::connect(redis.url().as_str()).await.expect("client");

    let (first, first_fence) = next_leader(&pods);
    let label = client
        .lock_info("cron:leader")
        .await
        .expect("lock info")
        .and_then(|info| info.holder);
    assert_eq!(
        label,
        Some(format!("pod-{first}")),
        "the pod name labels the holder"
    );

    // Stopped as Kubernetes stops a pod: the leader releases, so the next one need not wait
    // for the lease.
    let terminated = Instant::now();
    pods.terminate(first);
    let (second, second_fence) = next_leader(&pods);
    let handover = terminated.elapsed();
    assert_ne!(second, first);
    assert!(second_fence > first_fence);
    assert!(
        handover < LEASE / 2,
        "took {handover:?} to hand over after SIGTERM: the lock was not released"
    );
    let status = pods.reap(first, Instant::now() + RUN_LIMIT);
    assert!(status.success(), "the stopped leader exited with {status}");

    // A crashed leader releases nothing: the last pod leads once the lease has run out.
    pods.kill(second);
    let (third, third_fence) = next_leader(&pods);
    assert!(third != first && third != second);
    assert!(third_fence > second_fence);
    pods.reap_killed(second, Instant::now() + RUN_LIMIT);
}

/// Reads the pods' output until one reports that it leads: its index and fence. Jobs and
/// other reports are skipped.
fn next_leader(pods: &Workers) -> (usize, u64) {
    let deadline = Instant::now() + RUN_LIMIT;
    loop {
        match pods.next_event(deadline) {
            Event::Line(pod, line) if line.contains(": leader (fence ") => {
                return (pod, fence_in(&line))
            }
            Event::Line(..) | Event::Closed(_) => {}
        }
    }
}

#[test]
fn process_semaphore_never_lets_more_workers_render_than_permits() {
    let redis = RedisServer::start();
    let mut command = example("process_semaphore");
    command.env("REDIS_URL", redis.url());
    let lines = run_to_end("process_semaphore", command);
    let starts = lines
        .iter()
        .filter(|l| l.contains(": rendering from "))
        .count();
    let ends = lines.iter().filter(|l| l.contains(": done at ")).count();
    assert_eq!((starts, ends), (5, 5), "{lines:#?}");
    let verdict = line_with(&lines, "at most ", "of 5 workers rendered at once");
    let most: u32 = verdict
        .split(' ')
        .nth(2)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!((1..=2).contains(&most), "{verdict}");
}

#[test]
fn rw_cache_fetches_once_for_all_readers_on_a_private_redis() {
    // No REDIS_URL: the example starts its own server.
    let lines = run_to_end("rw_cache", example("rw_cache"));
    let readers = lines.iter().filter(|l| l.starts_with("reader ")).count();
    assert_eq!(readers, 8, "{lines:#?}");
    line_with(&lines, "8 readers, 1 fetch(es)", "from the source");
}
