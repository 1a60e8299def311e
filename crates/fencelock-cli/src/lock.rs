//! The locks `fencelock run` can hold, behind one interface, so that the supervision of the
//! command is written once: take it (waiting or not), read its fence, watch for its loss,
//! release it.

use std::time::{Duration, Instant};

use fencelock::{
    Client, FairMutex, ForeignMutex, Guard, Holder, Layout, Lease, LockKind, LockOptions, Mutex,
    RwLock, Semaphore,
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
    /// A mutex in another library's layout (`--layout`), shared with that library's locks.
    Foreign(Layout),
}

impl Want {
    /// Whether the lock gives a fencing token: every kind but a foreign layout's.
    pub fn fences(self) -> bool {
        !matches!(self, Want::Foreign(_))
    }

    /// The kind `status` and the wait-for graph list the lock as.
    pub fn kind(self) -> LockKind {
        match self {
            Want::Mutex => LockKind::Mutex,
            Want::Semaphore { .. } => LockKind::Semaphore,
            Want::Read | Want::Write => LockKind::RwLock,
            Want::Fair => LockKind::FairMutex,
            Want::Foreign(_) => LockKind::ForeignMutex,
        }
    }
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
    Foreign(ForeignMutex),
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
        deadlock_check: Option<Duration>,
    ) -> fencelock::Result<Lock> {
        let mut options = LockOptions::default().lease(Lease::Renewed(lease));
        if let Some(after) = deadlock_check {
            options = options.deadlock_check(after);
        }
        let holder = || client.holder_named(label).or_else(|_| client.holder());
        Ok(match want {
            Want::Mutex => Lock::Mutex(client.mutex_with_options(name, options)?),
            Want::Semaphore { total, permits } => Lock::Semaphore(
                client.semaphore_with_options(name, total, options)?,
                permits,
            ),
            Want::Read => Lock::Read(client.rwlock_with_options(name, options)?, holder()?),
            Want::Write => Lock::Write(client.rwlock_with_options(name, options)?, holder()?),
            Want::Fair => Lock::Fair(client.fair_mutex_with_options(name, options)?),
            Want::Foreign(layout) => {
                Lock::Foreign(client.foreign_mutex_with_options(layout, name, options)?)
            }
        })
    }

    /// The kind `status` lists this lock as; none for a foreign layout's, which `status` lists
    /// only when asked with `--layout`.
    pub(crate) fn kind(&self) -> Option<LockKind> {
        Some(match self {
            Lock::Mutex(_) => LockKind::Mutex,
            Lock::Semaphore(..) => LockKind::Semaphore,
            Lock::Read(..) | Lock::Write(..) => LockKind::RwLock,
            Lock::Fair(_) => LockKind::FairMutex,
            Lock::Foreign(_) => return None,
        })
    }

    /// What messages call the lock: its kind, or its layout.
    pub(crate) fn describe(&self) -> String {
        match (self, self.kind()) {
            (Lock::Foreign(f), _) => format!("lock in {}'s layout", f.layout()),
            (_, Some(kind)) => kind.to_string(),
            (_, None) => "lock".to_owned(),
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
            Lock::Mutex(m) => match wait {
                Wait::No => m.try_lock().await?.into(),
                Wait::AtMost(limit) => m.lock_timeout(limit).await?.into(),
                Wait::Forever => m.lock().await?.into(),
            },
            Lock::Semaphore(s, n) => match wait {
                Wait::No => s.try_acquire_many(*n).await?.into(),
                Wait::AtMost(limit) => s.acquire_many_timeout(*n, limit).await?.into(),
                Wait::Forever => s.acquire_many(*n).await?.into(),
            },
            Lock::Read(l, h) => match wait {
                Wait::No => l.try_read_as(h).await?.into(),
                Wait::AtMost(limit) => l.read_timeout_as(h, limit).await?.into(),
                Wait::Forever => l.read_as(h).await?.into(),
            },
            Lock::Write(l, h) => match wait {
                Wait::No => l.try_write_as(h).await?.into(),
                Wait::AtMost(limit) => l.write_timeout_as(h, limit).await?.into(),
                Wait::Forever => l.write_as(h).await?.into(),
            },
            Lock::Fair(f) => match wait {
                Wait::No => f.try_lock().await?.into(),
                Wait::AtMost(limit) => f.lock_timeout(limit).await?.into(),
                Wait::Forever => f.lock().await?.into(),
            },
            Lock::Foreign(f) => match wait {
                Wait::No => f.try_lock().await?.into(),
                Wait::AtMost(limit) => f.lock_timeout(limit).await?.into(),
                Wait::Forever => f.lock().await?.into(),
            },
        })
    }
}

/// Releases the lock, but not before `at` when there is one: until then it stays held and
/// ends by itself.
pub(crate) async fn unlock(guard: Guard, at: Option<Instant>) -> fencelock::Result<()> {
    match at {
        Some(at) => guard.unlock_no_earlier_than(at).await,
        None => guard.unlock().await,
    }
}
