//! What each cell is expected to show: for fencelock, what its documentation claims
//! (crates/fencelock/docs/guide.md, crates/fencelock/docs/redlock.md); for the naive locks, the
//! failures the seeds themselves describe. A cell's verdict compares the measurement with that
//! expectation.

use std::fmt;

use crate::fault::Fault;
use crate::handoff::IDLE_BOUND;
use crate::history::Measurement;
use crate::strategy::Strategy;

/// What a cell is expected to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// fencelock claims mutual exclusion here: no overlap, no lost update, no stale write; and
    /// after a killed holder, the lock comes back within a lease.
    Exclusive,
    /// fencelock claims that fencing protects the resource here: no lost update and no stale write
    /// accepted; two holders at once are expected (a lease cannot stop a paused holder).
    Fenced,
    /// As [`Claim::Exclusive`], and the lock never sits idle longer than
    /// [`IDLE_BOUND`] while a worker able to take it waits: a waiter that cannot use a grant
    /// (dead, stopped, cut off) must not keep the lock for a lease.
    Live,
    /// As [`Claim::Live`], and a fair lock serves its waiters in the order they came: nobody is
    /// served while one that asked well before still waits.
    InOrder,
    /// fencelock's documentation does not claim safety here; measured for the record.
    NotClaimed,
    /// fencelock's documentation warns that this loses locks (a failover to a replica that never
    /// received the grant): the checker must see two holders.
    DocumentedLoss,
    /// The seeds show this naive lock letting two holders in here.
    SeedsOverlap,
    /// The seeds show this naive lock never coming back after its holder died here.
    SeedsDeadlock,
    /// A naive lock under a fault the seeds do not discuss; measured for the record.
    Measured,
}

impl Claim {
    /// The expectation for `strategy` under `fault`.
    pub fn of(strategy: Strategy, fault: Fault) -> Claim {
        match (strategy, fault) {
            (Strategy::FencelockSentinel, Fault::Failover) => return Claim::DocumentedLoss,
            // One replica, and every grant waits for it: the promoted replica has every grant.
            (Strategy::FencelockSentinelWait, Fault::Failover) => return Claim::Exclusive,
            // A manual failover loses no write, and a migrated key keeps its expiry.
            (
                Strategy::FencelockCluster | Strategy::FencelockClusterWait,
                Fault::ClusterFailover | Fault::SlotMigration,
            ) => return Claim::Exclusive,
            // Every grant waited for the replica, and the promotion takes longer than a lease.
            (Strategy::FencelockClusterWait, Fault::ClusterKillMaster) => return Claim::Exclusive,
            _ => {}
        }
        if strategy.is_fencelock() {
            return match fault {
                // A release only offers the lock, and a waiter takes it with a request of its
                // own: a message is never proof of a grant, nor a receiver proof of a waiter.
                Fault::SingleUrlFailover | Fault::PubsubDelay | Fault::LateReply => {
                    Claim::Exclusive
                }
                Fault::PubsubKill if strategy == Strategy::FencelockFairFenced => Claim::InOrder,
                Fault::PatternTap
                | Fault::HalfOpenWaiter
                | Fault::FrozenWaiter
                | Fault::PubsubKill => Claim::Live,
                // The fence keeps rising across a step back only within the fence memory.
                Fault::ClockBackMemory | Fault::ClockBackIdle => Claim::NotClaimed,
                Fault::None
                | Fault::Kill
                | Fault::Slow
                | Fault::RestartAof
                | Fault::MinorityKill
                | Fault::MinorityPause => Claim::Exclusive,
                // Fences rise across a restart without persistence and across a master change
                // (they come from the server's clock), so the resource still refuses old holders.
                // Fences come from the server's clock, so an evicted fence key does not make
                // them go back either.
                Fault::Pause
                | Fault::Partition
                | Fault::Restart
                | Fault::MinorityRestart
                | Fault::EvictVolatile
                | Fault::EvictAllKeys
                // A clock stepped forward or running fast ends leases early on the server, so
                // holders overlap; fences still come from that clock, raised above the last.
                | Fault::ClockForward
                | Fault::ClockForwardLease
                | Fault::ClockForwardMemory
                | Fault::ClockBack
                | Fault::ClockBackLease
                | Fault::ClockFast2x
                | Fault::ClockFast4x
                    if strategy.is_fenced() =>
                {
                    Claim::Fenced
                }
                // Full memory refuses new grants but deletes nothing.
                Fault::MemoryFull => Claim::Exclusive,
                // What `Client::deployment_warnings` warns of under any policy but
                // `noeviction`: the lock's own key evicted while its holder is inside.
                Fault::EvictVolatile | Fault::EvictAllKeys => Claim::DocumentedLoss,
                _ => Claim::NotClaimed,
            };
        }
        match (strategy, fault) {
            (Strategy::ExistsThenSet, Fault::None) => Claim::SeedsOverlap,
            (Strategy::ExistsThenSet | Strategy::SetnxExpire, Fault::Kill) => Claim::SeedsDeadlock,
            (
                Strategy::SetnxGetset | Strategy::SetNxExConstant | Strategy::TokenNoRenewal,
                Fault::Slow,
            ) => Claim::SeedsOverlap,
            _ => Claim::Measured,
        }
    }

    /// Whether `m` bears the expectation out. `None` when there is nothing to check: a cell
    /// measured for the record only.
    pub fn holds(self, m: &Measurement) -> Option<bool> {
        let clean_resource = m.lost_updates == 0 && m.stale_writes == 0;
        let exclusive = m.overlaps == 0
            && m.unheld_grants == 0
            && clean_resource
            && m.entered_after_crash != Some(0);
        let live = u128::from(m.longest_idle_ms) <= IDLE_BOUND.as_millis();
        match self {
            Claim::Exclusive => Some(exclusive),
            Claim::Live => Some(exclusive && live),
            Claim::InOrder => Some(exclusive && live && m.out_of_turn == 0),
            Claim::Fenced => Some(clean_resource),
            Claim::SeedsOverlap | Claim::DocumentedLoss => Some(m.overlaps > 0),
            Claim::SeedsDeadlock => Some(m.entered_after_crash == Some(0) && m.gave_up > 0),
            Claim::NotClaimed | Claim::Measured => None,
        }
    }

    /// Whether the cell must show a failure (a naive lock's, or one fencelock's documentation
    /// warns of). Such a failure is a race or a fault landing at the right moment, so one run
    /// may miss it by luck where another shows it: these cells are run again until it shows.
    pub fn expects_failure(self) -> bool {
        matches!(
            self,
            Claim::SeedsOverlap | Claim::SeedsDeadlock | Claim::DocumentedLoss
        )
    }

    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Claim::Exclusive => "exclusive",
            Claim::Live => "exclusive, live",
            Claim::InOrder => "exclusive, live, in order",
            Claim::Fenced => "fenced",
            Claim::NotClaimed => "not claimed",
            Claim::DocumentedLoss => "docs: loses locks",
            Claim::SeedsOverlap => "seeds: overlaps",
            Claim::SeedsDeadlock => "seeds: deadlock",
            Claim::Measured => "-",
        }
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}
