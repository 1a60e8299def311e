//! The layering of fencelock's library (`ARCHITECTURE.md`): every module sits in one layer, and
//! a module uses only modules of its own layer or of layers below it. The check reads every
//! `crate::…` path of `crates/fencelock/src` (a `use` or a path in code, comments left out) and
//! reports each one that points up, as `file:line`.
//!
//! A path to an item re-exported at the crate root (`crate::Client`) counts as a path to the
//! module it is re-exported from, as `lib.rs` says: a re-export is no way around a layer.

use std::collections::HashMap;
use std::path::Path;

/// fencelock's modules by layer, lowest first.
const LAYERS: [(&str, &[&str]); 5] = [
    ("base", &["error", "options", "keys", "token", "race"]),
    ("transport", &["transport", "scripts"]),
    (
        "core",
        &[
            "shared", "grant", "guard", "lease", "keeper", "notify", "observe", "holds", "quorum",
            "redlock",
        ],
    ),
    (
        "primitives",
        &[
            "mutex",
            "fair",
            "reentrant",
            "rwlock",
            "semaphore",
            "multi",
            "election",
        ],
    ),
    (
        "façade",
        &[
            "client", "connect", "inspect", "check", "blocking", "fuzzing",
        ],
    ),
];

/// The library's sources, from this crate's directory.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/fencelock/src");

/// Checks fencelock's sources: `Err` lists every upward path, and every module in no layer.
pub(crate) fn check() -> Result<(), String> {
    let root = Path::new(SOURCES);
    let mut files = Vec::new();
    collect(root, root, &mut files)?;
    let lib = files
        .iter()
        .find(|(path, _)| path == "lib.rs")
        .map(|(_, text)| text.as_str())
        .ok_or("crates/fencelock/src/lib.rs is missing")?;
    let reexports = reexports(lib);
    let problems: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| violations(path, text, &reexports))
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "imports against the layers of ARCHITECTURE.md (xtask/src/layers.rs):\n{}",
        problems.join("\n")
    ))
}

/// Every `.rs` file under `dir`, with its path relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {dir:?}: {e}"))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {dir:?}: {e}"))?
            .path();
        if path.is_dir() {
            collect(root, &path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
            let relative = path.strip_prefix(root).unwrap_or(&path);
            files.push((relative.to_string_lossy().replace('\\', "/"), text));
        }
    }
    Ok(())
}

/// The module a file belongs to: `transport/conn.rs` is in `transport`; `None` for `lib.rs`,
/// the crate root, which may use everything.
fn module_of(path: &str) -> Option<&str> {
    let first = path.split('/').next()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (module != "lib").then_some(module)
}

/// The layer of `module`, by its index in [`LAYERS`].
fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The names `lib.rs` re-exports at the root, each with the module it comes from:
/// `pub use mutex::{Mutex, MutexGuard};` maps both names to `mutex`.
fn reexports(lib: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for statement in code(lib).split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, rest)) = path.split_once("::") else {
            continue;
        };
        let items = rest.rsplit("::").next().unwrap_or(rest);
        for item in items.trim_matches(['{', '}', ' ', '\n']).split(',') {
            let name = item.split(" as ").last().unwrap_or(item).trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    names
}

/// The text without its line comments (doc comments included), line breaks kept so that
/// offsets keep their lines.
fn code(text: &str) -> String {
    text.lines()
        .map(without_comment)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line up to its `//`, one inside a string literal (`"redis://…"`) left alone.
fn without_comment(line: &str) -> &str {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = line.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(at + 1) == Some(&b'/') => return &line[..at],
            _ => {}
        }
    }
    line
}

/// Every upward path of one file, as `file:line: …`.
fn violations(path: &str, text: &str, reexports: &HashMap<String, String>) -> Vec<String> {
    let Some(module) = module_of(path) else {
        return Vec::new();
    };
    let Some(layer) = layer_of(module) else {
        return vec![format!(
            "{path}: module `{module}` is in no layer: add it to LAYERS"
        )];
    };
    let mut found = Vec::new();
    for (line, used) in crate_paths(&code(text)) {
        if used.is_empty() {
            // `$crate::$item` in a macro: the item is the caller's to name.
            continue;
        }
        let used = reexports.get(&used).cloned().unwrap_or(used);
        match layer_of(&used) {
            Some(target) if target > layer => found.push(format!(
                "{path}:{line}: {} module `{module}` uses {} module `{used}`",
                LAYERS[layer].0, LAYERS[target].0
            )),
            Some(_) => {}
            None => found.push(format!(
                "{path}:{line}: `crate::{used}` is in no layer: add it to LAYERS"
            )),
        }
    }
    found
}

/// The first segment after each `crate::` (`$crate::` too), with its line number from 1; in a
/// group, `crate::{a::X, b}`, each member's.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    let mut rest = code;
    let mut offset = 0;
    while let Some(at) = rest.find("crate::") {
        let start = offset + at + "crate::".len();
        let preceded_by_word = code[..offset + at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded_by_word {
            paths.extend(segments_at(code, start));
        }
        offset = start;
        rest = &code[start..];
    }
    paths
}

/// The first segments of the path that starts at `start`: one, or one per member of a group.
fn segments_at(code: &str, start: usize) -> Vec<(usize, String)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let tail = &code[start..];
    if !tail.starts_with('{') {
        let name: String = tail
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        return vec![(line_of(start), name)];
    }
    let mut members = Vec::new();
    let mut depth = 0;
    let mut expecting = true;
    for (at, c) in tail.char_indices() {
        match c {
            '{' => {
                depth += 1;
                expecting = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => expecting = true,
            c if expecting && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                let name: String = tail[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                members.push((line_of(start + at), name));
                expecting = false;
            }
            _ => {}
        }
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reexported() -> HashMap<String, String> {
        reexports("pub use client::Client;\npub use mutex::{Mutex, MutexGuard};\n")
    }

    #[test]
    fn an_upward_import_is_reported_with_its_file_and_line() {
        let sample = "//! The grant.\n\nuse crate::error::Result;\nuse crate::client::Shared;\n";
        assert_eq!(
            violations("grant.rs", sample, &reexported()),
            vec!["grant.rs:4: core module `grant` uses façade module `client`"]
        );
    }

    #[test]
    fn groups_paths_in_code_and_root_reexports_count_too() {
        let sample = "use crate::{\n    error::Error,\n    mutex::Mutex,\n};\n\
                      fn f() { crate::Client::nothing(); }\n";
        assert_eq!(
            violations("transport/conn.rs", sample, &reexported()),
            vec![
                "transport/conn.rs:3: transport module `transport` uses primitives module `mutex`",
                "transport/conn.rs:5: transport module `transport` uses façade module `client`",
            ]
        );
    }

    #[test]
    fn downward_and_sideways_imports_comments_and_the_root_pass() {
        let sample = "use crate::transport::conn::Conn;\nuse crate::reentrant::Holder;\n\
                      /// See [`Client`](crate::client::Client).\n\
                      let url = \"redis://h\"; // crate::client\n";
        assert!(violations("rwlock.rs", sample, &reexported()).is_empty());
        assert!(violations("lib.rs", "use crate::client::Client;", &reexported()).is_empty());
    }

    #[test]
    fn a_module_in_no_layer_is_reported() {
        assert_eq!(
            violations("mystery.rs", "", &reexported()),
            vec!["mystery.rs: module `mystery` is in no layer: add it to LAYERS"]
        );
        assert_eq!(
            violations("mutex.rs", "use crate::nowhere::X;", &reexported()),
            vec!["mutex.rs:1: `crate::nowhere` is in no layer: add it to LAYERS"]
        );
    }
}
