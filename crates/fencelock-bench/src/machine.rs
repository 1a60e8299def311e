//! Where and when a run took place: what every results file carries, so that a figure can be
//! traced to its machine, its Redis and its commit.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use fencelock_sources::Stamp;
use serde::Serialize;

/// The circumstances of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    /// UTC date and time the run started, RFC 3339.
    pub date: String,
    /// Logical CPUs available to the bench.
    pub cores: usize,
    /// The CPU model from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The server measured against, as its `--version` names it: `Redis 7.0.15`,
    /// `Valkey 8.1.8`.
    pub server: String,
    /// `git rev-parse HEAD` of the tree the bench was built from, or `unknown`.
    pub git_commit: String,
    /// The sources the bench measures (the lock path) and their digest as the bench was built:
    /// what the figures check compares with today's tree, a commit not being enough when the
    /// tree was dirty or has moved on since.
    pub sources: Stamp,
    /// The command line of the run, the program named without its folder.
    pub command: String,
}

impl RunInfo {
    /// Describes this machine now, with the given server.
    pub fn collect(server: String) -> RunInfo {
        RunInfo {
            date: utc_now(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(),
            server,
            git_commit: git_commit(),
            sources: measured(),
            command: command_line(std::env::args()),
        }
    }
}

/// The sources this build of the bench measures, as its build script hashed them.
pub fn measured() -> Stamp {
    Stamp::new(env!("FENCELOCK_SOURCES_DIGEST"), fencelock_sources::BENCH)
}

fn command_line(mut args: impl Iterator<Item = String>) -> String {
    let program = args.next().unwrap_or_default();
    let program = std::path::Path::new(&program)
        .file_name()
        .map_or_else(|| "fencelock-bench".into(), |name| name.to_string_lossy());
    std::iter::once(program.into_owned())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|r| r.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_415), (2025, 11, 23));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn the_command_names_the_program_without_its_folder() {
        let args = [
            "target/release/fencelock-bench",
            "--out",
            "bench/results",
            "election",
        ];
        let line = command_line(args.iter().map(|a| (*a).to_owned()));
        assert_eq!(line, "fencelock-bench --out bench/results election");
    }
}
