//! The engine every kind of lock runs on: attempts and waits, leases and their renewal, the
//! release of what a guard or a cancelled attempt leaves behind, the notifications that wake
//! waiters, and the quorum of nodes every request goes to. Nothing here knows any one kind:
//! a kind describes itself through [`kind::Kind`].
//!
//! Within the core, modules depend on each other in one direction only, lowest first:
//! `observe`, `stored`, `lease`, `holds`, `nodes`, `keeper`, `notify`, `waits`, `shared`, `kind`, `held`,
//! `grant`, `guard`, `handle` (`cargo xtask layers` refuses a circle).

pub(crate) mod acquire;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod held;
pub(crate) mod keeper;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod live_holds;
pub(crate) mod nodes;
pub(crate) mod notify;
pub(crate) mod observe;
pub(crate) mod shared;
pub(crate) mod stored;
pub(crate) mod waits;

/// Lua shared by every script that grants a fencing token: `fence_after` and `next_fence`.
pub(crate) const FENCE: &str = include_str!("core/fence.lua");

/// Lua shared by the scripts that keep a holder's expiry apart from its key's: `lengthen` and
/// `stretch`.
pub(crate) const EXPIRIES: &str = include_str!("core/expiries.lua");

/// Lua shared by the forced release of each kind: the server's time and how holds are taken.
pub(crate) const FORCE_PARTS: &str = include_str!("core/force.lua");
