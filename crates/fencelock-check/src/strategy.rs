//! The lock strategies under test: the seeds' naive locks, written as the seeds describe them,
//! and fencelock's primitives.

use std::fmt;

use clap::ValueEnum;

/// A way of taking a lock on Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
#[non_exhaustive]
pub enum Strategy {
    /// Seed 002: `EXISTS key`, and when it is absent `SET key 1`; `DEL` to release. No expiry.
    ExistsThenSet,
    /// Seeds 000 and 002: `SETNX key 1`, then `EXPIRE key lease`; `DEL` to release.
    SetnxExpire,
    /// Seed 000's `DistributedLockHandler`: `SETNX key expiry-timestamp`; when held, `GET` it and,
    /// if the timestamp passed, `GETSET` a new one and win when the old value came back expired.
    /// Release: `GET`, and `DEL` unless the timestamp stored there has passed. Polls every 100 ms.
    SetnxGetset,
    /// Seed 002: `SET key 1 EX lease NX`, released with a plain `DEL`.
    SetNxExConstant,
    /// Seed 002: `SET key token EX lease NX` with a random token, released by a Lua
    /// compare-and-delete; the lease is never renewed.
    TokenNoRenewal,
    /// fencelock's `Mutex` with a renewed lease; the resource is written without the fence.
    FencelockMutex,
    /// fencelock's `Mutex`; every access to the resource carries the grant's fence.
    FencelockMutexFenced,
    /// fencelock's `FairMutex`, fenced.
    FencelockFairFenced,
    /// fencelock's `Mutex` on RedLock over 5 independent masters, fenced.
    FencelockRedlockFenced,
    /// fencelock's `Mutex` through Redis Sentinel (a master, one replica, three sentinels),
    /// unfenced, on asynchronous replication.
    FencelockSentinel,
    /// The same, with `ClientOptions::wait_for_replicas(1, 100 ms)`: each grant waits for the
    /// replica's acknowledgement (`WAIT`).
    FencelockSentinelWait,
    /// fencelock's `Mutex` on a Redis Cluster (three masters, one replica each), unfenced, on
    /// asynchronous replication.
    FencelockCluster,
    /// The same, with `ClientOptions::wait_for_replicas(1, 100 ms)`.
    FencelockClusterWait,
    /// fencelock's `RwLock`, fenced: every other hold of each worker is a read, which only reads
    /// the counter and may overlap other reads; writes are exclusive.
    FencelockRwlockFenced,
    /// fencelock's `Semaphore` with one permit, fenced.
    FencelockSemaphoreFenced,
    /// fencelock's `ReentrantMutex`, fenced: each section takes it twice as the same holder and
    /// releases the inner hold before its work.
    FencelockReentrantFenced,
    /// fencelock's `MultiMutex` over the lock's name and a second one, fenced by the first.
    FencelockMultiFenced,
}

/// Where a strategy's lock lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deployment {
    /// One Redis server.
    Single,
    /// Five independent masters (RedLock).
    Redlock,
    /// A master, a replica and three sentinels.
    Sentinel,
    /// Three masters with a replica each, in one Redis Cluster.
    Cluster,
}

/// How many masters a RedLock strategy uses.
pub const REDLOCK_MASTERS: usize = 5;

impl Strategy {
    /// Every strategy, naive ones first.
    pub const ALL: [Strategy; 17] = [
        Strategy::ExistsThenSet,
        Strategy::SetnxExpire,
        Strategy::SetnxGetset,
        Strategy::SetNxExConstant,
        Strategy::TokenNoRenewal,
        Strategy::FencelockMutex,
        Strategy::FencelockMutexFenced,
        Strategy::FencelockFairFenced,
        Strategy::FencelockRedlockFenced,
        Strategy::FencelockSentinel,
        Strategy::FencelockSentinelWait,
        Strategy::FencelockCluster,
        Strategy::FencelockClusterWait,
        Strategy::FencelockRwlockFenced,
        Strategy::FencelockSemaphoreFenced,
        Strategy::FencelockReentrantFenced,
        Strategy::FencelockMultiFenced,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::ExistsThenSet => "exists-then-set",
            Strategy::SetnxExpire => "setnx-expire",
            Strategy::SetnxGetset => "setnx-getset",
            Strategy::SetNxExConstant => "set-nx-ex-constant",
            Strategy::TokenNoRenewal => "token-no-renewal",
            Strategy::FencelockMutex => "fencelock-mutex",
            Strategy::FencelockMutexFenced => "fencelock-mutex-fenced",
            Strategy::FencelockFairFenced => "fencelock-fair-fenced",
            Strategy::FencelockRedlockFenced => "fencelock-redlock-fenced",
            Strategy::FencelockSentinel => "fencelock-sentinel",
            Strategy::FencelockSentinelWait => "fencelock-sentinel-wait",
            Strategy::FencelockCluster => "fencelock-cluster",
            Strategy::FencelockClusterWait => "fencelock-cluster-wait",
            Strategy::FencelockRwlockFenced => "fencelock-rwlock-fenced",
            Strategy::FencelockSemaphoreFenced => "fencelock-semaphore-fenced",
            Strategy::FencelockReentrantFenced => "fencelock-reentrant-fenced",
            Strategy::FencelockMultiFenced => "fencelock-multi-fenced",
        }
    }

    /// Whether this is one of fencelock's primitives rather than a seed's naive lock.
    pub fn is_fencelock(self) -> bool {
        self.is_fenced()
            || matches!(
                self,
                Strategy::FencelockMutex
                    | Strategy::FencelockSentinel
                    | Strategy::FencelockSentinelWait
                    | Strategy::FencelockCluster
                    | Strategy::FencelockClusterWait
            )
    }

    /// Whether every access to the resource carries the grant's fence.
    pub fn is_fenced(self) -> bool {
        matches!(
            self,
            Strategy::FencelockMutexFenced
                | Strategy::FencelockFairFenced
                | Strategy::FencelockRedlockFenced
                | Strategy::FencelockRwlockFenced
                | Strategy::FencelockSemaphoreFenced
                | Strategy::FencelockReentrantFenced
                | Strategy::FencelockMultiFenced
        )
    }

    /// Whether a release hands the lock over to a waiter in the same call and tells it on
    /// pub/sub: `Mutex`, `FairMutex` and `MultiMutex` on one server.
    pub fn hands_over(self) -> bool {
        matches!(
            self,
            Strategy::FencelockMutex
                | Strategy::FencelockMutexFenced
                | Strategy::FencelockFairFenced
                | Strategy::FencelockMultiFenced
        )
    }

    /// Where the lock lives.
    pub fn deployment(self) -> Deployment {
        match self {
            Strategy::FencelockRedlockFenced => Deployment::Redlock,
            Strategy::FencelockSentinel | Strategy::FencelockSentinelWait => Deployment::Sentinel,
            Strategy::FencelockCluster | Strategy::FencelockClusterWait => Deployment::Cluster,
            _ => Deployment::Single,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
