//! Settings of a [`Client`](crate::Client) and of each lock.

use std::time::Duration;

#[cfg(feature = "tls")]
use rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use rustls::pki_types::CertificateDer;

use crate::cycle::LockKind;
use crate::error::{Error, Result};
use crate::keys::validate_prefix;

/// The shortest lease accepted: 200 ms.
///
/// A renewed lease is renewed every third of it, timed from when its grant (or last renewal)
/// was sent, and it stays valid for the lease less the drift allowance from that send: each
/// renewal has about two thirds of the lease to go out and come back. At 200 ms that is some
/// 130 ms, room for the scheduling delays of a loaded machine (the renewal task, the network
/// and Redis each waiting for a core); at 10 ms it was a few milliseconds, and such leases were
/// lost within seconds. A fixed lease has the same floor, so that every lease can be renewed.
pub const MIN_LEASE: Duration = Duration::from_millis(200);

/// The longest lease accepted: 365 days.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a lock is granted for, and whether fencelock keeps it alive.
///
/// A lease bounds how long a lock outlives a holder that crashed or lost its connection: after
/// the lease, another owner can take the lock. Leases are whole milliseconds; shorter parts are
/// rounded up.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::Lease;
///
/// // Held until released; renewed every 10 s while the process lives; gone 30 s after it dies.
/// let watched = Lease::Renewed(Duration::from_secs(30));
/// // Expires after 5 s unless extended by hand.
/// let fixed = Lease::Fixed(Duration::from_secs(5));
/// assert_ne!(watched, fixed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lease {
    /// A lease of this length renewed every third of it by the client's renewal task, until the
    /// guard is released or dropped. The default, with 30 seconds.
    Renewed(Duration),
    /// A lease of this length that is never renewed by itself; extend it with
    /// [`MutexGuard::extend`](crate::MutexGuard::extend).
    Fixed(Duration),
}

impl Lease {
    /// The length of the lease.
    pub fn duration(self) -> Duration {
        match self {
            Lease::Renewed(d) | Lease::Fixed(d) => d,
        }
    }

    /// Whether the client renews this lease by itself.
    pub fn is_renewed(self) -> bool {
        matches!(self, Lease::Renewed(_))
    }

    /// The lease in whole milliseconds, after checking its range.
    pub(crate) fn millis(self) -> Result<u64> {
        lease_millis(self.duration())
    }
}

impl Default for Lease {
    fn default() -> Self {
        Lease::Renewed(Duration::from_secs(30))
    }
}

/// Checks a lease length and returns it in whole milliseconds, rounded up.
pub(crate) fn lease_millis(lease: Duration) -> Result<u64> {
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(Error::InvalidOption {
            option: "lease",
            reason: format!("{lease:?} is outside {MIN_LEASE:?}..={MAX_LEASE:?}"),
        });
    }
    let millis = lease.as_nanos().div_ceil(1_000_000);
    // In range by the check above: at most 365 days of milliseconds.
    Ok(u64::try_from(millis).unwrap_or(u64::MAX))
}

/// The part of a lease that is not counted on: the client's and the server's clocks may run at
/// slightly different rates, and the reply needs time to travel. By default 1% of the lease plus
/// 2 ms, as the Redlock algorithm suggests; see [`ClientOptions::clock_drift`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Drift {
    factor: f64,
    extra: Duration,
}

impl Default for Drift {
    fn default() -> Self {
        Drift {
            factor: 0.01,
            extra: Duration::from_millis(2),
        }
    }
}

impl Drift {
    /// The margin taken off a lease of this length.
    pub(crate) fn of(self, lease: Duration) -> Duration {
        lease.mul_f64(self.factor).saturating_add(self.extra)
    }
}

/// Settings of a [`Client`](crate::Client).
///
/// Built with consuming setters; each documents its default.
/// [`topics::configuration`](crate::topics::configuration) lists every option of the client
/// and of each lock, with its default, its range and its trade-off.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use fencelock::{ClientOptions, Lease};
///
/// let options = ClientOptions::default()
///     .prefix("billing:locks:")
///     .default_lease(Lease::Renewed(Duration::from_secs(10)))
///     .response_timeout(Duration::from_millis(250));
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub(crate) prefix: String,
    pub(crate) default_lease: Lease,
    pub(crate) wake_fallback: Duration,
    pub(crate) handoff_window: Duration,
    pub(crate) record_waits: Option<Duration>,
    pub(crate) inherited_holds: Vec<(LockKind, String)>,
    pub(crate) outage_limit: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) fence_memory: Duration,
    pub(crate) holder_label: String,
    pub(crate) renew_batch: usize,
    pub(crate) drift: Drift,
    pub(crate) node_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) replica_ack: Option<ReplicaAck>,
    pub(crate) tls: Tls,
}

/// Certificates for `rediss://` connections, beyond the system's trusted roots.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    root: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The certificates to build connections with, when any were given.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.root.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root.clone(),
        })
    }

    /// Checks that the certificates read as the `redis` crate reads them when a client is
    /// built, and that each PEM holds a certificate: a bad PEM is a bad option, not a server
    /// that cannot be reached.
    #[cfg(feature = "tls")]
    fn validate(&self) -> Result<()> {
        if let Some(root) = &self.root {
            let only_root = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root.clone()),
            };
            check_certificates("tls_root_certificate", only_root, root)?;
        }
        if let Some((cert, key)) = &self.client {
            let only_client = redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
                root_cert: None,
            };
            check_certificates("tls_client_certificate", only_client, cert)?;
        }
        Ok(())
    }

    /// Refuses certificates: this build leaves TLS out, so they could never be used.
    #[cfg(not(feature = "tls"))]
    fn validate(&self) -> Result<()> {
        let option = match (&self.root, &self.client) {
            (Some(_), _) => "tls_root_certificate",
            (None, Some(_)) => "tls_client_certificate",
            (None, None) => return Ok(()),
        };
        Err(Error::InvalidOption {
            option,
            reason: "TLS needs fencelock's `tls` feature, which this build leaves out".into(),
        })
    }
}

/// Builds a client for a TLS server with `certificates`, which parses them and connects to
/// nothing, and counts the certificates in `pem`.
#[cfg(feature = "tls")]
fn check_certificates(
    option: &'static str,
    certificates: redis::TlsCertificates,
    pem: &[u8],
) -> Result<()> {
    let refused = |reason: String| Error::InvalidOption { option, reason };
    redis::Client::build_with_tls("rediss://localhost/", certificates)
        .map_err(|e| refused(e.to_string()))?;
    if CertificateDer::pem_slice_iter(pem).next().is_none() {
        return Err(refused("the PEM holds no certificate".into()));
    }
    Ok(())
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("root", &self.root.as_ref().map(|_| "<pem>"))
            .field(
                "client",
                &self.client.as_ref().map(|_| "<pem, redacted key>"),
            )
            .finish()
    }
}

/// How many replicas must acknowledge a grant, and how long to wait for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

/// How many wake fallbacks a waiter's place lasts without an attempt. A waiter attempts at least
/// once per fallback, so only a waiter that stopped (a crashed process, a future dropped where
/// no release could run) loses its place.
const PLACE_FALLBACKS: u32 = 3;

impl ClientOptions {
    /// How long a waiter's place (in a fair lock's line, among a mutex's waiters, a read-write
    /// lock's waiting writer's marker) lasts without an attempt, in ms: the longest nap between
    /// two attempts (one fallback), with room for slow replies and a missed wake-up or two, and
    /// no longer than the longest lease.
    pub(crate) fn place_ms(&self) -> u64 {
        let place = self
            .wake_fallback
            .saturating_mul(PLACE_FALLBACKS)
            .saturating_add(self.response_timeout)
            .min(MAX_LEASE);
        millis(place)
    }

    /// How long a lock name's last fence is kept beyond a lease, in ms.
    pub(crate) fn fence_memory_ms(&self) -> u64 {
        millis(self.fence_memory)
    }

    /// How long a release's offer to the next waiter lasts, in ms.
    pub(crate) fn handoff_window_ms(&self) -> u64 {
        millis(self.handoff_window)
    }
}

/// The default [`ClientOptions::handoff_window`]: how long a release's offer of the lock to the
/// next waiter lasts unless the client chooses another.
///
/// # Examples
///
/// ```
/// assert_eq!(fencelock::DEFAULT_HANDOFF_WINDOW.as_millis(), 200);
/// ```
pub const DEFAULT_HANDOFF_WINDOW: Duration = Duration::from_millis(200);

/// The default [`ClientOptions::record_waits`]: a wait is recorded once it has lasted this long,
/// as PostgreSQL's `deadlock_timeout` does.
///
/// # Examples
///
/// ```
/// assert_eq!(fencelock::DEFAULT_RECORD_WAITS.as_secs(), 1);
/// ```
pub const DEFAULT_RECORD_WAITS: Duration = Duration::from_secs(1);

/// The least interval of a wait's record or check.
pub(crate) const MIN_WAIT_CHECK: Duration = Duration::from_millis(10);

/// The longest [`ClientOptions::handoff_window`].
const MAX_HANDOFF_WINDOW: Duration = Duration::from_secs(60);

/// The most bytes of a holder label.
const MAX_LABEL: usize = 128;

/// `<host>/<pid>`: see [`ClientOptions::process_label`].
fn process_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok());
    label_of(host.as_deref().unwrap_or(""), std::process::id())
}

/// The label of process `pid` on `host`: no `:`, at most [`MAX_LABEL`] bytes, the host name
/// cut (at a character's boundary) rather than the pid.
fn label_of(host: &str, pid: u32) -> String {
    let host = host.trim().replace(':', "_");
    let host = if host.is_empty() {
        "unknown-host"
    } else {
        host.as_str()
    };
    let pid = format!("/{pid}");
    let mut end = host.len().min(MAX_LABEL - pid.len());
    while !host.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{pid}", &host[..end])
}

/// Whole milliseconds of `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            prefix: "fencelock:".to_owned(),
            default_lease: Lease::default(),
            wake_fallback: Duration::from_secs(1),
            handoff_window: DEFAULT_HANDOFF_WINDOW,
            record_waits: Some(DEFAULT_RECORD_WAITS),
            inherited_holds: Vec::new(),
            outage_limit: Duration::from_secs(30),
            response_timeout: Duration::from_secs(1),
            connection_timeout: Duration::from_secs(1),
            fence_memory: Duration::from_secs(60),
            holder_label: process_label(),
            renew_batch: 512,
            drift: Drift::default(),
            node_timeout: Duration::from_millis(250),
            shutdown_timeout: Duration::from_secs(5),
            replica_ack: None,
            tls: Tls::default(),
        }
    }
}

impl ClientOptions {
    /// The namespace every key and channel starts with. Default: `fencelock:`.
    ///
    /// Use one prefix per application sharing a Redis; grant an ACL user `~<prefix>*`.
    /// It must not contain `{` or `}` (checked when the client is built).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks that do not choose one. Default: `Lease::Renewed(30 s)`.
    pub fn default_lease(mut self, lease: Lease) -> Self {
        self.default_lease = lease;
        self
    }

    /// The longest a waiter sleeps between attempts when no release notification arrives (it
    /// never sleeps past the holder's remaining lease either). Notifications normally wake
    /// waiters at once; this bounds the delay when one is lost, for example while the
    /// subscription reconnects. Each sleep is jittered down to half of it. It is also how long
    /// the subscription connection may stay quiet while anyone waits before it is pinged, and
    /// the longest pause of a waiter retrying an unreachable Redis. Default: 1 s.
    pub fn wake_fallback(mut self, interval: Duration) -> Self {
        self.wake_fallback = interval;
        self
    }

    /// How long a release's offer of the lock to the next waiter lasts before the lock is free
    /// again, when that waiter does not claim it. Default: 200 ms; from 1 ms to 60 s.
    ///
    /// A [`Mutex`](crate::Mutex)'s or a [`FairMutex`](crate::FairMutex)'s release hands the
    /// lock to its next waiter by an offer: the waiter's value, written with this expiry
    /// instead of the waiter's lease. The waiter claims it with one request, which makes the
    /// expiry its lease; a waiter that cannot answer (its process stopped or frozen, its
    /// connection half-open, its notification lost) loses the offer when the window ends, and
    /// the waiter behind it, told of the offer, takes the lock then. So a waiter that cannot
    /// claim costs the others at most the window, never its lease. Default:
    /// [`DEFAULT_HANDOFF_WINDOW`]. A longer window lets a
    /// slow waiter (a long pause of its runtime) keep its turn; a shorter one frees the lock
    /// sooner behind one that died. The releasing client's window applies.
    pub fn handoff_window(mut self, window: Duration) -> Self {
        self.handoff_window = window;
        self
    }

    /// Records every wait of this client's locks that has lasted `after`, and again every
    /// `after` while it lasts, as PostgreSQL's `deadlock_timeout` does (1 s by default, as
    /// PostgreSQL's): the wait-for graph ([`Client::wait_graph`](crate::Client::wait_graph),
    /// `fencelock status --graph`) then shows who waits for whom and the deadlocks among them,
    /// whichever program made the wait. `None` turns it off; a lock's own
    /// [`record_wait`](LockOptions::record_wait) or
    /// [`deadlock_check`](LockOptions::deadlock_check) takes precedence. Default:
    /// [`DEFAULT_RECORD_WAITS`]; at least 10 ms.
    ///
    /// A lock taken at once costs nothing; a waiter, one `SET` of its record per `after` once
    /// it has waited that long (the record ends by itself a little after the wait). On RedLock
    /// (several masters) waits are not recorded.
    pub fn record_waits(mut self, after: Option<Duration>) -> Self {
        self.record_waits = after;
        self
    }

    /// Locks held on behalf of the tasks of this client by another process, one entry per hold:
    /// the `fencelock run` that started this process holds its lock while this process runs,
    /// and says so in `FENCELOCK_HOLDS`. Every wait this client records names them as held by
    /// the waiting task too, so that the wait-for graph and the deadlock check see a cycle
    /// that runs through a parent process (a command that, inside the lock `A`, waits for `B`,
    /// while another that holds `B` waits for `A`). Default: none.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::{ClientOptions, LockKind};
    ///
    /// let options = ClientOptions::default().inherited_holds([(LockKind::Mutex, "A".to_owned())]);
    /// # let _ = options;
    /// ```
    pub fn inherited_holds(mut self, holds: impl IntoIterator<Item = (LockKind, String)>) -> Self {
        self.inherited_holds = holds.into_iter().collect();
        self
    }

    /// How long a waiter without a wait limit (`lock()`, `acquire()`, `read()`, `write()`
    /// without a `wait_timeout`) goes on retrying while Redis cannot be reached, from the first
    /// failure of the outage, before it returns the last error. A waiter with a wait limit
    /// retries until its limit instead. Zero returns the first error; `Duration::MAX` retries
    /// for as long as it takes. Default: 30 s.
    ///
    /// Which errors count as Redis being unreachable:
    /// [`Error::is_unavailable`](crate::Error::is_unavailable). `try_lock` and the other
    /// `try_*` calls never wait through an outage.
    pub fn outage_limit(mut self, limit: Duration) -> Self {
        self.outage_limit = limit;
        self
    }

    /// How long to wait for any reply from Redis before treating the call as failed. The
    /// subscription connection that announces releases is replaced when a reply on it takes
    /// longer. Default: 1 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection to Redis to open. Default: 1 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long the last fencing token of a name is kept after its lease, to order tokens when
    /// the server's clock steps back by less than that. Default: 60 s.
    pub fn fence_memory(mut self, memory: Duration) -> Self {
        self.fence_memory = memory;
        self
    }

    /// A label stored with every lock this client holds and every place it waits in, shown to
    /// operators inspecting locks, the wait-for graph and its cycles. Default: the process's
    /// [`process_label`](ClientOptions::process_label), `<host name>/<pid>`, so that a
    /// holder or waiter found in Redis names the process to look at; an empty label stores
    /// nothing. It must not contain `:`, and has at most 128 bytes.
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.holder_label = label.into();
        self
    }

    /// The label this process's clients store unless their options set another:
    /// `<host name>/<pid>`, the host name as the kernel knows it (or from `HOSTNAME`,
    /// `COMPUTERNAME`, else `unknown-host`), with every `:` made `_` and cut so that the
    /// label fits 128 bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::ClientOptions;
    ///
    /// let label = ClientOptions::process_label();
    /// assert!(label.ends_with(&format!("/{}", std::process::id())));
    /// assert!(!label.contains(':'));
    /// ```
    pub fn process_label() -> String {
        process_label()
    }

    /// The most leases renewed by one script call. Default: 512.
    pub fn renew_batch(mut self, leases: usize) -> Self {
        self.renew_batch = leases;
        self
    }

    /// The margin taken off every lease before counting on it: `factor` × lease + `extra`.
    /// Default: 0.01 × lease + 2 ms, the Redlock algorithm's suggestion.
    ///
    /// A guard counts its lock as valid until the moment its request was sent plus the lease
    /// minus this margin. Raise it when the clocks of Redis servers may run faster than the
    /// client's, or replies are slow. `factor` must be in `[0, 0.5)`.
    pub fn clock_drift(mut self, factor: f64, extra: Duration) -> Self {
        self.drift = Drift { factor, extra };
        self
    }

    /// How long each node of a RedLock client ([`Deployment::redlock`]) is given to answer
    /// one request before its vote is counted as lost. Default: 250 ms.
    ///
    /// Keep it well below the lease: a request waits for the slowest node that answers within
    /// this time, so it bounds how long a node that is paused or cut off delays an acquire.
    /// Single-node clients use [`response_timeout`](ClientOptions::response_timeout) instead.
    ///
    /// [`Deployment::redlock`]: crate::Deployment::redlock
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The longest [`Client::shutdown`] waits for Redis to answer the releases it sends
    /// and those of dropped guards still under way. Default: 5 s.
    ///
    /// A release that is not answered by then is given up: its lock ends with its lease, and
    /// the shutdown reports [`Error::ShutdownIncomplete`].
    ///
    /// [`Client::shutdown`]: crate::Client::shutdown
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// After every grant, waits until at least `replicas` replicas of the master acknowledged
    /// it (Redis `WAIT`), for at most `timeout`; when fewer did, releases the grant and fails
    /// with [`Error::NotReplicated`]. Applies to every primitive, to `try_lock` and `lock`
    /// alike. Default: off (a grant is returned as soon as the master made it).
    ///
    /// This narrows, but does not close, the window in which a failover loses a lock: see
    /// the [guarantees](crate::SentinelOptions#what-waiting-for-replicas-guarantees-and-what-it-does-not).
    /// While replicas lag, the server holds the client's shared connection for up to
    /// `timeout` on every grant, delaying the client's other commands (renewals included):
    /// keep it short. It must be shorter than the
    /// [`response_timeout`](ClientOptions::response_timeout), and `replicas` at least 1
    /// (checked when the client is built).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::ClientOptions;
    ///
    /// let options = ClientOptions::default().wait_for_replicas(1, Duration::from_millis(200));
    /// # let _ = options;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.replica_ack = Some(ReplicaAck { replicas, timeout });
        self
    }

    /// Trusts the certificate authority in `pem` (PEM) for `rediss://` servers, instead of
    /// the system's trusted roots. Default: the system's roots (and the Mozilla roots built
    /// in, where the system has none).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fencelock::Error> {
    /// # let server = fencelock_testkit::RedisServer::start_with(
    /// #     fencelock_testkit::ServerOptions::default().tls());
    /// # let ca_pem = server.tls_ca_pem();
    /// # let url = server.tls_url();
    /// use fencelock::{Client, ClientOptions};
    ///
    /// // url: "rediss://127.0.0.1:6380/"
    /// let options = ClientOptions::default().tls_root_certificate(ca_pem);
    /// let client = Client::connect_with_options(url.as_str(), options).await?;
    /// client.mutex("payouts")?.lock().await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// Presents the client certificate `cert_pem` with its private key `key_pem` (both PEM)
    /// to `rediss://` servers that ask for one (`tls-auth-clients yes`). Default: none.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use fencelock::ClientOptions;
    ///
    /// let cert = std::fs::read("/etc/fencelock/client.crt")?;
    /// let key = std::fs::read("/etc/fencelock/client.key")?;
    /// let options = ClientOptions::default().tls_client_certificate(cert, key);
    /// # let _ = options;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// A client for one server of the deployment, with the TLS certificates given.
    pub(crate) fn open(&self, target: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certificates) = self.tls.certificates() {
            return redis::Client::build_with_tls(target, certificates);
        }
        redis::Client::open(target)
    }

    /// Checks every option as the `connect` functions do before they open a connection, so
    /// that a configuration can be refused where it is read rather than where it is used.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first option out of range: a prefix with braces or
    /// over 256 bytes, a lease outside [`MIN_LEASE`]`..=`[`MAX_LEASE`], a zero or over-long
    /// timeout, a drift factor outside `[0, 0.5)`, a holder label with `:` or over 128
    /// bytes, a zero renewal batch, a replica wait that cannot finish before the response
    /// timeout, or TLS certificates or a key that do not read as PEM (or hold no
    /// certificate), or any certificate at all when fencelock was built without its `tls`
    /// feature.
    ///
    /// # Examples
    ///
    /// ```
    /// use fencelock::ClientOptions;
    ///
    /// assert!(ClientOptions::default().prefix("billing:").validate().is_ok());
    /// assert!(ClientOptions::default().prefix("{billing}:").validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        self.default_lease.millis()?;
        positive("wake_fallback", self.wake_fallback)?;
        if self.handoff_window < Duration::from_millis(1)
            || self.handoff_window > MAX_HANDOFF_WINDOW
        {
            return Err(Error::InvalidOption {
                option: "handoff_window",
                reason: format!(
                    "{:?} is outside 1ms..={MAX_HANDOFF_WINDOW:?}",
                    self.handoff_window
                ),
            });
        }
        if self
            .record_waits
            .is_some_and(|after| after < MIN_WAIT_CHECK)
        {
            return Err(Error::InvalidOption {
                option: "record_waits",
                reason: format!("at least {MIN_WAIT_CHECK:?} between records"),
            });
        }
        positive("response_timeout", self.response_timeout)?;
        positive("connection_timeout", self.connection_timeout)?;
        positive("node_timeout", self.node_timeout)?;
        positive("shutdown_timeout", self.shutdown_timeout)?;
        let Drift { factor, extra } = self.drift;
        if !(0.0..0.5).contains(&factor) || extra > MAX_LEASE {
            return Err(Error::InvalidOption {
                option: "clock_drift",
                reason: format!(
                    "the factor must be in [0, 0.5) and the extra at most {MAX_LEASE:?}, got {factor} and {extra:?}"
                ),
            });
        }
        if self.holder_label.contains(':') || self.holder_label.len() > MAX_LABEL {
            return Err(Error::InvalidOption {
                option: "holder_label",
                reason: "a label has at most 128 bytes and no `:`".into(),
            });
        }
        if self.renew_batch == 0 {
            return Err(Error::InvalidOption {
                option: "renew_batch",
                reason: "at least one lease per batch".into(),
            });
        }
        if let Some(ack) = self.replica_ack {
            validate_replica_ack(ack, self.response_timeout)?;
        }
        if self.fence_memory > MAX_LEASE {
            return Err(Error::InvalidOption {
                option: "fence_memory",
                reason: format!("at most {MAX_LEASE:?}"),
            });
        }
        self.tls.validate()
    }
}

fn validate_replica_ack(ack: ReplicaAck, response_timeout: Duration) -> Result<()> {
    let reason = if ack.replicas == 0 {
        "wait for at least one replica".to_owned()
    } else if ack.timeout < Duration::from_millis(1) || ack.timeout >= response_timeout {
        format!(
            "the timeout {:?} must be at least 1ms and shorter than the response timeout \
             {response_timeout:?}, or the client gives up on WAIT before the server answers",
            ack.timeout
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidOption {
        option: "wait_for_replicas",
        reason,
    })
}

fn positive(option: &'static str, value: Duration) -> Result<()> {
    if value.is_zero() || value > MAX_LEASE {
        return Err(Error::InvalidOption {
            option,
            reason: format!("{value:?} must be above zero and at most {MAX_LEASE:?}"),
        });
    }
    Ok(())
}

/// How long an acquire waits for a lock held by others: the three ways to take any lock,
/// for code that chooses among them at run time ([`Handle::acquire`](crate::Handle::acquire)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fencelock::Error> {
/// # let server = fencelock_testkit::RedisServer::start();
/// # let client = fencelock::Client::connect(server.url().as_str()).await?;
/// use std::time::Duration;
/// use fencelock::Wait;
///
/// let no_wait = std::env::args().any(|arg| arg == "--no-wait");
/// let wait = if no_wait { Wait::No } else { Wait::AtMost(Duration::from_secs(5)) };
/// let guard = client.mutex("deploy")?.acquire(wait).await?;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Until granted, or until the handle's [`wait_timeout`](LockOptions::wait_timeout) when
    /// it has one: [`lock`](crate::Handle::lock).
    #[default]
    AsConfigured,
    /// At most this long: [`lock_timeout`](crate::Handle::lock_timeout).
    AtMost(Duration),
    /// Not at all: one attempt, [`try_lock`](crate::Handle::try_lock).
    No,
}

/// Settings of one lock, whatever its kind: the lease of each grant and how long an acquire
/// waits. Every constructor of a lock has a `_with_options` form that takes them
/// ([`Client::mutex_with_options`](crate::Client::mutex_with_options) and the like).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use fencelock::{Lease, LockOptions};
///
/// # async fn demo(client: fencelock::Client) -> Result<(), fencelock::Error> {
/// let options = LockOptions::default()
///     .lease(Lease::Fixed(Duration::from_secs(5)))
///     .wait_timeout(Duration::from_secs(2));
/// let mutex = client.mutex_with_options("report", options)?;
/// # let _ = mutex;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    pub(crate) lease: Option<Lease>,
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) deadlock_check: Option<Duration>,
    pub(crate) record_wait: Option<Duration>,
}

impl LockOptions {
    /// The lease of each grant. Default: the client's
    /// [`default_lease`](ClientOptions::default_lease).
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long a waiting acquire ([`Mutex::lock`](crate::Mutex::lock),
    /// [`Semaphore::acquire`](crate::Semaphore::acquire), [`RwLock::read`](crate::RwLock::read),
    /// [`Election::campaign`](crate::Election::campaign), ...) waits before it gives up with
    /// [`Error::Timeout`]; the `*_timeout` forms take their own limit. Default: no limit.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// How often a waiter of a [`ForeignMutex`](crate::ForeignMutex) tries again where its
    /// layout announces no release to it (every layout but Redisson's), jittered down to half
    /// of it; never later than the holder's expiry. Locks of fencelock's own layout are woken
    /// by their releases and ignore it. Default: 100 ms, redis-py's own pause between tries.
    /// Zero is refused when the lock is made.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = Some(interval);
        self
    }

    /// Checks for a deadlock, as PostgreSQL's `deadlock_timeout` does: a waiter that has waited
    /// `after` (1 s is PostgreSQL's default) records its wait in Redis and reads the waits
    /// every other such waiter recorded; when its wait closes a cycle (it holds what a task
    /// waits for, which holds what ... it waits for), the waiter whose wait began last gives
    /// up with [`Error::Deadlock`](crate::Error::Deadlock), so that the others go on instead
    /// of all waiting out their timeouts. It checks again every `after` while it waits.
    ///
    /// Only waits of locks with this option take part: a cycle through a task that waits
    /// without it is not seen. A lock taken at once costs nothing more; a waiter, one check
    /// (a few round trips) per `after`. Default: off. At least 10 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::LockOptions;
    ///
    /// let options = LockOptions::default().deadlock_check(Duration::from_secs(1));
    /// # let _ = options;
    /// ```
    pub fn deadlock_check(mut self, after: Duration) -> Self {
        self.deadlock_check = Some(after);
        self
    }

    /// Records a wait that has lasted `after` in Redis, as
    /// [`deadlock_check`](LockOptions::deadlock_check) does, so that
    /// [`Client::wait_graph`](crate::Client::wait_graph) and `fencelock status --graph` show
    /// the waiter, what it waits for and the cycles it is part of, but never gives up for a
    /// deadlock. A waiter, one record per `after`; a lock taken at once, nothing. Default: the
    /// client's [`record_waits`](ClientOptions::record_waits) (1 s). At least 10 ms;
    /// `deadlock_check` takes precedence.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use fencelock::LockOptions;
    ///
    /// let options = LockOptions::default().record_wait(Duration::from_secs(1));
    /// # let _ = options;
    /// ```
    pub fn record_wait(mut self, after: Duration) -> Self {
        self.record_wait = Some(after);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_labels_hold_no_colon_and_fit_the_label_limit() {
        assert_eq!(label_of("build-7\n", 42), "build-7/42");
        assert_eq!(label_of("fe80::1", 42), "fe80__1/42");
        assert_eq!(label_of("  ", 42), "unknown-host/42");
        let long = label_of(&"é".repeat(100), u32::MAX);
        assert!(
            long.len() <= MAX_LABEL && long.ends_with("/4294967295"),
            "{long}"
        );
        let label = ClientOptions::process_label();
        assert!(ClientOptions::default()
            .holder_label(label)
            .validate()
            .is_ok());
        assert_eq!(
            ClientOptions::default().holder_label,
            ClientOptions::process_label()
        );
    }

    #[test]
    fn leases_round_up_to_milliseconds_and_are_bounded() {
        assert_eq!(lease_millis(Duration::from_micros(200_500)).ok(), Some(201));
        assert!(lease_millis(Duration::ZERO).is_err());
        assert!(lease_millis(MIN_LEASE - Duration::from_millis(1)).is_err());
        assert!(lease_millis(MIN_LEASE).is_ok());
        assert!(lease_millis(MAX_LEASE).is_ok());
        assert!(lease_millis(MAX_LEASE + Duration::from_millis(1)).is_err());
        assert!(lease_millis(Duration::MAX).is_err());
    }

    #[test]
    fn drift_is_one_percent_plus_two_milliseconds_by_default() {
        assert_eq!(
            Drift::default().of(Duration::from_secs(1)),
            Duration::from_millis(12)
        );
        let wide = ClientOptions::default().clock_drift(0.1, Duration::from_millis(5));
        assert_eq!(
            wide.drift.of(Duration::from_secs(1)),
            Duration::from_millis(105)
        );
        assert!(wide.validate().is_ok());
        for factor in [-0.1, 0.5, f64::NAN, f64::INFINITY] {
            assert!(ClientOptions::default()
                .clock_drift(factor, Duration::ZERO)
                .validate()
                .is_err());
        }
        assert!(ClientOptions::default()
            .node_timeout(Duration::ZERO)
            .validate()
            .is_err());
    }

    #[test]
    fn options_are_checked() {
        assert!(ClientOptions::default().validate().is_ok());
        assert!(ClientOptions::default().prefix("{x}").validate().is_err());
        assert!(ClientOptions::default()
            .holder_label("a:b")
            .validate()
            .is_err());
        assert!(ClientOptions::default()
            .wake_fallback(Duration::ZERO)
            .validate()
            .is_err());
        assert!(ClientOptions::default()
            .default_lease(Lease::Fixed(Duration::ZERO))
            .validate()
            .is_err());
    }

    #[test]
    fn certificates_that_do_not_read_are_a_bad_option() {
        let refused_as = |options: ClientOptions| match options.validate() {
            Err(Error::InvalidOption { option, .. }) => option,
            other => panic!("{other:?}"),
        };
        let not_base64 = "-----BEGIN CERTIFICATE-----\n\u{ef}\n-----END CERTIFICATE-----\n";
        let not_der = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        for root in [not_base64, not_der, "", "no PEM here"] {
            let options = ClientOptions::default().tls_root_certificate(root);
            assert_eq!(refused_as(options), "tls_root_certificate", "{root:?}");
        }
        // The smallest input the fuzz target `connection_url` found: no certificate, no key.
        let options = ClientOptions::default().tls_client_certificate(";", "");
        assert_eq!(refused_as(options), "tls_client_certificate");
    }

    #[test]
    fn places_outlive_a_few_attempts_and_stay_bounded() {
        let ms = |n| Duration::from_millis(n);
        let place = |fallback, response| {
            ClientOptions::default()
                .wake_fallback(fallback)
                .response_timeout(response)
                .place_ms()
        };
        assert_eq!(place(ms(1000), ms(1000)), 4000);
        assert_eq!(place(ms(100), ms(250)), 550);
        let huge = place(MAX_LEASE, MAX_LEASE);
        assert_eq!(u128::from(huge), MAX_LEASE.as_millis());
    }

    #[test]
    fn replica_acknowledgement_needs_a_replica_and_a_timeout_below_the_response_timeout() {
        let options = ClientOptions::default().response_timeout(Duration::from_secs(1));
        let wait = |replicas, ms| {
            options
                .clone()
                .wait_for_replicas(replicas, Duration::from_millis(ms))
        };
        assert!(wait(1, 200).validate().is_ok());
        assert!(wait(0, 200).validate().is_err());
        assert!(wait(1, 0).validate().is_err());
        assert!(wait(1, 1000).validate().is_err());
    }
}
