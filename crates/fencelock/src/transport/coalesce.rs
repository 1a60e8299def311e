//! Concurrent script calls of one connection, coalesced: while a call is on its way, the
//! calls that come meanwhile wait in line, and go together when it is answered, the calls of
//! one script as one batched call ([`batch_command`]). Many tasks sharing a client then cost
//! Redis one script call per batch instead of one per task, and a lone task sends its call at
//! once, as if nothing stood between it and the connection.
//!
//! One call or batch is on its way at a time, and the line is kept in order, so a connection's
//! script calls run on the server in the order they were made: a release sent after an
//! acquire never overtakes it. A call whose caller gave up before it was sent is not sent.
//!
//! A cluster routes each call by its keys, which one batch could not follow: its calls go
//! straight to the connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use redis::aio::ConnectionLike;
use redis::{Pipeline, RedisError, RedisResult, Value};
use tokio::sync::oneshot;

use crate::transport::conn::Conn;
use crate::transport::script::{batch_command, is_noscript, Invocation};

/// The most calls one batched script runs, so that no batch holds the server long.
const MOST_PER_BATCH: usize = 64;

/// The line of one connection's script calls.
#[derive(Default)]
pub(crate) struct Coalescer {
    state: Mutex<Line>,
}

#[derive(Default)]
struct Line {
    /// A call or a batch is on its way.
    sending: bool,
    waiting: Vec<Waiting>,
}

/// A call waiting for the one on its way to be answered.
struct Waiting {
    call: Arc<Invocation>,
    reply: oneshot::Sender<RedisResult<Value>>,
}

impl Coalescer {
    /// Runs `call` on `conn`: at once if nothing is on its way, else with the calls that came
    /// meanwhile, once the one on its way is answered.
    ///
    /// Cancel safe: a call dropped while it waits in line is never sent; one dropped on its
    /// way hands the line on to a task of its own.
    pub(crate) async fn call(
        self: &Arc<Self>,
        conn: &Conn,
        call: &Arc<Invocation>,
    ) -> RedisResult<Value> {
        if conn.is_sharded() {
            return call.invoke_async(conn).await;
        }
        let waiting = {
            let mut line = self.line();
            if line.sending {
                let (reply, answer) = oneshot::channel();
                line.waiting.push(Waiting {
                    call: Arc::clone(call),
                    reply,
                });
                Some(answer)
            } else {
                line.sending = true;
                None
            }
        };
        match waiting {
            Some(answer) => answer.await.unwrap_or_else(|_| Err(dropped())),
            None => {
                let turn = Turn {
                    coalescer: Arc::clone(self),
                    conn: conn.clone(),
                };
                let reply = call.invoke_async(conn).await;
                drop(turn);
                reply
            }
        }
    }

    fn line(&self) -> MutexGuard<'_, Line> {
        // A panic while the line was held cannot leave it half changed: every change is one
        // push or one take.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The calls waiting whose callers still wait, taken from the line; when none, the line
    /// is free again.
    fn take_waiting(&self) -> Vec<Waiting> {
        let mut line = self.line();
        let waiting: Vec<Waiting> = line
            .waiting
            .drain(..)
            .filter(|w| !w.reply.is_closed())
            .collect();
        if waiting.is_empty() {
            line.sending = false;
        }
        waiting
    }
}

/// The turn of the call on its way: when it ends (answered, failed or dropped), the calls
/// that came meanwhile go, from a task of their own, so that the caller returns at once.
struct Turn {
    coalescer: Arc<Coalescer>,
    conn: Conn,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let waiting = self.coalescer.take_waiting();
        if waiting.is_empty() {
            return;
        }
        let coalescer = Arc::clone(&self.coalescer);
        let conn = self.conn.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(send_in_turn(coalescer, conn, waiting));
            }
            // No runtime left: the callers hear that their calls were not sent.
            Err(_) => {
                coalescer.line().sending = false;
            }
        }
    }
}

/// Sends the waiting calls, then those that came meanwhile, until none wait.
async fn send_in_turn(coalescer: Arc<Coalescer>, mut conn: Conn, mut waiting: Vec<Waiting>) {
    while !waiting.is_empty() {
        send_together(&mut conn, waiting).await;
        waiting = coalescer.take_waiting();
    }
}

/// Sends calls in one round trip: each run of calls of one script as one call of its batched
/// variant, in order, in one pipeline. Calls of a script the server did not know are sent
/// again once it is loaded.
async fn send_together(conn: &mut Conn, waiting: Vec<Waiting>) {
    let batches = batches(waiting);
    let replies = send_batches(conn, &batches).await;
    let mut unknown = Vec::new();
    for (batch, reply) in batches.into_iter().zip(replies) {
        match reply {
            Err(e) if is_noscript(&e) => unknown.push(batch),
            reply => answer(batch, reply),
        }
    }
    if unknown.is_empty() {
        return;
    }
    for batch in &unknown {
        let (_, script) = batch_command(&calls_of(batch));
        if let Err(e) = script.prepare_invoke().load_async(conn).await {
            for batch in unknown {
                answer(batch, Err(e.clone()));
            }
            return;
        }
    }
    let replies = send_batches(conn, &unknown).await;
    for (batch, reply) in unknown.into_iter().zip(replies) {
        answer(batch, reply);
    }
}

/// The waiting calls in batches of one script each, at most [`MOST_PER_BATCH`] calls a batch.
/// A call joins the last batch of its script unless a call that came before it, in a batch
/// after that one, touches one of its keys: calls on different keys commute, so only the
/// order of calls that share a key is kept, and it is.
fn batches(waiting: Vec<Waiting>) -> Vec<Vec<Waiting>> {
    let mut batches: Vec<Vec<Waiting>> = Vec::new();
    // The last batch each key is touched in.
    let mut last_touched: HashMap<&[u8], usize> = HashMap::new();
    let calls: Vec<Arc<Invocation>> = waiting.iter().map(|w| Arc::clone(&w.call)).collect();
    for (w, call) in waiting.into_iter().zip(&calls) {
        let after = call
            .keys()
            .iter()
            .filter_map(|k| last_touched.get(k.as_slice()).copied())
            .max();
        let joins = batches
            .iter()
            .rposition(|batch| batch.len() < MOST_PER_BATCH && batch[0].call.batches_with(call));
        let at = match joins {
            Some(at) if after.is_none_or(|after| after <= at) => at,
            _ => {
                batches.push(Vec::new());
                batches.len() - 1
            }
        };
        for key in call.keys() {
            last_touched.insert(key.as_slice(), at);
        }
        batches[at].push(w);
    }
    batches
}

fn calls_of(batch: &[Waiting]) -> Vec<&Invocation> {
    batch.iter().map(|w| w.call.as_ref()).collect()
}

/// One reply per batch: the batch's script call's, or the pipeline's error for each.
async fn send_batches(conn: &mut Conn, batches: &[Vec<Waiting>]) -> Vec<RedisResult<Value>> {
    let mut pipeline = Pipeline::with_capacity(batches.len());
    for batch in batches {
        pipeline.add_command(batch_command(&calls_of(batch)).0);
    }
    match conn.req_packed_commands(&pipeline, 0, batches.len()).await {
        Ok(replies) if replies.len() == batches.len() => {
            replies.into_iter().map(reply_of).collect()
        }
        Ok(_) => batches.iter().map(|_| Err(malformed())).collect(),
        Err(e) => batches.iter().map(|_| Err(e.clone())).collect(),
    }
}

/// Gives each call of a batch its own reply: the batched script's entry for it, or the call's
/// own reply when it went alone.
fn answer(batch: Vec<Waiting>, reply: RedisResult<Value>) {
    if batch.len() == 1 {
        if let Some(w) = batch.into_iter().next() {
            let _ = w.reply.send(reply);
        }
        return;
    }
    match reply {
        Ok(Value::Array(entries)) if entries.len() == batch.len() => {
            for (w, entry) in batch.into_iter().zip(entries) {
                let _ = w.reply.send(reply_of(entry));
            }
        }
        Ok(_) => batch.into_iter().for_each(|w| {
            let _ = w.reply.send(Err(malformed()));
        }),
        Err(e) => batch.into_iter().for_each(|w| {
            let _ = w.reply.send(Err(e.clone()));
        }),
    }
}

/// A reply, or the error the server replied.
fn reply_of(value: Value) -> RedisResult<Value> {
    match value {
        Value::ServerError(e) => Err(e.into()),
        value => Ok(value),
    }
}

fn malformed() -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a batched script call replied with another number of entries than it had calls",
    ))
}

fn dropped() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Io,
        "the connection's line of script calls stopped before this call was sent",
    ))
}

/// The line against a real server: replies reach their own callers, in order, errors stay
/// with their own call, and a call dropped while it waits is never sent.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fencelock_testkit::RedisServer;
    use redis::aio::ConnectionManager;

    use super::*;
    use crate::transport::script::Lua;

    /// Appends its argument to the list `KEYS[1]` and replies with it.
    static PUSH: Lua = Lua::new(&["redis.call('RPUSH', KEYS[1], ARGV[1]) return ARGV[1]"]);
    /// Replies with the length of the list `KEYS[1]`.
    static LENGTH: Lua = Lua::new(&["return redis.call('LLEN', KEYS[1])"]);
    /// Replies nothing.
    static NOTHING: Lua = Lua::new(&["redis.call('INCR', KEYS[1])"]);
    /// Keeps the server busy for `ARGV[1]` ms, so that the calls made meanwhile wait in line.
    /// Keeps the server busy for a count of empty iterations (20 million: about 150 ms):
    /// not by its clock, which Valkey stops while a script runs.
    static BUSY: Lua = Lua::new(&["for _ = 1, tonumber(ARGV[1]) do end return 1"]);

    async fn single(server: &RedisServer) -> Conn {
        let client = redis::Client::open(server.url().as_str()).expect("url");
        // A response timeout far beyond the busy call, however loaded the machine.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(30)));
        let manager = ConnectionManager::new_with_config(client, config).await;
        Conn::Single(manager.expect("connect"))
    }

    fn push(list: &str, item: &str) -> Arc<Invocation> {
        let mut call = PUSH.invocation();
        call.key(list).arg(item);
        Arc::new(call)
    }

    /// Starts a call that keeps the server busy, and returns once it is on its way.
    async fn occupy(line: &Arc<Coalescer>, conn: &Conn) -> tokio::task::JoinHandle<()> {
        let mut busy = BUSY.invocation();
        busy.key("busy").arg(20_000_000);
        let (line, conn, busy) = (Arc::clone(line), conn.clone(), Arc::new(busy));
        let handle = tokio::spawn(async move {
            line.call(&conn, &busy).await.expect("busy");
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        handle
    }

    fn evalsha_calls(info: &str) -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    async fn evalshas(conn: &mut Conn) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .expect("info");
        evalsha_calls(&info)
    }

    #[tokio::test]
    async fn calls_made_while_one_is_on_its_way_go_as_one_batch_each_answered_in_order() {
        let server = RedisServer::start();
        let mut conn = single(&server).await;
        for script in [PUSH.plain(), PUSH.batched(), BUSY.plain()] {
            script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .expect("load");
        }
        let line = Arc::new(Coalescer::default());
        let before = evalshas(&mut conn).await;
        let busy = occupy(&line, &conn).await;
        let calls: Vec<_> = (0..150).map(|i| push("list", &i.to_string())).collect();
        let replies = futures_join(calls.iter().map(|c| line.call(&conn, c))).await;
        busy.await.expect("busy task");
        for (i, reply) in replies.into_iter().enumerate() {
            let reply: String = redis::from_redis_value(reply.expect("reply")).expect("text");
            assert_eq!(reply, i.to_string());
        }
        let list: Vec<String> = redis::cmd("LRANGE")
            .arg("list")
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("lrange");
        let expected: Vec<String> = (0..150).map(|i| i.to_string()).collect();
        assert_eq!(list, expected, "the calls ran in the order they were made");
        // The busy call, then 150 calls in batches of at most 64: 3 script calls.
        assert_eq!(evalshas(&mut conn).await - before, 1 + 3);
    }

    #[tokio::test]
    async fn calls_of_two_scripts_batch_apart_and_keep_their_order_on_a_shared_key() {
        let server = RedisServer::start();
        let mut conn = single(&server).await;
        let scripts = [
            PUSH.plain(),
            PUSH.batched(),
            LENGTH.plain(),
            LENGTH.batched(),
            BUSY.plain(),
        ];
        for script in scripts {
            script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .expect("load");
        }
        let line = Arc::new(Coalescer::default());
        let before = evalshas(&mut conn).await;
        let busy = occupy(&line, &conn).await;
        let length = |list: &str| {
            let mut call = LENGTH.invocation();
            call.key(list);
            Arc::new(call)
        };
        // Interleaved on distinct lists: one batch per script. On one list, each length
        // must see the pushes made before it, and only those.
        let calls = [
            push("a", "1"),
            length("b"),
            push("c", "1"),
            length("d"),
            push("shared", "1"),
            length("shared"),
            push("shared", "2"),
            length("shared"),
        ];
        let replies = futures_join(calls.iter().map(|c| line.call(&conn, c))).await;
        busy.await.expect("busy task");
        let replies: Vec<Value> = replies.into_iter().map(|r| r.expect("reply")).collect();
        assert_eq!(replies[5], Value::Int(1), "the first length sees one push");
        assert_eq!(replies[7], Value::Int(2), "the second sees both");
        // The busy call; a push batch and a length batch for the distinct lists and the first
        // shared push and length; then the second shared push and length, one batch each.
        assert_eq!(evalshas(&mut conn).await - before, 1 + 2 + 2);
    }

    #[tokio::test]
    async fn an_error_and_a_nil_stay_with_their_own_call() {
        let server = RedisServer::start();
        let mut conn = single(&server).await;
        redis::cmd("SET")
            .arg("text")
            .arg("x")
            .exec_async(&mut conn)
            .await
            .expect("set");
        let line = Arc::new(Coalescer::default());
        let busy = occupy(&line, &conn).await;
        let good = push("list", "a");
        let wrong = push("text", "b");
        let after = push("list", "c");
        let mut nothing = NOTHING.invocation();
        nothing.key("counter");
        let nothing = Arc::new(nothing);
        let (good, wrong, after, nothing) = tokio::join!(
            line.call(&conn, &good),
            line.call(&conn, &wrong),
            line.call(&conn, &after),
            line.call(&conn, &nothing),
        );
        busy.await.expect("busy task");
        assert_eq!(good.expect("good"), Value::BulkString(b"a".to_vec()));
        let wrong = wrong.expect_err("a list push onto a string");
        assert_eq!(wrong.code(), Some("WRONGTYPE"), "{wrong}");
        assert_eq!(after.expect("after"), Value::BulkString(b"c".to_vec()));
        assert_eq!(nothing.expect("nothing"), Value::Nil);
    }

    #[tokio::test]
    async fn a_call_dropped_while_it_waits_is_never_sent() {
        let server = RedisServer::start();
        let mut conn = single(&server).await;
        let line = Arc::new(Coalescer::default());
        let busy = occupy(&line, &conn).await;
        let dropped = push("list", "dropped");
        let kept = push("list", "kept");
        {
            let mut waiting = Box::pin(line.call(&conn, &dropped));
            // Polled once: it takes its place in line, then its caller gives up.
            assert!(futures_poll_once(&mut waiting).await.is_none());
        }
        line.call(&conn, &kept).await.expect("kept");
        busy.await.expect("busy task");
        let list: Vec<String> = redis::cmd("LRANGE")
            .arg("list")
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("lrange");
        assert_eq!(list, vec!["kept".to_owned()]);
    }

    #[tokio::test]
    async fn a_batch_of_a_script_the_server_forgot_is_loaded_and_sent_again() {
        let server = RedisServer::start();
        let mut conn = single(&server).await;
        let line = Arc::new(Coalescer::default());
        let busy = occupy(&line, &conn).await;
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .exec_async(&mut conn)
            .await
            .expect("flush");
        let calls: Vec<_> = (0..3).map(|i| push("list", &i.to_string())).collect();
        let replies = futures_join(calls.iter().map(|c| line.call(&conn, c))).await;
        // The busy call itself ran before the flush; the calls after it find nothing loaded.
        busy.await.expect("busy task");
        for (i, reply) in replies.into_iter().enumerate() {
            let reply: String = redis::from_redis_value(reply.expect("reply")).expect("text");
            assert_eq!(reply, i.to_string());
        }
    }

    /// Polls every future together until all are ready; replies in their order.
    async fn futures_join<F: std::future::Future>(
        futures: impl Iterator<Item = F>,
    ) -> Vec<F::Output> {
        let mut pending: Vec<_> = futures.map(|f| Some(Box::pin(f))).collect();
        let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut done = true;
            for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
                if let Some(future) = slot {
                    match future.as_mut().poll(cx) {
                        std::task::Poll::Ready(value) => {
                            *output = Some(value);
                            *slot = None;
                        }
                        std::task::Poll::Pending => done = false,
                    }
                }
            }
            if done {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        outputs.into_iter().flatten().collect()
    }

    /// Polls a future once: its output if it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(
        future: &mut F,
    ) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut *future).poll(cx) {
                std::task::Poll::Ready(value) => Some(value),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
