//! How lock names map to Redis keys and channels.
//!
//! Every key of one lock name shares the hash tag `{name}`, so all of them live in one slot and
//! one script can touch them all, on a single server or on Redis Cluster. Braces and `%` in a
//! name are percent-escaped inside the tag: a name can then never end the tag early or split its
//! keys across slots, and distinct names always give distinct keys.

use std::fmt;

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 4096;

/// The longest key prefix accepted, in bytes.
pub(crate) const MAX_PREFIX_LEN: usize = 256;

/// A validated lock name and the keys derived from it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    name: Vec<u8>,
    tagged: Vec<u8>,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &[u8]) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::InvalidName {
                reason: "the name is empty",
            });
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName {
                reason: "the name is longer than 4096 bytes",
            });
        }
        let mut tagged = Vec::with_capacity(prefix.len() + name.len() + 2);
        tagged.extend_from_slice(prefix.as_bytes());
        tagged.push(b'{');
        for &b in name {
            match b {
                b'{' => tagged.extend_from_slice(b"%7B"),
                b'}' => tagged.extend_from_slice(b"%7D"),
                b'%' => tagged.extend_from_slice(b"%25"),
                _ => tagged.push(b),
            }
        }
        tagged.push(b'}');
        Ok(LockKeys {
            name: name.to_vec(),
            tagged,
        })
    }

    /// The name as given, byte for byte.
    pub(crate) fn name(&self) -> &[u8] {
        &self.name
    }

    /// The name as given, shown lossily where it is not UTF-8.
    pub(crate) fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// `<prefix>{<name>}:<suffix>`.
    pub(crate) fn key(&self, suffix: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.tagged.len() + 1 + suffix.len());
        key.extend_from_slice(&self.tagged);
        key.push(b':');
        key.extend_from_slice(suffix.as_bytes());
        key
    }

    /// The channel `<prefix>{<name>}:<wake>:<client tag>` of the name's wake channel `wake`
    /// that only the client `client_id` listens to: where a release tells that client's waiter
    /// that it granted it the lock (`kinds/mutex/value.lua`, `channel_of`).
    pub(crate) fn client_channel(&self, wake: &str, client_id: &str) -> Vec<u8> {
        let mut channel = self.key(wake);
        channel.push(b':');
        channel.extend_from_slice(crate::token::client_tag(client_id).as_bytes());
        channel
    }

    /// The key that holds the last fencing token granted for this name, whatever the kind.
    pub(crate) fn fence_key(&self) -> Vec<u8> {
        self.key(FENCE)
    }
}

/// The suffix of the key every kind of lock of a name takes its fences from.
pub(crate) const FENCE: &str = "fence";

impl fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display_name())
    }
}

/// Reverses the escaping of a name inside a key's hash tag; `None` if it is not well formed.
pub(crate) fn unescape_name(escaped: &[u8]) -> Option<Vec<u8>> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let (code, tail) = tail.split_at_checked(2)?;
            name.push(match code {
                b"7B" => b'{',
                b"7D" => b'}',
                b"25" => b'%',
                _ => return None,
            });
            rest = tail;
        } else {
            name.push(b);
            rest = tail;
        }
    }
    Some(name)
}

/// Checks a key prefix: braces in it would become the hash tag of every lock.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::InvalidOption {
            option: "prefix",
            reason:
                "a prefix must not contain `{` or `}`: it would put every lock in one hash slot"
                    .into(),
        });
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::InvalidOption {
            option: "prefix",
            reason: format!("a prefix is at most {MAX_PREFIX_LEN} bytes"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(name: &[u8]) -> LockKeys {
        LockKeys::new("fencelock:", name).expect("valid name")
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = keys(b"lottery");
        assert_eq!(k.key("mutex"), b"fencelock:{lottery}:mutex");
        assert_eq!(k.fence_key(), b"fencelock:{lottery}:fence");
    }

    #[test]
    fn braces_and_percent_are_escaped_injectively() {
        assert_eq!(keys(b"a}b{").key("m"), b"fencelock:{a%7Db%7B}:m");
        assert_ne!(keys(b"%7D").key("m"), keys(b"}").key("m"));
        assert_eq!(keys(b"%").key("m"), b"fencelock:{%25}:m");
    }

    #[test]
    fn empty_and_oversized_names_are_refused() {
        assert!(matches!(
            LockKeys::new("p:", b""),
            Err(Error::InvalidName { .. })
        ));
        let long = vec![b'x'; MAX_NAME_LEN + 1];
        assert!(matches!(
            LockKeys::new("p:", &long),
            Err(Error::InvalidName { .. })
        ));
        assert!(LockKeys::new("p:", &long[..MAX_NAME_LEN]).is_ok());
    }

    #[test]
    fn binary_names_are_kept_byte_for_byte() {
        let k = keys(&[0, 255, b':']);
        assert_eq!(k.key("m"), b"fencelock:{\x00\xff:}:m");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(validate_prefix("app:{x}:").is_err());
        assert!(validate_prefix("app:").is_ok());
    }
}
