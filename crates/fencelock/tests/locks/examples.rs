//! Runs the programs a user copies, as users run them: each example of `examples/` and the
//! program README.md opens with, each as its own process against a private Redis given in
//! `REDIS_URL`, checking what they print, how they exit and what they leave in Redis.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencelock::{Client, LockKind};
use fencelock_testkit::process::{Event, Workers};
use fencelock_testkit::{Postgres, RedisServer};

/// Generous: the examples run for a few seconds, on a machine that may be busy building.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Where and how this test was built: the target folder, the profile's name and its folder.
struct Build {
    target: PathBuf,
    profile: String,
    profile_dir: PathBuf,
}

fn build() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| {
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
        let target = profile_dir
            .parent()
            .expect("the target folder")
            .to_path_buf();
        Build {
            target,
            profile,
            profile_dir,
        }
    })
}

/// A `cargo build` into this test's target folder and profile, in the environment of a build
/// started from a shell, so that the two reuse each other's work.
fn cargo_build(manifest: &Path) -> Command {
    let build = build();
    let mut cargo = fencelock_testkit::process::cargo();
    cargo
        .args(["build", "--quiet", "--profile", &build.profile])
        .arg("--target-dir")
        .arg(&build.target)
        .arg("--manifest-path")
        .arg(manifest);
    cargo
}

/// The command that runs example `name`, every example built first (once per test binary)
/// by the cargo that builds this test, into the same target folder and profile. It has no
/// `REDIS_URL` or `DATABASE_URL` of whoever runs the tests: each test gives its own.
fn example(name: &str) -> Command {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let status = cargo_build(&manifest)
            .args(["-p", "fencelock", "--examples"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the examples failed: {status}");
    });
    let mut command = Command::new(build().profile_dir.join("examples").join(name));
    command.env_remove("REDIS_URL").env_remove("DATABASE_URL");
    command
}

/// `command` with `REDIS_URL` set to `redis`'s.
fn on(redis: &RedisServer, mut command: Command) -> Command {
    command.env("REDIS_URL", redis.url());
    command
}

/// Runs one program to its end and returns its lines, failing unless it exits successfully.
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

/// Runs every one of `commands` to its end, all at once, and returns each one's lines, failing
/// unless each exits successfully.
fn run_all_to_end(name: &str, commands: Vec<Command>) -> Vec<Vec<String>> {
    let count = commands.len();
    let mut runs = Workers::spawn_commands(name, commands);
    let deadline = Instant::now() + RUN_LIMIT;
    let mut lines = vec![Vec::new(); count];
    let mut open = count;
    while open > 0 {
        match runs.next_event(deadline) {
            Event::Line(run, line) => lines[run].push(line),
            Event::Closed(_) => open -= 1,
        }
    }
    for (run, lines) in lines.iter().enumerate() {
        let status = runs.reap(run, deadline);
        assert!(
            status.success(),
            "{name} {run} failed ({status}), printing {lines:#?}"
        );
    }
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

fn position(lines: &[String], start: &str) -> usize {
    lines
        .iter()
        .position(|line| line.starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in {lines:#?}"))
}

async fn client_on(redis: &RedisServer) -> Client {
    Client::connect(redis.url().as_str()).await.expect("client")
}

/// Runs blocking `work` (a program's run) off the runtime's threads; its panic is the test's.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

#[test]
fn every_example_is_run_by_a_test_here() {
    let this = include_str!("examples.rs");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the examples folder")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    let unrun: Vec<&String> = names
        .iter()
        .filter(|name| !this.contains(&format!("example(\"{name}\")")))
        .collect();
    assert!(unrun.is_empty(), "no test runs the examples {unrun:?}");
}

// README.md's first program ---------------------------------------------------------------------

/// The fenced code blocks of a Markdown text: each one's info string and text.
fn code_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (open.take(), line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim().to_owned(), String::new())),
            (None, None) => {}
            (Some(block), Some("")) => blocks.push(block),
            (Some((info, mut text)), _) => {
                text.push_str(line);
                text.push('\n');
                open = Some((info, text));
            }
        }
    }
    blocks
}

/// What a README opens with: its first code block, the `[dependencies]` (` ```toml `), and its
/// second, the program (` ```rust `, which GitHub shows and nothing ignores).
fn first_program(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    match code_blocks(&text).as_slice() {
        [(toml, dependencies), (rust, program), ..] if toml == "toml" && rust == "rust" => {
            (dependencies.clone(), program.clone())
        }
        blocks => panic!(
            "{path:?} does not open with a ```toml block of dependencies and a ```rust \
             program: its first blocks are {:?}",
            blocks
                .iter()
                .map(|(info, _)| info)
                .take(2)
                .collect::<Vec<_>>()
        ),
    }
}

/// The `[profile.*]` sections of a Cargo manifest, as written.
fn profile_sections(manifest: &str) -> String {
    let mut sections = String::new();
    let mut in_profile = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_profile = line.starts_with("[profile.");
        }
        if in_profile {
            sections.push_str(line);
            sections.push('\n');
        }
    }
    sections
}

/// Writes `text` to `path` unless it holds that already, so that cargo finds an unchanged
/// program built.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
    }
}

/// Builds `program` with `dependencies` as a package of its own, as a user who pasted them
/// into a new project would, but with `fencelock` taken from this workspace, the workspace's
/// lock file (so nothing is downloaded: `--offline`) and profiles, and this test's target
/// folder (so whatever the workspace built with the same features is reused, and the program
/// is built once, then only again when it or fencelock changes). Returns the binary.
fn build_readme_program(dependencies: &str, program: &str) -> PathBuf {
    const NAME: &str = "readme-program";
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(NAME);
    std::fs::create_dir_all(dir.join("src")).expect("the program's folder");
    let workspace_manifest =
        std::fs::read_to_string(workspace.join("Cargo.toml")).expect("the workspace manifest");
    let manifest = format!(
        "[package]\nname = \"{NAME}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         {dependencies}\n\
         [patch.crates-io]\nfencelock = {{ path = \"{}\" }}\n\n\
         {}\n\
         # A workspace of its own, though it sits inside this one's target folder.\n[workspace]\n",
        env!("CARGO_MANIFEST_DIR"),
        profile_sections(&workspace_manifest),
    );
    write_if_changed(&dir.join("Cargo.toml"), &manifest);
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).expect("the lock file");
    write_if_changed(&dir.join("src/main.rs"), program);
    let output = cargo_build(&dir.join("Cargo.toml"))
        .arg("--offline")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "README.md's program, built as written in {dir:?}, does not compile ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    build().profile_dir.join(NAME)
}

#[test]
fn the_readme_opens_with_a_program_that_compiles_and_runs_as_written() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (dependencies, program) = first_program(&workspace.join("README.md"));
    let crate_readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    assert_eq!(
        first_program(&crate_readme),
        (dependencies.clone(), program.clone()),
        "the crate's README opens with another program than the repository's"
    );
    // The name the program locks, to look at in Redis afterwards.
    let name = program
        .split(".mutex(\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the program locks a mutex named by a string literal");

    let binary = build_readme_program(&dependencies, &program);
    let redis = RedisServer::start();
    let lines = run_to_end("README program", on(&redis, Command::new(binary)));
    let fence = fence_in(line_with(&lines, "", "fence "));

    // The lock was taken and given back: its key keeps only that grant's fence, as the key of
    // a released mutex does, and no token of a holder.
    let key = format!("fencelock:{{{name}}}:mutex");
    assert_eq!(redis.cli(&["GET", &key]), format!("~{fence}"), "{lines:#?}");
}

// The examples ----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn fenced_postgres_refuses_the_holder_paused_past_its_lease() {
    let redis = RedisServer::start();
    let postgres = Postgres::start();
    let mut command = on(&redis, example("fenced_postgres"));
    command.env("DATABASE_URL", postgres.url());
    let lines = blocking(move || run_to_end("fenced_postgres", command)).await;

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
async fn cron_leader_runs_the_job_once_and_the_others_skip_it_even_when_late() {
    let redis = RedisServer::start();
    let pod = |n: usize| {
        let mut command = on(&redis, example("cron_leader"));
        command.env("POD_NAME", format!("pod-{n}"));
        command
    };
    let together = vec![pod(0), pod(1), pod(2)];
    let runs = blocking(move || run_all_to_end("cron_leader", together)).await;
    let ran: Vec<usize> = (0..3)
        .filter(|&n| {
            runs[n]
                .iter()
                .any(|line| line.contains("cleaning up (fence "))
        })
        .collect();
    let [leader] = ran[..] else {
        panic!("not one pod ran the job: {runs:#?}")
    };
    line_with(&runs[leader], &format!("pod-{leader}: "), "cleaned up");
    for (n, lines) in runs.iter().enumerate().filter(|&(n, _)| n != leader) {
        line_with(lines, &format!("pod-{n}: "), "skipping");
    }

    // The lock outlives the run, labelled with the pod that ran it, for some five minutes.
    let client = client_on(&redis).await;
    let info = client.lock_info("cron:cleanup").await.expect("lock info");
    let info = info.expect("the lock is kept after the job");
    assert_eq!(info.holder, Some(format!("pod-{leader}")));
    assert!(
        info.remaining
            .is_some_and(|left| left > Duration::from_secs(200)),
        "{info:?}"
    );
    // A pod that starts after the job ended skips it too.
    let late = pod(3);
    let lines = blocking(move || run_to_end("cron_leader", late)).await;
    line_with(&lines, "pod-3: ", "skipping");
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_election_publishes_the_leader_and_hands_over_at_once_on_sigterm() {
    let redis = RedisServer::start();
    let pods = (0..3).map(|n| {
        let mut command = on(&redis, example("leader_election"));
        command.env("POD_NAME", format!("pod-{n}"));
        command
    });
    let mut pods = Pods {
        workers: Workers::spawn_commands("leader_election", pods.collect::<Vec<_>>()),
        lines: vec![Vec::new(); 3],
        closed: BTreeSet::new(),
    };
    let election = client_on(&redis)
        .await
        .election("scheduler")
        .expect("election");

    let (first, first_fence) = pods.next_leader();
    let leader = election.leader().await.expect("leader").expect("one leads");
    assert_eq!(leader.value(), format!("pod-{first}"));
    assert_eq!(leader.fence().get(), first_fence);

    // Stopped as Kubernetes stops a pod: it resigns, so a standby need not wait for the lease
    // (30 s), and the stopped pod exits successfully.
    let terminated = Instant::now();
    pods.workers.terminate(first);
    let (second, second_fence) = pods.next_leader();
    let handover = terminated.elapsed();
    assert_ne!(second, first);
    assert!(second_fence > first_fence);
    assert!(
        handover < Duration::from_secs(10),
        "took {handover:?} to hand over after SIGTERM: the leadership was not resigned"
    );
    pods.until_closed(first);
    let status = pods.workers.reap(first, Instant::now() + RUN_LIMIT);
    assert!(status.success(), "the stopped leader exited with {status}");
    assert_eq!(
        pods.lines[first].last().map(String::as_str),
        Some(format!("pod-{first}: resigned").as_str()),
        "{:#?}",
        pods.lines
    );
    let leader = election.leader().await.expect("leader").expect("one leads");
    assert_eq!(leader.value(), format!("pod-{second}"));
}

/// Instances of a program, with what each printed so far and which have closed their output.
struct Pods {
    workers: Workers,
    lines: Vec<Vec<String>>,
    closed: BTreeSet<usize>,
}

impl Pods {
    /// Reads one line or closed output.
    fn read(&mut self) -> Option<(usize, String)> {
        match self.workers.next_event(Instant::now() + RUN_LIMIT) {
            Event::Line(pod, line) => {
                self.lines[pod].push(line.clone());
                Some((pod, line))
            }
            Event::Closed(pod) => {
                self.closed.insert(pod);
                None
            }
        }
    }

    /// Reads until a pod reports that it leads: its index and fence.
    fn next_leader(&mut self) -> (usize, u64) {
        loop {
            if let Some((pod, line)) = self.read()
                && line.contains(": leading (fence ")
            {
                return (pod, fence_in(&line));
            }
        }
    }

    /// Reads until `pod` has closed its output.
    fn until_closed(&mut self, pod: usize) {
        while !self.closed.contains(&pod) {
            self.read();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn blocking_threads_write_one_at_a_time_with_rising_fences() {
    let redis = RedisServer::start();
    let command = on(&redis, example("blocking"));
    let lines = blocking(move || run_to_end("blocking", command)).await;
    let (report, summary) = lines.split_at(lines.len() - 1);
    assert_eq!(summary, ["4 parts written, one at a time"], "{lines:#?}");
    assert_eq!(report.len(), 8, "{lines:#?}");
    let mut fences = Vec::new();
    let mut parts = Vec::new();
    for pair in report.chunks(2) {
        // Each write ends before the next begins: no other thread's line comes in between.
        let part = pair[0]
            .strip_prefix("part ")
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_else(|| panic!("{lines:#?}"));
        assert!(pair[0].contains(": writing (fence "), "{lines:#?}");
        assert_eq!(pair[1], format!("part {part}: written"), "{lines:#?}");
        fences.push(fence_in(&pair[0]));
        parts.push(part.to_owned());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{lines:#?}");
    parts.sort();
    assert_eq!(parts, ["1", "2", "3", "4"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn fair_mutex_prints_the_jobs_in_the_order_they_arrived() {
    let redis = RedisServer::start();
    let command = on(&redis, example("fair_mutex"));
    let lines = blocking(move || run_to_end("fair_mutex", command)).await;
    let jobs = |what: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|line| line.contains(what))
            .map(|line| line.split(':').next().unwrap_or_default().to_owned())
            .collect()
    };
    let in_order: Vec<String> = (1..=5).map(|job| format!("job {job}")).collect();
    assert_eq!(jobs(": waiting for the printer"), in_order, "{lines:#?}");
    assert_eq!(jobs(": printing (fence "), in_order, "{lines:#?}");
    let fences: Vec<u64> = lines
        .iter()
        .filter(|line| line.contains(": printing"))
        .map(|line| fence_in(line))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{lines:#?}");
    let client = client_on(&redis).await;
    let left = client.locks_named("printer").await.expect("locks");
    assert!(
        !left.iter().any(|lock| lock.kind == LockKind::FairMutex),
        "{left:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn multi_mutex_transfers_both_ways_without_losing_one() {
    let redis = RedisServer::start();
    let command = on(&redis, example("multi_mutex"));
    let lines = blocking(move || run_to_end("multi_mutex", command)).await;
    let transfers: Vec<&String> = lines.iter().filter(|l| l.contains(" -> ")).collect();
    assert_eq!(transfers.len(), 10, "{lines:#?}");
    // Both names' fences rise from one transfer to the next: each held both at once.
    for account in ["account:alice ", "account:bob "] {
        let fences: Vec<u64> = transfers
            .iter()
            .map(|line| {
                let after = line.split(account).nth(1).expect("the account's fence");
                fence_in(&format!("fence {after}"))
            })
            .collect();
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{lines:#?}");
    }
    // 100 each; five transfers of 10 to bob and five of 7 to alice.
    line_with(&lines, "balances: alice 85, bob 115", "");
    assert_eq!(redis.cli(&["GET", "balance:alice"]), "85");
    assert_eq!(redis.cli(&["GET", "balance:bob"]), "115");
}

#[tokio::test(flavor = "multi_thread")]
async fn reentrant_mutex_lets_its_holder_in_again_and_keeps_others_out() {
    let redis = RedisServer::start();
    let command = on(&redis, example("reentrant_mutex"));
    let lines = blocking(move || run_to_end("reentrant_mutex", command)).await;
    let ship = fence_in(line_with(&lines, "ship: locked the order", ""));
    let again = fence_in(line_with(&lines, "charge: locked the order again", ""));
    assert_eq!(
        again, ship,
        "a hold added by the same holder keeps its fence"
    );
    let order = [
        "ship: locked",
        "charge: locked",
        "refund: the order is busy",
        "refund: locked",
    ];
    let positions: Vec<usize> = order.iter().map(|start| position(&lines, start)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{lines:#?}");
    let refund = fence_in(line_with(&lines, "refund: locked the order", ""));
    assert!(refund > ship, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lottery_workers_racing_at_noon_draw_exactly_once() {
    let redis = RedisServer::start();
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let noon = (epoch_ms + 1000).to_string();
    let draw = format!("draw-{epoch_ms}");
    let workers = (1..=3)
        .map(|worker| {
            let mut command = on(&redis, example("lottery"));
            command.args([worker.to_string(), noon.clone(), draw.clone()]);
            command
        })
        .collect();
    let runs = blocking(move || run_all_to_end("lottery", workers)).await;
    let lines: Vec<String> = runs.concat();
    let drew: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("DREW THE WINNERS"))
        .collect();
    assert_eq!(drew.len(), 1, "{lines:#?}");
    let others = lines
        .iter()
        .filter(|l| l.contains("another instance holds the lock") || l.contains("draw is done"))
        .count();
    assert_eq!(others, 2, "{lines:#?}");
    // The result is recorded with the winner's fence.
    let record = redis.cli(&["GET", &format!("fencelock-demo:lottery:{draw}:winners")]);
    assert_eq!(fence_in(&record), fence_in(drew[0]), "{record}");
}

#[test]
fn process_semaphore_never_lets_more_workers_render_than_permits() {
    let redis = RedisServer::start();
    let lines = run_to_end(
        "process_semaphore",
        on(&redis, example("process_semaphore")),
    );
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
fn rw_cache_fetches_once_for_all_readers() {
    let redis = RedisServer::start();
    let lines = run_to_end("rw_cache", on(&redis, example("rw_cache")));
    let readers = lines.iter().filter(|l| l.starts_with("reader ")).count();
    assert_eq!(readers, 8, "{lines:#?}");
    line_with(&lines, "8 readers, 1 fetch(es)", "from the source");
    assert_eq!(
        redis.cli(&["GET", "cache:exchange-rates"]),
        "EUR/USD 1.08, EUR/GBP 0.85"
    );
}
