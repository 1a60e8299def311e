//! Locating the server binaries, and what the chosen server is.
//!
//! The server under test is chosen by the environment: `FENCELOCK_SERVER_DIR` names a directory
//! holding `redis-server` or `valkey-server`, and usually its cli (`cargo xtask setup` fills
//! `target/servers/` with Redis 6.2, Valkey 8.1, Valkey 9.1 and Redis 8.2; the last two ship no
//! cli, and the `redis-cli` on `PATH` speaks to them); `FENCELOCK_REDIS_SERVER` and
//! `FENCELOCK_REDIS_CLI` name one binary each and win over the directory; without any of them,
//! `redis-server` and `redis-cli` are looked up on `PATH`. Sentinels run the same server binary
//! with `--sentinel`, and cluster set-up uses the same cli.

use std::env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const SETUP_HINT: &str =
    "Run `cargo xtask setup` (installs Debian's redis-server and redis-tools) \
                          or `cargo xtask test`, which does it for you.";

/// The directory of the server under test, if one is chosen.
const SERVER_DIR: &str = "FENCELOCK_SERVER_DIR";

/// Path of the server binary used by [`RedisServer`](crate::RedisServer).
///
/// `FENCELOCK_REDIS_SERVER` wins if set; then `redis-server` or `valkey-server` in
/// `FENCELOCK_SERVER_DIR`; otherwise `redis-server` is looked up on `PATH`. The result is cached
/// for the life of the process.
///
/// # Panics
///
/// If the binary cannot be found, with a message explaining how to install it.
pub fn redis_server_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| locate("server", "FENCELOCK_REDIS_SERVER"))
        .clone()
}

/// Path of the cli used by [`RedisServer::cli`](crate::RedisServer::cli).
///
/// `FENCELOCK_REDIS_CLI` wins if set; then `redis-cli` or `valkey-cli` in `FENCELOCK_SERVER_DIR`;
/// otherwise (or when that directory holds no cli) `redis-cli` is looked up on `PATH`. The result is cached for the life of the
/// process.
///
/// # Panics
///
/// If the binary cannot be found, with a message explaining how to install it.
pub fn redis_cli_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| locate("cli", "FENCELOCK_REDIS_CLI"))
        .clone()
}

/// What the server under test says it is, from `--version`: `Redis 7.0.15`, `Valkey 8.1.8`.
///
/// # Panics
///
/// If the binary cannot be found or run, or does not print a version.
pub fn server_version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| version_of(&redis_server_path()).unwrap_or_else(|e| panic!("{e}")))
}

/// What the server binary at `path` says it is, from `--version`: `Redis 7.0.15`.
///
/// # Errors
///
/// When the binary cannot be run or prints no version.
pub fn version_of(path: &Path) -> Result<String, String> {
    let out = Command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {} --version: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    describe(&text)
        .ok_or_else(|| format!("{} --version printed no version: {text:?}", path.display()))
}

/// Whether the server under test has sharded pub/sub (`SSUBSCRIBE`): Redis 7.0 or newer, and
/// every Valkey.
///
/// # Panics
///
/// As [`server_version`].
pub fn server_has_sharded_pubsub() -> bool {
    server_version().starts_with("Valkey") || server_release() >= (7, 0)
}

/// The major and minor version of the server under test: `(6, 2)` for `Redis 6.2.14`.
///
/// # Panics
///
/// As [`server_version`].
pub fn server_release() -> (u32, u32) {
    let mut numbers = server_version()
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
}

/// `Redis 6.2.14` from `Redis server v=6.2.14 sha=…`, `Valkey 8.1.8` from
/// `Valkey server v=8.1.8 sha=…`.
fn describe(version_output: &str) -> Option<String> {
    let mut words = version_output.split_whitespace();
    let product = words.next()?;
    let version = words.find_map(|w| w.strip_prefix("v="))?;
    Some(format!("{product} {version}"))
}

/// The binary `<redis|valkey>-<role>`: from `env_var`, from the server directory, or on `PATH`.
/// A server directory without a cli leaves the cli to `PATH`: every server of the suite speaks
/// the protocol Debian's `redis-cli` speaks.
fn locate(role: &str, env_var: &str) -> PathBuf {
    if let Some(explicit) = env::var_os(env_var).filter(|v| !v.is_empty()) {
        return executable(PathBuf::from(explicit), env_var);
    }
    if let Some(dir) = env::var_os(SERVER_DIR).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        let found = ["redis", "valkey"]
            .iter()
            .map(|product| dir.join(format!("{product}-{role}")))
            .find(|candidate| is_executable(candidate));
        match found {
            Some(binary) => return binary,
            None if role == "cli" => {}
            None => panic!(
                "{SERVER_DIR} is set to {}, which holds neither redis-{role} nor \
                 valkey-{role}. {SETUP_HINT}",
                dir.display()
            ),
        }
    }
    let name = format!("redis-{role}");
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join(&name))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| panic!("{name} not found on PATH. {SETUP_HINT}"))
}

fn executable(path: PathBuf, env_var: &str) -> PathBuf {
    if is_executable(&path) {
        return path;
    }
    panic!(
        "{env_var} is set to {}, which is not an executable file. {SETUP_HINT}",
        path.display()
    );
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_either_server() {
        assert_eq!(
            describe("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"),
            Some("Redis 7.0.15".to_owned())
        );
        assert_eq!(
            describe("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64"),
            Some("Valkey 8.1.8".to_owned())
        );
        assert_eq!(describe("garbage"), None);
    }
}
