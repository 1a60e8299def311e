//! What operators need: which locks are held, of every kind, by whom, for how long, with how
//! many waiting; and a forced release of everything held under a name.
//!
//! Each primitive keeps its state under its own key suffix of the name (see each type's
//! documentation). Holds that carry their own expiry (read-write holds, semaphore grants, fair
//! waiters' places) are judged by the Redis server's clock, read once per listing, so a hold
//! whose lease ended is never shown as held even before a script purged it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::layout::{FAIR, MUTEX, REENTRANT, RWLOCK, SEMAPHORE};
use crate::keys::{unescape_name, LockKeys};
use crate::scripts::{announcing_script, Announcing};
use crate::token::Fence;

static FORCE_RELEASE: LazyLock<Announcing> =
    announcing_script!("mutex_value.lua", "force_release.lua");

/// Which primitive a lock found in Redis belongs to.
///
/// A [`MultiMutex`](crate::MultiMutex) holds the [`Mutex`](crate::Mutex) of each of its names,
/// so its names are listed as mutexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Mutex`](crate::Mutex) (or one name of a [`MultiMutex`](crate::MultiMutex)).
    Mutex,
    /// A [`ReentrantMutex`](crate::ReentrantMutex).
    ReentrantMutex,
    /// A [`RwLock`](crate::RwLock).
    RwLock,
    /// A [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A [`FairMutex`](crate::FairMutex).
    FairMutex,
}

impl LockKind {
    /// Every kind, in the order listings use for locks of the same name.
    const ALL: [LockKind; 5] = [
        LockKind::Mutex,
        LockKind::ReentrantMutex,
        LockKind::RwLock,
        LockKind::Semaphore,
        LockKind::FairMutex,
    ];

    /// The suffix of the key that says whether a lock of this kind is held.
    fn suffix(self) -> &'static str {
        match self {
            LockKind::Mutex => MUTEX.lock,
            LockKind::ReentrantMutex => REENTRANT.lock,
            LockKind::RwLock => RWLOCK.lock,
            LockKind::Semaphore => SEMAPHORE.lock,
            LockKind::FairMutex => FAIR.lock,
        }
    }

    /// The suffix of the sorted set of this kind's waiters' places (token -> when the place
    /// ends), for the kinds that keep one.
    fn places_suffix(self) -> Option<&'static str> {
        match self {
            LockKind::Mutex => Some(MUTEX.places),
            LockKind::FairMutex => Some(FAIR.places),
            _ => None,
        }
    }

    /// The suffixes of the channels this kind's waiters listen on.
    fn wake_suffixes(self) -> &'static [&'static str] {
        match self {
            LockKind::Mutex => &[MUTEX.wake],
            LockKind::ReentrantMutex => &[REENTRANT.wake],
            LockKind::RwLock => &[RWLOCK.wake_readers, RWLOCK.wake_writers],
            LockKind::Semaphore => &[SEMAPHORE.wake],
            LockKind::FairMutex => &[FAIR.wake],
        }
    }

    /// Whether its key is a hash (else a string).
    fn is_hash(self) -> bool {
        matches!(
            self,
            LockKind::ReentrantMutex | LockKind::RwLock | LockKind::Semaphore
        )
    }
}

impl std::fmt::Display for LockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LockKind::Mutex => "mutex",
            LockKind::ReentrantMutex => "reentrant-mutex",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore => "semaphore",
            LockKind::FairMutex => "fair-mutex",
        })
    }
}

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
    fn new(name: &[u8], kind: LockKind) -> LockInfo {
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

    fn add_holder(&mut self, holder: String) {
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
struct Raw {
    /// The string value (mutex, fair mutex).
    value: Option<Vec<u8>>,
    /// The hash fields (reentrant mutex, read-write lock, semaphore).
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The key's PTTL (-1 no expiry, -2 no key).
    pttl: i64,
    /// Fair mutex waiters with a live place.
    queued: u64,
}

impl Client {
    /// The locks of every kind that are held now whose names match `pattern`, a Redis glob (`*`
    /// any characters, `?` one, `[abc]` a set; `*` alone lists all), sorted by name, then kind.
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
        self.shared.require_single("lock inspection")?;
        let prefix = &self.shared.options.prefix;
        let matcher = scan_pattern(prefix, pattern, "*");
        let keys = self.shared.conn.clone().scan_keys(&matcher).await?;
        let mut found: Vec<(Vec<u8>, LockKind)> = keys
            .iter()
            .filter_map(|key| {
                LockKind::ALL
                    .into_iter()
                    .find_map(|kind| Some((name_of(prefix, key, kind.suffix())?, kind)))
            })
            .collect();
        // SCAN may return a key more than once.
        found.sort();
        found.dedup();
        let now_ms = self.server_ms().await?;
        let mut locks = Vec::with_capacity(found.len());
        for (name, kind) in found {
            if let Some(info) = self.read_skipping_strangers(&name, kind, now_ms).await? {
                locks.push(info);
            }
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
        self.shared.require_single("lock inspection")?;
        let name = name.as_ref();
        let keys = LockKeys::new(&self.shared.options.prefix, name)?;
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for kind in LockKind::ALL {
            pipe.exists(keys.key(kind.suffix()));
        }
        let replies: Vec<Value> = pipe.query_async(&mut self.shared.conn.clone()).await?;
        let mut replies = replies.into_iter();
        let now_ms = time_ms(decode(replies.next())?);
        let mut locks = Vec::new();
        for (kind, exists) in LockKind::ALL.into_iter().zip(replies) {
            if !decode::<bool>(Some(exists))? {
                continue;
            }
            if let Some(info) = self.read_skipping_strangers(name, kind, now_ms).await? {
                locks.push(info);
            }
        }
        Ok(locks)
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
        // A mutex has no per-hold expiry: the server's clock is not needed.
        self.read(name.as_ref(), LockKind::Mutex, 0).await
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
        self.shared.require_single("forced release")?;
        let name = name.as_ref();
        let keys = LockKeys::new(&self.shared.options.prefix, name)?;
        let display = keys.display_name();
        let mut invocation = FORCE_RELEASE.on(&self.shared.conn).prepare_invoke();
        // In the order of force_release.lua's keys.
        for suffix in [
            MUTEX.lock,
            REENTRANT.lock,
            RWLOCK.lock,
            SEMAPHORE.lock,
            FAIR.lock,
            FAIR.line,
            FAIR.places,
        ] {
            invocation.key(keys.key(suffix));
        }
        let channels: Vec<Vec<u8>> = LockKind::ALL
            .into_iter()
            .flat_map(|kind| kind.wake_suffixes().iter().map(|s| keys.key(s)))
            .collect();
        for channel in &channels {
            invocation.arg(channel.as_slice());
        }
        invocation.arg(self.shared.options.fence_memory_ms());
        type Removed = (
            i64,
            Option<Vec<u8>>,
            i64,
            Vec<(Vec<u8>, Vec<u8>)>,
            i64,
            Vec<(Vec<u8>, Vec<u8>)>,
            Vec<(Vec<u8>, Vec<u8>)>,
            Option<Vec<u8>>,
            i64,
            u64,
        );
        let (
            now_ms,
            mutex,
            mutex_pttl,
            reentrant,
            reentrant_pttl,
            rw,
            sem,
            fair,
            fair_pttl,
            queued,
        ): Removed = invocation
            .invoke_async(&mut self.shared.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, &display))?;
        let found = [
            (
                LockKind::Mutex,
                Raw {
                    value: mutex,
                    pttl: mutex_pttl,
                    ..Raw::default()
                },
            ),
            (
                LockKind::ReentrantMutex,
                Raw {
                    fields: reentrant,
                    pttl: reentrant_pttl,
                    ..Raw::default()
                },
            ),
            (
                LockKind::RwLock,
                Raw {
                    fields: rw,
                    ..Raw::default()
                },
            ),
            (
                LockKind::Semaphore,
                Raw {
                    fields: sem,
                    ..Raw::default()
                },
            ),
            (
                LockKind::FairMutex,
                Raw {
                    value: fair,
                    pttl: fair_pttl,
                    queued,
                    ..Raw::default()
                },
            ),
        ];
        let mut removed: Vec<LockInfo> = found
            .into_iter()
            .filter_map(|(kind, raw)| judge(name, kind, &raw, now_ms))
            .collect();
        if !removed.is_empty() {
            let mut numsub = redis::cmd("PUBSUB");
            numsub.arg("NUMSUB").arg(&channels);
            let counts: Vec<(Vec<u8>, u64)> =
                numsub.query_async(&mut self.shared.conn.clone()).await?;
            for info in &mut removed {
                info.waiting_clients = waiting_on(&counts, &keys, info.kind);
            }
        }
        Ok(removed)
    }

    /// As [`Client::read`], with a key of another type taken for no lock.
    async fn read_skipping_strangers(
        &self,
        name: &[u8],
        kind: LockKind,
        now_ms: i64,
    ) -> Result<Option<LockInfo>> {
        match self.read(name, kind, now_ms).await {
            Err(Error::WrongType { .. }) => Ok(None),
            other => other,
        }
    }

    /// The lock of `kind` under `name`, if it is held at the server time `now_ms`: one round
    /// trip.
    async fn read(&self, name: &[u8], kind: LockKind, now_ms: i64) -> Result<Option<LockInfo>> {
        let keys = LockKeys::new(&self.shared.options.prefix, name)?;
        let key = keys.key(kind.suffix());
        let mut pipe = redis::pipe();
        if kind.is_hash() {
            pipe.cmd("HGETALL").arg(&key);
        } else {
            pipe.get(&key);
        }
        pipe.pttl(&key);
        let channels: Vec<Vec<u8>> = kind.wake_suffixes().iter().map(|s| keys.key(s)).collect();
        // On a cluster, waiters subscribe on the master of the name's slot, the node this
        // pipeline goes to: with sharded pub/sub where the servers have it.
        let numsub = if self.shared.conn.announces_sharded() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        pipe.cmd("PUBSUB").arg(numsub).arg(&channels);
        if let Some(places) = kind.places_suffix() {
            pipe.cmd("ZCOUNT")
                .arg(keys.key(places))
                .arg(format!("({now_ms}"))
                .arg("+inf");
        }
        let replies: Vec<Value> = pipe
            .query_async(&mut self.shared.conn.clone())
            .await
            .map_err(|e| {
                if is_wrong_type(&e) {
                    Error::WrongType {
                        name: keys.display_name(),
                    }
                } else {
                    Error::from_redis(e, &keys.display_name())
                }
            })?;
        let mut replies = replies.into_iter();
        let mut raw = Raw::default();
        if kind.is_hash() {
            raw.fields = decode(replies.next())?;
        } else {
            raw.value = decode(replies.next())?;
        }
        raw.pttl = decode(replies.next())?;
        let counts: Vec<(Vec<u8>, u64)> = decode(replies.next())?;
        if kind.places_suffix().is_some() {
            raw.queued = decode(replies.next())?;
        }
        Ok(judge(name, kind, &raw, now_ms).map(|mut info| {
            info.waiting_clients = counts.iter().map(|(_, n)| n).sum();
            info
        }))
    }

    /// The Redis server's clock, in milliseconds.
    async fn server_ms(&self) -> Result<i64> {
        let time = redis::cmd("TIME")
            .query_async(&mut self.shared.conn.clone())
            .await?;
        Ok(time_ms(time))
    }
}

/// Whether Redis answered `WRONGTYPE`, alone or to a command of a pipeline.
fn is_wrong_type(err: &redis::RedisError) -> bool {
    err.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "WRONGTYPE"))
}

fn time_ms((secs, micros): (i64, i64)) -> i64 {
    secs.saturating_mul(1000).saturating_add(micros / 1000)
}

/// One reply of a pipeline, typed.
fn decode<T: redis::FromRedisValue>(reply: Option<Value>) -> Result<T> {
    let reply = reply.ok_or_else(|| Error::UnexpectedReply {
        detail: "a pipeline answered fewer replies than commands".to_owned(),
    })?;
    redis::from_redis_value(reply).map_err(|e| Error::UnexpectedReply {
        detail: e.to_string(),
    })
}

/// The subscriptions to `kind`'s wake channels, from a `PUBSUB NUMSUB` reply.
fn waiting_on(counts: &[(Vec<u8>, u64)], keys: &LockKeys, kind: LockKind) -> u64 {
    kind.wake_suffixes()
        .iter()
        .map(|suffix| {
            let channel = keys.key(suffix);
            counts
                .iter()
                .filter(|(c, _)| *c == channel)
                .map(|(_, n)| n)
                .sum::<u64>()
        })
        .sum()
}

/// The lock that `raw` describes, if it is held at the server time `now_ms`.
fn judge(name: &[u8], kind: LockKind, raw: &Raw, now_ms: i64) -> Option<LockInfo> {
    match kind {
        LockKind::Mutex | LockKind::FairMutex => {
            let value = raw.value.as_deref()?;
            if value.starts_with(b"~") {
                // A released mutex: only the name's last fence, left behind for the next grant.
                return None;
            }
            let mut info = single_holder(name, kind, value, raw.pttl);
            info.queued = Some(raw.queued);
            Some(info)
        }
        LockKind::ReentrantMutex => reentrant(name, &raw.fields, raw.pttl),
        LockKind::RwLock => rwlock(name, &raw.fields, now_ms),
        LockKind::Semaphore => semaphore(name, &raw.fields, now_ms),
    }
}

/// A held mutex's or fair mutex's value `<token>:<fence>[+][:<label>]` (`+`: someone waits).
fn single_holder(name: &[u8], kind: LockKind, value: &[u8], pttl: i64) -> LockInfo {
    let mut info = LockInfo::new(name, kind);
    let mut parts = value.splitn(3, |&b| b == b':').skip(1);
    info.fence = parts
        .next()
        .map(|fence| fence.strip_suffix(b"+").unwrap_or(fence))
        .and_then(parse_number)
        .map(Fence::new);
    if let Some(label) = parts.next() {
        info.add_holder(String::from_utf8_lossy(label).into_owned());
    }
    info.holds = 1;
    info.remaining = remaining_pttl(pttl);
    info
}

/// A reentrant mutex's hash: `owner`, `count`, `fence`, `label`, and one field per hold token.
fn reentrant(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], pttl: i64) -> Option<LockInfo> {
    let field = |wanted: &[u8]| {
        fields
            .iter()
            .find(|(f, _)| f.as_slice() == wanted)
            .map(|(_, v)| v.as_slice())
    };
    // The acquire script takes a hash without an owner for none.
    field(b"owner")?;
    let mut info = LockInfo::new(name, LockKind::ReentrantMutex);
    let tokens = fields.iter().filter(|(f, _)| f.ends_with(b":")).count();
    info.holds = field(b"count")
        .and_then(parse_number)
        .unwrap_or(u64::try_from(tokens).unwrap_or(u64::MAX));
    if info.holds == 0 {
        return None;
    }
    info.fence = field(b"fence").and_then(parse_number).map(Fence::new);
    if let Some(label) = field(b"label") {
        info.add_holder(String::from_utf8_lossy(label).into_owned());
    }
    info.remaining = remaining_pttl(pttl);
    Some(info)
}

/// A read-write lock's hash: `r<token><owner>` / `w<token><owner>` holds and `q<token><owner>`
/// waiting writers, each valued with its expiry in server ms; `fence-r`, `fence-w`.
fn rwlock(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], now_ms: i64) -> Option<LockInfo> {
    let mut info = LockInfo::new(name, LockKind::RwLock);
    let (mut writes, mut queued, mut latest) = (0u64, 0u64, None::<i64>);
    let (mut fence_r, mut fence_w) = (None, None);
    for (field, value) in fields {
        match field.as_slice() {
            b"fence-r" => fence_r = parse_number(value),
            b"fence-w" => fence_w = parse_number(value),
            [mode @ (b'r' | b'w' | b'q'), rest @ ..] => {
                // `<22-character token>:<client id>:<holder id>`
                let Some(at) = rest.iter().position(|&b| b == b':') else {
                    continue;
                };
                let expiry = parse_number::<i64>(value).unwrap_or(0);
                if expiry <= now_ms {
                    continue;
                }
                if *mode == b'q' {
                    queued += 1;
                    continue;
                }
                let owner = &rest[at + 1..];
                let holder = owner
                    .iter()
                    .position(|&b| b == b':')
                    .map_or(owner, |at| &owner[at + 1..]);
                info.add_holder(String::from_utf8_lossy(holder).into_owned());
                info.holds += 1;
                if *mode == b'w' {
                    writes += 1;
                }
                latest = latest.max(Some(expiry));
            }
            _ => {}
        }
    }
    if info.holds == 0 {
        return None;
    }
    info.write_holds = Some(writes);
    info.queued = Some(queued);
    info.fence = if writes > 0 { fence_w } else { fence_r }.map(Fence::new);
    info.remaining = latest.map(|at| remaining_until(at, now_ms));
    Some(info)
}

/// A semaphore's hash: `permits` (the total), one `<token>:<count>` field per grant, valued
/// with its expiry in server ms, and `l:<token>:<count>` with the holder label of a grant
/// whose client has one.
fn semaphore(name: &[u8], fields: &[(Vec<u8>, Vec<u8>)], now_ms: i64) -> Option<LockInfo> {
    let mut info = LockInfo::new(name, LockKind::Semaphore);
    let (mut in_use, mut latest) = (0u64, None::<i64>);
    let label_of = |grant: &[u8]| {
        fields
            .iter()
            .find(|(field, _)| field.strip_prefix(b"l:") == Some(grant))
            .map(|(_, label)| String::from_utf8_lossy(label).into_owned())
    };
    for (field, value) in fields {
        if field.as_slice() == b"permits" {
            info.permits_total = parse_number(value);
            continue;
        }
        // `<token>:<count>`, the token free of `:`.
        let Some(at) = field.iter().position(|&b| b == b':') else {
            continue;
        };
        let (token, count) = (&field[..at], &field[at + 1..]);
        let Some(count) = parse_number::<u64>(count) else {
            continue;
        };
        let expiry = parse_number::<i64>(value).unwrap_or(0);
        if token.is_empty() || expiry <= now_ms {
            continue;
        }
        info.holds += 1;
        in_use = in_use.saturating_add(count);
        latest = latest.max(Some(expiry));
        if let Some(label) = label_of(field) {
            info.add_holder(label);
        }
    }
    if info.holds == 0 {
        return None;
    }
    info.permits_in_use = Some(in_use);
    info.remaining = latest.map(|at| remaining_until(at, now_ms));
    Some(info)
}

/// A decimal number, all digits (as the scripts write them).
fn parse_number<T: std::str::FromStr>(bytes: &[u8]) -> Option<T> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn remaining_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn remaining_until(expiry_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(expiry_ms.saturating_sub(now_ms)).unwrap_or(0))
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

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    const TOKEN_A: &str = "AAAAAAAAAAAAAAAAAAAAAA:";
    const TOKEN_B: &str = "BBBBBBBBBBBBBBBBBBBBBB:";

    #[test]
    fn names_round_trip_through_keys() {
        for kind in LockKind::ALL {
            for name in [&b"lottery"[..], b"a}b{c%", b"\x00\xff", b"x:y"] {
                let key = LockKeys::new("fencelock:", name)
                    .expect("name")
                    .key(kind.suffix());
                assert_eq!(
                    name_of("fencelock:", &key, kind.suffix()).as_deref(),
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
            &[b'x'; crate::MAX_NAME_LEN + 1],
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

    #[test]
    fn mutex_values_are_read_into_holder_and_fence() {
        let info = single_holder(b"n", LockKind::Mutex, b"tok:1795:host-1:99", 1500);
        assert_eq!(info.fence, Some(Fence::new(1795)));
        assert_eq!(info.holder.as_deref(), Some("host-1:99"));
        assert_eq!(info.holders, ["host-1:99"]);
        assert_eq!(info.remaining, Some(Duration::from_millis(1500)));
        let waited = single_holder(b"n", LockKind::Mutex, b"tok:1796+:host-1", 1500);
        assert_eq!(waited.fence, Some(Fence::new(1796)));
        assert_eq!(waited.holder.as_deref(), Some("host-1"));
        let bare = single_holder(b"n", LockKind::Mutex, b"tok:17", -1);
        assert_eq!((bare.holder, bare.remaining), (None, None));
        let junk = single_holder(b"n", LockKind::Mutex, b"garbage", 10);
        assert_eq!(junk.fence, None);
    }

    #[test]
    fn a_reentrant_mutex_counts_the_owner_s_holds() {
        let hash = fields(&[
            ("owner", "client:worker"),
            ("count", "2"),
            ("fence", "99"),
            ("label", "host/7"),
            (TOKEN_A, "1"),
            (TOKEN_B, "1"),
        ]);
        let info = reentrant(b"n", &hash, 800).expect("held");
        assert_eq!((info.holds, info.fence), (2, Some(Fence::new(99))));
        assert_eq!(info.holder.as_deref(), Some("host/7"));
        assert!(reentrant(b"n", &fields(&[("count", "1")]), 800).is_none());
    }

    #[test]
    fn an_rwlock_lists_live_holds_only_by_the_server_s_clock() {
        let now = 1_000_000;
        let hash = fields(&[
            (&format!("r{TOKEN_A}client1:alice"), "1000500"),
            (&format!("r{TOKEN_B}client2:bob"), "1002000"),
            // Expired but not purged yet: not held.
            (&format!("w{TOKEN_A}client3:carol"), "999999"),
            (&format!("q{TOKEN_B}client4:dave"), "1000100"),
            ("fence-r", "41"),
            ("fence-w", "40"),
        ]);
        let info = rwlock(b"n", &hash, now).expect("held");
        assert_eq!(info.holders, ["alice", "bob"]);
        assert_eq!(info.holder, None);
        assert_eq!((info.holds, info.write_holds), (2, Some(0)));
        assert_eq!(info.queued, Some(1));
        assert_eq!(info.fence, Some(Fence::new(41)));
        assert_eq!(info.remaining, Some(Duration::from_millis(2000)));

        let writing = fields(&[
            (&format!("w{TOKEN_A}client3:carol"), "1000300"),
            ("fence-w", "40"),
        ]);
        let info = rwlock(b"n", &writing, now).expect("held");
        assert_eq!(
            (info.write_holds, info.fence),
            (Some(1), Some(Fence::new(40)))
        );
        assert_eq!(info.holder.as_deref(), Some("carol"));

        let only_expired_and_waiting = fields(&[
            (&format!("r{TOKEN_A}client1:alice"), "1000000"),
            (&format!("q{TOKEN_B}client4:dave"), "1000100"),
        ]);
        assert!(rwlock(b"n", &only_expired_and_waiting, now).is_none());
    }

    #[test]
    fn a_semaphore_adds_up_live_grants_only() {
        let now = 5_000;
        let hash = fields(&[
            ("permits", "5"),
            (&format!("{TOKEN_A}2"), "6000"),
            (&format!("{TOKEN_B}1"), "9000"),
            // Expired but not purged yet: not held.
            ("CCCCCCCCCCCCCCCCCCCCCC:2", "5000"),
        ]);
        let info = semaphore(b"n", &hash, now).expect("held");
        assert_eq!(
            (info.holds, info.permits_in_use, info.permits_total),
            (2, Some(3), Some(5))
        );
        assert_eq!(info.remaining, Some(Duration::from_millis(4000)));
        assert_eq!((info.fence, info.holder), (None, None));
        let idle = fields(&[("permits", "5"), (&format!("{TOKEN_A}2"), "100")]);
        assert!(semaphore(b"n", &idle, now).is_none());
    }
}
