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
    /// that it granted it the lock (`kinds/value/value.lua`, `channel_of`).
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

/// Which library's layout a lock is kept in: fencelock's own, or that of a lock library of
/// another language, so that a Rust service and the services it shares a resource with take
/// one lock ([`Client::foreign_mutex`](crate::Client::foreign_mutex)).
///
/// In every foreign layout the key is what that library makes of the name its own user passes,
/// and no prefix of the client's ([`ClientOptions::prefix`](crate::ClientOptions::prefix)) is
/// added: `Layout::RedisPy` and the name `jobs:nightly` keep the key `jobs:nightly`, as
/// redis-py's `Lock(r, "jobs:nightly")` does. The layouts are told apart by their keys:
///
/// | layout | library | key of the name `N` | beside it |
/// |---|---|---|---|
/// | `RedisPy` | redis-py `Lock` (Python) | `N` | |
/// | `NodeRedlock` | node-redlock 5 (Node) | `N` | |
/// | `GoRedsync` | go-redsync 4 (Go) | `N` | |
/// | `Rslock` | rslock (Rust) | `N` | |
/// | `Pottery` | pottery `Redlock` (Python) | `redlock:N` | |
/// | `RedisSemaphore` | redis-semaphore `Mutex` (Node) | `mutex:N` | |
/// | `PythonRedisLock` | python-redis-lock (Python) | `lock:N` | the list `lock-signal:N` |
/// | `Redisson` | Redisson `RLock` (Java) | `N` (a hash) | the channel `redisson_lock__channel:{N}` |
///
/// `RedisPy`, `NodeRedlock`, `GoRedsync` and `Rslock` keep one key and one value the same
/// way, so any of them shares a lock with all four libraries.
///
/// # Examples
///
/// ```
/// use fencelock::Layout;
///
/// assert_eq!(Layout::RedisPy.key("jobs:nightly"), b"jobs:nightly");
/// assert_eq!(Layout::Pottery.key("jobs:nightly"), b"redlock:jobs:nightly");
/// assert_eq!("python-redis-lock".parse::<Layout>()?, Layout::PythonRedisLock);
/// # Ok::<(), fencelock::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// redis-py's `Lock`: the key `N`, a random token, `SET NX PX`.
    RedisPy,
    /// node-redlock 5 on one server: as redis-py's.
    NodeRedlock,
    /// go-redsync 4 on one server: as redis-py's.
    GoRedsync,
    /// rslock: as redis-py's (its tokens are raw bytes, compared as such).
    Rslock,
    /// pottery's `Redlock` on one server: the key `redlock:N`.
    Pottery,
    /// redis-semaphore's `Mutex`: the key `mutex:N`.
    RedisSemaphore,
    /// python-redis-lock 4: the key `lock:N` with an expiry in whole seconds, and the signal
    /// list `lock-signal:N` that each release fills to wake one waiter.
    PythonRedisLock,
    /// Redisson's `RLock`: a hash at `N` whose field `<client id>:<thread id>` counts its
    /// holder's entries, and the unlock message `0` on `redisson_lock__channel:{N}`.
    Redisson,
}

impl Layout {
    /// Every layout, in the order of the table above.
    pub const ALL: [Layout; 8] = [
        Layout::RedisPy,
        Layout::NodeRedlock,
        Layout::GoRedsync,
        Layout::Rslock,
        Layout::Pottery,
        Layout::RedisSemaphore,
        Layout::PythonRedisLock,
        Layout::Redisson,
    ];

    /// The layout's name, as the CLI's `--layout` and [`FromStr`](std::str::FromStr) take it:
    /// `redis-py`, `node-redlock`, `go-redsync`, `rslock`, `pottery`, `redis-semaphore`,
    /// `python-redis-lock`, `redisson`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::RedisPy => "redis-py",
            Layout::NodeRedlock => "node-redlock",
            Layout::GoRedsync => "go-redsync",
            Layout::Rslock => "rslock",
            Layout::Pottery => "pottery",
            Layout::RedisSemaphore => "redis-semaphore",
            Layout::PythonRedisLock => "python-redis-lock",
            Layout::Redisson => "redisson",
        }
    }

    /// The lock's key in Redis for the name `name`, as the layout's library makes it.
    pub fn key(self, name: impl AsRef<[u8]>) -> Vec<u8> {
        let prefix: &[u8] = match self {
            Layout::Pottery => b"redlock:",
            Layout::RedisSemaphore => b"mutex:",
            Layout::PythonRedisLock => b"lock:",
            _ => b"",
        };
        [prefix, name.as_ref()].concat()
    }

    /// Whether the layout's library names its locks with text: a name of other bytes is
    /// refused, since that library could not take the same lock.
    pub(crate) fn names_are_text(self) -> bool {
        !matches!(self, Layout::RedisPy | Layout::GoRedsync | Layout::Rslock)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Layout {
    type Err = Error;

    /// A layout by its [`name`](Layout::name).
    fn from_str(name: &str) -> Result<Layout> {
        Layout::ALL
            .into_iter()
            .find(|layout| layout.name() == name)
            .ok_or_else(|| Error::InvalidOption {
                option: "layout",
                reason: format!(
                    "{name:?} is none of {}",
                    Layout::ALL.map(Layout::name).join(", ")
                ),
            })
    }
}

/// python-redis-lock's signal list of the name `name`: `lock-signal:<name>`.
pub(crate) fn signal_list(name: &[u8]) -> Vec<u8> {
    [b"lock-signal:".as_slice(), name].concat()
}

/// Redisson's unlock channel of the lock `name` (its `prefixName("redisson_lock__channel",
/// name)`): `redisson_lock__channel:{<name>}`, or without the added braces when the name has a
/// `{` of its own.
pub(crate) fn redisson_channel(name: &[u8]) -> Vec<u8> {
    const CHANNEL: &[u8] = b"redisson_lock__channel:";
    if name.contains(&b'{') {
        [CHANNEL, name].concat()
    } else {
        [CHANNEL, b"{", name, b"}"].concat()
    }
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
    fn foreign_layouts_name_keys_as_their_libraries_do() {
        for layout in Layout::ALL {
            assert_eq!(layout.name().parse::<Layout>().ok(), Some(layout));
        }
        assert!("redis".parse::<Layout>().is_err());
        assert_eq!(Layout::GoRedsync.key("a:b"), b"a:b");
        assert_eq!(Layout::RedisSemaphore.key("a"), b"mutex:a");
        assert_eq!(Layout::PythonRedisLock.key("a"), b"lock:a");
        assert_eq!(signal_list(b"a"), b"lock-signal:a");
        assert_eq!(redisson_channel(b"a"), b"redisson_lock__channel:{a}");
        assert_eq!(redisson_channel(b"{a}:b"), b"redisson_lock__channel:{a}:b");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(validate_prefix("app:{x}:").is_err());
        assert!(validate_prefix("app:").is_ok());
    }
}
