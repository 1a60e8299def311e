// Every long-form doc is read after docs/rustdoc-links.md. The first definition of a link
// wins, so rustdoc resolves [`Mutex`] and the like as intra-doc links, while GitHub, which
// shows the .md file alone, follows the docs.rs links defined at the file's end.
#![doc = include_str!("../docs/rustdoc-links.md")]
#![doc = include_str!("../docs/guide.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "blocking")]
pub mod blocking;
mod check;
mod client;
mod connect;
mod core;
mod cycle;
mod error;
// Only for the fuzz targets and their replay (crates/fencelock-fuzz); not part of the API. Always
// built rather than behind a feature, so that it is no option a user sees, and rather than
// behind a `--cfg`, so that the test suite's replay of the fuzz targets shares the build of
// every other test instead of compiling the dependency tree a second time.
#[doc(hidden)]
pub mod fuzzing;
mod inspect;
mod keys;
mod kinds;
mod options;
mod race;
#[cfg(test)]
mod testing;
mod token;
mod transport;

pub use crate::core::guard::Guard;
pub use crate::core::handle::Handle;
pub use crate::core::lease::Lost;
pub use crate::core::stored::LockInfo;
pub use crate::core::waits::{
    GraphHolder, GraphWaiter, LockWaits, Verdict, WaitGraph, MAX_RECORDED_WAITS,
};
pub use check::DeploymentWarning;
pub use client::Client;
pub use connect::{Deployment, IntoDeployment};
pub use cycle::{CycleStep, LockKind, TaskId, UnknownKind, WaitCycle};
pub use error::{Error, Optional, Result};
pub use inspect::ScanProgress;
pub use keys::{Layout, MAX_NAME_LEN};
pub use kinds::election::{Election, Leader, LeaderWatch, Leadership};
pub use kinds::fair::{FairMutex, FairMutexGuard};
pub use kinds::foreign::{ForeignMutex, ForeignMutexGuard};
pub use kinds::multi::{MultiMutex, MultiMutexGuard, MAX_MULTI_NAMES};
pub use kinds::mutex::{Mutex, MutexGuard};
pub use kinds::reentrant::{Holder, ReentrantMutex, ReentrantMutexGuard};
pub use kinds::rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use kinds::semaphore::{Semaphore, SemaphorePermit};
pub use options::{
    ClientOptions, Lease, LockOptions, Wait, DEFAULT_HANDOFF_WINDOW, DEFAULT_RECORD_WAITS,
    MAX_LEASE, MIN_LEASE,
};
pub use token::Fence;
pub use transport::sentinel::SentinelOptions;

/// Long-form documentation that belongs to no single type.
pub mod topics {
    /// Every variant of [`Error`](crate::Error): what it means, whether to retry, and what to
    /// do.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/errors.md")]
    pub mod errors {}

    /// Every option of the client and of each lock: its default, its range and its
    /// trade-off.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/configuration.md")]
    pub mod configuration {}

    /// A lock that is never free, waiters that wake late, lost leases, error replies from
    /// Redis, each with the command that shows its cause; and the caveats to know.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/troubleshooting.md")]
    pub mod troubleshooting {}

    /// Managed and compatible servers (ElastiCache, MemoryDB, Memorystore, Azure Managed
    /// Redis, Dragonfly): what to connect with and what to set, as their providers document
    /// it.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/servers.md")]
    pub mod servers {}

    /// TLS, an ACL user with only the commands fencelock sends, and how tokens, names and
    /// scripts are kept apart.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/security.md")]
    pub mod security {}

    /// Leader election: when to use it instead of a mutex, what a leader is guaranteed (with
    /// its fence), the settings and their trade-offs, and what it costs.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/election.md")]
    pub mod election {}

    /// Who holds a lock and who waits for it: process labels, the wait-for graph, its
    /// cycles, and the deadlock check.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/waits.md")]
    pub mod waits {}

    /// Bad input and faults, each with its outcome and the test that checks it.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/faults.md")]
    pub mod faults {}

    /// Spans and metrics of the `tracing` and `metrics` features: what each means, its labels
    /// and units, how to wire them up and what to alert on.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/observability.md")]
    pub mod observability {}

    /// The wire protocol: each primitive's keys and values, which script does what, why it is
    /// safe, and the choices behind it.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/design.md")]
    pub mod design {}

    /// Running fencelock in production: sizing a lease, fencing writes to a database, and
    /// Kubernetes (termination, CronJobs, the pod name as holder label), with the examples
    /// that show each.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/production.md")]
    pub mod production {}

    /// Sharing locks with services in other languages: for each library whose layout a
    /// [`ForeignMutex`](crate::ForeignMutex) keeps, what is shared, what is not, the options
    /// that must agree on both sides, and what fencelock's own layout gives that theirs cannot.
    ///
    #[doc = include_str!("../docs/rustdoc-links.md")]
    #[doc = include_str!("../docs/sharing.md")]
    pub mod sharing {}
}

#[cfg(test)]
mod tests {
    fn is_error<T: std::error::Error + Send + Sync + 'static>() {}
    fn is_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_error::<crate::Error>();
        is_send_sync::<crate::Client>();
        is_send_sync::<crate::Mutex>();
        is_send_sync::<crate::MutexGuard>();
        is_send_sync::<crate::Handle>();
        is_send_sync::<crate::Guard>();
        is_send_sync::<crate::SentinelOptions>();
        is_send_sync::<crate::Election>();
        is_send_sync::<crate::Leadership>();
        is_send_sync::<crate::LeaderWatch>();
    }
}
