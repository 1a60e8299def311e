//! Every figure the docs quote from a measurement is read from a committed result file, so that
//! no doc can say what no run measured, or what a later run no longer says; and a result file
//! quoted as today's must have measured today's code.
//!
//! How a doc quotes a figure (the marker is an HTML comment: GitHub and rustdoc show nothing):
//!
//! - **A figure from a result file**: the number, then at once (after its unit at most) a marker
//!   naming the JSON file, from the repository's root, and the value in it:
//!   `0.81<!-- figure bench/results/core-v2/uncontended.json: results.rows[tasks=1].ratio -->`,
//!   `27×<!-- figure bench/results/core-v2/peers.json: A / B -->`. The value is a path into the
//!   file or a small expression of such paths (`+ - * /`, parentheses, `min(…)`, `max(…)`,
//!   `floor(…)`, and `sum(…)` or `count(…)` of every row a selector matches; the grammar is in
//!   `figures/expr.rs`). The figure must be the value written to as many
//!   decimals as the doc shows it with (`0.81` is the value to two decimals, `23` to none);
//!   a marker ending in `~N` rounds the value to N significant digits first (`120×` for 118.4
//!   with `~2`). Thousands separators are ignored (`196,413`). A Markdown result file (the
//!   checker's tables) can be named too: its tables' rows are `rows`, each cell under its
//!   column's header in snake case (`rows[strategy=fencelock-mutex, fault=pause].lost_updates`).
//! - **A bound**: when the words right before the figure make it one, it rounds outward
//!   instead. After `at most`, `no more than`, `up to`, `under`, `within`, `below`, `less than`,
//!   `fewer than`, `≤` the figure must be at least the value (`at most 0.02 s` for 13.6 ms; `at
//!   most 0.01 s` fails); after `at least`, `no less than`, `over`, `more than`, `above`, `≥` at
//!   most the value.
//! - **Only today's results**: every result file says which sources it measured and their
//!   digest (`run.sources` or `sources` in JSON, a `sources: sha256:… over PATHS` line in
//!   Markdown; which sources, and how they are hashed: the `fencelock-sources` crate). A figure
//!   from a file whose sources have changed since, or that does not say (every file written
//!   before results carried their sources), fails, unless the marker says it is **a figure of
//!   an earlier path**: `<!-- figure earlier FILE: EXPR -->`, `<!-- figures: earlier rows of
//!   FILE -->` (the sentence should say so too). A marker that says `earlier` of a file that
//!   measured today's code fails as well: the doc must drop the word.
//! - **"Latest" is computed, not typed**: a sentence that says [`LATEST_WORDS`] (`latest`,
//!   `newest`, `most recent`, `today's`, `current run`, …) and carries a figure marker or names a
//!   result file or folder (`bench/results/core-v3/`, a link to one) fails when one of those
//!   results did not measure today's code (a folder: every result file in it, subfolders too).
//! - **The list of runs** in `bench/README.md`, between `<!-- runs: begin … -->` and
//!   `<!-- runs: end -->`, is generated: every folder of results, when and at which commit it
//!   was measured, and whether it measured today's code. The check fails when it is not what
//!   the result files say today; `cargo xtask figures --write` writes it (`figures/runs.rs`).
//! - **A figure computed from settings**, with no file behind it: `<!-- figure: EXPR -->`, the
//!   arithmetic alone (`1.97 s<!-- figure: 3 * 2 / 3 - (0.01 * 3 + 0.002) -->`).
//! - **A figure a test asserts**: `<!-- figure asserted by FILE -->` after it, FILE a test that
//!   reads this doc (it names the doc's file) and fails when the figure is not what it
//!   measures. This is how a count of work (`8 commands` for a handoff) is quoted. A test
//!   that measures several figures is told which one by `figure asserted by FILE: WHAT`
//!   (`tests/locks/costs.rs: mutex.offer`); the test fails on a WHAT it does not measure.
//! - **A setting, default or limit**, not a result: `<!-- setting -->` after it
//!   (`a 1 s<!-- setting --> lease`), or `<!-- setting: why -->`. Not on a count of work
//!   ([`WORK_UNITS`]: `commands`, `calls`, `scripts`, `round trips`, `messages`, written before
//!   the marker or right after it, or the header of its table's column): what the scripts do
//!   is measured by a test, not typed. The library's defaults, which most docs repeat, need
//!   nothing: they are in [`NOT_MEASURED`].
//! - **A figure quoted from elsewhere** (a book, another project's documentation):
//!   `<!-- quoted: SOURCE -->` after it.
//! - **A table of results**: `<!-- figures: rows of FILE -->` on the line above it, FILE a
//!   Markdown file the bench or the checker wrote: the table's header is one of FILE's tables'
//!   and every row of it is a row of that table, byte for byte. FILE must be today's, or the
//!   marker `figures: earlier rows of FILE`.
//! - **A table a test asserts**: `<!-- figures: asserted by FILE -->` on the line above it, FILE
//!   a test that reads this doc (it names the doc's file) and fails when the table is not what
//!   it measures.
//!
//! And the lint: a number with a unit of measure (`ms`, `s`, `%`, `×`, `bytes`, `commands`,
//! …), with decimals, or with a thousands separator, in prose or in a table, that carries
//! none of these is reported; so is any number in a table cell whose column's header names a
//! unit (`| operation | round trips |`), outside a table under a `figures:` marker. Code
//! (fenced blocks, `inline`), links, and version numbers (`Redis 7.0`, `7.0.15`) are not
//! figures.
//!
//! Result files written before the project took its name carry the former one (in the program
//! their `command` names, and in their keys and labels); they are read with today's name, as
//! their Markdown was renamed.

mod expr;
mod fresh;
#[cfg(test)]
mod plants;
mod runs;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use fresh::Freshness;

/// Figures that are the library's defaults and limits, repeated across the docs: quoted without
/// a marker. Every entry must still be used somewhere.
const NOT_MEASURED: [(&str, &str); 10] = [
    ("30 s", "the default lease"),
    (
        "10 s",
        "the default lease's renewal interval, a third of it",
    ),
    ("60 s", "the default fence memory"),
    ("90 s", "the default lease plus the default fence memory"),
    ("1 s", "the default wake fallback"),
    (
        "200 ms",
        "MIN_LEASE, the default handoff window, and how long a release kept the lock for its \
         woken waiter on an earlier lock path",
    ),
    ("250 ms", "the default RedLock node timeout"),
    ("5 s", "the default shutdown timeout"),
    ("1%", "the drift allowance's share of the lease"),
    ("2 ms", "the drift allowance's constant"),
];

/// Units that make a number a figure of a measurement (or a setting, which then says so).
const UNITS: [&str; 38] = [
    "ms",
    "µs",
    "us",
    "s",
    "min",
    "%",
    "×",
    "B",
    "bytes",
    "KiB",
    "MiB",
    "GiB",
    "kB",
    "MB",
    "GB",
    "commands",
    "cmds",
    "scripts",
    "script calls",
    "calls",
    "round trips",
    "round-trips",
    "handoffs",
    "hand-offs",
    "cycles",
    "acquires",
    "sections",
    "requests",
    "responses",
    "retries",
    "purchases",
    "listings",
    "operations",
    "messages",
    "times",
    "/s",
    "seconds",
    "milliseconds",
];

/// Units that make a number a count of work done for one operation: what the scripts and the
/// client do is measured by a test, never typed behind a `setting` marker. Counts a workload is
/// configured with (`10 retries`, `100,000 leases`, `5 sellers`) are settings and are not here.
const WORK_UNITS: [&str; 17] = [
    "commands",
    "command",
    "cmds",
    "script calls",
    "script call",
    "calls",
    "call",
    "scripts",
    "script",
    "round trips",
    "round trip",
    "round-trips",
    "round-trip",
    "roundtrips",
    "messages",
    "message",
    "publishes",
];

/// Words that may follow a number in a table cell without being its unit: the number is then
/// a count of what its column's header names.
const CONNECTIVES: [&str; 12] = [
    "per", "more", "each", "to", "for", "then", "when", "and", "or", "in", "at", "of",
];

/// Words right before a figure that make it an upper bound: it must be at least its value.
const UPPER_BOUNDS: [&str; 11] = [
    "at most",
    "no more than",
    "not more than",
    "up to",
    "under",
    "within",
    "below",
    "less than",
    "fewer than",
    "≤",
    "<=",
];

/// Words right before a figure that make it a lower bound: it must be at most its value.
const LOWER_BOUNDS: [&str; 9] = [
    "at least",
    "no less than",
    "not less than",
    "no fewer than",
    "over",
    "more than",
    "above",
    "≥",
    ">=",
];

/// Words that call a result today's: a sentence with one of them that quotes or names a
/// result is checked to name only results of today's code.
const LATEST_WORDS: [&str; 11] = [
    "latest",
    "newest",
    "most recent",
    "today's",
    "current run",
    "current runs",
    "current result",
    "current results",
    "current lock path",
    "current path",
    "up to date",
];

/// Words after which a number with a dot is a version, not a figure.
const VERSION_WORDS: [&str; 20] = [
    "redis",
    "valkey",
    "rust",
    "rustc",
    "etcd",
    "version",
    "linux",
    "debian",
    "action",
    "python",
    "node",
    "ioredis",
    "rslock",
    "redis-py",
    "pottery",
    "redlock",
    "redis-semaphore",
    "python-redis-lock",
    "fencelock",
    "msrv",
];

/// The repository's root, from this crate's directory.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Checks every doc: `Err` lists, grouped by what is wrong, each figure that is not its file's
/// value or not today's, each marker that does not resolve, and each figure without a marker,
/// as `file:line: what`.
pub(crate) fn check() -> Result<(), String> {
    let root = Path::new(ROOT);
    let mut sources = Sources::new(root);
    let mut report = Report::default();
    for doc in docs(root)? {
        let text = std::fs::read_to_string(root.join(&doc))
            .map_err(|e| format!("cannot read {doc}: {e}"))?;
        check_doc(&doc, &text, &mut sources, &mut report);
    }
    for (figure, why) in NOT_MEASURED {
        if !report.allowed_used.contains(figure) {
            report.problems.push(Problem {
                kind: Kind::Marker,
                at: "xtask/src/figures.rs".to_owned(),
                message: format!(
                    "{figure:?} ({why}) is in NOT_MEASURED but no doc quotes it: remove it"
                ),
            });
        }
    }
    let runs_doc = root.join(runs::DOC);
    if runs_doc.is_file() {
        let text = std::fs::read_to_string(&runs_doc)
            .map_err(|e| format!("cannot read {}: {e}", runs::DOC))?;
        if let Some(message) = runs::check(&text, &mut sources) {
            report.problems.push(Problem {
                kind: Kind::Runs,
                at: runs::DOC.to_owned(),
                message,
            });
        }
    }
    if report.problems.is_empty() {
        eprintln!(
            "xtask: figures: {} figures checked against {} result files, all of today's \
             code, {} tables, {} asserted by tests, {} settings and quotes marked, no \
             unmarked figure in {} docs",
            report.figures,
            sources.loaded.len(),
            report.tables,
            report.asserted,
            report.settings,
            report.docs
        );
        Ok(())
    } else {
        Err(grouped(&report.problems))
    }
}

/// Writes the list of runs in `bench/README.md` as the result files say it today.
pub(crate) fn write_runs() -> Result<(), String> {
    runs::write(Path::new(ROOT))
}

/// The problems under one heading per kind, each heading saying once how to fix its kind.
fn grouped(problems: &[Problem]) -> String {
    let mut out = format!(
        "{} figure problems (how to quote a figure: xtask/src/figures.rs)",
        problems.len()
    );
    for kind in Kind::ALL {
        let of_kind: Vec<&Problem> = problems.iter().filter(|p| p.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        out.push_str(&format!("\n\n{} ({}):", kind.heading(), of_kind.len()));
        for problem in of_kind {
            out.push_str(&format!("\n{problem}"));
        }
    }
    out
}

/// The docs whose figures are checked, from the root: the READMEs, ARCHITECTURE.md and every
/// crate's `docs/`.
fn docs(root: &Path) -> Result<Vec<String>, String> {
    let mut docs = vec![
        "README.md".to_owned(),
        "ARCHITECTURE.md".to_owned(),
        "bench/README.md".to_owned(),
    ];
    let crates = root.join("crates");
    for krate in read_dir(&crates)? {
        let name = file_name(&krate);
        if krate.join("README.md").is_file() {
            docs.push(format!("crates/{name}/README.md"));
        }
        let dir = krate.join("docs");
        if dir.is_dir() {
            for file in read_dir(&dir)? {
                if file.extension().is_some_and(|e| e == "md") {
                    docs.push(format!("crates/{name}/docs/{}", file_name(&file)));
                }
            }
        }
    }
    docs.retain(|doc| root.join(doc).is_file());
    Ok(docs)
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    Ok(entries)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What the check found.
#[derive(Default)]
struct Report {
    problems: Vec<Problem>,
    figures: usize,
    tables: usize,
    asserted: usize,
    settings: usize,
    docs: usize,
    allowed_used: BTreeSet<&'static str>,
}

/// One thing wrong, where it is.
#[derive(Debug)]
struct Problem {
    kind: Kind,
    /// `doc:line`.
    at: String,
    message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// What is wrong with a figure, in the order the report lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// From a result of code that has changed since, or that does not say which code.
    Stale,
    /// Marked `earlier`, from a result of today's code.
    NotEarlier,
    /// Prose calling a result that is not today's the latest.
    Latest,
    /// The list of runs in `bench/README.md` is not what the result files say today.
    Runs,
    /// A count of work behind a `setting` marker.
    SettingCount,
    /// A bound rounded inward.
    Bound,
    /// Not its file's value.
    Value,
    /// A marker that does not resolve, or a table that does not match its file.
    Marker,
    /// A figure with no marker.
    Unmarked,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Stale,
        Kind::NotEarlier,
        Kind::Latest,
        Kind::Runs,
        Kind::SettingCount,
        Kind::Bound,
        Kind::Value,
        Kind::Marker,
        Kind::Unmarked,
    ];

    fn heading(self) -> &'static str {
        match self {
            Kind::Stale => {
                "Figures from a result file that measured code which has changed since, or \
                 that does not say which code it measured (\"no sources digest\": every file \
                 written before result files carried one): quote a run of today's code, or mark \
                 the figure as one of an earlier path (`<!-- figure earlier FILE: EXPR -->`, \
                 `<!-- figures: earlier rows of FILE -->`) and say so in the sentence"
            }
            Kind::NotEarlier => {
                "Figures marked `earlier` whose result file measured today's code: drop \
                 `earlier` from the marker (and from the sentence)"
            }
            Kind::Latest => {
                "Sentences that call a result latest or current while it did not measure \
                 today's code: name a run of today's code, or drop the word"
            }
            Kind::Runs => "The list of runs, generated from the result files",
            Kind::SettingCount => {
                "Counts of work marked `setting`: have a test count them (`<!-- figure \
                 asserted by TEST -->`, `<!-- figures: asserted by TEST -->`), or quote a \
                 result file"
            }
            Kind::Bound => {
                "Bounds rounded inward: after `at most` and the like the figure must be at \
                 least the value, after `at least` at most"
            }
            Kind::Value => "Figures that are not the value their marker names",
            Kind::Marker => "Markers that do not resolve, and tables that are not their file's",
            Kind::Unmarked => {
                "Figures without a marker: name the result file (`<!-- figure FILE: EXPR \
                 -->`), the test that asserts it, or say it is a setting (`<!-- setting -->`)"
            }
        }
    }
}

/// Result files, each read once.
struct Sources {
    root: PathBuf,
    loaded: HashMap<String, Result<Value, String>>,
    /// Whether each result file measured today's code, as [`fresh`] finds it.
    fresh: HashMap<String, Result<Freshness, String>>,
}

impl Sources {
    fn new(root: &Path) -> Sources {
        Sources {
            root: root.to_owned(),
            loaded: HashMap::new(),
            fresh: HashMap::new(),
        }
    }

    /// The values of a result file: a JSON file as it is, a Markdown file's tables as
    /// [`markdown_rows`] reads them.
    fn json(&mut self, file: &str) -> Result<&Value, String> {
        let root = &self.root;
        self.loaded
            .entry(file.to_owned())
            .or_insert_with(|| {
                let text = std::fs::read_to_string(root.join(file))
                    .map_err(|e| format!("cannot read {file}: {e}"))?;
                if file.ends_with(".md") {
                    return Ok(markdown_rows(&text));
                }
                if !file.ends_with(".json") {
                    return Err(format!(
                        "{file} is neither a JSON nor a Markdown result file"
                    ));
                }
                let json: Value =
                    serde_json::from_str(&text).map_err(|e| format!("{file} is not JSON: {e}"))?;
                Ok(renamed(json))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn text(&self, file: &str) -> Result<String, String> {
        std::fs::read_to_string(self.root.join(file))
            .map_err(|e| format!("cannot read {file}: {e}"))
    }
}

/// The rows of every table of a Markdown result file, as `{"rows": [{column: cell, …}, …]}`:
/// each column named by its header in snake case (`lost updates` is `lost_updates`), each cell
/// a number when it is one (`100.0%` is `100.0`), else its text.
fn markdown_rows(text: &str) -> Value {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect()
    };
    let mut rows = Vec::new();
    for table in tables_of(text) {
        let header: Vec<String> = cells(table[0])
            .iter()
            .map(|h| {
                h.to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
                    .join("_")
            })
            .collect();
        for line in table.iter().skip(2) {
            let row: serde_json::Map<String, Value> = header
                .iter()
                .zip(cells(line))
                .map(|(column, cell)| {
                    let number = cell.strip_suffix('%').unwrap_or(&cell).parse::<f64>().ok();
                    let value = number
                        .and_then(serde_json::Number::from_f64)
                        .map_or(Value::String(cell), Value::Number);
                    (column.clone(), value)
                })
                .collect();
            rows.push(Value::Object(row));
        }
    }
    serde_json::json!({ "rows": rows })
}

/// The project's name, as the programs that write result files carry it.
const NAME: &str = "fencelock";

/// A result file as read: one written under the project's former name (its `command` names the
/// program that wrote it, `<name>-bench` or `<name>-check`) with that name replaced by today's,
/// in keys and in text, as the rename did to its Markdown.
fn renamed(json: Value) -> Value {
    match former_name(&json) {
        Some(former) => replaced(json, &former),
        None => json,
    }
}

/// The project's name in a result file's `command` (`run.command` for the bench's, `command`
/// for the checker's), when it is not today's.
fn former_name(json: &Value) -> Option<String> {
    let command = json
        .pointer("/run/command")
        .or_else(|| json.get("command"))?
        .as_str()?;
    let program = command.split_whitespace().next()?.rsplit('/').next()?;
    let name = program
        .strip_suffix("-bench")
        .or_else(|| program.strip_suffix("-check"))?;
    (!name.is_empty() && name != NAME).then(|| name.to_owned())
}

fn replaced(json: Value, former: &str) -> Value {
    match json {
        Value::String(s) => Value::String(s.replace(former, NAME)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| replaced(v, former)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.replace(former, NAME), replaced(v, former)))
                .collect(),
        ),
        other => other,
    }
}

/// A marker's kind, from its comment's text.
enum Marker<'a> {
    /// `figure FILE: EXPR`, `figure earlier FILE: EXPR`, or `figure: EXPR` (no file).
    Figure {
        file: Option<&'a str>,
        expr: &'a str,
        earlier: bool,
    },
    /// `figure asserted by FILE`: a test reads the doc and asserts the figure.
    AssertedBy(&'a str),
    /// `setting` or `setting: why`: the figure before it is a setting, not a measurement.
    Setting,
    /// `quoted: SOURCE`: the figure before it is someone else's.
    Quoted,
    /// `figures: rows of FILE`, `figures: earlier rows of FILE` or `figures: asserted by
    /// FILE`, above a table.
    Table(TableSource<'a>),
    /// Any other comment.
    Other,
}

enum TableSource<'a> {
    RowsOf { file: &'a str, earlier: bool },
    AssertedBy(&'a str),
}

fn marker(comment: &str) -> Result<Marker<'_>, String> {
    let comment = comment.trim();
    if let Some(rest) = comment.strip_prefix("figures:") {
        let rest = rest.trim();
        return if let Some(file) = rest.strip_prefix("rows of ") {
            Ok(Marker::Table(TableSource::RowsOf {
                file: file.trim(),
                earlier: false,
            }))
        } else if let Some(file) = rest.strip_prefix("earlier rows of ") {
            Ok(Marker::Table(TableSource::RowsOf {
                file: file.trim(),
                earlier: true,
            }))
        } else if let Some(file) = rest.strip_prefix("asserted by ") {
            Ok(Marker::Table(TableSource::AssertedBy(file.trim())))
        } else {
            Err(format!(
                "unknown table marker {comment:?}: `figures: rows of FILE`, `figures: earlier \
                 rows of FILE` or `figures: asserted by FILE`"
            ))
        };
    }
    if let Some(rest) = comment.strip_prefix("figure") {
        return figure_marker(comment, rest.trim_start());
    }
    if comment == "setting" || comment.starts_with("setting:") {
        return Ok(Marker::Setting);
    }
    if let Some(source) = comment.strip_prefix("quoted:") {
        return if source.trim().is_empty() {
            Err("`quoted:` names no source".to_owned())
        } else {
            Ok(Marker::Quoted)
        };
    }
    Ok(Marker::Other)
}

/// A `figure` marker, `rest` what follows the word.
fn figure_marker<'a>(comment: &str, rest: &'a str) -> Result<Marker<'a>, String> {
    if let Some(expr) = rest.strip_prefix(':') {
        return Ok(Marker::Figure {
            file: None,
            expr: expr.trim(),
            earlier: false,
        });
    }
    if let Some(asserted) = rest.strip_prefix("asserted by ") {
        // `FILE` or `FILE: WHAT`, WHAT naming for the test which of its measurements it is.
        let (file, what) = match asserted.split_once(": ") {
            Some((file, what)) => (file.trim(), Some(what.trim())),
            None => (asserted.trim(), None),
        };
        let malformed = |s: &str| s.is_empty() || s.contains(char::is_whitespace);
        return if malformed(file) || what.is_some_and(malformed) {
            Err(format!(
                "{comment:?}: expected `figure asserted by FILE` or `figure asserted by FILE: WHAT`"
            ))
        } else {
            Ok(Marker::AssertedBy(file))
        };
    }
    let (earlier, rest) = match rest.strip_prefix("earlier") {
        Some(after) if after.starts_with([' ', ':']) => (true, after.trim_start()),
        _ => (false, rest),
    };
    if earlier && rest.starts_with(':') {
        return Err(format!(
            "{comment:?}: a figure computed from settings has no result file to be earlier than"
        ));
    }
    let (file, expr) = rest.split_once(": ").ok_or_else(|| {
        format!("{comment:?}: expected `figure FILE: EXPR` or `figure earlier FILE: EXPR`")
    })?;
    Ok(Marker::Figure {
        file: Some(file.trim()),
        expr: expr.trim(),
        earlier,
    })
}

/// A number as written in a doc: its byte range in the line and its text.
#[derive(Clone, Debug, PartialEq)]
struct Number {
    start: usize,
    end: usize,
    text: String,
}

/// Checks one doc's markers and lints its figures.
fn check_doc(doc: &str, text: &str, sources: &mut Sources, report: &mut Report) {
    report.docs += 1;
    let lines: Vec<&str> = text.lines().collect();
    let versions = versions(&lines);
    let mut fenced = false;
    // The units of the columns of the table being read, from its header.
    let mut columns: Option<Vec<Option<&'static str>>> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let number = i + 1;
        i += 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut found = Vec::new();
        // A table marker alone on its line covers the table below it.
        if let Some(Ok(Marker::Table(source))) = whole_comment(trimmed).map(marker) {
            while i < lines.len() && lines[i].trim().is_empty() {
                i += 1;
            }
            let table: Vec<&str> = lines[i..]
                .iter()
                .take_while(|l| l.trim_start().starts_with('|'))
                .map(|l| l.trim())
                .collect();
            i += table.len();
            report.tables += 1;
            found.extend(check_table(doc, &source, &table, sources));
        } else {
            let row = trimmed.starts_with('|');
            let header = row && columns.is_none();
            if !row {
                columns = None;
            } else if header {
                columns = Some(column_units(&mask(line)));
            }
            let cells = if row && !header {
                columns.as_deref()
            } else {
                None
            };
            let context = Context {
                doc,
                versions: &versions,
                columns: cells,
            };
            check_line(&context, line, sources, report, &mut found);
        }
        report
            .problems
            .extend(found.into_iter().map(|(kind, message)| Problem {
                kind,
                at: format!("{doc}:{number}"),
                message,
            }));
    }
    for (number, message) in fresh::latest_claims(doc, &lines, sources) {
        report.problems.push(Problem {
            kind: Kind::Latest,
            at: format!("{doc}:{number}"),
            message,
        });
    }
}

/// What a line is checked in: its doc, the doc's versions, and for a table row the units its
/// columns' headers name.
struct Context<'a> {
    doc: &'a str,
    versions: &'a BTreeSet<String>,
    columns: Option<&'a [Option<&'static str>]>,
}

impl Context<'_> {
    /// The unit the header of the column at byte `at` of the (masked) row names.
    fn column_unit(&self, masked: &str, at: usize) -> Option<&'static str> {
        let columns = self.columns?;
        let column = cell_bounds(masked).iter().filter(|p| **p < at).count();
        columns.get(column.checked_sub(1)?).copied().flatten()
    }

    /// The unit of the number at byte `at` of a (masked) table row, `after` the text that
    /// follows it: a count of work when the word after it is one (`1 script`), else its
    /// column's unit, unless a word of its own follows it (`512 leases` under `calls`);
    /// [`CONNECTIVES`] are no such word (`1 per operation` under `round trips`).
    fn count_in_cell(&self, masked: &str, at: usize, after: &str) -> Option<&'static str> {
        let column = self.column_unit(masked, at)?;
        let next = after.trim_start();
        let word_len = next
            .find(|c: char| !c.is_alphabetic() && c != '-')
            .unwrap_or(next.len());
        let word = next[..word_len].to_lowercase();
        if word.is_empty() || CONNECTIVES.contains(&word.as_str()) {
            Some(column)
        } else {
            work_unit(next)
        }
    }
}

/// Checks the markers of one line of prose and lints its figures.
fn check_line(
    context: &Context<'_>,
    line: &str,
    sources: &mut Sources,
    report: &mut Report,
    found: &mut Vec<(Kind, String)>,
) {
    let masked = mask(line);
    let mut consumed: BTreeSet<usize> = BTreeSet::new();
    for (start, end, comment) in comments(line) {
        let parsed = match marker(comment) {
            Ok(parsed) => parsed,
            Err(message) => {
                found.push((Kind::Marker, message));
                continue;
            }
        };
        if let Marker::Other = parsed {
            continue;
        }
        if let Marker::Table(_) = parsed {
            found.push((
                Kind::Marker,
                "a table marker must stand alone on the line above its table".to_owned(),
            ));
            continue;
        }
        let Some(figure) = figure_before(&masked[..start]) else {
            found.push((
                Kind::Marker,
                format!(
                    "{:?} follows no number (write it right after the figure and its unit)",
                    &line[start..end]
                ),
            ));
            continue;
        };
        consumed.insert(figure.start);
        match parsed {
            Marker::Figure {
                file,
                expr,
                earlier,
            } => {
                report.figures += 1;
                let bound = bound_before(&masked[..figure.start]);
                if let Err(problem) = check_figure(&figure.text, file, expr, bound, sources) {
                    found.push(problem);
                }
                let what = format!("{:?}", figure.text);
                if let Some(problem) =
                    file.and_then(|file| fresh::stale(file, earlier, &what, sources))
                {
                    found.push(problem);
                }
            }
            Marker::AssertedBy(test) => {
                report.asserted += 1;
                if let Err(message) = asserted_by(context.doc, test, sources) {
                    found.push((Kind::Marker, message));
                }
            }
            Marker::Setting => {
                report.settings += 1;
                let unit_before = &masked[figure.end..start];
                let unit = if unit_before.trim().is_empty() {
                    work_unit(&masked[end..]).or_else(|| {
                        context
                            .count_in_cell(&masked, figure.start, &masked[end..])
                            .filter(|u| WORK_UNITS.contains(u))
                    })
                } else {
                    work_unit(unit_before)
                };
                if let Some(unit) = unit {
                    found.push((
                        Kind::SettingCount,
                        format!(
                            "{} {unit} is a count of work, not a setting, in {:?}",
                            figure.text,
                            context_of(line, figure.start, end)
                        ),
                    ));
                }
            }
            Marker::Quoted => report.settings += 1,
            Marker::Other | Marker::Table(_) => {}
        }
    }
    let trimmed = line.trim_start();
    if is_link_definition(trimmed) {
        return;
    }
    for figure in numbers(&masked) {
        if consumed.contains(&figure.start) {
            continue;
        }
        let quoted = as_figure(&masked, &figure, context.versions).or_else(|| {
            context
                .count_in_cell(&masked, figure.start, &masked[figure.end..])
                .map(|unit| match work_unit(&masked[figure.end..]) {
                    Some(word) => format!("{} {word}", figure.text),
                    None => format!("{} (a count of {unit}, by its column)", figure.text),
                })
        });
        let Some(quoted) = quoted else {
            continue;
        };
        if let Some((allowed, _)) = NOT_MEASURED.iter().find(|(f, _)| *f == quoted) {
            report.allowed_used.insert(allowed);
            continue;
        }
        found.push((
            Kind::Unmarked,
            format!(
                "{quoted:?} has no marker, in {:?}",
                context_of(line, figure.start, figure.end)
            ),
        ));
    }
}

fn is_link_definition(trimmed: &str) -> bool {
    trimmed.starts_with('[') && trimmed.contains("]: ")
}

/// The byte positions of a (masked) table row's cell separators: its `|` not escaped.
fn cell_bounds(masked: &str) -> Vec<usize> {
    masked
        .char_indices()
        .filter(|(i, c)| *c == '|' && !masked[..*i].ends_with('\\'))
        .map(|(i, _)| i)
        .collect()
}

/// The unit each column of a table's (masked) header row names, if any: `round trips` in
/// `| operation | round trips |`. Units of one letter or symbol (`s`, `%`) are too easily
/// part of other words to be read from a header.
fn column_units(masked_header: &str) -> Vec<Option<&'static str>> {
    let bounds = cell_bounds(masked_header);
    bounds
        .windows(2)
        .map(|pair| {
            let header = masked_header[pair[0] + 1..pair[1]].to_lowercase();
            WORK_UNITS
                .iter()
                .chain(UNITS.iter())
                .filter(|unit| unit.chars().count() >= 2)
                .find(|unit| {
                    header.match_indices(**unit).any(|(at, _)| {
                        let before = header[..at].chars().next_back();
                        let after = header[at + unit.len()..].chars().next();
                        let word = |c: char| c.is_alphanumeric() || c == '\'';
                        let symbol = !unit.starts_with(char::is_alphabetic);
                        (symbol || !before.is_some_and(word)) && !after.is_some_and(word)
                    })
                })
                .copied()
        })
        .collect()
}

/// The count of work `text` starts with, after spaces: `commands` in `" commands each"`.
fn work_unit(text: &str) -> Option<&'static str> {
    let text = text.trim_start().to_lowercase();
    WORK_UNITS.iter().copied().find(|unit| {
        text.strip_prefix(unit)
            .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    })
}

/// Whether the words right before a figure make it a bound, and which words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    /// A plain figure: the value, rounded to the figure's precision.
    Exact,
    /// At least the value: `at most 0.02 s`.
    Upper(&'static str),
    /// At most the value: `at least 1.5 times`.
    Lower(&'static str),
}

/// The bound the (masked) text before a figure makes of it: the longest of [`UPPER_BOUNDS`]
/// and [`LOWER_BOUNDS`] it ends with, as whole words.
fn bound_before(before: &str) -> Bound {
    let text = before.trim_end().to_lowercase();
    let mut phrases: Vec<(&str, Bound)> = UPPER_BOUNDS
        .iter()
        .map(|p| (*p, Bound::Upper(p)))
        .chain(LOWER_BOUNDS.iter().map(|p| (*p, Bound::Lower(p))))
        .collect();
    phrases.sort_by_key(|(phrase, _)| std::cmp::Reverse(phrase.len()));
    phrases
        .into_iter()
        .find(|(phrase, _)| {
            text.strip_suffix(phrase).is_some_and(|rest| {
                !phrase.starts_with(char::is_alphabetic)
                    || !rest.ends_with(|c: char| c.is_alphanumeric())
            })
        })
        .map_or(Bound::Exact, |(_, bound)| bound)
}

/// Whether the test `file` reads `doc`, as a test that asserts the doc's figures must: it names
/// the doc's file.
fn asserted_by(doc: &str, file: &str, sources: &Sources) -> Result<(), String> {
    let test = sources.text(file)?;
    let name = Path::new(doc)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if test.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "{file} does not read {name}, so it cannot assert this doc's figures"
        ))
    }
}

/// The comment that is the whole of `line`, if it is one.
fn whole_comment(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")
        .filter(|inner| !inner.contains("-->"))
}

/// The HTML comments of a line: their byte range and inner text.
fn comments(line: &str) -> Vec<(usize, usize, &str)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = line[from..].find("<!--").map(|at| from + at) {
        let Some(close) = line[open + 4..].find("-->").map(|at| open + 4 + at) else {
            break;
        };
        found.push((open, close + 3, &line[open + 4..close]));
        from = close + 3;
    }
    found
}

/// `line` with what is not prose blanked out, byte for byte: comments, code spans and link
/// destinations.
fn mask(line: &str) -> String {
    let mut bytes: Vec<u8> = line.as_bytes().to_vec();
    let blank = |bytes: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut bytes[from..to] {
            // Keeps UTF-8 valid: every byte of the range becomes a space.
            *b = b' ';
        }
    };
    for (start, end, _) in comments(line) {
        blank(&mut bytes, start, end);
    }
    // Code spans: a run of backticks up to the next run of as many.
    let mut at = 0;
    while let Some(open) = line[at..].find('`').map(|i| at + i) {
        let run = line[open..].chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(run);
        let after = open + run;
        match line[after..].find(&fence).map(|i| after + i) {
            Some(close) => {
                blank(&mut bytes, open, close + run);
                at = close + run;
            }
            None => at = after,
        }
    }
    // Link destinations: `](…)` and `<http…>`.
    let masked_so_far = String::from_utf8(bytes.clone()).unwrap_or_default();
    let mut at = 0;
    while let Some(open) = masked_so_far[at..].find("](").map(|i| at + i) {
        let close = masked_so_far[open..]
            .find(')')
            .map_or(masked_so_far.len(), |i| open + i + 1);
        blank(&mut bytes, open + 1, close);
        at = close;
    }
    let mut at = 0;
    while let Some(open) = masked_so_far[at..].find("<http").map(|i| at + i) {
        let close = masked_so_far[open..]
            .find('>')
            .map_or(masked_so_far.len(), |i| open + i + 1);
        blank(&mut bytes, open, close);
        at = close;
    }
    String::from_utf8(bytes).unwrap_or_else(|_| " ".repeat(line.len()))
}

/// Every number of a (masked) line: digits, with thousands separators (`1,045,358`) and
/// decimals (`0.81`, or `7.0.15`), not inside a word (`p50`, `F17`) nor after `-`, `:` or `^`
/// (dates, times, powers).
fn numbers(line: &str) -> Vec<Number> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let previous = i.checked_sub(1).map(|p| bytes[p]);
        let inside = previous.is_some_and(|p| {
            p.is_ascii_alphanumeric() || matches!(p, b'.' | b',' | b'_' | b'-' | b':' | b'^' | b'/')
        });
        if !c.is_ascii_digit() || inside {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        // Thousands: a comma and exactly three digits.
        while i + 3 < bytes.len()
            && bytes[i] == b','
            && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && !bytes.get(i + 4).is_some_and(u8::is_ascii_digit)
        {
            i += 4;
        }
        while i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
        }
        // A number run into letters is a word (`2cc9221`, `3s` in a flag), unless the letters
        // are a unit.
        found.push(Number {
            start,
            end: i,
            text: line[start..i].to_owned(),
        });
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
            i += 1;
        }
    }
    found
}

/// The unit written right after a number, as `" ms"`, `"%"` or `"×"`.
fn unit_after(rest: &str) -> Option<&str> {
    let space = [' ', '\u{a0}']
        .into_iter()
        .find(|c| rest.starts_with(*c))
        .map_or(0, char::len_utf8);
    let skips = if space > 0 { vec![0, space] } else { vec![0] };
    for skip in skips {
        for unit in UNITS {
            let Some(after) = rest[skip..].strip_prefix(unit) else {
                continue;
            };
            let symbol = !unit.starts_with(char::is_alphabetic);
            if symbol || !after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                return Some(&rest[..skip + unit.len()]);
            }
        }
    }
    None
}

/// The figure `number` is, as quoted with its unit (`"30 s"`), or `None` when it is not a
/// figure: no unit, no decimals and no thousands, or a version (`7.0.15`, `Redis 6.2`, or
/// `6.2` in a doc that says `Redis 6.2` somewhere).
fn as_figure(line: &str, number: &Number, versions: &BTreeSet<String>) -> Option<String> {
    if let Some(unit) = unit_after(&line[number.end..]) {
        return Some(format!("{}{unit}", number.text));
    }
    let dotted = number.text.matches('.').count();
    let version = dotted > 1
        || (dotted == 1
            && (versions.contains(&number.text) || after_version_word(&line[..number.start])));
    (!version && (dotted == 1 || number.text.contains(','))).then(|| number.text.clone())
}

/// Whether the word before a number names a product or says "version".
fn after_version_word(before: &str) -> bool {
    before
        .split_whitespace()
        .next_back()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
                .to_lowercase()
        })
        .is_some_and(|w| VERSION_WORDS.contains(&w.as_str()))
}

/// The versions a doc names after a product (`Redis 6.2`): the same numbers are versions
/// anywhere else in it (`older than 6.2`).
fn versions(lines: &[&str]) -> BTreeSet<String> {
    lines
        .iter()
        .flat_map(|line| {
            let masked = mask(line);
            numbers(&masked)
                .into_iter()
                .filter(|n| n.text.matches('.').count() == 1)
                .filter(|n| after_version_word(&masked[..n.start]))
                .map(|n| n.text)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The number a marker at the end of `before` follows: the last number, with at most a unit
/// (one word without digits) between it and the marker.
fn figure_before(before: &str) -> Option<Number> {
    let last = numbers(before).pop()?;
    let gap = &before[last.end..];
    let word = gap.strip_prefix(' ').unwrap_or(gap);
    let unit_like = word.chars().count() <= 12
        && !word.contains(|c: char| c.is_whitespace() || c.is_ascii_digit());
    unit_like.then_some(last)
}

/// Some words either side of a figure, for the report.
fn context_of(line: &str, start: usize, end: usize) -> String {
    let from = line[..start]
        .char_indices()
        .rev()
        .nth(30)
        .map_or(0, |(i, _)| i);
    let to = line[end..]
        .char_indices()
        .nth(20)
        .map_or(line.len(), |(i, _)| end + i);
    line[from..to].trim().to_owned()
}

/// Checks one figure against its marker: `Err` with what is wrong, and of which kind.
fn check_figure(
    quoted: &str,
    file: Option<&str>,
    expr: &str,
    bound: Bound,
    sources: &mut Sources,
) -> Result<(), (Kind, String)> {
    let unresolved = |message: String| (Kind::Marker, message);
    let (expr, significant) = match expr.rsplit_once('~') {
        Some((expr, digits)) => (
            expr.trim(),
            Some(digits.trim().parse::<i32>().map_err(|_| {
                unresolved(format!(
                    "bad rounding `~{digits}` (`~N`: N significant digits)"
                ))
            })?),
        ),
        None => (expr, None),
    };
    let value = match file {
        Some(file) => {
            let json = sources.json(file).map_err(unresolved)?;
            expr::evaluate(expr, json).map_err(|e| unresolved(format!("{file}: {e}")))?
        }
        None => expr::evaluate(expr, &Value::Null).map_err(unresolved)?,
    };
    let source = file.unwrap_or("the arithmetic");
    let plain = quoted.replace(',', "");
    let shown: f64 = plain
        .parse()
        .map_err(|_| unresolved(format!("{quoted} is not a number")))?;
    // What a float's last bit may add to a value written exactly.
    let slack = 1e-9 * value.abs().max(1.0);
    let decimals = plain.split_once('.').map_or(0, |(_, d)| d.len());
    match bound {
        Bound::Upper(words) if shown + slack < value => Err((
            Kind::Bound,
            format!(
                "the doc says {words} {quoted}, but {source} gives {value}: an upper bound \
                 rounds up ({} to the doc's precision)",
                outward(value, decimals, f64::ceil)
            ),
        )),
        Bound::Lower(words) if shown - slack > value => Err((
            Kind::Bound,
            format!(
                "the doc says {words} {quoted}, but {source} gives {value}: a lower bound \
                 rounds down ({} to the doc's precision)",
                outward(value, decimals, f64::floor)
            ),
        )),
        Bound::Upper(_) | Bound::Lower(_) => Ok(()),
        Bound::Exact => {
            let expected = written_as(value, quoted, significant);
            if expected == plain {
                Ok(())
            } else {
                Err((
                    Kind::Value,
                    format!(
                        "the doc says {quoted}, but {source} gives {value} (to the doc's \
                         precision: {expected})"
                    ),
                ))
            }
        }
    }
}

/// `value` rounded with `round` (up or down) to `decimals` decimals, as a doc would write it.
fn outward(value: f64, decimals: usize, round: fn(f64) -> f64) -> String {
    let scale = 10f64.powi(i32::try_from(decimals).unwrap_or(0));
    // A value a float stores a hair above or below the written one rounds to it.
    let scaled = value * scale;
    let nearest = scaled.round();
    let rounded = if (scaled - nearest).abs() < 1e-9 * scaled.abs().max(1.0) {
        nearest
    } else {
        round(scaled)
    };
    format!("{:.decimals$}", rounded / scale)
}

/// `value` written as `quoted` is: as many decimals, after rounding to `significant` digits
/// when given.
fn written_as(value: f64, quoted: &str, significant: Option<i32>) -> String {
    let rounded = match significant {
        Some(digits) if value != 0.0 && digits > 0 => {
            let magnitude = value.abs().log10().floor() as i32;
            let scale = 10f64.powi(digits - 1 - magnitude);
            (value * scale).round() / scale
        }
        _ => value,
    };
    let decimals = quoted.split_once('.').map_or(0, |(_, d)| d.len());
    format!("{rounded:.decimals$}")
}

/// Checks a table under a table marker: what is wrong with it, one problem each.
fn check_table(
    doc: &str,
    source: &TableSource<'_>,
    table: &[&str],
    sources: &mut Sources,
) -> Vec<(Kind, String)> {
    if table.len() < 2 {
        return vec![(
            Kind::Marker,
            "a table marker with no table right below it".to_owned(),
        )];
    }
    match source {
        TableSource::AssertedBy(file) => match asserted_by(doc, file, sources) {
            Ok(()) => Vec::new(),
            Err(message) => vec![(Kind::Marker, message)],
        },
        TableSource::RowsOf { file, earlier } => {
            let text = match sources.text(file) {
                Ok(text) => text,
                Err(message) => return vec![(Kind::Marker, message)],
            };
            let header = table[0];
            let tables = tables_of(&text);
            let Some(rows) = tables
                .iter()
                .find(|t| t.first() == Some(&header))
                .map(|t| t.iter().skip(2).copied().collect::<BTreeSet<&str>>())
            else {
                return vec![(
                    Kind::Marker,
                    format!("no table of {file} has the header {header}"),
                )];
            };
            let mut found: Vec<(Kind, String)> = table[2..]
                .iter()
                .filter(|row| !rows.contains(*row))
                .map(|row| (Kind::Marker, format!("this row is not in {file}: {row}")))
                .collect();
            found.extend(fresh::stale(file, *earlier, "the table below", sources));
            found
        }
    }
}

/// The Markdown tables of a file, each as its trimmed lines.
fn tables_of(text: &str) -> Vec<Vec<&str>> {
    let mut tables: Vec<Vec<&str>> = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with('|') {
            current.push(line.trim());
        } else if !current.is_empty() {
            tables.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tables.push(current);
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock path of a scratch root, and the line its Markdown results carry.
    const MEASURED: &[&str] = &["crates/fencelock/src"];

    /// A scratch root with a lock path, result files that measured it, a table and a test that
    /// reads `guide.md`.
    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = |p: &str| dir.path().join(p);
        std::fs::create_dir_all(path("results")).expect("a results directory");
        std::fs::create_dir_all(path("crates/fencelock/src")).expect("a lock path");
        std::fs::write(path("crates/fencelock/src/lib.rs"), "//! the lock\n").expect("a source");
        let digest = fencelock_sources::digest(dir.path(), MEASURED).expect("a digest");
        let line = fencelock_sources::line(&digest, MEASURED);
        std::fs::write(
            path("results/run.json"),
            format!(
                r#"{{"run": {{"command": "oldname-bench uncontended",
                           "sources": {{"digest": "{digest}", "paths": ["crates/fencelock/src"]}}}},
                "results": {{"rows": [{{"tasks": 1, "ratio": 0.8079, "oldname": {{"cmds": 7.0002}}}},
                                     {{"tasks": 64, "ratio": 0.3589, "oldname": {{"cmds": 7.0}}}}],
                            "share": 0.229, "count": 196413.4}}}}"#
            ),
        )
        .expect("a result file");
        std::fs::write(
            path("results/run.md"),
            format!(
                "# run\n\n{line}\n\n| tasks | ratio |\n|---|---|\n| 1 | 0.81 |\n| 64 | 0.36 |\n"
            ),
        )
        .expect("a result table");
        std::fs::write(path("memory.rs"), "// reads docs/guide.md\n").expect("a test");
        std::fs::write(
            path("results/check.md"),
            format!(
                "# check\n\n- {line}\n\n| strategy | fault | lost updates | availability |\n\
                 |---|---|--:|--:|\n| fencelock-mutex | pause | 2 | 99.7% |\n\
                 | fencelock-mutex | none | 0 | 100.0% |\n"
            ),
        )
        .expect("a checker table");
        dir
    }

    fn problems(doc: &str) -> Vec<String> {
        let dir = root();
        let mut sources = Sources::new(dir.path());
        let mut report = Report::default();
        check_doc("docs/guide.md", doc, &mut sources, &mut report);
        report.problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn figures_equal_to_their_files_pass() {
        let doc = "One task reaches 0.81<!-- figure results/run.json: results.rows[tasks=1].ratio --> \
                   of the limit, 64 reach 0.36<!-- figure results/run.json: results.rows[1].ratio --> of it, \
                   2.25×<!-- figure results/run.json: results.rows[0].ratio / results.rows[1].ratio --> \
                   apart, at 7 commands<!-- figure results/run.json: results.rows[0].fencelock.cmds --> \
                   and 23%<!-- figure results/run.json: results.share * 100 --> of a core: 196,413 \
                   commands<!-- figure results/run.json: results.count -->, 200,000<!-- figure results/run.json: results.count ~1 -->.";
        assert_eq!(problems(doc), Vec::<String>::new());
    }

    #[test]
    fn markdown_tables_are_sources_too() {
        let doc = "2<!-- figure results/check.md: rows[fault=pause].lost_updates --> lost updates \
                   at 99.7%<!-- figure results/check.md: rows[strategy=fencelock-mutex, fault=pause].availability -->, \
                   2<!-- figure results/check.md: sum(rows[*].lost_updates) --> in all.";
        assert_eq!(problems(doc), Vec::<String>::new());
        assert_eq!(
            problems(
                "3 lost updates<!-- figure results/check.md: rows[fault=pause].lost_updates -->"
            )
            .len(),
            1
        );
    }

    #[test]
    fn a_wrong_figure_fails_with_its_line_and_the_files_value() {
        let doc = "intro\n\nOne task reaches 0.88<!-- figure results/run.json: results.rows[tasks=1].ratio -->.";
        let found = problems(doc);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("docs/guide.md:3: the doc says 0.88"),
            "{found:?}"
        );
        assert!(found[0].contains("0.81"), "{found:?}");
        // One decimal too many is a wrong figure too: the precision is part of the claim.
        assert_eq!(
            problems("0.808<!-- figure results/run.json: results.rows[0].ratio -->").len(),
            0
        );
        assert_eq!(
            problems("0.807<!-- figure results/run.json: results.rows[0].ratio -->").len(),
            1
        );
    }

    #[test]
    fn markers_that_do_not_resolve_fail() {
        for doc in [
            "0.81<!-- figure results/none.json: results.rows[0].ratio -->",
            "0.81<!-- figure results/run.md: results.rows[0].ratio -->",
            "0.81<!-- figure results/run.json: results.rows[tasks=2].ratio -->",
            "0.81<!-- figure results/run.json results.rows[0].ratio -->",
            "no number here<!-- figure results/run.json: results.rows[0].ratio -->",
            "0.81 of the limit<!-- figure results/run.json: results.rows[0].ratio -->",
        ] {
            assert!(!problems(doc).is_empty(), "{doc}");
        }
    }

    #[test]
    fn unmarked_figures_are_reported_and_settings_are_not() {
        let found = problems("Handoffs take 0.26 ms at p50, 16 commands each, 1.05× the peer's.");
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("\"0.26 ms\" has no marker"), "{found:?}");
        assert!(found[1].contains("\"16 commands\""), "{found:?}");
        assert!(found[2].contains("\"1.05×\""), "{found:?}");
        assert_eq!(
            problems("2,045 sections, 23% of a core, 3.5 of them").len(),
            3
        );
        for fine in [
            "The default lease is 30 s, renewed every 10 s, with 1% + 2 ms of drift.",
            "A 3 s<!-- setting --> lease, or 7<!-- setting: the rounds --> rounds.",
            "The book reports 220,000<!-- quoted: Redis in Action 6.2 --> operations.",
            "Redis 7.0.15, Redis 6.2 and Rust 1.88 are versions; so is 8.1.8, and 6.2 again.",
            "`0.81` and `30s` are code, [this](https://example.com/1.5%) a link.",
            "A date, 2026-11-23 at 04:30:10Z, and p50, F17, 128-bit, 2^53 are words.",
            "```\n0.81 ms in a code block\n```",
            "1.97 s<!-- figure: 3 * 2 / 3 - (0.01 * 3 + 0.002) -->",
            "[`x`]: https://docs.rs/x/0.1.5/x.html",
        ] {
            assert_eq!(problems(fine), Vec::<String>::new(), "{fine}");
        }
        assert_eq!(
            problems("1.98 s<!-- figure: 3 * 2 / 3 - 0.032 -->").len(),
            1
        );
        assert!(problems("220,000<!-- quoted: -->")[0].contains("names no source"));
    }

    #[test]
    fn tables_are_checked_row_by_row() {
        let table = "<!-- figures: rows of results/run.md -->\n\n| tasks | ratio |\n|---|--:|\n| 64 | 0.36 |\n\nAfter.";
        assert_eq!(problems(table), Vec::<String>::new());
        let wrong = table.replace("0.36", "0.44");
        let found = problems(&wrong);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("this row is not in results/run.md: | 64 | 0.44 |"));
        let header = table.replace("| tasks | ratio |", "| tasks | share |");
        assert!(problems(&header)[0].contains("no table of results/run.md has the header"));
        let asserted = "<!-- figures: asserted by memory.rs -->\n| primitive | bytes |\n|---|---|\n| Mutex | 152 |";
        assert_eq!(problems(asserted), Vec::<String>::new());
        let unread = asserted.replace("memory.rs", "results/run.md");
        assert!(problems(&unread)[0].contains("does not read guide.md"));
        // Without the marker, the table's figures are unmarked.
        assert_eq!(
            problems("| tasks | ratio |\n|---|---|\n| 64 | 0.36 |").len(),
            1
        );
    }

    #[test]
    fn bounds_are_read_from_the_words_before_a_figure() {
        assert_eq!(bound_before("waits at most "), Bound::Upper("at most"));
        assert_eq!(bound_before("no more than "), Bound::Upper("no more than"));
        assert_eq!(bound_before("a wait ≤ "), Bound::Upper("≤"));
        assert_eq!(bound_before("At least "), Bound::Lower("at least"));
        assert_eq!(bound_before("is more than "), Bound::Lower("more than"));
        assert_eq!(bound_before("a handover "), Bound::Exact);
        assert_eq!(bound_before("reaches "), Bound::Exact);
        // A lower bound rounds down; a bound may be loose, and true.
        let doc = |words: &str, figure: &str| {
            format!("{words} {figure}<!-- figure results/run.json: results.rows[0].ratio -->")
        };
        assert_eq!(problems(&doc("at least", "0.80")), Vec::<String>::new());
        assert_eq!(problems(&doc("at least", "0.81")).len(), 1);
        assert_eq!(problems(&doc("under", "0.81")), Vec::<String>::new());
        assert_eq!(problems(&doc("under", "1")), Vec::<String>::new());
        assert_eq!(problems(&doc("under", "0.80")).len(), 1);
    }

    #[test]
    fn results_of_todays_code_are_quoted_plainly_and_only_so() {
        let marked = "0.81<!-- figure earlier results/run.json: results.rows[0].ratio -->";
        let found = problems(marked);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("is marked earlier, but results/run.json measured today's"));
        let table = "<!-- figures: earlier rows of results/run.md -->\n| tasks | ratio |\n|---|--:|\n| 64 | 0.36 |";
        assert_eq!(problems(table).len(), 1);
        assert!(problems("1<!-- figure earlier: 1 -->")[0].contains("no result file"));
        let latest = "The latest run, [run](../results/run.json), gives 0.81<!-- figure \
                      results/run.json: results.rows[0].ratio -->.";
        assert_eq!(problems(latest), Vec::<String>::new());
    }

    #[test]
    fn numbers_under_a_header_with_a_unit_are_figures() {
        let table = "| operation | round trips | note |\n|---|---|---|\n\
                     | `unlock` | 1 | 2 keys |\n| wait | 1 per wake, 1 script | 512 leases |";
        let found = problems(table);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("\"1 (a count of round trips, by its column)\" has no marker"));
        assert!(found[2].contains("\"1 script\""), "{found:?}");
        let setting = "| operation | commands |\n|---|---|\n| release | 8<!-- setting --> |";
        assert!(problems(setting)[0].contains("8 commands is a count of work"));
        let leases =
            "| operation | calls |\n|---|---|\n| renewal | up to 512<!-- setting --> leases |";
        assert_eq!(problems(leases), Vec::<String>::new());
        let asserted = "<!-- figures: asserted by memory.rs -->\n| operation | round trips |\n|---|---|\n| unlock | 1 |";
        assert_eq!(problems(asserted), Vec::<String>::new());
    }

    #[test]
    fn a_figure_a_test_asserts_names_a_test_that_reads_the_doc() {
        assert_eq!(
            problems("8 commands<!-- figure asserted by memory.rs -->"),
            Vec::<String>::new()
        );
        assert!(
            problems("8 commands<!-- figure asserted by results/run.md -->")[0]
                .contains("does not read guide.md")
        );
        assert!(problems("8 commands<!-- figure asserted by none.rs -->")[0]
            .contains("cannot read none.rs"));
        assert_eq!(
            problems("8 commands<!-- figure asserted by memory.rs: mutex.offer -->"),
            Vec::<String>::new()
        );
        assert!(
            problems("8 commands<!-- figure asserted by memory.rs: two words -->")[0]
                .contains("expected `figure asserted by FILE`")
        );
    }

    #[test]
    fn result_files_of_the_former_name_are_read_with_todays() {
        let bench = serde_json::json!({"run": {"command": "oldname-bench --out x peers"},
                                       "rows": [{"library": "oldname Mutex", "oldname": 1}]});
        assert_eq!(
            renamed(bench),
            serde_json::json!({"run": {"command": "fencelock-bench --out x peers"},
                               "rows": [{"library": "fencelock Mutex", "fencelock": 1}]})
        );
        let check = serde_json::json!({"command": "./target/release/oldname-check soak"});
        assert_eq!(former_name(&check).as_deref(), Some("oldname"));
        let today = serde_json::json!({"run": {"command": "fencelock-bench takeover"}});
        assert_eq!(former_name(&today), None);
        assert_eq!(former_name(&serde_json::json!({"rows": []})), None);
    }

    #[test]
    fn units_are_read_after_numbers() {
        assert_eq!(unit_after(" ms, then"), Some(" ms"));
        assert_eq!(unit_after("% of a core"), Some("%"));
        assert_eq!(unit_after("× the"), Some("×"));
        assert_eq!(unit_after(" seconds"), Some(" seconds"));
        assert_eq!(unit_after(" secret"), None);
        assert_eq!(unit_after(" sets"), None);
        assert_eq!(unit_after("/s each"), Some("/s"));
        assert_eq!(unit_after(" per handoff"), None);
        assert_eq!(unit_after(""), None);
    }

    #[test]
    fn written_as_rounds_like_the_bench() {
        assert_eq!(written_as(0.8079, "0.81", None), "0.81");
        assert_eq!(written_as(26.57, "27", None), "27");
        assert_eq!(written_as(118.4, "120", Some(2)), "120");
        assert_eq!(written_as(0.0712, "0.07", Some(1)), "0.07");
        assert_eq!(written_as(1712.4, "1712", None), "1712");
    }
}
