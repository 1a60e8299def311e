//! Scenario 3, peers: the libraries fencelock's users would otherwise pick, in the contended
//! scenario, against the same Redis in the same run as fencelock, at their default settings and
//! at their best (a 1 ms retry delay where they poll).
//!
//! The bench installs them itself under the peers folder: a Python venv (`redis`,
//! `python-redis-lock`, `pottery`), a `node_modules` (`redlock`, `redis-semaphore`, `ioredis`)
//! and a small cargo project on `rslock`, built into a target folder of its own. Each peer runs
//! as one process of W workers (threads or tasks, each with its own connection) that follow the
//! same handoff rule as fencelock's workers and print every grant; the bench analyses the grants
//! exactly as it does fencelock's. A peer that cannot be installed is skipped with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::grants::{analyse, Grant};
use crate::handoff::{self, FencelockKind, HandoffRun, Mode};
use crate::progress::Progress;
use crate::redisinfo::{self, Meter, Usage};
use crate::report::{ratio, short_number, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

const PYTHON_WORKER: &str = include_str!("../peers/worker.py");
const ETCD_WORKER: &str = include_str!("../peers/worker_etcd.py");
/// What both Python workers import: the contention loop and the lines the bench reads.
const PYTHON_CONTEND: &str = include_str!("../peers/contend.py");
const NODE_WORKER: &str = include_str!("../peers/worker.mjs");
const RSLOCK_MANIFEST: &str = include_str!("../peers/rslock/Cargo.toml");
const RSLOCK_MAIN: &str = include_str!("../peers/rslock/main.rs");

/// What a peer's workers run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runtime {
    Python,
    Node,
    Rslock,
    /// `etcdctl lock` against a private etcd: the reference that is not Redis.
    Etcd,
}

/// One peer at one setting.
#[derive(Clone, Copy, Debug)]
struct Peer {
    runtime: Runtime,
    /// The worker's VARIANT argument.
    variant: &'static str,
    /// The name in tables.
    label: &'static str,
}

/// Every peer, in the order they are measured.
const PEERS: [Peer; 12] = [
    Peer {
        runtime: Runtime::Rslock,
        variant: "rslock",
        label: "rslock, default (3 tries 0-200 ms apart)",
    },
    Peer {
        runtime: Runtime::Rslock,
        variant: "rslock-1ms",
        label: "rslock, retry delay 1 ms",
    },
    Peer {
        runtime: Runtime::Python,
        variant: "redis-py",
        label: "redis-py Lock, default (sleep 100 ms)",
    },
    Peer {
        runtime: Runtime::Python,
        variant: "redis-py-1ms",
        label: "redis-py Lock, sleep 1 ms",
    },
    Peer {
        runtime: Runtime::Python,
        variant: "python-redis-lock",
        label: "python-redis-lock (BLPOP signal)",
    },
    Peer {
        runtime: Runtime::Python,
        variant: "pottery",
        label: "pottery Redlock, default (0-200 ms)",
    },
    Peer {
        runtime: Runtime::Python,
        variant: "pottery-1ms",
        label: "pottery Redlock, retry 0-1 ms",
    },
    Peer {
        runtime: Runtime::Node,
        variant: "redlock",
        label: "node redlock, default (200±100 ms)",
    },
    Peer {
        runtime: Runtime::Node,
        variant: "redlock-1ms",
        label: "node redlock, retry 1 ms",
    },
    Peer {
        runtime: Runtime::Node,
        variant: "redis-semaphore",
        label: "redis-semaphore Mutex, default (10 ms)",
    },
    Peer {
        runtime: Runtime::Node,
        variant: "redis-semaphore-1ms",
        label: "redis-semaphore Mutex, retry 1 ms",
    },
    Peer {
        runtime: Runtime::Etcd,
        variant: "etcd",
        label: "etcdctl lock (etcd, not Redis)",
    },
];

/// An installed runtime: the program and the arguments that start a worker.
#[derive(Clone, Debug)]
struct Installed {
    program: PathBuf,
    args: Vec<String>,
}

/// A peer that was measured or skipped.
#[derive(Clone, Debug, Serialize)]
pub struct PeerStatus {
    /// The peer and its setting.
    pub label: String,
    /// The version its worker reported, when it ran.
    pub version: Option<String>,
    /// Why it was skipped, when it was.
    pub skipped: Option<String>,
}

/// Scenario 3's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct Peers {
    /// Length of each run's window.
    pub duration_secs: f64,
    /// How long a holder holds in handoff mode.
    pub hold_ms: f64,
    /// Which peers ran, their versions, and which were skipped.
    pub peers: Vec<PeerStatus>,
    /// fencelock's runs and every peer's, on the same server.
    pub runs: Vec<HandoffRun>,
    /// Uncontended cycles of fencelock and of every Redis peer, on the same server.
    pub uncontended: Vec<UncontendedPeerRow>,
}

/// Installs what it can, then measures fencelock and every installed peer on one server.
///
/// # Errors
///
/// A failure of fencelock or of Redis; a peer's own failure only skips it.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<Peers> {
    let dir = &settings.peers_dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let wanted = |runtime: Runtime| {
        PEERS
            .iter()
            .any(|p| p.runtime == runtime && chosen(settings, p))
    };
    let not_wanted = || Err("not chosen".to_owned());
    let python = if wanted(Runtime::Python) {
        install_python(dir)
    } else {
        not_wanted()
    };
    let node = if wanted(Runtime::Node) {
        install_node(dir)
    } else {
        not_wanted()
    };
    let rslock = if wanted(Runtime::Rslock) {
        install_rslock(dir)
    } else {
        not_wanted()
    };
    let etcd = if wanted(Runtime::Etcd) {
        install_etcd(dir)
    } else {
        not_wanted()
    };
    let etcd = etcd.and_then(|installed| {
        let server = EtcdServer::start()?;
        Ok((installed, server))
    });
    let server = Server::start()?;
    let url = server.url();
    let meter = Meter::connect(&url).await?;
    let mut runs = Vec::new();
    let mut statuses = Vec::new();
    let mut uncontended = Vec::new();
    let client = fencelock::Client::connect(url.as_str()).await?;
    for &tasks in &settings.tasks {
        progress.step(
            &format!("fencelock Mutex uncontended, {tasks} task(s)"),
            settings.duration,
        );
        let t = crate::uncontended::fencelock_throughput(&meter, &client, tasks, settings.duration);
        let t = t.await?;
        progress.add_operations(t.cycles);
        uncontended.push(UncontendedPeerRow {
            library: FencelockKind::Mutex.label().to_owned(),
            tasks,
            cycles: t.cycles,
            cycles_per_sec: t.cycles_per_sec,
            commands_per_cycle: t.commands_per_cycle,
            redis_cpu_us_per_cycle: t.redis_cpu_us_per_cycle,
        });
    }
    drop(client);
    runs.extend(handoff::fencelock_runs(&url, &meter, settings, progress).await?);
    for &peer in PEERS.iter().filter(|p| chosen(settings, p)) {
        let (installed, endpoint) = match (peer.runtime, &etcd) {
            (Runtime::Python, _) => (python.as_ref(), url.clone()),
            (Runtime::Node, _) => (node.as_ref(), url.clone()),
            (Runtime::Rslock, _) => (rslock.as_ref(), url.clone()),
            (Runtime::Etcd, Ok((installed, server))) => (Ok(installed), server.endpoint()),
            (Runtime::Etcd, Err(reason)) => (Err(reason), String::new()),
        };
        let installed = match installed {
            Ok(installed) => installed,
            Err(reason) => {
                println!("peer {}: skipped: {reason}", peer.label);
                statuses.push(PeerStatus {
                    label: peer.label.to_owned(),
                    version: None,
                    skipped: Some(reason.clone()),
                });
                continue;
            }
        };
        let mut version = None;
        let mut skipped = None;
        if peer.runtime != Runtime::Etcd {
            for &tasks in &settings.tasks {
                let step = format!("{} uncontended, {tasks} task(s)", peer.label);
                progress.step(&step, settings.duration);
                match peer_uncontended(&meter, peer, installed, tasks, settings).await {
                    Ok(row) => {
                        progress.add_operations(row.cycles);
                        uncontended.push(row);
                    }
                    Err(reason) => println!("peer {}: uncontended skipped: {reason}", peer.label),
                }
            }
        }
        'modes: for mode in [Mode::Handoff, Mode::Immediate] {
            for &workers in &settings.workers {
                let step = format!("{}, {}, W={workers}", peer.label, mode.as_str());
                progress.step(&step, settings.duration);
                let run = peer_run(&meter, &endpoint, peer, installed, workers, mode, settings);
                match run.await {
                    Ok((run, v)) => {
                        progress.add_operations(run.total_acquires);
                        if version.is_none() {
                            println!("peer {}: {v}", peer.label);
                        }
                        version = Some(v);
                        runs.push(run);
                    }
                    Err(reason) => {
                        println!("peer {}: skipped: {reason}", peer.label);
                        skipped = Some(reason.to_string());
                        break 'modes;
                    }
                }
            }
        }
        statuses.push(PeerStatus {
            label: peer.label.to_owned(),
            version,
            skipped,
        });
    }
    Ok(Peers {
        duration_secs: settings.duration.as_secs_f64(),
        hold_ms: settings.hold.as_secs_f64() * 1000.0,
        peers: statuses,
        runs,
        uncontended,
    })
}

/// The measured time of [`measure`]: fencelock's runs and each chosen peer's.
fn expected(settings: &Settings) -> Duration {
    let tasks = u32::try_from(settings.tasks.len()).unwrap_or(u32::MAX);
    let contended = u32::try_from(2 * settings.workers.len()).unwrap_or(u32::MAX);
    let fencelock = settings.duration * (tasks + handoff::fencelock_run_count(settings));
    PEERS
        .iter()
        .filter(|p| chosen(settings, p))
        .map(|p| match p.runtime {
            Runtime::Etcd => settings.duration * contended,
            _ => settings.duration * (tasks + contended),
        })
        .sum::<Duration>()
        + fencelock
}

/// Whether `settings` asks for `peer`: every peer when it names none.
fn chosen(settings: &Settings, peer: &Peer) -> bool {
    settings.peers.is_empty() || settings.peers.iter().any(|v| v == peer.variant)
}

/// What one worker process printed, and what it cost Redis (nothing for a peer not on Redis).
struct Spawned {
    stdout: String,
    usage: Option<Usage>,
}

/// Runs one peer's worker process in `mode` against `endpoint`; `meter` measures what it costs
/// Redis.
async fn spawn_worker(
    meter: &Meter,
    endpoint: &str,
    peer: Peer,
    installed: &Installed,
    workers: usize,
    mode: &str,
    settings: &Settings,
) -> Result<Spawned> {
    let name = format!("peer:{}:{mode}:{workers}", peer.variant);
    let window = settings.duration;
    let mut command = tokio::process::Command::new(&installed.program);
    command
        .args(&installed.args)
        .arg(endpoint)
        .arg(&name)
        .arg(workers.to_string())
        .arg(mode)
        .arg(format!("{}", settings.hold.as_secs_f64() * 1000.0))
        .arg(format!("{}", window.as_secs_f64() * 1000.0))
        .arg(peer.variant)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let stretch = meter.start().await?;
    let child = command
        .spawn()
        .map_err(|e| Error::io(format!("starting {}", installed.program.display()), e))?;
    let bound = window + Duration::from_secs(60);
    let output = tokio::time::timeout(bound, child.wait_with_output())
        .await
        .map_err(|_| Error::Stuck(format!("{} still running after {bound:?}", peer.label)))?
        .map_err(|e| Error::io(format!("running {}", peer.label), e))?;
    let usage = match peer.runtime {
        Runtime::Etcd => None,
        _ => Some(stretch.finish().await?),
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() || !stdout.lines().any(|l| l == "end") {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(Error::Parse(format!(
            "{} exited with {}: {}",
            peer.label,
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    Ok(Spawned { stdout, usage })
}

/// Runs one peer's contended workers and analyses their grants.
async fn peer_run(
    meter: &Meter,
    endpoint: &str,
    peer: Peer,
    installed: &Installed,
    workers: usize,
    mode: Mode,
    settings: &Settings,
) -> Result<(HandoffRun, String)> {
    let window = settings.duration;
    let Spawned { stdout, usage } = spawn_worker(
        meter,
        endpoint,
        peer,
        installed,
        workers,
        mode.as_str(),
        settings,
    )
    .await?;
    let parsed = parse_grants(&stdout)?;
    let version = match peer.runtime {
        Runtime::Rslock => rslock_version(&settings.peers_dir),
        _ => parsed.version.clone(),
    };
    let window_end = parsed
        .start
        .saturating_add(u64::try_from(window.as_nanos()).unwrap_or(0));
    let total_acquires = parsed.grants.len() as u64;
    let mut in_window: Vec<Grant> = parsed
        .grants
        .into_iter()
        .filter(|g| g.acquired_ns < window_end)
        .collect();
    Ok((
        HandoffRun {
            library: peer.label.to_owned(),
            mode,
            stats: analyse(&mut in_window, workers, window),
            total_acquires,
            commands_per_acquire: usage.map(|u| u.commands_per(total_acquires)),
            redis_cpu_us_per_acquire: usage.map(|u| u.cpu_us_per(total_acquires)),
        },
        version,
    ))
}

/// Uncontended lock and unlock cycles of one library at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct UncontendedPeerRow {
    /// The library and its setting.
    pub library: String,
    /// Workers cycling at once, each on names of its own.
    pub tasks: usize,
    /// Cycles done.
    pub cycles: u64,
    /// Cycles per second.
    pub cycles_per_sec: f64,
    /// Commands Redis executed per cycle.
    pub commands_per_cycle: f64,
    /// CPU µs of Redis's main thread per cycle (see [`redisinfo::cpu_micros`]).
    pub redis_cpu_us_per_cycle: f64,
}

/// Runs one peer's uncontended workers: each locks and unlocks names of its own.
async fn peer_uncontended(
    meter: &Meter,
    peer: Peer,
    installed: &Installed,
    tasks: usize,
    settings: &Settings,
) -> Result<UncontendedPeerRow> {
    let url = meter.url();
    let spawned = spawn_worker(meter, url, peer, installed, tasks, "uncontended", settings);
    let spawned = spawned.await?;
    let bad = |line: &str| Error::Parse(format!("worker line {line:?}"));
    let mut cycles = 0u64;
    let mut elapsed_ns = 0u64;
    for line in spawned.stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["cycles", _, count] => cycles += count.parse::<u64>().map_err(|_| bad(line))?,
            ["elapsed", ns] => elapsed_ns = ns.parse().map_err(|_| bad(line))?,
            _ => {}
        }
    }
    let usage = spawned.usage.unwrap_or_default();
    let secs = Duration::from_nanos(elapsed_ns)
        .as_secs_f64()
        .max(f64::MIN_POSITIVE);
    Ok(UncontendedPeerRow {
        library: peer.label.to_owned(),
        tasks,
        cycles,
        cycles_per_sec: cycles as f64 / secs,
        commands_per_cycle: usage.commands_per(cycles),
        redis_cpu_us_per_cycle: usage.cpu_us_per(cycles),
    })
}

/// What a worker process printed.
struct WorkerOutput {
    version: String,
    start: u64,
    grants: Vec<Grant>,
}

fn parse_grants(stdout: &str) -> Result<WorkerOutput> {
    let bad = |line: &str| Error::Parse(format!("worker line {line:?}"));
    let mut out = WorkerOutput {
        version: "unknown".to_owned(),
        start: 0,
        grants: Vec::new(),
    };
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("version") => out.version = words.collect::<Vec<_>>().join(" "),
            Some("start") => {
                out.start = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| bad(line))?;
            }
            Some("grant") => {
                let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
                let (Some(worker), Some(acquired_ns), Some(released_ns)) =
                    (number(), number(), number())
                else {
                    return Err(bad(line));
                };
                out.grants.push(Grant {
                    worker: usize::try_from(worker).map_err(|_| bad(line))?,
                    acquired_ns,
                    released_ns,
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Runs an installation step, returning a one-line reason when it fails.
fn step(command: &mut Command, what: &str) -> std::result::Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what} failed ({}): {last}", output.status))
}

fn write(path: &Path, text: &str) -> std::result::Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A venv with `redis`, `python-redis-lock` and `pottery`.
fn install_python(dir: &Path) -> std::result::Result<Installed, String> {
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        println!("peers: creating a Python venv in {}", venv.display());
        step(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        )?;
    }
    let ready = Command::new(&python)
        .args(["-c", "import redis, redis_lock, pottery"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        println!("peers: pip install redis python-redis-lock pottery");
        step(
            Command::new(venv.join("bin/pip")).args([
                "install",
                "-q",
                "--disable-pip-version-check",
                "redis",
                "python-redis-lock",
                "pottery",
            ]),
            "pip install",
        )?;
    }
    Ok(Installed {
        program: python,
        args: vec![python_worker(dir, "worker.py", PYTHON_WORKER)?],
    })
}

/// Writes a Python worker into the folder of Python workers, beside the module they share
/// (Python finds it in the script's own folder), and returns the worker's path.
pub(crate) fn python_worker(
    dir: &Path,
    file: &str,
    text: &str,
) -> std::result::Result<String, String> {
    let folder = dir.join("python");
    write(&folder.join("contend.py"), PYTHON_CONTEND)?;
    let worker = folder.join(file);
    write(&worker, text)?;
    Ok(worker.display().to_string())
}

/// A `node_modules` with `redlock`, `redis-semaphore` and `ioredis`.
fn install_node(dir: &Path) -> std::result::Result<Installed, String> {
    let root = dir.join("node");
    let modules = root.join("node_modules");
    let missing = ["redlock", "redis-semaphore", "ioredis"]
        .iter()
        .any(|m| !modules.join(m).join("package.json").exists());
    if missing {
        println!("peers: npm install redlock redis-semaphore ioredis@5");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        step(
            Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(&root)
                .args(["redlock", "redis-semaphore", "ioredis@5"]),
            "npm install",
        )?;
    }
    let worker = root.join("worker.mjs");
    write(&worker, NODE_WORKER)?;
    Ok(Installed {
        program: PathBuf::from("node"),
        args: vec![worker.display().to_string()],
    })
}

/// A cargo project on `rslock`, built with its own target folder.
fn install_rslock(dir: &Path) -> std::result::Result<Installed, String> {
    let root = dir.join("rslock");
    write(&root.join("Cargo.toml"), RSLOCK_MANIFEST)?;
    write(&root.join("src/main.rs"), RSLOCK_MAIN)?;
    println!("peers: cargo build --release (rslock worker)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    step(
        Command::new(cargo)
            .args(["build", "--release", "--quiet", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", root.join("target")),
        "cargo build of the rslock worker",
    )?;
    Ok(Installed {
        program: root.join("target/release/rslock-worker"),
        args: Vec::new(),
    })
}

/// `etcd` and `etcdctl` from Debian's `etcd-server` and `etcd-client`, installed with apt-get
/// when missing, and the driver of `etcdctl lock` workers.
fn install_etcd(dir: &Path) -> std::result::Result<Installed, String> {
    ensure_etcd()?;
    Ok(Installed {
        program: PathBuf::from("python3"),
        args: vec![python_worker(dir, "worker_etcd.py", ETCD_WORKER)?],
    })
}

/// Installs `etcd` and `etcdctl` from Debian's `etcd-server` and `etcd-client` with apt-get
/// when they are not on the PATH.
pub(crate) fn ensure_etcd() -> std::result::Result<(), String> {
    if !(on_path("etcd") && on_path("etcdctl")) {
        if !on_path("apt-get") {
            return Err("etcd and etcdctl are not on the PATH and there is no apt-get".to_owned());
        }
        println!("peers: apt-get install etcd-server etcd-client");
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.trim_ascii() == b"0");
        let mut apt = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        step(
            apt.args(["install", "-y", "-q", "--no-install-recommends"])
                .args(["etcd-server", "etcd-client"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get install etcd-server etcd-client",
        )?;
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// A private single-member etcd on free loopback ports, stopped on drop.
pub(crate) struct EtcdServer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    pub(crate) fn start() -> std::result::Result<EtcdServer, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("etcd data folder: {e}"))?;
        let port = crate::server::free_port().map_err(|e| e.to_string())?;
        let peer_port = crate::server::free_port().map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))
            .map_err(|e| format!("etcd log: {e}"))?;
        let child = Command::new("etcd")
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("bench={peer}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        let server = EtcdServer {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..100 {
            let healthy = Command::new("etcdctl")
                .args(["--endpoints", &server.endpoint(), "endpoint", "health"])
                .env("ETCDCTL_API", "3")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if healthy {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("etcd did not become healthy within 10 s".to_owned())
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rslock version cargo resolved, from the worker's `Cargo.lock`.
fn rslock_version(dir: &Path) -> String {
    let lock = std::fs::read_to_string(dir.join("rslock/Cargo.lock")).unwrap_or_default();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"rslock\"" {
            if let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = ")) {
                return format!("rslock {}", v.trim_matches('"'));
            }
        }
    }
    "rslock (version unknown)".to_owned()
}

/// fencelock against each peer at each worker count: handoffs per second and p50 latency ratios.
fn ratios(runs: &[HandoffRun]) -> Table {
    let mut table = Table::new(&[
        "peer",
        "W",
        "fencelock Mutex handoffs/s ÷ peer",
        "fencelock FairMutex ÷ peer",
        "peer p50 ÷ fencelock Mutex p50",
        "peer cmds/acquire",
        "fencelock Mutex cmds/acquire",
        "fencelock FairMutex cmds/acquire",
        "peer Redis µs/acquire",
        "fencelock Mutex Redis µs/acquire",
        "fencelock Mutex ÷ peer Redis µs",
    ]);
    let fencelock = |kind: FencelockKind, w: usize| {
        runs.iter()
            .find(|r| r.mode == Mode::Handoff && r.library == kind.label() && r.stats.workers == w)
    };
    let peers = runs
        .iter()
        .filter(|r| r.mode == Mode::Handoff && !r.library.starts_with("fencelock"));
    for peer in peers {
        let w = peer.stats.workers;
        let (Some(mutex), Some(fair)) = (
            fencelock(FencelockKind::Mutex, w),
            fencelock(FencelockKind::FairMutex, w),
        ) else {
            continue;
        };
        table.row(vec![
            peer.library.clone(),
            w.to_string(),
            ratio(mutex.stats.handoffs_per_sec, peer.stats.handoffs_per_sec),
            ratio(fair.stats.handoffs_per_sec, peer.stats.handoffs_per_sec),
            ratio(peer.stats.latency.p50_ms, mutex.stats.latency.p50_ms),
            handoff::per_acquire(peer.commands_per_acquire),
            handoff::per_acquire(mutex.commands_per_acquire),
            handoff::per_acquire(fair.commands_per_acquire),
            handoff::per_acquire(peer.redis_cpu_us_per_acquire),
            handoff::per_acquire(mutex.redis_cpu_us_per_acquire),
            match (
                mutex.redis_cpu_us_per_acquire,
                peer.redis_cpu_us_per_acquire,
            ) {
                (Some(fencelock), Some(peer)) => ratio(fencelock, peer),
                _ => "n/a".to_owned(),
            },
        ]);
    }
    table
}

/// Measures, prints and writes `peers.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<Peers> {
    println!("== peers: fencelock and the libraries its users would otherwise pick, one server");
    let progress = Progress::new("peers", expected(settings));
    let results = measure(settings, &progress).await?;
    progress.finish(&handoff::summary(&results.runs));
    let mut versions = Table::new(&["peer", "version", "status"]);
    for status in &results.peers {
        versions.row(vec![
            status.label.clone(),
            status.version.clone().unwrap_or_else(|| "-".to_owned()),
            status
                .skipped
                .clone()
                .unwrap_or_else(|| "measured".to_owned()),
        ]);
    }
    let mut cycles = Table::new(&[
        "library",
        "tasks",
        "cycles/s",
        "fencelock ÷ library",
        "cmds/cycle",
        "Redis µs/cycle",
        "fencelock ÷ library Redis µs",
    ]);
    for row in &results.uncontended {
        let fencelock = results
            .uncontended
            .iter()
            .find(|r| r.tasks == row.tasks && r.library == FencelockKind::Mutex.label());
        cycles.row(vec![
            row.library.clone(),
            row.tasks.to_string(),
            format!("{:.0}", row.cycles_per_sec),
            fencelock.map_or_else(
                || "-".to_owned(),
                |r| ratio(r.cycles_per_sec, row.cycles_per_sec),
            ),
            format!("{:.1}", row.commands_per_cycle),
            short_number(row.redis_cpu_us_per_cycle),
            fencelock.map_or_else(
                || "-".to_owned(),
                |r| ratio(r.redis_cpu_us_per_cycle, row.redis_cpu_us_per_cycle),
            ),
        ]);
    }
    let (handoff_runs, immediate_runs): (Vec<HandoffRun>, Vec<HandoffRun>) = results
        .runs
        .iter()
        .cloned()
        .partition(|r| r.mode == Mode::Handoff);
    let report = Report {
        scenario: "peers".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![
            ("Peers and versions".to_owned(), versions),
            (
                "Uncontended lock+unlock cycles, names of each worker's own".to_owned(),
                cycles,
            ),
            (
                "Handoff: every grant to a waiting worker".to_owned(),
                handoff::table(&handoff_runs),
            ),
            (
                "fencelock against each peer (handoff)".to_owned(),
                ratios(&results.runs),
            ),
            (
                "Immediate re-acquire, empty critical section".to_owned(),
                handoff::table(&immediate_runs),
            ),
        ],
        notes: vec![
            format!(
                "each run: one process of W workers, each with its own connection, {:.0} ms \
                 hold; latency from the start of a release to the next holder's acquire",
                results.hold_ms
            ),
            "commands per acquire include each peer's own connection set-up and failed \
             attempts; Redis 7 counts the commands a script runs"
                .to_owned(),
            redisinfo::CPU_NOTE.to_owned(),
            "etcd has no Redis figures: n/a".to_owned(),
        ],
    };
    let charts: Vec<_> = settings
        .workers
        .iter()
        .map(|&w| {
            let runs: Vec<HandoffRun> = handoff_runs
                .iter()
                .filter(|r| r.stats.workers == w)
                .cloned()
                .collect();
            handoff::chart(
                &format!("Handoffs per second, W={w} (higher is better)"),
                &runs,
            )
        })
        .collect();
    output.publish(&report, &charts)?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_output_parses_into_grants() {
        let out = "version redis 8.1.0\nstart 100\ngrant 1 150 170\ngrant 0 180 190\nend\n";
        let parsed = parse_grants(out).ok();
        let parsed = parsed.as_ref();
        assert_eq!(parsed.map(|p| p.version.as_str()), Some("redis 8.1.0"));
        assert_eq!(parsed.map(|p| p.start), Some(100));
        assert_eq!(parsed.map(|p| p.grants.len()), Some(2));
        assert!(parse_grants("grant 1 x 3\n").is_err());
    }
}
