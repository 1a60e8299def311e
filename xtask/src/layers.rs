//! The layering of fencelock's library (`ARCHITECTURE.md`): every module sits in one layer, a
//! module uses only modules of its own layer or of layers below it, and the modules of one
//! layer never use each other in a circle. The check reads every `crate::…` path of
//! `crates/fencelock/src` (a `use` or a path in code, comments left out) and reports each one
//! that points up, as `file:line`, and each circle, with the paths that close it.
//!
//! A unit of the check is a file's module: `core/acquire.rs` is `core::acquire`, `kinds/mutex.rs`
//! and what sits in `kinds/mutex/` are `kinds::mutex`, `transport/sentinel/master.rs` is
//! `transport::sentinel`. A path to an item re-exported at the crate root (`crate::Client`)
//! counts as a path to the module it is re-exported from, as `lib.rs` says: a re-export is no
//! way around a layer.
//!
//! An import is not the only way up: code of a higher layer can be installed below it and
//! called from there. Through a trait that is seen: an `impl` of a trait in a layer above the
//! trait's own is a call up, and each one must be listed in [`CALLS_UP`], with its reason, and
//! named in `ARCHITECTURE.md`. Through a bare function pointer it is not: no text says where
//! its value comes from, so every `fn(…)` type below the façade is listed in
//! [`FUNCTION_POINTERS`] with what fills it and what calls it, and any other fails.
//!
//! Lua is read too. A script is made of `.lua` files prepended to its own at build time
//! (`Lua::new(&[FENCE, VALUE, include_str!("mutex/acquire.lua")])`), and a file calls what the
//! files before it define: `core/force.lua` calling `is_released` of `kinds/value/value.lua`
//! would be a core module using a kinds one. A `.lua` file is a unit of its own
//! (`kinds/value/value.lua` is `kinds::value`, `core/force.lua` is `core::force`); each name
//! it uses that an earlier file of the same script defines at its top level is a path from
//! it to that file, and the module that declares a script uses each file of it. Both are
//! held to the layers and circles as imports are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// fencelock's layers, lowest first, each with the top-level modules (files or folders of
/// `src/`) it holds.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "base",
        &[
            "error", "cycle", "options", "keys", "token", "race", "testing",
        ],
    ),
    ("transport", &["transport"]),
    ("core", &["core"]),
    ("kinds", &["kinds"]),
    (
        "façade",
        &[
            "client", "connect", "inspect", "check", "blocking", "fuzzing",
        ],
    ),
];

/// The top-level modules whose files are units of their own (`core/acquire.rs` is
/// `core::acquire`); every other folder is one unit.
const FOLDERS_OF_UNITS: [&str; 3] = ["core", "kinds", "transport"];

/// A call a layer makes up into a higher one: through a trait it declares, which the higher
/// layer implements.
struct CallUp {
    /// The trait's module (a unit) and name.
    module: &'static str,
    name: &'static str,
    /// The layer its implementations are in.
    implemented_in: &'static str,
    /// Why the call goes up.
    why: &'static str,
}

/// Every call up of the library, each named in `ARCHITECTURE.md`.
const CALLS_UP: [CallUp; 2] = [
    CallUp {
        module: "core::kind",
        name: "Kind",
        implemented_in: "kinds",
        why: "the core runs every kind through what the kind tells it: its scripts, its \
              renewals, whom a release wakes",
    },
    CallUp {
        module: "core::waits",
        name: "Holders",
        implemented_in: "façade",
        why: "a waiter's deadlock check and the wait-for graph need the holds of every kind, \
              which only the façade can read",
    },
];

/// A function pointer type below the façade: the unit it is written in, the field (or type)
/// it is the type of, and what fills it and what calls it, neither above the other.
type FunctionPointer = (&'static str, &'static str, &'static str);

/// Every function pointer type below the façade.
const FUNCTION_POINTERS: [FunctionPointer; 2] = [
    (
        "core::stored",
        "judge",
        "each kind's reading of its own storage, in its `STORED`; called by the façade's \
         inspection, never by the core",
    ),
    (
        "kinds::handoff_model",
        "reached",
        "a goal of the model's traces, written and called in the model",
    ),
];

/// The library's sources, from this crate's directory.
const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/fencelock/src");

/// The map of the library, which names every call up.
const ARCHITECTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../ARCHITECTURE.md");

/// Checks fencelock's sources: `Err` lists every upward path, every circle inside a layer,
/// and every module in no layer.
pub(crate) fn check() -> Result<(), String> {
    let root = Path::new(SOURCES);
    let mut files = Vec::new();
    collect(root, root, &mut files)?;
    let architecture = std::fs::read_to_string(ARCHITECTURE)
        .map_err(|e| format!("cannot read {ARCHITECTURE}: {e}"))?;
    let mut problems = problems(&files)?;
    problems.extend(reaches_of_kinds(&files));
    // One module style: a module with children is `name.rs` beside its folder `name/`.
    problems.extend(
        files
            .iter()
            .filter(|(path, _)| path == "mod.rs" || path.ends_with("/mod.rs"))
            .map(|(path, _)| format!("{path}: name it after its folder, beside the folder")),
    );
    problems.extend(calls_up(
        &files,
        &architecture,
        &CALLS_UP,
        &FUNCTION_POINTERS,
    ));
    if problems.is_empty() {
        let calls: Vec<String> = CALLS_UP
            .iter()
            .map(|call| {
                let from = layer_of(call.module).map_or("?", |at| LAYERS[at].0);
                format!("{} ({from} -> {})", call.name, call.implemented_in)
            })
            .collect();
        println!(
            "layers: every import points down or sideways, no circle; {} calls up, each \
             through a trait listed in CALLS_UP: {}",
            calls.len(),
            calls.join(", ")
        );
        return Ok(());
    }
    Err(format!(
        "against the layers of ARCHITECTURE.md (xtask/src/layers.rs):\n{}",
        problems.join("\n")
    ))
}

/// What a kind may not name of the core: the fields of what every lock of a client shares, the
/// nodes and their connections. A kind reads its client through the methods of `Shared` and
/// `Lock` (`core/shared.rs`, `core/kind.rs`) and sends its scripts through `Lock`, so that the
/// core's resends, its coalescing and its choice of a script's variant hold for each kind's
/// every request. The handoff model, a test that replays traces on bare connections, is left
/// out.
const KINDS_REACH_NOT: [&str; 10] = [
    "shared.nodes",
    "shared.options",
    "shared.id",
    "shared.keeper",
    "shared.notifier",
    "shared.holds",
    "shared.server",
    "shared.holders",
    "crate::core::nodes",
    "crate::transport::conn",
];

/// Each reach of a kind into the core beyond its narrow API, as `file:line`.
fn reaches_of_kinds(files: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let kinds = files.iter().filter(|(path, _)| {
        path.starts_with("kinds/")
            && path.ends_with(".rs")
            && !path.starts_with("kinds/handoff_model")
    });
    for (path, text) in kinds {
        // The code without its whitespace, each character with its line: a reach written over
        // several lines (`lock\n.shared\n.nodes`) is one reach.
        let (squeezed, lines): (String, Vec<usize>) = code(text)
            .lines()
            .enumerate()
            .flat_map(|(at, line)| line.chars().map(move |c| (c, at + 1)))
            .filter(|(c, _)| !c.is_whitespace())
            .unzip();
        for reach in KINDS_REACH_NOT {
            for (at, _) in squeezed.match_indices(reach) {
                let line = squeezed[..at].chars().count();
                problems.push(format!(
                    "{path}:{}: a kind reaches `{reach}`: use the methods of `Shared` or `Lock`",
                    lines[line]
                ));
            }
        }
    }
    problems
}

/// What is wrong with the layering of these files (path relative to `src/`, text).
fn problems(files: &[(String, String)]) -> Result<Vec<String>, String> {
    let lib = files
        .iter()
        .find(|(path, _)| path == "lib.rs")
        .map(|(_, text)| text.as_str())
        .ok_or("crates/fencelock/src/lib.rs is missing")?;
    let reexports = reexports(lib);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, text) in files.iter().filter(|(path, _)| path.ends_with(".rs")) {
        let Some(unit) = unit_of_file(path) else {
            continue;
        };
        let Some(layer) = layer_of(&unit) else {
            problems.push(format!(
                "{path}: module `{unit}` is in no layer: add it to LAYERS"
            ));
            continue;
        };
        for (line, used) in crate_paths(&code(text)) {
            let Some(first) = used.first() else {
                // `$crate::$item` in a macro: the item is the caller's to name.
                continue;
            };
            let target = match reexports.get(first) {
                Some(module) => module.clone(),
                None => unit_of_path(&used),
            };
            match layer_of(&target) {
                Some(to) if to > layer => problems.push(format!(
                    "{path}:{line}: {} module `{unit}` uses {} module `{target}`",
                    LAYERS[layer].0, LAYERS[to].0
                )),
                Some(to) if to == layer && target != unit => {
                    edges
                        .entry(unit.clone())
                        .or_default()
                        .entry(target)
                        .or_insert_with(|| format!("{path}:{line}"));
                }
                Some(_) => {}
                None => problems.push(format!(
                    "{path}:{line}: `crate::{}` is in no layer: add it to LAYERS",
                    used.join("::")
                )),
            }
        }
    }
    for lua in lua_uses(files, &mut problems) {
        let (Some(from), Some(to)) = (layer_of(&lua.from), layer_of(&lua.to)) else {
            problems.push(format!(
                "{}: `{}` or `{}` is in no layer: add it to LAYERS",
                lua.at, lua.from, lua.to
            ));
            continue;
        };
        if to > from {
            problems.push(format!(
                "{}: {} Lua `{}` uses {} Lua `{}` ({})",
                lua.at, LAYERS[from].0, lua.from, LAYERS[to].0, lua.to, lua.what
            ));
        } else if to == from && lua.to != lua.from {
            edges
                .entry(lua.from)
                .or_default()
                .entry(lua.to)
                .or_insert(lua.at);
        }
    }
    for circle in circles(&edges) {
        let ties: Vec<String> = circle
            .iter()
            .flat_map(|from| {
                edges[from]
                    .iter()
                    .filter(|(to, _)| circle.contains(*to))
                    .map(move |(to, at)| format!("{from} -> {to} ({at})"))
            })
            .collect();
        problems.push(format!(
            "an import circle of {} modules: {}",
            circle.len(),
            ties.join(", ")
        ));
    }
    Ok(problems)
}

/// What is wrong with the calls up of these files: an `impl` of a trait in a layer above the
/// trait's own that `calls` does not list, or that `architecture` does not name; a listed one
/// that is no longer there; and a function pointer type below the façade that `pointers` does
/// not list.
fn calls_up(
    files: &[(String, String)],
    architecture: &str,
    calls: &[CallUp],
    pointers: &[FunctionPointer],
) -> Vec<String> {
    let units: Vec<(&str, String, usize, String)> = files
        .iter()
        .filter(|(path, _)| path.ends_with(".rs"))
        .filter_map(|(path, text)| {
            let unit = unit_of_file(path)?;
            let layer = layer_of(&unit)?;
            Some((path.as_str(), unit, layer, code(text)))
        })
        .collect();
    let mut traits: HashMap<String, (String, usize)> = HashMap::new();
    for (_, unit, layer, code) in &units {
        for (_, name) in words_after(code, "trait") {
            traits.insert(name, (unit.clone(), *layer));
        }
    }
    let mut problems = Vec::new();
    let mut found: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, _, layer, code) in &units {
        for (line, name) in implemented_traits(code) {
            let Some((module, declared)) = traits.get(&name) else {
                continue;
            };
            if layer <= declared {
                continue;
            }
            let listed = calls
                .iter()
                .find(|call| call.name == name && call.module == module);
            match listed {
                Some(call) if call.implemented_in == LAYERS[*layer].0 => {
                    found.insert((module.clone(), name.clone()));
                }
                _ => problems.push(format!(
                    "{path}:{line}: `{module}::{name}` is implemented in the {} layer, above its \
                     own ({}): a call up; list it in CALLS_UP with its reason, and name it in \
                     ARCHITECTURE.md",
                    LAYERS[*layer].0, LAYERS[*declared].0
                )),
            }
        }
    }
    for call in calls {
        if !found.contains(&(call.module.to_owned(), call.name.to_owned())) {
            problems.push(format!(
                "CALLS_UP lists `{}::{}`, implemented in the {} layer, which nothing implements \
                 there: remove it",
                call.module, call.name, call.implemented_in
            ));
        }
        if !architecture.contains(&format!("`{}`", call.name)) {
            problems.push(format!(
                "ARCHITECTURE.md does not name `{}`, a call up into the {} layer ({})",
                call.name, call.implemented_in, call.why
            ));
        }
    }
    let top = LAYERS.len() - 1;
    for (path, unit, layer, code) in &units {
        if *layer == top {
            continue;
        }
        for (line, name) in function_pointers(code) {
            let listed = pointers
                .iter()
                .any(|(module, field, _)| module == unit && *field == name);
            if !listed {
                problems.push(format!(
                    "{path}:{line}: a function pointer type (`{name}`) below the façade: a call \
                     up through it would be seen by no check; call up through a trait listed in \
                     CALLS_UP, or list it in FUNCTION_POINTERS with what fills it and what calls \
                     it"
                ));
            }
        }
    }
    problems
}

/// Each word that follows `keyword` as a word of its own, with its line: `trait Kind` gives
/// `Kind`.
fn words_after(code: &str, keyword: &str) -> Vec<(usize, String)> {
    let mut words = Vec::new();
    for (at, _) in code.match_indices(keyword) {
        let before = code[..at].chars().next_back();
        let after = &code[at + keyword.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || !after.starts_with(char::is_whitespace)
        {
            continue;
        }
        let name: String = after
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            words.push((line_at(code, at), name));
        }
    }
    words
}

/// The trait of each `impl … Trait for …`, with its line: the last segment of its path,
/// generic arguments left out (`impl<K: Kind> Grant for K` gives `Grant`).
fn implemented_traits(code: &str) -> Vec<(usize, String)> {
    let mut traits = Vec::new();
    for (at, _) in code.match_indices("impl") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &code[at + "impl".len()..];
        if rest.starts_with('<') {
            rest = after_angles(rest);
        } else if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let rest = rest.trim_start();
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let mut tail = &rest[path.len()..];
        if tail.starts_with('<') {
            tail = after_angles(tail);
        }
        let is_trait_impl = tail
            .trim_start()
            .strip_prefix("for")
            .is_some_and(|t| t.starts_with(char::is_whitespace));
        if let (true, Some(name)) = (is_trait_impl, path.rsplit("::").next()) {
            if !name.is_empty() {
                traits.push((line_at(code, at), name.to_owned()));
            }
        }
    }
    traits
}

/// The text after the `<…>` it starts with, nested brackets included.
fn after_angles(text: &str) -> &str {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return &text[at + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// Each function pointer type (`fn(`, not `fn name(`), with its line and the name it is the
/// type of: the field or binding before its `:`, or the alias before its `=`; empty when it
/// has none (a pointer inside another type).
fn function_pointers(code: &str) -> Vec<(usize, String)> {
    let mut pointers = Vec::new();
    for (at, _) in code.match_indices("fn(") {
        let before = code[..at].trim_end();
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let name = match before.chars().next_back() {
            Some(':') => last_word(&before[..before.len() - 1]),
            Some('=') => last_word(&before[..before.len() - 1]),
            _ => String::new(),
        };
        pointers.push((line_at(code, at), name));
    }
    pointers
}

/// The word `text` ends with, spaces after it left out.
fn last_word(text: &str) -> String {
    let text = text.trim_end();
    let start = text
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |at| at + 1);
    text[start..].to_owned()
}

/// The line (from 1) of the byte `at`.
fn line_at(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// One path from a unit to another that Lua makes: a `.lua` file using a name an earlier
/// file of its script defines, or a module declaring a script made with a file.
struct LuaUse {
    from: String,
    to: String,
    /// Where: `file:line`.
    at: String,
    /// What is used: the name, or the file prepended.
    what: String,
}

/// The paths Lua makes between units: for every script of the library (each `Lua::new(&[…])`),
/// from the module that declares it to each of its files, and from each file to each earlier
/// one whose top-level name it uses. A part that names no file it can tell (two `const`s of
/// the name, each of a file) is reported in `problems`.
fn lua_uses(files: &[(String, String)], problems: &mut Vec<String>) -> Vec<LuaUse> {
    let texts: HashMap<&str, &str> = files
        .iter()
        .map(|(path, text)| (path.as_str(), text.as_str()))
        .collect();
    // Each `const NAME: &str = include_str!("…")`, by name: the files it may be.
    let mut consts: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for (path, text) in files.iter().filter(|(path, _)| path.ends_with(".rs")) {
        let code = code(text);
        for (_, name) in words_after(&code, "const") {
            let Some(at) = code.find(&format!("const {name}: &str = include_str!(")) else {
                continue;
            };
            if let Some(file) = included(path, &code[at..]) {
                consts.entry(name).or_default().push((path.clone(), file));
            }
        }
    }
    let mut uses = Vec::new();
    let mut seen = BTreeSet::new();
    for (path, text) in files.iter().filter(|(path, _)| path.ends_with(".rs")) {
        let Some(declaring) = unit_of_file(path) else {
            continue;
        };
        let code = code(text);
        for (at, _) in code.match_indices("Lua::new(&[") {
            let list = &code[at + "Lua::new(&[".len()..];
            let list = &list[..list.find("])").unwrap_or(list.len())];
            let mut parts = Vec::new();
            for part in split_top(list) {
                let part = part.trim();
                let file = if part.starts_with("include_str!(") {
                    included(path, part)
                } else {
                    let name = part.rsplit("::").next().unwrap_or(part);
                    let candidates = consts.get(name).map_or(&[][..], Vec::as_slice);
                    let own = candidates.iter().find(|(of, _)| of == path);
                    match (own, candidates) {
                        (Some((_, file)), _) | (None, [(_, file)]) => Some(file.clone()),
                        (None, []) => None,
                        (None, _) => {
                            problems.push(format!(
                                "{path}:{}: `{part}` may be any of several Lua files: name the \
                                 `const` apart",
                                line_at(&code, at)
                            ));
                            None
                        }
                    }
                };
                // A part that is no file (Lua written in the Rust file) is the module's own.
                let Some(file) = file else { continue };
                let Some(text) = texts.get(file.as_str()) else {
                    problems.push(format!(
                        "{path}:{}: `{file}` is no Lua file of the library",
                        line_at(&code, at)
                    ));
                    continue;
                };
                parts.push((file, *text));
            }
            for (at, (file, text)) in parts.iter().enumerate() {
                let Some(unit) = unit_of_file(file) else {
                    continue;
                };
                if seen.insert((declaring.clone(), unit.clone(), file.clone())) {
                    uses.push(LuaUse {
                        from: declaring.clone(),
                        to: unit.clone(),
                        at: format!("{path}:{}", line_at(&code, at)),
                        what: format!("{file} prepended"),
                    });
                }
                let own = lua_definitions(text);
                for (line, name) in lua_names(text) {
                    if own.contains(&name) {
                        continue;
                    }
                    let Some((earlier, _)) = parts[..at]
                        .iter()
                        .rev()
                        .find(|(_, text)| lua_definitions(text).contains(&name))
                    else {
                        continue;
                    };
                    let Some(to) = unit_of_file(earlier) else {
                        continue;
                    };
                    if seen.insert((unit.clone(), to.clone(), name.clone())) {
                        uses.push(LuaUse {
                            from: unit.clone(),
                            to,
                            at: format!("{file}:{line}"),
                            what: format!("`{name}` of {earlier}"),
                        });
                    }
                }
            }
        }
    }
    uses
}

/// The file an `include_str!("…")` at the start of `text` reads, from `src/`, for the Rust file
/// at `path`.
fn included(path: &str, text: &str) -> Option<String> {
    let start = text.find('"')? + 1;
    let relative = &text[start..start + text[start..].find('"')?];
    let mut segments: Vec<&str> = path.split('/').collect();
    segments.pop();
    for segment in relative.split('/') {
        match segment {
            ".." => {
                segments.pop();
            }
            "." => {}
            segment => segments.push(segment),
        }
    }
    Some(segments.join("/"))
}

/// `text` split at its commas outside brackets.
fn split_top(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (at, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.retain(|part| !part.trim().is_empty());
    parts
}

/// The names a Lua file defines at its top level (a line that starts with `local` or
/// `function`): `local function f(`, `function f(`, `local a, b = …`, `local a`.
fn lua_definitions(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in lua_code(text).lines() {
        let rest = if let Some(rest) = line.strip_prefix("local function ") {
            rest
        } else if let Some(rest) = line.strip_prefix("function ") {
            rest
        } else if let Some(rest) = line.strip_prefix("local ") {
            let declared = rest.split('=').next().unwrap_or(rest);
            for name in declared.split(',') {
                names.insert(name.trim().to_owned());
            }
            continue;
        } else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        names.insert(name);
    }
    names.remove("");
    names
}

/// Each name a Lua file uses, with the line of its first use: a word outside comments and
/// strings that is no keyword and no field (`redis.call`'s `call`).
fn lua_names(text: &str) -> Vec<(usize, String)> {
    const KEYWORDS: [&str; 22] = [
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
        "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
    ];
    let code = lua_code(text);
    let mut names: Vec<(usize, String)> = Vec::new();
    let mut word = String::new();
    let mut line = 1;
    let mut previous = ' ';
    let mut before_word = ' ';
    for c in code.chars().chain(std::iter::once(' ')) {
        if c.is_alphanumeric() || c == '_' {
            if word.is_empty() {
                before_word = previous;
            }
            word.push(c);
        } else if !word.is_empty() {
            let is_name = !word.starts_with(|c: char| c.is_ascii_digit())
                && !matches!(before_word, '.' | ':')
                && !KEYWORDS.contains(&word.as_str());
            if is_name && !names.iter().any(|(_, seen)| *seen == word) {
                names.push((line, word.clone()));
            }
            word.clear();
        }
        if c == '\n' {
            line += 1;
        }
        previous = c;
    }
    names
}

/// A Lua text without its comments and the insides of its strings, line breaks kept.
fn lua_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut quote: Option<char> = None;
        let mut escaped = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match quote {
                Some(_) if escaped => escaped = false,
                Some(_) if c == '\\' => escaped = true,
                Some(q) if c == q => {
                    quote = None;
                    out.push(c);
                }
                Some(_) => {}
                None if c == '\'' || c == '"' => {
                    quote = Some(c);
                    out.push(c);
                }
                None if c == '-' && chars.peek() == Some(&'-') => break,
                None => out.push(c),
            }
        }
        out.push('\n');
    }
    out
}

/// The unit a file is part of: `None` for `lib.rs`, the crate root, which may use everything.
fn unit_of_file(path: &str) -> Option<String> {
    let segments: Vec<&str> = path
        .trim_end_matches(".rs")
        .trim_end_matches(".lua")
        .split('/')
        .filter(|s| *s != "mod")
        .collect();
    match segments.as_slice() {
        ["lib"] => None,
        segments => Some(unit_of_path(
            &segments.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        )),
    }
}

/// The unit a module path (its segments after `crate::`) is part of.
fn unit_of_path(segments: &[String]) -> String {
    match segments {
        [first, second, ..] if FOLDERS_OF_UNITS.contains(&first.as_str()) => {
            format!("{first}::{second}")
        }
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// The layer of `unit`, by its index in [`LAYERS`].
fn layer_of(unit: &str) -> Option<usize> {
    let top = unit.split("::").next().unwrap_or(unit);
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&top))
}

/// The circles of the graph: each strongly connected set of more than one unit, found by
/// Tarjan's algorithm.
fn circles(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<BTreeSet<String>> {
    struct Search<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, unit: &'a str) {
            let at = self.index.len();
            self.index.insert(unit, at);
            self.low.insert(unit, at);
            self.stack.push(unit);
            self.on_stack.insert(unit);
            for next in self.edges.get(unit).into_iter().flat_map(BTreeMap::keys) {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[unit].min(self.low[next]);
                    self.low.insert(unit, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[unit].min(self.index[next]);
                    self.low.insert(unit, low);
                }
            }
            if self.low[unit] == self.index[unit] {
                let mut circle = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    circle.insert(member.to_owned());
                    if member == unit {
                        break;
                    }
                }
                if circle.len() > 1 {
                    self.found.push(circle);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for unit in edges.keys() {
        if !search.index.contains_key(unit.as_str()) {
            search.visit(unit);
        }
    }
    search.found
}

/// Every `.rs` and `.lua` file under `dir`, with its path relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {dir:?}: {e}"))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {dir:?}: {e}"))?
            .path();
        if path.is_dir() {
            collect(root, &path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs" || e == "lua") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
            let relative = path.strip_prefix(root).unwrap_or(&path);
            files.push((relative.to_string_lossy().replace('\\', "/"), text));
        }
    }
    Ok(())
}

/// The names `lib.rs` re-exports at the root, each with the unit it comes from:
/// `pub use kinds::mutex::{Mutex, MutexGuard};` maps both names to `kinds::mutex`.
fn reexports(lib: &str) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for statement in code(lib).split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.strip_prefix("crate::").unwrap_or(path);
        let (module, items) = match path.split_once("::{") {
            Some((module, items)) => (module, items),
            None => path.rsplit_once("::").unwrap_or((path, "")),
        };
        let segments: Vec<String> = module.split("::").map(|s| s.trim().to_owned()).collect();
        let unit = unit_of_path(&segments);
        for item in items.trim_matches(['{', '}', ' ', '\n']).split(',') {
            let name = item.split(" as ").last().unwrap_or(item).trim();
            if !name.is_empty() {
                names.insert(name.to_owned(), unit.clone());
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

/// Each path after a `crate::` (`$crate::` too), with its line number from 1: the segments of
/// its module path, as far as they are written; in a group, `crate::{a::X, core::{b, c}}`,
/// each member's.
fn crate_paths(code: &str) -> Vec<(usize, Vec<String>)> {
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
            let mut at = start;
            paths.extend(paths_at(code, &mut at, &[]));
        }
        offset = start;
        rest = &code[start..];
    }
    paths
}

/// The paths written from `*at` on, each prefixed by `prefix`: `a::b::C` is one, `{a, b::{c,
/// d}}` three. Leaves `*at` after what it read.
fn paths_at(code: &str, at: &mut usize, prefix: &[String]) -> Vec<(usize, Vec<String>)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let skip_space = |at: &mut usize| {
        while code[*at..].starts_with(char::is_whitespace) {
            *at += code[*at..].chars().next().map_or(1, char::len_utf8);
        }
    };
    skip_space(at);
    if code[*at..].starts_with('{') {
        *at += 1;
        let mut paths = Vec::new();
        loop {
            skip_space(at);
            match code[*at..].chars().next() {
                None => return paths,
                Some('}') => {
                    *at += 1;
                    return paths;
                }
                Some(',') => *at += 1,
                Some(_) => {
                    let before = *at;
                    paths.extend(paths_at(code, at, prefix));
                    if *at == before {
                        // Something that is no path: step over it.
                        *at += code[*at..].chars().next().map_or(1, char::len_utf8);
                    }
                }
            }
        }
    }
    let line = line_of(*at);
    let mut segments = prefix.to_vec();
    loop {
        let name: String = code[*at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        *at += name.len();
        segments.push(name);
        if !code[*at..].starts_with("::") {
            break;
        }
        *at += 2;
        if code[*at..].starts_with('{') {
            return paths_at(code, at, &segments);
        }
    }
    if segments.len() == prefix.len() {
        return Vec::new();
    }
    vec![(line, segments)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(files: &[(&str, &str)]) -> Vec<String> {
        let lib = "pub use client::Client;\npub use kinds::mutex::{Mutex, MutexGuard};\n\
                   pub use crate::core::guard::Guard;\n";
        let mut all: Vec<(String, String)> = vec![("lib.rs".into(), lib.into())];
        all.extend(
            files
                .iter()
                .map(|(p, t)| ((*p).to_owned(), (*t).to_owned())),
        );
        problems(&all).expect("a lib.rs")
    }

    #[test]
    fn a_kind_reaching_into_the_shared_fields_or_the_nodes_is_reported() {
        let files = [
            (
                "kinds/mutex.rs".to_owned(),
                "fn f(lock: &Lock) {\n    let conn = lock\n        .shared\n        .nodes.first();\n}\n\
                 // lock.shared.options in a comment is no reach\n"
                    .to_owned(),
            ),
            (
                "kinds/fair.rs".to_owned(),
                "use crate::transport::conn::Conn;\n".to_owned(),
            ),
            (
                "kinds/handoff_model/real.rs".to_owned(),
                "use crate::transport::conn::Conn;\n".to_owned(),
            ),
            (
                "core/kind.rs".to_owned(),
                "fn f(&self) { self.shared.nodes.first(); }\n".to_owned(),
            ),
        ];
        let problems = reaches_of_kinds(&files);
        assert_eq!(
            problems,
            [
                "kinds/mutex.rs:3: a kind reaches `shared.nodes`: use the methods of `Shared` or \
                 `Lock`",
                "kinds/fair.rs:1: a kind reaches `crate::transport::conn`: use the methods of \
                 `Shared` or `Lock`",
            ]
        );
    }

    #[test]
    fn an_upward_import_is_reported_with_its_file_and_line() {
        let sample = "//! The grant.\n\nuse crate::error::Result;\nuse crate::client::Shared;\n";
        assert_eq!(
            problems_of(&[("core/acquire.rs", sample)]),
            vec!["core/acquire.rs:4: core module `core::acquire` uses façade module `client`"]
        );
    }

    #[test]
    fn groups_paths_in_code_and_root_reexports_count_too() {
        let sample = "use crate::{\n    error::Error,\n    kinds::{mutex::Mutex},\n};\n\
                      fn f() { crate::Client::nothing(); }\n";
        assert_eq!(
            problems_of(&[("transport/conn.rs", sample)]),
            vec![
                "transport/conn.rs:3: transport module `transport::conn` uses kinds module \
                 `kinds::mutex`",
                "transport/conn.rs:5: transport module `transport::conn` uses façade module \
                 `client`",
            ]
        );
    }

    #[test]
    fn downward_and_sideways_imports_comments_and_the_root_pass() {
        let sample = "use crate::transport::conn::Conn;\nuse crate::kinds::reentrant::Holder;\n\
                      /// See [`Client`](crate::client::Client).\n\
                      let url = \"redis://h\"; // crate::client\n";
        assert!(problems_of(&[("kinds/rwlock.rs", sample)]).is_empty());
        assert!(problems_of(&[("kinds/mutex/tests.rs", "use crate::kinds::mutex::X;")]).is_empty());
    }

    #[test]
    fn a_circle_inside_a_layer_is_reported_with_the_paths_that_close_it() {
        let found = problems_of(&[
            ("core/held.rs", "use crate::core::acquire::Attempt;\n"),
            (
                "core/acquire.rs",
                "use crate::core::{held::Held, lease::Lease};\n",
            ),
            ("core/lease.rs", "use crate::core::observe::Hold;\n"),
        ]);
        assert_eq!(
            found,
            vec![
                "an import circle of 2 modules: core::acquire -> core::held (core/acquire.rs:1), \
                 core::held -> core::acquire (core/held.rs:1)"
            ]
        );
        let longer = problems_of(&[
            ("kinds/mutex.rs", "use crate::kinds::b::X;"),
            ("kinds/b.rs", "use crate::kinds::c::X;"),
            // Through a re-export at the root.
            ("kinds/c.rs", "fn f() { crate::Mutex::new(); }"),
        ]);
        assert_eq!(longer.len(), 1, "{longer:?}");
        assert!(
            longer[0].starts_with("an import circle of 3 modules"),
            "{longer:?}"
        );
    }

    const HOLDERS: [CallUp; 1] = [CallUp {
        module: "core::waits",
        name: "Holders",
        implemented_in: "façade",
        why: "the façade reads every kind",
    }];

    fn calls_up_of(files: &[(&str, &str)], architecture: &str, calls: &[CallUp]) -> Vec<String> {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect();
        calls_up(
            &files,
            architecture,
            calls,
            &[("core::stored", "judge", "kinds fill it")],
        )
    }

    #[test]
    fn a_trait_implemented_above_its_layer_is_a_call_up_that_must_be_listed_and_named() {
        let trait_below = (
            "core/waits/holders.rs",
            "pub(crate) trait Holders: Send + Sync {\n    fn held(&self);\n}\n",
        );
        let installed = (
            "inspect.rs",
            "use crate::core::waits::Holders;\nstruct Inspection;\n\
             impl Holders for Inspection {\n    fn held(&self) {}\n}\n",
        );
        let named = "The core calls up through `Holders`.";
        assert_eq!(
            calls_up_of(&[trait_below, installed], named, &[]),
            vec![
                "inspect.rs:3: `core::waits::Holders` is implemented in the façade layer, above \
                 its own (core): a call up; list it in CALLS_UP with its reason, and name it in \
                 ARCHITECTURE.md"
            ]
        );
        assert!(calls_up_of(&[trait_below, installed], named, &HOLDERS).is_empty());
        assert_eq!(
            calls_up_of(&[trait_below, installed], "", &HOLDERS),
            vec![
                "ARCHITECTURE.md does not name `Holders`, a call up into the façade layer (the \
                 façade reads every kind)"
            ]
        );
        assert_eq!(
            calls_up_of(&[trait_below], named, &HOLDERS),
            vec![
                "CALLS_UP lists `core::waits::Holders`, implemented in the façade layer, which \
                 nothing implements there: remove it"
            ]
        );
        // Implemented in its own layer or below, generics and all: no call up.
        let beside = (
            "core/acquire.rs",
            "impl<K: Kind + Send> crate::core::waits::Holders for Local<K> {}\n",
        );
        assert!(calls_up_of(&[trait_below, beside], "", &[]).is_empty());
    }

    #[test]
    fn a_function_pointer_below_the_façade_must_be_listed() {
        let shared =
            "pub(crate) type CheckWait =\n    fn(Arc<Shared>, Wait) -> Pin<Box<dyn Future>>;\n\
                      pub(crate) struct Shared {\n    pub(crate) check: CheckWait,\n}\n\
                      fn not_a_pointer(x: impl Fn(u8)) {}\n";
        assert_eq!(
            calls_up_of(&[("core/shared.rs", shared)], "", &[]),
            vec![
                "core/shared.rs:2: a function pointer type (`CheckWait`) below the façade: a call \
                 up through it would be seen by no check; call up through a trait listed in \
                 CALLS_UP, or list it in FUNCTION_POINTERS with what fills it and what calls it"
            ]
        );
        let stored = "pub(crate) struct Stored {\n    pub(crate) judge: fn(&[u8]) -> bool,\n}\n";
        assert!(calls_up_of(&[("core/stored.rs", stored)], "", &[]).is_empty());
        let above = "struct Hook {\n    run: fn(),\n}\n";
        assert!(calls_up_of(&[("client.rs", above)], "", &[]).is_empty());
        assert_eq!(calls_up_of(&[("kinds/mutex.rs", above)], "", &[]).len(), 1);
    }

    #[test]
    fn a_lua_file_using_what_a_higher_layers_file_defines_points_up() {
        let core_mod = "pub(crate) const FORCE_PARTS: &str = include_str!(\"force.lua\");\n";
        let force = "-- Shared: prepended to each.\nlocal function of_type(key)\n  return 1\nend\n\
                     local function take(key)\n  if is_released(redis.call('GET', key)) then\n\
                     return 0\n  end\nend\n";
        let value = "-- is_released: 'x' -- not a use\nlocal function is_released(value)\n\
                     return string.sub(value, 1, 1) == '~'\nend\n";
        let mutex = "use crate::core::FORCE_PARTS;\n\
                     pub(crate) const VALUE: &str = include_str!(\"mutex/value.lua\");\n\
                     static FORCE: Lua = Lua::new(&[\n    VALUE,\n    crate::core::FORCE_PARTS,\n    \
                     include_str!(\"mutex/force.lua\"),\n]);\n";
        let mutex_force = "if of_type(KEYS[1]) then\n  take(KEYS[1])\nend\n";
        let files = [
            ("core/mod.rs", core_mod),
            ("core/force.lua", force),
            ("kinds/mutex.rs", mutex),
            ("kinds/mutex/value.lua", value),
            ("kinds/mutex/force.lua", mutex_force),
        ];
        assert_eq!(
            problems_of(&files),
            vec![
                "core/force.lua:6: core Lua `core::force` uses kinds Lua `kinds::mutex` \
                 (`is_released` of kinds/mutex/value.lua)"
            ]
        );
        // The value's forced release beside the value, after core/force.lua: every use down.
        let take = "local function take(key)\n  if is_released(key) then return 0 end\nend\n";
        let force = "local function of_type(key)\n  return 1\nend\n";
        let mutex = "use crate::core::FORCE_PARTS;\n\
                     pub(crate) const VALUE: &str = include_str!(\"mutex/value.lua\");\n\
                     static FORCE: Lua = Lua::new(&[VALUE, FORCE_PARTS, \
                     include_str!(\"mutex/take.lua\"), include_str!(\"mutex/force.lua\")]);\n";
        assert!(problems_of(&[
            ("core/mod.rs", core_mod),
            ("core/force.lua", force),
            ("kinds/mutex.rs", mutex),
            ("kinds/mutex/value.lua", value),
            ("kinds/mutex/take.lua", take),
            ("kinds/mutex/force.lua", mutex_force),
        ])
        .is_empty());
    }

    #[test]
    fn a_core_script_made_with_a_kinds_file_points_up() {
        let keeper =
            "static RENEW: Lua = Lua::new(&[include_str!(\"../kinds/mutex/value.lua\")]);\n";
        assert_eq!(
            problems_of(&[
                ("core/keeper.rs", keeper),
                ("kinds/mutex/value.lua", "local x = 1\n"),
            ]),
            vec![
                "core/keeper.rs:1: core Lua `core::keeper` uses kinds Lua `kinds::mutex` \
                 (kinds/mutex/value.lua prepended)"
            ]
        );
    }

    #[test]
    fn a_module_in_no_layer_is_reported() {
        assert_eq!(
            problems_of(&[("mystery.rs", "")]),
            vec!["mystery.rs: module `mystery` is in no layer: add it to LAYERS"]
        );
        assert_eq!(
            problems_of(&[("kinds/mutex.rs", "use crate::nowhere::X;")]),
            vec!["kinds/mutex.rs:1: `crate::nowhere::X` is in no layer: add it to LAYERS"]
        );
    }
}
