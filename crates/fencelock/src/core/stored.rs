//! How each kind keeps its state under a name, as inspection reads it and a forced release
//! removes it: [`Stored`], one per kind, declared in the kind's own module; and what an
//! operator sees of a lock, [`LockInfo`].

use std::time::Duration;

pub(crate) use crate::cycle::LockKind;
use crate::token::Fence;
use crate::transport::script::Lua;

/// A held lock, as an operator sees it.
///
/// One name may hold locks of several kinds at once (a mutex and a semaphore of the same name
/// are different locks); each is listed on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (lossily decoded where it is not UTF-8).
    pub name: String,
    /// Which primitive it is.
    pub kind: LockKind,
    /// The holder, when one owner holds the lock and it is known: the label its client set
    /// ([`ClientOptions::holder_label`](crate::ClientOptions::holder_label)) for a mutex,
    /// reentrant mutex, fair mutex or semaphore grants; the [`Holder::id`](crate::Holder::id)
    /// for a read-write lock.
    pub holder: Option<String>,
    /// Every holder known, without repeats, in the order found (see `holder`). A semaphore's
    /// grants from clients without a holder label add none.
    pub holders: Vec<String>,
    /// How many holds are live: 1 for a mutex or fair mutex, the owner's holds for a
    /// reentrant mutex, read and write holds for a read-write lock, grants for a semaphore.
    pub holds: u64,
    /// For a read-write lock, how many of `holds` are write holds (0 when it is only read).
    pub write_holds: Option<u64>,
    /// For a semaphore, the permits the live grants hold.
    pub permits_in_use: Option<u64>,
    /// For a semaphore, the total of permits stored in Redis.
    pub permits_total: Option<u64>,
    /// The fencing token of the current grant: of the write holds of a read-write lock when it
    /// has some, else of its read holds. `None` for a semaphore, whose grants' fences are not
    /// stored.
    pub fence: Option<Fence>,
    /// How long the lease still runs, the longest of the holds' where each has its own;
    /// `None` when the key has no expiry.
    pub remaining: Option<Duration>,
    /// How many clients (processes, usually) listen for a release of this lock: subscriptions
    /// to its wake channels (for a read-write lock, its readers' and writers' are added up). A
    /// client stays subscribed a few wake fallbacks after its last waiter of the name left, so
    /// that its next wait there starts at once; [`queued`](LockInfo::queued) counts the waiters
    /// themselves where Redis records them.
    pub waiting_clients: u64,
    /// Waiters recorded in Redis: a mutex's waiters with a place, a fair mutex's waiters in
    /// line, a read-write lock's writers waiting with preference. `None` for the kinds that
    /// record none.
    pub queued: Option<u64>,
}

impl LockInfo {
    pub(crate) fn new(name: &[u8], kind: LockKind) -> LockInfo {
        LockInfo {
            name: String::from_utf8_lossy(name).into_owned(),
            kind,
            holder: None,
            holders: Vec::new(),
            holds: 0,
            write_holds: None,
            permits_in_use: None,
            permits_total: None,
            fence: None,
            remaining: None,
            waiting_clients: 0,
            queued: None,
        }
    }

    pub(crate) fn add_holder(&mut self, holder: String) {
        if !self.holders.contains(&holder) {
            self.holders.push(holder);
        }
        self.holder = match self.holders.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        };
    }
}

/// The state of one lock as read from Redis, before it is judged held or not.
#[derive(Debug, Default)]
pub(crate) struct Raw {
    /// A string key's value.
    pub(crate) value: Option<Vec<u8>>,
    /// A hash key's fields and values.
    pub(crate) fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The key's time to live in ms: -1 without an expiry, -2 without the key.
    pub(crate) pttl: i64,
    /// How many waiters have a live place, for the kinds that keep places.
    pub(crate) queued: u64,
}

/// The type of a kind's main key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A string: one holder's value.
    Value,
    /// A hash: one field per hold, or an owner's holds.
    Hash,
}

/// How one kind of lock keeps its state under a name (`<prefix>{<name>}:<suffix>`): what
/// inspection reads, how it judges it, and what a forced release runs.
pub(crate) struct Stored {
    /// The key that exists while a name has a lock of this kind, and holds its holders.
    pub(crate) key: &'static str,
    pub(crate) shape: Shape,
    /// The sorted set of this kind's waiters' places (token -> when the place ends), for the
    /// kinds that keep one.
    pub(crate) places: Option<&'static str>,
    /// The channels its waiters listen on.
    pub(crate) channels: &'static [&'static str],
    /// The lock as held, from what was read at server time `now_ms`; `None` when nobody
    /// holds it (a released mutex keeps its last fence, which is no hold).
    pub(crate) judge: fn(name: &[u8], raw: &Raw, now_ms: i64) -> Option<LockInfo>,
    /// The forced release: run with `force_keys` as KEYS (suffixes), and the `channels` then
    /// the fence memory in ms as ARGV; it replies `{server ms, value or false, pttl, fields,
    /// waiters with a live place}`, what it found before removing it (`core/force.lua`).
    pub(crate) force: &'static Lua,
    pub(crate) force_keys: &'static [&'static str],
}

impl Stored {
    /// Every suffix of a key or channel this kind uses, once.
    #[cfg(test)]
    pub(crate) fn suffixes(&self) -> Vec<&'static str> {
        let mut all: Vec<&'static str> = std::iter::once(self.key)
            .chain(self.places)
            .chain(self.force_keys.iter().copied())
            .chain(self.channels.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// A decimal number of ASCII digits only.
pub(crate) fn parse_number<T: std::str::FromStr>(bytes: &[u8]) -> Option<T> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A key's remaining lease from its `PTTL`; `None` without an expiry.
pub(crate) fn remaining_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// The time from `now_ms` to `expiry_ms`, both server ms.
pub(crate) fn remaining_until(expiry_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(expiry_ms.saturating_sub(now_ms)).unwrap_or(0))
}
