//! One table of exit codes: [`fencelock_cli::exit::TABLE`] has a row for every constant of the
//! `exit` module and no other, `fencelock --help` and this crate's README show exactly its rows,
//! and the repository's README, which links to this crate's, keeps no copy of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use fencelock_cli::exit::TABLE;

/// The heading row of the exit-code table in a README.
const HEADING: &str = "| exit code | meaning |";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path:?}: {e}"))
}

/// The rows of the one exit-code table in a Markdown file, as (code, meaning).
fn markdown_rows(path: &Path) -> Vec<(String, String)> {
    let text = read(path);
    let tables = text.lines().filter(|line| line.trim() == HEADING).count();
    assert_eq!(tables, 1, "{path:?} has {tables} exit-code tables, not one");
    text.lines()
        .skip_while(|line| line.trim() != HEADING)
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let inner = line
                .trim()
                .strip_prefix("| ")
                .and_then(|l| l.strip_suffix(" |"))
                .unwrap_or_else(|| panic!("{path:?}: not a table row: {line}"));
            let (code, meaning) = inner
                .split_once(" | ")
                .unwrap_or_else(|| panic!("{path:?}: not two cells: {line}"));
            (code.to_owned(), meaning.to_owned())
        })
        .collect()
}

fn table() -> Vec<(String, String)> {
    TABLE
        .iter()
        .map(|(code, meaning)| ((*code).to_owned(), (*meaning).to_owned()))
        .collect()
}

#[test]
fn the_table_has_a_row_for_every_exit_constant_and_no_other() {
    let source = read(&crate_dir().join("src/exit.rs"));
    let constants: BTreeSet<String> = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub const "))
        .filter_map(|rest| rest.split_once(": u8 = "))
        .map(|(_, value)| value.trim_end_matches(';').to_owned())
        .collect();
    assert!(constants.len() >= 10, "{constants:?}");
    let numbered: BTreeSet<String> = TABLE
        .iter()
        .map(|(code, _)| (*code).to_owned())
        .filter(|code| code.parse::<u8>().is_ok())
        .collect();
    assert_eq!(
        numbered, constants,
        "exit::TABLE's numbered rows against the module's constants"
    );
}

#[test]
fn the_readme_shows_exactly_the_table() {
    let readme = crate_dir().join("README.md");
    assert_eq!(markdown_rows(&readme), table(), "{readme:?}");
}

#[test]
fn the_repository_readme_keeps_no_copy_of_the_table() {
    let readme = crate_dir().join("../../README.md");
    let copies = read(&readme)
        .lines()
        .filter(|line| line.trim() == HEADING)
        .count();
    assert_eq!(
        copies, 0,
        "{readme:?} has an exit-code table: link to this crate's README instead"
    );
}

#[test]
fn help_shows_exactly_the_table() {
    let help = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .arg("--help")
        .output()
        .expect("run fencelock --help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (_, section) = help
        .split_once("Exit codes:")
        .expect("--help has an exit-code section");
    let expected: Vec<String> = TABLE
        .iter()
        .map(|(code, meaning)| words(&format!("{code} {meaning}")))
        .collect();
    assert_eq!(words(section), expected.join(" "), "{help}");
}
