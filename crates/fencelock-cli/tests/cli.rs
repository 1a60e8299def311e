//! The real `fencelock` binary against real redis-server processes.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::{RedisServer, ServerOptions};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

#[path = "cli/deadlocks.rs"]
mod deadlocks;

const FENCELOCK: &str = env!("CARGO_BIN_EXE_fencelock");

fn fencelock(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = Command::new(FENCELOCK);
    command.args(args).env("REDIS_URL", server.url());
    command
}

fn output(server: &RedisServer, args: &[&str]) -> Output {
    fencelock(server, args).output().expect("run fencelock")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Polls until `fencelock status --json` lists `name`, so a background `fencelock run` holds it.
fn wait_until_held(server: &RedisServer, name: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = output(server, &["status", name, "--json"]);
        let locks: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("status --json is JSON");
        if let Some(lock) = locks.as_array().and_then(|a| a.first()) {
            return lock.clone();
        }
        assert!(Instant::now() < deadline, "{name} never became held");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a background `fencelock run` and its command's process group on every path.
struct Background {
    child: Child,
    group_file: Option<std::path::PathBuf>,
}

impl Drop for Background {
    fn drop(&mut self) {
        // fencelock starts each command as the leader of its own process group.
        let mut groups = children_of(self.child.id());
        groups.extend(
            self.group_file
                .as_ref()
                .and_then(|f| std::fs::read_to_string(f).ok())
                .and_then(|pid| pid.trim().parse::<i32>().ok()),
        );
        for group in groups {
            // Never 0 or 1: those would name our own group or every process.
            if group > 1 {
                let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pids whose parent is `parent`, from `/proc/<pid>/stat`.
fn children_of(parent: u32) -> Vec<i32> {
    let parent = parent.to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may contain spaces, so split after its `)`.
            let after_comm = &stat[stat.rfind(')')? + 1..];
            let ppid = after_comm.split_whitespace().nth(1)?;
            if ppid != parent {
                return None;
            }
            entry.file_name().to_str()?.parse().ok()
        })
        .collect()
}

/// A shell command that records its pid (= its process group) and then runs `script`.
fn recorded(dir: &Path, script: &str) -> (String, std::path::PathBuf) {
    let file = dir.join("group");
    (format!("echo $$ > {}; {script}", file.display()), file)
}

#[test]
fn twenty_concurrent_runs_never_overlap_and_count_exactly() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("counter");
    let log = dir.path().join("log");
    std::fs::write(&counter, "0").expect("counter");
    // A non-atomic read-modify-write with a pause in the middle: two runs at once would lose
    // an increment and overlap in the log.
    let script = format!(
        "s=$(date +%s%N); n=$(cat {c}); sleep 0.02; echo $((n+1)) > {c}; echo \"$s $(date +%s%N)\" >> {l}",
        c = counter.display(),
        l = log.display()
    );
    let runs: Vec<Child> = (0..20)
        .map(|_| {
            fencelock(
                &server,
                &["run", "counter", "--wait", "60s", "--", "sh", "-c", &script],
            )
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencelock")
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().expect("wait");
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(
        std::fs::read_to_string(&counter).expect("counter").trim(),
        "20"
    );
    let mut intervals: Vec<(u64, u64)> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').expect("two stamps");
            (a.parse().expect("start"), b.parse().expect("end"))
        })
        .collect();
    assert_eq!(intervals.len(), 20);
    fencelock_testkit::check_no_overlap(&mut intervals).expect("no two runs at once");
}

#[test]
fn a_killed_fencelock_frees_the_lock_after_its_lease_not_before() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (script, group_file) = recorded(dir.path(), "exec sleep 30");
    let mut holder = Background {
        child: fencelock(
            &server,
            &[
                "run", "--lease", "1500ms", "victim", "--", "sh", "-c", &script,
            ],
        )
        .spawn()
        .expect("spawn"),
        group_file: Some(group_file),
    };
    wait_until_held(&server, "victim");
    holder.child.kill().expect("kill -9");
    let killed = Instant::now();
    let _ = holder.child.wait();
    assert_eq!(
        code(&output(
            &server,
            &["run", "--no-wait", "victim", "--", "true"]
        )),
        73
    );
    let next = output(&server, &["run", "--wait", "5s", "victim", "--", "true"]);
    let waited = killed.elapsed();
    assert_eq!(code(&next), 0, "{}", stderr(&next));
    println!("the next run got the lock {waited:?} after the kill");
    // At the kill the lease had between 2/3 of 1.5 s and all of it left.
    assert!(
        waited >= Duration::from_millis(900),
        "{waited:?}: freed before the lease ended"
    );
    assert!(waited < Duration::from_millis(3000), "{waited:?}");
}

/// Runs a command that records SIGTERM under lock `name` (of the kind `kind` selects), injects
/// `fault` once the lock is held, and checks that fencelock stopped the command with SIGTERM and
/// exited with the lost code.
fn assert_fault_stops_the_command(name: &str, kind: &[&str], fault: impl FnOnce(&RedisServer)) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("term");
    let script = format!(
        "trap 'echo TERM > {}; exit 143' TERM; while true; do sleep 0.05; done",
        mark.display()
    );
    let mut args = vec!["run", "--lease", "900ms"];
    args.extend_from_slice(kind);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let run = Background {
        child: fencelock(&server, &args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    wait_until_held(&server, name);
    fault(&server);
    let out = finish(run, Duration::from_secs(10));
    server.resume();
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost lock"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&mark)
            .expect("the command got SIGTERM")
            .trim(),
        "TERM"
    );
}

#[test]
fn a_deleted_lock_stops_the_command_with_sigterm_and_exits_75() {
    assert_fault_stops_the_command("doomed", &[], |server| {
        server.cli(&["DEL", "fencelock:{doomed}:mutex"]);
    });
}

#[test]
fn redis_paused_past_the_lease_stops_the_command_and_exits_75() {
    assert_fault_stops_the_command("stalled", &[], RedisServer::pause);
}

#[test]
fn a_deleted_semaphore_stops_the_command_with_sigterm_and_exits_75() {
    assert_fault_stops_the_command("pool", &["--semaphore", "3"], |server| {
        server.cli(&["DEL", "fencelock:{pool}:sem"]);
    });
}

#[test]
fn a_deleted_read_hold_stops_the_command_with_sigterm_and_exits_75() {
    assert_fault_stops_the_command("catalog", &["--read"], |server| {
        server.cli(&["DEL", "fencelock:{catalog}:rw"]);
    });
}

#[test]
fn a_deleted_fair_mutex_stops_the_command_with_sigterm_and_exits_75() {
    assert_fault_stops_the_command("printer", &["--fair"], |server| {
        server.cli(&["DEL", "fencelock:{printer}:fair"]);
    });
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = RedisServer::start();
    let run = Background {
        child: fencelock(
            &server,
            &[
                "run",
                "--lease",
                "900ms",
                "--kill-grace",
                "300ms",
                "stubborn",
                "--",
                "sh",
                "-c",
                "trap '' TERM; while true; do sleep 0.05; done",
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn"),
        group_file: None,
    };
    wait_until_held(&server, "stubborn");
    server.cli(&["DEL", "fencelock:{stubborn}:mutex"]);
    let out = finish(run, Duration::from_secs(10));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
}

#[test]
fn no_wait_against_a_held_lock_says_who_holds_it() {
    let server = RedisServer::start();
    let _holder = Background {
        child: fencelock(&server, &["run", "busy", "--", "sleep", "30"])
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    let held = wait_until_held(&server, "busy");
    let out = output(&server, &["run", "--no-wait", "busy", "--", "true"]);
    assert_eq!(code(&out), 73);
    let message = stderr(&out);
    let holder = held["holder"].as_str().expect("holder label");
    assert!(
        message.contains(holder) && message.contains("lease ends in"),
        "{message}"
    );
    let timed_out = output(&server, &["run", "--wait", "200ms", "busy", "--", "true"]);
    assert_eq!(code(&timed_out), 74, "{}", stderr(&timed_out));
}

#[test]
fn a_run_with_a_layout_holds_the_other_library_s_key_without_a_fence() {
    let server = RedisServer::start();
    // While the command runs, the key is redis-py's own (the name, no prefix), its value a
    // token, and the command is given no fence.
    let script = "test -z \"$FENCELOCK_FENCE\" && redis-cli -u \"$REDIS_URL\" GET jobs:nightly";
    let out = output(
        &server,
        &[
            "run",
            "--layout",
            "redis-py",
            "jobs:nightly",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().len() >= 16,
        "a token under jobs:nightly: {out:?}"
    );
    assert_eq!(server.cli(&["EXISTS", "jobs:nightly"]), "0", "released");
    // A redis-py holder (as `Lock(r, "jobs:nightly", timeout=30).acquire()` writes it) keeps
    // the run out.
    server.cli(&["SET", "jobs:nightly", "6f0e1d2c", "PX", "30000"]);
    let out = output(
        &server,
        &[
            "run",
            "--layout",
            "redis-py",
            "--no-wait",
            "jobs:nightly",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&out), 73, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lock in redis-py's layout \"jobs:nightly\" is held"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.cli(&["GET", "jobs:nightly"]), "6f0e1d2c");
}

#[test]
fn status_json_describes_held_locks() {
    let server = RedisServer::start();
    let holder = Background {
        child: fencelock(&server, &["run", "report:2026", "--", "sleep", "30"])
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    let lock = wait_until_held(&server, "report:*");
    assert_eq!(lock["name"], "report:2026");
    assert_eq!(lock["kind"], "mutex");
    let holder_label = lock["holder"].as_str().expect("holder");
    assert!(
        holder_label.ends_with(&format!("/{}", holder.child.id())),
        "{holder_label}"
    );
    assert!(lock["fence"].as_u64().expect("fence") > 0);
    let left = lock["remaining_ms"].as_u64().expect("remaining");
    assert!(left > 20_000 && left <= 30_000, "{left}");
    assert_eq!(lock["waiting_clients"], 0);
    let none: serde_json::Value =
        serde_json::from_slice(&output(&server, &["status", "other*", "--json"]).stdout)
            .expect("json");
    assert_eq!(none, serde_json::json!([]));
    let table = String::from_utf8(output(&server, &["status"]).stdout).expect("utf-8");
    assert!(
        table.starts_with("NAME") && table.contains("report:2026"),
        "{table}"
    );
}

#[test]
fn unlock_force_removes_a_stuck_lock_and_says_what_it_removed() {
    let server = RedisServer::start();
    server.cli(&[
        "SET",
        "fencelock:{stuck}:mutex",
        "tokentokentokentokento:42:old-host/7",
        "PX",
        "60000",
    ]);
    let refused = output(&server, &["unlock", "stuck"]);
    assert_eq!(code(&refused), 64);
    let out = output(&server, &["unlock", "stuck", "--force"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("old-host/7") && said.contains("fence 42"),
        "{said}"
    );
    // Only the name's last fence stays behind.
    assert_eq!(server.cli(&["GET", "fencelock:{stuck}:mutex"]), "~42");
    assert_eq!(code(&output(&server, &["unlock", "stuck", "--force"])), 78);
}

/// An election's leader is listed by `status` and its leadership released by `unlock
/// --force`, as every kind's holds are; the `elect` whose leadership was removed learns it and
/// stops its command.
#[test]
fn status_and_unlock_cover_an_election() {
    let server = RedisServer::start();
    let mut elected = Background {
        child: fencelock(
            &server,
            &[
                "elect",
                "--once",
                "--lease",
                "1s",
                "--value",
                "primary-7",
                "scheduler",
                "--",
                "sleep",
                "30",
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn"),
        group_file: None,
    };
    let listed = wait_until_held(&server, "scheduler");
    assert_eq!(listed["kind"], "election", "{listed}");
    assert_eq!(listed["holder"], "primary-7", "{listed}");
    let out = output(&server, &["unlock", "scheduler", "--force"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("primary-7"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = elected.child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the leader never learned");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(75),
        "leadership lost, the command stopped"
    );
}

/// A lock kept in another library's layout carries no prefix: `status --layout` and `unlock
/// --layout --force` reach it by its name.
#[test]
fn status_and_unlock_reach_a_lock_in_another_librarys_layout() {
    let server = RedisServer::start();
    let _held = Background {
        child: fencelock(
            &server,
            &[
                "run",
                "--layout",
                "python-redis-lock",
                "reports",
                "--",
                "sleep",
                "30",
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn"),
        group_file: None,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let out = output(
            &server,
            &[
                "status",
                "--layout",
                "python-redis-lock",
                "reports",
                "--json",
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let locks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if let Some(lock) = locks.as_array().and_then(|a| a.first()) {
            break lock.clone();
        }
        assert!(Instant::now() < deadline, "never listed: {locks}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(listed["kind"], "foreign-mutex", "{listed}");
    assert_eq!(listed["name"], "reports", "{listed}");
    let out = output(&server, &["status", "--json"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[]",
        "the prefix's listing does not reach it"
    );
    let out = output(
        &server,
        &[
            "unlock",
            "--layout",
            "python-redis-lock",
            "reports",
            "--force",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(server.cli(&["EXISTS", "lock:reports"]).trim() == "0");
    assert_eq!(
        server.cli(&["LLEN", "lock-signal:reports"]).trim(),
        "1",
        "a python-redis-lock waiter is woken, as its own release does"
    );
    let again = output(
        &server,
        &[
            "unlock",
            "--layout",
            "python-redis-lock",
            "reports",
            "--force",
        ],
    );
    assert_eq!(code(&again), 78, "nothing held any more");
}

#[test]
fn sigterm_to_fencelock_reaches_the_command_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("term");
    let script = format!(
        "trap 'echo TERM > {}; exit 3' TERM; while true; do sleep 0.05; done",
        mark.display()
    );
    let run = Background {
        child: fencelock(&server, &["run", "graceful", "--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    wait_until_held(&server, "graceful");
    let pid = i32::try_from(run.child.id()).expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to fencelock");
    let out = finish(run, Duration::from_secs(10));
    assert_eq!(
        code(&out),
        3,
        "the command's own exit code: {}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&mark).expect("forwarded").trim(),
        "TERM"
    );
    assert!(
        server
            .cli(&["GET", "fencelock:{graceful}:mutex"])
            .starts_with('~'),
        "released"
    );
}

#[test]
fn exit_codes_for_usage_reachability_and_the_command() {
    let server = RedisServer::start();
    let cases: [(&[&str], i32); 6] = [
        (&["run", "x", "--lease", "30x", "--", "true"], 64),
        (&["run", "x"], 64),
        (&["run", "x", "--", "/nonexistent/command"], 127),
        (&["run", "x", "--", "sh", "-c", "exit 7"], 7),
        (&["run", "x", "--", "sh", "-c", "kill -9 $$"], 128 + 9),
        (&["--redis", "redis://127.0.0.1:1", "status"], 69),
    ];
    for (args, expected) in cases {
        let out = output(&server, args);
        assert_eq!(code(&out), expected, "fencelock {args:?}: {}", stderr(&out));
        if expected >= 64 && expected != 128 + 9 {
            let message = stderr(&out);
            assert_eq!(
                message.trim().lines().count().min(1),
                1,
                "a message for {args:?}"
            );
        }
    }
    let env_url = Command::new(FENCELOCK)
        .args(["status"])
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .expect("run");
    assert_eq!(code(&env_url), 69, "REDIS_URL is used");
    let help = Command::new(FENCELOCK)
        .args(["run", "--help"])
        .output()
        .expect("help");
    assert_eq!(code(&help), 0);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples:"));
}

#[test]
fn a_missing_password_exits_77_and_the_password_lets_the_run_through() {
    let server = RedisServer::start_with(ServerOptions::default().password("s3cret"));
    let refused = output(&server, &["run", "x", "--", "true"]);
    assert_eq!(code(&refused), 77, "{}", stderr(&refused));
    let url = server.url_with_auth(None, "s3cret");
    let allowed = output(
        &server,
        &["--redis", url.as_str(), "run", "x", "--", "true"],
    );
    assert_eq!(code(&allowed), 0, "{}", stderr(&allowed));
    let open = RedisServer::start();
    let masters = [server.url(), open.url(), RedisServer::start().url()].join(",");
    let refused = output(&server, &["--redlock", &masters, "run", "x", "--", "true"]);
    assert_eq!(code(&refused), 77, "{}", stderr(&refused));
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let server = RedisServer::start();
    for i in 0..200 {
        server.cli(&[
            "SET",
            &format!("fencelock:{{lock-{i}}}:mutex"),
            "t:1",
            "PX",
            "60000",
        ]);
    }
    let mut status = fencelock(&server, &["status"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(status.stdout.take());
    let exit = status.wait().expect("wait");
    assert_eq!(exit.code(), Some(0));
}

/// Waits for a background run to end by itself and collects its output.
fn finish(mut run: Background, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while run.child.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "fencelock did not exit in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stderr = Vec::new();
    if let Some(mut pipe) = run.child.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_end(&mut stderr);
    }
    let status = run.child.wait().expect("wait");
    Output {
        status,
        stdout: Vec::new(),
        stderr,
    }
}

/// `(tag, start, end)` lines that runs appended to `log`, in nanoseconds.
fn intervals(log: &Path) -> Vec<(String, u64, u64)> {
    std::fs::read_to_string(log)
        .expect("log")
        .lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let tag = parts.next().expect("tag").to_owned();
            let start = parts.next().expect("start").parse().expect("start");
            let end = parts.next().expect("end").parse().expect("end");
            (tag, start, end)
        })
        .collect()
}

/// The most intervals open at one instant (an interval ending when another starts does not
/// overlap it).
fn most_at_once(intervals: &[(String, u64, u64)]) -> usize {
    let mut events: Vec<(u64, i32)> = intervals
        .iter()
        .flat_map(|(_, start, end)| [(*start, 1), (*end, -1)])
        .collect();
    events.sort_unstable();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in events {
        open += step;
        most = most.max(open);
    }
    usize::try_from(most).unwrap_or(0)
}

/// A shell command that appends `tag start end` to `log` around a `sleep` of `pause`.
fn timed(log: &Path, tag: &str, pause: &str) -> String {
    format!(
        "s=$(date +%s%N); sleep {pause}; echo \"{tag} $s $(date +%s%N)\" >> {}",
        log.display()
    )
}

/// Waits for every run and checks it succeeded.
fn all_succeed(runs: Vec<Child>) {
    for run in runs {
        let out = run.wait_with_output().expect("wait");
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

#[test]
fn semaphore_runs_hold_at_most_its_permits_at_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = timed(&log, "run", "0.2");
    let started = Instant::now();
    let runs: Vec<Child> = (0..8)
        .map(|_| {
            fencelock(
                &server,
                &[
                    "run",
                    "--semaphore",
                    "3",
                    "--wait",
                    "60s",
                    "slots",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fencelock")
        })
        .collect();
    all_succeed(runs);
    let runs = intervals(&log);
    assert_eq!(runs.len(), 8);
    let most = most_at_once(&runs);
    println!(
        "8 runs of 200 ms under 3 permits: at most {most} at once, {:?} in all",
        started.elapsed()
    );
    assert!(most <= 3, "{most} runs at once under 3 permits: {runs:?}");
    assert!(most >= 2, "the permits were never shared: {runs:?}");
}

#[test]
fn read_runs_share_the_lock_and_write_runs_exclude_everything() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let run = |mode: &str, tag: &str, pause: &str| {
        fencelock(
            &server,
            &[
                "run",
                mode,
                "--wait",
                "60s",
                "ledger",
                "--",
                "sh",
                "-c",
                &timed(&log, tag, pause),
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencelock")
    };
    // Readers first, then writers while they read, then readers behind the waiting writers.
    let mut runs: Vec<Child> = (0..3).map(|_| run("--read", "R", "0.4")).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wait_until_held(&server, "ledger")["holds"] != 3 {
        assert!(Instant::now() < deadline, "the readers never read together");
        std::thread::sleep(Duration::from_millis(10));
    }
    runs.extend((0..2).map(|_| run("--write", "W", "0.2")));
    std::thread::sleep(Duration::from_millis(100));
    runs.extend((0..2).map(|_| run("--read", "R", "0.2")));
    all_succeed(runs);

    let runs = intervals(&log);
    assert_eq!(runs.len(), 7);
    for (tag, start, end) in runs.iter().filter(|(tag, ..)| tag == "W") {
        for (other, s, e) in &runs {
            let same = (other, s, e) == (tag, start, end);
            assert!(
                same || e <= start || s >= end,
                "a writer ran alongside a {other}: {runs:?}"
            );
        }
    }
    let readers: Vec<_> = runs
        .iter()
        .filter(|(tag, ..)| tag == "R")
        .cloned()
        .collect();
    assert!(
        most_at_once(&readers) >= 2,
        "readers never ran together: {runs:?}"
    );
}

#[test]
fn fair_runs_get_the_lock_in_the_order_they_asked() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let order = dir.path().join("order");
    // The first run holds the lock until the test says go (10 s at most).
    let holder_script = format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; echo 0 >> {order}",
        go = go.display(),
        order = order.display()
    );
    let holder = fencelock(
        &server,
        &["run", "--fair", "turns", "--", "sh", "-c", &holder_script],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    wait_until_held(&server, "turns");
    let mut runs = vec![holder];
    for i in 1..=5 {
        let script = format!("echo {i} >> {}; sleep 0.02", order.display());
        runs.push(
            fencelock(
                &server,
                &[
                    "run", "--fair", "--wait", "60s", "turns", "--", "sh", "-c", &script,
                ],
            )
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let queued = loop {
        let lock = wait_until_held(&server, "turns");
        if lock["waiting_clients"] == 5 {
            break lock["queued"].clone();
        }
        assert!(Instant::now() < deadline, "the waiters never all waited");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::write(&go, "").expect("go");
    all_succeed(runs);
    assert_eq!(
        std::fs::read_to_string(&order).expect("order"),
        "0\n1\n2\n3\n4\n5\n",
        "first come, first served"
    );
    assert_eq!(queued, 5, "status showed the line");
}

/// Polls `fencelock status --json` until it lists `count` locks.
fn wait_until_listed(server: &RedisServer, count: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = output(server, &["status", "--json"]);
        let locks: Vec<serde_json::Value> =
            serde_json::from_slice(&out.stdout).expect("status --json is JSON");
        if locks.len() == count {
            return locks;
        }
        assert!(Instant::now() < deadline, "never {count} locks: {locks:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn background(server: &RedisServer, args: &[&str]) -> Background {
    Background {
        child: fencelock(server, args).spawn().expect("spawn"),
        group_file: None,
    }
}

#[test]
fn status_lists_semaphores_rwlocks_and_fair_mutexes() {
    let server = RedisServer::start();
    let pool = background(
        &server,
        &[
            "run",
            "--semaphore",
            "3",
            "--permits",
            "2",
            "pool",
            "--",
            "sleep",
            "30",
        ],
    );
    let reader = background(&server, &["run", "--read", "catalog", "--", "sleep", "30"]);
    let printer = background(&server, &["run", "--fair", "printer", "--", "sleep", "30"]);
    let report = background(&server, &["run", "report", "--", "sleep", "30"]);
    let locks = wait_until_listed(&server, 4);
    let by_name = |name: &str| {
        locks
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {locks:?}"))
    };
    let label = |run: &Background| format!("/{}", run.child.id());

    let semaphore = by_name("pool");
    assert_eq!(semaphore["kind"], "semaphore");
    assert_eq!(semaphore["permits_in_use"], 2);
    assert_eq!(semaphore["permits_total"], 3);
    assert_eq!(semaphore["holds"], 1);
    assert!(semaphore["fence"].is_null());
    assert!(
        semaphore["holder"]
            .as_str()
            .expect("the grant's holder label")
            .ends_with(&label(&pool)),
        "{semaphore}"
    );
    let rwlock = by_name("catalog");
    assert_eq!(rwlock["kind"], "rwlock");
    assert_eq!(
        (rwlock["holds"].as_u64(), rwlock["write_holds"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(rwlock["holder"]
        .as_str()
        .expect("holder")
        .ends_with(&label(&reader)));
    let fair = by_name("printer");
    assert_eq!(fair["kind"], "fair-mutex");
    assert_eq!(fair["queued"], 0);
    assert!(fair["holder"]
        .as_str()
        .expect("holder")
        .ends_with(&label(&printer)));
    assert_eq!(by_name("report")["kind"], "mutex");
    for lock in &locks {
        let left = lock["remaining_ms"].as_u64().expect("remaining");
        assert!(left > 20_000 && left <= 30_000, "{lock}");
        if lock["kind"] != "semaphore" {
            assert!(lock["fence"].as_u64().expect("fence") > 0, "{lock}");
        }
    }

    let table = String::from_utf8(output(&server, &["status"]).stdout).expect("utf-8");
    println!("{table}");
    for expected in [
        "semaphore",
        "2/3 permits",
        "rwlock",
        "1 read",
        "fair-mutex",
        "mutex",
    ] {
        assert!(table.contains(expected), "{expected} in\n{table}");
    }
    drop((pool, report));
}

#[test]
fn each_kind_names_its_holder_when_refused_or_timed_out() {
    let server = RedisServer::start();
    let _full = background(
        &server,
        &["run", "--semaphore", "1", "pool", "--", "sleep", "30"],
    );
    let writer = background(&server, &["run", "--write", "doc", "--", "sleep", "30"]);
    let _fair = background(&server, &["run", "--fair", "turns", "--", "sleep", "30"]);
    wait_until_listed(&server, 3);
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["--semaphore", "1"],
            "pool",
            "semaphore \"pool\" held by 1 grant of ",
        ),
        (&["--read"], "doc", "rwlock \"doc\" held by "),
        (&["--fair"], "turns", "fair-mutex \"turns\" held by "),
    ];
    for (kind, name, says) in cases {
        for (wait, code_wanted) in [(&["--no-wait"][..], 73), (&["--wait", "200ms"], 74)] {
            let mut args = vec!["run"];
            args.extend_from_slice(kind);
            args.extend_from_slice(wait);
            args.extend_from_slice(&[name, "--", "true"]);
            let out = output(&server, &args);
            let message = stderr(&out);
            assert_eq!(code(&out), code_wanted, "{args:?}: {message}");
            assert!(message.contains(says), "{args:?}: {message}");
            assert!(message.contains("lease ends in"), "{args:?}: {message}");
        }
    }
    let refused = output(
        &server,
        &["run", "--write", "--no-wait", "doc", "--", "true"],
    );
    assert!(
        stderr(&refused).contains(&format!("/{}", writer.child.id())),
        "the writer is named: {}",
        stderr(&refused)
    );
    let too_many = output(
        &server,
        &[
            "run",
            "--semaphore",
            "1",
            "--permits",
            "2",
            "pool",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&too_many), 64, "{}", stderr(&too_many));
}

#[test]
fn the_command_gets_the_grant_s_fence_for_every_kind() {
    let server = RedisServer::start();
    for (i, kind) in [
        &[][..],
        &["--semaphore", "2"],
        &["--read"],
        &["--write"],
        &["--fair"],
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("fenced-{i}");
        let mut args = vec!["run"];
        args.extend_from_slice(kind);
        args.extend_from_slice(&[&name, "--", "sh", "-c", "echo $FENCELOCK_FENCE"]);
        let out = output(&server, &args);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        // The only grant of the name: its fence is the last one the name's sequence gave,
        // which a released mutex or fair mutex keeps in its own key, every other kind in the
        // fence key.
        let own_key = match kind {
            [] => Some("mutex"),
            ["--fair"] => Some("fair"),
            _ => None,
        };
        let remembered = match own_key {
            Some(suffix) => {
                let left = server.cli(&["GET", &format!("fencelock:{{{name}}}:{suffix}")]);
                left.trim_start_matches('~').to_owned()
            }
            None => server.cli(&["GET", &format!("fencelock:{{{name}}}:fence")]),
        };
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            remembered,
            "{kind:?}"
        );
    }
}

#[test]
fn unlock_force_releases_an_rwlock_and_its_readers_are_stopped() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let readers: Vec<(Background, std::path::PathBuf)> = (0..2)
        .map(|i| {
            let mark = dir.path().join(format!("term-{i}"));
            let script = format!(
                "trap 'echo TERM > {}; exit 143' TERM; while true; do sleep 0.05; done",
                mark.display()
            );
            let run = Background {
                child: fencelock(
                    &server,
                    &[
                        "run", "--read", "--lease", "900ms", "doc", "--", "sh", "-c", &script,
                    ],
                )
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn"),
                group_file: None,
            };
            (run, mark)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while wait_until_held(&server, "doc")["holds"] != 2 {
        assert!(Instant::now() < deadline, "both readers never held it");
        std::thread::sleep(Duration::from_millis(10));
    }
    let fence_before = server.cli(&["GET", "fencelock:{doc}:fence"]);

    let out = output(&server, &["unlock", "doc", "--force"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.starts_with("removed rwlock \"doc\" held by "),
        "{said}"
    );
    assert!(said.contains("2 read"), "{said}");
    for (run, _) in &readers {
        assert!(said.contains(&format!("/{}", run.child.id())), "{said}");
    }
    assert_eq!(server.cli(&["EXISTS", "fencelock:{doc}:rw"]), "0");
    assert_eq!(
        server.cli(&["GET", "fencelock:{doc}:fence"]),
        fence_before,
        "the fence sequence is kept"
    );
    for (run, mark) in readers {
        let out = finish(run, Duration::from_secs(10));
        assert_eq!(code(&out), 75, "{}", stderr(&out));
        assert_eq!(
            std::fs::read_to_string(&mark).expect("SIGTERM").trim(),
            "TERM"
        );
    }
    assert_eq!(code(&output(&server, &["unlock", "doc", "--force"])), 78);
}

/// Runs three `fencelock run shared` at once on the deployment `target` (its flag and URLs),
/// each logging its start with its fence and its end, and checks they took turns; returns
/// the fences in the order the runs started.
fn three_runs_take_turns(target: &[&str]) -> Vec<u64> {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $FENCELOCK_FENCE\" >> {log}; sleep 0.2; echo end >> {log}",
        log = log.display()
    );
    let runs: Vec<Child> = (0..3)
        .map(|_| {
            Command::new(FENCELOCK)
                .args(target)
                .args(["run", "shared", "--", "sh", "-c", &script])
                .spawn()
                .expect("spawn fencelock")
        })
        .collect();
    all_succeed(runs);
    let lines = std::fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    for pair in lines.chunks(2) {
        assert!(
            pair[0].starts_with("start ") && pair[1] == "end",
            "runs overlapped: {lines:?}"
        );
    }
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|fence| fence.parse().expect("a fence"))
        .collect()
}

#[test]
fn redlock_runs_hold_a_majority_of_masters_and_exclude_each_other() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls = masters
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");
    // Master 0 is down the whole time: 2 of 3 still grant.
    let mut first = masters;
    first[0].kill9();
    let fences = three_runs_take_turns(&["--redlock", &urls]);
    // The fences rise from run to run.
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");

    // Inspection needs one Redis, and RedLock offers plain mutexes only: whatever it does not
    // offer is refused with a usage error.
    let unsupported: [&[&str]; 9] = [
        &["status"],
        &["status", "--graph"],
        &["top"],
        &["unlock", "x", "--force"],
        &["run", "--fair", "x", "--", "true"],
        &["run", "--semaphore", "2", "x", "--", "true"],
        &["run", "--deadlock-check", "x", "--", "true"],
        &["elect", "x", "--", "true"],
        &["leader", "x"],
    ];
    for args in unsupported {
        let out = Command::new(FENCELOCK)
            .args(["--redlock", &urls])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run fencelock");
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("RedLock"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn cluster_runs_exclude_each_other_and_status_lists_every_master() {
    use fencelock_testkit::RedisCluster;

    let cluster = RedisCluster::start();
    let nodes = cluster.urls().join(",");
    three_runs_take_turns(&["--cluster", &nodes]);

    // Three held names, one on each master; status finds them all.
    let mut names = Vec::new();
    let mut masters = Vec::new();
    for i in 0..1000 {
        let name = format!("job-{i}");
        let port = cluster
            .master_of(RedisCluster::slot_of(format!("fencelock:{{{name}}}:mutex")))
            .port();
        if !masters.contains(&port) {
            masters.push(port);
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    let holders: Vec<Background> = names
        .iter()
        .map(|name| Background {
            child: Command::new(FENCELOCK)
                .args(["--cluster", &nodes, "run", name, "--", "sleep", "30"])
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn fencelock"),
            group_file: None,
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(FENCELOCK)
            .args(["--cluster", &nodes, "status", "job-*", "--json"])
            .output()
            .expect("run fencelock");
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let locks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if locks.as_array().map(Vec::len) == Some(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status never listed all three: {locks}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new(FENCELOCK)
        .args(["--cluster", &nodes, "unlock", &names[0], "--force"])
        .output()
        .expect("run fencelock");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    drop(holders);
}

#[test]
fn short_flags_skip_a_busy_lock_quietly_with_the_chosen_code() {
    let server = RedisServer::start();
    let _holder = background(&server, &["run", "cron", "sleep", "30"]);
    wait_until_held(&server, "cron");
    let quiet = output(&server, &["run", "-n", "-q", "-E", "3", "cron", "true"]);
    assert_eq!(code(&quiet), 3, "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "", "-q prints nothing for a busy lock");
    let timed_out = output(&server, &["run", "-w", "0.3", "-E", "0", "cron", "true"]);
    assert_eq!(code(&timed_out), 0, "-E replaces the timeout's code too");
    assert!(
        stderr(&timed_out).contains("gave up waiting"),
        "{}",
        stderr(&timed_out)
    );
    let unreachable = output(
        &server,
        &[
            "--redis",
            "redis://127.0.0.1:1",
            "run",
            "-q",
            "-n",
            "x",
            "true",
        ],
    );
    assert_eq!(code(&unreachable), 69);
    assert!(
        !stderr(&unreachable).is_empty(),
        "-q hides only a busy lock"
    );
}

#[test]
fn a_command_needs_no_double_dash() {
    let server = RedisServer::start();
    let out = output(
        &server,
        &["run", "plain", "sh", "-c", "echo $FENCELOCK_FENCE"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fence: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the command ran with its fence");
    assert!(fence > 0);
    let shared = output(&server, &["run", "-s", "-w", "1", "plain", "true"]);
    assert_eq!(code(&shared), 0, "{}", stderr(&shared));
}

#[test]
fn verbose_says_who_holds_the_lock_while_waiting() {
    let server = RedisServer::start();
    let _holder = background(&server, &["run", "long", "sleep", "30"]);
    let held = wait_until_held(&server, "long");
    let holder = held["holder"].as_str().expect("holder label");
    let out = output(&server, &["run", "-v", "-w", "2.5", "long", "true"]);
    assert_eq!(code(&out), 74, "{}", stderr(&out));
    let progress: Vec<String> = stderr(&out)
        .lines()
        .filter(|line| line.starts_with("fencelock: waited"))
        .map(str::to_owned)
        .collect();
    assert!(!progress.is_empty(), "{}", stderr(&out));
    assert!(
        progress[0].contains(holder) && progress[0].contains("waiting"),
        "{progress:?}"
    );
    let quiet = output(&server, &["run", "-w", "1.5", "long", "true"]);
    assert!(
        !stderr(&quiet).contains("fencelock: waited"),
        "only with -v"
    );
}

#[test]
fn hold_at_least_keeps_the_lock_after_a_quick_command() {
    let server = RedisServer::start();
    let started = Instant::now();
    let first = output(&server, &["run", "--hold-at-least", "3s", "daily", "true"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let skipped = output(&server, &["run", "-n", "daily", "true"]);
    assert_eq!(code(&skipped), 73, "still held: {}", stderr(&skipped));
    let listed = wait_until_held(&server, "daily");
    let left = listed["remaining_ms"].as_u64().expect("an expiry");
    assert!(left <= 3000, "ends at the hold, not with the lease: {left}");
    let later = output(&server, &["run", "-w", "20", "daily", "true"]);
    assert_eq!(code(&later), 0, "{}", stderr(&later));
    assert!(started.elapsed() >= Duration::from_secs(3), "not before");
}

/// Spawns `fencelock hold NAME` with its standard input and output piped, and reads the fence
/// it prints.
fn hold(server: &RedisServer, name: &str) -> (Child, u64) {
    use std::io::BufRead;
    let mut child = fencelock(server, &["hold", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the fence");
    let fence = line.trim().parse().expect("a fence on a line of its own");
    (child, fence)
}

/// Waits for `child` to exit, killing it after `limit`.
fn exit_within(mut child: Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().expect("exited normally");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fencelock hold did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hold_prints_the_fence_and_releases_when_stdin_closes_or_on_sigterm() {
    let server = RedisServer::start();
    let (mut child, fence) = hold(&server, "deploy");
    let listed = wait_until_held(&server, "deploy");
    assert_eq!(listed["fence"].as_u64(), Some(fence));
    let busy = output(&server, &["run", "-n", "deploy", "true"]);
    assert_eq!(code(&busy), 73, "held while stdin is open");
    drop(child.stdin.take());
    assert_eq!(exit_within(child, Duration::from_secs(10)), 0);
    let free = output(&server, &["run", "-n", "deploy", "true"]);
    assert_eq!(code(&free), 0, "released: {}", stderr(&free));

    let (child, second) = hold(&server, "deploy");
    assert!(second > fence);
    nix::sys::signal::kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).expect("signal");
    assert_eq!(exit_within(child, Duration::from_secs(10)), 0);
    let free = output(&server, &["run", "-n", "deploy", "true"]);
    assert_eq!(code(&free), 0, "released on SIGTERM: {}", stderr(&free));
}

#[test]
fn a_malformed_url_says_what_is_expected() {
    let server = RedisServer::start();
    let out = output(&server, &["--redis", "http://db:6379", "status"]);
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "cannot use Redis at http://db:6379: invalid address of the Redis server: not a URL \
             with a scheme Redis takes; expected redis://[user:password@]host[:port][/db]"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn status_json_reports_a_failure_as_json() {
    let server = RedisServer::start();
    let out = output(
        &server,
        &["--redis", "redis://127.0.0.1:1", "status", "--json"],
    );
    assert_eq!(code(&out), 69);
    let error: serde_json::Value =
        serde_json::from_str(stderr(&out).trim()).expect("stderr is one JSON object");
    assert_eq!(error["exit_code"], 69);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.1:1")),
        "{error}"
    );
    let text = output(&server, &["--redis", "redis://127.0.0.1:1", "status"]);
    assert!(
        stderr(&text).starts_with("fencelock: "),
        "text without --json"
    );
}

#[test]
fn a_semaphore_run_whose_total_differs_from_the_stored_one_is_warned() {
    let server = RedisServer::start();
    let _holder = background(&server, &["run", "--semaphore", "3", "pool", "sleep", "30"]);
    wait_until_held(&server, "pool");
    let differing = output(&server, &["run", "-n", "--semaphore", "5", "pool", "true"]);
    assert_eq!(code(&differing), 0, "{}", stderr(&differing));
    assert!(
        stderr(&differing).contains("stored total of 3 permits, not the 5"),
        "{}",
        stderr(&differing)
    );
    let agreeing = output(&server, &["run", "-n", "--semaphore", "3", "pool", "true"]);
    assert_eq!(code(&agreeing), 0, "{}", stderr(&agreeing));
    assert_eq!(stderr(&agreeing), "", "no warning when the totals agree");
}

/// Polls until `fencelock status --json` shows a client waiting for `name`.
fn wait_until_waiting(server: &RedisServer, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = wait_until_held(server, name);
        if lock["waiting_clients"].as_u64().unwrap_or(0) >= 1 {
            return;
        }
        assert!(Instant::now() < deadline, "nobody ever waited for {name}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Holds the mutex `name` for a minute under a token no `fencelock` has.
fn hold_by_hand(server: &RedisServer, name: &str) {
    let key = format!("fencelock:{{{name}}}:mutex");
    assert_eq!(server.cli(&["SET", &key, "t:1", "PX", "60000"]), "OK");
}

#[test]
fn a_waiting_run_rides_out_redis_down_for_two_seconds() {
    let mut server = RedisServer::start();
    hold_by_hand(&server, "blip");
    let waiter = Background {
        child: fencelock(&server, &["run", "--wait", "20s", "blip", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    wait_until_waiting(&server, "blip");
    server.kill9();
    std::thread::sleep(Duration::from_secs(2));
    // The restarted server has no lock: the waiter takes it as soon as it reaches it.
    server.restart();
    let out = finish(waiter, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    hold_by_hand(&server, "gone");
    let waiter = Background {
        child: fencelock(&server, &["run", "--wait", "1s", "gone", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    wait_until_waiting(&server, "gone");
    server.kill9();
    let out = finish(waiter, Duration::from_secs(20));
    let message = stderr(&out);
    assert_eq!(code(&out), 69, "{message}");
    assert!(
        message.contains(&format!("Redis at {}", server.url())),
        "names the URL: {message}"
    );
}

/// Polls `fencelock leader NAME --json` until `value` leads; returns its fence.
fn wait_until_leading(server: &RedisServer, name: &str, value: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = output(server, &["leader", name, "--json"]);
        let state: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("leader --json is JSON");
        if state["leader"]["value"] == value {
            return state["leader"]["fence"].as_u64().expect("a fence");
        }
        assert!(
            Instant::now() < deadline,
            "{value} never led {name}: {state}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(run: &Background) {
    let pid = i32::try_from(run.child.id()).expect("a pid");
    nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM to fencelock");
}

#[test]
fn elect_runs_the_command_while_leading_and_a_standby_takes_over_at_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("terms");
    let script = format!(
        "echo \"$FENCELOCK_NAME $FENCELOCK_LEADER $FENCELOCK_FENCE\" >> {}; \
         trap 'exit 0' TERM; while true; do sleep 0.05; done",
        log.display()
    );
    let elect = |value: &str| {
        background(
            &server,
            &[
                "elect",
                "scheduler",
                "--value",
                value,
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
    };
    let a = elect("a");
    let first = wait_until_leading(&server, "scheduler", "a");
    let b = elect("b");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        std::fs::read_to_string(&log).expect("log").lines().count(),
        1,
        "only the leader runs the command"
    );

    // A graceful stop resigns: the standby leads long before the 30 s lease would end.
    sigterm(&a);
    let stopped = Instant::now();
    let out = finish(a, Duration::from_secs(10));
    assert_eq!(code(&out), 0, "the command's own code: {}", stderr(&out));
    let second = wait_until_leading(&server, "scheduler", "b");
    assert!(stopped.elapsed() < Duration::from_secs(10));
    assert!(second > first, "fences rise: {first} then {second}");
    let terms = std::fs::read_to_string(&log).expect("log");
    assert_eq!(
        terms.lines().collect::<Vec<_>>(),
        [
            format!("scheduler a {first}"),
            format!("scheduler b {second}")
        ]
    );
    drop(b);
}

#[test]
fn elect_stops_the_command_when_leadership_is_lost_and_campaigns_again() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("terms");
    let script = format!(
        "trap 'echo TERM >> {0}; exit 0' TERM; echo \"$FENCELOCK_FENCE\" >> {0}; \
         while true; do sleep 0.05; done",
        log.display()
    );
    let run = background(
        &server,
        &[
            "elect", "takeaway", "--value", "a", "--lease", "2s", "--", "sh", "-c", &script,
        ],
    );
    let first = wait_until_leading(&server, "takeaway", "a");
    server.cli(&["DEL", "fencelock:{takeaway}:election"]);
    let second = wait_until_leading(&server, "takeaway", "a");
    assert!(second > first, "a new term: {first} then {second}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = std::fs::read_to_string(&log).expect("log");
        if lines.lines().count() >= 3 {
            assert_eq!(
                lines.lines().collect::<Vec<_>>(),
                [first.to_string(), "TERM".to_owned(), second.to_string()]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the command was not restarted: {lines}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(run);

    // With --once, a lost leadership ends fencelock with 75.
    let once = Background {
        child: fencelock(
            &server,
            &[
                "elect", "once", "--once", "--lease", "2s", "--", "sleep", "30",
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn"),
        group_file: None,
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while code(&output(&server, &["leader", "once"])) != 0 {
        assert!(Instant::now() < deadline, "never led");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.cli(&["DEL", "fencelock:{once}:election"]);
    let out = finish(once, Duration::from_secs(15));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("lost leadership"), "{}", stderr(&out));
}

#[test]
fn leader_prints_the_leader_and_watch_prints_every_change() {
    let server = RedisServer::start();
    let none = output(&server, &["leader", "report"]);
    assert_eq!(code(&none), 78, "nobody leads");
    assert_eq!(String::from_utf8_lossy(&none.stdout), "nobody leads\n");

    let mut watch = Background {
        child: fencelock(&server, &["leader", "report", "--watch", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    let stdout = watch.child.stdout.take().expect("piped");
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> serde_json::Value {
        let line = seen
            .recv_timeout(Duration::from_secs(10))
            .expect("the watch prints the change");
        serde_json::from_str(&line).expect("JSON")
    };
    assert_eq!(
        next(),
        serde_json::json!({"name": "report", "leader": null})
    );

    let once = output(
        &server,
        &[
            "elect",
            "report",
            "--once",
            "--value",
            "w1",
            "--",
            "sh",
            "-c",
            "sleep 0.5; exit 3",
        ],
    );
    assert_eq!(code(&once), 3, "the command's code: {}", stderr(&once));
    let led = next();
    assert_eq!(led["leader"]["value"], "w1");
    assert!(led["leader"]["fence"].as_u64().expect("fence") > 0);
    assert!(led["leader"]["since_ms"].as_u64().expect("since") > 0);
    assert_eq!(
        next(),
        serde_json::json!({"name": "report", "leader": null}),
        "the finished command's leadership was resigned"
    );
    sigterm(&watch);
    let status = watch.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "a watch ends quietly on SIGTERM");
}

#[test]
fn elect_leaves_nobody_leading_when_it_exits_and_leader_json_reports_failures_as_json() {
    let server = RedisServer::start();
    // No `--` needed, as for run; the leadership (30 s lease) is resigned when fencelock exits.
    let once = output(&server, &["elect", "--once", "quick", "true"]);
    assert_eq!(code(&once), 0, "{}", stderr(&once));
    assert_eq!(code(&output(&server, &["leader", "quick"])), 78, "resigned");
    let missing = output(
        &server,
        &["elect", "--once", "gone", "/nonexistent/command"],
    );
    assert_eq!(code(&missing), 127, "{}", stderr(&missing));
    assert_eq!(code(&output(&server, &["leader", "gone"])), 78, "resigned");

    let unreachable = output(
        &server,
        &["--redis", "redis://127.0.0.1:1", "leader", "x", "--json"],
    );
    assert_eq!(code(&unreachable), 69);
    let error: serde_json::Value =
        serde_json::from_str(stderr(&unreachable).trim()).expect("stderr is one JSON object");
    assert_eq!(error["exit_code"], 69);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.1:1")),
        "{error}"
    );
}

/// Two clients wait for each other (A then B against B then A) with recorded waits, so
/// `status --graph` finds them: its text, JSON and dot show the holders, the waiters and the
/// deadlock.
#[test]
fn status_graph_shows_who_waits_for_whom_and_the_deadlock() {
    use fencelock::{Client, ClientOptions, LockOptions};

    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let url = server.url();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let recorded = LockOptions::default()
        .record_wait(Duration::from_millis(100))
        .wait_timeout(Duration::from_secs(20));
    // Neither side asks for its second lock before both hold their first: else one side
    // could take both and there would be no cycle to show.
    let both_hold = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let mut sides = Vec::new();
    for (label, first, second) in [("billing-1", "A", "B"), ("billing-2", "B", "A")] {
        let (url, held_tx, mut stop, recorded, both_hold) = (
            url.clone(),
            held_tx.clone(),
            stop_rx.clone(),
            recorded.clone(),
            both_hold.clone(),
        );
        sides.push(runtime.spawn(async move {
            let options = ClientOptions::default().holder_label(label);
            let client = Client::connect_with_options(url.as_str(), options)
                .await
                .expect("connect");
            let held = client
                .mutex(first)
                .expect("name")
                .lock()
                .await
                .expect("lock");
            held_tx.send(()).expect("tell");
            both_hold.wait().await;
            let waiting = client.mutex_with_options(second, recorded).expect("name");
            // Waits until the test has looked, then gives up: the cycle has no other way out.
            tokio::select! {
                got = waiting.lock() => panic!("a deadlocked wait was granted: {got:?}"),
                _ = stop.wait_for(|stop| *stop) => {}
            }
            held.unlock().await.expect("unlock");
            client.shutdown().await.expect("shutdown");
        }));
    }
    for _ in 0..2 {
        held_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("each side holds its first lock");
    }
    // Both waits are recorded after 100 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let graph = loop {
        let out = output(&server, &["status", "--graph", "--json"]);
        let graph: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        if graph["cycles"].as_array().is_some_and(|c| !c.is_empty()) {
            assert_eq!(code(&out), 79, "a deadlock: {}", stderr(&out));
            break graph;
        }
        // No wait recorded yet (0), or one recorded and the other not yet (80).
        assert!(matches!(code(&out), 0 | 80), "{}", stderr(&out));
        assert!(Instant::now() < deadline, "no cycle shown: {graph}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let steps = graph["cycles"][0]["steps"].as_array().expect("steps");
    let mut labels: Vec<(&str, &str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["waiter_label"].as_str().unwrap_or(""),
                s["name"].as_str().unwrap_or(""),
                s["holder_label"].as_str().unwrap_or(""),
            )
        })
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            ("billing-1", "B", "billing-2"),
            ("billing-2", "A", "billing-1")
        ]
    );
    let locks = graph["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 2, "{graph}");
    for lock in locks {
        assert_eq!(lock["holders"].as_array().map(Vec::len), Some(1), "{lock}");
        assert_eq!(lock["waiters"].as_array().map(Vec::len), Some(1), "{lock}");
    }

    let text = output(&server, &["status", "--graph"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    println!("{text}");
    assert!(
        text.contains("mutex \"A\"\n  held by billing-1 ["),
        "{text}"
    );
    assert!(text.contains("waited for by billing-2 ["), "{text}");
    assert!(text.contains("DEADLOCK 1:"), "{text}");

    let dot = output(&server, &["status", "--graph", "--dot"]);
    let dot = String::from_utf8_lossy(&dot.stdout).into_owned();
    println!("{dot}");
    assert!(dot.starts_with("digraph waits {"), "{dot}");
    assert_eq!(dot.matches(", color=red").count(), 2, "{dot}");

    stop_tx.send(true).expect("stop");
    for side in sides {
        runtime.block_on(side).expect("a side");
    }
}

/// On a terminal, `status --graph` shows how far its walk of the key space is on standard error
/// and erases that line before the graph; on a pipe it writes nothing there.
#[test]
fn status_graph_shows_its_progress_on_a_terminal_only() {
    let server = RedisServer::start();
    let out = output(&server, &["status", "--graph"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));

    // `script` runs the command on a terminal of its own and copies what it wrote there.
    let command = format!("env REDIS_URL={} {FENCELOCK} status --graph", server.url());
    let typed = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let screen = String::from_utf8_lossy(&typed.stdout).into_owned();
    assert!(typed.status.success(), "{screen:?} {}", stderr(&typed));
    assert!(
        screen.contains("reading the key space (SCAN calls: 1, keys: 0)"),
        "{screen:?}"
    );
    let progress = screen.find("reading the key space").expect("shown");
    let erased = screen.rfind("\r\x1b[K").expect("erased");
    assert!(progress < erased, "{screen:?}");
}

/// A tmux server of the test's own, its socket in a temporary directory, with one session
/// `top`; killed however the test ends, and its socket removed with the directory.
struct Tmux {
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// The server, with the session `top` of `width` × `height` running `command`.
    fn start(width: u16, height: u16, command: &str) -> Tmux {
        let dir = tempfile::tempdir().expect("temp dir");
        let tmux = Tmux {
            socket: dir.path().join("tmux"),
            _dir: dir,
        };
        let (width, height) = (width.to_string(), height.to_string());
        let started = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width,
            "-y",
            &height,
            command,
        ]);
        assert!(started.status.success(), "{}", stderr(&started));
        tmux
    }

    /// `tmux -S <socket> ARGS`.
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// Reads the pane until `wanted` is on it, within 10 s.
    fn screen_with(&self, wanted: &str) -> String {
        self.screen_when(wanted, |screen| screen.contains(wanted))
    }

    /// Reads the pane until `ready` holds of it, within 10 s; `what` says what was awaited.
    fn screen_when(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let screen =
                String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout)
                    .into_owned();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what:?} never showed:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// A client whose holds are labelled `job-alpha`, holding the mutex `alpha`.
fn alpha_held(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
) -> (fencelock::Client, fencelock::MutexGuard) {
    use fencelock::{Client, ClientOptions};

    runtime.block_on(async {
        let options = ClientOptions::default().holder_label("job-alpha");
        let client = Client::connect_with_options(server.url().as_str(), options)
            .await
            .expect("connect");
        let alpha = client
            .mutex("alpha")
            .expect("name")
            .lock()
            .await
            .expect("lock");
        (client, alpha)
    })
}

#[test]
fn top_is_live_in_a_terminal_sorts_on_s_quits_on_q_and_prints_one_snapshot_on_a_pipe() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (client, alpha) = alpha_held(&server, &runtime);

    // On a pipe: one snapshot, then exit.
    let out = output(&server, &["top"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let snapshot = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(snapshot.contains("NAME"), "{snapshot}");
    assert!(
        snapshot
            .lines()
            .any(|l| l.starts_with("alpha") && l.contains("job-alpha")),
        "{snapshot}"
    );

    // In a terminal: live until q, in a shell that then records the terminal's settings and
    // top's exit status, and stays for the pane to be read.
    let dir = tempfile::tempdir().expect("temp dir");
    let (before, after) = (dir.path().join("before"), dir.path().join("after"));
    let command = format!(
        "stty -g > {}; env REDIS_URL={} {FENCELOCK} top; code=$?; stty -g > {}; \
         echo \"top exited $code\"; exec sleep 60",
        before.display(),
        server.url(),
        after.display(),
    );
    let tmux = Tmux::start(160, 20, &command);
    let screen = tmux.screen_with("sorted by name");
    assert!(screen.contains("job-alpha"), "{screen}");
    // A lock taken now shows within a refresh.
    let beta = runtime
        .block_on(async { client.semaphore("beta", 3).expect("name").acquire().await })
        .expect("permit");
    tmux.screen_with("beta");
    tmux.run(&["send-keys", "-t", "top", "s"]);
    println!("{}", tmux.screen_with("sorted by held"));
    tmux.run(&["send-keys", "-t", "top", "q"]);

    // Ended with status 0, and the terminal is as it was: its settings (raw mode off), the
    // main screen back, the cursor shown.
    let screen = tmux.screen_with("top exited");
    assert!(screen.contains("top exited 0"), "{screen}");
    assert!(!screen.contains("sorted by"), "{screen}");
    let settings = |path: &Path| std::fs::read_to_string(path).expect("stty -g");
    assert_eq!(settings(&before), settings(&after));
    let modes = tmux.run(&[
        "display-message",
        "-p",
        "-t",
        "top",
        "#{alternate_on} #{cursor_flag}",
    ]);
    assert_eq!(String::from_utf8_lossy(&modes.stdout).trim(), "0 1");
    runtime.block_on(async {
        alpha.unlock().await.expect("unlock");
        beta.release().await.expect("release");
    });
}

/// A resized terminal is drawn at its new size: each line cut at the edge (not wrapped onto the
/// next), the whole title back once the terminal is wide again.
#[test]
fn top_draws_at_the_terminals_size_after_a_resize() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (client, alpha) = alpha_held(&server, &runtime);

    let command = format!("env REDIS_URL={} {FENCELOCK} top", server.url());
    let tmux = Tmux::start(160, 20, &command);
    let keys = "[q quit  s sort]";
    tmux.screen_with(keys);

    let resized = tmux.run(&["resize-window", "-t", "top", "-x", "70", "-y", "8"]);
    assert!(resized.status.success(), "{}", stderr(&resized));
    // tmux crops what was drawn; a lock taken after the resize is drawn after it too. The
    // title is longer than 70 columns; the table is not.
    let beta = runtime
        .block_on(async { client.semaphore("beta", 3).expect("name").acquire().await })
        .expect("permit");
    let narrow = tmux.screen_when("the view at 70 columns", |screen| {
        let lines: Vec<&str> = screen.lines().collect();
        lines.len() == 8
            && lines[0].starts_with("fencelock top  2 lock(s)")
            && !lines[0].contains(keys)
            && lines[1].starts_with("NAME")
            && lines[2].starts_with("alpha")
            && lines[3].starts_with("beta")
    });
    println!("{narrow}");
    assert!(narrow.lines().all(|l| l.chars().count() <= 70), "{narrow}");
    assert!(narrow.contains("job-alpha"), "{narrow}");

    let resized = tmux.run(&["resize-window", "-t", "top", "-x", "120", "-y", "20"]);
    assert!(resized.status.success(), "{}", stderr(&resized));
    let wide = tmux.screen_when("the view at 120 columns", |screen| {
        screen.lines().next().is_some_and(|l| l.contains(keys)) && screen.lines().count() == 20
    });
    assert!(wide.contains("job-alpha"), "{wide}");
    runtime.block_on(async {
        alpha.unlock().await.expect("unlock");
        beta.release().await.expect("release");
    });
}
