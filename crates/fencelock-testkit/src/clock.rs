//! A server clock the test controls: `redis-server` run under libfaketime (Debian's `faketime`
//! package), which reads the clock's offset from a file the test rewrites. Only the wall clock
//! is faked (`CLOCK_REALTIME`, what `TIME` answers and key expiry follows), as an NTP step or a
//! drifting oscillator would; the monotonic clock that drives the server's timers stays true.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Where Debian's `libfaketime` package installs the library (the thread-safe variant).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
/// Names the library instead of [`LIBFAKETIME`].
const LIBFAKETIME_VAR: &str = "FENCELOCK_LIBFAKETIME";
/// Names the server binary run under libfaketime.
const SERVER_VAR: &str = "FENCELOCK_FAKETIME_SERVER";
const OFFSET_FILE: &str = "faketime";

/// The offset of a server's wall clock from the true one, in a file that the server's
/// libfaketime reads on every clock call, so that [`set_offset`](Self::set_offset) steps it at
/// once. Give it to a server with [`ServerOptions::faked_clock`](crate::ServerOptions::faked_clock).
///
/// Debian's Redis 7.0 links jemalloc, which reads the clock before libfaketime is initialised
/// and hangs at start; a faked clock therefore runs the Redis 6.2 that `cargo xtask setup`
/// fetches into `target/servers/redis-6.2/` (or the binary `FENCELOCK_FAKETIME_SERVER` names).
#[derive(Debug)]
pub struct FakedClock {
    dir: TempDir,
    rate: f64,
    library: PathBuf,
    server: PathBuf,
}

impl FakedClock {
    /// A clock that starts true and runs at the true rate.
    ///
    /// # Panics
    ///
    /// As [`with_rate`](Self::with_rate).
    pub fn new() -> Self {
        Self::with_rate(1.0)
    }

    /// A clock that starts true when the server starts and then runs `rate` times as fast as
    /// the true one (2.0: two seconds per second): a drifting clock. libfaketime applies the
    /// rate to the time since the process started, so it is set once, before the server
    /// starts; steps with [`set_offset`](Self::set_offset) keep it.
    ///
    /// # Panics
    ///
    /// When libfaketime or a server that runs under it is missing (install Debian's `faketime`
    /// and run `cargo xtask setup`), or the offset file cannot be written.
    pub fn with_rate(rate: f64) -> Self {
        let (library, server) = locate().unwrap_or_else(|why| panic!("{why}"));
        let dir = tempfile::Builder::new()
            .prefix("fencelock-clock-")
            .tempdir()
            .expect("cannot create a temporary directory for the faked clock");
        let clock = FakedClock {
            dir,
            rate,
            library,
            server,
        };
        clock.set_offset(0.0);
        clock
    }

    /// Whether a faked clock can run here: libfaketime and a server that runs under it are
    /// both present.
    pub fn available() -> bool {
        locate().is_ok()
    }

    /// Steps the server's wall clock to `seconds` from the true one (negative: behind it).
    ///
    /// # Panics
    ///
    /// When the offset file cannot be written.
    pub fn set_offset(&self, seconds: f64) {
        let text = format!("{seconds:+.3} x{}\n", self.rate);
        // Written beside, then renamed: the server never reads half a line.
        let staged = self.dir.path().join("faketime.new");
        fs::write(&staged, text).expect("cannot write the faked clock's offset");
        fs::rename(&staged, self.offset_file()).expect("cannot install the faked clock's offset");
    }

    /// The environment that makes a server follow this clock.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", path_string(&self.library)),
            ("FAKETIME_TIMESTAMP_FILE", path_string(&self.offset_file())),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The server binary that runs under this clock.
    pub(crate) fn server(&self) -> &Path {
        &self.server
    }

    fn offset_file(&self) -> PathBuf {
        self.dir.path().join(OFFSET_FILE)
    }
}

impl Default for FakedClock {
    fn default() -> Self {
        Self::new()
    }
}

fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The library and the server binary, or why one is missing.
fn locate() -> Result<(PathBuf, PathBuf), String> {
    let library =
        std::env::var_os(LIBFAKETIME_VAR).map_or_else(|| PathBuf::from(LIBFAKETIME), PathBuf::from);
    if !library.is_file() {
        return Err(format!(
            "libfaketime is not at {} (install Debian's `faketime`, or set {LIBFAKETIME_VAR})",
            library.display()
        ));
    }
    let server = faked_clock_server();
    if !server.is_file() {
        return Err(format!(
            "no server to run under libfaketime at {} (run `cargo xtask setup`, or set \
             {SERVER_VAR})",
            server.display()
        ));
    }
    Ok((library, server))
}

/// `FENCELOCK_FAKETIME_SERVER`, else the Redis 6.2 in the workspace's `target/servers/`.
fn faked_clock_server() -> PathBuf {
    if let Some(server) = std::env::var_os(SERVER_VAR) {
        return PathBuf::from(server);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("servers/redis-6.2/redis-server")
}
