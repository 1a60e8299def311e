//! The bodies of fencelock's fuzz targets: each takes the raw input libFuzzer makes, feeds it to
//! the code that reads what a user types or passes, and panics when a documented property
//! does not hold. The binaries in `fuzz/` are one line each over these functions, and
//! `tests/replay.rs` replays the committed seeds (`fuzz/seeds/TARGET/`) and generated inputs
//! through them on stable, so what the fuzzer once found stays fixed.
//!
//! Inputs are text where they can be, so that seeds can be written and read by hand; each
//! target's module says its format.

mod cli_args;
mod connection_url;
mod duration;
mod lock_name;
mod options;
mod text;

pub use cli_args::cli_args;
pub use connection_url::connection_url;
pub use duration::duration;
pub use lock_name::lock_name;
pub use options::options;

/// A target's body: runs one input, and panics when a property does not hold.
pub type Target = fn(&[u8]);

/// Every target by its name in `fuzz/` (the name of its binary and of its seed folder).
pub const TARGETS: [(&str, Target); 5] = [
    ("duration", duration),
    ("cli_args", cli_args),
    ("connection_url", connection_url),
    ("lock_name", lock_name),
    ("options", options),
];
