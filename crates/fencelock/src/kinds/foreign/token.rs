//! The plain-token layout of redis-py's `Lock`, node-redlock, go-redsync, pottery's `Redlock`,
//! redis-semaphore's `Mutex` and rslock: one string key per lock, the holder's random token as
//! its value, the lease as its expiry (`SET key token NX PX lease`); a release or an extension
//! compares the value with the token first. Where they differ is the key a name becomes
//! ([`Layout::key`](crate::Layout::key)) and how long a lease lasts by default; none of them
//! announces a release, so their waiters, and ours, try again after a pause.

use crate::transport::script::Invocation;

use crate::token::OwnerToken;
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[include_str!("token/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[include_str!("token/release.lua")]);
static EXTEND: Lua = Lua::new(&[include_str!("token/extend.lua")]);

/// `SET key token NX PX lease`, or the same grant again on a resend.
pub(super) fn acquire(key: &[u8], token: &OwnerToken, lease_ms: u64) -> Invocation {
    let mut invocation = ACQUIRE.invocation();
    invocation.key(key).arg(token.as_str()).arg(lease_ms);
    invocation
}

/// Deletes the key if its value is `token`.
pub(super) fn release(key: &[u8], token: &OwnerToken) -> Invocation {
    let mut invocation = RELEASE.invocation();
    invocation.key(key).arg(token.as_str());
    invocation
}

/// Lengthens the key's expiry to `lease_ms` if its value is `token`: the extension of every
/// layout whose lock is one string key, python-redis-lock's included.
pub(super) fn extend(key: &[u8], token: &OwnerToken, lease_ms: u64) -> Invocation {
    let mut invocation = EXTEND.invocation();
    invocation.key(key).arg(token.as_str()).arg(lease_ms);
    invocation
}
