//! What operators need: which locks are held, of every kind, by whom, for how long, with how
//! many waiting; who waits for whom ([`Client::wait_graph`], read by `core/waits/`); and a
//! forced release of everything held under a name.
//!
//! Each primitive keeps its state under its own key suffix of the name (see each type's
//! documentation). Holds that carry their own expiry (read-write holds, semaphore grants, fair
//! waiters' places) are judged by the Redis server's clock, read once per listing, so a hold
//! whose lease ended is never shown as held even before a script purged it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Value;

use crate::client::Client;
use crate::core::stored::{LockInfo, Raw, Shape, Stored};
use crate::core::waits::{graph, Holders, WaitGraph};
use crate::error::{Error, Result};
use crate::keys::{unescape_name, LockKeys};
use crate::kinds::STORED;
use crate::transport::conn::Conn;

impl Client {
    /// The locks of every kind that are held now whose names match `pattern`, a Redis glob (`*`
    /// any characters, `?` one, `[abc]` a set; `*` alone lists all), sorted by name, then kind:
    /// elections' leaders too. A [`ForeignMutex`](crate::ForeignMutex)'s key is another
    /// library's, outside the prefix: its handle's [`info`](crate::ForeignMutex::info) reads it.
    ///
    /// This walks the key space with `SCAN`: it does not block Redis, and a lock taken or
    /// released during the walk may or may not be listed. Holds whose own expiry has passed
    /// by the Redis server's clock (read once per call) are not listed, even where no script
    /// has deleted them yet. A key of another Redis type under a lock's key name is skipped.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis cannot be reached; [`Error::Unsupported`] on a RedLock
    /// client, whose masters each know only part of the picture.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let url = server.url();
    /// use fencelock::LockKind;
    ///
    /// let options = fencelock::ClientOptions::default().holder_label("billing-7");
    /// let client = fencelock::Client::connect_with_options(url.as_str(), options).await?;
    /// let guard = client.mutex("invoices:2026-11")?.lock().await?;
    /// let permit = client.semaphore("invoices:pdf", 4)?.acquire().await?;
    /// let held = client.locks("invoices:*").await?;
    /// assert_eq!(held[0].name, "invoices:2026-11");
    /// assert_eq!(held[0].holder.as_deref(), Some("billing-7"));
    /// assert_eq!(held[0].fence, Some(guard.fence()));
    /// assert_eq!(held[1].kind, LockKind::Semaphore);
    /// assert_eq!((held[1].permits_in_use, held[1].permits_total), (Some(1), Some(4)));
    /// # guard.unlock().await?;
    /// # permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        self.locks_scanning(pattern, &|_| {}).await
    }

    /// [`Client::locks`], telling `page` how many keys each `SCAN` call returned.
    pub(crate) async fn locks_scanning(
        &self,
        pattern: &str,
        page: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<LockInfo>> {
        let conn = self.shared.nodes.only("lock inspection")?;
        let prefix = &self.shared.options.prefix;
        let matcher = scan_pattern(prefix, pattern, "*");
        let keys = conn.clone().scan_keys(&matcher, page).await?;
        let mut found: Vec<(Vec<u8>, usize)> = keys
            .iter()
            .filter_map(|key| {
                STORED
                    .iter()
                    .enumerate()
                    .find_map(|(at, stored)| Some((name_of(prefix, key, stored.key)?, at)))
            })
            .collect();
        // SCAN may return a key more than once.
        found.sort();
        found.dedup();
        let now_ms = server_ms(conn).await?;
        let mut locks = Vec::with_capacity(found.len());
        for (name, at) in found {
            let keys = self.keys(&name)?;
            locks.extend(read_skipping_strangers(conn, &keys, STORED[at], now_ms).await?);
        }
        locks.sort_by(|a, b| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        Ok(locks)
    }

    /// The locks of every kind held now under the name `name`, in kind order.
    ///
    /// As [`Client::locks`] for one name, without a key-space walk.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an unusable name; [`Error::Redis`] when Redis cannot be
    /// reached; [`Error::Unsupported`] on a RedLock client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// use fencelock::LockKind;
    ///
    /// let lock = client.rwlock("catalog")?;
    /// let (alice, bob) = (client.holder_named("alice")?, client.holder_named("bob")?);
    /// let a = lock.read_as(&alice).await?;
    /// let b = lock.read_as(&bob).await?;
    /// let held = client.locks_named("catalog").await?;
    /// assert_eq!(held[0].kind, LockKind::RwLock);
    /// assert_eq!(held[0].holders, ["alice", "bob"]);
    /// assert_eq!((held[0].holds, held[0].write_holds), (2, Some(0)));
    /// # a.unlock().await?;
    /// # b.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn locks_named(&self, name: impl AsRef<[u8]>) -> Result<Vec<LockInfo>> {
        let conn = self.shared.nodes.only("lock inspection")?;
        read_named(conn, &self.keys(name.as_ref())?).await
    }

    /// The mutex `name` if it is held now: holder, fence, remaining lease, waiting clients.
    /// [`Client::locks_named`] gives the locks of every kind.
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
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// assert!(client.lock_info("report").await?.is_none());
    /// let guard = client.mutex("report")?.lock().await?;
    /// let info = client.lock_info("report").await?.expect("held");
    /// assert!(info.remaining.is_some());
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_info(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let conn = self.shared.nodes.only("lock inspection")?;
        // A mutex has no per-hold expiry: the server's clock is not needed.
        read(
            conn,
            &self.keys(name.as_ref())?,
            &crate::kinds::mutex::STORED,
            0,
        )
        .await
    }

    /// Releases every lock held under the name `name`, of every kind, whoever holds it; wakes
    /// their waiters; and returns what was removed (empty when nothing was held).
    ///
    /// Holds are removed; the fence key is kept (fences keep rising), and so is what waiters
    /// keep: a fair mutex's line (its first waiter is woken), a read-write lock's waiting
    /// writers, a semaphore's total.
    ///
    /// This is for operators clearing a lock whose holder is known to be gone. The holder, if
    /// alive, learns it lost the lock at its next renewal; whatever it does until then is
    /// unprotected, so prefer waiting for the lease to end when it is short.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an unusable name; [`Error::Redis`] when Redis cannot be
    /// reached; [`Error::Unsupported`] on a RedLock client. Keys of another Redis type under the name's key names are left alone.
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
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let stuck = client.mutex("nightly")?.lock().await?;
    /// let permit = client.semaphore("nightly", 2)?.acquire().await?;
    /// let removed = client.force_unlock("nightly").await?;
    /// assert_eq!(removed.len(), 2);
    /// assert_eq!(removed[0].fence, Some(stuck.fence()));
    /// assert!(stuck.unlock().await.is_err()); // the former holders find out
    /// assert!(permit.release().await.is_err());
    /// assert!(client.force_unlock("nightly").await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Vec<LockInfo>> {
        let conn = self.shared.nodes.only("forced release")?;
        let keys = LockKeys::new(&self.shared.options.prefix, name.as_ref())?;
        let memory_ms = self.shared.options.fence_memory_ms();
        let window_ms = self.shared.options.handoff_window_ms();
        let mut removed = Vec::new();
        for stored in STORED {
            if let Some(mut info) = force(conn, stored, &keys, memory_ms, window_ms).await? {
                info.waiting_clients = waiting_clients(conn, stored, &keys).await?;
                removed.push(info);
            }
        }
        Ok(removed)
    }

    fn keys(&self, name: &[u8]) -> Result<LockKeys> {
        LockKeys::new(&self.shared.options.prefix, name)
    }
}

impl Client {
    /// The wait-for graph of the locks whose names match `pattern` (a Redis glob, as for
    /// [`Client::locks`]): each lock's holders and waiters, which waiting task waits for which,
    /// and every deadlock (a cycle of tasks each waiting for a lock the next one holds, any
    /// number of them, any kinds).
    ///
    /// Holders are read as [`Client::locks`] reads them, every kind included; waiters are the
    /// waits recorded by locks with
    /// [`LockOptions::deadlock_check`](crate::LockOptions::deadlock_check), from their first
    /// check on (other waiters are counted in each lock's [`LockInfo`](crate::LockInfo)). A task of one client
    /// waiting for a lock another task of the same client holds is no cycle. Both walks use
    /// `SCAN` in pages; at most [`MAX_RECORDED_WAITS`](crate::MAX_RECORDED_WAITS) waits are read.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached; [`Error::Unsupported`](crate::Error::Unsupported) on a RedLock
    /// client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.mutex("ledger")?.lock().await?;
    /// let graph = client.wait_graph("*").await?;
    /// assert_eq!(graph.locks[0].name, "ledger");
    /// assert!(graph.cycles.is_empty());
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_graph(&self, pattern: &str) -> Result<WaitGraph> {
        self.wait_graph_with_progress(pattern, &|_| {}).await
    }

    /// [`Client::wait_graph`], telling `progress` how far the walk of the key space has come
    /// after each `SCAN` call: for a progress line while a big key space is read (the CLI's
    /// `status --graph` shows one on a terminal).
    ///
    /// # Errors
    ///
    /// As [`Client::wait_graph`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start();
    /// # let client = fencelock::Client::connect(server.url().as_str()).await?;
    /// let guard = client.mutex("ledger")?.lock().await?;
    /// let last = std::sync::Mutex::new(fencelock::ScanProgress::default());
    /// let graph = client
    ///     .wait_graph_with_progress("*", &|seen| *last.lock().unwrap() = seen)
    ///     .await?;
    /// assert_eq!(graph.locks.len(), 1);
    /// // A walk of the wait records, then one of the locks: one `SCAN` call each here.
    /// assert_eq!(last.lock().unwrap().scans, 2);
    /// # guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_graph_with_progress(
        &self,
        pattern: &str,
        progress: &(dyn Fn(ScanProgress) + Sync),
    ) -> Result<WaitGraph> {
        let seen = Seen::default();
        let page = |keys: usize| progress(seen.page(keys));
        let conn = self.shared.nodes.only("the wait-for graph")?;
        let listing = self.locks_scanning(pattern, &page);
        let (prefix, holders) = (&self.shared.options.prefix, self.shared.holders);
        graph::read(conn, prefix, holders, listing, &page).await
    }
}

/// How far a walk of the key space has come: see [`Client::wait_graph_with_progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanProgress {
    /// `SCAN` calls answered so far.
    pub scans: u64,
    /// Keys those calls returned that matched what is read (a key may be counted twice, as
    /// `SCAN` may return it twice).
    pub keys: u64,
}

/// The running count behind [`ScanProgress`].
#[derive(Default)]
struct Seen {
    scans: AtomicU64,
    keys: AtomicU64,
}

impl Seen {
    /// Counts one `SCAN` call that returned `keys` keys, and says how far the walk is.
    fn page(&self, keys: usize) -> ScanProgress {
        let keys = u64::try_from(keys).unwrap_or(u64::MAX);
        ScanProgress {
            scans: self.scans.fetch_add(1, Ordering::Relaxed) + 1,
            keys: self
                .keys
                .fetch_add(keys, Ordering::Relaxed)
                .saturating_add(keys),
        }
    }
}

/// The reading of every kind's holds that every client is made with, for the core's waits
/// (`core/waits/holders.rs`): [`Client::locks_named`] of each name.
pub(crate) struct Inspection;

impl Holders for Inspection {
    fn held<'a>(
        &'a self,
        conn: &'a Conn,
        prefix: &'a str,
        names: Vec<String>,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<LockInfo>>> + Send + 'a>> {
        Box::pin(async move {
            let mut locks = Vec::new();
            for name in names {
                locks.extend(read_named(conn, &LockKeys::new(prefix, name.as_bytes())?).await?);
            }
            Ok(locks)
        })
    }
}

/// The locks of every kind held now under one name, in kind order: which kinds' keys exist,
/// and the server's clock, in one round trip, then each kind that has its key.
async fn read_named(conn: &Conn, keys: &LockKeys) -> Result<Vec<LockInfo>> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for stored in STORED {
        pipe.exists(keys.key(stored.key));
    }
    let replies: Vec<Value> = pipe.query_async(&mut conn.clone()).await?;
    let mut replies = replies.into_iter();
    let now_ms = time_ms(decode(replies.next())?);
    let mut locks = Vec::new();
    for (stored, exists) in STORED.into_iter().zip(replies) {
        if decode::<bool>(Some(exists))? {
            locks.extend(read_skipping_strangers(conn, keys, stored, now_ms).await?);
        }
    }
    Ok(locks)
}

/// [`read`], for a walk of the key space: a key of our name and suffix that holds another type
/// is none of ours, and is skipped.
async fn read_skipping_strangers(
    conn: &Conn,
    keys: &LockKeys,
    stored: &Stored,
    now_ms: i64,
) -> Result<Option<LockInfo>> {
    match read(conn, keys, stored, now_ms).await {
        Err(Error::WrongType { .. }) => Ok(None),
        other => other,
    }
}

/// The lock of one kind under a name, if it is held at server time `now_ms`: its state read
/// in one round trip, with how many clients wait.
async fn read(
    conn: &Conn,
    keys: &LockKeys,
    stored: &Stored,
    now_ms: i64,
) -> Result<Option<LockInfo>> {
    let key = keys.key(stored.key);
    let mut pipe = redis::pipe();
    match stored.shape {
        Shape::Hash => pipe.cmd("HGETALL").arg(&key),
        Shape::Value => pipe.get(&key),
    };
    pipe.pttl(&key);
    pipe.add_command(numsub(conn, stored, keys));
    if let Some(places) = stored.places {
        pipe.cmd("ZCOUNT")
            .arg(keys.key(places))
            .arg(format!("({now_ms}"))
            .arg("+inf");
    }
    let name = keys.display_name();
    let replies: Vec<Value> = pipe.query_async(&mut conn.clone()).await.map_err(|e| {
        if is_wrong_type(&e) {
            Error::WrongType { name: name.clone() }
        } else {
            Error::from_redis(e, &name)
        }
    })?;
    let mut replies = replies.into_iter();
    let mut raw = Raw::default();
    match stored.shape {
        Shape::Hash => raw.fields = decode(replies.next())?,
        Shape::Value => raw.value = decode(replies.next())?,
    }
    raw.pttl = decode(replies.next())?;
    let counts: Vec<(Vec<u8>, u64)> = decode(replies.next())?;
    if stored.places.is_some() {
        raw.queued = decode(replies.next())?;
    }
    Ok((stored.judge)(keys.name(), &raw, now_ms).map(|mut info| {
        info.waiting_clients = counts.iter().map(|(_, n)| n).sum();
        info
    }))
}

/// The kind's forced release of a name, and what it removed.
async fn force(
    conn: &Conn,
    stored: &Stored,
    keys: &LockKeys,
    memory_ms: u64,
    window_ms: u64,
) -> Result<Option<LockInfo>> {
    let mut invocation = stored.force.invocation();
    for suffix in stored.force_keys {
        invocation.key(keys.key(suffix));
    }
    for channel in stored.channels {
        invocation.arg(keys.key(channel));
    }
    // The kinds that hand the lock on to a waiter offer it for the handoff window; the
    // others ignore the last argument.
    invocation.arg(memory_ms).arg(window_ms);
    type Removed = (i64, Option<Vec<u8>>, i64, Vec<(Vec<u8>, Vec<u8>)>, u64);
    let (now_ms, value, pttl, fields, queued): Removed = invocation
        .invoke_async(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.display_name()))?;
    let raw = Raw {
        value,
        fields,
        pttl,
        queued,
    };
    Ok((stored.judge)(keys.name(), &raw, now_ms))
}

/// How many clients listen on the kind's channels of a name: those waiting for it.
async fn waiting_clients(conn: &Conn, stored: &Stored, keys: &LockKeys) -> Result<u64> {
    let counts: Vec<(Vec<u8>, u64)> = numsub(conn, stored, keys)
        .query_async(&mut conn.clone())
        .await?;
    Ok(counts.iter().map(|(_, n)| n).sum())
}

/// `PUBSUB NUMSUB` of the kind's channels of a name. On a cluster, waiters subscribe on the
/// master of the name's slot, the node this goes to: with sharded pub/sub where the servers
/// have it.
fn numsub(conn: &Conn, stored: &Stored, keys: &LockKeys) -> redis::Cmd {
    let mut numsub = redis::cmd("PUBSUB");
    numsub.arg(if conn.announces_sharded() {
        "SHARDNUMSUB"
    } else {
        "NUMSUB"
    });
    for channel in stored.channels {
        numsub.arg(keys.key(channel));
    }
    numsub
}

/// The server's clock, in ms.
async fn server_ms(conn: &Conn) -> Result<i64> {
    let time = redis::cmd("TIME").query_async(&mut conn.clone()).await?;
    Ok(time_ms(time))
}

fn is_wrong_type(err: &redis::RedisError) -> bool {
    err.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "WRONGTYPE"))
}

fn time_ms((secs, micros): (i64, i64)) -> i64 {
    secs.saturating_mul(1000).saturating_add(micros / 1000)
}

fn decode<T: redis::FromRedisValue>(reply: Option<Value>) -> Result<T> {
    let reply = reply.ok_or_else(|| Error::UnexpectedReply {
        detail: "a pipeline answered fewer replies than commands".to_owned(),
    })?;
    redis::from_redis_value(reply).map_err(|e| Error::UnexpectedReply {
        detail: e.to_string(),
    })
}

/// The `SCAN MATCH` pattern for names matching `pattern`: the prefix taken literally, the
/// name's braces and `%` escaped as in keys, its glob characters kept.
pub(crate) fn scan_pattern(prefix: &str, pattern: &str, suffix: &str) -> Vec<u8> {
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

/// The lock name inside `<prefix>{<escaped name>}:<suffix>`, if the key is that name's own
/// key. Other keys under the prefix (an empty or oversized name, braces left unescaped) were
/// not made by fencelock: they name no lock, and must not stop the listing of the others.
pub(crate) fn name_of(prefix: &str, key: &[u8], suffix: &str) -> Option<Vec<u8>> {
    let rest = key.strip_prefix(prefix.as_bytes())?.strip_prefix(b"{")?;
    let tail_len = suffix.len() + 2;
    if rest.len() < tail_len {
        return None;
    }
    let (escaped, tail) = rest.split_at(rest.len() - tail_len);
    if tail.strip_prefix(b"}:")? != suffix.as_bytes() {
        return None;
    }
    let name = unescape_name(escaped)?;
    let own_key = LockKeys::new(prefix, &name).ok()?.key(suffix);
    (own_key == key).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_keys() {
        for stored in STORED {
            for name in [&b"lottery"[..], b"a}b{c%", b"\x00\xff", b"x:y"] {
                let key = LockKeys::new("fencelock:", name)
                    .expect("name")
                    .key(stored.key);
                assert_eq!(
                    name_of("fencelock:", &key, stored.key).as_deref(),
                    Some(name)
                );
            }
        }
        assert_eq!(name_of("fencelock:", b"fencelock:{a}:fence", "mutex"), None);
        assert_eq!(name_of("other:", b"fencelock:{a}:mutex", "mutex"), None);
        assert_eq!(
            name_of("fencelock:", b"fencelock:{a}:fair-line", "fair"),
            None
        );
        assert_eq!(
            name_of("fencelock:", b"fencelock:{a}:rmutex", "mutex"),
            None
        );
    }

    #[test]
    fn keys_fencelock_did_not_make_name_no_lock() {
        // The smallest key the fuzz target `lock_name` found: an unescaped brace in the tag.
        assert_eq!(
            name_of("fencelock:", b"fencelock:{k{lo}:mutex", "mutex"),
            None
        );
        assert_eq!(name_of("fencelock:", b"fencelock:{}:mutex", "mutex"), None);
        assert_eq!(
            name_of("fencelock:", b"fencelock:{a}b}:mutex", "mutex"),
            None
        );
        assert_eq!(
            name_of("fencelock:", b"fencelock:{%7b}:mutex", "mutex"),
            None
        );
        let oversized = [
            &b"fencelock:{"[..],
            &[b'x'; crate::keys::MAX_NAME_LEN + 1],
            b"}:mutex",
        ]
        .concat();
        assert_eq!(name_of("fencelock:", &oversized, "mutex"), None);
    }

    #[test]
    fn scan_patterns_escape_the_prefix_and_braces_only() {
        assert_eq!(scan_pattern("a*:", "job:*", "*"), b"a\\*:{job:*}:*");
        assert_eq!(scan_pattern("r:", "{x}", "mutex"), b"r:{%7Bx%7D}:mutex");
    }
}
