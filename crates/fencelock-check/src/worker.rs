//! A worker process: from the common start time to the common end, it acquires the lock, runs a
//! critical section that increments the protected counter by a non-atomic read-modify-write,
//! and releases, reporting every step as an [`Event`]. The faults that happen inside a worker
//! (kill, pause, slow section) are injected by the worker itself, in the first section it enters
//! once the time the plan names has come, so that they land exactly where they should rather
//! than where a signal happens to arrive.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use fencelock_testkit::process::monotonic_nanos;
use nix::sys::signal::{raise, Signal};

use crate::args::WorkerArgs;
use crate::error::{CheckError, Result};
use crate::event::{nanos, Event, EventLog};
use crate::fault::Fault;
use crate::handoff::{self, FaultWindow};
use crate::lock::{crash, Acquired, Locker};
use crate::resource::Resource;
use crate::strategy::Strategy;

/// The worker's planned fault, due at a time, taken by the first lane that holds the lock
/// from then on.
#[derive(Debug)]
struct PlannedFault {
    due: StdMutex<Option<u64>>,
}

impl PlannedFault {
    /// When the fault is due, while no lane took it yet.
    fn due(&self) -> Option<u64> {
        self.due.lock().map_or(None, |due| *due)
    }

    /// Takes the fault for the calling lane; false when another lane took it first.
    fn take(&self) -> bool {
        self.due.lock().is_ok_and(|mut due| due.take().is_some())
    }
}

/// Runs a worker to its end time on a runtime of its own, one task per lane.
///
/// # Errors
///
/// When the lock or the resource cannot be reached at the start, the resource fails later, or
/// the checker stops reading.
pub fn run(args: &WorkerArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(work(Arc::new(args.clone())))
}

async fn work(args: Arc<WorkerArgs>) -> Result<()> {
    let resource = Resource::connect(&args.resource_url).await?;
    let lockers = Locker::connect_lanes(&args).await?;
    let fault = Arc::new(PlannedFault {
        due: StdMutex::new(args.fault_at_ns),
    });
    sleep_until(args.start_ns).await;
    let mut lanes = tokio::task::JoinSet::new();
    for (lane, locker) in lockers.into_iter().enumerate() {
        lanes.spawn(run_lane(
            Arc::clone(&args),
            lane,
            locker,
            resource.for_lane(lane),
            Arc::clone(&fault),
        ));
    }
    while let Some(done) = lanes.join_next().await {
        done.map_err(|e| CheckError::Worker(format!("a lane failed: {e}")))??;
    }
    Ok(())
}

/// One lane's loop: acquire, critical section, release, until the end time.
async fn run_lane(
    args: Arc<WorkerArgs>,
    lane: usize,
    mut locker: Locker,
    mut resource: Resource,
    planned: Arc<PlannedFault>,
) -> Result<()> {
    let mut log = EventLog::for_lane(lane);
    let timeout = Duration::from_millis(args.acquire_timeout_ms);
    let mut window = FaultWindow::open(&args).await?;
    while monotonic_nanos() < args.end_ns {
        let due = planned.due();
        let fault = due
            .filter(|&due| monotonic_nanos() >= due)
            .map(|_| args.fault);
        if let (Some(quiet), Some(quiet_from)) = (fault.and_then(|f| f.quiet(args.lease())), due) {
            sleep_until(quiet_from + nanos(quiet)).await;
        }
        // Only `SETNX` + `EXPIRE` becomes the holder before its acquire returns.
        let crash_in_acquire = fault == Some(Fault::Kill) && args.strategy == Strategy::SetnxExpire;
        let asked = monotonic_nanos();
        log.emit(&Event::Ask { t: asked })?;
        let (fence, shared) = match locker.acquire(timeout, crash_in_acquire, &mut log).await? {
            Acquired::Held { fence, shared } => (fence, shared),
            Acquired::GaveUp(reason) => {
                log.emit(&Event::GaveUp {
                    t: monotonic_nanos(),
                    reason,
                })?;
                continue;
            }
        };
        // Of the lanes that saw the fault due, the first to hold the lock injects it.
        let fault = fault.filter(|_| planned.take());
        log.emit(&Event::Enter {
            t: monotonic_nanos(),
            fence,
            shared,
            asked,
        })?;
        if args.fault.is_handoff() {
            read_grant_back(&args, &locker, &mut log).await?;
        }
        let hold = window.as_ref().and_then(FaultWindow::hold_now);
        let section = Section {
            fence,
            shared,
            fault,
            hold,
        };
        critical_section(&args, &mut resource, &section, &mut log).await?;
        log.emit(&Event::Exit {
            t: monotonic_nanos(),
        })?;
        if let (Some(window), Some(_)) = (window.as_mut(), hold) {
            window.before_release(&mut log).await?;
        }
        locker.release().await;
        tokio::time::sleep(args.work()).await;
    }
    Ok(())
}

/// Reads the grant just acquired back from the lock's Redis, and logs it unheld when Redis
/// shows another fence or none: a handoff fault can hand a worker a grant that Redis never
/// wrote. Only a prompt answer tells, and only a prompt answer is waited for: a read held up
/// (by a stopped Redis) would hold the section past a lease that cannot be renewed meanwhile,
/// and find that lease ended.
async fn read_grant_back(args: &WorkerArgs, locker: &Locker, log: &mut EventLog) -> Result<()> {
    let within = args.lease() / READ_BACK_WITHIN;
    if let Ok(Some(false)) = tokio::time::timeout(within, locker.granted_on_server()).await {
        log.emit(&Event::Unheld {
            t: monotonic_nanos(),
        })?;
    }
    Ok(())
}

/// The share of the lease within which a read-back must answer to count: a renewed lease never
/// ends that soon after its grant.
const READ_BACK_WITHIN: u32 = 4;

/// One hold of the lock, as its critical section runs it.
struct Section {
    /// The grant's fence, for fenced strategies.
    fence: Option<u64>,
    /// Whether the hold is a reader's.
    shared: bool,
    /// The fault this section injects, if any.
    fault: Option<Fault>,
    /// How long it lasts, inside a fault's window.
    hold: Option<Duration>,
}

/// Reads the counter, lets time pass (and the fault happen), and writes it back plus one; a
/// shared (reader's) section only reads.
async fn critical_section(
    args: &WorkerArgs,
    resource: &mut Resource,
    section: &Section,
    log: &mut EventLog,
) -> Result<()> {
    let Section {
        fence,
        shared,
        fault,
        hold,
    } = *section;
    let sent = monotonic_nanos();
    let value = resource.read(fence).await?;
    log.emit(&Event::Read {
        sent,
        done: monotonic_nanos(),
        value,
    })?;
    // A refused read means a later holder has been here: this one's turn is over.
    let Some(value) = value else { return Ok(()) };
    match fault {
        Some(Fault::Kill) if args.strategy != Strategy::SetnxExpire => crash(log)?,
        Some(Fault::Pause) => {
            log.emit(&Event::Pause {
                t: monotonic_nanos(),
            })?;
            // Every thread stops, the lease renewal included, until the checker sends SIGCONT.
            raise(Signal::SIGSTOP)?;
        }
        Some(Fault::Slow) => {
            log.emit(&Event::Slow {
                t: monotonic_nanos(),
            })?;
            tokio::time::sleep(args.lease() * 5 / 2).await;
        }
        Some(Fault::Partition) => {
            log.emit(&Event::Cut {
                t: monotonic_nanos(),
            })?;
            // The checker cuts the link on this line and heals it after 2.5 leases; the
            // section goes on meanwhile, without renewals.
            tokio::time::sleep(args.lease() * 5 / 2).await;
        }
        // A holder long inside, while the checker stops a worker waiting behind it (which thus
        // has a place in line), or while the waiters line up far apart.
        Some(
            Fault::PatternTap | Fault::HalfOpenWaiter | Fault::FrozenWaiter | Fault::PubsubDelay,
        ) => {
            tokio::time::sleep(handoff::HOLD_LONG).await;
        }
        // Part of a server fault's scenario rather than a fault of its own: a holder that stays
        // inside, within its lease, while the servers fail.
        Some(
            Fault::Restart
            | Fault::RestartAof
            | Fault::MinorityKill
            | Fault::MinorityPause
            | Fault::MinorityRestart
            | Fault::Failover
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
            | Fault::ClockFast2x
            | Fault::ClockFast4x,
        ) => tokio::time::sleep(args.lease() * 4 / 5).await,
        _ => {}
    }
    tokio::time::sleep(hold.unwrap_or_else(|| args.work())).await;
    if shared {
        return Ok(());
    }
    let sent = monotonic_nanos();
    let accepted = resource.write(fence, value + 1).await?;
    log.emit(&Event::Write {
        sent,
        done: monotonic_nanos(),
        accepted,
    })?;
    Ok(())
}

async fn sleep_until(monotonic: u64) {
    let now = monotonic_nanos();
    if monotonic > now {
        tokio::time::sleep(Duration::from_nanos(monotonic - now)).await;
    }
}
