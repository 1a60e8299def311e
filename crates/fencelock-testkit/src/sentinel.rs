//! A Redis Sentinel deployment of real processes: a master, one replica and three sentinels.

use std::thread;
use std::time::{Duration, Instant};

use crate::options::SentinelMonitor;
use crate::{RedisServer, ServerOptions};

/// How many sentinels watch the master; a failover needs [`QUORUM`] of them to agree.
const SENTINELS: usize = 3;
const QUORUM: u32 = 2;
/// How long a node may go unanswered before a sentinel calls it down.
const DOWN_AFTER_MS: u64 = 500;
/// Bounds one failover attempt; kept small so a stalled election is retried quickly.
const FAILOVER_TIMEOUT_MS: u64 = 2_000;
/// How long the sentinels get to discover the replica and each other (hello messages go out
/// every 2 s).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a failover gets, from the request (or the master's death) to a new master that
/// answers as one.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(20);
const REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);

/// A master, one replica of it and three sentinels monitoring them (quorum 2), all real
/// `redis-server` processes on loopback ports.
///
/// [`start`](Self::start) returns once every sentinel knows the master, the replica and the
/// two other sentinels, so a failover can be asked for at once. Sentinels call a node down
/// after 500 ms without an answer, and one failover attempt is bounded by 2 s. Dropping the group
/// stops the sentinels first, then the data nodes.
///
/// The data nodes keep their identities across failovers: [`node`](Self::node) `0` is the
/// first master, `1` the first replica; [`current_master`](Self::current_master) asks the
/// sentinels which one is master now.
///
/// ```no_run
/// use fencelock_testkit::SentinelGroup;
///
/// let mut group = SentinelGroup::start();
/// let urls = group.sentinel_urls();
/// let before = group.master_port();
/// let after = group.failover();
/// assert_ne!(before, after);
/// # let _ = urls;
/// ```
#[derive(Debug)]
#[must_use = "dropping a SentinelGroup kills its processes"]
pub struct SentinelGroup {
    // Declared first so that they are dropped first: sentinels must not react to the data
    // nodes going away during the teardown.
    sentinels: Vec<RedisServer>,
    nodes: Vec<RedisServer>,
    service: String,
}

impl SentinelGroup {
    /// Starts a group whose data nodes have default [`ServerOptions`].
    ///
    /// # Panics
    ///
    /// If a process does not start, the replica does not sync, or the sentinels do not
    /// discover each other within 20 s (the message says what was missing).
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a group whose master and replica are configured by `data` (for example a
    /// [`password`](ServerOptions::password), which the replica and the sentinels are then
    /// given too).
    ///
    /// # Panics
    ///
    /// As for [`start`](Self::start).
    pub fn start_with(data: ServerOptions) -> Self {
        let service = "fencelock-test".to_owned();
        let master_password = data.password.clone();
        // A master demoted by a failover resyncs from the new one, with the same password.
        let master_options = match &master_password {
            Some(password) => data.clone().args(["--masterauth", password.as_str()]),
            None => data.clone(),
        };
        let master = RedisServer::start_with(master_options);
        let replica = RedisServer::start_with(data.replica_of(&master));
        replica.wait_replication_link_up(REPLICA_SYNC_TIMEOUT);
        master.wait_replicas_in_sync(1, REPLICA_SYNC_TIMEOUT);
        let sentinels = (0..SENTINELS)
            .map(|_| {
                RedisServer::start_with(ServerOptions::default().sentinel(SentinelMonitor {
                    service: service.clone(),
                    master_port: master.port(),
                    quorum: QUORUM,
                    down_after_ms: DOWN_AFTER_MS,
                    failover_timeout_ms: FAILOVER_TIMEOUT_MS,
                    master_password: master_password.clone(),
                }))
            })
            .collect();
        let group = SentinelGroup {
            sentinels,
            nodes: vec![master, replica],
            service,
        };
        group.await_discovery();
        group
    }

    /// The name the sentinels monitor the master under.
    pub fn service_name(&self) -> &str {
        &self.service
    }

    /// `redis://127.0.0.1:PORT/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Data node `index`: `0` is the first master, `1` the first replica, whatever their
    /// roles are now.
    ///
    /// # Panics
    ///
    /// If `index` is not 0 or 1.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// Data node `index`, mutably (to [`kill9`](RedisServer::kill9) or
    /// [`restart`](RedisServer::restart) it).
    ///
    /// # Panics
    ///
    /// If `index` is not 0 or 1.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// The port of the master, as the first sentinel reports it now.
    ///
    /// # Panics
    ///
    /// If the sentinel does not know the master.
    pub fn master_port(&self) -> u16 {
        master_port_by(&self.sentinels[0], &self.service).unwrap_or_else(|| {
            panic!(
                "sentinel on port {} does not know master {:?}",
                self.sentinels[0].port(),
                self.service
            )
        })
    }

    /// The data node the sentinels name as master now.
    ///
    /// # Panics
    ///
    /// If the sentinel names a port that is neither data node.
    pub fn current_master(&self) -> &RedisServer {
        &self.nodes[self.index_of(self.master_port())]
    }

    /// Mutable access to the data node the sentinels name as master now.
    ///
    /// # Panics
    ///
    /// As for [`current_master`](Self::current_master).
    pub fn current_master_mut(&mut self) -> &mut RedisServer {
        let index = self.index_of(self.master_port());
        &mut self.nodes[index]
    }

    /// The data node that is not the current master.
    ///
    /// # Panics
    ///
    /// As for [`current_master`](Self::current_master).
    pub fn current_replica(&self) -> &RedisServer {
        &self.nodes[1 - self.index_of(self.master_port())]
    }

    /// Asks the sentinels for a failover (`SENTINEL FAILOVER`) and returns the new master's
    /// port once every sentinel names it and it answers `ROLE` as a master.
    ///
    /// # Panics
    ///
    /// If no failover completes within 20 s.
    pub fn failover(&self) -> u16 {
        let before = self.master_port();
        let deadline = Instant::now() + FAILOVER_DEADLINE;
        loop {
            let reply = self.sentinels[0].cli(&["SENTINEL", "FAILOVER", &self.service]);
            if reply == "OK" {
                break;
            }
            // NOGOODSLAVE or INPROG: the sentinel's view of the replica is being refreshed.
            assert!(
                Instant::now() < deadline,
                "SENTINEL FAILOVER {} kept failing: {reply}",
                self.service
            );
            thread::sleep(Duration::from_millis(200));
        }
        self.await_new_master(before, deadline)
    }

    /// Waits until every sentinel names a master other than the one on `old_port` and that
    /// node answers `ROLE` as a master; returns its port. For a master killed or paused by
    /// the test: the sentinels elect the replica by themselves.
    ///
    /// # Panics
    ///
    /// If that does not happen within 20 s.
    pub fn await_master_other_than(&self, old_port: u16) -> u16 {
        self.await_new_master(old_port, Instant::now() + FAILOVER_DEADLINE)
    }

    /// Waits until the node that is not the current master is its replica again with a live
    /// link, for tests that need a replica after a failover. A killed node must have been
    /// [restarted](RedisServer::restart) first.
    ///
    /// # Panics
    ///
    /// If the link is not up within 20 s.
    pub fn await_replica_of_current_master(&self) {
        let master = self.master_port();
        let replica = self.current_replica();
        let deadline = Instant::now() + FAILOVER_DEADLINE;
        loop {
            let info = replica.cli(&["INFO", "replication"]);
            let follows = info
                .lines()
                .any(|l| l.trim() == format!("master_port:{master}"));
            if follows && info.lines().any(|l| l.trim() == "master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node on port {} is not a synced replica of {master}:\n{info}",
                replica.port()
            );
            thread::sleep(POLL);
        }
    }

    fn await_new_master(&self, old_port: u16, deadline: Instant) -> u16 {
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| master_port_by(s, &self.service))
                .collect();
            if let Some(Some(port)) = named.first().copied() {
                let agreed = named.iter().all(|p| *p == Some(port));
                if agreed && port != old_port && self.answers_as_master(port) {
                    return port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no new master replaced port {old_port} in time; sentinels name {named:?}"
            );
            thread::sleep(POLL);
        }
    }

    fn answers_as_master(&self, port: u16) -> bool {
        let node = &self.nodes[self.index_of(port)];
        node.cli(&["ROLE"]).lines().next() == Some("master")
    }

    fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("port {port} is not a data node of this group"))
    }

    /// Waits until every sentinel sees the master up, the replica, and the other sentinels.
    fn await_discovery(&self) {
        let deadline = Instant::now() + DISCOVERY_TIMEOUT;
        for sentinel in &self.sentinels {
            loop {
                let master = fields(&sentinel.cli(&["SENTINEL", "MASTER", &self.service]));
                let ready = field(&master, "flags") == Some("master")
                    && field(&master, "num-slaves") == Some("1")
                    && field(&master, "num-other-sentinels") == Some("2");
                if ready {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel on port {} did not discover the group: {master:?}",
                    sentinel.port()
                );
                thread::sleep(POLL);
            }
        }
    }
}

/// The master's port as `sentinel` names it, if it names one.
fn master_port_by(sentinel: &RedisServer, service: &str) -> Option<u16> {
    let reply = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", service]);
    reply.lines().nth(1)?.trim().parse().ok()
}

/// `redis-cli`'s rendering of a flat key/value array: one line per element.
fn fields(reply: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .chunks(2)
        .filter_map(|pair| match pair {
            [key, value] => Some(((*key).to_owned(), (*value).to_owned())),
            _ => None,
        })
        .collect()
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}
