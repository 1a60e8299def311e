//! The locks `fencelock run` can hold, behind one interface, so that the supervision of the
//! command is written once: take it (waiting or not), read its fence, watch for its loss,
//! release it.

use std::time::{Duration, Instant};

use fencelock::{
    Client, FairMutex, FairMutexGuard, Fence, Holder, Lease, LockKind, Lost, Mutex, MutexGuard,
    MutexOptions, RwLock, RwLockOptions, RwLockReadGuard, RwLockWriteGuard, Semaphore,
    SemaphoreOptions, SemaphorePermit,
};

/// What `fencelock run` was asked to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Want {
    /// A mutex (no kind flag).
    Mutex,
    /// `permits` of a semaphore of `total` (`--semaphore`, `--permits`); both at least 1.
    Semaphore {
        /// The semaphore's permits in all.
        total: u32,
        /// The permits this run takes.
        permits: u32,
    },
    /// A read hold of a read-write lock (`--read`).
    Read,
    /// The write hold of a read-write lock (`--write`).
    Write,
    /// A fair mutex (`--fair`).
    Fair,
}

/// How long to wait for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Try once.
    No,
    /// Give up after this long.
    AtMost(Duration),
    /// As long as it takes.
    Forever,
}

/// A lock handle of one of the primitives.
pub(crate) enum Lock {
    Mutex(Mutex),
    Semaphore(Semaphore, u32),
    Read(RwLock, Holder),
    Write(RwLock, Holder),
    Fair(FairMutex),
}

impl Lock {
    /// The handle for `want` on `name`, with a renewed `lease`. Read-write holds are taken by
    /// a holder named after the process (`label`), so that `status` can tell who holds them.
    pub(crate) fn new(
        client: &Client,
        want: Want,
        name: &str,
        lease: Duration,
        label: &str,
    ) -> fencelock::Result<Lock> {
        let lease = Lease::Renewed(lease);
        let holder = || client.holder_named(label).or_else(|_| client.holder());
        Ok(match want {
            Want::Mutex => {
                Lock::Mutex(client.mutex_with_options(name, MutexOptions::default().lease(lease))?)
            }
            Want::Semaphore { total, permits } => Lock::Semaphore(
                client.semaphore_with_options(
                    name,
                    total,
                    SemaphoreOptions::default().lease(lease),
                )?,
                permits,
            ),
            Want::Read => Lock::Read(
                client.rwlock_with_options(name, RwLockOptions::default().lease(lease))?,
                holder()?,
            ),
            Want::Write => Lock::Write(
                client.rwlock_with_options(name, RwLockOptions::default().lease(lease))?,
                holder()?,
            ),
            Want::Fair => Lock::Fair(
                client.fair_mutex_with_options(name, MutexOptions::default().lease(lease))?,
            ),
        })
    }

    /// The kind `status` lists this lock as.
    pub(crate) fn kind(&self) -> LockKind {
        match self {
            Lock::Mutex(_) => LockKind::Mutex,
            Lock::Semaphore(..) => LockKind::Semaphore,
            Lock::Read(..) | Lock::Write(..) => LockKind::RwLock,
            Lock::Fair(_) => LockKind::FairMutex,
        }
    }

    /// For a semaphore whose total stored in Redis is not the one this run asked for: what to
    /// warn about, since the stored total rules and the runs do not agree on it.
    pub(crate) async fn total_mismatch(&self, want: Want) -> Option<String> {
        let (Lock::Semaphore(semaphore, _), Want::Semaphore { total, .. }) = (self, want) else {
            return None;
        };
        let stored = semaphore.permits().await.ok()?;
        (stored != total).then(|| {
            format!(
                "semaphore {:?} has a stored total of {stored} permits, not the {total} asked \
                 for; the stored total rules (give every run of a name the same --semaphore N)",
                semaphore.name()
            )
        })
    }

    /// Takes the lock.
    pub(crate) async fn take(&self, wait: Wait) -> fencelock::Result<Guard> {
        Ok(match self {
            Lock::Mutex(m) => Guard::Mutex(match wait {
                Wait::No => m.try_lock().await?,
                Wait::AtMost(limit) => m.lock_timeout(limit).await?,
                Wait::Forever => m.lock().await?,
            }),
            Lock::Semaphore(s, n) => Guard::Permit(match wait {
                Wait::No => s.try_acquire_many(*n).await?,
                Wait::AtMost(limit) => s.acquire_many_timeout(*n, limit).await?,
                Wait::Forever => s.acquire_many(*n).await?,
            }),
            Lock::Read(l, h) => Guard::Read(match wait {
                Wait::No => l.try_read_as(h).await?,
                Wait::AtMost(limit) => l.read_timeout_as(h, limit).await?,
                Wait::Forever => l.read_as(h).await?,
            }),
            Lock::Write(l, h) => Guard::Write(match wait {
                Wait::No => l.try_write_as(h).await?,
                Wait::AtMost(limit) => l.write_timeout_as(h, limit).await?,
                Wait::Forever => l.write_as(h).await?,
            }),
            Lock::Fair(f) => Guard::Fair(match wait {
                Wait::No => f.try_lock().await?,
                Wait::AtMost(limit) => f.lock_timeout(limit).await?,
                Wait::Forever => f.lock().await?,
            }),
        })
    }
}

/// A held lock of one of the primitives.
pub(crate) enum Guard {
    Mutex(MutexGuard),
    Permit(SemaphorePermit),
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
    Fair(FairMutexGuard),
}

/// Runs `$body` with `$g` bound to the guard inside, whichever it is.
macro_rules! each {
    ($guard:expr, $g:ident => $body:expr) => {
        match $guard {
            Guard::Mutex($g) => $body,
            Guard::Permit($g) => $body,
            Guard::Read($g) => $body,
            Guard::Write($g) => $body,
            Guard::Fair($g) => $body,
        }
    };
}

impl Guard {
    /// The fencing token of the grant.
    pub(crate) fn fence(&self) -> Fence {
        each!(self, g => g.fence())
    }

    /// Whether the lock is still held as far as this process knows.
    pub(crate) fn is_held(&self) -> bool {
        each!(self, g => g.is_held())
    }

    /// Completes when the lock is lost.
    pub(crate) async fn lost(&self) -> Lost {
        each!(self, g => g.lost().await)
    }

    /// Releases the lock, but not before `at` when there is one: until then it stays held
    /// and ends by itself.
    pub(crate) async fn unlock(self, at: Option<Instant>) -> fencelock::Result<()> {
        let Some(at) = at else {
            return match self {
                Guard::Permit(p) => p.release().await,
                Guard::Mutex(g) => g.unlock().await,
                Guard::Read(g) => g.unlock().await,
                Guard::Write(g) => g.unlock().await,
                Guard::Fair(g) => g.unlock().await,
            };
        };
        match self {
            Guard::Permit(p) => p.release_no_earlier_than(at).await,
            Guard::Mutex(g) => g.unlock_no_earlier_than(at).await,
            Guard::Read(g) => g.unlock_no_earlier_than(at).await,
            Guard::Write(g) => g.unlock_no_earlier_than(at).await,
            Guard::Fair(g) => g.unlock_no_earlier_than(at).await,
        }
    }
}
