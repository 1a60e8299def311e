//! Who waits for whom, the feature in one place: a waiter's record of its wait ([`record`]),
//! the wait-for graph and its deadlocks ([`graph`]), and a waiter's part, recording and
//! checking while it waits ([`check`]). The core's waiter (`core/acquire.rs`) runs a [`Checker`];
//! the façade's `Client::wait_graph` (`inspect.rs`) reads the [`graph`]. The names these share
//! with the error type and the options (`TaskId`, `LockKind`, `WaitCycle`) are in `cycle.rs`.
//!
//! Both need the holds of every kind of lock, which only the façade can read: the façade
//! installs its reading as a [`Holders`] ([`holders`]), the one call the core makes up
//! (`ARCHITECTURE.md`).

pub(crate) mod check;
pub(crate) mod graph;
pub(crate) mod holders;
pub(crate) mod record;

pub(crate) use check::{Checker, ClientWaits};
pub use graph::{GraphHolder, GraphWaiter, LockWaits, Verdict, WaitGraph};
pub(crate) use holders::Holders;
pub use record::MAX_RECORDED_WAITS;
