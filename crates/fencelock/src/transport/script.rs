//! How every Lua script is declared and run: one [`Lua`] per script, assembled from the `.lua`
//! files next to the module that owns it, hashed once and sent with `EVALSHA` (reloaded on
//! `NOSCRIPT` by `redis::Script`).
//!
//! A script that announces a release calls `redis.call(PUBLISH, channel, message)`: each
//! script comes in two variants, `PUBLISH` for a single server, Sentinel and Redis 6.2, and
//! `SPUBLISH` (sharded pub/sub, Redis 7+) for a cluster, which would otherwise broadcast every
//! release to every node. The connection a call is sent on picks the variant ([`Lua::on`]):
//! the kind that builds a call never names a connection.
//!
//! Every script also comes batched (the `PUBLISH` variant): its own file wrapped into a
//! function that runs once per call of a batch, so that concurrent calls of one connection
//! can go to Redis as one script call ([`coalesce`](crate::transport::coalesce)).

use std::sync::OnceLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, Script, ToRedisArgs, Value};

use crate::transport::conn::Conn;

/// Runs the calls of a batch, each with its own keys and arguments, and replies with one entry
/// per call, in order. `ARGV[1]` is the number of calls; then, per call, its key count, its
/// argument count and its arguments; `KEYS` holds every call's keys, in order. A call that
/// fails replies its error in its own entry, and the calls after it still run.
const BATCH_DRIVER: &str = r#"
local replies, at, keys_before = {}, 2, 0
for call = 1, tonumber(ARGV[1]) do
  local key_count, arg_count = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local keys, args = {}, {}
  for i = 1, key_count do
    keys[i] = KEYS[keys_before + i]
  end
  for i = 1, arg_count do
    args[i] = ARGV[at + 1 + i]
  end
  keys_before, at = keys_before + key_count, at + 2 + arg_count
  local ok, reply = pcall(one, keys, args)
  if not ok and type(reply) ~= 'table' then
    reply = redis.error_reply(tostring(reply))
  elseif reply == nil then
    -- A nil would end the reply's array here: false is Redis's nil too.
    reply = false
  end
  replies[call] = reply
end
return replies
"#;

/// One Lua script: its parts, concatenated in order (shared helpers first, then the script's
/// own file), compiled into a `redis::Script` per announcement variant on first use.
///
/// Declared as a `static` beside the `.lua` files it is made of:
///
/// ```text
/// static ACQUIRE: Lua = Lua::new(&[FENCE, include_str!("mutex/acquire.lua")]);
/// ```
pub(crate) struct Lua {
    parts: &'static [&'static str],
    plain: OnceLock<Script>,
    sharded: OnceLock<Script>,
    batched: OnceLock<Script>,
}

impl Lua {
    /// A script made of `parts`, in order.
    pub(crate) const fn new(parts: &'static [&'static str]) -> Lua {
        Lua {
            parts,
            plain: OnceLock::new(),
            sharded: OnceLock::new(),
            batched: OnceLock::new(),
        }
    }

    /// The variant `conn` announces with.
    pub(crate) fn on(&self, conn: &Conn) -> &Script {
        if conn.announces_sharded() {
            self.sharded()
        } else {
            self.plain()
        }
    }

    /// A call of this script, for keys and arguments to be added; the connection it is sent on
    /// picks the variant.
    pub(crate) fn invocation(&'static self) -> Invocation {
        Invocation {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// The `PUBLISH` variant.
    pub(crate) fn plain(&self) -> &Script {
        self.plain.get_or_init(|| self.compile("PUBLISH"))
    }

    fn sharded(&self) -> &Script {
        self.sharded.get_or_init(|| self.compile("SPUBLISH"))
    }

    /// The batched `PUBLISH` variant: the shared helpers once, the script's own file as the
    /// function each call of the batch runs, then [`BATCH_DRIVER`].
    pub(crate) fn batched(&self) -> &Script {
        self.batched.get_or_init(|| {
            let (own, helpers) = self.parts.split_last().unwrap_or((&"", &[]));
            let mut source = String::from("local PUBLISH = 'PUBLISH'\n");
            for part in helpers {
                source.push_str(part);
            }
            source.push_str("\nlocal function one(KEYS, ARGV)\n");
            source.push_str(own);
            source.push_str("\nend\n");
            source.push_str(BATCH_DRIVER);
            Script::new(&source)
        })
    }

    fn compile(&self, publish: &str) -> Script {
        let mut source = format!("local PUBLISH = '{publish}'\n");
        for part in self.parts {
            source.push_str(part);
        }
        Script::new(&source)
    }
}

/// One call of a script being built: the script, its keys and its arguments.
#[derive(Clone)]
pub struct Invocation {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    /// Adds a key (`KEYS[i]`).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[i]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Whether this call may share one batched script call with `other` (on a connection that
    /// announces with `PUBLISH`): the same script.
    pub(crate) fn batches_with(&self, other: &Invocation) -> bool {
        std::ptr::eq(self.lua, other.lua)
    }

    /// The call's keys.
    pub(crate) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// `EVALSHA hash numkeys keys… args…` of `script`, one of this call's variants.
    fn command(&self, script: &Script) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command
            .arg(script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }

    /// Runs the call on `conn`, in the variant `conn` announces with, loading the script on a
    /// server that answers `NOSCRIPT`.
    pub(crate) async fn invoke_async<T: FromRedisValue>(&self, conn: &Conn) -> RedisResult<T> {
        let script = self.lua.on(conn);
        let reply = evalsha(&self.command(script), script, &mut conn.clone()).await?;
        T::from_redis_value(reply).map_err(Into::into)
    }
}

/// One `EVALSHA` of `calls` (at least one), all of one script, on a connection that announces
/// with `PUBLISH`: the script itself for one call, its batched variant for several.
pub(crate) fn batch_command(calls: &[&Invocation]) -> (Cmd, &'static Script) {
    if let [one] = calls {
        let script = one.lua.plain();
        return (one.command(script), script);
    }
    let script = calls[0].lua.batched();
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(script.get_hash())
        .arg(calls.iter().map(|c| c.keys.len()).sum::<usize>());
    for call in calls {
        command.arg(&call.keys);
    }
    command.arg(calls.len());
    for call in calls {
        command
            .arg(call.keys.len())
            .arg(call.args.len())
            .arg(&call.args);
    }
    (command, script)
}

/// Sends an `EVALSHA` of `script`, loading the script and sending it again on `NOSCRIPT`.
pub(crate) async fn evalsha(
    command: &Cmd,
    script: &Script,
    conn: &mut impl ConnectionLike,
) -> RedisResult<Value> {
    match command.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            script.prepare_invoke().load_async(conn).await?;
            command.query_async(conn).await
        }
        reply => reply,
    }
}

/// Whether the server did not know the script.
pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}
