//! What a result file measured, so that a doc can only call a result current while the code it
//! measured is still today's.
//!
//! The bench and the checker each measure some of the repository's sources: [`BENCH`] and
//! [`CHECK`] say which, here and nowhere else. Each of them has a build script that hashes those
//! sources as they are built ([`build_script`]) and writes the [`digest`] into every result it
//! writes: in JSON as `"sources": {"digest": "sha256:…", "paths": […]}` (under `run` in the
//! bench's files, at the top of the checker's), in Markdown as one [`line()`]
//! (`sources: sha256:… over crates/fencelock/Cargo.toml, crates/fencelock/src`). The figures
//! check (`cargo xtask figures`) hashes the same paths in the working tree and compares: no git
//! history is needed, only the files.
//!
//! Which sources:
//! - the lock path, for every bench scenario: fencelock's `src` (its Rust and its Lua) and its
//!   `Cargo.toml` (features and the versions of its dependencies). `Cargo.lock` is left out: it
//!   changes with every crate's dependencies, the test kits' and the tasks' too, and would make
//!   every result stale for a change that measures nothing new;
//! - for the checker, the lock path and the checker's own `src`, whose strategies, faults and
//!   verdicts are as much what a checker result says as the lock path is.
//!
//! The bench's own sources are not in [`BENCH`]: a new scenario or a new column does not change
//! what the scenarios already run measured. A change to how a scenario counts or times is a
//! reason to run it again all the same.
//!
//! The digest: SHA-256 over every regular file under the paths (a path may be a file or a
//! folder, walked to the bottom), in the byte order of their paths from the repository's root
//! (`/`-separated), each as its path, a zero byte, its length as 8 bytes little-endian, and its
//! bytes. Nothing is ignored: a file left in `src` that no module uses changes the digest too,
//! hidden files included. A symbolic link, or a name that is not UTF-8, is an error rather than
//! something silently skipped.

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// The sources of the lock path: what every bench scenario measures.
pub const BENCH: &[&str] = &["crates/fencelock/Cargo.toml", "crates/fencelock/src"];

/// What the checker measures: the lock path and the checker itself.
pub const CHECK: &[&str] = &[
    "crates/fencelock/Cargo.toml",
    "crates/fencelock/src",
    "crates/fencelock-check/src",
];

/// The variable the build scripts set to the digest, read with `env!` by the programs.
pub const DIGEST_VARIABLE: &str = "FENCELOCK_SOURCES_DIGEST";

/// The start of a Markdown result file's sources line.
const LINE_PREFIX: &str = "sources: ";

/// Why sources could not be hashed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The digest of `paths` (from `root`), as `sha256:` and 64 hex digits.
///
/// # Errors
///
/// When a path does not exist, holds a symbolic link or a name that is not UTF-8, or a file
/// cannot be read.
pub fn digest(root: &Path, paths: &[&str]) -> Result<String, Error> {
    let mut files = Vec::new();
    for path in paths {
        collect(root, path, &mut files)?;
    }
    files.sort();
    files.dedup();
    let mut hash = Sha256::new();
    for relative in &files {
        let bytes = std::fs::read(root.join(relative))
            .map_err(|e| Error(format!("cannot read {relative}: {e}")))?;
        hash.update(relative.as_bytes());
        hash.update([0]);
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    let hex: String = hash
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Ok(format!("sha256:{hex}"))
}

/// Adds the regular files at `relative` (a file, or a folder walked to the bottom) to `files`,
/// as paths from `root`.
fn collect(root: &Path, relative: &str, files: &mut Vec<String>) -> Result<(), Error> {
    let full = root.join(relative);
    let meta = std::fs::symlink_metadata(&full).map_err(|e| Error(format!("{relative}: {e}")))?;
    if meta.is_file() {
        files.push(relative.to_owned());
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(Error(format!(
            "{relative} is neither a regular file nor a folder (a symbolic link is not followed)"
        )));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&full)
        .map_err(|e| Error(format!("cannot list {relative}: {e}")))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| Error(format!("cannot list {relative}: {e}")))?;
    entries.sort();
    for entry in entries {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error(format!("a name in {relative} is not UTF-8")))?;
        collect(root, &format!("{relative}/{name}"), files)?;
    }
    Ok(())
}

/// The line a Markdown result file carries: `sources: DIGEST over PATH, PATH`.
pub fn line(digest: &str, paths: &[&str]) -> String {
    format!("{LINE_PREFIX}{digest} over {}", paths.join(", "))
}

/// What a result file says it measured: the digest and the paths it covers. With the `serde`
/// feature it serializes as a JSON result's `sources`: `{"digest": "sha256:…", "paths": […]}`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stamp {
    /// `sha256:` and 64 hex digits.
    pub digest: String,
    /// The paths hashed, from the repository's root.
    pub paths: Vec<String>,
}

impl Stamp {
    /// The stamp of a program whose build script hashed `paths` to `digest`: for the bench,
    /// `Stamp::new(env!("FENCELOCK_SOURCES_DIGEST"), BENCH)`.
    pub fn new(digest: &str, paths: &[&str]) -> Stamp {
        Stamp {
            digest: digest.to_owned(),
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// Its [`line()`], for a Markdown result file.
    pub fn line(&self) -> String {
        let paths: Vec<&str> = self.paths.iter().map(String::as_str).collect();
        line(&self.digest, &paths)
    }

    /// The stamp of a Markdown result file: its first [`line()`] (a list item's, `- sources: …`,
    /// counts too), or `None` when it has none.
    pub fn of_markdown(text: &str) -> Option<Stamp> {
        text.lines().find_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("- ")
                .unwrap_or(l)
                .strip_prefix(LINE_PREFIX)?;
            let (digest, paths) = rest.split_once(" over ")?;
            Some(Stamp {
                digest: digest.trim().to_owned(),
                paths: paths
                    .split(',')
                    .map(|p| p.trim().to_owned())
                    .filter(|p| !p.is_empty())
                    .collect(),
            })
        })
    }

    /// Whether the sources it names are, in the tree at `root`, what it measured: `Ok(())`, or
    /// `Err` saying what differs.
    pub fn matches(&self, root: &Path) -> Result<(), String> {
        if self.paths.is_empty() {
            return Err("its sources name no path".to_owned());
        }
        let paths: Vec<&str> = self.paths.iter().map(String::as_str).collect();
        let today =
            digest(root, &paths).map_err(|e| format!("its sources cannot be hashed: {e}"))?;
        if today == self.digest {
            Ok(())
        } else {
            Err(format!(
                "{} changed since it was measured ({} then, {} now)",
                self.paths.join(", "),
                short(&self.digest),
                short(&today)
            ))
        }
    }
}

/// A digest's first 12 hex digits, enough to tell two apart in a message.
fn short(digest: &str) -> &str {
    let end = digest
        .char_indices()
        .nth("sha256:".len() + 12)
        .map_or(digest.len(), |(i, _)| i);
    &digest[..end]
}

/// What a build script of a writer of results does: hashes `paths` under `root` (the
/// repository's root), sets [`DIGEST_VARIABLE`] for the program, and asks Cargo to run it again
/// when any of them changes (Cargo scans a folder named so for any change beneath it).
///
/// # Errors
///
/// As [`digest`].
pub fn build_script(root: &Path, paths: &[&str]) -> Result<(), Error> {
    let digest = digest(root, paths)?;
    println!("cargo:rerun-if-changed=build.rs");
    for path in paths {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    println!("cargo:rustc-env={DIGEST_VARIABLE}={digest}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let src = dir.path().join("crates/lib/src");
        std::fs::create_dir_all(src.join("kinds")).expect("folders");
        std::fs::write(src.join("lib.rs"), "mod kinds;\n").expect("a file");
        std::fs::write(src.join("kinds/acquire.lua"), "return 1\n").expect("a file");
        std::fs::write(dir.path().join("crates/lib/Cargo.toml"), "[package]\n").expect("a file");
        dir
    }

    const PATHS: &[&str] = &["crates/lib/Cargo.toml", "crates/lib/src"];

    #[test]
    fn the_digest_changes_with_a_files_bytes_its_name_or_a_new_file() {
        let dir = tree();
        let root = dir.path();
        let before = digest(root, PATHS).expect("a digest");
        assert!(
            before.starts_with("sha256:") && before.len() == 7 + 64,
            "{before}"
        );
        assert_eq!(digest(root, PATHS), Ok(before.clone()), "deterministic");
        // The order the paths are named in does not matter.
        assert_eq!(
            digest(root, &["crates/lib/src", "crates/lib/Cargo.toml"]),
            Ok(before.clone())
        );
        let lua = root.join("crates/lib/src/kinds/acquire.lua");
        std::fs::write(&lua, "return 2\n").expect("an edit");
        let edited = digest(root, PATHS).expect("a digest");
        assert_ne!(edited, before);
        std::fs::rename(&lua, root.join("crates/lib/src/kinds/grant.lua")).expect("a rename");
        let renamed = digest(root, PATHS).expect("a digest");
        assert_ne!(renamed, edited);
        std::fs::write(root.join("crates/lib/src/.notes"), "").expect("a hidden file");
        assert_ne!(digest(root, PATHS).expect("a digest"), renamed);
    }

    #[test]
    fn contents_cannot_pass_for_names() {
        // "ab" + "c" and "a" + "bc" differ: each file's length is hashed before its bytes.
        let one = tempfile::tempdir().expect("a scratch directory");
        std::fs::write(one.path().join("a"), "bc").expect("a file");
        std::fs::write(one.path().join("b"), "").expect("a file");
        let two = tempfile::tempdir().expect("a scratch directory");
        std::fs::write(two.path().join("a"), "").expect("a file");
        std::fs::write(two.path().join("b"), "bc").expect("a file");
        assert_ne!(
            digest(one.path(), &["a", "b"]),
            digest(two.path(), &["a", "b"])
        );
    }

    #[test]
    fn missing_paths_and_links_are_errors() {
        let dir = tree();
        assert!(digest(dir.path(), &["crates/none"])
            .expect_err("a missing path")
            .to_string()
            .contains("crates/none"));
        std::os::unix::fs::symlink("lib.rs", dir.path().join("crates/lib/src/link.rs"))
            .expect("a link");
        assert!(digest(dir.path(), PATHS)
            .expect_err("a link")
            .to_string()
            .contains("symbolic link"));
    }

    #[test]
    fn a_markdown_stamp_reads_back_and_matches_its_tree() {
        let dir = tree();
        let today = digest(dir.path(), PATHS).expect("a digest");
        let text = format!(
            "# handoff\n\nsome run\n{}\n\n| a |\n|---|\n",
            line(&today, PATHS)
        );
        let stamp = Stamp::of_markdown(&text).expect("a stamp");
        assert_eq!(stamp.paths, PATHS);
        assert_eq!(stamp.matches(dir.path()), Ok(()));
        let listed = format!("- seed: 7\n- {}\n", line(&today, PATHS));
        assert_eq!(Stamp::of_markdown(&listed), Some(stamp.clone()));
        assert_eq!(Stamp::new(&today, PATHS), stamp);
        assert_eq!(Stamp::of_markdown(&stamp.line()), Some(stamp.clone()));
        assert_eq!(Stamp::of_markdown("# old run\n\ncommit 2cc9221\n"), None);
        std::fs::write(dir.path().join("crates/lib/src/lib.rs"), "mod grant;\n").expect("an edit");
        let stale = stamp.matches(dir.path()).expect_err("an edited tree");
        assert!(stale.contains("changed since it was measured"), "{stale}");
    }
}
