//! The published crates as crates.io would receive them: each `.crate` must build, document and
//! compile its tests from its own files alone, and fencelock must build with its default features
//! off.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::cargo;

/// The crates a user installs, each after the crates it depends on.
const PUBLISHED: [&str; 3] = ["fencelock-testkit", "fencelock", "fencelock-cli"];

/// Lints and checks fencelock without its default features (its tests and examples too), checks
/// that its dependencies build with its minimum Rust version, then packages and verifies every
/// published crate, and builds fencelock's documentation and doctests from its unpacked `.crate`.
pub(crate) fn check() -> Result<(), String> {
    let started = Instant::now();
    dependencies_within_msrv()?;
    cargo(
        &[
            "clippy",
            "-p",
            "fencelock",
            "--no-default-features",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // The unit tests that only exist without the features: each refusal names what is off.
    cargo(
        &[
            "test",
            "-p",
            "fencelock",
            "--no-default-features",
            "--lib",
            "--quiet",
            "without_the_feature",
        ],
        &[],
    )?;
    forget_unpacked_local_crates()?;
    let mut package = vec!["package", "--quiet"];
    for name in PUBLISHED {
        package.extend(["-p", name]);
    }
    cargo(&package, NO_DEBUG_INFO)?;
    unpacked_fencelock()?;
    eprintln!("xtask: packaging checked in {:.0?}", started.elapsed());
    Ok(())
}

/// Removes the sources cargo unpacked from the local registry an earlier `cargo package` made
/// for the published crates. Cargo never unpacks the same name and version twice, so a later
/// packaging would otherwise verify fencelock-cli against fencelock's sources of that earlier run.
/// Such registries have no host, so their folders under `registry/src` start with `-`; the
/// crates.io one does not.
fn forget_unpacked_local_crates() -> Result<(), String> {
    let home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for unpacked in crates.flatten() {
            let name = unpacked.file_name().to_string_lossy().into_owned();
            if PUBLISHED
                .iter()
                .any(|published| name == format!("{published}-{}", version()))
            {
                std::fs::remove_dir_all(unpacked.path())
                    .map_err(|e| format!("cannot remove {:?}: {e}", unpacked.path()))?;
            }
        }
    }
    Ok(())
}

/// Unpacks the `.crate` files next to each other, in a workspace that takes fencelock-testkit
/// from its `.crate` as crates.io would, and builds fencelock's documentation (warnings denied)
/// and its doctests and tests there.
fn unpacked_fencelock() -> Result<(), String> {
    let packages = target_dir().join("package");
    let root = packages.join("unpacked");
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|e| format!("cannot clear {root:?}: {e}"))?;
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("cannot create {root:?}: {e}"))?;
    for name in ["fencelock-testkit", "fencelock"] {
        let file = packages.join(format!("{name}-{}.crate", version()));
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&root)
            .status()
            .map_err(|e| format!("cannot run tar: {e}"))?;
        if !status.success() {
            return Err(format!("cannot unpack {file:?} ({status})"));
        }
    }
    let manifest = format!(
        "[workspace]\nmembers = [\"fencelock-{v}\"]\nresolver = \"2\"\n\n\
         [patch.crates-io]\nfencelock-testkit = {{ path = \"fencelock-testkit-{v}\" }}\n",
        v = version()
    );
    std::fs::write(root.join("Cargo.toml"), manifest)
        .map_err(|e| format!("cannot write the workspace of the unpacked crates: {e}"))?;
    let manifest_path = root.join("Cargo.toml");
    let manifest_path = manifest_path
        .to_str()
        .ok_or("the target directory is not UTF-8")?;
    // The verification's own target directory: its dependencies are built already.
    let target = packages.join("unpacked-target");
    let target = target.to_str().ok_or("the target directory is not UTF-8")?;
    let in_root = [
        ("CARGO_TARGET_DIR", target),
        ("RUSTDOCFLAGS", "-D warnings"),
        NO_DEBUG_INFO[0],
    ];
    cargo(
        &[
            "doc",
            "--manifest-path",
            manifest_path,
            "--no-deps",
            "--all-features",
            "--quiet",
        ],
        &in_root,
    )?;
    cargo(
        &["test", "--manifest-path", manifest_path, "--doc", "--quiet"],
        &in_root,
    )
}

/// A packaged crate is built as a workspace of its own, without the workspace's profile: no
/// debug info there either, which the verification does not need and which makes its links slow.
const NO_DEBUG_INFO: &[(&str, &str)] = &[("CARGO_PROFILE_DEV_DEBUG", "false")];

/// The workspace's version, which every published crate shares.
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Fails when a dependency fencelock builds with (its normal dependencies, every feature on)
/// declares a `rust-version` above fencelock's own. Clippy's `incompatible_msrv` lint, which
/// reads fencelock's `rust-version`, covers fencelock's own use of the standard library; no older
/// toolchain is needed for either.
fn dependencies_within_msrv() -> Result<(), String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--all-features",
            "--locked",
        ])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status));
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    let packages: HashMap<&str, &Value> = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata lists no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let fencelock = packages
        .values()
        .find(|p| p["name"] == "fencelock" && p["source"].is_null())
        .ok_or("fencelock is not in the workspace")?;
    let msrv = version_of(fencelock).ok_or("fencelock declares no rust-version")?;
    let mut above = Vec::new();
    for id in normal_dependencies(&metadata, fencelock["id"].as_str().unwrap_or_default()) {
        let Some(package) = packages.get(id.as_str()) else {
            continue;
        };
        if version_of(package).is_some_and(|needs| needs > msrv) {
            above.push(format!(
                "{} {} needs Rust {}",
                package["name"], package["version"], package["rust_version"]
            ));
        }
    }
    if above.is_empty() {
        eprintln!(
            "xtask: every dependency of fencelock builds with Rust {}.{}",
            msrv.0, msrv.1
        );
        Ok(())
    } else {
        Err(format!(
            "fencelock's rust-version is {}.{}, but {}",
            msrv.0,
            msrv.1,
            above.join(", ")
        ))
    }
}

/// A package's `rust-version`, as major and minor.
fn version_of(package: &Value) -> Option<(u32, u32)> {
    let mut parts = package["rust_version"].as_str()?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Every package reached from `root` through normal (not dev or build) dependencies.
fn normal_dependencies(metadata: &Value, root: &str) -> Vec<String> {
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|n| Some((n["id"].as_str()?, n)))
                .collect()
        })
        .unwrap_or_default();
    let mut seen = vec![root.to_owned()];
    let mut next = 0;
    while let Some(id) = seen.get(next).cloned() {
        next += 1;
        let deps = nodes.get(id.as_str()).and_then(|n| n["deps"].as_array());
        for dep in deps.into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()));
            let Some(pkg) = dep["pkg"].as_str() else {
                continue;
            };
            if normal && !seen.iter().any(|s| s == pkg) {
                seen.push(pkg.to_owned());
            }
        }
    }
    seen
}
