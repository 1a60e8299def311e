//! The faults, and the seeded schedule that says where each one lands in a run.

use std::fmt;
use std::time::Duration;

use clap::ValueEnum;

use crate::rng::Rng;
use crate::strategy::{Deployment, Strategy, REDLOCK_MASTERS};

/// A fault injected into a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
#[non_exhaustive]
pub enum Fault {
    /// No fault: contention alone.
    None,
    /// A holder is killed with SIGKILL the moment it holds the lock: for `SETNX` + `EXPIRE`
    /// between the two commands (the seeds' crash), for every other strategy between the
    /// critical section's read and its write.
    Kill,
    /// A holder stops (SIGSTOP) between its read and its write for longer than the lease, then
    /// is resumed (SIGCONT): a GC pause.
    Pause,
    /// A critical section sleeps longer than the lease between its read and its write.
    Slow,
    /// A holder is cut off from the lock's servers (by the checker's proxy, which stops
    /// forwarding in both directions) between its read and its write, for longer than the
    /// lease; the resource stays reachable.
    Partition,
    /// The lock's Redis is killed and restarted without persistence while a holder is inside:
    /// from just before the restart, each worker's next section lasts 80% of the lease (within
    /// it, so a lock that survives the restart keeps the others out).
    Restart,
    /// The same, with `appendonly yes` and `appendfsync always`.
    RestartAof,
    /// RedLock: two of the five masters are killed and stay down, while a holder is inside (as
    /// for [`Fault::Restart`]).
    MinorityKill,
    /// RedLock: two of the five masters are paused (SIGSTOP) longer than the lease, then
    /// resumed, while a holder is inside.
    MinorityPause,
    /// RedLock: two of the five masters are killed and restarted at once, without persistence,
    /// while a holder is inside.
    MinorityRestart,
    /// Sentinel: the replica stops for 300 ms and its link is dropped (replication is
    /// asynchronous, so the grants made meanwhile exist on the master only), the master is
    /// killed 200 ms into that, and the sentinels promote the replica. The first section each
    /// worker enters from the replica's stop on lasts 80% of the lease, so that a holder whose
    /// grant the failover lost is still inside, within its lease, when the new master grants the
    /// lock again.
    Failover,
    /// The lock's Redis runs out of memory under `maxmemory-policy volatile-lru` while a holder
    /// is inside: the checker fills it with keys without expiry, so the only keys it can evict
    /// are those with one, the locks' own; then it deletes its keys again. Workers hold their
    /// sections long around it, as for [`Fault::Restart`].
    #[value(name = "evict-volatile-lru")]
    EvictVolatile,
    /// The same under `allkeys-lru`: every key may be evicted, the least recently used first.
    #[value(name = "evict-allkeys-lru")]
    EvictAllKeys,
    /// The same under `noeviction`: nothing is evicted, writes are refused while memory is full.
    MemoryFull,
    /// Cluster: the replica of the lock's master takes over with `CLUSTER FAILOVER` (a manual
    /// failover: it catches up with its master first) while a holder is inside.
    ClusterFailover,
    /// Cluster: the lock's master is killed (SIGKILL) while a holder is inside, and the cluster
    /// promotes its replica once the node timeout (3 s) passed.
    ClusterKillMaster,
    /// Cluster: the lock's slot moves to another master (keys moved with `MIGRATE`, which keeps
    /// their expiries) while a holder is inside.
    SlotMigration,
    /// The lock's Redis has its wall clock stepped forward by half a lease while a holder is
    /// inside (libfaketime): every expiry comes half a lease sooner.
    ClockForward,
    /// The same by three leases: every lease on the server ends at once.
    ClockForwardLease,
    /// The same by [`CLOCK_STEP_PAST_MEMORY`], more than fencelock's fence memory.
    ClockForwardMemory,
    /// The lock's Redis has its wall clock stepped back by half a lease while a holder is
    /// inside: expiries come later, and `TIME` goes back.
    ClockBack,
    /// The same by three leases.
    ClockBackLease,
    /// The same by [`CLOCK_STEP_PAST_MEMORY`], more than fencelock's fence memory.
    ClockBackMemory,
    /// The lock's Redis has its wall clock stepped back by [`CLOCK_STEP_PAST_MEMORY`] after
    /// every worker stood back from the lock for longer than fencelock's fence memory, which
    /// fencelock's clients set to one lease here: no key remembers the last fence when the step
    /// lands, the case the fence memory is there for.
    ClockBackIdle,
    /// The lock's Redis has a wall clock running twice as fast as the true one for the whole
    /// run (a drifting clock): a lease ends on the server after half its time.
    #[value(name = "clock-fast-2x")]
    ClockFast2x,
    /// The same, four times as fast: faster than fencelock renews (every third of the lease).
    #[value(name = "clock-fast-4x")]
    ClockFast4x,
    /// A client that reaches Redis by one address (a DNS name, a virtual IP, a Kubernetes
    /// Service, a proxy) through a failover: the lock's master and its replica swap roles
    /// (`FAILOVER`) while every worker stands back; each worker's new connections go to the new
    /// master from then on, its command connection is closed so that it reconnects there, and
    /// its pub/sub connection stays on the demoted node, which now relays the new master's
    /// PUBLISH as a replica does. The new master counts no receiver for a waiter.
    SingleUrlFailover,
    /// Pub/sub messages come late: a waiter with its place in line stops (SIGSTOP) for two
    /// leases, early in the run, as for [`Fault::FrozenWaiter`] (acquires wait six leases here,
    /// so that it still waits once resumed), and what the lock's Redis sends on its pub/sub
    /// connection meanwhile is held back (its proxy stops forwarding that connection) until
    /// 200 ms after it resumed: the waiter's first request once resumed is refused before it
    /// hears of the grant that lapsed while it was stopped.
    PubsubDelay,
    /// A pattern subscription on every channel (`PSUBSCRIBE *`, as a monitoring tool holds one)
    /// is open on the lock's Redis, and a waiter dies (SIGKILL) with its place in line: PUBLISH
    /// counts the tap as a receiver for the dead waiter.
    PatternTap,
    /// A waiter with its place in line is cut off from the lock's servers (its links stop
    /// forwarding without closing, as behind a network that drops packets) for 1.5 leases: its
    /// pub/sub connection still counts as a receiver.
    HalfOpenWaiter,
    /// Every pub/sub connection on the lock's Redis is closed (`CLIENT KILL TYPE pubsub`) just
    /// before each release, for two seconds; sections last 300 ms meanwhile, so waiters line up
    /// far apart.
    PubsubKill,
    /// The lock's Redis stops (SIGSTOP) for 1.5 leases, so that replies to requests sent
    /// meanwhile come back after the lease they grant: such a grant must be given back, not
    /// kept. Workers wait longer for a reply than that.
    LateReply,
    /// A waiter with its place in line stops (SIGSTOP) for 1.5 leases: its connections stay
    /// open and count as receivers, and it reads what was sent to it only once resumed.
    FrozenWaiter,
}

/// How the checker stops the victim of a waiter fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaiterHit {
    /// SIGKILL: it is gone.
    Kill,
    /// SIGSTOP, and SIGCONT later.
    Stop,
    /// Its links to the lock's servers cut, and healed later.
    Cut,
    /// SIGSTOP with its pub/sub link cut; SIGCONT later, and the link healed a moment after.
    StopLate,
}

/// The waiter a waiter fault stops, and from when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    /// The worker.
    pub worker: usize,
    /// The worker it is stopped behind, which holds its first section from `due` on long.
    pub holder: usize,
    /// From when, from the start of the run: the checker stops the victim once the holder
    /// entered from then on (see [`crate::handoff::VictimWatch`]).
    pub due: Duration,
    /// How it is stopped.
    pub hit: WaiterHit,
    /// For how long, unless it is killed.
    pub out_for: Duration,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 33] = [
        Fault::None,
        Fault::Kill,
        Fault::Pause,
        Fault::Slow,
        Fault::Partition,
        Fault::Restart,
        Fault::RestartAof,
        Fault::MinorityKill,
        Fault::MinorityPause,
        Fault::MinorityRestart,
        Fault::Failover,
        Fault::EvictVolatile,
        Fault::EvictAllKeys,
        Fault::MemoryFull,
        Fault::ClusterFailover,
        Fault::ClusterKillMaster,
        Fault::SlotMigration,
        Fault::ClockForward,
        Fault::ClockForwardLease,
        Fault::ClockForwardMemory,
        Fault::ClockBack,
        Fault::ClockBackLease,
        Fault::ClockBackMemory,
        Fault::ClockBackIdle,
        Fault::ClockFast2x,
        Fault::ClockFast4x,
        Fault::SingleUrlFailover,
        Fault::PubsubDelay,
        Fault::PatternTap,
        Fault::HalfOpenWaiter,
        Fault::PubsubKill,
        Fault::LateReply,
        Fault::FrozenWaiter,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Slow => "slow",
            Fault::Partition => "partition",
            Fault::Restart => "restart",
            Fault::RestartAof => "restart-aof",
            Fault::MinorityKill => "minority-kill",
            Fault::MinorityPause => "minority-pause",
            Fault::MinorityRestart => "minority-restart",
            Fault::Failover => "failover",
            Fault::EvictVolatile => "evict-volatile-lru",
            Fault::EvictAllKeys => "evict-allkeys-lru",
            Fault::MemoryFull => "memory-full",
            Fault::ClusterFailover => "cluster-failover",
            Fault::ClusterKillMaster => "cluster-kill-master",
            Fault::SlotMigration => "slot-migration",
            Fault::ClockForward => "clock-forward",
            Fault::ClockForwardLease => "clock-forward-lease",
            Fault::ClockForwardMemory => "clock-forward-memory",
            Fault::ClockBack => "clock-back",
            Fault::ClockBackLease => "clock-back-lease",
            Fault::ClockBackMemory => "clock-back-memory",
            Fault::ClockBackIdle => "clock-back-idle",
            Fault::ClockFast2x => "clock-fast-2x",
            Fault::ClockFast4x => "clock-fast-4x",
            Fault::SingleUrlFailover => "single-url-failover",
            Fault::PubsubDelay => "pubsub-delay",
            Fault::PatternTap => "pattern-tap",
            Fault::HalfOpenWaiter => "half-open-waiter",
            Fault::PubsubKill => "pubsub-kill",
            Fault::LateReply => "late-reply",
            Fault::FrozenWaiter => "frozen-waiter",
        }
    }

    /// Whether the fault goes after a release's handoff: the waiter it grants the lock to, or
    /// the message that tells it.
    pub fn is_handoff(self) -> bool {
        matches!(
            self,
            Fault::SingleUrlFailover
                | Fault::PubsubDelay
                | Fault::PatternTap
                | Fault::HalfOpenWaiter
                | Fault::PubsubKill
                | Fault::LateReply
                | Fault::FrozenWaiter
        )
    }

    /// How the checker stops a waiter under this fault, if it does.
    pub fn waiter_hit(self) -> Option<WaiterHit> {
        match self {
            Fault::PatternTap => Some(WaiterHit::Kill),
            Fault::FrozenWaiter => Some(WaiterHit::Stop),
            Fault::HalfOpenWaiter => Some(WaiterHit::Cut),
            Fault::PubsubDelay => Some(WaiterHit::StopLate),
            _ => None,
        }
    }

    /// Whether the fault is about a lock sitting idle (a grant nobody can use, a waiter passed
    /// over), which the run measures with leases of at least
    /// [`HANDOFF_LEASE`](crate::handoff::HANDOFF_LEASE).
    pub fn idles(self) -> bool {
        matches!(
            self,
            Fault::PatternTap | Fault::HalfOpenWaiter | Fault::FrozenWaiter | Fault::PubsubKill
        )
    }

    /// Whether workers reach the lock's servers through proxies of the checker's, one per
    /// worker, which the fault acts on.
    pub fn needs_links(self) -> bool {
        matches!(
            self,
            Fault::Partition
                | Fault::SingleUrlFailover
                | Fault::PubsubDelay
                | Fault::HalfOpenWaiter
        )
    }

    /// Whether replies come back later than a lease under this fault, which workers must wait
    /// for rather than take for a failure.
    pub fn delays_replies(self) -> bool {
        self == Fault::LateReply
    }

    /// How far this fault steps the lock's Redis's wall clock, in a run with leases of `lease`
    /// (negative: back), in milliseconds.
    pub fn clock_step(self, lease: Duration) -> Option<i64> {
        let lease = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let past_memory = i64::try_from(CLOCK_STEP_PAST_MEMORY.as_millis()).unwrap_or(i64::MAX);
        match self {
            Fault::ClockForward => Some(lease / 2),
            Fault::ClockForwardLease => Some(lease.saturating_mul(3)),
            Fault::ClockForwardMemory => Some(past_memory),
            Fault::ClockBack => Some(-lease / 2),
            Fault::ClockBackLease => Some(lease.saturating_mul(-3)),
            Fault::ClockBackMemory | Fault::ClockBackIdle => Some(-past_memory),
            _ => None,
        }
    }

    /// How fast the lock's Redis's wall clock runs under this fault, against the true one.
    pub fn clock_rate(self) -> Option<f64> {
        match self {
            Fault::ClockFast2x => Some(2.0),
            Fault::ClockFast4x => Some(4.0),
            _ => None,
        }
    }

    /// How long, from the time its fault is due, each worker stands back from the lock before
    /// it takes it again, in a run with leases of `lease`.
    pub fn quiet(self, lease: Duration) -> Option<Duration> {
        match self {
            Fault::Failover | Fault::SingleUrlFailover => Some(FAILOVER_QUIET),
            Fault::ClockBackIdle => Some(lease * 3),
            _ => None,
        }
    }

    /// Whether the fault is about the lock's Redis's clock.
    pub fn is_clock(self) -> bool {
        self.clock_step(Duration::ZERO).is_some() || self.clock_rate().is_some()
    }

    /// The memory policy the lock's Redis runs under for this fault, if it sets one.
    pub fn memory_policy(self) -> Option<&'static str> {
        match self {
            Fault::EvictVolatile => Some("volatile-lru"),
            Fault::EvictAllKeys => Some("allkeys-lru"),
            Fault::MemoryFull => Some("noeviction"),
            _ => None,
        }
    }

    /// Whether the fault makes sense for `strategy`: the minority faults need several masters,
    /// a single server's restart has the minority restart as its RedLock counterpart, and a
    /// Sentinel deployment is there for its failover.
    pub fn applies_to(self, strategy: Strategy) -> bool {
        if self.is_handoff() {
            return strategy.hands_over();
        }
        match (strategy.deployment(), self) {
            (_, Fault::None) => true,
            (Deployment::Sentinel, fault) => fault == Fault::Failover,
            (Deployment::Cluster, fault) => matches!(
                fault,
                Fault::Kill
                    | Fault::Slow
                    | Fault::ClusterFailover
                    | Fault::ClusterKillMaster
                    | Fault::SlotMigration
            ),
            (_, Fault::Kill | Fault::Pause | Fault::Slow | Fault::Partition) => true,
            (Deployment::Single, fault) => {
                matches!(fault, Fault::Restart | Fault::RestartAof)
                    || fault.memory_policy().is_some()
                    || fault.is_clock()
            }
            (Deployment::Redlock, fault) => matches!(
                fault,
                Fault::MinorityKill | Fault::MinorityPause | Fault::MinorityRestart
            ),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How long the replica stays stopped in a failover: shorter than the sentinels' 500 ms
/// down-after, so that they still promote it.
pub const REPLICA_LAG: Duration = Duration::from_millis(300);

/// How long before a server fault workers start holding their sections long.
pub const HOLD_LEAD: Duration = Duration::from_millis(100);

/// How long workers stand back from the lock around the replica's stop in a failover: the lock
/// is then free, and known free by the replica, when the replica stops (a release the replica
/// missed would leave it a lock nobody holds, blocking everyone past the failover); the first
/// grant after the quiet is one the replica never receives.
pub const FAILOVER_QUIET: Duration = Duration::from_millis(300);

/// How far the clock faults past the fence memory step the clock: more than fencelock's default
/// fence memory (60 s).
pub const CLOCK_STEP_PAST_MEMORY: Duration = Duration::from_secs(90);

/// How long the lock's Redis stays full in the memory faults.
pub const MEMORY_PRESSURE: Duration = Duration::from_millis(150);

/// What the checker does to the lock's servers at a point of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAction {
    /// Kill (SIGKILL) these servers and start them again on the same port and directory.
    Restart(Vec<usize>),
    /// Kill these servers for good.
    Kill(Vec<usize>),
    /// Stop these servers with SIGSTOP.
    Pause(Vec<usize>),
    /// Resume these servers with SIGCONT.
    Resume(Vec<usize>),
    /// Sentinel: stop the replica with SIGSTOP and drop its link on the master, so that the
    /// master's writes from then on reach it no more.
    PauseReplica,
    /// Sentinel: resume the replica stopped by [`ServerAction::PauseReplica`].
    ResumeReplica,
    /// Sentinel: kill the current master for good.
    KillMaster,
    /// Cluster: fail the lock's master over to its replica with `CLUSTER FAILOVER`.
    ClusterFailover,
    /// Cluster: kill the lock's master and wait for its replica's promotion.
    ClusterKillMaster,
    /// Cluster: move the lock's slot to another master.
    MigrateSlot,
    /// Fill the server's memory past its `maxmemory` with keys of the checker's own, without
    /// expiry.
    FillMemory,
    /// Delete the keys [`ServerAction::FillMemory`] wrote.
    FreeMemory,
    /// Step the lock's Redis's wall clock to this many milliseconds from the true one.
    StepClock(i64),
    /// Swap the lock's master and replica (`FAILOVER`); then send the workers' new connections
    /// to the new master and close their command connections.
    PromoteReplica,
}

impl ServerAction {
    /// Whether this action is a fault by itself, rather than the end or the set-up of one.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            ServerAction::Restart(_)
                | ServerAction::Kill(_)
                | ServerAction::Pause(_)
                | ServerAction::KillMaster
                | ServerAction::FillMemory
                | ServerAction::ClusterFailover
                | ServerAction::ClusterKillMaster
                | ServerAction::MigrateSlot
                | ServerAction::StepClock(_)
                | ServerAction::PromoteReplica
        )
    }
}

/// Where the faults of one run land, drawn from the run's seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// For each worker, when its fault is due, from the start of the run: the worker injects it
    /// into the first critical section it enters from then on.
    pub worker_faults: Vec<Option<Duration>>,
    /// Server actions, each at its offset from the start of the run, in time order.
    pub server_actions: Vec<(Duration, ServerAction)>,
    /// The waiter the checker stops, under a waiter fault.
    pub victim: Option<Victim>,
}

impl FaultPlan {
    /// Draws the plan: `count` faults (at most one per worker for faults inside workers), on
    /// `workers` workers, in a run of `duration` with leases of `lease`.
    pub fn draw(
        fault: Fault,
        workers: usize,
        count: usize,
        duration: Duration,
        lease: Duration,
        rng: &mut Rng,
    ) -> FaultPlan {
        let mut plan = FaultPlan {
            worker_faults: vec![None; workers],
            server_actions: Vec::new(),
            victim: None,
        };
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let at = |rng: &mut Rng, from: f64, to: f64| {
            Duration::from_millis(
                rng.between((millis as f64 * from) as u64, (millis as f64 * to) as u64),
            )
        };
        match fault {
            Fault::None => {}
            Fault::Kill | Fault::Pause | Fault::Slow | Fault::Partition => {
                for victim in rng.distinct(count, workers) {
                    // Early enough that the stall (2.5 leases) ends inside the run.
                    plan.worker_faults[victim] = Some(at(rng, 0.1, 0.4));
                }
            }
            Fault::Restart | Fault::RestartAof => {
                let count = count.max(1);
                for i in 0..count {
                    let slot = 0.6 / count as f64;
                    let from = 0.2 + slot * i as f64;
                    plan.server_actions.push((
                        at(rng, from, from + slot / 2.0),
                        ServerAction::Restart(vec![0]),
                    ));
                }
            }
            Fault::MinorityKill | Fault::MinorityRestart | Fault::MinorityPause => {
                let nodes = rng.distinct(2, REDLOCK_MASTERS);
                let when = at(rng, 0.2, 0.4);
                let action = match fault {
                    Fault::MinorityKill => ServerAction::Kill(nodes.clone()),
                    Fault::MinorityRestart => ServerAction::Restart(nodes.clone()),
                    _ => ServerAction::Pause(nodes.clone()),
                };
                plan.server_actions.push((when, action));
                if fault == Fault::MinorityPause {
                    let resume = when + lease * 5 / 2;
                    plan.server_actions
                        .push((resume, ServerAction::Resume(nodes)));
                }
            }
            Fault::ClusterFailover | Fault::ClusterKillMaster | Fault::SlotMigration => {
                let action = match fault {
                    Fault::ClusterFailover => ServerAction::ClusterFailover,
                    Fault::ClusterKillMaster => ServerAction::ClusterKillMaster,
                    _ => ServerAction::MigrateSlot,
                };
                plan.server_actions.push((at(rng, 0.2, 0.4), action));
            }
            Fault::EvictVolatile | Fault::EvictAllKeys | Fault::MemoryFull => {
                let when = at(rng, 0.2, 0.4);
                plan.server_actions.extend([
                    (when, ServerAction::FillMemory),
                    (when + MEMORY_PRESSURE, ServerAction::FreeMemory),
                ]);
            }
            Fault::ClockForward
            | Fault::ClockForwardLease
            | Fault::ClockForwardMemory
            | Fault::ClockBack
            | Fault::ClockBackLease
            | Fault::ClockBackMemory => {
                let step = fault.clock_step(lease).unwrap_or(0);
                plan.server_actions
                    .push((at(rng, 0.2, 0.4), ServerAction::StepClock(step)));
            }
            Fault::ClockBackIdle => {
                // Every worker stands back from `quiet_from` for three leases (see
                // `Fault::quiet`): the last holder's lease and the fence memory (one lease)
                // after its release both run out before the step.
                let quiet_from = at(rng, 0.15, 0.25);
                plan.worker_faults = vec![Some(quiet_from); workers];
                let step = fault.clock_step(lease).unwrap_or(0);
                plan.server_actions
                    .push((quiet_from + lease * 5 / 2, ServerAction::StepClock(step)));
            }
            Fault::ClockFast2x | Fault::ClockFast4x => {
                // The clock drifts from the start; workers hold long from a drawn point on, so
                // that a holder is inside when a lease ends early on the server.
                plan.worker_faults = vec![Some(at(rng, 0.2, 0.4)); workers];
            }
            Fault::SingleUrlFailover => {
                // Workers stand back around the swap, as for `Fault::Failover`, so that the
                // replica has every grant and release when it is promoted.
                let when = at(rng, 0.2, 0.4).max(FAILOVER_QUIET);
                let quiet_from = when.saturating_sub(FAILOVER_QUIET * 2 / 3);
                plan.worker_faults = vec![Some(quiet_from); workers];
                plan.server_actions
                    .push((when, ServerAction::PromoteReplica));
            }
            Fault::LateReply => {
                // One stop: sections hold long from the resume on (`FaultWindow`), and a
                // holder inside across a second stop would lose its lease as a paused holder
                // does, which is not what this fault is about.
                let when = at(rng, 0.15, 0.3);
                let resume = when + lease * 3 / 2;
                plan.server_actions.extend([
                    (when, ServerAction::Pause(vec![0])),
                    (resume, ServerAction::Resume(vec![0])),
                ]);
                plan.worker_faults = vec![Some(resume); workers];
            }
            Fault::PatternTap
            | Fault::HalfOpenWaiter
            | Fault::FrozenWaiter
            | Fault::PubsubDelay => {
                // One worker, the holder, holds its first section from then on long; the
                // checker stops the victim behind it (`VictimWatch`). The others go on with
                // short sections, so that the victim soon comes first in line and is granted
                // the lock while stopped. Under pubsub-delay that grant must lapse before the
                // victim resumes (two leases), and the victim must resume while the others
                // still contend, so the fault comes early.
                let (due, out_for) = if fault == Fault::PubsubDelay {
                    (at(rng, 0.1, 0.2), lease * 2)
                } else {
                    (at(rng, 0.15, 0.3), lease * 3 / 2)
                };
                let picked = rng.distinct(2, workers);
                if let (Some(hit), &[worker, holder]) = (fault.waiter_hit(), picked.as_slice()) {
                    plan.worker_faults[holder] = Some(due);
                    plan.victim = Some(Victim {
                        worker,
                        holder,
                        due,
                        hit,
                        out_for,
                    });
                }
            }
            Fault::PubsubKill => {
                plan.worker_faults = vec![Some(at(rng, 0.2, 0.35)); workers];
            }
            Fault::Failover => {
                let when = at(rng, 0.15, 0.25).max(FAILOVER_QUIET);
                // Workers stand back from the lock from 200 ms before the replica stops to
                // 100 ms after (see `FAILOVER_QUIET`), then hold long.
                let quiet_from = when.saturating_sub(FAILOVER_QUIET * 2 / 3);
                plan.worker_faults = vec![Some(quiet_from); workers];
                plan.server_actions.extend([
                    (when, ServerAction::PauseReplica),
                    (when + REPLICA_LAG / 3 * 2, ServerAction::KillMaster),
                    (when + REPLICA_LAG, ServerAction::ResumeReplica),
                ]);
            }
        }
        if matches!(
            fault,
            Fault::Restart
                | Fault::RestartAof
                | Fault::MinorityKill
                | Fault::MinorityPause
                | Fault::MinorityRestart
                | Fault::EvictVolatile
                | Fault::EvictAllKeys
                | Fault::MemoryFull
                | Fault::ClusterFailover
                | Fault::ClusterKillMaster
                | Fault::SlotMigration
                | Fault::ClockForward
                | Fault::ClockForwardLease
                | Fault::ClockForwardMemory
                | Fault::ClockBack
                | Fault::ClockBackLease
                | Fault::ClockBackMemory
        ) {
            // Each worker holds its next section long from just before the first server fault,
            // so that a holder is inside, within its lease, while the servers fail.
            let first = plan.server_actions.iter().map(|(at, _)| *at).min();
            let hold_from = first.map(|at| at.saturating_sub(HOLD_LEAD));
            plan.worker_faults = vec![hold_from; workers];
        }
        plan
    }

    /// How many faults the plan injects on the servers.
    pub fn server_faults(&self) -> usize {
        self.server_actions
            .iter()
            .filter(|(_, a)| a.is_fault())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_plan_and_bounds_the_faults() {
        let draw = |seed| {
            FaultPlan::draw(
                Fault::Pause,
                4,
                2,
                Duration::from_secs(5),
                Duration::from_secs(1),
                &mut Rng::new(seed),
            )
        };
        assert_eq!(draw(3), draw(3));
        let plan = draw(3);
        assert_eq!(plan.worker_faults.iter().flatten().count(), 2);
        assert_eq!(plan.server_faults(), 0);
        assert!(plan
            .worker_faults
            .iter()
            .flatten()
            .all(|at| *at < Duration::from_secs(2)));
    }

    #[test]
    fn server_faults_land_inside_the_run() {
        let duration = Duration::from_secs(5);
        for fault in [Fault::Restart, Fault::MinorityPause, Fault::MinorityKill] {
            let plan = FaultPlan::draw(
                fault,
                4,
                2,
                duration,
                Duration::from_secs(1),
                &mut Rng::new(9),
            );
            assert!(plan.server_actions.iter().all(|(at, _)| *at < duration));
        }
    }
    #[test]
    fn the_handoff_faults_apply_to_the_kinds_that_hand_over_and_land_inside_the_run() {
        let duration = Duration::from_secs(4);
        let lease = Duration::from_secs(1);
        for fault in Fault::ALL.into_iter().filter(|f| f.is_handoff()) {
            assert!(fault.applies_to(Strategy::FencelockFairFenced));
            assert!(!fault.applies_to(Strategy::FencelockRedlockFenced));
            assert!(!fault.applies_to(Strategy::SetnxExpire));
            let plan = FaultPlan::draw(fault, 4, 2, duration, lease, &mut Rng::new(5));
            assert!(plan.server_actions.iter().all(|(at, _)| *at < duration * 3));
            assert!(plan.worker_faults.iter().flatten().all(|at| *at < duration));
            assert_eq!(
                plan.victim.is_some(),
                fault.waiter_hit().is_some(),
                "{fault}"
            );
            assert!(plan.victim.is_none_or(|v| v.worker < 4 && v.due < duration));
        }
    }
}
