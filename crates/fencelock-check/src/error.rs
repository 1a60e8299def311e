//! The checker's error type: what can stop a run before it measured anything.

use std::fmt;

/// Why a run, or a worker, could not go on.
#[derive(Debug)]
#[non_exhaustive]
pub enum CheckError {
    /// Bad arguments: a malformed worker command line, an empty matrix.
    Usage(String),
    /// The protected resource or a naive lock's Redis failed in a way the run cannot absorb.
    Redis(redis::RedisError),
    /// fencelock refused to build a client or a lock (a bad option or name).
    Lock(fencelock::Error),
    /// Spawning, signalling or talking to a worker process failed.
    Io(std::io::Error),
    /// A worker printed a line that is not an event, or exited in a way nobody asked for.
    Worker(String),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Usage(why) => write!(f, "bad usage: {why}"),
            CheckError::Redis(e) => write!(f, "redis: {e}"),
            CheckError::Lock(e) => write!(f, "fencelock: {e}"),
            CheckError::Io(e) => write!(f, "i/o: {e}"),
            CheckError::Worker(why) => write!(f, "worker: {why}"),
        }
    }
}

impl std::error::Error for CheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckError::Redis(e) => Some(e),
            CheckError::Lock(e) => Some(e),
            CheckError::Io(e) => Some(e),
            CheckError::Usage(_) | CheckError::Worker(_) => None,
        }
    }
}

impl From<redis::RedisError> for CheckError {
    fn from(e: redis::RedisError) -> Self {
        CheckError::Redis(e)
    }
}

impl From<fencelock::Error> for CheckError {
    fn from(e: fencelock::Error) -> Self {
        CheckError::Lock(e)
    }
}

impl From<std::io::Error> for CheckError {
    fn from(e: std::io::Error) -> Self {
        CheckError::Io(e)
    }
}

impl From<nix::Error> for CheckError {
    fn from(e: nix::Error) -> Self {
        CheckError::Io(e.into())
    }
}

/// The checker's result type.
pub type Result<T> = std::result::Result<T, CheckError>;
