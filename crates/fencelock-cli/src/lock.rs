//! The locks `fencelock run` can hold, each taken through the library's one handle, so that
//! the supervision of the command is written once: take it (waiting or not), read its fence,
//! watch for its loss, release it.

use std::time::{Duration, Instant};

use fencelock::{Client, Guard, Handle, Layout, Lease, LockKind, LockOptions};

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

impl From<Wait> for fencelock::Wait {
    fn from(wait: Wait) -> fencelock::Wait {
        match wait {
            Wait::No => fencelock::Wait::No,
            Wait::AtMost(limit) => fencelock::Wait::AtMost(limit),
            // `run` sets no wait limit on the lock: it waits as long as it takes.
            Wait::Forever => fencelock::Wait::AsConfigured,
        }
    }
}

/// The lock of a run: the handle of the kind asked for, whichever it is.
pub(crate) struct Lock {
    handle: Handle,
    want: Want,
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
        let handle = match want {
            Want::Mutex => client.mutex_with_options(name, options)?.into(),
            Want::Semaphore { total, permits } => client
                .semaphore_with_options(name, total, options)?
                .permits_handle(permits)?
                .into(),
            Want::Read => client
                .rwlock_with_options(name, options)?
                .read_handle_as(&holder()?)
                .into(),
            Want::Write => client
                .rwlock_with_options(name, options)?
                .write_handle_as(&holder()?)
                .into(),
            Want::Fair => client.fair_mutex_with_options(name, options)?.into(),
            Want::Foreign(layout) => client
                .foreign_mutex_with_options(layout, name, options)?
                .into(),
        };
        Ok(Lock { handle, want })
    }

    /// The kind `status` lists this lock as; none for a foreign layout's, which `status` lists
    /// only when asked with `--layout`.
    pub(crate) fn kind(&self) -> Option<LockKind> {
        match self.want {
            Want::Foreign(_) => None,
            want => Some(want.kind()),
        }
    }

    /// What messages call the lock: its kind, or its layout.
    pub(crate) fn describe(&self) -> String {
        match self.want {
            Want::Foreign(layout) => format!("lock in {layout}'s layout"),
            want => want.kind().to_string(),
        }
    }

    /// For a semaphore whose total stored in Redis is not the one this run asked for: what to
    /// warn about, since the stored total rules and the runs do not agree on it.
    pub(crate) async fn total_mismatch(&self, client: &Client) -> Option<String> {
        let Want::Semaphore { total, .. } = self.want else {
            return None;
        };
        let name = self.handle.name();
        let stored = client.semaphore(name, total).ok()?.permits().await.ok()?;
        (stored != total).then(|| {
            format!(
                "semaphore {name:?} has a stored total of {stored} permits, not the {total} asked \
                 for; the stored total rules (give every run of a name the same --semaphore N)"
            )
        })
    }

    /// Takes the lock.
    pub(crate) async fn take(&self, wait: Wait) -> fencelock::Result<Guard> {
        self.handle.acquire(wait.into()).await
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
