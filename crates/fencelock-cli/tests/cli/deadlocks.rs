//! Deadlocks made with the command line, as an operator would: shells that each nest one
//! `fencelock run` inside another, in opposite orders. Every wait that lasts a second is
//! recorded, and each inner run is handed the locks of the run around it (`FENCELOCK_HOLDS`),
//! so `status --graph` shows the cycle (and exits 79), and a run with `--deadlock-check` gives
//! up (exits 79) so that the others go on. Two and three shells, mutexes and the other kinds,
//! on one server and on a Cluster.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::{RedisCluster, RedisServer};

use super::{code, stderr, Background, FENCELOCK};

/// Where the shells' `fencelock` commands go: the deployment's flags.
struct Deployment(Vec<String>);

impl Deployment {
    fn server(server: &RedisServer) -> Deployment {
        Deployment(vec!["--redis".into(), server.url()])
    }

    fn cluster(cluster: &RedisCluster) -> Deployment {
        Deployment(vec!["--cluster".into(), cluster.urls().join(",")])
    }

    /// The flags as one piece of a shell command line.
    fn shell(&self) -> String {
        self.0.join(" ")
    }

    fn output(&self, args: &[&str]) -> Output {
        Command::new(FENCELOCK)
            .args(&self.0)
            .args(args)
            .output()
            .expect("run fencelock")
    }
}

/// One shell of a deadlock: `fencelock run OUTER -- sh -c '…; fencelock run INNER -- true'`,
/// each with its kind flags. The inner run starts once every shell's outer run holds its lock
/// (a barrier of files), so that no shell takes both of its locks before another takes its
/// first.
struct Shell {
    outer: (&'static str, &'static [&'static str]),
    inner: (&'static str, &'static [&'static str]),
}

/// Starts every shell with `inner_flags` on the inner runs; returns them running.
fn start(
    deployment: &Deployment,
    shells: &[Shell],
    inner_flags: &str,
    dir: &Path,
) -> Vec<Background> {
    let count = shells.len();
    shells
        .iter()
        .enumerate()
        .map(|(i, shell)| {
            let ready = dir.join(format!("ready-{i}"));
            let others: Vec<String> = (0..count)
                .map(|j| format!("[ -e {} ]", dir.join(format!("ready-{j}")).display()))
                .collect();
            // Bounded: 400 rounds of 50 ms, twenty seconds at most.
            let script = format!(
                "touch {ready}; n=0; until {all}; do n=$((n+1)); [ $n -gt 400 ] && exit 3; \
                 sleep 0.05; done; exec {bin} {deployment} run {flags} {inner_flags} {name} -- true",
                ready = ready.display(),
                all = others.join(" && "),
                bin = FENCELOCK,
                deployment = deployment.shell(),
                flags = shell.inner.1.join(" "),
                name = shell.inner.0,
            );
            let child = Command::new(FENCELOCK)
                .args(&deployment.0)
                .arg("run")
                .args(shell.outer.1)
                .args([shell.outer.0, "--", "sh", "-c", &script])
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn fencelock");
            Background {
                child,
                group_file: None,
            }
        })
        .collect()
}

/// Polls `status --graph --json` until it exits 79 (a deadlock), for at most 20 s; the graph.
fn deadlock_shown(deployment: &Deployment) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = deployment.output(&["status", "--graph", "--json"]);
        let graph: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("not JSON: {}", stderr(&out)));
        match code(&out) {
            79 => {
                assert_eq!(graph["verdict"], "deadlock", "{graph}");
                return graph;
            }
            // Nobody waits yet, or a wait not recorded yet: no verdict of deadlock.
            0 | 80 => assert_ne!(graph["verdict"], "deadlock", "{graph}"),
            other => panic!("status --graph exited {other}: {}", stderr(&out)),
        }
        assert!(Instant::now() < deadline, "no deadlock shown: {graph}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `(waits for, held)` names of each step of the graph's cycle, sorted.
fn cycle_names(graph: &serde_json::Value) -> Vec<(String, String)> {
    let cycles = graph["cycles"].as_array().expect("cycles");
    assert_eq!(cycles.len(), 1, "one cycle: {graph}");
    let mut names: Vec<(String, String)> = cycles[0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|step| {
            (
                step["name"].as_str().unwrap_or("").to_owned(),
                step["kind"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    names.sort();
    names
}

/// The shells deadlock; `status --graph` shows the cycle (text, JSON and dot) and exits 79.
fn graph_shows(deployment: &Deployment, shells: &[Shell], expected: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let _running = start(deployment, shells, "", dir.path());
    let graph = deadlock_shown(deployment);
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(name, kind)| ((*name).to_owned(), (*kind).to_owned()))
        .collect();
    assert_eq!(cycle_names(&graph), expected, "{graph}");

    let text = deployment.output(&["status", "--graph"]);
    assert_eq!(code(&text), 79, "{}", stderr(&text));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    println!("{text}");
    assert!(text.contains("DEADLOCK 1:"), "{text}");
    assert!(!text.contains("no deadlock"), "{text}");
    let dot = deployment.output(&["status", "--graph", "--dot"]);
    assert_eq!(code(&dot), 79, "{}", stderr(&dot));
    let dot = String::from_utf8_lossy(&dot.stdout).into_owned();
    assert_eq!(dot.matches(", color=red").count(), shells.len(), "{dot}");
}

/// The shells deadlock with `--deadlock-check` on their inner runs: exactly one inner run gives
/// up, exiting 79 with a message naming the cycle, which its shell's outer run passes on; the
/// other shells then finish.
fn one_gives_up(deployment: &Deployment, shells: &[Shell]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start(deployment, shells, "--deadlock-check=200ms", dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut codes = Vec::new();
    let mut said = String::new();
    for shell in &mut running {
        let status = loop {
            if let Some(status) = shell.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "a shell never finished");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        if let Some(mut pipe) = shell.child.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut err).expect("stderr");
        }
        said.push_str(&err);
        codes.push(status.code().expect("exited"));
    }
    codes.sort_unstable();
    let mut expected = vec![0; shells.len() - 1];
    expected.push(79);
    assert_eq!(codes, expected, "{said}");
    assert!(
        said.contains("the wait closes a deadlock"),
        "the message names the cycle: {said}"
    );
}

const MUTEXES: [Shell; 2] = [
    Shell {
        outer: ("A", &[]),
        inner: ("B", &[]),
    },
    Shell {
        outer: ("B", &[]),
        inner: ("A", &[]),
    },
];

const THREE: [Shell; 3] = [
    Shell {
        outer: ("A", &[]),
        inner: ("B", &[]),
    },
    Shell {
        outer: ("B", &[]),
        inner: ("C", &[]),
    },
    Shell {
        outer: ("C", &[]),
        inner: ("A", &[]),
    },
];

/// A fair mutex, a semaphore of one permit and a read-write lock, read against write.
const MIXED: [Shell; 3] = [
    Shell {
        outer: ("F", &["--fair"]),
        inner: ("S", &["--semaphore", "1"]),
    },
    Shell {
        outer: ("S", &["--semaphore", "1"]),
        inner: ("W", &["--read"]),
    },
    Shell {
        outer: ("W", &["--write"]),
        inner: ("F", &["--fair"]),
    },
];

#[test]
fn two_shells_nesting_runs_in_opposite_orders_show_their_deadlock() {
    let server = RedisServer::start();
    let deployment = Deployment::server(&server);
    graph_shows(&deployment, &MUTEXES, &[("A", "mutex"), ("B", "mutex")]);
    one_gives_up(&deployment, &MUTEXES);
}

#[test]
fn three_shells_in_a_circle_show_their_deadlock() {
    let server = RedisServer::start();
    let deployment = Deployment::server(&server);
    graph_shows(
        &deployment,
        &THREE,
        &[("A", "mutex"), ("B", "mutex"), ("C", "mutex")],
    );
    one_gives_up(&deployment, &THREE);
}

#[test]
fn a_deadlock_of_mixed_kinds_is_shown() {
    let server = RedisServer::start();
    let deployment = Deployment::server(&server);
    graph_shows(
        &deployment,
        &MIXED,
        &[("F", "fair-mutex"), ("S", "semaphore"), ("W", "rwlock")],
    );
    one_gives_up(&deployment, &MIXED);
}

#[test]
fn a_deadlock_on_a_cluster_is_shown() {
    let cluster = RedisCluster::start();
    let deployment = Deployment::cluster(&cluster);
    graph_shows(&deployment, &MUTEXES, &[("A", "mutex"), ("B", "mutex")]);
    one_gives_up(&deployment, &MUTEXES);
}

/// Waiters whose waits are not recorded (their client records none): the graph does not say
/// there is no deadlock, and `status --graph` exits 80.
#[test]
fn waits_not_recorded_leave_the_graph_unable_to_tell() {
    use fencelock::{Client, ClientOptions};

    let server = RedisServer::start();
    let deployment = Deployment::server(&server);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let url = server.url();
    let (holder, waiter) = runtime.block_on(async {
        let holder = Client::connect(url.as_str()).await.expect("connect");
        let quiet = ClientOptions::default().record_waits(None);
        let waiter = Client::connect_with_options(url.as_str(), quiet)
            .await
            .expect("connect");
        (holder, waiter)
    });
    let held = runtime
        .block_on(holder.mutex("quiet").expect("name").lock())
        .expect("lock");
    let waiting = {
        let mutex = waiter.mutex("quiet").expect("name");
        runtime.spawn(async move { mutex.lock().await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = deployment.output(&["status", "--graph"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if code(&out) == 80 {
            assert!(text.contains("cannot tell"), "{text}");
            assert!(!text.contains("no deadlock\n"), "{text}");
            break;
        }
        assert_eq!(code(&out), 0, "before the waiter queued: {text}");
        assert!(
            Instant::now() < deadline,
            "the unrecorded waiter never showed: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    runtime.block_on(held.unlock()).expect("unlock");
    let guard = runtime.block_on(waiting).expect("task").expect("lock");
    runtime.block_on(guard.unlock()).expect("unlock");
}
