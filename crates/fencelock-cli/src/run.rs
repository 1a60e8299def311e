//! `fencelock run`: hold a lock while a command runs.
//!
//! The command runs in a process group of its own, so that signals reach it exactly once
//! (fencelock passes on SIGINT, SIGTERM, SIGHUP and SIGQUIT) and so that a lost lock stops
//! everything the command started, not only its first process.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use fencelock::{Client, Error, Guard, LockKind, Lost};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::holds;
use crate::lock::{self, Lock, Want};
use crate::{exit, output, Failure, LockPlan, RunPlan, Target};

/// Before the first progress line of `--verbose`: a lock that is free within this long
/// needs none.
const FIRST_PROGRESS: Duration = Duration::from_secs(1);

/// Between progress lines of `--verbose`.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub(crate) async fn run(client: &Client, target: &Target, plan: RunPlan) -> Result<u8, Failure> {
    let mut signals = Signals::new()?;
    let taken = take(client, target, &plan.lock, &mut signals).await?;
    let fence = fence_of(&taken.guard, plan.lock.want);
    let inside = (plan.lock.want.kind(), plan.lock.name.as_str());
    let mut child = match spawn(&plan.command, inside, &fence, &[]) {
        Ok(child) => child,
        Err(failure) => {
            let _ = taken.guard.unlock().await;
            return Err(failure);
        }
    };
    match supervise(
        &mut child,
        taken.guard.lost(),
        &mut signals,
        plan.kill_grace,
    )
    .await?
    {
        Ending::Exited(status) => finish(taken, &plan.lock.name, status).await,
        Ending::Lost(reason) => Err(Failure::new(
            exit::LOST,
            format!(
                "lost lock {:?} while the command ran ({reason}); the command was stopped",
                plan.lock.name
            ),
        )),
    }
}

/// `fencelock hold`: takes the lock, prints its fence, and holds it until standard input ends
/// or a signal comes.
pub(crate) async fn hold(client: &Client, target: &Target, plan: LockPlan) -> Result<u8, Failure> {
    let mut signals = Signals::new()?;
    let taken = take(client, target, &plan, &mut signals).await?;
    output::print(&format!("{}\n", fence_of(&taken.guard, plan.want)));
    tokio::select! {
        () = stdin_closed() => {}
        _ = signals.next() => {}
        reason = taken.guard.lost() => {
            return Err(Failure::new(
                exit::LOST,
                format!("lost lock {:?} while it was held ({reason})", plan.name),
            ));
        }
    }
    match taken.release().await {
        Ok(()) => Ok(exit::SUCCESS),
        Err(Error::NotHeld { .. }) => Err(Failure::new(
            exit::LOST,
            format!("lock {:?} was lost while it was held", plan.name),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Completes when standard input reaches its end (or cannot be read), throwing away what it
/// reads. The reading thread is left behind when something else ends the hold first: a
/// runtime's blocking read would keep fencelock from exiting.
async fn stdin_closed() {
    let (closed, on_close) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = closed.send(());
    });
    let _ = on_close.await;
}

/// A lock taken for a plan, and the instant before which it is not to be released.
struct Taken {
    guard: Guard,
    keep_until: Option<Instant>,
}

impl Taken {
    async fn release(self) -> fencelock::Result<()> {
        lock::unlock(self.guard, self.keep_until).await
    }
}

/// Takes the lock of `plan`, unless a signal comes first.
async fn take(
    client: &Client,
    target: &Target,
    plan: &LockPlan,
    signals: &mut Signals,
) -> Result<Taken, Failure> {
    let lock = Lock::new(
        client,
        plan.want,
        &plan.name,
        plan.lease,
        &crate::holder_label(),
        plan.deadlock_check,
    )?;
    let guard = tokio::select! {
        guard = acquire(client, target, &lock, plan) => guard?,
        sig = signals.next() => {
            return Err(Failure::new(
                128 + sig as u8,
                format!("interrupted by {sig} while waiting for lock {:?}", plan.name),
            ));
        }
    };
    if let Some(warning) = lock.total_mismatch(client).await {
        eprintln!("fencelock: warning: {warning}");
    }
    let keep_until = plan
        .hold_at_least
        .and_then(|at_least| Instant::now().checked_add(at_least));
    Ok(Taken { guard, keep_until })
}

/// Takes the lock as `plan` says. A Redis that stays unreachable past the wait (the library
/// retries it until then) is reported naming `target`, as when it cannot be reached at start.
async fn acquire(
    client: &Client,
    target: &Target,
    lock: &Lock,
    plan: &LockPlan,
) -> Result<Guard, Failure> {
    let taken = if plan.verbose {
        tokio::select! {
            taken = lock.take(plan.wait) => taken,
            never = progress(client, lock, &plan.name) => match never {},
        }
    } else {
        lock.take(plan.wait).await
    };
    let (code, timeout) = match taken {
        Ok(guard) => return Ok(guard),
        Err(Error::Held { .. }) => (exit::HELD, None),
        Err(e @ Error::Timeout { .. }) => (exit::TIMEOUT, Some(e)),
        Err(e) if matches!(e, Error::Redis(_)) || e.is_unavailable() => {
            return Err(Failure::at(target, e))
        }
        Err(e) => return Err(e.into()),
    };
    let code = plan.busy.exit_code.unwrap_or(code);
    if plan.busy.quiet {
        return Err(Failure::silent(code));
    }
    let holder = who_holds(client, &plan.name, lock).await;
    let message = match timeout {
        Some(e) => format!("{e}: {holder}"),
        None => format!("{holder}; not waiting (--no-wait)"),
    };
    Err(Failure::new(code, message))
}

/// Says on standard error, every few seconds, who holds the lock, how many wait and how long
/// this run has waited; never ends.
async fn progress(client: &Client, lock: &Lock, name: &str) -> std::convert::Infallible {
    let started = Instant::now();
    let mut next = started + FIRST_PROGRESS;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let state = match find(client, name, lock.kind()).await {
            Some(info) => format!(
                "{}; {} waiting",
                output::describe(&info),
                info.waiting_clients
            ),
            None if lock.kind().is_none() => format!("{} {name:?}", lock.describe()),
            None => format!("{} {name:?}, which is being released", lock.describe()),
        };
        eprintln!(
            "fencelock: waited {} for {state}",
            output::human(started.elapsed())
        );
        next += PROGRESS_EVERY;
    }
}

/// What Redis tells of the lock of `kind` under `name`, if it is held.
async fn find(client: &Client, name: &str, kind: Option<LockKind>) -> Option<fencelock::LockInfo> {
    let kind = kind?;
    client
        .locks_named(name)
        .await
        .ok()
        .and_then(|locks| locks.into_iter().find(|info| info.kind == kind))
}

/// Who holds `lock` under `name`, as far as Redis tells, for messages.
async fn who_holds(client: &Client, name: &str, lock: &Lock) -> String {
    match find(client, name, lock.kind()).await {
        Some(info) => output::describe(&info),
        None => format!("{} {name:?} is held", lock.describe()),
    }
}

/// The fence the command is given: none (empty) for a lock in a foreign layout, which has
/// none.
fn fence_of(guard: &Guard, want: Want) -> String {
    if want.fences() {
        guard.fence().to_string()
    } else {
        String::new()
    }
}

/// Starts `command` in a process group of its own, inside the lock `kind` named `name`, with
/// `FENCELOCK_NAME`, `FENCELOCK_FENCE`, `FENCELOCK_HOLDS` (what this process was handed, and
/// this lock) and `more` in its environment.
pub(crate) fn spawn(
    command: &[String],
    (kind, name): (LockKind, &str),
    fence: &str,
    more: &[(&str, &str)],
) -> Result<Child, Failure> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command to run"))?;
    // Read and checked when the command line was.
    let handed = holds::handed().unwrap_or_default();
    let holds = holds::handing_down(&handed, Some((kind, name)));
    Command::new(program)
        .args(rest)
        .env("FENCELOCK_NAME", name)
        .env("FENCELOCK_FENCE", fence)
        .env(holds::HOLDS_ENV, holds)
        .envs(more.iter().copied())
        .process_group(0)
        .spawn()
        .map_err(|e| Failure::new(exit::CANNOT_RUN, format!("cannot run {program:?}: {e}")))
}

pub(crate) enum Ending {
    Exited(ExitStatus),
    Lost(Lost),
}

/// Waits for the command to exit, passing signals on to it, and stops it when `lost`
/// completes first.
pub(crate) async fn supervise(
    child: &mut Child,
    lost: impl std::future::Future<Output = Lost>,
    signals: &mut Signals,
    kill_grace: Duration,
) -> Result<Ending, Failure> {
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let mut lost = std::pin::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::new(exit::SOFTWARE, format!("waiting for the command: {e}")))?;
                return Ok(Ending::Exited(status));
            }
            reason = &mut lost => {
                stop(child, group, kill_grace).await;
                return Ok(Ending::Lost(reason));
            }
            sig = signals.next() => {
                if let Some(group) = group {
                    let _ = killpg(group, sig);
                }
            }
        }
    }
}

/// SIGTERM to the command's process group, then SIGKILL if it is still there after `grace`.
async fn stop(child: &mut Child, group: Option<Pid>, grace: Duration) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = child.wait().await;
    }
}

/// Releases the lock after the command exited and picks the exit code: the command's own
/// when the lock held throughout, the lost-lock code when it did not.
async fn finish(taken: Taken, name: &str, status: ExitStatus) -> Result<u8, Failure> {
    let held_throughout = taken.guard.is_held();
    match taken.release().await {
        Ok(()) if held_throughout => Ok(exit_code(status)),
        Ok(()) | Err(Error::NotHeld { .. }) => Err(Failure::new(
            exit::LOST,
            format!("lock {name:?} was lost before the command finished"),
        )),
        Err(e) => {
            eprintln!("fencelock: could not release lock {name:?} ({e}); it ends with its lease");
            Ok(exit_code(status))
        }
    }
}

/// The command's exit code, or 128 + the signal that killed it, as shells report it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(exit::SOFTWARE),
        (None, None) => exit::SOFTWARE,
    }
}

/// The signals fencelock passes on to the command.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    /// The last signal received, if any.
    received: Option<Signal>,
}

impl Signals {
    pub(crate) fn new() -> Result<Self, Failure> {
        let listen = |kind| {
            signal(kind).map_err(|e| {
                Failure::new(exit::SOFTWARE, format!("cannot listen for signals: {e}"))
            })
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
            quit: listen(SignalKind::quit())?,
            received: None,
        })
    }

    /// The next signal received.
    pub(crate) async fn next(&mut self) -> Signal {
        let sig = tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        };
        self.received = Some(sig);
        sig
    }

    /// The last signal received, if any.
    pub(crate) fn received(&self) -> Option<Signal> {
        self.received
    }
}
