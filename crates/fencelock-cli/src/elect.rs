//! `fencelock elect` runs a command whenever this instance leads an election; `fencelock leader`
//! prints who leads, and with `--watch` each change.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use fencelock::{Client, Election, Leader, Lease, LockKind, LockOptions};

use crate::run::{self, Ending, Signals};
use crate::{exit, output, parse_duration, Failure, Target};

/// How long `fencelock elect` waits before campaigning again after a term ended or Redis could
/// not be reached, so that a command that fails at once does not spin.
const PAUSE_BETWEEN_TERMS: Duration = Duration::from_secs(1);

/// `fencelock elect`: the election to campaign in, and the command to run while leading.
#[derive(Debug)]
#[non_exhaustive]
pub struct ElectPlan {
    /// The election's name.
    pub name: String,
    /// The value this candidate publishes while it leads; `None` for host/pid.
    pub value: Option<String>,
    /// Run the command for one term only.
    pub once: bool,
    /// The lease of a leadership, renewed while the command runs.
    pub lease: Duration,
    /// After a lost leadership, how long the command has between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Give up when the campaign closes a cycle of waits, checked after this long and again
    /// every such interval (`--deadlock-check`).
    pub deadlock_check: Option<Duration>,
    /// The command and its arguments: at least the program.
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name.
    name: String,
    /// The value published while this instance leads (default: host/pid).
    #[arg(long, value_name = "V")]
    value: Option<String>,
    /// Run the command for one term: exit with its code, or 75 when leadership is lost.
    #[arg(long)]
    once: bool,
    /// Lease of the leadership: how long a crashed leader keeps the election (renewed every
    /// third).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    lease: Duration,
    /// After a lost leadership, how long the command has to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_grace: Duration,
    /// Give up, exiting 79, when the campaign closes a cycle of waits (a deadlock: the leader
    /// waits for a lock that a run of this process's task holds), checked after campaigning
    /// AFTER (1s when bare) and every AFTER after that; the message names each step of the
    /// cycle.
    #[arg(
        long,
        value_name = "AFTER",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1s",
        value_parser = parse_duration
    )]
    deadlock_check: Option<Duration>,
    /// The command and its arguments; `--` before it is needed only when the command starts
    /// with `-`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

impl ElectPlan {
    pub(crate) fn of(args: ElectArgs) -> ElectPlan {
        ElectPlan {
            name: args.name,
            value: args.value,
            once: args.once,
            lease: args.lease,
            kill_grace: args.kill_grace,
            deadlock_check: args.deadlock_check,
            command: args.command,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name.
    pub(crate) name: String,
    /// Print each change of leader as it happens, until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Print JSON (one object a line) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) const ELECT_HELP: &str = "\
fencelock campaigns in the election NAME and, whenever this instance leads, runs the command with
FENCELOCK_NAME, FENCELOCK_FENCE (the leadership's fencing token: pass it to what you write to) and
FENCELOCK_LEADER (the published value) in its environment. The leadership's lease is renewed while
the command runs. When leadership is lost, the command's process group gets SIGTERM, then
SIGKILL after --kill-grace, and fencelock campaigns again (with --once it exits 75). When the
command exits by itself, fencelock resigns, so another instance takes over at once, and campaigns
again (with --once it exits with the command's code). SIGINT, SIGTERM, SIGHUP and SIGQUIT are
passed to the command; once it exits fencelock resigns and exits with its code.

Examples:
  fencelock elect scheduler -- ./run-scheduler
  fencelock elect --value \"$(hostname):8080\" --lease 10s primary -- ./serve --primary
  fencelock elect --once compaction ./compact";

pub(crate) const LEADER_HELP: &str = "\
Prints the leader's value, fence and how long it has led, or `nobody leads` and exits 78.
With --watch, prints the current state and then each change (a new leader, a new value, nobody
leading) as it happens, until interrupted. With --json, a failure is reported on standard
error as one JSON object too: {\"error\": \"...\", \"exit_code\": N}.

Examples:
  fencelock leader scheduler
  fencelock leader scheduler --watch --json";

/// Campaigns, runs the command while leading, and campaigns again unless `--once`.
pub(crate) async fn elect(
    client: &Client,
    target: &Target,
    plan: ElectPlan,
) -> Result<u8, Failure> {
    let mut options = LockOptions::default().lease(Lease::Renewed(plan.lease));
    if let Some(after) = plan.deadlock_check {
        options = options.deadlock_check(after);
    }
    let election = client.election_with_options(&plan.name, options)?;
    let value = plan.value.clone().unwrap_or_else(crate::holder_label);
    let mut signals = Signals::new()?;
    loop {
        if let Some(code) = term(&election, target, &plan, &value, &mut signals).await? {
            return Ok(code);
        }
        tokio::select! {
            () = tokio::time::sleep(PAUSE_BETWEEN_TERMS) => {}
            sig = signals.next() => return Err(interrupted(sig, &plan.name)),
        }
    }
}

/// One campaign and the term that follows: `Some(exit code)` when fencelock is to exit.
async fn term(
    election: &Election,
    target: &Target,
    plan: &ElectPlan,
    value: &str,
    signals: &mut Signals,
) -> Result<Option<u8>, Failure> {
    let leadership = tokio::select! {
        leadership = election.campaign(value) => leadership,
        sig = signals.next() => return Err(interrupted(sig, &plan.name)),
    };
    let leadership = match leadership {
        Ok(leadership) => leadership,
        Err(e) if e.is_unavailable() => {
            eprintln!(
                "fencelock: cannot campaign in election {:?} ({e}); trying again",
                plan.name
            );
            return Ok(None);
        }
        Err(e) => return Err(redis_failure(target, e)),
    };
    let fence = leadership.fence().to_string();
    let spawned = run::spawn(
        &plan.command,
        (LockKind::Election, &plan.name),
        &fence,
        &[("FENCELOCK_LEADER", value)],
    );
    let mut child = match spawned {
        Ok(child) => child,
        Err(failure) => {
            let _ = leadership.resign().await;
            return Err(failure);
        }
    };
    let ending = run::supervise(&mut child, leadership.lost(), signals, plan.kill_grace).await?;
    match ending {
        Ending::Lost(reason) if plan.once => Err(Failure::new(
            exit::LOST,
            format!(
                "lost leadership of election {:?} while the command ran ({reason}); the \
                 command was stopped",
                plan.name
            ),
        )),
        Ending::Lost(reason) => {
            eprintln!(
                "fencelock: lost leadership of election {:?} ({reason}); the command was stopped; \
                 campaigning again",
                plan.name
            );
            Ok(None)
        }
        Ending::Exited(status) => {
            // An error only says that leadership had ended already.
            let _ = leadership.resign().await;
            if plan.once || signals.received().is_some() {
                return Ok(Some(run::exit_code(status)));
            }
            eprintln!(
                "fencelock: the command exited ({status}) while leading election {:?}; resigned, \
                 campaigning again",
                plan.name
            );
            Ok(None)
        }
    }
}

fn interrupted(sig: nix::sys::signal::Signal, name: &str) -> Failure {
    Failure::new(
        128 + sig as u8,
        format!("interrupted by {sig} while campaigning in election {name:?}"),
    )
}

/// A failure of the library, naming where Redis is when Redis refused or could not be reached,
/// as `fencelock run` does.
fn redis_failure(target: &Target, e: fencelock::Error) -> Failure {
    if matches!(e, fencelock::Error::Redis(_)) || e.is_unavailable() {
        Failure::at(target, e)
    } else {
        e.into()
    }
}

/// Prints the leader once, or each change with `watch`.
pub(crate) async fn leader(
    client: &Client,
    target: &Target,
    args: LeaderArgs,
) -> Result<u8, Failure> {
    let election = client.election(&args.name)?;
    if !args.watch {
        let leader = election
            .leader()
            .await
            .map_err(|e| redis_failure(target, e))?;
        output::print(&describe(&args.name, leader.as_ref(), args.json));
        return Ok(if leader.is_some() {
            exit::SUCCESS
        } else {
            exit::NOT_HELD
        });
    }
    let mut watch = election.observe();
    let mut signals = Signals::new()?;
    loop {
        tokio::select! {
            state = watch.next() => {
                let state = state.map_err(|e| redis_failure(target, e))?;
                output::print(&describe(&args.name, state.as_ref(), args.json));
            }
            _ = signals.next() => return Ok(exit::SUCCESS),
        }
    }
}

/// One line about the leader of election `name`, as text or JSON.
fn describe(name: &str, leader: Option<&Leader>, json: bool) -> String {
    let mut line = match (leader, json) {
        (None, false) => "nobody leads".to_owned(),
        (Some(leader), false) => format!(
            "{} (fence {}, leading for {:.1}s)",
            leader.value(),
            leader.fence(),
            SystemTime::now()
                .duration_since(leader.since())
                .unwrap_or_default()
                .as_secs_f64()
        ),
        (None, true) => serde_json::json!({ "name": name, "leader": null }).to_string(),
        (Some(leader), true) => serde_json::json!({
            "name": name,
            "leader": {
                "value": leader.value(),
                "fence": leader.fence().get(),
                "since_ms": leader
                    .since()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX)),
            },
        })
        .to_string(),
    };
    line.push('\n');
    line
}
