//! The one error type of the bench: what failed, in words a reader of the run can act on.

use std::fmt;

/// A failure of a bench run.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A command sent directly to Redis failed.
    Redis(redis::RedisError),
    /// fencelock itself returned an error.
    Fencelock(fencelock::Error),
    /// A file or process operation failed.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A private `redis-server` could not be started or did not answer.
    Server(String),
    /// A reply or an output line did not have the expected shape.
    Parse(String),
    /// A chart could not be drawn.
    Chart(String),
    /// Results could not be encoded as JSON.
    Json(serde_json::Error),
    /// A scenario did not finish within its time bound.
    Stuck(String),
}

/// The bench's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::Fencelock(e) => write!(f, "fencelock: {e}"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Server(m) => write!(f, "redis-server: {m}"),
            Error::Parse(m) => write!(f, "unexpected output: {m}"),
            Error::Chart(m) => write!(f, "chart: {m}"),
            Error::Json(e) => write!(f, "json: {e}"),
            Error::Stuck(m) => write!(f, "stuck: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Fencelock(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            Error::Json(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

impl From<fencelock::Error> for Error {
    fn from(e: fencelock::Error) -> Self {
        Error::Fencelock(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e)
    }
}
