//! The pub/sub connection release notifications arrive on: opened on one server, on a
//! Sentinel deployment's current master, or across a Redis Cluster (sharded where the servers
//! have sharded pub/sub); subscribing and unsubscribing within a reply timeout, pinging, and
//! delivering messages and interruptions as one stream of [`Event`]s. Which waiters a message
//! wakes is the core's (`core/notify.rs`): this module knows channels, never waiters.

use std::collections::HashSet;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use redis::aio::{PubSubSink, PubSubStream};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use redis::Value;
#[cfg(feature = "cluster")]
use redis::{PushInfo, PushKind};
#[cfg(feature = "cluster")]
use tokio::sync::mpsc;
use tokio::sync::watch;

#[cfg(feature = "cluster")]
use crate::transport::cluster::ClusterSource;
#[cfg(feature = "cluster")]
use crate::transport::conn::Announce;
#[cfg(feature = "sentinel")]
use crate::transport::sentinel::SentinelConn;

/// Where the notification task opens its pub/sub connection.
pub(crate) enum Source {
    /// One Redis server.
    Single(redis::Client),
    /// The master of a Sentinel deployment, asked for at every connect so that waiters
    /// follow a failover.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConn),
    /// A Redis Cluster: subscriptions each on the master of its channel's slot, sharded where
    /// the servers have sharded pub/sub.
    #[cfg(feature = "cluster")]
    Cluster(ClusterSource),
}

impl Source {
    /// Announcements that the master moved, for the sources that make them.
    pub(crate) fn moves(&self) -> Option<watch::Receiver<u64>> {
        match self {
            #[cfg(feature = "sentinel")]
            Source::Sentinel(conn) => Some(conn.moves()),
            _ => None,
        }
    }
}

/// Completes when the master is announced to have moved; never for sources without moves.
pub(crate) async fn moved(moves: &mut Option<watch::Receiver<u64>>) {
    if let Some(receiver) = moves {
        if receiver.changed().await.is_ok() {
            return;
        }
        // The client is gone: no more moves.
        *moves = None;
    }
    std::future::pending().await
}

/// The connection, when there is one, and the channels it is subscribed to.
pub(crate) struct Connection {
    link: Link,
    subscribed: HashSet<Vec<u8>>,
    /// How long a reply may take before the connection counts as silent.
    reply_within: Duration,
}

enum Link {
    /// A RESP2 pub/sub connection to one server: the sink to send (un)subscriptions through,
    /// and the stream of messages.
    Plain {
        sink: PubSubSink,
        messages: PubSubStream,
    },
    /// A cluster connection, its messages arriving as RESP3 pushes. It reconnects to each node
    /// and resubscribes by itself. Its subscriptions are sharded unless the cluster announces
    /// releases by broadcast.
    #[cfg(feature = "cluster")]
    Cluster {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        announce: Announce,
    },
}

/// What the connection delivered. Only a cluster connection reports interruptions and ended
/// subscriptions: a plain one ends its stream instead.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum Event {
    /// A release message: its channel and payload.
    Message(Vec<u8>, Vec<u8>),
    /// A node connection dropped and was re-established: messages may have been lost.
    Interrupted,
    /// The server ended a subscription (its slot moved to another master).
    Unsubscribed(Vec<u8>),
}

impl Connection {
    /// The channels it is subscribed to.
    pub(crate) fn subscribed(&self) -> &HashSet<Vec<u8>> {
        &self.subscribed
    }

    /// Forgets a subscription the server ended.
    pub(crate) fn forget(&mut self, channel: &[u8]) {
        self.subscribed.remove(channel);
    }
}

/// Opens a connection, giving up after `connect_within`; its replies may each take
/// `reply_within`.
pub(crate) async fn connect(
    source: &Source,
    connect_within: Duration,
    reply_within: Duration,
) -> Option<Connection> {
    let link = tokio::time::timeout(connect_within, open(source))
        .await
        .ok()??;
    Some(Connection {
        link,
        subscribed: HashSet::new(),
        reply_within,
    })
}

async fn open(source: &Source) -> Option<Link> {
    Some(match source {
        Source::Single(client) => plain(client).await?,
        #[cfg(feature = "sentinel")]
        Source::Sentinel(conn) => plain(&conn.resolve_client().await.ok()?).await?,
        #[cfg(feature = "cluster")]
        Source::Cluster(source) => {
            let (tx, pushes) = mpsc::unbounded_channel();
            let conn = source.client(tx).ok()?.get_async_connection().await.ok()?;
            Link::Cluster {
                conn,
                pushes,
                announce: source.announce(),
            }
        }
    })
}

async fn plain(client: &redis::Client) -> Option<Link> {
    let (sink, messages) = client.get_async_pubsub().await.ok()?.split();
    Some(Link::Plain { sink, messages })
}

/// Subscribes to `channel`; `false` when the connection failed doing so.
pub(crate) async fn subscribe(conn: &mut Connection, channel: &[u8]) -> bool {
    if conn.subscribed.contains(channel) {
        return true;
    }
    let subscribed = match &mut conn.link {
        Link::Plain { sink, .. } => within(conn.reply_within, sink.subscribe(channel)).await,
        #[cfg(feature = "cluster")]
        Link::Cluster {
            conn,
            announce: Announce::Sharded,
            ..
        } => conn.ssubscribe(channel).await.is_ok(),
        // Routed by the channel's name, like a key: to the master of the name's slot.
        #[cfg(feature = "cluster")]
        Link::Cluster {
            conn,
            announce: Announce::Broadcast,
            ..
        } => conn.subscribe(channel).await.is_ok(),
    };
    if !subscribed {
        return false;
    }
    conn.subscribed.insert(channel.to_vec());
    true
}

/// Unsubscribes from `channel`; `false` when the connection failed doing so.
pub(crate) async fn unsubscribe(conn: &mut Connection, channel: &[u8]) -> bool {
    if !conn.subscribed.remove(channel) {
        return true;
    }
    match &mut conn.link {
        Link::Plain { sink, .. } => within(conn.reply_within, sink.unsubscribe(channel)).await,
        #[cfg(feature = "cluster")]
        Link::Cluster {
            conn,
            announce: Announce::Sharded,
            ..
        } => conn.sunsubscribe(channel).await.is_ok(),
        #[cfg(feature = "cluster")]
        Link::Cluster {
            conn,
            announce: Announce::Broadcast,
            ..
        } => conn.unsubscribe(channel).await.is_ok(),
    }
}

/// Whether the connection answers a ping in time; an error reply (a user not allowed `PING`)
/// is an answer too. The cluster connection is not pinged: it times out its own subscriptions
/// and announces each node connection it re-establishes.
pub(crate) async fn answers(conn: &mut Connection) -> bool {
    let sink = match &mut conn.link {
        Link::Plain { sink, .. } => sink,
        #[cfg(feature = "cluster")]
        Link::Cluster { .. } => return true,
    };
    match tokio::time::timeout(conn.reply_within, sink.ping::<Value>()).await {
        Ok(reply) => reply.map_or_else(|e| e.code().is_some(), |_| true),
        Err(_) => false,
    }
}

/// Whether `reply` came, and was no error, within `limit`.
async fn within<T>(limit: Duration, reply: impl Future<Output = redis::RedisResult<T>>) -> bool {
    matches!(tokio::time::timeout(limit, reply).await, Ok(Ok(_)))
}

/// The next event of the connection, or `None` when it closed. Pends forever when there is no
/// connection, so `select!` simply skips that branch.
pub(crate) async fn next_event(conn: &mut Option<Connection>) -> Option<Event> {
    let Some(conn) = conn.as_mut() else {
        return std::future::pending().await;
    };
    match &mut conn.link {
        Link::Plain { messages, .. } => {
            let message = poll_fn(|cx| Pin::new(&mut *messages).poll_next(cx)).await?;
            Some(Event::Message(
                message.get_channel::<Vec<u8>>().unwrap_or_default(),
                message.get_payload_bytes().to_vec(),
            ))
        }
        #[cfg(feature = "cluster")]
        Link::Cluster { pushes, .. } => loop {
            let push = pushes.recv().await?;
            if let Some(event) = cluster_event(push) {
                return Some(event);
            }
        },
    }
}

/// The event a cluster push means, if it concerns the waiters.
#[cfg(feature = "cluster")]
fn cluster_event(push: PushInfo) -> Option<Event> {
    let mut data = push.data.into_iter().map(bytes_of);
    match push.kind {
        PushKind::SMessage | PushKind::Message => {
            Some(Event::Message(data.next()??, data.next()??))
        }
        PushKind::SUnsubscribe => Some(Event::Unsubscribed(data.next()??)),
        PushKind::Disconnection => Some(Event::Interrupted),
        _ => None,
    }
}

#[cfg(feature = "cluster")]
fn bytes_of(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}
