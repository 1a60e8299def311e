//! Replays every committed seed and crash input (`fuzz/seeds/TARGET/*`) through its target,
//! then inputs proptest makes in each target's format, on the stable toolchain: what
//! `cargo fuzz` found stays fixed where the fuzzer cannot run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use fencelock_fuzz::TARGETS;
use proptest::prelude::*;

fn seed_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds")
}

/// The files under `fuzz/seeds/<target>/`, in name order.
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = seed_root().join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_passes_its_target() {
    for (target, body) in TARGETS {
        let files = seeds(target);
        assert!(!files.is_empty(), "no seeds for {target}");
        for file in files {
            let input = std::fs::read(&file).expect("a seed");
            if catch_unwind(AssertUnwindSafe(|| body(&input))).is_err() {
                panic!("{target} fails on {}", file.display());
            }
        }
    }
}

#[test]
fn every_seed_folder_is_a_target() {
    for entry in std::fs::read_dir(seed_root()).expect("fuzz/seeds") {
        let name = entry.expect("a directory entry").file_name();
        assert!(
            TARGETS.iter().any(|(target, _)| name == *target),
            "fuzz/seeds/{name:?} has no target"
        );
    }
}

/// Arguments `fencelock` knows, and values for them, to build command lines from.
const WORDS: &[&str] = &[
    "run",
    "status",
    "unlock",
    "elect",
    "leader",
    "--value",
    "--once",
    "--watch",
    "--",
    "--redis",
    "--redlock",
    "--cluster",
    "--sentinel",
    "--service",
    "--prefix",
    "--semaphore",
    "--permits",
    "--read",
    "--write",
    "--fair",
    "--lease",
    "--wait",
    "--no-wait",
    "--kill-grace",
    "--json",
    "--force",
    "--help",
    "job",
    "true",
    "0",
    "1",
    "3",
    "30s",
    "1m30s",
    "0s",
    "3651d",
    "redis://a:1,redis://b:2",
    "redis://u:p@h",
    "{x}",
    "*",
    "",
];

fn command_line() -> impl Strategy<Value = Vec<u8>> {
    let word = prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(|w| w.as_bytes().to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..12),
    ];
    proptest::collection::vec(word, 0..10).prop_map(|words| words.join(&0))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_pass_every_target(input in proptest::collection::vec(any::<u8>(), 0..256)) {
        for (_, body) in TARGETS {
            body(&input);
        }
    }

    #[test]
    fn durations(text in "([0-9]{0,21}(ms|s|m|h|d|x|)){1,4}") {
        fencelock_fuzz::duration(text.as_bytes());
    }

    #[test]
    fn command_lines(line in command_line()) {
        fencelock_fuzz::cli_args(&line);
    }

    #[test]
    fn connection_urls(
        text in "(single|redlock|cluster|sentinel s)(\n(redis|rediss|redis\\+unix|valkey|http)://\
                 ([a-z]{1,3}(:[a-z%0-9]{0,4})?@)?[a-z0-9.:\\[\\]]{0,12}(/[0-9a-z]{0,3})?\
                 (\\?(db|protocol)=[0-9a-z]{0,5})?(#insecure)?){0,3}"
    ) {
        fencelock_fuzz::connection_url(text.as_bytes());
    }

    #[test]
    fn lock_names(
        prefix in "[a-z:{}*]{0,6}",
        suffix in "(mutex|fence|sem|[a-z{}]{0,4})",
        name in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'{'), Just(b'}'), Just(b'%')], 0..40),
    ) {
        let input = [prefix.as_bytes(), b"\n", suffix.as_bytes(), b"\n", &name].concat();
        fencelock_fuzz::lock_name(&input);
    }

    #[test]
    fn client_options(
        lines in proptest::collection::vec(
            "(prefix|holder_label|default_lease (fixed|renewed)|wake_fallback|response_timeout|\
             connection_timeout|node_timeout|fence_memory|renew_batch|clock_drift -?0\\.[0-9]{1,2}|\
             wait_for_replicas [0-2]|lease (fixed|renewed)|permits) ([0-9]{1,9}(\\.[0-9]{1,9})?|max|[a-z:{]{0,3})",
            0..6,
        )
    ) {
        fencelock_fuzz::options(lines.join("\n").as_bytes());
    }
}
