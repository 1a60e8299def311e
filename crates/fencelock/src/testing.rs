//! What the crate's own tests share: a connection to a test server, and the messages published
//! on a channel while something runs.

use fencelock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// A plain connection to the test server.
pub(crate) async fn conn(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url().as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The payloads announced on `channel` while `during` runs.
pub(crate) async fn announced_on<F: std::future::Future>(
    server: &RedisServer,
    channel: &str,
    during: F,
) -> Vec<String> {
    let mut pubsub = redis::Client::open(server.url().as_str())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub.subscribe(channel).await.expect("subscribe");
    during.await;
    // A marker published last: everything before it has arrived once it does.
    let mut c = conn(server).await;
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg("end")
        .exec_async(&mut c)
        .await
        .expect("publish");
    let mut payloads = Vec::new();
    let mut messages = pubsub.on_message();
    while let Ok(Some(message)) = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        futures_next(&mut messages),
    )
    .await
    {
        let payload: String = message.get_payload().expect("utf-8 payload");
        if payload == "end" {
            break;
        }
        payloads.push(payload);
    }
    payloads
}

/// The next item of `stream`.
pub(crate) async fn futures_next<S: futures_core::Stream + Unpin>(
    stream: &mut S,
) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

/// A key's time to live, in ms.
pub(crate) async fn pttl(c: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(c)
        .await
        .expect("pttl")
}
