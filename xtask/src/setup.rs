//! Installs what the tests and the demo need, from Debian's packages.

use std::path::Path;
use std::process::Command;

/// Redis for every test; PostgreSQL for the fenced-write example and its test.
const PACKAGES: [&str; 3] = ["redis-server", "redis-tools", "postgresql"];

/// Makes sure `redis-server` and `redis-cli` are on the PATH and PostgreSQL's server binaries
/// are where the test kit looks, installing them with apt-get when they are not. Uses `sudo`
/// when not running as root.
pub(crate) fn ensure_servers() -> Result<(), String> {
    if servers_present() {
        return Ok(());
    }
    if !on_path("apt-get") {
        return Err(
            "redis-server or PostgreSQL is missing and there is no apt-get here: install \
             Redis 7 (redis-server and redis-cli) on the PATH, and PostgreSQL (initdb, \
             postgres, pg_isready) on the PATH or in RELOCK_POSTGRES_BIN"
                .to_owned(),
        );
    }
    eprintln!(
        "xtask: installing {} from Debian's packages",
        PACKAGES.join(" ")
    );
    let sudo = !is_root();
    run_apt(sudo, &["update", "-q"])?;
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(PACKAGES);
    run_apt(sudo, &install)?;
    if servers_present() {
        Ok(())
    } else {
        Err("apt-get finished but redis-server or PostgreSQL is still missing".to_owned())
    }
}

fn servers_present() -> bool {
    on_path("redis-server") && on_path("redis-cli") && relock_testkit::postgres_bin_dir().is_some()
}

fn run_apt(sudo: bool, args: &[&str]) -> Result<(), String> {
    let mut command = if sudo {
        let mut c = Command::new("sudo");
        c.arg("apt-get");
        c
    } else {
        Command::new("apt-get")
    };
    let status = command
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`apt-get {}` failed ({status})", args.join(" ")))
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(program)))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}
