//! A real PostgreSQL server as a child process, for tests and examples of fenced writes.

use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::{Uid, User};
use tempfile::TempDir;

use crate::free_port;
use crate::server::{hard_kill, pid_of, read_lossy, run_bounded};

/// Where Debian's `postgresql` package puts the server binaries, one folder per major version.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The account the server runs as when the caller is root: `initdb` and `postgres` refuse
/// root, and Debian's package creates this one.
const SERVICE_USER: &str = "postgres";
/// `initdb` writes and syncs a whole cluster; on a loaded machine that takes several seconds.
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Launch attempts before giving up, each on a new port (another process may take a free port
/// first).
const START_ATTEMPTS: u32 = 3;
/// How long `Drop` lets an immediate shutdown take before `SIGKILL`.
const STOP_GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(50);
const LOG_FILE: &str = "postgres.log";

const SETUP_HINT: &str = "Run `cargo xtask setup` (installs Debian's postgresql) or \
                          set FENCELOCK_POSTGRES_BIN to the folder holding initdb and postgres.";

/// A PostgreSQL server listening on 127.0.0.1, with its cluster in a temporary directory.
///
/// The cluster is made by `initdb` with a `postgres` superuser that needs no password, and the
/// server runs with `fsync=off`: it is for tests, not for keeping data. When the caller is root
/// both run as the `postgres` account, which they require. Dropping the value shuts the server
/// down at once and removes the directory; if the thread is panicking, the server log is
/// printed to stderr first.
///
/// ```no_run
/// let postgres = fencelock_testkit::Postgres::start();
/// let url = postgres.url(); // postgres://postgres@127.0.0.1:PORT/postgres
/// # let _ = url;
/// ```
#[derive(Debug)]
#[must_use = "dropping a Postgres stops the server"]
pub struct Postgres {
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Postgres {
    /// Makes a cluster, starts the server on a free port and waits until it accepts
    /// connections.
    ///
    /// # Panics
    ///
    /// If the PostgreSQL binaries are missing, the caller is root and there is no `postgres`
    /// account, or the server does not come up (the message includes its log).
    pub fn start() -> Self {
        let bin =
            postgres_bin_dir().unwrap_or_else(|| panic!("PostgreSQL not found. {SETUP_HINT}"));
        let dir = tempfile::Builder::new()
            .prefix("fencelock-postgres-")
            .tempdir()
            .expect("cannot create a temporary directory for PostgreSQL");
        let account = service_account(dir.path());
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .arg("--no-sync");
        run_bounded(as_account(initdb, account), INITDB_TIMEOUT)
            .unwrap_or_else(|e| panic!("initdb failed: {e}"));
        let mut server = Postgres {
            port: 0,
            child: None,
            dir,
        };
        server.launch(&bin, account);
        server
    }

    /// The server at `DATABASE_URL` when that is set and not empty; otherwise a private
    /// server started here, returned beside its URL so that it lives as long as the caller
    /// keeps it. For examples and demos that users may point at their own database.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), when a private server is needed.
    pub fn from_env_or_start() -> (String, Option<Self>) {
        crate::from_env_or_start("DATABASE_URL", Self::start, Self::url)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: the superuser, no password, the default
    /// database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join(LOG_FILE))
    }

    fn launch(&mut self, bin: &Path, account: Option<(u32, u32)>) {
        let mut failures = String::new();
        for attempt in 1..=START_ATTEMPTS {
            self.port = free_port();
            let log = File::options()
                .create(true)
                .append(true)
                .open(self.dir.path().join(LOG_FILE))
                .expect("cannot open the PostgreSQL log file");
            let mut postgres = Command::new(bin.join("postgres"));
            postgres
                .arg("-D")
                .arg(self.dir.path().join("data"))
                .args(["-p", &self.port.to_string(), "-k"])
                .arg(self.dir.path())
                .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            let child = as_account(postgres, account)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", bin.join("postgres").display()));
            self.child = Some(child);
            if self.await_ready(bin) {
                return;
            }
            if let Some(child) = self.child.take() {
                let _ = hard_kill(child);
            }
            failures.push_str(&format!("attempt {attempt}: port {}\n", self.port));
        }
        panic!(
            "PostgreSQL did not start after {START_ATTEMPTS} attempts:\n{failures}{}",
            self.log_banner()
        );
    }

    /// Polls `pg_isready` until the server accepts connections. False when the child exited
    /// (most likely another process took the port first).
    fn await_ready(&mut self, bin: &Path) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .as_mut()
                .is_none_or(|child| !matches!(child.try_wait(), Ok(None)));
            if exited {
                return false;
            }
            let mut probe = Command::new(bin.join("pg_isready"));
            probe.args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()]);
            if run_bounded(probe, Duration::from_secs(5)).is_ok() {
                return true;
            }
            if Instant::now() >= deadline {
                panic!(
                    "PostgreSQL on port {} not ready after {READY_TIMEOUT:?}\n{}",
                    self.port,
                    self.log_banner()
                );
            }
            thread::sleep(POLL);
        }
    }

    fn log_banner(&self) -> String {
        format!(
            "---- PostgreSQL log (port {}) ----\n{}",
            self.port,
            self.log()
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.log_banner());
        }
        // No panics here: a panic while already unwinding would abort the test binary.
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Immediate shutdown: the server ends its backends and frees its shared memory, which
        // a SIGKILL would leave behind.
        let _ = signal::kill(pid_of(&child), Signal::SIGQUIT);
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(POLL);
        }
        let _ = hard_kill(child);
    }
}

/// The folder holding `initdb`, `postgres` and `pg_isready`: `FENCELOCK_POSTGRES_BIN` if set,
/// else the newest version under Debian's `/usr/lib/postgresql`, else the folder of `initdb`
/// on `PATH`. `None` when there is none.
pub fn postgres_bin_dir() -> Option<PathBuf> {
    if let Some(explicit) = env::var_os("FENCELOCK_POSTGRES_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(explicit));
    }
    let debian = fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin);
    debian.or_else(|| {
        env::var_os("PATH")
            .iter()
            .flat_map(env::split_paths)
            .find(|dir| dir.join("initdb").is_file())
    })
}

/// The uid and gid to run PostgreSQL as, with `dir` handed to that account: the `postgres`
/// account when the caller is root, else `None` (the caller's own).
fn service_account(dir: &Path) -> Option<(u32, u32)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let user = User::from_name(SERVICE_USER)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!("running as root, and there is no `{SERVICE_USER}` account to run PostgreSQL as. {SETUP_HINT}")
        });
    let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot hand {} to {SERVICE_USER}: {e}", dir.display()));
    Some((uid, gid))
}

fn as_account(mut command: Command, account: Option<(u32, u32)>) -> Command {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = account {
        command.uid(uid).gid(gid);
    }
    command
}
