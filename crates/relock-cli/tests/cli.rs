//! The real `relock` binary against real redis-server processes.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use relock_testkit::RedisServer;

const RELOCK: &str = env!("CARGO_BIN_EXE_relock");

fn relock(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = Command::new(RELOCK);
    command.args(args).env("REDIS_URL", server.url());
    command
}

fn output(server: &RedisServer, args: &[&str]) -> Output {
    relock(server, args).output().expect("run relock")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Polls until `relock status --json` lists `name`, so a background `relock run` holds it.
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

/// Kills a background `relock run` and its command's process group on every path.
struct Background {
    child: Child,
    group_file: Option<std::path::PathBuf>,
}

impl Drop for Background {
    fn drop(&mut self) {
        // relock starts each command as the leader of its own process group.
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
            relock(
                &server,
                &["run", "counter", "--wait", "60s", "--", "sh", "-c", &script],
            )
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn relock")
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
    relock_testkit::check_no_overlap(&mut intervals).expect("no two runs at once");
}

#[test]
fn a_killed_relock_frees_the_lock_after_its_lease_not_before() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (script, group_file) = recorded(dir.path(), "exec sleep 30");
    let mut holder = Background {
        child: relock(
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

/// Runs a command that records SIGTERM under lock `name`, injects `fault` once the lock is
/// held, and checks that relock stopped the command with SIGTERM and exited with the lost code.
fn assert_fault_stops_the_command(name: &str, fault: impl FnOnce(&RedisServer)) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("term");
    let script = format!(
        "trap 'echo TERM > {}; exit 143' TERM; while true; do sleep 0.05; done",
        mark.display()
    );
    let run = Background {
        child: relock(
            &server,
            &["run", "--lease", "900ms", name, "--", "sh", "-c", &script],
        )
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
    assert_fault_stops_the_command("doomed", |server| {
        server.cli(&["DEL", "relock:{doomed}:mutex"]);
    });
}

#[test]
fn redis_paused_past_the_lease_stops_the_command_and_exits_75() {
    assert_fault_stops_the_command("stalled", RedisServer::pause);
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = RedisServer::start();
    let run = Background {
        child: relock(
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
    server.cli(&["DEL", "relock:{stubborn}:mutex"]);
    let out = finish(run, Duration::from_secs(10));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
}

#[test]
fn no_wait_against_a_held_lock_says_who_holds_it() {
    let server = RedisServer::start();
    let _holder = Background {
        child: relock(&server, &["run", "busy", "--", "sleep", "30"])
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
fn status_json_describes_held_locks() {
    let server = RedisServer::start();
    let holder = Background {
        child: relock(&server, &["run", "report:2026", "--", "sleep", "30"])
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
        "relock:{stuck}:mutex",
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
    assert_eq!(server.cli(&["EXISTS", "relock:{stuck}:mutex"]), "0");
    assert_eq!(code(&output(&server, &["unlock", "stuck", "--force"])), 78);
}

#[test]
fn sigterm_to_relock_reaches_the_command_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let mark = dir.path().join("term");
    let script = format!(
        "trap 'echo TERM > {}; exit 3' TERM; while true; do sleep 0.05; done",
        mark.display()
    );
    let run = Background {
        child: relock(&server, &["run", "graceful", "--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
        group_file: None,
    };
    wait_until_held(&server, "graceful");
    let pid = run.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
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
    assert_eq!(
        server.cli(&["EXISTS", "relock:{graceful}:mutex"]),
        "0",
        "released"
    );
}

#[test]
fn exit_codes_for_usage_reachability_and_the_command() {
    let server = RedisServer::start();
    let cases: [(&[&str], i32); 6] = [
        (&["run", "x", "--lease", "30", "--", "true"], 64),
        (&["run", "x"], 64),
        (&["run", "x", "--", "/nonexistent/command"], 127),
        (&["run", "x", "--", "sh", "-c", "exit 7"], 7),
        (&["run", "x", "--", "sh", "-c", "kill -9 $$"], 128 + 9),
        (&["--redis", "redis://127.0.0.1:1", "status"], 69),
    ];
    for (args, expected) in cases {
        let out = output(&server, args);
        assert_eq!(code(&out), expected, "relock {args:?}: {}", stderr(&out));
        if expected >= 64 && expected != 128 + 9 {
            let message = stderr(&out);
            assert_eq!(
                message.trim().lines().count().min(1),
                1,
                "a message for {args:?}"
            );
        }
    }
    let env_url = Command::new(RELOCK)
        .args(["status"])
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .expect("run");
    assert_eq!(code(&env_url), 69, "REDIS_URL is used");
    let help = Command::new(RELOCK)
        .args(["run", "--help"])
        .output()
        .expect("help");
    assert_eq!(code(&help), 0);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples:"));
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let server = RedisServer::start();
    for i in 0..200 {
        server.cli(&[
            "SET",
            &format!("relock:{{lock-{i}}}:mutex"),
            "t:1",
            "PX",
            "60000",
        ]);
    }
    let mut status = relock(&server, &["status"])
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
        assert!(Instant::now() < deadline, "relock did not exit in time");
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
