//! fencelock against real servers, one module per primitive or concern: what each lock
//! grants and refuses, its leases, notifications, faults and deployments, the blocking API,
//! inspection, the docs and the examples.
//!
//! One test binary rather than one per file: linking a test binary is most of its build.
//! Run one module with a filter: `cargo test -p fencelock --test locks -- mutex::`.

#[cfg(feature = "blocking")]
mod blocking;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod costs;
mod docs;
mod election;
mod examples;
mod fair;
mod faults;
mod foreign;
mod handle;
mod handoff;
mod inspect;
mod memory;
mod multi;
mod mutex;
mod redlock;
mod reentrant;
mod rwlock;
mod script_keys;
mod security;
mod semaphore;
mod sentinel;
mod shutdown;
mod usage;
mod waits;
