//! Random owner tokens and fencing tokens.

use std::fmt;

use crate::error::{Error, Result};

/// URL-safe base64: 22 characters carry 128 bits and never contain `:`, the separator of the
/// values fencelock stores.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// 128 random bits from the operating system's CSPRNG, as 22 base64 characters.
pub(crate) fn random_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| Error::Entropy {
        detail: e.to_string(),
    })?;
    let mut bits = u128::from_le_bytes(bytes);
    let mut out = String::with_capacity(22);
    for _ in 0..22 {
        out.push(char::from(ALPHABET[(bits & 63) as usize]));
        bits >>= 6;
    }
    Ok(out)
}

/// A uniformly random fraction in `[0, 1)`, for jitter. Jitter needs no secrecy, so a failing
/// generator degrades to no jitter instead of an error.
pub(crate) fn jitter_fraction() -> f64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

/// The token that identifies one grant of a lock: what the stored value starts with.
///
/// It ends with `:` so that comparing prefixes can never match a longer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A token that names the client it is one of: `<client tag>.<random>:`, so that a release
    /// that wakes its waiter can announce it where that client alone listens.
    pub(crate) fn of_client(client_id: &str) -> Result<Self> {
        Ok(OwnerToken(format!(
            "{}.{}:",
            client_tag(client_id),
            random_id()?
        )))
    }

    /// A token laid out as another library's holders are (a Redisson holder's field): it
    /// names no client of ours, and no release of ours is addressed to it.
    pub(crate) fn foreign(token: String) -> Self {
        OwnerToken(token)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// How many characters of a client's id name it in its tokens and its wake channels: 48 bits,
/// so that two clients waiting on one name share a channel only by a rare chance, which costs
/// them a message each, never a wrong wake (a wake names its waiter's whole token).
const CLIENT_TAG_LEN: usize = 8;

/// The part of a client's id its tokens and its wake channels carry.
pub(crate) fn client_tag(client_id: &str) -> &str {
    client_id.get(..CLIENT_TAG_LEN).unwrap_or(client_id)
}

/// A fencing token: every grant of a lock name gets a larger one than all grants before it.
///
/// Pass it to the resource the lock protects, and let the resource refuse writes that carry a
/// smaller token than one it has already accepted. That keeps the resource safe even when a
/// holder was paused past its lease and wakes up believing it still holds the lock.
///
/// The value is the Redis server's clock in microseconds at the grant, raised above the last
/// token granted for the same name when needed. Only comparisons between tokens of the same lock
/// name mean anything. See the crate documentation for what the ordering assumes.
///
/// It fits a signed 64-bit column (SQL's `BIGINT`): microseconds since 1970 reach `i64::MAX`
/// only in the year 294,000. Convert with `i64::try_from(fence.get())`, never with `as`.
/// [`topics::production`](crate::topics::production) shows a fenced `UPDATE` in PostgreSQL.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
/// let guard = client.mutex("ledger")?.lock().await?;
/// let fence: u64 = guard.fence().get();
/// // write(resource, fence, data): the resource refuses fences lower than the last one it saw
/// # let _ = fence;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    pub(crate) fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The token as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Fence> for u64 {
    fn from(fence: Fence) -> u64 {
        fence.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_22_chars_without_separator_and_distinct() {
        let a = random_id().expect("random");
        let b = random_id().expect("random");
        assert_eq!(a.len(), 22);
        assert!(!a.contains(':'));
        assert_ne!(a, b);
    }

    #[test]
    fn a_client_s_tokens_start_with_its_tag() {
        let id = random_id().expect("random");
        let t = OwnerToken::of_client(&id).expect("random");
        assert!(t.as_str().starts_with(&format!("{}.", &id[..8])));
        assert_eq!(t.as_str().len(), 8 + 1 + 22 + 1);
        assert_eq!(t.as_str().matches(':').count(), 1);
        assert!(t.as_str().ends_with(':'));
    }

    #[test]
    fn jitter_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter_fraction();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
