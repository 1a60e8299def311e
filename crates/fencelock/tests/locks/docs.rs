//! The long-form docs in `docs/` render on GitHub as well as in rustdoc: every link an `.md`
//! file uses is defined in that file with an address GitHub can follow, and rustdoc reads
//! `docs/rustdoc-links.md` first, whose intra-doc definitions win over the file's own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The file whose definitions rustdoc reads before each long-form doc.
const RUSTDOC_LINKS: &str = "rustdoc-links.md";

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path:?}: {e}"))
}

/// Every long-form doc, by file name, with its text.
fn long_form_docs() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(docs())
        .expect("the docs directory")
        .map(|entry| entry.expect("a docs entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .filter(|path| !path.ends_with(RUSTDOC_LINKS))
        .map(|path| {
            (
                path.file_name()
                    .expect("a file name")
                    .to_string_lossy()
                    .into_owned(),
                read(&path),
            )
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    files
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// A link reference definition alone on its line: `[label]: destination`.
fn definition(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('[')?;
    let (label, rest) = rest.split_once("]: ")?;
    let destination = rest.trim();
    (!destination.is_empty() && !destination.contains(' ')).then_some((label, destination))
}

/// What the prose of `text` links to: the labels of reference links written as
/// ``[`path`]`` (or ``[text][`path`]``), and the destinations of inline links, whatever their
/// text (`[supported servers](crate#supported-servers)` as well as ``[`Client`](…)``).
fn links(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut labels = BTreeSet::new();
    let mut inline = Vec::new();
    for line in prose(text).filter(|line| definition(line).is_none()) {
        let mut rest = line;
        while let Some(open) = rest.find("](") {
            rest = &rest[open + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            inline.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
        let mut rest = line;
        while let Some(open) = rest.find("[`") {
            rest = &rest[open + 2..];
            let Some(close) = rest.find("`]") else { break };
            let label = &rest[..close];
            rest = &rest[close + 2..];
            if label.contains(['`', '[', ']']) {
                continue;
            }
            match rest.chars().next() {
                // An inline link: its destination is read above.
                Some('(') => {}
                // Link text: its label is the next bracket, read on the next turn.
                Some('[') => {}
                _ => {
                    labels.insert(format!("`{label}`"));
                }
            }
        }
    }
    (labels, inline)
}

fn definitions(text: &str) -> BTreeSet<(String, String)> {
    prose(text)
        .filter_map(definition)
        .map(|(label, destination)| (label.to_owned(), destination.to_owned()))
        .collect()
}

/// A destination GitHub can follow: a web address, a heading of the same page, or another doc
/// of the same directory (with a heading of it or not).
fn followed_by_github(destination: &str) -> bool {
    destination.starts_with("https://")
        || destination.starts_with('#')
        || destination.split('#').next().is_some_and(|file| {
            file.ends_with(".md") && !file.contains('/') && docs().join(file).is_file()
        })
}

#[test]
fn every_link_of_a_doc_is_defined_in_it_for_github() {
    let mut broken = Vec::new();
    for (file, text) in long_form_docs() {
        let (labels, inline) = links(&text);
        let defined = definitions(&text);
        for destination in inline.iter().filter(|d| !followed_by_github(d)) {
            broken.push(format!(
                "{file}: inline link to `{destination}` works only in rustdoc"
            ));
        }
        for label in &labels {
            match defined.iter().find(|(l, _)| l == label) {
                None => broken.push(format!("{file}: [{label}] has no definition")),
                Some((_, d)) if !followed_by_github(d) => broken.push(format!(
                    "{file}: [{label}] is defined as `{d}`, not an address"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn rustdoc_reads_an_intra_doc_link_for_every_label_a_doc_defines() {
    let rustdoc: BTreeSet<String> = definitions(&read(&docs().join(RUSTDOC_LINKS)))
        .into_iter()
        .map(|(label, _)| label)
        .collect();
    let mut missing = Vec::new();
    for (file, text) in long_form_docs() {
        for (label, _) in definitions(&text) {
            if !rustdoc.contains(&label) {
                missing.push(format!("{file}: [{label}] is missing from {RUSTDOC_LINKS}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The variants of `Error`, read from its source: the lines of `pub enum Error` indented
/// once that start with a capital letter.
fn error_variants() -> BTreeSet<String> {
    let source = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/error.rs"));
    let body = source
        .split_once("pub enum Error {")
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .map(|(body, _)| body)
        .expect("`pub enum Error { … }` in src/error.rs");
    body.lines()
        .filter_map(|line| line.strip_prefix("    "))
        .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|line| {
            line.split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn the_error_table_has_one_row_per_variant_of_error() {
    let variants = error_variants();
    assert!(variants.len() >= 15, "{variants:?}");
    let table = read(&docs().join("errors.md"));
    let rows: Vec<String> = prose(&table)
        .filter_map(|line| line.strip_prefix("| [`Error::"))
        .map(|rest| rest.split('`').next().unwrap_or_default().to_owned())
        .collect();
    let listed: BTreeSet<String> = rows.iter().cloned().collect();
    assert_eq!(listed.len(), rows.len(), "a variant has two rows: {rows:?}");
    let missing: Vec<_> = variants.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&variants).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/errors.md misses {missing:?} and names {unknown:?}, which Error does not have"
    );
    for line in prose(&table).filter(|line| line.starts_with("| [`Error::")) {
        let cells = line.split(" | ").count();
        assert_eq!(
            cells, 4,
            "a row of four cells (variant, meaning, retry, what to do): {line}"
        );
    }
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a source entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = read(&path);
            found.push((path, text));
        }
    }
    found
}

/// The public consuming setters of the `*Options` types, as `Type::setter`: each `pub fn`
/// taking `mut self` in an `impl <Type>Options` block of the library's source.
fn option_setters() -> BTreeSet<String> {
    let mut setters = BTreeSet::new();
    for (_, text) in sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let lines: Vec<&str> = text.lines().collect();
        let mut current: Option<&str> = None;
        for (i, line) in lines.iter().enumerate() {
            if let Some(rest) = line.strip_prefix("impl ") {
                current = rest
                    .strip_suffix(" {")
                    .filter(|ty| ty.ends_with("Options") && !ty.contains(' '));
                continue;
            }
            let Some(rest) = line.trim_start().strip_prefix("pub fn ") else {
                continue;
            };
            let (Some(ty), Some((name, after))) = (current, rest.split_once('(')) else {
                continue;
            };
            let next = lines.get(i + 1).map_or("", |l| l.trim_start());
            if after.starts_with("mut self") || (after.is_empty() && next.starts_with("mut self")) {
                setters.insert(format!("{ty}::{name}"));
            }
        }
    }
    setters
}

#[test]
fn the_configuration_reference_has_a_row_for_every_option_setter() {
    let setters = option_setters();
    for ty in ["ClientOptions", "SentinelOptions", "LockOptions"] {
        assert!(
            setters.iter().any(|s| s.starts_with(&format!("{ty}::"))),
            "no setter of {ty} found: {setters:?}"
        );
    }
    let reference = read(&docs().join("configuration.md"));
    let rows: BTreeSet<String> = prose(&reference)
        .filter_map(|line| line.strip_prefix("| [`"))
        .map(|rest| rest.split('`').next().unwrap_or_default().to_owned())
        .collect();
    let missing: Vec<_> = setters.difference(&rows).collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no row for {missing:?}"
    );
}
