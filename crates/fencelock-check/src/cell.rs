//! One run: a strategy under a fault. Starts the servers (the lock's and the resource's),
//! spawns the worker processes, carries out the server side of the fault plan, resumes paused
//! workers, collects every worker's events and checks the history.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use fencelock_testkit::process::monotonic_nanos;
use fencelock_testkit::{
    FakedClock, Proxy, RedisCluster, RedisServer, SentinelGroup, ServerOptions,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::args::WorkerArgs;
use crate::config::CellConfig;
use crate::error::{CheckError, Result};
use crate::event::{nanos, Event};
use crate::fault::{Fault, FaultPlan, ServerAction, WaiterHit};
use crate::handoff::{Step, Tap, VictimWatch};
use crate::history::{analyse_lanes, Measurement};
use crate::resource::final_counters;
use crate::rng::Rng;
use crate::strategy::{Deployment, Strategy, REDLOCK_MASTERS};

/// How long workers get to start and connect before the common start time.
const STARTUP: Duration = Duration::from_millis(1500);
/// Extra time, past every bound a worker could legitimately need, before the checker kills it.
const STRAGGLER_GRACE: Duration = Duration::from_secs(10);
/// How long a worker that closed its output gets to exit.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// How often the checker looks whether a worker exited.
const REAP_POLL: Duration = Duration::from_millis(5);

/// What one run measured.
#[derive(Clone, Debug)]
pub struct CellResult {
    /// The strategy.
    pub strategy: Strategy,
    /// The fault.
    pub fault: Fault,
    /// The seed of its fault plan.
    pub seed: u64,
    /// The checked history.
    pub measurement: Measurement,
    /// Workers that ended in a way nobody asked for, with how.
    pub worker_failures: Vec<String>,
    /// How many runs of the cell it took: more than one only for a cell that must show a
    /// failure and did not show it at once (see [`run_matrix`](crate::run_matrix)).
    pub runs: usize,
}

/// Runs one cell and checks its history.
///
/// # Errors
///
/// When the fault does not apply to the strategy, a worker cannot be spawned or signalled, or
/// the resource's counter cannot be read at the end.
///
/// # Panics
///
/// When `redis-server` cannot be started (the testkit's servers panic with the server's log).
pub fn run_cell(config: &CellConfig) -> Result<CellResult> {
    if !config.fault.applies_to(config.strategy) {
        return Err(CheckError::Usage(format!(
            "fault {} does not apply to {}",
            config.fault, config.strategy
        )));
    }
    let resource = RedisServer::start();
    let name = format!("fencelock-check:{}:{}", config.strategy, config.fault);
    let mut lock_servers = LockServers::start(config.strategy, config.fault, &name)?;
    let plan = FaultPlan::draw(
        config.fault,
        config.options.workers,
        config.options.faults,
        config.options.duration,
        config.lease(),
        &mut Rng::new(config.options.seed),
    );
    let start_ns = monotonic_nanos() + nanos(STARTUP);
    let start = Instant::now() + STARTUP;
    let base = WorkerArgs {
        strategy: config.strategy,
        fault: config.fault,
        lock_urls: lock_servers.urls(),
        service: lock_servers.service(),
        resource_url: resource.url(),
        name,
        lease_ms: millis(config.lease()),
        acquire_timeout_ms: millis(config.acquire_timeout()),
        work_ms: millis(config.options.work),
        start_ns,
        end_ns: start_ns + nanos(config.options.duration),
        fault_at_ns: None,
        lanes: config.options.lanes.max(1),
    };
    // Only faults on the links need a proxy in the way: elsewhere workers talk to the servers
    // directly.
    let links = if config.fault.needs_links() {
        lock_servers.proxies(config.options.workers)?
    } else {
        Vec::new()
    };
    let _tap = if config.fault == Fault::PatternTap {
        Some(Tap::open(lock_servers.first_port())?)
    } else {
        None
    };
    let mut workers = WorkerSet::spawn(config, &base, &plan, &links)?;
    let server_faults = drive(
        config,
        start,
        &plan,
        &mut lock_servers,
        &mut workers,
        &links,
    )?;
    // A drifting clock is a fault from the start, not an action of the plan.
    let server_faults = server_faults + usize::from(config.fault.clock_rate().is_some());
    let failures = workers.finish();
    let counters = final_counters(&resource.url(), base.lanes)?;
    Ok(CellResult {
        strategy: config.strategy,
        fault: config.fault,
        seed: config.options.seed,
        measurement: analyse_lanes(&workers.histories, &counters, server_faults),
        worker_failures: failures,
        runs: 1,
    })
}

/// Carries out the run from the checker's side until every worker is done (or the hard
/// deadline passes): applies the server actions when due, cuts and heals links, resumes paused
/// workers, and records every event. Returns how many faults it injected on the servers.
fn drive(
    config: &CellConfig,
    start: Instant,
    plan: &FaultPlan,
    lock_servers: &mut LockServers,
    workers: &mut WorkerSet,
    links: &[Vec<Proxy>],
) -> Result<usize> {
    let hard_deadline = start
        + config.options.duration
        + config.acquire_timeout()
        + config.stall()
        + STRAGGLER_GRACE;
    let mut actions = plan.server_actions.iter().peekable();
    let mut server_faults = 0;
    // Workers to resume or reconnect, and when.
    let mut heals: Vec<(Instant, usize)> = Vec::new();
    let mut watch = plan
        .victim
        .map(|victim| VictimWatch::new(victim, config.options.workers, start));
    while workers.open > 0 {
        let now = Instant::now();
        if now >= hard_deadline {
            break;
        }
        for &(_, index) in heals.iter().filter(|(at, _)| *at <= now) {
            heal(workers, links, index)?;
        }
        heals.retain(|(at, _)| *at > now);
        while let Some((_, action)) = actions.next_if(|(at, _)| start + *at <= now) {
            if action.is_fault() {
                server_faults += 1;
            }
            lock_servers.apply(action)?;
            apply_to_links(action, links, lock_servers);
        }
        if let Some(step) = watch.as_mut().and_then(|w| w.step(now)) {
            server_faults += usize::from(matches!(step, Step::Hit(..)));
            take_step(step, workers, links)?;
        }
        let next_wake = heals
            .iter()
            .map(|(at, _)| *at)
            .chain(actions.peek().map(|(at, _)| start + *at))
            .chain(watch.as_ref().and_then(VictimWatch::next_wake))
            .chain([hard_deadline])
            .min()
            .unwrap_or(hard_deadline);
        let received = workers.receive(next_wake.saturating_duration_since(now));
        if let (Some(watch), Some((index, event))) = (watch.as_mut(), &received) {
            watch.saw(*index, event, Instant::now());
        }
        match received {
            Some((index, Event::Pause { .. })) => {
                heals.push((Instant::now() + config.stall(), index));
            }
            Some((index, Event::Cut { .. })) => {
                for link in links.get(index).into_iter().flatten() {
                    link.set_cut(true);
                }
                heals.push((Instant::now() + config.stall(), index));
            }
            _ => {}
        }
    }
    for (_, index) in heals {
        heal(workers, links, index)?;
    }
    for step in watch.as_mut().map(VictimWatch::pending).unwrap_or_default() {
        take_step(step, workers, links)?;
    }
    Ok(server_faults)
}

/// What a server action does to the workers' links: a promotion sends their new connections to
/// the new master and closes their command connections, so that they reconnect there while
/// their pub/sub connections stay on the demoted node.
fn apply_to_links(action: &ServerAction, links: &[Vec<Proxy>], lock_servers: &LockServers) {
    if action != &ServerAction::PromoteReplica {
        return;
    }
    for proxy in links.iter().flatten() {
        if let Some(master) = lock_servers.master_addr() {
            proxy.set_upstream(master);
        }
        proxy.close_connection(COMMAND_CONNECTION);
    }
}

/// The number, in a worker's proxy, of its client's command connection: a fencelock client
/// opens it first, while it is made.
const COMMAND_CONNECTION: usize = 0;
/// The number of its pub/sub connection, which the client opens right after, in the background.
const PUBSUB_CONNECTION: usize = 1;

/// Stops the victim of a waiter fault, or lets it go on, and writes so into its history.
fn take_step(step: Step, workers: &mut WorkerSet, links: &[Vec<Proxy>]) -> Result<()> {
    let links = links.get(index_of(step)).into_iter().flatten();
    let t = monotonic_nanos();
    match step {
        Step::Hit(index, hit) => {
            match hit {
                WaiterHit::Kill => {
                    workers.killed.insert(index);
                    workers.signal(index, Signal::SIGKILL)?;
                }
                WaiterHit::Stop => workers.signal(index, Signal::SIGSTOP)?,
                WaiterHit::Cut => links.for_each(|link| link.set_cut(true)),
                WaiterHit::StopLate => {
                    links.for_each(|link| link.set_cut_connection(PUBSUB_CONNECTION, true));
                    workers.signal(index, Signal::SIGSTOP)?;
                }
            }
            workers.record(index, &Event::Out { t });
        }
        Step::Heal(index, hit) => {
            match hit {
                WaiterHit::Kill => {}
                WaiterHit::Stop | WaiterHit::StopLate => workers.signal(index, Signal::SIGCONT)?,
                WaiterHit::Cut => links.for_each(|link| link.set_cut(false)),
            }
            workers.record(index, &Event::Back { t });
        }
        Step::Deliver(_) => {
            links.for_each(|link| link.set_cut_connection(PUBSUB_CONNECTION, false));
        }
    }
    Ok(())
}

fn index_of(step: Step) -> usize {
    match step {
        Step::Hit(index, _) | Step::Heal(index, _) | Step::Deliver(index) => index,
    }
}

/// Ends what was done to worker `index`: resumes it, and heals its links.
fn heal(workers: &WorkerSet, links: &[Vec<Proxy>], index: usize) -> Result<()> {
    for link in links.get(index).into_iter().flatten() {
        link.set_cut(false);
    }
    workers.signal(index, Signal::SIGCONT)
}

/// The lock's servers of a run.
enum LockServers {
    /// One server, or RedLock's independent masters.
    Masters(Vec<RedisServer>),
    /// A Sentinel deployment, and a connection to its first master opened in advance, so that
    /// dropping the replica's link takes one round trip, not a `redis-cli` process.
    Sentinel(Box<SentinelGroup>, redis::Connection),
    /// A Redis Cluster, and the slot of the lock's keys.
    Cluster(Box<RedisCluster>, u16),
    /// One server whose wall clock the checker steps.
    Clocked(Box<RedisServer>, FakedClock),
    /// A master and its replica, which swap roles in a failover: the master first.
    Replicated(Box<[RedisServer; 2]>),
}

impl LockServers {
    /// The servers of `strategy` under `fault`, for the lock `name`.
    fn start(strategy: Strategy, fault: Fault, name: &str) -> Result<LockServers> {
        let mut options = if fault == Fault::RestartAof {
            ServerOptions::default().aof_always()
        } else {
            ServerOptions::default()
        };
        if let Some(policy) = fault.memory_policy() {
            options = options.args(["--maxmemory", MAXMEMORY, "--maxmemory-policy", policy]);
        }
        Ok(match strategy.deployment() {
            Deployment::Single if fault.is_clock() => {
                let clock = FakedClock::with_rate(fault.clock_rate().unwrap_or(1.0));
                let server = RedisServer::start_with(options.faked_clock(&clock));
                LockServers::Clocked(Box::new(server), clock)
            }
            Deployment::Single if fault == Fault::SingleUrlFailover => {
                let master = RedisServer::start_with(options.clone());
                let replica = RedisServer::start_with(options.replica_of(&master));
                replica.wait_replication_link_up(REPLICATION_WAIT);
                LockServers::Replicated(Box::new([master, replica]))
            }
            Deployment::Single => LockServers::Masters(vec![RedisServer::start_with(options)]),
            Deployment::Redlock => LockServers::Masters(
                (0..REDLOCK_MASTERS)
                    .map(|_| RedisServer::start_with(options.clone()))
                    .collect(),
            ),
            Deployment::Sentinel => {
                let group = SentinelGroup::start();
                let master = redis::Client::open(group.node(0).url())?.get_connection()?;
                LockServers::Sentinel(Box::new(group), master)
            }
            Deployment::Cluster => {
                // fencelock's keys of a name share the hash tag `{name}`.
                let slot = RedisCluster::slot_of(format!("{{{name}}}"));
                LockServers::Cluster(Box::new(RedisCluster::start()), slot)
            }
        })
    }

    /// What workers connect to: the masters, or the sentinels.
    fn urls(&self) -> Vec<String> {
        match self {
            LockServers::Masters(servers) => servers.iter().map(RedisServer::url).collect(),
            LockServers::Sentinel(group, _) => group.sentinel_urls(),
            LockServers::Cluster(cluster, _) => cluster.urls(),
            LockServers::Clocked(server, _) => vec![server.url()],
            LockServers::Replicated(pair) => vec![pair[0].url()],
        }
    }

    /// The port of the (first) master, where a tap subscribes.
    fn first_port(&self) -> u16 {
        match self {
            LockServers::Masters(servers) => servers.first().map_or(0, RedisServer::port),
            LockServers::Sentinel(group, _) => group.node(0).port(),
            LockServers::Cluster(cluster, _) => {
                cluster.nodes().first().map_or(0, RedisServer::port)
            }
            LockServers::Clocked(server, _) => server.port(),
            LockServers::Replicated(pair) => pair[0].port(),
        }
    }

    /// Where the master of a replicated pair is now: the replica, once promoted.
    fn master_addr(&self) -> Option<SocketAddr> {
        let LockServers::Replicated(pair) = self else {
            return None;
        };
        Some(SocketAddr::from(([127, 0, 0, 1], pair[1].port())))
    }

    /// For each of `workers` workers, a proxy to each master, which can cut that worker off.
    fn proxies(&self, workers: usize) -> Result<Vec<Vec<Proxy>>> {
        let servers = match self {
            LockServers::Masters(servers) => servers.as_slice(),
            LockServers::Replicated(pair) => &pair[..1],
            _ => {
                return Err(CheckError::Usage(
                    "proxies stand between workers and masters".into(),
                ))
            }
        };
        Ok((0..workers)
            .map(|_| {
                servers
                    .iter()
                    .map(|s| Proxy::start(SocketAddr::from(([127, 0, 0, 1], s.port()))))
                    .collect()
            })
            .collect())
    }

    fn service(&self) -> Option<String> {
        match self {
            LockServers::Masters(_)
            | LockServers::Cluster(..)
            | LockServers::Clocked(..)
            | LockServers::Replicated(_) => None,
            LockServers::Sentinel(group, _) => Some(group.service_name().to_owned()),
        }
    }

    fn apply(&mut self, action: &ServerAction) -> Result<()> {
        match (self, action) {
            (LockServers::Masters(servers), ServerAction::Restart(nodes))
            | (LockServers::Masters(servers), ServerAction::Kill(nodes))
            | (LockServers::Masters(servers), ServerAction::Pause(nodes))
            | (LockServers::Masters(servers), ServerAction::Resume(nodes)) => {
                for &i in nodes {
                    let Some(server) = servers.get_mut(i) else {
                        continue;
                    };
                    match action {
                        ServerAction::Restart(_) => server.restart(),
                        ServerAction::Kill(_) => server.kill9(),
                        ServerAction::Pause(_) => server.pause(),
                        _ => server.resume(),
                    }
                }
            }
            // The plan stops the replica and kills the master before any failover, so the
            // nodes still have their first roles; no round trip to the sentinels delays them.
            (LockServers::Sentinel(group, master), ServerAction::PauseReplica) => {
                group.node(1).pause();
                // A stopped process still receives what the kernel buffers for it: drop the
                // link on the master too, so that nothing granted from now on reaches the
                // replica (it cannot reconnect while stopped).
                redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("replica")
                    .query::<i64>(master)?;
            }
            (LockServers::Sentinel(group, _), ServerAction::ResumeReplica) => {
                group.node(1).resume();
            }
            (LockServers::Sentinel(group, _), ServerAction::KillMaster) => {
                group.node_mut(0).kill9();
            }
            (LockServers::Cluster(cluster, slot), ServerAction::ClusterFailover) => {
                cluster.failover(*slot);
            }
            (LockServers::Cluster(cluster, slot), ServerAction::ClusterKillMaster) => {
                cluster.kill_master(*slot);
            }
            (LockServers::Cluster(cluster, slot), ServerAction::MigrateSlot) => {
                cluster.migrate_slot(*slot);
            }
            (LockServers::Masters(servers), ServerAction::FillMemory) => {
                for server in servers.iter() {
                    fill_memory(server)?;
                }
            }
            (LockServers::Masters(servers), ServerAction::FreeMemory) => {
                for server in servers.iter() {
                    free_memory(server)?;
                }
            }
            (LockServers::Clocked(_, clock), ServerAction::StepClock(millis)) => {
                clock.set_offset(*millis as f64 / 1000.0);
            }
            (LockServers::Replicated(pair), ServerAction::PromoteReplica) => {
                let [master, replica] = pair.as_ref();
                promote(master, replica)?;
            }
            // An action for another deployment: the plan never draws one.
            _ => {}
        }
        Ok(())
    }
}

/// How long a replica gets to connect to its master, or to take its place.
const REPLICATION_WAIT: Duration = Duration::from_secs(10);
/// How often the checker asks a replica whether it took its master's place.
const ROLE_POLL: Duration = Duration::from_millis(10);

/// Swaps `master` and `replica` with `FAILOVER` (the master waits for the replica to have
/// every write, then they trade roles, the old master becoming the new one's replica) and waits
/// until the replica says it is the master.
fn promote(master: &RedisServer, replica: &RedisServer) -> Result<()> {
    let mut conn = redis::Client::open(master.url())?.get_connection()?;
    redis::cmd("FAILOVER").exec(&mut conn)?;
    let mut conn = redis::Client::open(replica.url())?.get_connection()?;
    let deadline = Instant::now() + REPLICATION_WAIT;
    while Instant::now() < deadline {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
        if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
            return Ok(());
        }
        thread::sleep(ROLE_POLL);
    }
    Err(CheckError::Usage(
        "the replica did not take its master's place".into(),
    ))
}

/// The `maxmemory` of the lock's Redis in the memory faults: room for the locks, and for the
/// server's own needs, with a margin.
const MAXMEMORY: &str = "8mb";

/// How many keys, of [`FILLER_BYTES`] each, fill the memory: twice the `maxmemory`.
const FILLER_KEYS: usize = 64;
const FILLER_BYTES: usize = 256 * 1024;

fn filler_key(i: usize) -> String {
    format!("fencelock-check:filler:{i}")
}

/// Writes keys without expiry until twice `maxmemory` was asked for. Writes refused for lack of
/// memory (`noeviction`, or nothing left to evict) are what the fault is about, not an error.
fn fill_memory(server: &RedisServer) -> Result<()> {
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let value = vec![b'x'; FILLER_BYTES];
    for i in 0..FILLER_KEYS {
        let _ = redis::cmd("SET")
            .arg(filler_key(i))
            .arg(&value)
            .exec(&mut conn);
    }
    Ok(())
}

/// Deletes what [`fill_memory`] wrote.
fn free_memory(server: &RedisServer) -> Result<()> {
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let keys: Vec<String> = (0..FILLER_KEYS).map(filler_key).collect();
    redis::cmd("DEL").arg(&keys).exec(&mut conn)?;
    Ok(())
}

/// The worker processes of a run, their output read on one thread each.
struct WorkerSet {
    children: Vec<Child>,
    lines: Receiver<(usize, Option<String>)>,
    /// For each lane, each worker's events.
    histories: Vec<Vec<Vec<Event>>>,
    garbled: Vec<String>,
    open: usize,
    /// Workers the checker killed.
    killed: HashSet<usize>,
}

impl WorkerSet {
    /// Spawns the workers; with `links`, worker `i` reaches the lock's servers through
    /// `links[i]`.
    fn spawn(
        config: &CellConfig,
        base: &WorkerArgs,
        plan: &FaultPlan,
        links: &[Vec<Proxy>],
    ) -> Result<WorkerSet> {
        let (sender, lines) = mpsc::channel();
        let mut set = WorkerSet {
            children: Vec::with_capacity(config.options.workers),
            lines,
            histories: vec![vec![Vec::new(); config.options.workers]; base.lanes],
            garbled: Vec::new(),
            open: 0,
            killed: HashSet::new(),
        };
        for index in 0..config.options.workers {
            let mut args = base.clone();
            args.fault_at_ns = plan
                .worker_faults
                .get(index)
                .copied()
                .flatten()
                .map(|at| base.start_ns + nanos(at));
            if let Some(links) = links.get(index) {
                args.lock_urls = links.iter().map(Proxy::url).collect();
            }
            let mut child = Command::new(&config.options.worker_exe)
                .args(args.to_args())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            let stdout = child.stdout.take();
            // Owned by the set before anything else can fail, so that `finish` or Drop reaps it.
            set.children.push(child);
            let Some(stdout) = stdout else {
                return Err(CheckError::Worker("stdout not piped".into()));
            };
            set.open += 1;
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send((index, Some(line))).is_err() {
                        return;
                    }
                }
                let _ = sender.send((index, None));
            });
        }
        Ok(set)
    }

    /// Records the next line (or closed output) within `wait`, and returns it if it was an
    /// event.
    fn receive(&mut self, wait: Duration) -> Option<(usize, Event)> {
        match self.lines.recv_timeout(wait) {
            Ok((index, Some(line))) => match Event::parse(&line) {
                Ok((lane, event)) => {
                    self.histories
                        .get_mut(lane)?
                        .get_mut(index)?
                        .push(event.clone());
                    Some((index, event))
                }
                Err(e) => {
                    self.garbled.push(format!("worker {index}: {e}: {line}"));
                    None
                }
            },
            Ok((_, None)) => {
                self.open = self.open.saturating_sub(1);
                None
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Writes `event`, one of the checker's own, into each lane of worker `index`'s history.
    fn record(&mut self, index: usize, event: &Event) {
        for lane in &mut self.histories {
            if let Some(history) = lane.get_mut(index) {
                history.push(event.clone());
            }
        }
    }

    fn signal(&self, index: usize, signal: Signal) -> Result<()> {
        if let Some(child) = self.children.get(index) {
            let pid = i32::try_from(child.id())
                .map_err(|_| CheckError::Worker("pid out of range".into()))?;
            kill(Pid::from_raw(pid), signal)?;
        }
        Ok(())
    }

    /// Kills the stragglers and reaps everyone; returns each worker that ended in a way nobody
    /// asked for (a worker killing itself as planned is fine).
    fn finish(&mut self) -> Vec<String> {
        let mut failures = std::mem::take(&mut self.garbled);
        let deadline = Instant::now() + EXIT_GRACE;
        for (index, child) in self.children.iter_mut().enumerate() {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(REAP_POLL);
            }
            if matches!(child.try_wait(), Ok(None)) {
                failures.push(format!("worker {index} still ran at the deadline"));
                let _ = child.kill();
            }
            let crashed = self.histories.iter().any(|lane| {
                lane.get(index)
                    .is_some_and(|h| h.iter().any(|e| matches!(e, Event::Crash { .. })))
            });
            let killed = crashed || self.killed.contains(&index);
            match child.wait() {
                Ok(status) if status.success() => {}
                Ok(status) if killed && status.signal() == Some(Signal::SIGKILL as i32) => {}
                Ok(status) => failures.push(format!("worker {index} ended with {status}")),
                Err(e) => failures.push(format!("worker {index} cannot be reaped: {e}")),
            }
        }
        failures
    }
}

impl Drop for WorkerSet {
    fn drop(&mut self) {
        for child in &mut self.children {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
