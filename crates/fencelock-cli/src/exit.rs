//! The exit codes of `fencelock`, one constant each, and [`TABLE`], what each means.
//!
//! `fencelock run` exits with its command's own code when the command ran and the lock held
//! throughout (128 + N when the command was killed by signal N, as shells report it). The
//! codes below are fencelock's own; they follow `sysexits.h` where one fits. A command may exit
//! with one of these numbers itself; scripts that must tell them apart can read fencelock's
//! one-line message on standard error.

/// Done: `hold`, `status`, `unlock --force` and `leader` did their work.
pub const SUCCESS: u8 = 0;
/// Bad usage: an unknown flag, a malformed duration or URL, a name or option fencelock refuses,
/// a missing `--force`, what the deployment does not offer (`Error::Unsupported`: with
/// `--redlock`, anything but a plain mutex), a server older than fencelock supports.
pub const USAGE: u8 = 64;
/// Redis could not be reached.
pub const UNAVAILABLE: u8 = 69;
/// Redis answered with an error fencelock did not expect.
pub const SOFTWARE: u8 = 70;
/// `--no-wait` and the lock is held by someone else.
pub const HELD: u8 = 73;
/// `--wait` ran out before the lock could be taken.
pub const TIMEOUT: u8 = 74;
/// The lock was lost while the command ran (renewal failed, Redis unreachable past the lease,
/// or the lock was removed); the command was stopped.
pub const LOST: u8 = 75;
/// Redis refused the credentials or the command (ACL).
pub const NOPERM: u8 = 77;
/// Nothing held: `unlock --force` found no lock under that name (of any kind under the prefix,
/// or in the `--layout` given), or `leader` found nobody leading.
pub const NOT_HELD: u8 = 78;
/// A deadlock: `status --graph` found a cycle of waits, or `run`, `hold` or `elect` with
/// `--deadlock-check` gave up because its wait closed one.
pub const DEADLOCK: u8 = 79;
/// `status --graph` found no cycle among the waits it could see, but some waiters recorded no
/// wait (they have waited less than their client's record threshold, or record none), or
/// more waits were recorded than it reads: it cannot say there is no deadlock.
pub const UNSEEN_WAITS: u8 = 80;
/// The command could not be started (not found, not executable).
pub const CANNOT_RUN: u8 = 127;

/// Every exit code of `fencelock`, with what it means: the one table that `fencelock --help` and
/// this crate's README show, row for row (a test checks that they agree with it, and that it has
/// a row for every constant of this module).
pub const TABLE: &[(&str, &str)] = &[
    (
        "the command's own",
        "`run`, and `elect` with `--once` or stopped by a signal: the command exited and the \
         lock (the leadership) held throughout; 128+N when signal N killed it",
    ),
    (
        "0",
        "`hold` held the lock until its input ended or a signal came; `status` listed the \
         locks (with `--graph`: no deadlock, and every waiter's wait recorded); `unlock \
         --force` removed some; `leader` found a leader, or `--watch` was stopped",
    ),
    (
        "64",
        "bad usage: an unknown flag, a bad duration (`500ms`, `30s`, `5m`, `1h`, `1m30s`) or \
         address (the message says what is expected), a name or option fencelock refuses, \
         `unlock` without `--force`, what the deployment does not offer (with `--redlock`: \
         every lock but a plain mutex, `--deadlock-check`, `status`, `top`, `unlock`, `elect` \
         and `leader`), a server older than Redis 6.2",
    ),
    (
        "69",
        "Redis could not be reached (while waiting: once `--wait` ran out, or after 30 s \
         without one)",
    ),
    (
        "70",
        "Redis answered with an error fencelock did not expect",
    ),
    (
        "73",
        "`--no-wait`, and the lock is held (the message says by whom, for how long); `-E N` \
         exits N instead",
    ),
    (
        "74",
        "`--wait` ran out (the message says who holds the lock); `-E N` exits N instead",
    ),
    (
        "75",
        "the lock (the leadership) was lost while the command ran or `hold` held it; the \
         command was stopped",
    ),
    ("77", "Redis refused the credentials or a command (ACL)"),
    (
        "78",
        "nothing held: `unlock --force` found no lock under the name (of any kind under the \
         prefix, or in the `--layout` given), `leader` found nobody leading",
    ),
    (
        "79",
        "a deadlock: `status --graph` found a cycle of waits (it names each step), or `run`, \
         `hold` or `elect` with `--deadlock-check` gave up because its wait closed one",
    ),
    (
        "80",
        "`status --graph` saw no cycle, but some waiters recorded no wait (waiting under their \
         client's 1 s threshold, or with recording off) or too many waits to read: it cannot \
         say there is none",
    ),
    (
        "127",
        "the command could not be started (not found, not executable)",
    ),
    (
        "128+N",
        "fencelock got signal N while waiting for the lock (`run`, `hold`) or campaigning \
         (`elect`)",
    ),
];

/// [`TABLE`] as `fencelock --help` prints it, under the heading `Exit codes:`: each meaning
/// beside its code, wrapped to fit 96 columns.
pub fn help() -> String {
    const COLUMNS: usize = 96;
    let width = TABLE.iter().map(|(code, _)| code.len()).max().unwrap_or(0);
    let indent = 2 + width + 2;
    let mut text = String::from("Exit codes:\n");
    for (code, meaning) in TABLE {
        let mut line = format!("  {code:<width$}  ");
        let mut empty = true;
        for word in meaning.split_whitespace() {
            if !empty && line.len() + 1 + word.len() > COLUMNS {
                text.push_str(&line);
                text.push('\n');
                line = " ".repeat(indent);
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}
