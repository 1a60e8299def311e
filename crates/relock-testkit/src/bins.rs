//! Locating the Redis binaries.

use std::env;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SETUP_HINT: &str =
    "Run `cargo xtask setup` (installs Debian's redis-server and redis-tools) \
                          or `cargo xtask test`, which does it for you.";

/// Path of the `redis-server` binary used by [`RedisServer`](crate::RedisServer).
///
/// The environment variable `RELOCK_REDIS_SERVER` wins if set; otherwise
/// `redis-server` is looked up on `PATH`. The result is cached for the life
/// of the process.
///
/// # Panics
///
/// If the binary cannot be found, with a message explaining how to install it.
pub fn redis_server_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| locate("redis-server", "RELOCK_REDIS_SERVER"))
        .clone()
}

/// Path of the `redis-cli` binary used by [`RedisServer::cli`](crate::RedisServer::cli).
///
/// The environment variable `RELOCK_REDIS_CLI` wins if set; otherwise
/// `redis-cli` is looked up on `PATH`. The result is cached for the life of
/// the process.
///
/// # Panics
///
/// If the binary cannot be found, with a message explaining how to install it.
pub fn redis_cli_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| locate("redis-cli", "RELOCK_REDIS_CLI"))
        .clone()
}

fn locate(name: &str, env_var: &str) -> PathBuf {
    if let Some(explicit) = env::var_os(env_var).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(explicit);
        if is_executable(&path) {
            return path;
        }
        panic!(
            "{env_var} is set to {}, which is not an executable file. {SETUP_HINT}",
            path.display()
        );
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .unwrap_or_else(|| panic!("{name} not found on PATH. {SETUP_HINT}"))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
