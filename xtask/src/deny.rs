//! `cargo xtask deny`: the licences and the duplicate versions of every crate the workspace
//! builds for this machine's target (with every feature, dependencies of every kind), read
//! offline from `cargo metadata` and checked against `deny.toml` at the root. Its keys are those of
//! cargo-deny's `licenses` and `bans` checks, read the same way:
//!
//! - `licenses.allow`: a crate's licence expression (SPDX: `OR`, `AND`, `WITH`, parentheses,
//!   and the old `MIT/Apache-2.0` as an `OR`) must hold with these licences alone; a
//!   `A WITH B` is allowed when it is listed whole. `licenses.private.ignore`: the workspace's
//!   unpublished crates (`publish = false`) need no licence.
//! - `bans.skip`: the known duplicates, `{ crate = "name@version", reason = "…" }`. A crate
//!   found in two or more versions fails unless all of them but one are listed, and a listed
//!   version that is no longer a duplicate fails too, so that the list says what the build has.
//!
//! No advisory database is read: the check needs no network, as cargo-deny's would.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The policy file, from this crate's directory.
const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deny.toml");

/// Checks the crates of the build against `deny.toml`; `Err` lists every problem.
pub(crate) fn check() -> Result<(), String> {
    let text =
        std::fs::read_to_string(POLICY).map_err(|e| format!("cannot read deny.toml: {e}"))?;
    let policy = Policy::parse(&text)?;
    let metadata = metadata()?;
    let crates = Crates::read(&metadata)?;
    let problems = policy.problems(&crates);
    if problems.is_empty() {
        eprintln!(
            "xtask: deny: {} crates, their licences and duplicates as deny.toml allows",
            crates.packages.len()
        );
        return Ok(());
    }
    Err(format!(
        "crates against deny.toml (xtask/src/deny.rs):\n{}",
        problems.join("\n")
    ))
}

/// `cargo metadata` of the workspace with every feature, for the host's target, without the
/// network: what it reads is what a build of the workspace (and of fencelock with every
/// feature) downloaded.
fn metadata() -> Result<Value, String> {
    let host = host_target()?;
    let output = crate::cargo_command()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--all-features",
        ])
        .args(["--filter-platform", &host])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo metadata --offline` failed ({}); it reads the crates a build downloaded \
             (`cargo fetch` downloads them):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("cannot read cargo metadata: {e}"))
}

/// The target `rustc` builds for by default (`host:` of `rustc -vV`).
fn host_target() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run rustc -vV: {e}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or_else(|| "rustc -vV names no host".to_owned())
}

/// What `deny.toml` allows.
#[derive(Debug)]
struct Policy {
    allowed: BTreeSet<String>,
    ignore_private: bool,
    /// The known duplicates: (name, version).
    skipped: BTreeSet<(String, String)>,
}

impl Policy {
    fn parse(text: &str) -> Result<Policy, String> {
        let document: toml_edit::DocumentMut = text
            .parse()
            .map_err(|e| format!("cannot read deny.toml: {e}"))?;
        let strings = |path: &str, item: Option<&toml_edit::Item>| -> Result<Vec<String>, String> {
            let Some(item) = item else {
                return Ok(Vec::new());
            };
            let array = item
                .as_array()
                .ok_or_else(|| format!("deny.toml: {path} is not an array"))?;
            array
                .iter()
                .map(|value| {
                    value
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("deny.toml: {path} holds a value not a string"))
                })
                .collect()
        };
        let licenses = document.get("licenses");
        let allowed = strings("licenses.allow", licenses.and_then(|l| l.get("allow")))?;
        let ignore_private = licenses
            .and_then(|l| l.get("private"))
            .and_then(|p| p.get("ignore"))
            .and_then(toml_edit::Item::as_bool)
            .unwrap_or(false);
        let mut skipped = BTreeSet::new();
        if let Some(skip) = document.get("bans").and_then(|b| b.get("skip")) {
            let skip = skip
                .as_array()
                .ok_or_else(|| "deny.toml: bans.skip is not an array".to_owned())?;
            for (n, entry) in skip.iter().enumerate() {
                let spec = entry
                    .as_inline_table()
                    .and_then(|t| t.get("crate"))
                    .and_then(toml_edit::Value::as_str)
                    .ok_or_else(|| {
                        format!(
                            "deny.toml: bans.skip's entry {} is no {{ crate = \"name@version\" }}",
                            n + 1
                        )
                    })?;
                let (name, version) = spec.split_once('@').ok_or_else(|| {
                    format!("deny.toml: bans.skip names {spec:?}, not \"name@version\"")
                })?;
                skipped.insert((name.to_owned(), version.to_owned()));
            }
        }
        Ok(Policy {
            allowed: allowed.into_iter().collect(),
            ignore_private,
            skipped,
        })
    }

    /// Every crate whose licence is not allowed, every duplicate not listed, every listed
    /// duplicate that is gone.
    fn problems(&self, crates: &Crates) -> Vec<String> {
        let mut problems = Vec::new();
        for package in &crates.packages {
            if package.private && self.ignore_private {
                continue;
            }
            let Some(expression) = &package.license else {
                problems.push(format!(
                    "{} {}: no licence expression (`license` in its Cargo.toml)",
                    package.name, package.version
                ));
                continue;
            };
            match holds(expression, &self.allowed) {
                Ok(true) => {}
                Ok(false) => problems.push(format!(
                    "{} {}: licence {expression:?} is not allowed by licenses.allow",
                    package.name, package.version
                )),
                Err(e) => problems.push(format!(
                    "{} {}: licence {expression:?}: {e}",
                    package.name, package.version
                )),
            }
        }
        let mut versions: BTreeMap<&str, Vec<&Package>> = BTreeMap::new();
        for package in &crates.packages {
            versions.entry(&package.name).or_default().push(package);
        }
        for (name, of_name) in &versions {
            if of_name.len() < 2 {
                continue;
            }
            let unlisted: Vec<&&Package> = of_name
                .iter()
                .filter(|p| !self.skipped.contains(&(p.name.clone(), p.version.clone())))
                .collect();
            if unlisted.len() > 1 {
                let described: Vec<String> = of_name
                    .iter()
                    .map(|p| format!("{} (from {})", p.version, p.dependents.join(", ")))
                    .collect();
                problems.push(format!(
                    "{name}: {} versions, {}; list all but one in bans.skip, or keep one",
                    of_name.len(),
                    described.join("; ")
                ));
            }
        }
        for (name, version) in &self.skipped {
            let duplicate = versions
                .get(name.as_str())
                .is_some_and(|v| v.len() > 1 && v.iter().any(|p| &p.version == version));
            if !duplicate {
                problems.push(format!(
                    "{name}@{version}: in bans.skip but not a duplicate of the build; remove it"
                ));
            }
        }
        problems
    }
}

/// One crate of the build.
#[derive(Debug)]
struct Package {
    name: String,
    version: String,
    license: Option<String>,
    /// Not to be published (`publish = false`).
    private: bool,
    /// The crates that depend on it, as `name version`.
    dependents: Vec<String>,
}

/// The crates of the build: those of `cargo metadata`'s resolved graph.
struct Crates {
    packages: Vec<Package>,
}

impl Crates {
    fn read(metadata: &Value) -> Result<Crates, String> {
        let nodes = metadata["resolve"]["nodes"]
            .as_array()
            .ok_or_else(|| "cargo metadata has no resolved graph".to_owned())?;
        let described = metadata["packages"]
            .as_array()
            .ok_or_else(|| "cargo metadata lists no packages".to_owned())?;
        let by_id: BTreeMap<&str, &Value> = described
            .iter()
            .filter_map(|p| Some((p["id"].as_str()?, p)))
            .collect();
        let text = |value: &Value, field: &str| -> Result<String, String> {
            value[field]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("cargo metadata: a package without {field}"))
        };
        let mut dependents: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for node in nodes {
            let id = node["id"].as_str().unwrap_or_default();
            let Some(package) = by_id.get(id) else {
                continue;
            };
            let named = format!("{} {}", text(package, "name")?, text(package, "version")?);
            for dependency in node["deps"].as_array().into_iter().flatten() {
                if let Some(on) = dependency["pkg"].as_str() {
                    dependents.entry(on).or_default().insert(named.clone());
                }
            }
        }
        let mut packages = Vec::new();
        for node in nodes {
            let id = node["id"]
                .as_str()
                .ok_or_else(|| "cargo metadata: a node without an id".to_owned())?;
            let package = by_id
                .get(id)
                .ok_or_else(|| format!("cargo metadata: {id} is not among the packages"))?;
            packages.push(Package {
                name: text(package, "name")?,
                version: text(package, "version")?,
                license: package["license"].as_str().map(str::to_owned),
                private: package["publish"].as_array().is_some_and(Vec::is_empty),
                dependents: dependents
                    .remove(id)
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            });
        }
        Ok(Crates { packages })
    }
}

/// Whether the SPDX licence `expression` holds with the `allowed` licences alone: `A OR B`
/// when either does, `A AND B` when both do, `A WITH B` when it is listed whole. `WITH` binds
/// tighter than `AND`, and `AND` than `OR`; `/` is the `OR` of older manifests.
fn holds(expression: &str, allowed: &BTreeSet<String>) -> Result<bool, String> {
    let spaced = expression
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace('/', " OR ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        allowed,
    };
    let outcome = parser.any()?;
    match parser.tokens.get(parser.at) {
        None => Ok(outcome),
        Some(token) => Err(format!("unexpected {token:?}")),
    }
}

/// A recursive descent over the tokens of a licence expression, evaluating as it goes.
struct Parser<'a> {
    tokens: &'a [&'a str],
    at: usize,
    allowed: &'a BTreeSet<String>,
}

impl<'a> Parser<'a> {
    fn next_is(&mut self, word: &str) -> bool {
        let is = self.tokens.get(self.at) == Some(&word);
        if is {
            self.at += 1;
        }
        is
    }

    /// `all (OR all)*`.
    fn any(&mut self) -> Result<bool, String> {
        let mut holds = self.all()?;
        while self.next_is("OR") {
            holds |= self.all()?;
        }
        Ok(holds)
    }

    /// `one (AND one)*`.
    fn all(&mut self) -> Result<bool, String> {
        let mut holds = self.one()?;
        while self.next_is("AND") {
            holds &= self.one()?;
        }
        Ok(holds)
    }

    /// `( any )`, `licence` or `licence WITH exception`.
    fn one(&mut self) -> Result<bool, String> {
        if self.next_is("(") {
            let holds = self.any()?;
            if !self.next_is(")") {
                return Err("a `(` without its `)`".to_owned());
            }
            return Ok(holds);
        }
        let licence = self.name()?;
        if self.next_is("WITH") {
            let exception = self.name()?;
            return Ok(self
                .allowed
                .contains(&format!("{licence} WITH {exception}")));
        }
        Ok(self.allowed.contains(licence))
    }

    fn name(&mut self) -> Result<&'a str, String> {
        match self.tokens.get(self.at) {
            Some(&token) if !["(", ")", "AND", "OR", "WITH"].contains(&token) => {
                self.at += 1;
                Ok(token)
            }
            Some(token) => Err(format!("a licence expected, found {token:?}")),
            None => Err("a licence expected at the end".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(licences: &[&str]) -> BTreeSet<String> {
        licences.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn expressions_hold_with_the_allowed_licences_alone() {
        let ours = allowed(&["MIT", "Apache-2.0", "Unicode-3.0"]);
        for (expression, expected) in [
            ("MIT", true),
            ("MIT OR Apache-2.0", true),
            ("GPL-3.0-only OR MIT", true),
            ("MIT/Apache-2.0", true),
            ("Apache-2.0 / MIT", true),
            ("(MIT OR Apache-2.0) AND Unicode-3.0", true),
            ("(MIT OR Apache-2.0) AND BSD-3-Clause", false),
            ("MIT AND GPL-3.0-only OR Apache-2.0", true),
            ("MIT AND (GPL-3.0-only OR BSD-3-Clause)", false),
            ("GPL-3.0-only", false),
            ("Apache-2.0 WITH LLVM-exception", false),
            ("Apache-2.0 WITH LLVM-exception OR MIT", true),
        ] {
            assert_eq!(holds(expression, &ours), Ok(expected), "{expression}");
        }
        let with = allowed(&["Apache-2.0 WITH LLVM-exception"]);
        assert_eq!(holds("Apache-2.0 WITH LLVM-exception", &with), Ok(true));
        for broken in ["", "MIT OR", "(MIT", "MIT)", "MIT Apache-2.0", "OR MIT"] {
            assert!(holds(broken, &ours).is_err(), "{broken:?}");
        }
    }

    const POLICY_TEXT: &str = r#"
[licenses]
allow = ["MIT", "Apache-2.0"]
private = { ignore = true }

[bans]
skip = [
    { crate = "old@1.0.0", reason = "app still uses it" },
]
"#;

    /// A package of planted metadata: (name, version, licence, publish = false, dependencies).
    type Planted<'a> = (&'a str, &'a str, Option<&'a str>, bool, &'a [&'a str]);

    fn metadata(packages: &[Planted<'_>]) -> Value {
        let id = |name: &str, version: &str| format!("registry#{name}@{version}");
        let described: Vec<Value> = packages
            .iter()
            .map(|(name, version, license, private, _)| {
                serde_json::json!({
                    "id": id(name, version),
                    "name": name,
                    "version": version,
                    "license": license,
                    "publish": if *private { Some(Vec::<String>::new()) } else { None },
                })
            })
            .collect();
        let nodes: Vec<Value> = packages
            .iter()
            .map(|(name, version, _, _, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|on| {
                        let (n, v) = on.split_once('@').expect("name@version");
                        serde_json::json!({ "pkg": id(n, v) })
                    })
                    .collect();
                serde_json::json!({ "id": id(name, version), "deps": deps })
            })
            .collect();
        serde_json::json!({ "packages": described, "resolve": { "nodes": nodes } })
    }

    fn problems(packages: &[Planted<'_>]) -> Vec<String> {
        let policy = Policy::parse(POLICY_TEXT).expect("policy");
        let crates = Crates::read(&metadata(packages)).expect("metadata");
        policy.problems(&crates)
    }

    /// The planted build deny.toml allows: an unpublished crate without a licence, and `old`
    /// twice with one version listed.
    const ALLOWED: [Planted<'static>; 4] = [
        (
            "app",
            "0.1.0",
            None,
            true,
            &["old@1.0.0", "old@2.0.0", "lib@1.0.0"],
        ),
        (
            "lib",
            "1.0.0",
            Some("MIT OR Apache-2.0"),
            false,
            &["old@2.0.0"],
        ),
        ("old", "1.0.0", Some("MIT/Apache-2.0"), false, &[]),
        ("old", "2.0.0", Some("Apache-2.0"), false, &[]),
    ];

    #[test]
    fn a_build_as_deny_toml_allows_passes() {
        assert_eq!(problems(&ALLOWED), Vec::<String>::new());
    }

    #[test]
    fn a_disallowed_or_missing_licence_fails() {
        let mut planted = ALLOWED.to_vec();
        planted[1].2 = Some("GPL-3.0-only");
        planted.push(("nameless", "0.3.0", None, false, &[]));
        assert_eq!(
            problems(&planted),
            [
                "lib 1.0.0: licence \"GPL-3.0-only\" is not allowed by licenses.allow",
                "nameless 0.3.0: no licence expression (`license` in its Cargo.toml)",
            ]
        );
    }

    #[test]
    fn an_unlisted_duplicate_fails_and_names_who_pulls_each_version_in() {
        let mut planted = ALLOWED.to_vec();
        planted[0].4 = &["old@1.0.0", "old@2.0.0", "lib@1.0.0", "lib@2.0.0"];
        planted.push(("lib", "2.0.0", Some("MIT"), false, &[]));
        assert_eq!(
            problems(&planted),
            [
                "lib: 2 versions, 1.0.0 (from app 0.1.0); 2.0.0 (from app 0.1.0); \
              list all but one in bans.skip, or keep one"
            ]
        );
    }

    #[test]
    fn a_listed_duplicate_that_is_gone_fails() {
        let mut planted = ALLOWED.to_vec();
        planted.pop();
        planted[0].4 = &["old@1.0.0", "lib@1.0.0"];
        planted[1].4 = &[];
        assert_eq!(
            problems(&planted),
            ["old@1.0.0: in bans.skip but not a duplicate of the build; remove it"]
        );
    }

    #[test]
    fn the_workspace_deny_toml_reads() {
        let text = std::fs::read_to_string(POLICY).expect("deny.toml");
        let policy = Policy::parse(&text).expect("policy");
        assert!(policy.allowed.contains("MIT"), "{policy:?}");
        assert!(policy.ignore_private, "{policy:?}");
    }
}
