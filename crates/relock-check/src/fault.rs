//! The faults, and the seeded schedule that says where each one lands in a run.

use std::fmt;
use std::time::Duration;

use clap::ValueEnum;

use crate::rng::Rng;
use crate::strategy::Strategy;

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
    /// The lock's Redis is killed and restarted without persistence while the lock is in use.
    Restart,
    /// The same, with `appendonly yes` and `appendfsync always`.
    RestartAof,
    /// RedLock: two of the five masters are killed and stay down.
    MinorityKill,
    /// RedLock: two of the five masters are paused (SIGSTOP) longer than the lease, then resumed.
    MinorityPause,
    /// RedLock: two of the five masters are killed and restarted at once, without persistence.
    MinorityRestart,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 9] = [
        Fault::None,
        Fault::Kill,
        Fault::Pause,
        Fault::Slow,
        Fault::Restart,
        Fault::RestartAof,
        Fault::MinorityKill,
        Fault::MinorityPause,
        Fault::MinorityRestart,
    ];

    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Slow => "slow",
            Fault::Restart => "restart",
            Fault::RestartAof => "restart-aof",
            Fault::MinorityKill => "minority-kill",
            Fault::MinorityPause => "minority-pause",
            Fault::MinorityRestart => "minority-restart",
        }
    }

    /// Whether a worker injects it into its own critical section.
    pub fn is_in_worker(self) -> bool {
        matches!(self, Fault::Kill | Fault::Pause | Fault::Slow)
    }

    /// Whether the fault makes sense for `strategy`: the minority faults need several masters,
    /// and a single server's restart has the minority restart as its RedLock counterpart.
    pub fn applies_to(self, strategy: Strategy) -> bool {
        match self {
            Fault::None | Fault::Kill | Fault::Pause | Fault::Slow => true,
            Fault::Restart | Fault::RestartAof => !strategy.is_redlock(),
            Fault::MinorityKill | Fault::MinorityPause | Fault::MinorityRestart => {
                strategy.is_redlock()
            }
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
}

/// Where the faults of one run land, drawn from the run's seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// For each worker, when its fault is due, from the start of the run: the worker injects it
    /// into the first critical section it enters from then on.
    pub worker_faults: Vec<Option<Duration>>,
    /// Server actions, each at its offset from the start of the run, in time order.
    pub server_actions: Vec<(Duration, ServerAction)>,
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
        };
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let at = |rng: &mut Rng, from: f64, to: f64| {
            Duration::from_millis(
                rng.between((millis as f64 * from) as u64, (millis as f64 * to) as u64),
            )
        };
        match fault {
            Fault::None => {}
            Fault::Kill | Fault::Pause | Fault::Slow => {
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
                let nodes = rng.distinct(2, Strategy::RelockRedlockFenced.lock_servers());
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
        }
        plan
    }

    /// How many faults the plan injects.
    pub fn planned(&self) -> usize {
        self.worker_faults.iter().flatten().count()
            + self
                .server_actions
                .iter()
                .filter(|(_, a)| !matches!(a, ServerAction::Resume(_)))
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
        assert_eq!(plan.planned(), 2);
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
}
