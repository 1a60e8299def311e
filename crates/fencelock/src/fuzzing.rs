//! What fencelock does with user input before it talks to Redis, reachable without a server, for
//! the fuzz targets in `fuzz/` and their replay in the test suite. Not part of the API: hidden
//! from the documentation, and free to change in any release. Each function runs the
//! crate's own code path, so a fuzz target exercises what a user's call would.

use std::time::Duration;

use crate::keys::{validate_prefix, LockKeys};
use crate::{ClientOptions, Lease, Result, SentinelOptions};

/// What [`Client::connect_with_options`](crate::Client::connect_with_options) does with the
/// URL of one server and `options` before it connects.
pub fn open_single(url: &str, options: &ClientOptions) -> Result<()> {
    crate::transport::single_server(url, options).map(drop)
}

/// What [`Client::connect_with_options`](crate::Client::connect_with_options) does with
/// [`Deployment::redlock`](crate::Deployment::redlock)`(masters)` and `options` before it
/// connects.
pub fn open_redlock(masters: &[&str], options: &ClientOptions) -> Result<()> {
    crate::connect::redlock::master_servers(masters.iter().copied(), options).map(drop)
}

/// What [`Client::connect_with_options`](crate::Client::connect_with_options) does with
/// [`Deployment::cluster`](crate::Deployment::cluster)`(nodes)` and `options` before it
/// connects.
pub fn open_cluster(nodes: &[&str], options: &ClientOptions) -> Result<()> {
    crate::transport::cluster::cluster_nodes(nodes.iter().copied(), options).map(drop)
}

/// What [`Client::connect_with_options`](crate::Client::connect_with_options) does with a
/// [`Deployment::sentinel`](crate::Deployment::sentinel) and its
/// [`SentinelOptions`](crate::SentinelOptions) before it connects.
pub fn open_sentinel(
    sentinels: &[&str],
    service_name: &str,
    nodes: &SentinelOptions,
    options: &ClientOptions,
) -> Result<()> {
    crate::transport::sentinel::sentinel_resolver(
        sentinels.iter().copied(),
        service_name,
        nodes,
        options,
    )
    .map(drop)
}

/// The key `<prefix>{<name>}:<suffix>` of a lock, after the checks a client makes on its
/// prefix and a handle on its name.
pub fn lock_key(prefix: &str, name: &[u8], suffix: &str) -> Result<Vec<u8>> {
    validate_prefix(prefix)?;
    Ok(LockKeys::new(prefix, name)?.key(suffix))
}

/// The lock name in `key`, as lock inspection reads it back; `None` when `key` is not a key
/// of that prefix and suffix.
pub fn name_in_key(prefix: &str, key: &[u8], suffix: &str) -> Option<Vec<u8>> {
    crate::inspect::name_of(prefix, key, suffix)
}

/// The `SCAN MATCH` pattern lock inspection sends for the glob `pattern` over names.
pub fn scan_pattern(prefix: &str, pattern: &str, suffix: &str) -> Vec<u8> {
    crate::inspect::scan_pattern(prefix, pattern, suffix)
}

/// The lease in whole milliseconds, as a handle checks it when it is made.
pub fn lease_millis(lease: Lease) -> Result<u64> {
    lease.millis()
}

/// The margin a guard takes off `lease` before counting on it, with `options`' clock drift.
pub fn drift_margin(options: &ClientOptions, lease: Duration) -> Duration {
    options.drift.of(lease)
}

/// The check a semaphore makes on a count of permits, its total or a request.
pub fn check_permits(permits: u32) -> Result<()> {
    crate::kinds::semaphore::check_count(permits)
}
