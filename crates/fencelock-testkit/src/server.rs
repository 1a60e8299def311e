//! A real `redis-server` child process.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::net::{probe, Probe};
use crate::{free_port, redis_cli_path, redis_server_path, ServerOptions};

/// How long a fresh or restarted server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Launch attempts before giving up (each on a new port for a fresh server).
const START_ATTEMPTS: u32 = 5;
/// How long `stop` lets the server shut down cleanly before `SIGKILL`.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Upper bound for reaping a process after `SIGKILL`.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound for one `redis-cli` invocation, so a paused server cannot hang a test.
const CLI_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(10);

const CONFIG_FILE: &str = "redis.conf";
const LOG_FILE: &str = "redis.log";
/// Config errors are printed before the log file is opened, so stderr is kept too.
const STDERR_FILE: &str = "stderr.log";

/// A `redis-server` child process listening on 127.0.0.1, with its own
/// temporary directory holding `redis.conf`, `redis.log` and any AOF files.
///
/// The process is started with `save ""`, `appendonly no`, `protected-mode no`
/// and `repl-diskless-sync-delay 0` (replicas sync at once) unless
/// [`ServerOptions`] say otherwise. Dropping the value kills the
/// process and removes the directory; if the thread is panicking, the server
/// log is printed to stderr first so a failing test shows what the server saw.
#[derive(Debug)]
#[must_use = "dropping a RedisServer kills the process"]
pub struct RedisServer {
    opts: ServerOptions,
    port: u16,
    /// The TLS port, for a server started with [`ServerOptions::tls`].
    tls_port: Option<u16>,
    pid: u32,
    child: Option<Child>,
    dir: TempDir,
}

enum LaunchFailure {
    Exited(ExitStatus),
    Foreign(u32),
    Timeout,
}

impl RedisServer {
    /// Starts a server with default [`ServerOptions`] and waits until it answers.
    ///
    /// # Panics
    ///
    /// If `redis-server` is missing or does not come up (the panic message
    /// includes the server log).
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server configured by `opts` on a free port and waits until it
    /// answers `PING`. If the process exits early, e.g. because another
    /// process took the port first, it is retried on a new port a few times.
    ///
    /// A replica is ready as soon as it answers; use
    /// [`wait_replication_link_up`](Self::wait_replication_link_up) to wait
    /// for the link to its master.
    ///
    /// # Panics
    ///
    /// If `redis-server` is missing, the temporary directory cannot be
    /// created, or the server never becomes ready (the panic message includes
    /// the server log).
    pub fn start_with(opts: ServerOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-redis-")
            .tempdir()
            .expect("cannot create a temporary directory for redis-server");
        let dir_str = dir
            .path()
            .to_str()
            .expect("temporary directory path is not valid UTF-8");
        let log_path = dir.path().join(LOG_FILE);
        let log_str = log_path.to_str().expect("log file path is not valid UTF-8");
        fs::write(
            dir.path().join(CONFIG_FILE),
            opts.config_file(dir_str, log_str),
        )
        .expect("cannot write redis.conf into the temporary directory");
        if opts.tls.is_some() {
            crate::tls::write_certificates(dir.path());
        }
        let tls_port = opts.tls.map(|_| free_port());
        let mut server = RedisServer {
            opts,
            port: free_port(),
            tls_port,
            pid: 0,
            child: None,
            dir,
        };
        server.launch(true);
        server
    }

    /// The server at `REDIS_URL` when that is set and not empty; otherwise a private server
    /// started with default [`ServerOptions`], returned beside its URL so that it lives as long
    /// as the caller keeps it. For examples and demos that users may point at their own Redis.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), when a private server is needed.
    pub fn from_env_or_start() -> (String, Option<Self>) {
        crate::from_env_or_start("REDIS_URL", Self::start, Self::url)
    }

    /// The TCP port on 127.0.0.1; it stays the same across [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`, without credentials.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TLS port, for a server started with [`ServerOptions::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:TLS_PORT/`: the server's TLS port, which presents a certificate
    /// for `127.0.0.1` signed by [`tls_ca_pem`](Self::tls_ca_pem).
    ///
    /// # Panics
    ///
    /// If the server was not started with [`ServerOptions::tls`].
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .unwrap_or_else(|| panic!("server on port {} does not speak TLS", self.port));
        format!("rediss://127.0.0.1:{port}/")
    }

    /// The PEM certificate of the CA that signed the server's and the client's certificates.
    ///
    /// # Panics
    ///
    /// If the server was not started with [`ServerOptions::tls`].
    pub fn tls_ca_pem(&self) -> Vec<u8> {
        self.tls_file(crate::tls::CA_CERT)
    }

    /// A PEM client certificate signed by the CA, for servers that ask for one.
    ///
    /// # Panics
    ///
    /// As [`tls_ca_pem`](Self::tls_ca_pem).
    pub fn tls_client_cert_pem(&self) -> Vec<u8> {
        self.tls_file(crate::tls::CLIENT_CERT)
    }

    /// The PEM private key of [`tls_client_cert_pem`](Self::tls_client_cert_pem).
    ///
    /// # Panics
    ///
    /// As [`tls_ca_pem`](Self::tls_ca_pem).
    pub fn tls_client_key_pem(&self) -> Vec<u8> {
        self.tls_file(crate::tls::CLIENT_KEY)
    }

    fn tls_file(&self, file: &str) -> Vec<u8> {
        assert!(
            self.tls_port.is_some(),
            "server on port {} does not speak TLS",
            self.port
        );
        fs::read(self.dir.path().join(file)).unwrap_or_else(|e| {
            panic!(
                "cannot read {file} of the server on port {}: {e}",
                self.port
            )
        })
    }

    /// A URL carrying credentials: `redis://:PASS@127.0.0.1:PORT/` for the
    /// default user, or `redis://USER:PASS@127.0.0.1:PORT/` for an ACL user.
    /// Both parts are percent-encoded.
    pub fn url_with_auth(&self, user: Option<&str>, password: &str) -> String {
        format!(
            "redis://{}:{}@127.0.0.1:{}/",
            percent_encode(user.unwrap_or("")),
            percent_encode(password),
            self.port
        )
    }

    /// The password of the `default` user set by [`ServerOptions::password`], if any.
    pub fn password(&self) -> Option<&str> {
        self.opts.password.as_deref()
    }

    /// Process id of the most recently launched `redis-server`; it changes on
    /// [`restart`](Self::restart).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's private directory: `redis.conf`, `redis.log`, AOF files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log so far (all runs, as restarts append to it), plus
    /// anything the process wrote to stderr before its log was open.
    /// Empty if nothing was written yet.
    pub fn log(&self) -> String {
        let mut log = read_lossy(&self.dir.path().join(LOG_FILE));
        let stderr = read_lossy(&self.dir.path().join(STDERR_FILE));
        if !stderr.trim().is_empty() {
            let _ = write!(log, "\n---- stderr ----\n{stderr}");
        }
        log
    }

    /// Freezes the process with `SIGSTOP`: connections stay open but nothing
    /// is answered, like a server stuck in a long GC pause or swapped out.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Undoes [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the process with `SIGKILL` and reaps it: no shutdown, no final
    /// fsync, as in a power cut. Does nothing if it is not running.
    ///
    /// # Panics
    ///
    /// If the process cannot be reaped within a few seconds.
    pub fn kill9(&mut self) {
        if let Some(child) = self.child.take() {
            if let Err(e) = hard_kill(child) {
                panic!("redis-server (port {}, pid {}): {e}", self.port, self.pid);
            }
        }
    }

    /// Shuts the server down with `SIGTERM` (resuming it first if paused) and
    /// reaps it, falling back to `SIGKILL` after a few seconds. Does nothing
    /// if it is not running.
    ///
    /// # Panics
    ///
    /// If the process cannot be reaped.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = pid_of(&child);
        // A stopped process would keep SIGTERM pending forever.
        let _ = signal::kill(pid, Signal::SIGCONT);
        let _ = signal::kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => thread::sleep(POLL),
                Err(_) => break,
            }
        }
        if let Err(e) = hard_kill(child) {
            panic!("redis-server (port {}, pid {}): {e}", self.port, self.pid);
        }
    }

    /// Starts the server again on the same port with the same directory and
    /// config, so an AOF written by [`ServerOptions::aof_always`] is reloaded.
    /// A still-running process is killed first, as by [`kill9`](Self::kill9).
    /// Returns once the server answers `PING`.
    ///
    /// # Panics
    ///
    /// If the server does not come back (the message includes the log).
    pub fn restart(&mut self) {
        self.kill9();
        self.launch(false);
    }

    /// Whether the process is alive (a paused process counts as alive).
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) | Err(_) => {
                self.child = None;
                false
            }
        }
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT ARGS...`, authenticated as the
    /// `default` user when a [password](ServerOptions::password) is set, and
    /// returns its trimmed stdout.
    ///
    /// Error replies are not failures: `redis-cli` prints them to stdout
    /// (e.g. `"NOAUTH Authentication required."`), so they are returned.
    ///
    /// # Panics
    ///
    /// If `redis-cli` cannot run, exits with an error (for instance when it
    /// cannot connect), or takes longer than 15 s; the message includes its
    /// stderr.
    pub fn cli(&self, args: &[&str]) -> String {
        self.cli_as(None, self.password(), args)
    }

    /// Like [`cli`](Self::cli) with explicit credentials: `user` (`None` for
    /// the default user) and `password` (`None` for no authentication).
    ///
    /// # Panics
    ///
    /// As for [`cli`](Self::cli).
    pub fn cli_as(&self, user: Option<&str>, password: Option<&str>, args: &[&str]) -> String {
        let mut cmd = Command::new(redis_cli_path());
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        // The environment keeps the password off the command line and
        // silences redis-cli's warning about `-a`.
        cmd.env_remove("REDISCLI_AUTH");
        if let Some(password) = password {
            cmd.env("REDISCLI_AUTH", password);
            if let Some(user) = user {
                cmd.args(["--user", user]);
            }
        }
        cmd.args(args);
        run_bounded(cmd, CLI_TIMEOUT)
            .unwrap_or_else(|e| panic!("redis-cli {args:?} on port {}: {e}", self.port))
    }

    /// `SCRIPT FLUSH`: empties the Lua script cache, so the next `EVALSHA`
    /// gets `NOSCRIPT`.
    ///
    /// # Panics
    ///
    /// If the server does not reply `OK`.
    pub fn script_flush(&self) {
        let reply = self.cli(&["SCRIPT", "FLUSH"]);
        assert_eq!(reply, "OK", "SCRIPT FLUSH on port {} failed", self.port);
    }

    /// `CLIENT KILL FILTER...`, e.g. `&["TYPE", "normal"]`, and returns how
    /// many connections were closed. The `redis-cli` connection issuing the
    /// command is spared (`SKIPME yes` is Redis's default).
    ///
    /// # Panics
    ///
    /// If the server replies with an error.
    pub fn client_kill(&self, filter: &[&str]) -> u64 {
        let mut args = vec!["CLIENT", "KILL"];
        args.extend_from_slice(filter);
        let reply = self.cli(&args);
        match reply.as_str() {
            // The legacy `CLIENT KILL addr:port` form.
            "OK" => 1,
            other => other.parse().unwrap_or_else(|_| {
                panic!(
                    "CLIENT KILL {filter:?} on port {} failed: {reply}",
                    self.port
                )
            }),
        }
    }

    /// Polls with `PING` every 10 ms until the server answers, for up to
    /// `timeout`. With a configured password the probe authenticates; an
    /// answer of `NOAUTH` also counts as up. A `LOADING` reply does not.
    ///
    /// # Panics
    ///
    /// If the server is not ready within `timeout`, or if the port is served
    /// by a different process than this server's (message includes the log).
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            match probe(self.port, self.password()) {
                Probe::Ready { pid: None } | Probe::NoAuth => return,
                Probe::Ready { pid: Some(pid) } if pid == self.pid => return,
                Probe::Ready { pid: Some(pid) } => panic!(
                    "port {} is served by another redis-server (pid {pid}, expected {})",
                    self.port, self.pid
                ),
                Probe::NotReady => {}
            }
            if Instant::now() >= deadline {
                panic!(
                    "redis-server on port {} not ready after {timeout:?}\n{}",
                    self.port,
                    self.log_banner()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// For a replica: polls `INFO replication` until it reports
    /// `master_link_status:up`, i.e. the initial sync is done.
    ///
    /// # Panics
    ///
    /// If the link is not up within `timeout` (message includes the log).
    pub fn wait_replication_link_up(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.cli(&["INFO", "replication"]);
            if info.lines().any(|l| l.trim() == "master_link_status:up") {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "replica on port {} has no link to its master after {timeout:?}\n\
                     INFO replication:\n{info}\n{}",
                    self.port,
                    self.log_banner()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// For a master: waits until `replicas` replicas have acknowledged everything the master
    /// wrote so far, so that `WAIT` counts them from now on. A replica whose link is up is not
    /// enough: after a diskless sync the master streams to it only from its first
    /// acknowledgement, up to a second later. A `PUBLISH` (replicated, but changing no data)
    /// gives the stream a position to acknowledge.
    ///
    /// # Panics
    ///
    /// If fewer replicas caught up after `timeout` (message includes the log).
    pub fn wait_replicas_in_sync(&self, replicas: usize, timeout: Duration) {
        self.cli(&["PUBLISH", "fencelock-testkit:sync", ""]);
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.cli(&["INFO", "replication"]);
            let written = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("master_repl_offset:"))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            let in_sync = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter_map(|l| l.split(',').find_map(|f| f.strip_prefix("offset=")))
                .filter_map(|v| v.parse::<u64>().ok())
                .filter(|&acked| acked >= written)
                .count();
            if in_sync >= replicas {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "master on port {} has {in_sync} of {replicas} replicas in sync after \
                     {timeout:?}\nINFO replication:\n{info}\n{}",
                    self.port,
                    self.log_banner()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Launches the process and waits for it. A fresh server may move to a
    /// new port when the current one turns out to be taken; a restart must
    /// keep its port, so it only waits and tries again.
    fn launch(&mut self, may_change_port: bool) {
        let mut failures = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let child = self.spawn();
            self.pid = child.id();
            self.child = Some(child);
            let failure = match self.await_own_server(READY_TIMEOUT) {
                Ok(()) => return,
                Err(failure) => failure,
            };
            // Whatever went wrong, this attempt's process must not linger.
            if let Some(child) = self.child.take() {
                let _ = hard_kill(child);
            }
            match failure {
                LaunchFailure::Exited(status) => {
                    let _ = writeln!(
                        failures,
                        "attempt {attempt}: port {}: exited early with {status}",
                        self.port
                    );
                }
                LaunchFailure::Foreign(pid) => {
                    let _ = writeln!(
                        failures,
                        "attempt {attempt}: port {} is held by another redis-server (pid {pid})",
                        self.port
                    );
                }
                LaunchFailure::Timeout => panic!(
                    "redis-server (port {}, pid {}) not ready after {READY_TIMEOUT:?}\n{}",
                    self.port,
                    self.pid,
                    self.log_banner()
                ),
            }
            if may_change_port {
                self.port = free_port();
                self.tls_port = self.tls_port.map(|_| free_port());
            } else {
                thread::sleep(Duration::from_millis(100));
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts:\n{failures}{}",
            self.log_banner()
        );
    }

    fn spawn(&self) -> Child {
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(STDERR_FILE))
            .expect("cannot open stderr.log in the server directory");
        let program = self.opts.program.clone().unwrap_or_else(redis_server_path);
        Command::new(&program)
            .arg(self.dir.path().join(CONFIG_FILE))
            .args(["--port", &self.port.to_string()])
            .args(
                self.tls_port
                    .iter()
                    .flat_map(|port| ["--tls-port".to_owned(), port.to_string()]),
            )
            .args(&self.opts.extra_args)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", program.display()))
    }

    /// Waits until our own child answers on the port. The `process_id`
    /// check matters because `free_port` is racy: another test's server may
    /// own the port while ours is about to fail with "Address already in use".
    fn await_own_server(&mut self, timeout: Duration) -> Result<(), LaunchFailure> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait_child() {
                return Err(LaunchFailure::Exited(status));
            }
            match probe(self.port, self.password()) {
                Probe::Ready { pid: Some(pid) } if pid == self.pid => return Ok(()),
                Probe::Ready { pid: Some(pid) } => return Err(LaunchFailure::Foreign(pid)),
                // Identity unknown (credentials overridden by raw args): a child
                // that lost the port race exits within milliseconds, so one that
                // is still alive a little later is the one answering.
                Probe::Ready { pid: None } | Probe::NoAuth => {
                    thread::sleep(Duration::from_millis(100));
                    return match self.try_wait_child() {
                        Some(status) => Err(LaunchFailure::Exited(status)),
                        None => Ok(()),
                    };
                }
                Probe::NotReady => {}
            }
            if Instant::now() >= deadline {
                return Err(LaunchFailure::Timeout);
            }
            thread::sleep(POLL);
        }
    }

    fn try_wait_child(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        child
            .try_wait()
            .expect("cannot query the redis-server child process")
    }

    fn signal(&self, sig: Signal) {
        let child = self.child.as_ref().unwrap_or_else(|| {
            panic!(
                "cannot send {sig:?}: redis-server on port {} is not running",
                self.port
            )
        });
        signal::kill(pid_of(child), sig).unwrap_or_else(|e| {
            panic!(
                "cannot send {sig:?} to redis-server (port {}, pid {}): {e}",
                self.port, self.pid
            )
        });
    }

    fn log_banner(&self) -> String {
        format!(
            "---- redis-server log (port {}) ----\n{}",
            self.port,
            self.log()
        )
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.log_banner());
        }
        // No panics here: a panic while already unwinding would abort the test binary.
        if let Some(child) = self.child.take() {
            let _ = hard_kill(child);
        }
    }
}

pub(crate) fn pid_of(child: &Child) -> Pid {
    // Linux pids fit in i32; a failure here would mean a corrupt pid.
    Pid::from_raw(i32::try_from(child.id()).expect("process id does not fit in pid_t"))
}

/// `SIGKILL` and reap within a bounded time, so no zombie is left behind.
pub(crate) fn hard_kill(mut child: Child) -> Result<(), String> {
    // An error only means it already exited; reaping below still applies.
    let _ = child.kill();
    let deadline = Instant::now() + REAP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            Ok(None) => return Err(format!("process survived SIGKILL for {REAP_TIMEOUT:?}")),
            Err(e) => return Err(format!("cannot reap process: {e}")),
        }
    }
}

/// Runs `cmd` with piped output, killing it if it outlives `timeout`.
/// Output is drained on threads so a chatty child cannot block on a full pipe.
pub(crate) fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot spawn: {e}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = hard_kill(child);
                return Err(format!(
                    "timed out after {timeout:?} (is the server paused?); stderr: {}",
                    stderr.join().unwrap_or_default().trim()
                ));
            }
            Err(e) => return Err(format!("cannot wait: {e}")),
        }
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    if status.success() {
        Ok(out.trim().to_owned())
    } else {
        Err(format!("{status}; stderr: {}", err.trim()))
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

pub(crate) fn read_lossy(path: &Path) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Percent-encodes everything but RFC 3986 unreserved characters, which is
/// safe for the userinfo part of a URL.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::percent_encode;

    #[test]
    fn percent_encoding_keeps_unreserved() {
        assert_eq!(percent_encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(percent_encode("p@ss:w/rd"), "p%40ss%3Aw%2Frd");
    }
}
