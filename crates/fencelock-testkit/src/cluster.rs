//! A Redis Cluster of real processes: three masters, each with one replica.

use std::thread;
use std::time::{Duration, Instant};

use crate::{RedisServer, ServerOptions};

const MASTERS: usize = 3;
const REPLICAS_PER_MASTER: usize = 1;
/// How long a node may go unanswered before the others suspect it. Long enough that a loaded
/// test machine does not make the cluster fail over by itself.
const NODE_TIMEOUT_MS: u64 = 3_000;
/// How long creating the cluster, a failover or a migration may take.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How many keys one `MIGRATE` moves.
const MIGRATE_BATCH: usize = 100;
const POLL: Duration = Duration::from_millis(50);

/// A Redis Cluster of six real `redis-server` processes on loopback ports: three masters
/// sharing the 16384 slots, and one replica of each.
///
/// [`start`](Self::start) returns once every node agrees on the slot owners, the cluster state
/// is `ok` everywhere and every replica is linked to its master. Nodes keep their identities:
/// [`nodes`](Self::nodes) lists them in start order, and roles are asked of the cluster
/// (`CLUSTER NODES`) whenever a method needs them, so they stay right after failovers and
/// slot migrations.
///
/// ```no_run
/// use fencelock_testkit::RedisCluster;
///
/// let cluster = RedisCluster::start();
/// let slot = RedisCluster::slot_of("{lottery}:mutex");
/// let before = cluster.master_of(slot).port();
/// cluster.failover(slot);
/// assert_ne!(cluster.master_of(slot).port(), before);
/// ```
#[derive(Debug)]
#[must_use = "dropping a RedisCluster kills its processes"]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`, as far as the kit needs it.
#[derive(Clone, Debug)]
struct NodeView {
    id: String,
    port: u16,
    is_master: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    /// Slot ranges served, inclusive; migration markers (`[slot->-id]`) left out.
    slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts three masters and three replicas and joins them into one cluster with
    /// `redis-cli --cluster create`.
    ///
    /// # Panics
    ///
    /// If a process does not start or the cluster does not settle within 30 s (the message
    /// says what was missing).
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a cluster whose nodes are configured by `options` besides the cluster settings:
    /// for example an [`acl_user`](ServerOptions::acl_user), defined on every node. The
    /// cluster is created as the `default` user, so `options` must leave it a password-free
    /// user that may run `CLUSTER` commands.
    ///
    /// # Panics
    ///
    /// As for [`start`](Self::start).
    pub fn start_with(options: ServerOptions) -> Self {
        let count = MASTERS * (1 + REPLICAS_PER_MASTER);
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                RedisServer::start_with(options.clone().args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &NODE_TIMEOUT_MS.to_string(),
                ]))
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addresses.iter().map(String::as_str));
        let replicas = REPLICAS_PER_MASTER.to_string();
        create.extend(["--cluster-replicas", replicas.as_str(), "--cluster-yes"]);
        let output = nodes[0].cli(&create);
        assert!(
            output.contains("[OK] All 16384 slots covered"),
            "redis-cli --cluster create failed:\n{output}"
        );
        let cluster = RedisCluster { nodes };
        cluster.await_settled();
        cluster
    }

    /// Every node, in start order, whatever its role now.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:PORT/` of every node: what a cluster client is given to discover
    /// the cluster.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The hash slot of `key` (CRC16 of its hash tag, or of the whole key, modulo 16384).
    pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
        let key = key.as_ref();
        let tagged = key
            .iter()
            .position(|&b| b == b'{')
            .and_then(|open| {
                let rest = &key[open + 1..];
                let close = rest.iter().position(|&b| b == b'}')?;
                (close > 0).then(|| &rest[..close])
            })
            .unwrap_or(key);
        crc16_xmodem(tagged) % 16384
    }

    /// The master that serves `slot` now, as the first live node sees it.
    ///
    /// # Panics
    ///
    /// If no node serves the slot.
    pub fn master_of(&self, slot: u16) -> &RedisServer {
        let master = self.owner_view(slot);
        self.node_on(master.port)
    }

    /// The replica of the master that serves `slot` now.
    ///
    /// # Panics
    ///
    /// If that master has no replica.
    pub fn replica_of(&self, slot: u16) -> &RedisServer {
        let master = self.owner_view(slot);
        let views = self.views();
        let replica = views
            .iter()
            .find(|v| v.master_id.as_deref() == Some(master.id.as_str()))
            .unwrap_or_else(|| panic!("master on port {} has no replica", master.port));
        self.node_on(replica.port)
    }

    /// A master that does not serve `slot`, for a migration target.
    ///
    /// # Panics
    ///
    /// If every master serves it (impossible with three masters).
    pub fn other_master(&self, slot: u16) -> &RedisServer {
        let owner = self.owner_view(slot);
        let views = self.views();
        let other = views
            .iter()
            .find(|v| v.is_master && v.id != owner.id && !v.slots.is_empty())
            .expect("another master");
        self.node_on(other.port)
    }

    /// Promotes the replica of `slot`'s master with `CLUSTER FAILOVER` (a manual failover:
    /// the replica catches up with its master before taking over, so nothing is lost) and
    /// waits until every node names it as the slot's master. Returns the new master's port.
    ///
    /// # Panics
    ///
    /// If the failover does not complete within 30 s.
    pub fn failover(&self, slot: u16) -> u16 {
        let replica = self.replica_of(slot);
        let port = replica.port();
        let reply = replica.cli(&["CLUSTER", "FAILOVER"]);
        assert_eq!(reply, "OK", "CLUSTER FAILOVER on port {port}: {reply}");
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let agreed = self
                .nodes
                .iter()
                .all(|node| owner_port(&views_of(node), slot) == Some(port));
            if agreed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes do not all name port {port} as master of slot {slot}"
            );
            thread::sleep(POLL);
        }
        self.await_settled();
        port
    }

    /// Kills (SIGKILL) the master that serves `slot` and waits until its replica, promoted by
    /// the cluster itself once the node timeout passed, names itself the slot's master. Returns
    /// the new master's port. Unlike [`failover`](Self::failover), writes the replica had not
    /// received yet are lost.
    ///
    /// # Panics
    ///
    /// If the replica is not promoted within 30 s.
    pub fn kill_master(&mut self, slot: u16) -> u16 {
        let port = self.replica_of(slot).port();
        let master = self.master_of(slot).port();
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port() == master) {
            node.kill9();
        }
        let replica = self.node_on(port);
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while owner_port(&views_of(replica), slot) != Some(port) {
            assert!(
                Instant::now() < deadline,
                "the replica on port {port} was not promoted for slot {slot}"
            );
            thread::sleep(POLL);
        }
        port
    }

    /// Moves `slot` to another master the way `redis-cli --cluster reshard` does: marks it
    /// importing on the target and migrating on the source, moves its keys with `MIGRATE`
    /// (which keeps their expiries), then assigns the slot to the target on every master.
    /// Returns the target's port.
    ///
    /// # Panics
    ///
    /// If a step fails or the nodes do not agree within 30 s.
    pub fn migrate_slot(&self, slot: u16) -> u16 {
        let migration = self.begin_migration(slot);
        self.move_keys(&migration);
        self.finish_migration(&migration);
        migration.target_port
    }

    /// The first step of [`migrate_slot`](Self::migrate_slot): the slot is importing on the
    /// target and migrating on the source, and no key has moved yet. Clients are redirected
    /// (`ASK`) for keys not on the source any more.
    ///
    /// # Panics
    ///
    /// If a node refuses the step.
    pub fn begin_migration(&self, slot: u16) -> Migration {
        let source = self.owner_view(slot);
        let target_port = self.other_master(slot).port();
        let target = self.view_on(target_port);
        let slot_arg = slot.to_string();
        expect_ok(
            self.node_on(target.port),
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source.id],
        );
        expect_ok(
            self.node_on(source.port),
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target.id],
        );
        Migration {
            slot,
            source_port: source.port,
            target_port,
            target_id: target.id,
        }
    }

    /// The second step: moves every key of the slot from the source to the target.
    ///
    /// # Panics
    ///
    /// If `MIGRATE` fails.
    pub fn move_keys(&self, migration: &Migration) {
        let source = self.node_on(migration.source_port);
        let slot = migration.slot.to_string();
        let batch = MIGRATE_BATCH.to_string();
        let port = migration.target_port.to_string();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let listed = source.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, &batch]);
            let keys: Vec<&str> = listed.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                return;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            migrate.extend(&keys);
            let reply = source.cli(&migrate);
            assert!(
                reply == "OK" || reply == "NOKEY",
                "MIGRATE of slot {slot}: {reply}"
            );
            assert!(Instant::now() < deadline, "slot {slot} keeps having keys");
        }
    }

    /// The last step: every master assigns the slot to the target, and the nodes agree.
    ///
    /// # Panics
    ///
    /// If a node refuses, or the nodes do not agree within 30 s.
    pub fn finish_migration(&self, migration: &Migration) {
        let slot = migration.slot.to_string();
        let assign = ["CLUSTER", "SETSLOT", &slot, "NODE", &migration.target_id];
        expect_ok(self.node_on(migration.target_port), &assign);
        expect_ok(self.node_on(migration.source_port), &assign);
        for view in self.views().iter().filter(|v| v.is_master) {
            if view.port != migration.target_port && view.port != migration.source_port {
                expect_ok(self.node_on(view.port), &assign);
            }
        }
        self.await_settled();
    }

    /// Waits until every node reports `cluster_state:ok` and agrees on who serves every slot,
    /// and every replica's link to its master is up.
    fn await_settled(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.unsettled() {
                None => return,
                Some(why) => assert!(
                    Instant::now() < deadline,
                    "the cluster did not settle within {SETTLE_TIMEOUT:?}: {why}"
                ),
            }
            thread::sleep(POLL);
        }
    }

    /// What keeps the cluster from being settled, if anything.
    fn unsettled(&self) -> Option<String> {
        let mut owners = None;
        for node in self.nodes.iter() {
            let info = node.cli(&["CLUSTER", "INFO"]);
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Some(format!("port {} is not ok", node.port()));
            }
            let views = views_of(node);
            if views.len() != self.nodes.len() {
                return Some(format!("port {} knows {} nodes", node.port(), views.len()));
            }
            let orphans = views
                .iter()
                .filter(|m| m.is_master && !m.slots.is_empty())
                .filter(|m| !views.iter().any(|r| r.master_id.as_ref() == Some(&m.id)))
                .count();
            if orphans > 0 {
                return Some(format!(
                    "port {} sees {orphans} masters without a replica",
                    node.port()
                ));
            }
            let mut served: Vec<(u16, u16, u16)> = views
                .iter()
                .filter(|v| v.is_master)
                .flat_map(|v| v.slots.iter().map(|&(a, b)| (a, b, v.port)))
                .collect();
            served.sort_unstable();
            match &owners {
                None => owners = Some(served),
                Some(first) if *first != served => {
                    return Some(format!("port {} disagrees on slot owners", node.port()));
                }
                Some(_) => {}
            }
            let replication = node.cli(&["INFO", "replication"]);
            let is_replica = replication.lines().any(|l| l.trim() == "role:slave");
            if is_replica
                && !replication
                    .lines()
                    .any(|l| l.trim() == "master_link_status:up")
            {
                return Some(format!("replica on port {} is not linked", node.port()));
            }
        }
        None
    }

    fn views(&self) -> Vec<NodeView> {
        views_of(&self.nodes[0])
    }

    fn owner_view(&self, slot: u16) -> NodeView {
        self.views()
            .into_iter()
            .find(|v| v.is_master && serves(v, slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    fn view_on(&self, port: u16) -> NodeView {
        self.views()
            .into_iter()
            .find(|v| v.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    fn node_on(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }
}

/// A slot migration between [`RedisCluster::begin_migration`] and
/// [`RedisCluster::finish_migration`].
#[derive(Clone, Debug)]
pub struct Migration {
    slot: u16,
    source_port: u16,
    target_port: u16,
    target_id: String,
}

impl Migration {
    /// The port of the master the slot moves from.
    pub fn source_port(&self) -> u16 {
        self.source_port
    }

    /// The port of the master the slot moves to.
    pub fn target_port(&self) -> u16 {
        self.target_port
    }
}

fn expect_ok(node: &RedisServer, args: &[&str]) {
    let reply = node.cli(args);
    assert_eq!(reply, "OK", "{args:?} on port {}: {reply}", node.port());
}

fn serves(view: &NodeView, slot: u16) -> bool {
    view.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
}

fn owner_port(views: &[NodeView], slot: u16) -> Option<u16> {
    views
        .iter()
        .find(|v| v.is_master && serves(v, slot))
        .map(|v| v.port)
}

/// `CLUSTER NODES` as `node` sees it.
fn views_of(node: &RedisServer) -> Vec<NodeView> {
    node.cli(&["CLUSTER", "NODES"])
        .lines()
        .filter_map(parse_node_line)
        .collect()
}

/// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...`
fn parse_node_line(line: &str) -> Option<NodeView> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (id, address, flags, master) = (
        fields.first()?,
        fields.get(1)?,
        fields.get(2)?,
        fields.get(3)?,
    );
    let port = address
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    let slots = fields
        .iter()
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|one| (one, one)),
        })
        .collect();
    Some(NodeView {
        id: (*id).to_owned(),
        port,
        is_master: flags.split(',').any(|f| f == "master"),
        master_id: (*master != "-").then(|| (*master).to_owned()),
        slots,
    })
}

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Known values from the Redis Cluster specification's examples.
        assert_eq!(RedisCluster::slot_of("foo"), 12182);
        assert_eq!(
            RedisCluster::slot_of("{user1000}.following"),
            RedisCluster::slot_of("user1000")
        );
        assert_eq!(
            RedisCluster::slot_of("foo{}{bar}"),
            RedisCluster::slot_of("foo{}{bar}")
        );
        assert_ne!(
            RedisCluster::slot_of("foo{}{bar}"),
            RedisCluster::slot_of("bar")
        );
        assert_eq!(
            RedisCluster::slot_of("foo{{bar}}zap"),
            RedisCluster::slot_of("{bar")
        );
    }

    #[test]
    fn node_lines_are_parsed_with_their_slots() {
        let line = "07c3 127.0.0.1:30004@31004 myself,master - 0 1426238317239 4 connected 0-10 12 [13->-e7d1]";
        let view = parse_node_line(line).expect("parsed");
        assert_eq!(view.port, 30004);
        assert!(view.is_master);
        assert_eq!(view.slots, vec![(0, 10), (12, 12)]);
        let replica = parse_node_line("e7d1 127.0.0.1:30002@31002 slave 07c3 0 1 1 connected")
            .expect("parsed");
        assert_eq!(replica.master_id.as_deref(), Some("07c3"));
    }
}
