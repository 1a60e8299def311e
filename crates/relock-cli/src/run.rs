//! `relock run`: hold a lock while a command runs.
//!
//! The command runs in a process group of its own, so that signals reach it exactly once
//! (relock passes on SIGINT, SIGTERM, SIGHUP and SIGQUIT) and so that a lost lock stops
//! everything the command started, not only its first process.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use relock::{Client, Error, LockKind, Lost};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::lock::{Guard, Lock};
use crate::{exit, output, Failure, RunPlan, Target};

pub(crate) async fn run(client: &Client, target: &Target, plan: RunPlan) -> Result<u8, Failure> {
    let lock = Lock::new(
        client,
        plan.want,
        &plan.name,
        plan.lease,
        &crate::holder_label(),
    )?;
    let mut signals = Signals::new()?;
    let guard = tokio::select! {
        guard = acquire(client, target, &lock, &plan) => guard?,
        sig = signals.next() => {
            return Err(Failure::new(
                128 + sig as u8,
                format!("interrupted by {sig} while waiting for lock {:?}", plan.name),
            ));
        }
    };
    let mut child = match spawn(&plan, &guard) {
        Ok(child) => child,
        Err(failure) => {
            let _ = guard.unlock().await;
            return Err(failure);
        }
    };
    match supervise(&mut child, &guard, &mut signals, plan.kill_grace).await? {
        Ending::Exited(status) => finish(guard, &plan.name, status).await,
        Ending::Lost(reason) => Err(Failure::new(
            exit::LOST,
            format!(
                "lost lock {:?} while the command ran ({reason}); the command was stopped",
                plan.name
            ),
        )),
    }
}

/// Takes the lock as `plan` says. A Redis that stays unreachable past the wait (the library
/// retries it until then) is reported naming `target`, as when it cannot be reached at start.
async fn acquire(
    client: &Client,
    target: &Target,
    lock: &Lock,
    plan: &RunPlan,
) -> Result<Guard, Failure> {
    match lock.take(plan.wait).await {
        Ok(guard) => Ok(guard),
        Err(Error::Held { .. }) => {
            let holder = who_holds(client, &plan.name, lock.kind()).await;
            Err(Failure::new(
                exit::HELD,
                format!("{holder}; not waiting (--no-wait)"),
            ))
        }
        Err(e @ Error::Timeout { .. }) => {
            let holder = who_holds(client, &plan.name, lock.kind()).await;
            Err(Failure::new(exit::TIMEOUT, format!("{e}: {holder}")))
        }
        Err(e) if matches!(e, Error::Redis(_)) || e.is_unavailable() => Err(Failure::at(target, e)),
        Err(e) => Err(e.into()),
    }
}

/// Who holds the lock of `kind` under `name`, as far as Redis tells, for messages.
async fn who_holds(client: &Client, name: &str, kind: LockKind) -> String {
    let found = client
        .locks_named(name)
        .await
        .ok()
        .and_then(|locks| locks.into_iter().find(|info| info.kind == kind));
    match found {
        Some(info) => output::describe(&info),
        None => format!("{kind} {name:?} is held"),
    }
}

fn spawn(plan: &RunPlan, guard: &Guard) -> Result<Child, Failure> {
    let (program, rest) = plan
        .command
        .split_first()
        .ok_or_else(|| Failure::new(exit::USAGE, "no command to run"))?;
    Command::new(program)
        .args(rest)
        .env("RELOCK_NAME", &plan.name)
        .env("RELOCK_FENCE", guard.fence().to_string())
        .process_group(0)
        .spawn()
        .map_err(|e| Failure::new(exit::CANNOT_RUN, format!("cannot run {program:?}: {e}")))
}

enum Ending {
    Exited(ExitStatus),
    Lost(Lost),
}

async fn supervise(
    child: &mut Child,
    guard: &Guard,
    signals: &mut Signals,
    kill_grace: Duration,
) -> Result<Ending, Failure> {
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::new(exit::SOFTWARE, format!("waiting for the command: {e}")))?;
                return Ok(Ending::Exited(status));
            }
            reason = guard.lost() => {
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
async fn finish(guard: Guard, name: &str, status: ExitStatus) -> Result<u8, Failure> {
    let held_throughout = guard.is_held();
    match guard.unlock().await {
        Ok(()) if held_throughout => Ok(exit_code(status)),
        Ok(()) | Err(Error::NotHeld { .. }) => Err(Failure::new(
            exit::LOST,
            format!("lock {name:?} was lost before the command finished"),
        )),
        Err(e) => {
            eprintln!("relock: could not release lock {name:?} ({e}); it ends with its lease");
            Ok(exit_code(status))
        }
    }
}

/// The command's exit code, or 128 + the signal that killed it, as shells report it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::SOFTWARE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(exit::SOFTWARE),
        (None, None) => exit::SOFTWARE,
    }
}

/// The signals relock passes on to the command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
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
        })
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}
