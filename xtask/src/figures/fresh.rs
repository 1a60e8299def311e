//! Whether a result file measured today's code, and the prose that says a result is the latest.
//!
//! A result file says which sources it measured and their digest (the `fencelock-sources`
//! crate writes and reads that stamp); it is today's when the same sources in the working tree
//! hash to the same digest. Nothing here reads git history: a clone of any depth checks the
//! same.

use std::path::{Component, Path, PathBuf};

use fencelock_sources::Stamp;
use serde_json::Value;

use super::{comments, is_link_definition, marker, mask, Kind, Marker, Sources, LATEST_WORDS};

/// Whether a result file measured today's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Freshness {
    Current,
    /// It measured an earlier path: why it is not today's.
    Earlier(String),
}

impl Sources {
    /// Whether `file` (from the root) measured today's code; `Err` when it cannot be read.
    pub(super) fn freshness(&mut self, file: &str) -> Result<Freshness, String> {
        if let Some(known) = self.fresh.get(file) {
            return known.clone();
        }
        let found = self.measure_freshness(file);
        self.fresh.insert(file.to_owned(), found.clone());
        found
    }

    fn measure_freshness(&mut self, file: &str) -> Result<Freshness, String> {
        let stamp = if file.ends_with(".md") {
            Stamp::of_markdown(&self.text(file)?)
        } else {
            stamp_of_json(self.json(file)?).map_err(|e| format!("{file}: {e}"))?
        };
        Ok(match stamp {
            None => Freshness::Earlier("no sources digest".to_owned()),
            Some(stamp) => match stamp.matches(&self.root) {
                Ok(()) => Freshness::Current,
                Err(why) => Freshness::Earlier(why),
            },
        })
    }

    /// Whether every result file in the folder `dir` (subfolders too) measured today's code;
    /// `None` when it holds no result file or one cannot be read.
    fn folder_freshness(&mut self, dir: &str) -> Option<Freshness> {
        let files = result_files(&self.root, dir, true);
        let mut earlier = Vec::new();
        for file in &files {
            if let Freshness::Earlier(why) = self.freshness(file).ok()? {
                earlier.push(format!("{file}: {why}"));
            }
        }
        match earlier.first() {
            _ if files.is_empty() => None,
            None => Some(Freshness::Current),
            Some(first) => Some(Freshness::Earlier(format!(
                "{} of its {} result files are not (the first, {first})",
                earlier.len(),
                files.len()
            ))),
        }
    }
}

/// The stamp of a result file's JSON: `run.sources` (the bench's) or `sources` (the
/// checker's), `None` when it has neither.
fn stamp_of_json(json: &Value) -> Result<Option<Stamp>, String> {
    let Some(sources) = json.pointer("/run/sources").or_else(|| json.get("sources")) else {
        return Ok(None);
    };
    let malformed = || "its `sources` is not {\"digest\": \"sha256:…\", \"paths\": […]}".to_owned();
    let digest = sources
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(malformed)?;
    let paths = sources
        .get("paths")
        .and_then(Value::as_array)
        .ok_or_else(malformed)?
        .iter()
        .map(|p| p.as_str().map(str::to_owned).ok_or_else(malformed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Stamp {
        digest: digest.to_owned(),
        paths,
    }))
}

/// What quoting `what` from `file` does wrong, if anything: a figure of an earlier path not
/// marked so, or marked so while `file` is today's.
pub(super) fn stale(
    file: &str,
    earlier: bool,
    what: &str,
    sources: &mut Sources,
) -> Option<(Kind, String)> {
    match sources.freshness(file) {
        Err(message) => Some((Kind::Marker, message)),
        Ok(Freshness::Current) if earlier => Some((
            Kind::NotEarlier,
            format!("{what} is marked earlier, but {file} measured today's code"),
        )),
        Ok(Freshness::Earlier(why)) if !earlier => {
            Some((Kind::Stale, format!("{what} from {file}: {why}")))
        }
        Ok(_) => None,
    }
}

/// The result files in `dir` (from `root`), with `deep` those of its subfolders too, sorted:
/// JSON, and Markdown other than a README.
pub(super) fn result_files(root: &Path, dir: &str, deep: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.trim_end_matches('/').to_owned()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&folder)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{folder}/{name}");
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && deep {
                pending.push(path);
            } else if kind.is_file() && is_result_file(&name) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn is_result_file(name: &str) -> bool {
    name.ends_with(".json") || (name.ends_with(".md") && name != "README.md")
}

/// A result a sentence names: a file, or a folder of them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reference {
    File(String),
    Folder(String),
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::File(file) => f.write_str(file),
            Reference::Folder(dir) => write!(f, "{dir}/"),
        }
    }
}

/// The sentences of `doc` that call a result [`LATEST_WORDS`] while it, or one of the results
/// they name, did not measure today's code: `(line, message)`.
pub(super) fn latest_claims(
    doc: &str,
    lines: &[&str],
    sources: &mut Sources,
) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (first, block) in blocks(lines) {
        let raw = block.join("\n");
        let masked = block.iter().map(|l| mask(l)).collect::<Vec<_>>().join("\n");
        for (start, end) in sentences(&masked) {
            // ASCII lowercasing keeps every byte where it was.
            let lower = masked[start..end].to_ascii_lowercase();
            let Some((word, at)) = latest_word(&lower) else {
                continue;
            };
            let line = first + raw[..start + at].matches('\n').count() + 1;
            for reference in references(doc, &raw[start..end], &sources.root) {
                let freshness = match &reference {
                    Reference::File(file) => sources.freshness(file).ok(),
                    Reference::Folder(dir) => sources.folder_freshness(dir),
                };
                if let Some(Freshness::Earlier(why)) = freshness {
                    found.push((
                        line,
                        format!("says {word:?} of {reference}, which is not today's: {why}"),
                    ));
                }
            }
        }
    }
    found
}

/// The runs of prose a sentence cannot cross, outside fenced code: paragraphs, and each
/// heading and each table row alone; with the index of each one's first line.
fn blocks<'a>(lines: &[&'a str]) -> Vec<(usize, Vec<&'a str>)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, Vec<&'a str>)> = None;
    let mut fenced = false;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```") || trimmed.starts_with("~~~");
        fenced ^= fence;
        let alone = trimmed.starts_with('|') || trimmed.starts_with('#');
        let outside = fence || fenced || trimmed.is_empty() || is_link_definition(trimmed);
        if outside || alone {
            blocks.extend(current.take());
        }
        if outside {
            continue;
        }
        if alone {
            blocks.push((i, vec![*line]));
        } else {
            current.get_or_insert_with(|| (i, Vec::new())).1.push(line);
        }
    }
    blocks.extend(current);
    blocks
}

/// The byte ranges of the sentences of a (masked) block: each ends after `.`, `!` or `?` and a
/// space or the block's end.
fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = matches!(c, '.' | '!' | '?')
            && chars.peek().is_none_or(|(_, next)| next.is_whitespace());
        if ends {
            found.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < text.len() {
        found.push((start, text.len()));
    }
    found
}

/// The first of [`LATEST_WORDS`] in `lower` as a whole word, and where.
fn latest_word(lower: &str) -> Option<(&'static str, usize)> {
    LATEST_WORDS
        .iter()
        .filter_map(|word| {
            lower
                .match_indices(word)
                .find(|(at, _)| whole_word(lower, *at, word.len()))
                .map(|(at, _)| (*word, at))
        })
        .min_by_key(|(_, at)| *at)
}

/// Whether `text[at..at + len]` stands as a word of its own.
fn whole_word(text: &str, at: usize, len: usize) -> bool {
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    !text[..at].chars().next_back().is_some_and(word_char)
        && !text[at + len..].chars().next().is_some_and(word_char)
}

/// The results a (raw) sentence of `doc` quotes or names: the files of its figure markers, and
/// every result file or folder its text, code or links name (`bench/results/core-v3/`,
/// `results/core-v2/peers.md` from bench/README.md); a README names its folder.
fn references(doc: &str, sentence: &str, root: &Path) -> Vec<Reference> {
    let mut found = Vec::new();
    for (_, _, comment) in comments(sentence) {
        if let Ok(Marker::Figure {
            file: Some(file), ..
        }) = marker(comment)
        {
            found.push(Reference::File(file.to_owned()));
        }
    }
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/');
    for (at, _) in sentence.match_indices("results/") {
        let from = sentence[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| path_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let to = sentence[at..]
            .char_indices()
            .find(|(_, c)| !path_char(*c))
            .map_or(sentence.len(), |(i, _)| at + i);
        let token = sentence[from..to].trim_end_matches(['.', '/']);
        found.extend(resolve(doc, token, root));
    }
    let mut unique = Vec::new();
    for reference in found {
        if !unique.contains(&reference) {
            unique.push(reference);
        }
    }
    unique
}

/// The result a path written in `doc` names, from the root: as written when it starts at the
/// root (`bench/…`, `crates/…`), else from the doc's folder.
fn resolve(doc: &str, token: &str, root: &Path) -> Option<Reference> {
    let written = if token.starts_with("bench/") || token.starts_with("crates/") {
        PathBuf::from(token)
    } else {
        Path::new(doc).parent().unwrap_or(Path::new("")).join(token)
    };
    let mut parts: Vec<String> = Vec::new();
    for component in written.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    let path = parts.join("/");
    let full = root.join(&path);
    if full.is_dir() {
        return Some(Reference::Folder(path));
    }
    let name = parts.last()?;
    if !full.is_file() {
        None
    } else if name == "README.md" {
        parts.pop();
        Some(Reference::Folder(parts.join("/")))
    } else if is_result_file(name) {
        Some(Reference::File(path))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_end_at_a_stop_and_a_space() {
        let text = "The latest run is core-v3. It gives 0.81 and 0.36.\nAnother one? Yes";
        let found: Vec<&str> = sentences(text).iter().map(|(s, e)| &text[*s..*e]).collect();
        assert_eq!(
            found,
            [
                "The latest run is core-v3.",
                " It gives 0.81 and 0.36.",
                "\nAnother one?",
                " Yes"
            ]
        );
    }

    #[test]
    fn latest_words_are_whole_words() {
        assert_eq!(latest_word("the latest run"), Some(("latest", 4)));
        assert_eq!(latest_word("today's path"), Some(("today's", 0)));
        assert_eq!(
            latest_word("the current runs, latest"),
            Some(("current runs", 4))
        );
        assert_eq!(latest_word("the current holder"), None);
        assert_eq!(latest_word("a latestness"), None);
    }

    #[test]
    fn paths_resolve_from_the_root_or_the_docs_folder() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let root = dir.path();
        std::fs::create_dir_all(root.join("bench/results/core-v3")).expect("folders");
        std::fs::write(root.join("bench/results/core-v3/README.md"), "").expect("a file");
        std::fs::write(root.join("bench/results/core-v3/peers.json"), "{}").expect("a file");
        std::fs::write(root.join("bench/results/core-v3/peers.png"), "").expect("a file");
        let folder = Reference::Folder("bench/results/core-v3".to_owned());
        let peers = Reference::File("bench/results/core-v3/peers.json".to_owned());
        let sentence =
            "The latest run is [`bench/results/core-v3/`](bench/results/core-v3/README.md).";
        assert_eq!(references("README.md", sentence, root), [folder]);
        let relative = "See [peers](results/core-v3/peers.json) and results/core-v3/peers.png.";
        assert_eq!(
            references("bench/README.md", relative, root),
            std::slice::from_ref(&peers)
        );
        let up = "[the run](../../../bench/results/core-v3/peers.json)";
        assert_eq!(references("crates/x/docs/a.md", up, root), [peers]);
        assert_eq!(references("README.md", "results/none/", root), []);
        let marked = "0.81<!-- figure bench/results/x.json: a -->";
        assert_eq!(
            references("README.md", marked, root),
            [Reference::File("bench/results/x.json".to_owned())]
        );
    }

    #[test]
    fn blocks_break_at_blank_lines_headings_and_table_rows() {
        let lines = [
            "# Title",
            "one line",
            "and its next",
            "",
            "| a |",
            "```",
            "code",
            "```",
            "[x]: https://docs.rs/x/latest",
            "after",
        ];
        let found = blocks(&lines);
        assert_eq!(
            found,
            [
                (0, vec!["# Title"]),
                (1, vec!["one line", "and its next"]),
                (4, vec!["| a |"]),
                (9, vec!["after"]),
            ]
        );
    }
}
