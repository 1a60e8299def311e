//! The lock libraries of other languages that fencelock shares locks with, installed at pinned
//! versions, and one worker program per language that takes their locks the way their users do.
//!
//! The peers: redis-py's `Lock`, python-redis-lock and pottery's `Redlock` (PyPI); node-redlock,
//! redis-semaphore's `Mutex` and node-redisson (npm, on ioredis); Redisson's `RLock` as its own
//! Lua scripts and waiting define it (`workers/node/redisson.mjs`: there is no JVM library to
//! install from the registries the project uses); rslock (crates.io). [`Peer`] says of each which
//! key it takes for a name, which [`Layout`] it keeps there and how its waiters [`Wake`].
//!
//! [`install`] puts them under [`dir`] (`target/peers/` by default): the Python packages with
//! `pip --require-hashes` from `workers/python/requirements.txt`, the Node packages with `npm ci`
//! from `workers/node/package-lock.json`, the rslock worker with `cargo build --locked` from
//! `workers/rslock/`. `cargo xtask setup` and `cargo xtask test` call it. [`Installed::locate`]
//! finds them for a test, and fails when they are missing or were installed from other pins.
//!
//! Every worker speaks the same protocol of lines (`workers/README.md`), which
//! `fencelock_testkit::process::Workers::spawn_commands` drives; [`Worker`] builds its command.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where the workers' sources and the peers' pins are.
const WORKERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/workers");

const REQUIREMENTS: &str = include_str!("../workers/python/requirements.txt");
const PACKAGE_JSON: &str = include_str!("../workers/node/package.json");
const PACKAGE_LOCK: &str = include_str!("../workers/node/package-lock.json");
const REDISSON_SCRIPTS: &str = include_str!("../workers/node/redisson.mjs");
const RSLOCK_MANIFEST: &str = include_str!("../workers/rslock/Cargo.toml");
const RSLOCK_LOCKFILE: &str = include_str!("../workers/rslock/Cargo.lock");
const RSLOCK_MAIN: &str = include_str!("../workers/rslock/src/main.rs");

/// The file each installation writes last: a copy of the pins it installed, compared with the
/// current ones by [`Installed::locate`].
const STAMP: &str = "pinned";

/// The environment variable that moves [`dir`].
pub const DIR_ENV: &str = "FENCELOCK_PEERS_DIR";

/// What a peer's worker runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `python3`, with the pinned packages on its `PYTHONPATH`: `workers/python/worker.py`.
    Python,
    /// `node`, with the pinned `node_modules` on its `NODE_PATH`: `workers/node/worker.mjs`.
    Node,
    /// The `rslock-worker` binary built from `workers/rslock/`.
    Rslock,
}

/// What a peer keeps in Redis for one lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// One string key, a random token of the holder's as its value, a lease as its expiry; a
    /// release or an extension checks the token first.
    Token,
    /// [`Layout::Token`] at `lock:NAME` (lease in whole seconds), and the signal list
    /// `lock-signal:NAME` that a release refills with one element and that waiters `BLPOP`.
    PythonRedisLock,
    /// A hash at NAME with one field per holder, `<client id>:<thread id>`, counting its
    /// re-entries; a release that deletes it publishes `0` on `redisson_lock__channel:{NAME}`.
    Redisson,
}

/// How a peer's waiters learn that the lock was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wake {
    /// They do not: they try again after a delay.
    Polls,
    /// A `BLPOP` on the signal list returns when a release pushes to it; one waiter per release.
    SignalList,
    /// A message on the lock's channel; each subscribed client wakes one of its waiters.
    Channel,
}

/// A lock library of another language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// redis-py's `Lock` (PyPI `redis`).
    RedisPy,
    /// PyPI `python-redis-lock`.
    PythonRedisLock,
    /// pottery's `Redlock` (PyPI `pottery`).
    Pottery,
    /// node-redlock (npm `redlock`, version 5).
    Redlock,
    /// redis-semaphore's `Mutex` (npm `redis-semaphore`).
    RedisSemaphore,
    /// npm `node-redisson`, a port of Redisson's `RLock` to Node.
    NodeRedisson,
    /// Redisson's `RLock`: its own scripts and way of waiting, run by the Node worker.
    Redisson,
    /// crates.io `rslock`.
    Rslock,
}

impl Peer {
    /// Every peer.
    pub const ALL: [Peer; 8] = [
        Peer::RedisPy,
        Peer::PythonRedisLock,
        Peer::Pottery,
        Peer::Redlock,
        Peer::RedisSemaphore,
        Peer::NodeRedisson,
        Peer::Redisson,
        Peer::Rslock,
    ];

    /// The peer's name: the worker's `PEER` argument and the first word of its `--version`.
    pub fn name(self) -> &'static str {
        match self {
            Peer::RedisPy => "redis-py",
            Peer::PythonRedisLock => "python-redis-lock",
            Peer::Pottery => "pottery",
            Peer::Redlock => "redlock",
            Peer::RedisSemaphore => "redis-semaphore",
            Peer::NodeRedisson => "node-redisson",
            Peer::Redisson => "redisson",
            Peer::Rslock => "rslock",
        }
    }

    /// What the peer's worker runs on.
    pub fn runtime(self) -> Runtime {
        match self {
            Peer::RedisPy | Peer::PythonRedisLock | Peer::Pottery => Runtime::Python,
            Peer::Redlock | Peer::RedisSemaphore | Peer::NodeRedisson | Peer::Redisson => {
                Runtime::Node
            }
            Peer::Rslock => Runtime::Rslock,
        }
    }

    /// What the peer keeps in Redis.
    pub fn layout(self) -> Layout {
        match self {
            Peer::PythonRedisLock => Layout::PythonRedisLock,
            Peer::NodeRedisson | Peer::Redisson => Layout::Redisson,
            _ => Layout::Token,
        }
    }

    /// How the peer's waiters learn of a release.
    pub fn wake(self) -> Wake {
        match self.layout() {
            Layout::Token => Wake::Polls,
            Layout::PythonRedisLock => Wake::SignalList,
            Layout::Redisson => Wake::Channel,
        }
    }

    /// The key of the lock that the peer's users name `name`.
    pub fn key(self, name: &str) -> String {
        match self {
            Peer::PythonRedisLock => format!("lock:{name}"),
            Peer::Pottery => format!("redlock:{name}"),
            Peer::RedisSemaphore => format!("mutex:{name}"),
            _ => name.to_owned(),
        }
    }

    /// The version the pins install: of the package, or for [`Peer::Redisson`] of the Redisson
    /// release whose scripts the worker runs.
    ///
    /// # Errors
    ///
    /// When the pin cannot be found in its file.
    pub fn pinned_version(self) -> Result<String, String> {
        let missing = || format!("no pinned version of {}", self.name());
        match self {
            Peer::RedisPy => python_pin("redis"),
            Peer::PythonRedisLock => python_pin("python-redis-lock"),
            Peer::Pottery => python_pin("pottery"),
            Peer::Redlock => node_pin("redlock"),
            Peer::RedisSemaphore => node_pin("redis-semaphore"),
            Peer::NodeRedisson => node_pin("node-redisson"),
            Peer::Redisson => REDISSON_SCRIPTS
                .lines()
                .find_map(|l| l.strip_prefix("export const REDISSON_VERSION = \""))
                .and_then(|rest| rest.strip_suffix("\";"))
                .map(str::to_owned),
            Peer::Rslock => {
                let mut lines = RSLOCK_LOCKFILE.lines();
                lines
                    .position(|l| l == "name = \"rslock\"")
                    .and_then(|_| lines.next())
                    .and_then(|l| l.strip_prefix("version = \""))
                    .and_then(|l| l.strip_suffix('"'))
                    .map(str::to_owned)
            }
        }
        .ok_or_else(missing)
    }
}

fn python_pin(distribution: &str) -> Option<String> {
    let prefix = format!("{distribution}==");
    REQUIREMENTS.lines().find_map(|line| {
        let version = line.strip_prefix(&prefix)?;
        Some(version.trim_end_matches(['\\', ' ']).to_owned())
    })
}

fn node_pin(package: &str) -> Option<String> {
    let prefix = format!("\"{package}\": \"");
    PACKAGE_JSON.lines().find_map(|line| {
        let rest = line.trim().strip_prefix(&prefix)?;
        Some(rest.split('"').next()?.to_owned())
    })
}

/// Where the peers are installed: `FENCELOCK_PEERS_DIR` when set, else `peers/` in Cargo's
/// target directory (`CARGO_TARGET_DIR`, else the workspace's `target/`).
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("peers")
}

/// What the Python installation stamps.
fn python_pins() -> String {
    REQUIREMENTS.to_owned()
}

/// What the Node installation stamps.
fn node_pins() -> String {
    format!("{PACKAGE_JSON}\n{PACKAGE_LOCK}")
}

/// What the rslock build stamps: its sources too, so that a changed worker is rebuilt.
fn rslock_pins() -> String {
    format!("{RSLOCK_MANIFEST}\n{RSLOCK_LOCKFILE}\n{RSLOCK_MAIN}")
}

/// The rslock worker in the peers' `dir`.
fn rslock_binary(dir: &Path) -> PathBuf {
    dir.join("rslock/debug/rslock-worker")
}

/// Installs every peer under `dir` at its pinned version, skipping what is already installed
/// from the same pins: the Python packages (`python3 -m pip`), the Node packages (`npm ci`) and
/// the rslock worker (`cargo build --locked`, with `CARGO` when set).
///
/// # Errors
///
/// When a step fails; a peer that cannot be installed is an error, never skipped.
pub fn install(dir: &Path) -> Result<(), String> {
    install_python(&dir.join("python"))?;
    install_node(&dir.join("node"))?;
    install_rslock(dir)
}

fn stamped(dir: &Path, pins: &str) -> bool {
    fs::read_to_string(dir.join(STAMP)).is_ok_and(|stamp| stamp == pins)
}

fn stamp(dir: &Path, pins: &str) -> Result<(), String> {
    let file = dir.join(STAMP);
    fs::write(&file, pins).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// Empties `dir` (removing what a former installation left) and creates it.
fn fresh(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    eprintln!("peers: {what}");
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

fn install_python(dir: &Path) -> Result<(), String> {
    let pins = python_pins();
    if stamped(dir, &pins) {
        return Ok(());
    }
    fresh(dir)?;
    run(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                "--no-deps",
                "--require-hashes",
                "--target",
            ])
            .arg(dir)
            .arg("-r")
            .arg(Path::new(WORKERS).join("python/requirements.txt"))
            .env("PIP_ROOT_USER_ACTION", "ignore"),
        "pip install of the Python peers (workers/python/requirements.txt)",
    )?;
    stamp(dir, &pins)
}

fn install_node(dir: &Path) -> Result<(), String> {
    let pins = node_pins();
    if stamped(dir, &pins) {
        return Ok(());
    }
    fresh(dir)?;
    for file in ["package.json", "package-lock.json", ".npmrc"] {
        let from = Path::new(WORKERS).join("node").join(file);
        fs::copy(&from, dir.join(file))
            .map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
    }
    run(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--silent"])
            .current_dir(dir),
        "npm ci of the Node peers (workers/node/package-lock.json)",
    )?;
    stamp(dir, &pins)
}

/// Builds the rslock worker into `rslock/` of the peers' `dir`, its own target directory.
fn install_rslock(dir: &Path) -> Result<(), String> {
    let pins = rslock_pins();
    let target = dir.join("rslock");
    if stamped(&target, &pins) && rslock_binary(dir).is_file() {
        return Ok(());
    }
    fs::create_dir_all(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(
        Command::new(cargo)
            .args(["build", "--locked", "--quiet", "--manifest-path"])
            .arg(Path::new(WORKERS).join("rslock/Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target),
        "cargo build of the rslock worker (workers/rslock)",
    )?;
    stamp(&target, &pins)
}

/// The peers as [`install`] left them.
#[derive(Clone, Debug)]
pub struct Installed {
    dir: PathBuf,
}

impl Installed {
    /// Finds the peers in [`dir`].
    ///
    /// # Errors
    ///
    /// When a runtime's installation is missing, or was made from other pins than the
    /// current ones: `cargo xtask setup` installs them.
    pub fn locate() -> Result<Installed, String> {
        Installed::at(dir())
    }

    /// Finds the peers in `dir`, as [`locate`](Self::locate) does in [`dir`].
    ///
    /// # Errors
    ///
    /// As [`locate`](Self::locate).
    pub fn at(dir: PathBuf) -> Result<Installed, String> {
        let checks = [
            ("python", python_pins()),
            ("node", node_pins()),
            ("rslock", rslock_pins()),
        ];
        for (runtime, pins) in checks {
            if !stamped(&dir.join(runtime), &pins) {
                return Err(format!(
                    "the {runtime} peers in {} are missing or not installed from the current \
                     pins: run `cargo xtask setup`",
                    dir.display()
                ));
            }
        }
        if !rslock_binary(&dir).is_file() {
            return Err(format!(
                "{} is missing: run `cargo xtask setup`",
                rslock_binary(&dir).display()
            ));
        }
        Ok(Installed { dir })
    }

    /// The command that starts `peer`'s worker with `args`, in its runtime's environment.
    fn command(&self, peer: Peer, args: &[String]) -> Command {
        let workers = Path::new(WORKERS);
        let mut command = match peer.runtime() {
            Runtime::Python => {
                let mut c = Command::new("python3");
                c.arg(workers.join("python/worker.py"))
                    .env("PYTHONPATH", self.dir.join("python"))
                    .env("PYTHONNOUSERSITE", "1")
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                c
            }
            Runtime::Node => {
                let mut c = Command::new("node");
                c.arg(workers.join("node/worker.mjs"))
                    .env("NODE_PATH", self.dir.join("node/node_modules"));
                c
            }
            Runtime::Rslock => Command::new(rslock_binary(&self.dir)),
        };
        command.arg(peer.name()).args(args);
        command
    }

    /// The command that prints `peer`'s installed version as `NAME VERSION [...]`.
    pub fn version_command(&self, peer: Peer) -> Command {
        self.command(peer, &["--version".to_owned()])
    }
}

/// What a worker does after the start barrier (`READY`, then `GO` on its stdin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `iterations` times: take the lock (waiting), run the critical section on the counter,
    /// print `SECTION ENTER EXIT`, release, pause.
    Loop {
        /// How many critical sections.
        iterations: u64,
    },
    /// Take the lock, print `HELD T`, keep it (renewed as the peer renews, or extended every
    /// third of the lease where the peer leaves that to its users) until `RELEASE` or the end
    /// of stdin, then release and print `RELEASED T`. `LOST T` if a renewal finds it gone.
    Hold,
    /// Try once; if the lock is held, print `WAITING T` (once the peer's wake-up is in place)
    /// and wait for it; print `ACQUIRED T`, release, print `RELEASED T`.
    Wait,
}

/// One worker's arguments: a peer's lock on a name, a counter to increment under it.
#[derive(Clone, Debug)]
pub struct Worker {
    peer: Peer,
    url: String,
    name: String,
    counter: String,
    mode: Mode,
    lease: Duration,
    hold: Duration,
    gap: Duration,
}

impl Worker {
    /// `peer`'s worker on the server at `url`, locking what the peer's users call `name`
    /// for `lease`, incrementing the key `counter`. The critical section holds the lock
    /// 2 ms and no pause follows a release: see [`hold`](Self::hold) and [`gap`](Self::gap).
    pub fn new(
        peer: Peer,
        url: &str,
        name: &str,
        counter: &str,
        mode: Mode,
        lease: Duration,
    ) -> Worker {
        Worker {
            peer,
            url: url.to_owned(),
            name: name.to_owned(),
            counter: counter.to_owned(),
            mode,
            lease,
            hold: Duration::from_millis(2),
            gap: Duration::ZERO,
        }
    }

    /// How long the critical section sleeps between reading and writing the counter.
    pub fn hold(mut self, hold: Duration) -> Worker {
        self.hold = hold;
        self
    }

    /// How long a worker in [`Mode::Loop`] pauses after each release.
    pub fn gap(mut self, gap: Duration) -> Worker {
        self.gap = gap;
        self
    }

    /// The peer.
    pub fn peer(&self) -> Peer {
        self.peer
    }

    /// The command that starts this worker from `installed`.
    pub fn command(&self, installed: &Installed) -> Command {
        let (mode, iterations) = match self.mode {
            Mode::Loop { iterations } => ("loop", iterations),
            Mode::Hold => ("hold", 0),
            Mode::Wait => ("wait", 0),
        };
        let args = [
            self.url.clone(),
            self.name.clone(),
            self.counter.clone(),
            mode.to_owned(),
            iterations.to_string(),
            self.lease.as_millis().to_string(),
            format!("hold_ms={}", self.hold.as_millis()),
            format!("gap_ms={}", self.gap.as_millis()),
        ];
        installed.command(self.peer, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_has_a_pinned_version() {
        for peer in Peer::ALL {
            let version = peer.pinned_version().expect("pinned");
            assert!(
                version.chars().next().is_some_and(|c| c.is_ascii_digit()),
                "{}: {version:?}",
                peer.name()
            );
        }
        assert_eq!(
            Peer::Redlock.pinned_version().as_deref(),
            Ok("5.0.0-beta.2")
        );
        assert_eq!(
            Peer::PythonRedisLock.pinned_version().as_deref(),
            Ok("4.0.1")
        );
    }

    #[test]
    fn keys_are_as_each_peer_names_them() {
        assert_eq!(Peer::RedisPy.key("jobs:nightly"), "jobs:nightly");
        assert_eq!(Peer::PythonRedisLock.key("jobs"), "lock:jobs");
        assert_eq!(Peer::Pottery.key("jobs"), "redlock:jobs");
        assert_eq!(Peer::RedisSemaphore.key("jobs"), "mutex:jobs");
        assert_eq!(Peer::Redisson.key("jobs"), "jobs");
    }
}
