//! The exit codes of `fencelock`, one constant each.
//!
//! `fencelock run` exits with its command's own code when the command ran and the lock held
//! throughout (128 + N when the command was killed by signal N, as shells report it). The
//! codes below are fencelock's own; they follow `sysexits.h` where one fits. A command may exit
//! with one of these numbers itself; scripts that must tell them apart can read fencelock's
//! one-line message on standard error.

/// Done (`run`: the command exited 0).
pub const SUCCESS: u8 = 0;
/// Bad usage: an unknown flag, a malformed duration or URL, a missing `--force`, a server older
/// than fencelock supports.
pub const USAGE: u8 = 64;
/// Redis answered with an error fencelock did not expect.
pub const SOFTWARE: u8 = 70;
/// `--no-wait` and the lock is held by someone else.
pub const HELD: u8 = 73;
/// `--wait` ran out before the lock could be taken.
pub const TIMEOUT: u8 = 74;
/// The lock was lost while the command ran (renewal failed, Redis unreachable past the lease,
/// or the lock was removed); the command was stopped.
pub const LOST: u8 = 75;
/// Redis could not be reached.
pub const UNAVAILABLE: u8 = 69;
/// Redis refused the credentials or the command (ACL).
pub const NOPERM: u8 = 77;
/// `unlock --force`: no lock of any kind was held under that name.
pub const NOT_HELD: u8 = 78;
/// The command could not be started (not found, not executable).
pub const CANNOT_RUN: u8 = 127;
