//! Who waits for whom, named: the task a wait or a hold belongs to ([`TaskId`]), the kind of
//! lock it is on ([`LockKind`]), and a deadlock's cycle ([`WaitCycle`]), which
//! [`Error::Deadlock`](crate::Error::Deadlock) carries and
//! [`WaitGraph`](crate::WaitGraph) lists. Types every layer names, so they sit with the error
//! type.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Which primitive a lock found in Redis belongs to.
///
/// A [`MultiMutex`](crate::MultiMutex) holds the [`Mutex`](crate::Mutex) of each of its names,
/// so its names are listed as mutexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`Mutex`](crate::Mutex) (or one name of a [`MultiMutex`](crate::MultiMutex)).
    Mutex,
    /// A [`ReentrantMutex`](crate::ReentrantMutex).
    ReentrantMutex,
    /// A [`RwLock`](crate::RwLock).
    RwLock,
    /// A [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A [`FairMutex`](crate::FairMutex).
    FairMutex,
    /// An [`Election`](crate::Election): its leader holds it (listed with its published value as
    /// the holder), its candidates wait.
    Election,
    /// A [`ForeignMutex`](crate::ForeignMutex): a lock in another library's layout, under a key
    /// of that library's, without the client's prefix. [`ForeignMutex::info`](crate::ForeignMutex::info)
    /// reads its holder; the wait-for graph and [`Client::locks`](crate::Client::locks), which
    /// walk the prefix, list only its recorded waiters.
    ForeignMutex,
}

impl LockKind {
    /// Every kind, in the order above: what code that must cover every kind (a test, a tool
    /// listing locks) walks, so that a kind added here is a kind it misses until it learns it.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::LockKind;
    ///
    /// assert!(LockKind::ALL.contains(&LockKind::FairMutex));
    /// assert_eq!(LockKind::ALL.len(), 7);
    /// ```
    pub const ALL: [LockKind; 7] = [
        LockKind::Mutex,
        LockKind::ReentrantMutex,
        LockKind::RwLock,
        LockKind::Semaphore,
        LockKind::FairMutex,
        LockKind::Election,
        LockKind::ForeignMutex,
    ];

    /// The kind its [`Display`](fmt::Display) names.
    pub(crate) fn parse(text: &str) -> Option<LockKind> {
        LockKind::ALL
            .into_iter()
            .find(|kind| kind.to_string() == text)
    }

    /// Whether one holder at a time holds it: then a waiter waits for that one holder.
    pub(crate) fn is_exclusive(self) -> bool {
        !matches!(self, LockKind::RwLock | LockKind::Semaphore)
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockKind::Mutex => "mutex",
            LockKind::ReentrantMutex => "reentrant-mutex",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore => "semaphore",
            LockKind::FairMutex => "fair-mutex",
            LockKind::Election => "election",
            LockKind::ForeignMutex => "foreign-mutex",
        })
    }
}

/// Reads the name [`Display`](fmt::Display) gives a kind (`mutex`, `fair-mutex`, ...).
///
/// # Examples
///
/// ```
/// use fencelock::LockKind;
///
/// assert_eq!("fair-mutex".parse::<LockKind>(), Ok(LockKind::FairMutex));
/// assert!("spinlock".parse::<LockKind>().is_err());
/// ```
impl std::str::FromStr for LockKind {
    type Err = UnknownKind;

    fn from_str(text: &str) -> Result<LockKind, UnknownKind> {
        LockKind::parse(text).ok_or(UnknownKind)
    }
}

/// A name that is no [`LockKind`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownKind;

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a kind of lock")
    }
}

impl std::error::Error for UnknownKind {}

/// One task of one client: what holds and waits in a wait-for graph.
///
/// The task is the tokio task ([`tokio::task::Id`]) whose `lock()` (or `read()`,
/// `acquire()`, ...) made the wait or the grant, or, for a call made outside any task (the
/// body of `#[tokio::main]`, `block_on`, a [`blocking`](crate::blocking) call), the thread
/// that made it. A hold belongs to the task that acquired it for as long as it is held, even
/// when its guard is moved to another task. Two tasks of one client are two nodes of the
/// graph: one waiting for what the other holds is no cycle.
///
/// Shown as `<client>/<task>`: `3fZk0a1Q/t42`, `3fZk0a1Q/h1`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// The client's tag: the first 8 characters of its id.
    pub client: String,
    /// The task: `t` and the tokio task id, or `h` and a number this process gave the thread.
    pub task: String,
}

/// The task running now, as cheap to take as to copy: a tokio task's id, or a number this
/// process gave the thread running outside any task. [`TaskId`] names it with its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Task {
    Tokio(tokio::task::Id),
    Thread(u64),
}

impl Task {
    pub(crate) fn current() -> Task {
        thread_local! {
            static THREAD: u64 = {
                static NEXT: AtomicU64 = AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            };
        }
        match tokio::task::try_id() {
            Some(id) => Task::Tokio(id),
            None => Task::Thread(THREAD.with(|n| *n)),
        }
    }

    /// This task of the client whose tag (the start of its id its tokens carry) is `client`.
    pub(crate) fn of_client(self, client: &str) -> TaskId {
        TaskId {
            client: client.to_owned(),
            task: match self {
                Task::Tokio(id) => format!("t{id}"),
                Task::Thread(n) => format!("h{n}"),
            },
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.client, self.task)
    }
}

/// One step of a deadlock: a task that waits for a lock, and a task that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CycleStep {
    /// The waiting task.
    pub waiter: TaskId,
    /// The waiting task's client's label
    /// ([`ClientOptions::holder_label`](crate::ClientOptions::holder_label)), when it has one.
    pub waiter_label: Option<String>,
    /// The lock it waits for.
    pub name: String,
    /// Which kind of lock that is.
    pub kind: LockKind,
    /// When its wait began, by its own client's clock (to the millisecond).
    pub since: SystemTime,
    /// How long it had waited when the cycle was read.
    pub waited: Duration,
    /// The task it waits for: the next step's waiter.
    pub holder: TaskId,
    /// That task's client's label, when it has one.
    pub holder_label: Option<String>,
}

/// A deadlock: tasks each waiting for a lock the next one holds, the last one for a lock the
/// first holds. Each step's `holder` is the next step's `waiter`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitCycle {
    /// The steps, starting with the task whose wait began first; each step's holder is the
    /// next step's waiter, the last step's the first's.
    pub steps: Vec<CycleStep>,
}

impl WaitCycle {
    pub(crate) fn new(steps: Vec<CycleStep>) -> WaitCycle {
        WaitCycle { steps }
    }

    /// The step whose wait began last: the waiter a deadlock check refuses.
    pub fn youngest(&self) -> Option<&CycleStep> {
        self.steps
            .iter()
            .max_by(|a, b| (a.since, &a.waiter, &a.name).cmp(&(b.since, &b.waiter, &b.name)))
    }
}

impl fmt::Display for WaitCycle {
    /// `a/t1 (host/12) waits 2.1s for mutex "A" held by b/t7 (host/13); b/t7 (host/13) waits
    /// 1.0s for mutex "B" held by a/t1 (host/12)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, step) in self.steps.iter().enumerate() {
            if at > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "{}{} waits {} for {} {:?} held by {}{}",
                step.waiter,
                labelled(step.waiter_label.as_deref()),
                human(step.waited),
                step.kind,
                step.name,
                step.holder,
                labelled(step.holder_label.as_deref()),
            )?;
        }
        Ok(())
    }
}

fn labelled(label: Option<&str>) -> String {
    label.map(|l| format!(" ({l})")).unwrap_or_default()
}

/// A duration for people: milliseconds below a second, else seconds with one decimal.
pub(crate) fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
