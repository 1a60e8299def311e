//! What a kind of lock is to the core: [`Kind`], implemented once by each kind's grant (in
//! `src/kinds/`), and [`Lock`], what every grant of a handle shares, whatever its kind.
//!
//! A kind says how to build its scripts' invocations and where its holders and waiters are
//! kept; the core does the rest (the attempt and the wait, the lease and its renewal, the
//! release on drop, the quorum of nodes) the same way for every kind.

use std::sync::Arc;
use std::time::Duration;

use crate::transport::script::Invocation;

use crate::core::keeper::Renewal;
use redis::FromRedisValue;

use crate::core::notify::{Target, Waiter};
use crate::core::shared::Shared;
use crate::cycle::LockKind;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::options::{Lease, LockOptions, MIN_WAIT_CHECK};
use crate::token::OwnerToken;

/// One kind of grant: a mutex's, a permit's, a read hold's... Its scripts follow the reply
/// conventions of `core/nodes.rs`.
///
/// The trait is the crate's own (its module is private): users name guards by their aliases,
/// such as [`MutexGuard`](crate::MutexGuard), never by this trait.
pub trait Kind: Send + Sync + 'static {
    /// What the kind is called in spans, metrics and errors.
    const NAME: &'static str;

    /// What its guard is called: the alias users know it by, shown by its `Debug`.
    const GUARD: &'static str;

    /// What its handle is called, shown by the handle's `Debug`.
    const HANDLE: &'static str;

    /// What the wait-for graph calls the locks it takes.
    const LOCK_KIND: LockKind;

    /// Whether the kind can be granted by a majority of independent masters (RedLock): its
    /// state on each master must make sense alone, and [`raise_fence`](Kind::raise_fence)
    /// must raise a grant's fence on a master that granted. A kind that keeps more (a line,
    /// several holders) runs on one deployment only, and its handle is refused on several.
    const ON_SEVERAL_NODES: bool = false;

    /// What every lock of the kind shares with every other kind.
    fn lock(&self) -> &Lock;

    /// The names a grant takes, as the wait-for graph names them: by default the lock's one
    /// name.
    fn names_taken(&self) -> Vec<String> {
        vec![self.lock().name.clone()]
    }

    /// Where releases of this lock are announced: the channel a waiter with no place listens
    /// on, and the key a `WAIT` for replicas is routed by.
    fn wake_channel(&self) -> &[u8];

    /// Every channel whose releases may let a refused attempt through; a waiter is woken by a
    /// release on any of them. By default the one [`wake_channel`](Kind::wake_channel).
    ///
    /// A lock of several channels can be refused while the lock of the channel that woke it is
    /// free (another of its names is still held). Its waiter then passes that wake on to the
    /// next waiter of the channel, which the release may have been meant for.
    fn wake_channels(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.wake_channel())
    }

    /// The acquire script for `token`. `waits`: the caller waits if refused, so a refused
    /// attempt may take a place among the waiters; `refused_before`: this token was refused
    /// before, and gives up its place when granted.
    fn acquire(&self, token: &OwnerToken, waits: bool, refused_before: bool) -> Invocation;

    /// The release script for `token`: it also gives up a waiter's place.
    fn release(&self, token: &OwnerToken) -> Invocation;

    /// The extend script for `token`. Every extend script reads a last argument `exactly` as
    /// leave to shorten the lease; without it, it only lengthens.
    fn extend(&self, token: &OwnerToken, lease_ms: u64) -> Invocation;

    /// What the batch renewal checks and extends for a grant to `token`: every key must still
    /// be held for the lease to count as renewed.
    fn renewals(&self, token: &OwnerToken) -> Vec<Renewal>;

    /// Whether an attempt that waits leaves state behind when refused that a waiter who gives
    /// up must remove (a place in a line). The release script then also removes that state.
    fn keeps_place_while_waiting(&self) -> bool {
        false
    }

    /// Which releases wake a waiter whose attempts use `token`: by default any release.
    fn wake_target(&self, _token: &OwnerToken) -> Target {
        Target::Any
    }

    /// A fresh token for an attempt: by default one that names this lock's client
    /// ([`OwnerToken::of_client`]).
    ///
    /// # Errors
    ///
    /// [`Error::Entropy`](crate::Error::Entropy) when no random bits could be drawn.
    fn new_token(&self) -> Result<OwnerToken> {
        OwnerToken::of_client(&self.lock().shared.id)
    }

    /// The longest a refused waiter sleeps before it tries again when no release wakes it
    /// (jittered down to half, and cut to the holder's remaining lease): by default the
    /// client's [`wake_fallback`](crate::ClientOptions::wake_fallback), for kinds whose
    /// releases are announced.
    fn retry_interval(&self) -> Duration {
        self.lock().shared.options.wake_fallback
    }

    /// On several nodes: the script that raises the fence of `token`'s grant on a node that
    /// granted it to at least `fence`, replying `1` when that node now remembers it. Only for
    /// kinds [`ON_SEVERAL_NODES`](Kind::ON_SEVERAL_NODES).
    fn raise_fence(&self, _token: &OwnerToken, _fence: u64) -> Option<Invocation> {
        None
    }

    /// What the guard's `Debug` shows between the name and the fence, beside what every guard
    /// shows.
    fn describe(&self, _guard: &mut std::fmt::DebugStruct<'_, '_>) {}

    /// The grant one acquire of a handle tries for: by default the handle's own. A kind whose
    /// every acquire is an owner of its own makes a fresh one.
    ///
    /// # Errors
    ///
    /// [`Error::Entropy`](crate::Error::Entropy) when no random bits could be drawn for it.
    fn for_acquire(grant: &Arc<Self>) -> Result<Arc<Self>> {
        Ok(Arc::clone(grant))
    }

    /// What an acquire that failed with `error` returns: by default `error`. A kind turns the
    /// refusals its scripts reply with into the errors they mean.
    fn acquire_error(&self, error: Error) -> Error {
        error
    }
}

/// The part of every lock handle that every kind shares: its client, name and keys, the lease
/// of each grant and how long a caller waits by default.
#[derive(Clone)]
pub struct Lock {
    pub(crate) shared: Arc<Shared>,
    /// The name as given, lossily decoded where it is not UTF-8: what errors and spans show.
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    pub(crate) lease: Lease,
    /// The lease in whole milliseconds, checked when the lock was made.
    pub(crate) lease_ms: u64,
    pub(crate) wait_timeout: Option<Duration>,
    /// How long a waiter waits before it records its wait and checks it, and between checks;
    /// and whether it gives up when its wait closes a cycle.
    pub(crate) wait_check: Option<(Duration, bool)>,
}

impl Lock {
    /// A lock of kind `K` named by `keys`; refused when the client's nodes cannot hold that
    /// kind, or the options are out of range.
    pub(crate) fn new<K: Kind>(
        shared: Arc<Shared>,
        keys: LockKeys,
        options: &LockOptions,
    ) -> Result<Lock> {
        shared.nodes.accept(K::NAME, K::ON_SEVERAL_NODES)?;
        let lease = options.lease.unwrap_or(shared.options.default_lease);
        let asked = match (options.deadlock_check, options.record_wait) {
            (Some(after), _) => Some((after, true)),
            (None, Some(after)) => Some((after, false)),
            (None, None) => None,
        };
        if asked.is_some_and(|(after, _)| after < MIN_WAIT_CHECK) {
            return Err(Error::InvalidOption {
                option: if options.deadlock_check.is_some() {
                    "deadlock_check"
                } else {
                    "record_wait"
                },
                reason: "at least 10 ms between checks".into(),
            });
        }
        if asked.is_some() {
            // The waits are recorded on one deployment, not on each of several masters.
            shared.nodes.only("the deadlock check")?;
        }
        // The client's default records where a deployment can: never on several masters.
        let by_default = shared
            .options
            .record_waits
            .filter(|_| shared.nodes.len() == 1)
            .map(|after| (after, false));
        let wait_check = asked.or(by_default);
        Ok(Lock {
            name: keys.display_name(),
            lease_ms: lease.millis()?,
            lease,
            wait_timeout: options.wait_timeout,
            wait_check,
            keys,
            shared,
        })
    }

    /// `<prefix>{<name>}:<suffix>`: one of this lock's keys or channels.
    pub(crate) fn key(&self, suffix: &str) -> Vec<u8> {
        self.keys.key(suffix)
    }

    /// How long a lock name's last fence is kept beyond a lease, in ms.
    pub(crate) fn fence_memory_ms(&self) -> u64 {
        self.shared.options.fence_memory_ms()
    }

    /// How long a release's offer to the next waiter lasts, in ms.
    pub(crate) fn handoff_window_ms(&self) -> u64 {
        self.shared.options.handoff_window_ms()
    }

    /// Runs a kind's own script (beyond acquire, release and extend: a semaphore's total, an
    /// election's leader) as lease requests run: through the node's line of calls, sent again
    /// while the node cannot be reached; errors name the lock. Only for kinds that run on one
    /// node, and only for idempotent scripts: a send whose reply was lost may have run.
    pub(crate) async fn call<T>(&self, invocation: Invocation) -> Result<T>
    where
        T: FromRedisValue + Send + 'static,
    {
        self.shared.nodes.call(&invocation.into(), &self.name).await
    }

    /// Sends a kind's own read of several commands at once (a foreign lock's holder, its
    /// expiry and its listeners) to its one node, beside the line: a read never needs an order
    /// against the line's calls.
    pub(crate) async fn read<T: FromRedisValue>(&self, pipeline: &redis::Pipeline) -> Result<T> {
        pipeline
            .query_async(&mut self.shared.nodes.first().clone())
            .await
            .map_err(|e| Error::from_redis(e, &self.name))
    }

    /// Whether keys `a` and `b` may go into one script (see [`Shared::same_shard`]).
    pub(crate) fn same_shard(&self, a: &[u8], b: &[u8]) -> bool {
        self.shared.same_shard(a, b)
    }

    /// The client's id, which its holders' tokens carry.
    pub(crate) fn client_id(&self) -> &str {
        self.shared.client_id()
    }

    /// How long a waiter or a watcher naps between reads when no message wakes it.
    pub(crate) fn wake_fallback(&self) -> Duration {
        self.shared.options.wake_fallback
    }

    /// Whether the client was shut down: then it neither takes nor proclaims anything more.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shared.holds.is_shut_down()
    }

    /// Waits for messages on `channel` for `target`, until the waiter is dropped.
    pub(crate) async fn listen(&self, channel: Vec<u8>, target: Target) -> Waiter {
        self.shared.notifier.wait_on(channel, target).await
    }

    /// The label holders of this client leave in what they hold.
    pub(crate) fn label(&self) -> &str {
        self.shared.options.holder_label.as_str()
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}
