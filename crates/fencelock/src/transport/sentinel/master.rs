//! The connection that follows the master of a Sentinel deployment.
//!
//! Every command goes to the master the sentinels named last, over one multiplexed
//! connection. That master is forgotten, and asked for again at the next command, when:
//!
//! - a command fails in a way that says the node is gone or no longer master: I/O errors,
//!   refused or reset connections, timeouts, `READONLY` (a demoted master), `MASTERDOWN`;
//! - a sentinel announces `+switch-master` for the service (the old master may still accept
//!   writes for seconds after a failover, until the sentinels demote it);
//! - a fresh resolution (the notifier's, at each of its connects) names another node.
//!
//! The failed command itself is never resent here: it returns its error, which
//! [`Error::is_unavailable`](crate::Error::is_unavailable) recognises, and only the callers
//! whose commands are idempotent by owner token resend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use futures_core::Stream;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSubSink, PubSubStream};
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture,
    RedisResult, ServerErrorKind, Value,
};
use tokio::sync::{watch, Mutex as AsyncMutex};

/// The channel on which sentinels announce a new master: `<name> <old ip> <old port> <new ip>
/// <new port>`.
const SWITCH_MASTER: &str = "+switch-master";

/// How often the switch watcher retries its subscription, and checks that the client lives.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// A cheap-to-clone handle on the current master of one Sentinel service.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    router: Arc<Router>,
}

/// What every handle of one client shares.
struct Router {
    service: String,
    resolver: AsyncMutex<Resolver>,
    /// Resolutions finished so far, to let callers that queued behind one share its failure.
    resolutions: AtomicU64,
    master: StdMutex<Option<Master>>,
    /// Used for each master connection.
    config: AsyncConnectionConfig,
    /// Bounds one resolution through the sentinels (which checks the named master's role).
    resolve_timeout: Duration,
    next_generation: AtomicU64,
    /// Counts the announced moves of the master, for the pub/sub connection to follow.
    moves: watch::Sender<u64>,
}

struct Resolver {
    sentinel: SentinelClient,
    last_failure: Option<RedisError>,
}

/// One master connection; a new generation for every connection made.
#[derive(Clone)]
struct Master {
    generation: u64,
    address: String,
    conn: MultiplexedConnection,
}

impl SentinelConn {
    /// A handle over `sentinel`, and the task that watches the sentinels at `watched` for
    /// `+switch-master` announcements for as long as any handle lives. Connects to the master
    /// at once, so that a wrong service name or unreachable sentinels fail the client's
    /// construction.
    pub(crate) async fn connect(
        sentinel: SentinelClient,
        service: String,
        watched: Vec<ConnectionInfo>,
        config: AsyncConnectionConfig,
        resolve_timeout: Duration,
    ) -> RedisResult<SentinelConn> {
        let router = Arc::new(Router {
            service,
            resolver: AsyncMutex::new(Resolver {
                sentinel,
                last_failure: None,
            }),
            resolutions: AtomicU64::new(0),
            master: StdMutex::new(None),
            config,
            resolve_timeout,
            next_generation: AtomicU64::new(1),
            moves: watch::Sender::new(0),
        });
        router.master().await?;
        tokio::spawn(watch_switches(Arc::downgrade(&router), watched));
        Ok(SentinelConn { router })
    }

    /// Asks the sentinels for the master now and returns a client for it, for connections
    /// of other kinds (pub/sub). Forgets the command connection if it goes elsewhere.
    pub(crate) async fn resolve_client(&self) -> RedisResult<redis::Client> {
        let client = self.router.resolve_client().await?;
        self.router.forget_unless_at(&address_of(&client));
        Ok(client)
    }

    /// Changes each time the master is known to have moved to another node (a sentinel's
    /// `+switch-master`), so that connections other than this one can follow it.
    pub(crate) fn moves(&self) -> watch::Receiver<u64> {
        self.router.moves.subscribe()
    }

    /// The generation of the master connection now, if there is one: taken before a write,
    /// it tells [`wait`](Self::wait) whether that write went through the connection it waits on.
    pub(crate) fn generation(&self) -> Option<u64> {
        self.router.current().map(|master| master.generation)
    }

    /// Sends `WAIT` on the master connection, and returns how many replicas acknowledged.
    /// Fails unless that connection is still the one of generation `since`, taken before the
    /// writes to cover: a newer connection's `WAIT` would not cover them. Every clone of this
    /// handle shares the master connection, so the writes may have gone through any clone.
    ///
    /// Boxed, as the commands of [`ConnectionLike`] are: reconnecting to the master is a deep
    /// future, which would otherwise be nested into every acquire's future, deep enough for
    /// the compiler to give up proving that a task awaiting a lock is `Send`.
    pub(crate) fn wait<'a>(
        &'a mut self,
        wait: &'a Cmd,
        since: Option<u64>,
    ) -> RedisFuture<'a, usize> {
        Box::pin(async move {
            let master = self.router.master().await?;
            if since != Some(master.generation) {
                return Err(io_error(
                    std::io::ErrorKind::ConnectionReset,
                    "the master connection was replaced after the write; its replication is \
                     unknown",
                ));
            }
            let reply = wait.query_async(&mut master.conn.clone()).await;
            self.router.check(&master, reply.as_ref().err());
            reply
        })
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let master = self.router.master().await?;
            let reply = master.conn.clone().req_packed_command(cmd).await;
            self.router.check(&master, reply.as_ref().err());
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let master = self.router.master().await?;
            let reply = master
                .conn
                .clone()
                .req_packed_commands(pipeline, offset, count)
                .await;
            let failure = match &reply {
                Err(e) => Some(e.clone()),
                Ok(values) => values.iter().find_map(|v| match v {
                    Value::ServerError(e) => Some(RedisError::from(e.clone())),
                    _ => None,
                }),
            };
            self.router.check(&master, failure.as_ref());
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.router
            .current()
            .map_or(0, |master| master.conn.get_db())
    }
}

impl Router {
    fn current(&self) -> Option<Master> {
        self.master
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The current master connection, resolving one when there is none. Resolutions are
    /// serialised; callers that queued behind a failed one get its error instead of trying
    /// again at once, so a failover costs one resolution at a time, not one per caller.
    async fn master(&self) -> RedisResult<Master> {
        if let Some(master) = self.current() {
            return Ok(master);
        }
        let seen = self.resolutions.load(Ordering::Acquire);
        let mut resolver = self.resolver.lock().await;
        if let Some(master) = self.current() {
            return Ok(master);
        }
        if self.resolutions.load(Ordering::Acquire) != seen
            && let Some(failure) = &resolver.last_failure
        {
            return Err(failure.clone());
        }
        let result = self.connect_master(&mut resolver.sentinel).await;
        resolver.last_failure = result.as_ref().err().cloned();
        self.resolutions.fetch_add(1, Ordering::AcqRel);
        let master = result?;
        *self.master.lock().unwrap_or_else(|p| p.into_inner()) = Some(master.clone());
        Ok(master)
    }

    async fn connect_master(&self, sentinel: &mut SentinelClient) -> RedisResult<Master> {
        let client = self.resolve(sentinel).await?;
        let connect = client.get_multiplexed_async_connection_with_config(&self.config);
        let conn = tokio::time::timeout(self.resolve_timeout, connect)
            .await
            .map_err(|_| self.timed_out())??;
        Ok(Master {
            generation: self.next_generation.fetch_add(1, Ordering::Relaxed),
            address: address_of(&client),
            conn,
        })
    }

    /// The master as the sentinels name it now (checked with `ROLE` by the `redis` crate).
    async fn resolve(&self, sentinel: &mut SentinelClient) -> RedisResult<redis::Client> {
        // Boxed: the resolution's future is deep, and would otherwise be inlined into every
        // lock operation's future.
        let resolution = Box::pin(sentinel.async_get_client());
        tokio::time::timeout(self.resolve_timeout, resolution)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// Asks the sentinels for the master now, whatever the command connection uses.
    async fn resolve_client(&self) -> RedisResult<redis::Client> {
        let mut resolver = self.resolver.lock().await;
        self.resolve(&mut resolver.sentinel).await
    }

    /// The master moved to `address`: commands and subscriptions go there from now on.
    fn moved_to(&self, address: &str) {
        self.forget_unless_at(address);
        self.moves.send_modify(|moves| *moves += 1);
    }

    /// Forgets `master` after a failure that says it is unreachable or no longer master.
    fn check(&self, master: &Master, failure: Option<&RedisError>) {
        if failure.is_some_and(master_lost) {
            self.forget(|current| current.generation == master.generation);
        }
    }

    /// Forgets the current master unless it is the node at `address`; tells whether it did.
    fn forget_unless_at(&self, address: &str) -> bool {
        self.forget(|current| current.address != address)
    }

    fn forget(&self, which: impl FnOnce(&Master) -> bool) -> bool {
        let mut master = self.master.lock().unwrap_or_else(|p| p.into_inner());
        let forget = master.as_ref().is_some_and(which);
        if forget {
            *master = None;
        }
        forget
    }

    fn timed_out(&self) -> RedisError {
        io_error(
            std::io::ErrorKind::TimedOut,
            &format!(
                "no master of {:?} reachable through the sentinels within {:?}",
                self.service, self.resolve_timeout
            ),
        )
    }
}

/// Whether a failure means the node is gone or no longer the master.
fn master_lost(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(
            err.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

/// `host:port`, as sentinels announce masters.
fn address_of(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

fn io_error(kind: std::io::ErrorKind, message: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, message.to_owned()))
}

/// Listens for `+switch-master` on one sentinel at a time and forgets the master when the
/// service moves. After a lost subscription it asks the sentinels again, since an announcement
/// may have been missed. Ends when the last handle is gone.
async fn watch_switches(router: Weak<Router>, sentinels: Vec<ConnectionInfo>) {
    let mut next = 0;
    loop {
        let Some(info) = sentinels.get(next % sentinels.len().max(1)).cloned() else {
            return;
        };
        next += 1;
        if let Some((_subscription, messages)) = subscribe(info).await
            && !follow(&router, messages).await
        {
            return;
        }
        let Some(live) = router.upgrade() else {
            return;
        };
        if let Ok(client) = live.resolve_client().await {
            // An announcement may have been missed while nobody listened.
            let address = address_of(&client);
            if live.forget_unless_at(&address) {
                live.moved_to(&address);
            }
        }
        drop(live);
        tokio::time::sleep(WATCH_RETRY).await;
    }
}

/// A subscription to `+switch-master` on one sentinel; the sink is kept for as long as the
/// messages are read.
async fn subscribe(info: ConnectionInfo) -> Option<(PubSubSink, PubSubStream)> {
    let client = redis::Client::open(info).ok()?;
    let connect = client.get_async_pubsub();
    let mut pubsub = tokio::time::timeout(WATCH_RETRY, connect)
        .await
        .ok()?
        .ok()?;
    pubsub.subscribe(SWITCH_MASTER).await.ok()?;
    Some(pubsub.split())
}

/// Follows announcements until the subscription ends (returns `true`) or the client is gone
/// (returns `false`).
async fn follow(router: &Weak<Router>, mut messages: PubSubStream) -> bool {
    loop {
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut messages).poll_next(cx));
        let message = match tokio::time::timeout(WATCH_RETRY, next).await {
            Ok(Some(message)) => Some(message),
            Ok(None) => return router.strong_count() > 0,
            Err(_) => None,
        };
        let Some(live) = router.upgrade() else {
            return false;
        };
        if let Some(message) = message {
            let payload = String::from_utf8_lossy(message.get_payload_bytes()).into_owned();
            if let Some(address) = switched_to(&payload, &live.service) {
                live.moved_to(&address);
            }
        }
    }
}

/// The new master's `ip:port` from a `+switch-master` payload about `service`.
fn switched_to(payload: &str, service: &str) -> Option<String> {
    match payload.split(' ').collect::<Vec<_>>()[..] {
        [name, _, _, ip, port] if name == service => Some(format!("{ip}:{port}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_announcements_name_the_new_master_of_their_service() {
        let payload = "orders 127.0.0.1 6379 127.0.0.1 6380";
        assert_eq!(
            switched_to(payload, "orders").as_deref(),
            Some("127.0.0.1:6380")
        );
        assert_eq!(switched_to(payload, "billing"), None);
        assert_eq!(switched_to("orders 127.0.0.1", "orders"), None);
    }

    #[test]
    fn demotion_and_lost_connections_mean_the_master_is_lost() {
        let readonly = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(master_lost(&readonly));
        assert!(master_lost(&io_error(
            std::io::ErrorKind::ConnectionRefused,
            "refused"
        )));
        let wrongtype = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert!(!master_lost(&wrongtype));
    }
}
