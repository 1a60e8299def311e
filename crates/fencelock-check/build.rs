//! Hashes the sources this program measures (`fencelock_sources::CHECK`) as they
//! are built, so that every result it writes says which code it measured: the figures check
//! (`cargo xtask figures`) compares that digest with the working tree's.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    // This crate lives at crates/<name>/ in the repository.
    let Some(root) = Path::new(&manifest).parent().and_then(Path::parent) else {
        eprintln!("cannot find the repository's root above {manifest:?}");
        return ExitCode::FAILURE;
    };
    match fencelock_sources::build_script(root, fencelock_sources::CHECK) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot hash the sources this program measures: {e}");
            ExitCode::FAILURE
        }
    }
}
