//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: installs Debian's `redis-server`, `redis-tools` and `postgresql` when they are
//!   missing;
//! - `test`: set-up, then formatting, lints, docs and every test of the workspace, lints and
//!   tests of relock's optional features included, and the published crates packaged and
//!   verified;
//! - `demo`: set-up, then the lottery: five worker processes race to draw at noon;
//! - `package`: set-up, then the last step of `test` alone: the published crates packaged.

mod demo;
mod package;
mod setup;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::ensure_servers(),
        Some("test") => setup::ensure_servers().and_then(|()| test(&args[1..])),
        Some("demo") => setup::ensure_servers().and_then(|()| demo::run()),
        Some("package") => setup::ensure_servers().and_then(|()| package::check()),
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

const USAGE: &str = "usage: cargo xtask <setup | test | demo | package>

  setup   install redis-server, redis-tools and postgresql (Debian packages) if missing
  test    setup, then cargo fmt --check, clippy -D warnings (also with relock's features,
          and without its default ones), docs, every test (extra arguments are passed to
          `cargo test --workspace`), and `cargo package` of each published crate
  demo    setup, then the lottery demo (uses REDIS_URL if set, else a private redis-server)
  package setup, then relock without default features, and `cargo package` of relock-testkit,
          relock and relock-cli, relock's docs and doctests built from its .crate";

/// The whole suite: the checks a change must pass, cheapest first.
///
/// relock's optional features (`tracing`, `metrics`) compile to nothing when off, so the
/// workspace is linted both ways, but only relock itself with them on, and only their own
/// test runs with them: everything else behaves the same either way.
fn test(extra: &[String]) -> Result<(), String> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    clippy(&["--workspace"])?;
    clippy(&["-p", "relock", "--all-features"])?;
    cargo(
        &[
            "doc",
            "--workspace",
            "--all-features",
            "--no-deps",
            "--quiet",
        ],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    cargo(
        &[
            "test",
            "-p",
            "relock",
            "--all-features",
            "--test",
            "observability",
        ],
        &[],
    )?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args, &[])?;
    package::check()
}

/// Lints every target of the `selection` of packages, warnings denied.
fn clippy(selection: &[&str]) -> Result<(), String> {
    let mut args = vec!["clippy"];
    args.extend(selection);
    args.extend(["--all-targets", "--quiet", "--", "-D", "warnings"]);
    cargo(&args, &[])
}

/// The `cargo` that runs this task (`CARGO`), or the one on the path.
pub(crate) fn cargo_command() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

pub(crate) fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = cargo_command()
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
