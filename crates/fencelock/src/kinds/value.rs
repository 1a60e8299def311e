//! The value a mutex keeps under its name, laid out for every kind that keeps one: a
//! [`Mutex`](crate::Mutex), a [`FairMutex`](crate::FairMutex) and each name of a
//! [`MultiMutex`](crate::MultiMutex) keep their holder in one (so that every kind of mutex of
//! one name takes fences that rise); an [`Election`](crate::Election)'s leader key starts as
//! one does, so the same extension serves it. Its forms and the handoff of a release to a waiter are `value/value.lua`; its
//! extension `value/extend.lua`; its forced release `value/take.lua`; and here, how
//! inspection reads one and how a waiter's place is written.

use crate::core::stored::{parse_number, remaining_pttl, LockInfo, LockKind, Raw};
use crate::token::{Fence, OwnerToken};
use crate::transport::script::{Invocation, Lua};

/// The forms of the value and the handoff to a waiter, shared by every script that reads or
/// writes one.
pub(crate) const VALUE: &str = include_str!("value/value.lua");

/// The forced release of a value, for the forced releases of the kinds that keep one (after
/// [`VALUE`] and `core/force.lua`).
pub(crate) const TAKE: &str = include_str!("value/take.lua");

pub(crate) static EXTEND: Lua = Lua::new(&[VALUE, include_str!("value/extend.lua")]);

/// The extension of a lease held in a value under `key`, laid out as a mutex's.
pub(crate) fn extend(key: &[u8], token: &OwnerToken, lease_ms: u64) -> Invocation {
    let mut invocation = EXTEND.invocation();
    invocation.key(key).arg(token.as_str()).arg(lease_ms);
    invocation
}

/// A waiter's place (`value/value.lua`): `<token><lease ms>[:<label>]`.
pub(crate) fn place_member(token: &OwnerToken, lease_ms: u64, label: &str) -> String {
    let mut member = format!("{}{lease_ms}", token.as_str());
    if !label.is_empty() {
        member.push(':');
        member.push_str(label);
    }
    member
}

/// A held value, with its waiters with a live place; `None` once released (the name's last
/// fence left behind is no hold).
pub(crate) fn held_value(name: &[u8], kind: LockKind, raw: &Raw) -> Option<LockInfo> {
    let value = raw.value.as_deref()?;
    if value.starts_with(b"~") {
        return None;
    }
    let mut info = holder_of(name, kind, value, raw.pttl);
    info.queued = Some(raw.queued);
    Some(info)
}

/// The holder of a held value (`<token><fence>[+][:<label>]`): its fence, label and remaining
/// lease.
fn holder_of(name: &[u8], kind: LockKind, value: &[u8], pttl: i64) -> LockInfo {
    let mut info = LockInfo::new(name, kind);
    let mut parts = value.splitn(3, |&b| b == b':').skip(1);
    info.fence = parts
        .next()
        // Marked that someone waits (`+`), and offered to a waiter that has not claimed it
        // (`+?`).
        .map(|fence| {
            fence
                .strip_suffix(b"+?")
                .or_else(|| fence.strip_suffix(b"+"))
                .unwrap_or(fence)
        })
        .and_then(parse_number)
        .map(Fence::new);
    if let Some(label) = parts.next() {
        info.add_holder(String::from_utf8_lossy(label).into_owned());
    }
    info.holds = 1;
    info.remaining = remaining_pttl(pttl);
    info
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn values_are_read_into_holder_and_fence() {
        let info = holder_of(b"n", LockKind::Mutex, b"tok:1795:host-1:99", 1500);
        assert_eq!(info.fence, Some(Fence::new(1795)));
        assert_eq!(info.holder.as_deref(), Some("host-1:99"));
        assert_eq!(info.holders, ["host-1:99"]);
        assert_eq!(info.remaining, Some(Duration::from_millis(1500)));
        let waited = holder_of(b"n", LockKind::Mutex, b"tok:1796+:host-1", 1500);
        assert_eq!(waited.fence, Some(Fence::new(1796)));
        assert_eq!(waited.holder.as_deref(), Some("host-1"));
        let offered = holder_of(b"n", LockKind::Mutex, b"tok:1797+?:host-2", 150);
        assert_eq!(offered.fence, Some(Fence::new(1797)));
        assert_eq!(offered.holder.as_deref(), Some("host-2"));
        let bare = holder_of(b"n", LockKind::Mutex, b"tok:17", -1);
        assert_eq!((bare.holder, bare.remaining), (None, None));
        let junk = holder_of(b"n", LockKind::Mutex, b"garbage", 10);
        assert_eq!(junk.fence, None);
    }
}
