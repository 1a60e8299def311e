//! The one call the core makes up into the façade: reading the holds of every kind of lock,
//! which only the façade can, as it alone knows every kind's storage (`kinds::STORED`, read by
//! `inspect.rs`). A waiter's deadlock check and the wait-for graph need those holds to tell a
//! waiter stuck behind a waiter from one behind a lock that may be released.

use std::future::Future;
use std::pin::Pin;

use crate::core::stored::LockInfo;
use crate::error::Result;
use crate::transport::conn::Conn;

/// Reads what Redis holds of each kind of lock under some names: the façade implements it
/// and installs it in the client (`Shared::holders`) as the client is made.
pub(crate) trait Holders: Send + Sync {
    /// The locks of every kind held now under each of `names`, name after name, in kind
    /// order (as `Client::locks_named` reads each), read on `conn` under the key prefix
    /// `prefix`.
    fn held<'a>(
        &'a self,
        conn: &'a Conn,
        prefix: &'a str,
        names: Vec<String>,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<LockInfo>>> + Send + 'a>>;
}
