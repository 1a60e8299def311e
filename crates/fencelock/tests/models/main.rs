//! Property tests against real servers: random sequences of operations on each primitive,
//! checked against an in-memory model of it, and the lease invariant (a guard never claims
//! more validity than Redis holds) on every primitive.

#[path = "../common/mod.rs"]
mod common;
mod fair;
mod lease_invariant;
mod mutex;
mod reentrant;
mod rwlock;
mod semaphore;
