//! Redisson's `RLock` layout (unchanged from Redisson 3.24 to 4.7): a hash at the lock's name,
//! whose one field `<client id>:<thread id>` counts its holder's entries, with an expiry that
//! Redisson's watchdog renews (`lockWatchdogTimeout`, 30 s by default). A release that frees
//! it publishes `0` on `redisson_lock__channel:{<name>}` (the name without braces added when it
//! has one), which lets one waiter of each subscribed client try again.
//!
//! Each grant here is a holder of its own: the field is this client's id (128 random bits, as
//! a Redisson client's UUID) and a number drawn per grant in place of a thread's id. Our waiters
//! subscribe to the channel and are woken by Redisson's unlock message, one per client per
//! message, as Redisson's waiters of one client are.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::transport::script::Invocation;

use crate::token::OwnerToken;
use crate::transport::script::Lua;

static ACQUIRE: Lua = Lua::new(&[include_str!("redisson/acquire.lua")]);
static RELEASE: Lua = Lua::new(&[include_str!("redisson/release.lua")]);
static EXTEND: Lua = Lua::new(&[include_str!("redisson/extend.lua")]);

/// Redisson's unlock message (`LockPubSub.UNLOCK_MESSAGE`).
pub(super) const UNLOCK_MESSAGE: &[u8] = b"0";

/// The next number that stands in for a thread's id in a holder's field: one per grant, so
/// that no two grants of one client share a field.
static NEXT_HOLDER: AtomicU64 = AtomicU64::new(1);

/// A holder's field for a new grant of the client `client_id`: `<client id>:<number>`.
pub(super) fn new_holder(client_id: &str) -> OwnerToken {
    let number = NEXT_HOLDER.fetch_add(1, Ordering::Relaxed);
    OwnerToken::foreign(format!("{client_id}:{number}"))
}

/// RedissonLock's `tryLockInnerAsync` for a first entry, or the same grant again on a resend.
pub(super) fn acquire(key: &[u8], holder: &OwnerToken, lease_ms: u64) -> Invocation {
    let mut invocation = ACQUIRE.invocation();
    invocation.key(key).arg(lease_ms).arg(holder.as_str());
    invocation
}

/// The release of `holder`'s grant: the hash deleted, the unlock message published.
pub(super) fn release(key: &[u8], channel: &[u8], holder: &OwnerToken) -> Invocation {
    let mut invocation = RELEASE.invocation();
    invocation
        .key(key)
        .arg(holder.as_str())
        .arg(channel)
        .arg(UNLOCK_MESSAGE);
    invocation
}

/// Lengthens the hash's expiry to `lease_ms` if `holder` holds it.
pub(super) fn extend(key: &[u8], holder: &OwnerToken, lease_ms: u64) -> Invocation {
    let mut invocation = EXTEND.invocation();
    invocation.key(key).arg(holder.as_str()).arg(lease_ms);
    invocation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_grant_is_a_holder_of_its_own_client() {
        let id = crate::token::random_id().expect("random");
        let (a, b) = (new_holder(&id), new_holder(&id));
        assert_ne!(a, b);
        for holder in [&a, &b] {
            let (client, number) = holder.as_str().rsplit_once(':').expect("a field");
            assert_eq!(client, id);
            assert!(number.parse::<u64>().is_ok(), "{number}");
        }
    }
}
