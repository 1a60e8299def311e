//! Release notifications: one pub/sub connection per client, shared by every waiter of every
//! lock name.
//!
//! A waiter registers interest in a name's wake channel; the first waiter of a name subscribes,
//! the last one to leave unsubscribes. One task owns the connection and sends subscriptions in
//! order, so a late unsubscribe can never undo a newer subscribe. A release message wakes one
//! waiter of that name in this process (not all of them): one release costs one retry per
//! waiting process, not one per waiting task. When the connection drops, every waiter is woken
//! to retry, since messages may have been lost; waiters also retry on a bounded timer, so a lost
//! message delays them but never strands them.

use std::collections::{HashMap, HashSet};
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_core::Stream;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot, Notify};

/// The shared registry: which channels have waiters, and how to wake them.
#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<Vec<u8>, Channel>,
}

#[derive(Debug)]
struct Channel {
    notify: Arc<Notify>,
    waiters: usize,
}

enum Request {
    Subscribe(Vec<u8>, oneshot::Sender<bool>),
    Unsubscribe(Vec<u8>),
}

/// The client's side of the notification task.
#[derive(Debug)]
pub(crate) struct Notifier {
    registry: Arc<StdMutex<Registry>>,
    requests: mpsc::UnboundedSender<Request>,
}

impl Notifier {
    /// Starts the task; it connects on the first subscription and ends with the client.
    pub(crate) fn spawn(client: redis::Client) -> Arc<Notifier> {
        let registry = Arc::new(StdMutex::new(Registry::default()));
        let (requests, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, Arc::clone(&registry), rx));
        Arc::new(Notifier { registry, requests })
    }

    /// Registers a waiter on `channel` and waits until the subscription is confirmed, so that a
    /// release after this returns is announced to it. If Redis cannot be subscribed to, the
    /// waiter still works, by its retry timer alone.
    pub(crate) async fn wait_on(self: &Arc<Self>, channel: Vec<u8>) -> Waiter {
        let notify = {
            let mut registry = lock(&self.registry);
            let entry = registry
                .channels
                .entry(channel.clone())
                .or_insert_with(|| Channel {
                    notify: Arc::new(Notify::new()),
                    waiters: 0,
                });
            entry.waiters += 1;
            Arc::clone(&entry.notify)
        };
        let waiter = Waiter {
            notifier: Arc::clone(self),
            channel: channel.clone(),
            notify,
        };
        let (confirmed, confirmation) = oneshot::channel();
        if self
            .requests
            .send(Request::Subscribe(channel, confirmed))
            .is_ok()
        {
            let _ = confirmation.await;
        }
        waiter
    }

    fn leave(&self, channel: &[u8]) {
        let mut registry = lock(&self.registry);
        let Some(entry) = registry.channels.get_mut(channel) else {
            return;
        };
        entry.waiters -= 1;
        if entry.waiters == 0 {
            registry.channels.remove(channel);
            let _ = self.requests.send(Request::Unsubscribe(channel.to_vec()));
        }
    }
}

/// One task's registration on a wake channel; dropping it leaves the channel.
#[derive(Debug)]
pub(crate) struct Waiter {
    notifier: Arc<Notifier>,
    channel: Vec<u8>,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Completes when a release of the name is announced (or the connection was lost).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.notifier.leave(&self.channel);
    }
}

fn lock(registry: &StdMutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// The connection, when there is one: the sink to send (un)subscriptions through, and the
/// channels it is subscribed to.
struct Connection {
    sink: PubSubSink,
    messages: PubSubStream,
    subscribed: HashSet<Vec<u8>>,
}

const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

async fn run(
    client: redis::Client,
    registry: Arc<StdMutex<Registry>>,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    let mut conn: Option<Connection> = None;
    let mut backoff = RECONNECT_MIN;
    loop {
        // Reconnect in the background while anyone waits, so that a dropped connection does
        // not leave waiters on their fallback timers for longer than needed.
        let wanted = !lock(&registry).channels.is_empty();
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { break };
                if conn.is_none() {
                    conn = connect(&client).await;
                }
                match request {
                    Request::Subscribe(channel, confirmed) => {
                        let ok = match conn.as_mut() {
                            Some(c) => subscribe(c, &channel).await,
                            None => false,
                        };
                        if !ok {
                            conn = None;
                        }
                        let _ = confirmed.send(ok);
                    }
                    Request::Unsubscribe(channel) => {
                        let still_wanted = lock(&registry).channels.contains_key(&channel);
                        if let (Some(c), false) = (conn.as_mut(), still_wanted) {
                            if c.subscribed.remove(&channel) && c.sink.unsubscribe(&channel).await.is_err() {
                                conn = None;
                            }
                        }
                    }
                }
            }
            message = next_message(&mut conn) => match message {
                Some(channel) => {
                    if let Some(entry) = lock(&registry).channels.get(&channel) {
                        entry.notify.notify_one();
                    }
                }
                None => {
                    conn = None;
                    wake_everyone(&registry);
                }
            },
            () = tokio::time::sleep(backoff), if conn.is_none() && wanted => {
                conn = connect(&client).await;
                match conn.as_mut() {
                    Some(c) => {
                        backoff = RECONNECT_MIN;
                        let channels: Vec<Vec<u8>> = lock(&registry).channels.keys().cloned().collect();
                        for channel in channels {
                            if !subscribe(c, &channel).await {
                                break;
                            }
                        }
                        // Releases may have happened while nobody listened.
                        wake_everyone(&registry);
                    }
                    None => backoff = (backoff * 2).min(RECONNECT_MAX),
                }
            }
        }
    }
}

async fn connect(client: &redis::Client) -> Option<Connection> {
    let (sink, messages) = client.get_async_pubsub().await.ok()?.split();
    Some(Connection {
        sink,
        messages,
        subscribed: HashSet::new(),
    })
}

async fn subscribe(conn: &mut Connection, channel: &[u8]) -> bool {
    if conn.subscribed.contains(channel) {
        return true;
    }
    if conn.sink.subscribe(channel).await.is_err() {
        return false;
    }
    conn.subscribed.insert(channel.to_vec());
    true
}

fn wake_everyone(registry: &StdMutex<Registry>) {
    for entry in lock(registry).channels.values() {
        entry.notify.notify_waiters();
    }
}

/// The channel of the next message, or `None` when the connection closed. Pends forever when
/// there is no connection, so `select!` simply skips that branch.
async fn next_message(conn: &mut Option<Connection>) -> Option<Vec<u8>> {
    let Some(conn) = conn.as_mut() else {
        return std::future::pending().await;
    };
    let message = poll_fn(|cx| Pin::new(&mut conn.messages).poll_next(cx)).await?;
    Some(message.get_channel::<Vec<u8>>().unwrap_or_default())
}
