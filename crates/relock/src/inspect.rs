//! What operators need: which locks are held, by whom, for how long, with how many waiting
//! clients; and a forced release of a stuck lock.

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{unescape_name, LockKeys};
use crate::scripts::{script, Script};
use crate::token::Fence;

static MUTEX_FORCE_RELEASE: std::sync::LazyLock<Script> = script!("mutex_force_release.lua");

/// The suffix of a mutex's key.
const MUTEX_SUFFIX: &str = "mutex";

/// Which primitive a lock found in Redis belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Mutex`](crate::Mutex).
    Mutex,
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockKind::Mutex => f.write_str("mutex"),
        }
    }
}

/// A held lock, as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name (lossily decoded where it is not UTF-8).
    pub name: String,
    /// Which primitive it is.
    pub kind: LockKind,
    /// The holder's label, when its client set one
    /// ([`ClientOptions::holder_label`](crate::ClientOptions::holder_label)).
    pub holder: Option<String>,
    /// The fencing token of the current grant.
    pub fence: Option<Fence>,
    /// How long the lease still runs; `None` when the key has no expiry.
    pub remaining: Option<Duration>,
    /// How many clients (processes, usually) wait for a release of this name.
    pub waiting_clients: u64,
}

impl Client {
    /// The locks that are held now whose names match `pattern`, a Redis glob (`*` any
    /// characters, `?` one, `[abc]` a set; `*` alone lists all), sorted by name.
    ///
    /// This walks the key space with `SCAN`: it does not block Redis, and a lock taken or
    /// released during the walk may or may not be listed.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// let options = relock::ClientOptions::default().holder_label("billing-7");
    /// let client = relock::Client::connect_with_options(url.as_str(), options).await?;
    /// let guard = client.mutex("invoices:2026-11")?.lock().await?;
    /// let held = client.locks("invoices:*").await?;
    /// assert_eq!(held[0].name, "invoices:2026-11");
    /// assert_eq!(held[0].holder.as_deref(), Some("billing-7"));
    /// assert_eq!(held[0].fence, Some(guard.fence()));
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let options = &self.shared.options;
        let matcher = scan_pattern(&options.prefix, pattern, MUTEX_SUFFIX);
        let mut conn = self.shared.conn.clone();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&matcher)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        let mut locks = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(name) = name_of(&options.prefix, &key, MUTEX_SUFFIX) else {
                continue;
            };
            if let Some(info) = self.read_mutex(&key, &name).await? {
                locks.push(info);
            }
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    /// The mutex `name` if it is held now: holder, fence, remaining lease, waiting clients.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an unusable name; [`Error::WrongType`] when the key holds
    /// another type; [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::Client::connect(server.url().as_str()).await?;
    /// assert!(client.lock_info("report").await?.is_none());
    /// let guard = client.mutex("report")?.lock().await?;
    /// let info = client.lock_info("report").await?.expect("held");
    /// assert!(info.remaining.is_some());
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_info(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        self.read_mutex(&keys.key(MUTEX_SUFFIX), name.as_ref())
            .await
            .map_err(|e| match e {
                Error::Redis(e) => Error::from_redis(e, &keys.display_name()),
                other => other,
            })
    }

    async fn read_mutex(&self, key: &[u8], name: &[u8]) -> Result<Option<LockInfo>> {
        let (value, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
            .get(key)
            .pttl(key)
            .query_async(&mut self.shared.conn.clone())
            .await?;
        let Some(value) = value else {
            return Ok(None);
        };
        let waiting_clients = self.waiting_clients(name).await?;
        Ok(Some(describe(name, &value, pttl, waiting_clients)))
    }

    /// Releases the mutex `name` whoever holds it, wakes its waiters, and returns what was
    /// removed (`None` when it was not held).
    ///
    /// This is for operators clearing a lock whose holder is known to be gone. The holder, if
    /// alive, learns it lost the lock at its next renewal; whatever it does until then is
    /// unprotected, so prefer waiting for the lease to end when it is short.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an unusable name; [`Error::WrongType`] when the key holds
    /// another type; [`Error::Redis`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release happens entirely or not at all, though a cancelled call may
    /// have happened without its caller knowing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), relock::Error> {
    /// # let server = relock_testkit::RedisServer::start();
    /// # let client = relock::Client::connect(server.url().as_str()).await?;
    /// let stuck = client.mutex("nightly")?.lock().await?;
    /// let removed = client.force_unlock("nightly").await?.expect("it was held");
    /// assert_eq!(removed.fence, Some(stuck.fence()));
    /// assert!(stuck.unlock().await.is_err()); // the former holder finds out
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        let display = keys.display_name();
        let removed: Option<(Vec<u8>, i64)> = MUTEX_FORCE_RELEASE
            .key(keys.key(MUTEX_SUFFIX))
            .arg(keys.wake_channel())
            .invoke_async(&mut self.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &display))?;
        let waiting_clients = match removed {
            Some(_) => self.waiting_clients(name.as_ref()).await?,
            None => 0,
        };
        Ok(removed.map(|(value, pttl)| describe(name.as_ref(), &value, pttl, waiting_clients)))
    }

    /// How many clients are subscribed to a name's wake channel: each has at least one waiter.
    async fn waiting_clients(&self, name: &[u8]) -> Result<u64> {
        let keys = LockKeys::new(&self.shared.options.prefix, name)?;
        let mut conn = self.shared.conn.clone();
        let (_, count): (Vec<u8>, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(keys.wake_channel())
            .query_async(&mut conn)
            .await?;
        Ok(count)
    }
}

/// Reads a mutex value `<token>:<fence>[:<label>]`.
fn describe(name: &[u8], value: &[u8], pttl: i64, waiting_clients: u64) -> LockInfo {
    let mut parts = value.splitn(3, |&b| b == b':').skip(1);
    let fence = parts
        .next()
        .and_then(|f| std::str::from_utf8(f).ok())
        .and_then(|f| f.parse().ok())
        .map(Fence::new);
    let holder = parts
        .next()
        .map(|l| String::from_utf8_lossy(l).into_owned());
    LockInfo {
        name: String::from_utf8_lossy(name).into_owned(),
        kind: LockKind::Mutex,
        holder,
        fence,
        remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
        waiting_clients,
    }
}

/// The `SCAN MATCH` pattern for names matching `pattern`: the prefix taken literally, the
/// name's braces and `%` escaped as in keys, its glob characters kept.
fn scan_pattern(prefix: &str, pattern: &str, suffix: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + pattern.len() + suffix.len() + 4);
    for &b in prefix.as_bytes() {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'{');
    for &b in pattern.as_bytes() {
        match b {
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            b'%' => out.extend_from_slice(b"%25"),
            _ => out.push(b),
        }
    }
    out.extend_from_slice(b"}:");
    out.extend_from_slice(suffix.as_bytes());
    out
}

/// The lock name inside `<prefix>{<escaped name>}:<suffix>`, if the key has that shape.
fn name_of(prefix: &str, key: &[u8], suffix: &str) -> Option<Vec<u8>> {
    let rest = key.strip_prefix(prefix.as_bytes())?.strip_prefix(b"{")?;
    let tail_len = suffix.len() + 2;
    if rest.len() < tail_len {
        return None;
    }
    let (escaped, tail) = rest.split_at(rest.len() - tail_len);
    if tail.strip_prefix(b"}:")? != suffix.as_bytes() || escaped.contains(&b'}') {
        return None;
    }
    unescape_name(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_keys() {
        for name in [&b"lottery"[..], b"a}b{c%", b"\x00\xff", b"x:y"] {
            let key = LockKeys::new("relock:", name)
                .expect("name")
                .key(MUTEX_SUFFIX);
            assert_eq!(
                name_of("relock:", &key, MUTEX_SUFFIX).as_deref(),
                Some(name)
            );
        }
        assert_eq!(name_of("relock:", b"relock:{a}:fence", MUTEX_SUFFIX), None);
        assert_eq!(name_of("other:", b"relock:{a}:mutex", MUTEX_SUFFIX), None);
    }

    #[test]
    fn scan_patterns_escape_the_prefix_and_braces_only() {
        assert_eq!(scan_pattern("a*:", "job:*", "mutex"), b"a\\*:{job:*}:mutex");
        assert_eq!(scan_pattern("r:", "{x}", "mutex"), b"r:{%7Bx%7D}:mutex");
    }

    #[test]
    fn values_are_read_into_holder_and_fence() {
        let info = describe(b"n", b"tok:1795:host-1:99", 1500, 2);
        assert_eq!(info.fence, Some(Fence::new(1795)));
        assert_eq!(info.holder.as_deref(), Some("host-1:99"));
        assert_eq!(info.remaining, Some(Duration::from_millis(1500)));
        let bare = describe(b"n", b"tok:17", -1, 0);
        assert_eq!((bare.holder, bare.remaining), (None, None));
        let junk = describe(b"n", b"garbage", 10, 0);
        assert_eq!(junk.fence, None);
    }
}
