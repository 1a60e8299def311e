//! The lottery: five worker processes race to draw the winners at "noon"; exactly one may.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock_testkit::RedisServer;

const WORKERS: usize = 5;

pub(crate) fn run() -> Result<(), String> {
    crate::cargo(
        &[
            "build",
            "--quiet",
            "--release",
            "-p",
            "fencelock",
            "--example",
            "lottery",
        ],
        &[],
    )?;
    // A private server unless the user points us at one; it stops when `server` drops.
    let (url, server) = RedisServer::from_env_or_start();
    match &server {
        Some(server) => println!(
            "demo: started a private redis-server on 127.0.0.1:{}",
            server.port()
        ),
        None => println!("demo: using REDIS_URL={url}"),
    }
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    // "Noon" is 1.5 s from now: time enough for every worker to start and connect.
    let noon = epoch_ms + 1500;
    let draw = format!("draw-{epoch_ms}");
    println!("demo: {WORKERS} workers race for lottery {draw:?} at noon (t+1.5s)\n");

    let binary = target_directory(crate::cargo_command())?.join("release/examples/lottery");
    let mut children = Vec::new();
    for worker in 1..=WORKERS {
        let child = Command::new(&binary)
            .args([worker.to_string(), noon.to_string(), draw.clone()])
            .env("REDIS_URL", &url)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        children.push(child);
    }
    let mut drew = 0;
    let mut failed = 0;
    for child in children {
        let (lines, ok) = collect(child)?;
        for line in &lines {
            println!("{line}");
        }
        drew += lines
            .iter()
            .filter(|l| l.contains("DREW THE WINNERS"))
            .count();
        failed += usize::from(!ok);
    }
    println!();
    if drew == 1 && failed == 0 {
        println!("verdict: PASS - exactly one of {WORKERS} workers drew the winners");
        Ok(())
    } else {
        println!("verdict: FAIL - {drew} of {WORKERS} workers drew the winners, {failed} failed");
        Err("the lottery demo failed".to_owned())
    }
}

/// Where `cargo` (as set up by the caller) puts the workspace's build output: asked of
/// `cargo metadata`, which honours `CARGO_TARGET_DIR` and the configured `build.target-dir`,
/// and finds the workspace from any directory inside it.
fn target_directory(mut cargo: Command) -> Result<PathBuf, String> {
    let output = cargo
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("`cargo metadata` failed ({})", output.status));
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cannot read cargo metadata: {e}"))?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata names no target directory".to_owned())
}

fn collect(mut child: Child) -> Result<(Vec<String>, bool), String> {
    let stdout = child.stdout.take().ok_or("worker has no stdout")?;
    let lines: Vec<String> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => return Ok((lines, status.success())),
            None if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok((lines, false));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directory of this crate's sources: a subdirectory of the checkout.
    const SUBDIRECTORY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

    #[test]
    fn the_target_directory_is_found_from_a_subdirectory() {
        let mut cargo = crate::cargo_command();
        cargo
            .current_dir(SUBDIRECTORY)
            .env_remove("CARGO_TARGET_DIR");
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace");
        assert_eq!(
            target_directory(cargo).expect("metadata"),
            workspace.join("target")
        );
    }

    #[test]
    fn the_target_directory_follows_cargo_target_dir() {
        let elsewhere = std::env::temp_dir().join("fencelock-xtask-target");
        let mut cargo = crate::cargo_command();
        cargo
            .current_dir(SUBDIRECTORY)
            .env("CARGO_TARGET_DIR", &elsewhere);
        assert_eq!(target_directory(cargo).expect("metadata"), elsewhere);
    }
}
