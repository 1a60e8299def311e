//! Defects planted in a scratch repository, one per class the figures check must catch: a
//! figure called the latest from a run of code that has changed since, a count of commands
//! passed off as a setting, and an upper bound rounded down. Each is reported, and its fix
//! passes.

use std::path::Path;

use super::{check_doc, Report, Sources};

/// The lock path of the scratch repository.
const LOCK_PATH: &[&str] = &["crates/fencelock/src"];

/// A scratch repository whose lock path is `lib.rs` with `source` in it.
fn repository(source: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a scratch directory");
    for folder in ["crates/fencelock/src", "results", "tests"] {
        std::fs::create_dir_all(dir.path().join(folder)).expect("a folder");
    }
    write(dir.path(), "crates/fencelock/src/lib.rs", source);
    dir
}

fn write(root: &Path, file: &str, text: &str) {
    std::fs::write(root.join(file), text).expect("a scratch file");
}

/// A result file with `results`, stamped with the digest of the lock path as it is now.
fn measured(root: &Path, file: &str, results: &str) {
    let digest = fencelock_sources::digest(root, LOCK_PATH).expect("a digest");
    let json = format!(
        r#"{{"run": {{"command": "fencelock-bench", "git_commit": "0000000",
                    "sources": {{"digest": "{digest}", "paths": ["crates/fencelock/src"]}}}},
            "results": {results}}}"#
    );
    write(root, file, &json);
}

/// What the check reports of `doc` (as `docs/guide.md`) in `root`.
fn problems(root: &Path, doc: &str) -> Vec<String> {
    let mut sources = Sources::new(root);
    let mut report = Report::default();
    check_doc("docs/guide.md", doc, &mut sources, &mut report);
    report.problems.iter().map(ToString::to_string).collect()
}

#[test]
fn a_figure_called_the_latest_from_a_run_of_changed_code_fails() {
    let dir = repository("// the release, then the waiter's acquire\n");
    let root = dir.path();
    measured(root, "results/handoff.json", r#"{"ratio": 0.8079}"#);
    // The lock path changes after the run: the release now grants the lock itself.
    write(
        root,
        "crates/fencelock/src/lib.rs",
        "// the release grants the lock\n",
    );
    let stale = "The latest run reaches 0.81<!-- figure results/handoff.json: results.ratio --> \
                 of the limit.";
    let found = problems(root, stale);
    assert!(
        found
            .iter()
            .any(|p| p.contains("\"0.81\" from results/handoff.json")
                && p.contains("crates/fencelock/src changed since it was measured")),
        "the stale figure is not reported: {found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("says \"latest\" of results/handoff.json")),
        "the word \"latest\" is not reported: {found:?}"
    );
    // Quoted as a figure of an earlier path, and not called the latest, it passes.
    let earlier = "On the previous lock path, a run reached 0.81<!-- figure earlier \
                   results/handoff.json: results.ratio --> of the limit.";
    assert_eq!(problems(root, earlier), Vec::<String>::new());
    // A run of today's code is the latest, and is no earlier path.
    measured(root, "results/handoff.json", r#"{"ratio": 0.8079}"#);
    assert_eq!(problems(root, stale), Vec::<String>::new());
    assert_eq!(problems(root, earlier).len(), 1, "{earlier}");
}

#[test]
fn a_count_of_commands_marked_as_a_setting_fails() {
    let dir = repository("// the scripts\n");
    let root = dir.path();
    let typed = "A handoff is 8 commands<!-- setting: counted from the scripts -->.";
    let found = problems(root, typed);
    assert!(
        found
            .iter()
            .any(|p| p.contains("8 commands is a count of work, not a setting")),
        "the typed count is not reported: {found:?}"
    );
    let after = "A handoff is 8<!-- setting --> round trips.";
    assert_eq!(problems(root, after).len(), 1, "{after}");
    // A test that reads the doc asserts it instead.
    write(
        root,
        "tests/handoff.rs",
        "// counts the commands guide.md quotes\n",
    );
    let asserted = "A handoff is 8 commands<!-- figure asserted by tests/handoff.rs -->.";
    assert_eq!(problems(root, asserted), Vec::<String>::new());
    // Settings of a workload are still settings.
    let workload = "10 retries<!-- setting --> 200 ms<!-- setting --> apart, 4<!-- setting --> \
                    workers.";
    assert_eq!(problems(root, workload), Vec::<String>::new());
}

#[test]
fn an_upper_bound_rounded_down_fails() {
    let dir = repository("// the takeover\n");
    let root = dir.path();
    measured(root, "results/takeover.json", r#"{"wait_ms": 13.6}"#);
    let inward =
        "A paused holder's standby waits at most 0.01 s<!-- figure results/takeover.json: \
                  results.wait_ms / 1000 --> beyond the lease.";
    let found = problems(root, inward);
    assert!(
        found.iter().any(|p| p.contains("at most 0.01")
            && p.contains("gives 0.0136")
            && p.contains("0.02 to the doc's precision")),
        "the bound rounded down is not reported: {found:?}"
    );
    let outward = inward.replace("0.01 s", "0.02 s");
    assert_eq!(problems(root, &outward), Vec::<String>::new());
}
