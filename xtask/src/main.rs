//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: installs Debian's `redis-server` and `redis-tools` when they are missing;
//! - `test`: set-up, then formatting, lints, docs and every test of the workspace;
//! - `demo`: set-up, then the lottery: five worker processes race to draw at noon.

mod demo;
mod setup;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::ensure_redis(),
        Some("test") => setup::ensure_redis().and_then(|()| test(&args[1..])),
        Some("demo") => setup::ensure_redis().and_then(|()| demo::run()),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <setup | test | demo>

  setup   install redis-server and redis-tools (Debian packages) if missing
  test    setup, then cargo fmt --check, clippy -D warnings, docs, and every test
          (extra arguments are passed to `cargo test`)
  demo    setup, then the lottery demo (uses REDIS_URL if set, else a private redis-server)";

/// The whole suite: the checks a change must pass, cheapest first.
fn test(extra: &[String]) -> Result<(), String> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps", "--quiet"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args, &[])
}

pub(crate) fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(envs.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
