//! python-redis-lock's layout (4.x): the lock at `lock:<name>`, the holder's id as its value and
//! an expiry in whole seconds (`SET NX EX`); beside it the signal list `lock-signal:<name>`,
//! which a release empties and gives one element that lives a second: python-redis-lock's
//! waiters block on it (`BLPOP`), so each release wakes one of them.
//!
//! A release here does what python-redis-lock's `UNLOCK` script does, so that it wakes a Python
//! waiter. Our waiters do not block on the list: they try again every
//! [`poll_interval`](crate::LockOptions::poll_interval), which notices a Python release within
//! that interval. A `BLPOP` of ours would take the one element a release leaves, which
//! python-redis-lock's own waiters count on (a waiter of theirs without a timeout blocks until
//! the next release), and a `BLPOP` cancelled on its way would lose it; it would also hold a
//! connection of its own per waiter. Polling leaves the signal to them, and a cancelled wait
//! leaves nothing behind.

use crate::transport::script::Invocation;

use crate::token::OwnerToken;
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[include_str!("python_redis_lock/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[include_str!("python_redis_lock/release.lua")]);

/// How long a release's signal lives, in ms: python-redis-lock's `signal_expire` default.
pub(super) const SIGNAL_EXPIRE_MS: u64 = 1000;

/// `SET lock:<name> token NX EX seconds`, or the same grant again on a resend.
pub(super) fn acquire(key: &[u8], token: &OwnerToken, lease_secs: u64) -> Invocation {
    let mut invocation = ACQUIRE.invocation();
    invocation.key(key).arg(token.as_str()).arg(lease_secs);
    invocation
}

/// python-redis-lock's `UNLOCK` for `token`: the signal refilled, the lock deleted.
pub(super) fn release(key: &[u8], signal: &[u8], token: &OwnerToken) -> Invocation {
    let mut invocation = RELEASE.invocation();
    invocation
        .key(key)
        .key(signal)
        .arg(token.as_str())
        .arg(SIGNAL_EXPIRE_MS);
    invocation
}
