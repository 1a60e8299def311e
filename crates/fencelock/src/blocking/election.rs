//! The blocking leader election, its leadership and its watch.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{Held, Runtime};
use super::{guard_methods, handle_methods};
use crate::election::Leader;
use crate::error::Result;
use crate::options::Lease;
use crate::token::Fence;

/// A leader election for blocking code: at most one candidate of a name leads at a time,
/// across every process that uses the same Redis.
///
/// The blocking counterpart of [`fencelock::Election`](crate::Election), with its renewed
/// leases, fences and announced changes; the supervisor loop
/// [`Election::lead`](crate::Election::lead) is async only. The handle is cheap to clone and
/// to send to other threads.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::blocking::Client::connect(server.url().as_str())?;
/// let election = client.election("scheduler")?;
/// let mut watch = election.observe();
/// assert!(watch.next_state()?.is_none(), "nobody leads yet");
///
/// let leadership = election.campaign("host-a")?;
/// assert_eq!(watch.next_state()?.expect("a leader").fence(), leadership.fence());
/// leadership.proclaim("host-a (ready)")?;
/// assert_eq!(election.leader()?.expect("a leader").value(), "host-a (ready)");
/// leadership.resign()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Election {
    election: crate::Election,
    runtime: Arc<Runtime>,
}

handle_methods!(Election, election);

impl Election {
    /// The election's name (lossily decoded where it is not UTF-8).
    pub fn name(&self) -> &str {
        self.election.name()
    }

    /// The lease of each leadership.
    pub fn lease(&self) -> Lease {
        self.election.lease()
    }

    /// Blocks until this candidate leads, publishing `value`, as
    /// [`fencelock::Election::campaign`](crate::Election::campaign) does.
    ///
    /// # Errors
    ///
    /// As [`fencelock::Election::campaign`](crate::Election::campaign);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        self.runtime.hold(self.election.campaign(value))
    }

    /// Who leads now, or `None` when nobody does:
    /// [`fencelock::Election::leader`](crate::Election::leader).
    ///
    /// # Errors
    ///
    /// As [`fencelock::Election::leader`](crate::Election::leader);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn leader(&self) -> Result<Option<Leader>> {
        self.runtime.block_on(self.election.leader())?
    }

    /// Follows the election's leader: see [`LeaderWatch`].
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn observe(&self) -> LeaderWatch {
        LeaderWatch {
            watch: self.election.observe(),
            runtime: Arc::clone(&self.runtime),
        }
    }
}

/// Proof of leading an [`Election`], for blocking code: the blocking counterpart of
/// [`fencelock::Leadership`](crate::Leadership). Dropping it resigns before `drop` returns.
///
/// # Examples
///
/// See [`Election`].
#[must_use = "dropping the leadership resigns before `drop` returns (in the background inside a runtime), ignoring errors; call `resign` to learn whether it still led"]
pub struct Leadership {
    held: Held<crate::Leadership>,
}

impl Leadership {
    /// The fencing token of this leadership.
    pub fn fence(&self) -> Fence {
        self.held.guard().fence()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.held.guard().name()
    }

    /// Publishes `value` as the leader's value, if this candidate still leads:
    /// [`fencelock::Leadership::proclaim`](crate::Leadership::proclaim).
    ///
    /// # Errors
    ///
    /// As [`fencelock::Leadership::proclaim`](crate::Leadership::proclaim);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn proclaim(&self, value: impl AsRef<str>) -> Result<()> {
        self.held
            .runtime()
            .block_on(self.held.guard().proclaim(value))?
    }

    /// Ends this leadership at once and reports whether it still led until then:
    /// [`fencelock::Leadership::resign`](crate::Leadership::resign).
    ///
    /// # Errors
    ///
    /// As [`fencelock::Leadership::resign`](crate::Leadership::resign);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime,
    /// where it resigns in the background instead.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn resign(self) -> Result<()> {
        self.held.release()
    }
}

guard_methods!(Leadership, resign, "leadership");

/// The changes of an election's leader, for blocking code: the blocking counterpart of
/// [`fencelock::LeaderWatch`](crate::LeaderWatch).
///
/// # Examples
///
/// See [`Election`].
pub struct LeaderWatch {
    watch: crate::LeaderWatch,
    runtime: Arc<Runtime>,
}

impl LeaderWatch {
    /// Blocks until the leader differs from the last state answered (the first call answers
    /// at once): [`fencelock::LeaderWatch::next`](crate::LeaderWatch::next).
    ///
    /// # Errors
    ///
    /// As [`fencelock::LeaderWatch::next`](crate::LeaderWatch::next);
    /// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) inside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`Election`].
    pub fn next_state(&mut self) -> Result<Option<Leader>> {
        self.runtime.block_on(self.watch.next())?
    }

    /// As [`next_state`](LeaderWatch::next_state), for at most `timeout`: `Ok(None)` when the leader did
    /// not change meanwhile, else `Ok(Some(state))`.
    ///
    /// # Errors
    ///
    /// As [`next_state`](LeaderWatch::next_state).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mut watch: fencelock::blocking::LeaderWatch) -> Result<(), fencelock::Error> {
    /// use std::time::Duration;
    ///
    /// while let Some(state) = watch.next_state_timeout(Duration::from_secs(5))? {
    ///     println!("now leading: {:?}", state.map(|leader| leader.value().to_owned()));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_state_timeout(&mut self, timeout: Duration) -> Result<Option<Option<Leader>>> {
        // The timer is made inside the runtime: outside any, tokio's timers panic.
        let watch = &mut self.watch;
        let next = self
            .runtime
            .block_on(async move { tokio::time::timeout(timeout, watch.next()).await })?;
        next.ok().transpose()
    }
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("blocking::LeaderWatch")
            .field(&self.watch)
            .finish()
    }
}
