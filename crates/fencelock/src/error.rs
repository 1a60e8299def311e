//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::cycle::human;

/// What went wrong with a lock operation.
///
/// Every fallible operation in fencelock returns this type. It is `#[non_exhaustive]`: match the
/// variants you handle and keep a catch-all arm. [`topics::errors`](crate::topics::errors) is
/// one table of every variant: what it means, whether to retry, and what to do.
///
/// # Examples
///
/// Most callers need no `match`: `?` passes errors on, and [`Optional::optional`] turns "held
/// by another owner" into `None`. Match where the details matter:
///
/// ```no_run
/// # async fn demo(mutex: fencelock::Mutex) -> Result<(), fencelock::Error> {
/// match mutex.try_lock().await {
///     Ok(guard) => guard.unlock().await?,
///     Err(fencelock::Error::Held { remaining, .. }) => {
///         println!("busy, free again in at most {remaining:?}");
///     }
///     Err(other) => return Err(other),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A lock name was empty, too long, or otherwise unusable.
    InvalidName {
        /// Why the name was refused.
        reason: &'static str,
    },
    /// An option was out of range: a lease of zero or beyond the maximum, a prefix with braces.
    InvalidOption {
        /// Which option.
        option: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// An address of Redis could not be used: not a URL with a scheme Redis takes, or a part
    /// of it malformed (the host, the port, the database number). Returned by the `connect`
    /// functions before anything is sent; the message says what is expected there.
    InvalidAddress {
        /// Which server the address names: `the Redis server`, `a RedLock master`, `a cluster
        /// node` or `a sentinel`.
        of: &'static str,
        /// What is wrong with it.
        reason: String,
        /// The forms of address accepted there, such as
        /// `redis://[user:password@]host[:port][/db]`.
        expected: &'static str,
    },
    /// `try_lock` found the lock held by another owner.
    Held {
        /// The lock's name.
        name: String,
        /// How long the holder's lease still runs, when Redis reports an expiry.
        remaining: Option<Duration>,
    },
    /// Waiting for the lock ran past its timeout.
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lock is no longer held by this guard: its lease ran out, or it was removed or taken.
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The request could never be granted while the caller holds what it holds: for example a
    /// read lock asking to become a write lock, which would wait for itself.
    WouldDeadlock {
        /// The lock's name.
        name: String,
        /// What the caller asked for and why it cannot be granted.
        reason: &'static str,
    },
    /// A waiter with [`LockOptions::deadlock_check`](crate::LockOptions::deadlock_check) found
    /// that its wait closes a cycle of waits (each task waiting for a lock the next one holds)
    /// and, its wait having begun last of the cycle's, gave up so that the others go on. It
    /// still holds whatever it held: give that back (or let its guards drop), then try again.
    Deadlock {
        /// The lock it waited for.
        name: String,
        /// The cycle, each step with its waiter, holder, labels and wait.
        cycle: crate::cycle::WaitCycle,
    },
    /// A key this lock uses holds a value of another Redis type (Redis replied `WRONGTYPE`).
    WrongType {
        /// The lock's name.
        name: String,
    },
    /// A RedLock request did not reach a majority of the masters: too many of them were down,
    /// paused, or slower than the node timeout. Nothing is left held by it.
    NoQuorum {
        /// The lock's name.
        name: String,
        /// How many masters answered.
        answered: usize,
        /// How many answers a decision needs.
        needed: usize,
    },
    /// The lock was granted, but Redis's answer came too late to trust the lease it gave: the
    /// reply took longer than the lease (less the clock drift allowed for), so by the time it
    /// arrived the grant may already have ended. The grant was given back, and nobody else was
    /// holding the lock when it was made. A slow or paused server, or a congested network, is
    /// the usual cause: [`is_unavailable`](Error::is_unavailable) is true, and waiters try
    /// again by themselves.
    LateGrant {
        /// The lock's name.
        name: String,
        /// How long the request took, from its send to its answer.
        took: Duration,
    },
    /// The operation is not available on this kind of deployment: for example a
    /// [`RwLock`](crate::RwLock) on a RedLock client, which only offers
    /// [`Mutex`](crate::Mutex).
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// The deployment that does not offer it.
        deployment: &'static str,
    },
    /// The lock was granted, but fewer replicas than
    /// [`ClientOptions::wait_for_replicas`](crate::ClientOptions::wait_for_replicas) asks for
    /// acknowledged it in time, so the grant was released again.
    NotReplicated {
        /// The lock's name.
        name: String,
        /// How many replicas acknowledged the grant.
        acknowledged: usize,
        /// How many were asked for.
        wanted: usize,
    },
    /// The server is older than the oldest one fencelock supports and is tested on (Redis 6.2;
    /// every Valkey is supported). Returned when connecting, before any lock is taken on it.
    UnsupportedServer {
        /// The server found, such as `Redis 6.0.16`.
        server: String,
        /// The oldest server supported.
        oldest: &'static str,
    },
    /// A [`blocking`](crate::blocking) call was made inside a tokio runtime, where blocking
    /// would stall the runtime's threads: use the async API there.
    BlockingInAsync,
    /// The client was shut down ([`Client::shutdown`](crate::Client::shutdown)): it acquires
    /// nothing any more, and a guard whose hold the shutdown gave back can no longer be
    /// released or extended.
    Shutdown,
    /// A shutdown gave back every hold, but Redis did not answer some of the releases within
    /// the client's [`shutdown_timeout`](crate::ClientOptions::shutdown_timeout): those locks
    /// may stay held until their leases end.
    ShutdownIncomplete {
        /// How many releases were not answered.
        unanswered: usize,
    },
    /// Redis could not be reached, timed out, refused the credentials or answered with an error.
    Redis(redis::RedisError),
    /// Redis answered with a reply of a shape the lock scripts never produce.
    UnexpectedReply {
        /// What was received.
        detail: String,
    },
    /// The operating system's random number generator failed.
    Entropy {
        /// The generator's own message.
        detail: String,
    },
}

impl Error {
    /// Whether the lock was not taken because another owner held it: [`Error::Held`] from a
    /// `try_*` call, or [`Error::Timeout`] from a wait that ran out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: fencelock::Mutex) -> Result<(), fencelock::Error> {
    /// if let Err(e) = mutex.try_lock().await {
    ///     assert!(e.is_held(), "only a busy lock is expected here: {e}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> bool {
        matches!(self, Error::Held { .. } | Error::Timeout { .. })
    }

    /// Whether the error means Redis could not be reached or did not answer in time, so the same
    /// operation may succeed later. A node that is no longer master (`READONLY`, `MASTERDOWN`),
    /// a server still loading its data after a restart (`LOADING`), a cluster that is down or
    /// asks to try again (`CLUSTERDOWN`, `TRYAGAIN`) and sentinels that know no master for the
    /// service right now (during a failover) count as unavailable too, and so does a grant that
    /// came back too late to trust ([`Error::LateGrant`]). Refused credentials, a
    /// key of the wrong type and other error replies do not: trying again would not help.
    ///
    /// Waiters retry these errors until their wait limit (see
    /// [`ClientOptions::outage_limit`](crate::ClientOptions::outage_limit)).
    pub fn is_unavailable(&self) -> bool {
        use redis::ServerErrorKind as Server;
        match self {
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            Server::ReadOnly
                                | Server::MasterDown
                                | Server::BusyLoading
                                | Server::ClusterDown
                                | Server::TryAgain
                        ) | redis::ErrorKind::MasterNameNotFoundBySentinel
                    )
            }
            Error::NoQuorum { .. } | Error::LateGrant { .. } => true,
            _ => false,
        }
    }

    /// Whether Redis refused the credentials or the ACL user may not run a command fencelock
    /// needs.
    pub fn is_auth_failure(&self) -> bool {
        match self {
            Error::Redis(e) => {
                e.kind() == redis::ErrorKind::AuthenticationFailed
                    || matches!(e.code(), Some("NOPERM" | "WRONGPASS" | "NOAUTH"))
            }
            _ => false,
        }
    }

    /// Whether the Redis URL or connection settings were unusable: [`Error::InvalidAddress`],
    /// or settings the `redis` crate refused (such as TLS settings it cannot use).
    pub fn is_bad_target(&self) -> bool {
        match self {
            Error::InvalidAddress { .. } => true,
            Error::Redis(e) => e.kind() == redis::ErrorKind::InvalidClientConfig,
            _ => false,
        }
    }

    pub(crate) fn from_redis(err: redis::RedisError, name: &str) -> Error {
        if err.code() == Some("WRONGTYPE") || err.detail().is_some_and(|d| d.contains("WRONGTYPE"))
        {
            Error::WrongType {
                name: name.to_owned(),
            }
        } else {
            Error::Redis(err)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidName { reason } => write!(f, "invalid lock name: {reason}"),
            Error::InvalidOption { option, reason } => {
                write!(f, "invalid option `{option}`: {reason}")
            }
            Error::InvalidAddress {
                of,
                reason,
                expected,
            } => write!(f, "invalid address of {of}: {reason}; expected {expected}"),
            Error::Held {
                name,
                remaining: Some(left),
            } => write!(
                f,
                "lock {name:?} is held by another owner (lease ends in {})",
                human(*left)
            ),
            Error::Held {
                name,
                remaining: None,
            } => write!(
                f,
                "lock {name:?} is held by another owner (its key has no expiry)"
            ),
            Error::Timeout { name, waited } => {
                write!(
                    f,
                    "gave up waiting for lock {name:?} after {}",
                    human(*waited)
                )
            }
            Error::NotHeld { name } => write!(f, "lock {name:?} is no longer held by this guard"),
            Error::WouldDeadlock { name, reason } => {
                write!(f, "lock {name:?}: refused, it would deadlock: {reason}")
            }
            Error::Deadlock { name, cycle } => write!(
                f,
                "lock {name:?}: gave up waiting, the wait closes a deadlock: {cycle}"
            ),
            Error::WrongType { name } => write!(
                f,
                "a key of lock {name:?} holds another Redis type (WRONGTYPE)"
            ),
            Error::NoQuorum {
                name,
                answered,
                needed,
            } => write!(
                f,
                "lock {name:?}: only {answered} RedLock masters answered, {needed} needed"
            ),
            Error::LateGrant { name, took } => write!(
                f,
                "lock {name:?} was granted, but redis answered after {}, too late to trust the \
                 lease; gave the grant back",
                human(*took)
            ),
            Error::Unsupported { what, deployment } => {
                write!(f, "{what} is not available on {deployment}")
            }
            Error::NotReplicated {
                name,
                acknowledged,
                wanted,
            } => write!(
                f,
                "lock {name:?} was granted but only {acknowledged} of {wanted} replicas \
                 acknowledged it in time; released it again"
            ),
            Error::UnsupportedServer { server, oldest } => {
                write!(
                    f,
                    "{server} is not supported: fencelock needs {oldest} or newer"
                )
            }
            Error::BlockingInAsync => {
                f.write_str("a blocking lock call was made inside an async runtime")
            }
            Error::Shutdown => f.write_str("the client was shut down"),
            Error::ShutdownIncomplete { unanswered } => write!(
                f,
                "shutdown: redis did not answer {unanswered} releases in time; those locks end \
                 with their leases"
            ),
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::UnexpectedReply { detail } => {
                write!(f, "unexpected reply from redis: {detail}")
            }
            Error::Entropy { detail } => write!(f, "os random number generator failed: {detail}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Error::Redis(err)
    }
}

/// The result type of fencelock's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns "held by another owner" into `None`, so that the common "do it unless another
/// instance does" takes no `match` on error variants.
///
/// The same shape as the `optional()` many database crates offer for "no row": the other
/// errors still come out as errors. Implemented for every `Result` of fencelock.
///
/// # Examples
///
/// The cron leader: one instance runs the job, the others skip it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// use fencelock::Optional;
///
/// let mutex = client.mutex("cron:cleanup")?;
/// let Some(guard) = mutex.try_lock().await.optional()? else {
///     return Ok(()); // another instance runs it
/// };
/// // ... the job ...
/// assert!(mutex.try_lock().await.optional()?.is_none());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub trait Optional<T> {
    /// `Ok(Some(value))` for a value, `Ok(None)` when [`Error::is_held`] (the lock was held by
    /// another owner, or a wait for it ran out), and the error otherwise.
    ///
    /// # Errors
    ///
    /// Every error but [`Error::Held`] and [`Error::Timeout`], unchanged.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> Optional<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(e) if e.is_held() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
