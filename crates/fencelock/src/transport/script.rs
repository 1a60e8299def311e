//! How every Lua script is declared and run: one [`Lua`] per script, assembled from the `.lua`
//! files next to the module that owns it, hashed once and sent with `EVALSHA` (reloaded on
//! `NOSCRIPT` by `redis::Script`).
//!
//! A script that announces a release calls `redis.call(PUBLISH, channel, message)`: each
//! script comes in two variants, `PUBLISH` for a single server, Sentinel and Redis 6.2, and
//! `SPUBLISH` (sharded pub/sub, Redis 7+) for a cluster, which would otherwise broadcast every
//! release to every node. The connection picks the variant ([`Lua::on`]).

use std::sync::OnceLock;

use redis::{Script, ScriptInvocation};

use crate::transport::conn::Conn;

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
}

impl Lua {
    /// A script made of `parts`, in order.
    pub(crate) const fn new(parts: &'static [&'static str]) -> Lua {
        Lua {
            parts,
            plain: OnceLock::new(),
            sharded: OnceLock::new(),
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

    /// An invocation of the variant `conn` announces with, for keys and arguments to be added.
    pub(crate) fn invocation(&'static self, conn: &Conn) -> ScriptInvocation<'static> {
        self.on(conn).prepare_invoke()
    }

    /// The `PUBLISH` variant.
    pub(crate) fn plain(&self) -> &Script {
        self.plain.get_or_init(|| self.compile("PUBLISH"))
    }

    fn sharded(&self) -> &Script {
        self.sharded.get_or_init(|| self.compile("SPUBLISH"))
    }

    fn compile(&self, publish: &str) -> Script {
        let mut source = format!("local PUBLISH = '{publish}'\n");
        for part in self.parts {
            source.push_str(part);
        }
        Script::new(&source)
    }
}
