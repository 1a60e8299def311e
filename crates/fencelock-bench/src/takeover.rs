//! Scenario 8, lease takeover: what a lease costs when a holder's process goes, for the leases
//! `docs/production.md` sizes. A holder and a standby are separate processes, each a
//! `fencelock` client holding or waiting for one `Mutex` with a renewed lease: the bench itself,
//! run again with the hidden `lease-holder` subcommand. Three ways a holder goes:
//!
//! - killed (SIGKILL) at a random point of its renewal period: the standby waits for what is
//!   left of the lease;
//! - terminated (SIGTERM), which the holder handles by unlocking: the standby is woken by the
//!   release;
//! - frozen (SIGSTOP) for a share of the lease at a random point of its renewal period, then
//!   resumed (SIGCONT): a pause shorter than two thirds of the lease less the drift allowance
//!   is survived wherever it falls, one longer than the lease never is.
//!
//! Takeovers are timed from the moment the bench sends the signal to the moment the standby
//! prints it holds, on one clock. These are seconds that the lease decides, not speeds: a
//! loaded machine moves them by milliseconds.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::Rng;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::report::{Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

/// Pauses measured, as shares of the lease: one survived wherever it falls (below two thirds
/// less the drift allowance), one never survived (longer than the lease).
pub const PAUSES: [f64; 2] = [0.6, 1.2];

/// How a holder goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Departure {
    /// SIGKILL: the standby waits for the lease.
    Killed,
    /// SIGTERM, handled by unlocking.
    Terminated,
}

impl Departure {
    /// The name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Departure::Killed => "SIGKILL",
            Departure::Terminated => "SIGTERM (the holder unlocks)",
        }
    }
}

/// Takeover times after one kind of departure, at one lease.
#[derive(Clone, Debug, Serialize)]
pub struct Takeover {
    /// The holder's lease, renewed every third of it.
    pub lease_ms: u64,
    /// How the holder went.
    pub departure: Departure,
    /// Each round's time from the signal to the standby holding, ms.
    pub rounds_ms: Vec<f64>,
    /// The shortest round, ms.
    pub min_ms: f64,
    /// The median round, ms.
    pub median_ms: f64,
    /// The longest round, ms.
    pub max_ms: f64,
}

/// What pauses of one length did to the holder, at one lease.
#[derive(Clone, Debug, Serialize)]
pub struct Pause {
    /// The holder's lease, renewed every third of it.
    pub lease_ms: u64,
    /// How long the holder's process was stopped.
    pub pause_ms: u64,
    /// Rounds run.
    pub rounds: u32,
    /// Rounds after which the holder still held the lock and the standby did not.
    pub kept: u32,
    /// Rounds after which the holder knew it had lost the lock and the standby held it.
    pub lost: u32,
}

/// Scenario 8's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct TakeoverResults {
    /// Rounds of each measurement.
    pub rounds: u32,
    /// Takeover times, by lease and departure.
    pub takeovers: Vec<Takeover>,
    /// Pauses, by lease and length.
    pub pauses: Vec<Pause>,
}

/// Measures every lease of `settings.takeover_leases`.
///
/// # Errors
///
/// A failure of Redis or of a holder process, or a round where both or neither held the lock
/// after a pause.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<TakeoverResults> {
    let server = Server::start()?;
    let url = server.url();
    let program = settings.program.display().to_string();
    let mut takeovers = Vec::new();
    let mut pauses = Vec::new();
    for &lease in &settings.takeover_leases {
        for departure in [Departure::Killed, Departure::Terminated] {
            let mut rounds_ms = Vec::new();
            for round in 0..settings.takeover_rounds {
                progress.step(
                    &format!(
                        "{} ms lease, {}, round {}",
                        millis(lease),
                        departure.label(),
                        round + 1
                    ),
                    lease,
                );
                let name = format!("takeover-{}-{departure:?}-{round}", millis(lease));
                rounds_ms.push(takeover(&program, &url, &name, lease, departure).await?);
                progress.add_operations(1);
            }
            takeovers.push(summarize(lease, departure, rounds_ms));
        }
        for share in PAUSES {
            let pause = lease.mul_f64(share);
            let mut kept = 0;
            let mut lost = 0;
            for round in 0..settings.takeover_rounds {
                progress.step(
                    &format!(
                        "{} ms lease, paused {} ms, round {}",
                        millis(lease),
                        millis(pause),
                        round + 1
                    ),
                    pause + lease,
                );
                let name = format!("pause-{}-{}-{round}", millis(lease), millis(pause));
                if paused(&program, &url, &name, lease, pause).await? {
                    kept += 1;
                } else {
                    lost += 1;
                }
                progress.add_operations(1);
            }
            pauses.push(Pause {
                lease_ms: millis(lease),
                pause_ms: millis(pause),
                rounds: settings.takeover_rounds,
                kept,
                lost,
            });
        }
    }
    Ok(TakeoverResults {
        rounds: settings.takeover_rounds,
        takeovers,
        pauses,
    })
}

fn summarize(lease: Duration, departure: Departure, rounds_ms: Vec<f64>) -> Takeover {
    let mut sorted = rounds_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    Takeover {
        lease_ms: millis(lease),
        departure,
        min_ms: sorted.first().copied().unwrap_or(0.0),
        median_ms: median,
        max_ms: sorted.last().copied().unwrap_or(0.0),
        rounds_ms,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A pause of at least 300 ms (the standby's wait reaches Redis), then a random point of the
/// holder's renewal period.
fn random_point(lease: Duration) -> Duration {
    let renewal_ms = millis(lease / 3).max(1);
    Duration::from_millis(300 + rand::rng().random_range(0..renewal_ms))
}

/// The longest any answer of a holder may take: a takeover after a kill takes a lease.
fn answer_bound(lease: Duration) -> Duration {
    lease * 2 + Duration::from_secs(10)
}

/// A holder or standby process and its pipes.
pub(crate) struct Holder {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Holder {
    pub(crate) fn spawn(program: &str, url: &str, name: &str, lease: Duration) -> Result<Holder> {
        Holder::spawn_with(program, url, name, lease, &[])
    }

    /// [`spawn`](Holder::spawn) with more arguments of the `lease-holder` subcommand (`--fair`).
    pub(crate) fn spawn_with(
        program: &str,
        url: &str,
        name: &str,
        lease: Duration,
        more: &[&str],
    ) -> Result<Holder> {
        let mut child = Command::new(program)
            .args(["lease-holder", url, name, &millis(lease).to_string()])
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::io("starting a lease holder", e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Error::Stuck("a lease holder without pipes".to_owned()));
        };
        Ok(Holder {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    pub(crate) async fn send(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| Error::io("writing to a lease holder", e))
    }

    /// The next line that starts with one of `words`, within `bound`.
    pub(crate) async fn expect(&mut self, words: &[&str], bound: Duration) -> Result<String> {
        let wanted = async {
            while let Some(line) = self.lines.next_line().await.transpose() {
                let line = line.map_err(|e| Error::io("reading a lease holder", e))?;
                if words
                    .iter()
                    .any(|w| line.split_whitespace().next() == Some(*w))
                {
                    return Ok(line);
                }
            }
            Err(Error::Stuck(format!(
                "a lease holder exited before {words:?}"
            )))
        };
        tokio::time::timeout(bound, wanted)
            .await
            .map_err(|_| Error::Stuck(format!("no {words:?} within {bound:?}")))?
    }

    /// Asks for the lock and waits until it is held; returns when, in unix ns.
    pub(crate) async fn hold(&mut self, bound: Duration) -> Result<u64> {
        self.send("lock").await?;
        let line = self.expect(&["holding"], bound).await?;
        Ok(stamp(&line))
    }

    pub(crate) fn signal(&self, signal: Signal) -> Result<u64> {
        let at = unix_nanos();
        let pid = self
            .child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| Error::Stuck("a lease holder that already exited".to_owned()))?;
        kill(Pid::from_raw(pid), signal)
            .map_err(|e| Error::io(format!("sending {signal}"), std::io::Error::from(e)))?;
        Ok(at)
    }
}

/// The number after a line's first word (0 when there is none).
pub(crate) fn stamp(line: &str) -> u64 {
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One round: a holder, a standby waiting behind it, the holder killed or terminated at a
/// random point of its renewal period; the time until the standby holds, ms.
async fn takeover(
    program: &str,
    url: &str,
    name: &str,
    lease: Duration,
    departure: Departure,
) -> Result<f64> {
    let bound = answer_bound(lease);
    let mut holder = Holder::spawn(program, url, name, lease)?;
    holder.hold(bound).await?;
    let mut standby = Holder::spawn(program, url, name, lease)?;
    standby.send("lock").await?;
    standby.expect(&["waiting"], bound).await?;
    tokio::time::sleep(random_point(lease)).await;
    let gone_at = match departure {
        Departure::Killed => holder.signal(Signal::SIGKILL)?,
        Departure::Terminated => holder.signal(Signal::SIGTERM)?,
    };
    let held_at = stamp(&standby.expect(&["holding"], bound).await?);
    Ok(Duration::from_nanos(held_at.saturating_sub(gone_at)).as_secs_f64() * 1000.0)
}

/// One round: a holder frozen for `pause` at a random point of its renewal period, with a
/// standby waiting. `Ok(true)` when the holder still held the lock afterwards and the standby
/// did not, `Ok(false)` when the holder knew it had lost it and the standby held it.
async fn paused(
    program: &str,
    url: &str,
    name: &str,
    lease: Duration,
    pause: Duration,
) -> Result<bool> {
    let bound = answer_bound(lease);
    let mut holder = Holder::spawn(program, url, name, lease)?;
    holder.hold(bound).await?;
    let mut standby = Holder::spawn(program, url, name, lease)?;
    standby.send("lock").await?;
    standby.expect(&["waiting"], bound).await?;
    tokio::time::sleep(random_point(lease)).await;
    holder.signal(Signal::SIGSTOP)?;
    tokio::time::sleep(pause).await;
    holder.signal(Signal::SIGCONT)?;
    // What is left of the lease at most, then the standby's fallback and some slack: a lease
    // that was not renewed has ended by then, and the standby has taken the lock.
    let window = lease.saturating_sub(pause) + Duration::from_secs(3);
    let standby_held = match tokio::time::timeout(window, standby.expect(&["holding"], bound)).await
    {
        Ok(held) => {
            held?;
            true
        }
        Err(_) => false,
    };
    holder.send("status").await?;
    let status = holder.expect(&["held", "lost"], bound).await?;
    let holder_held = status.starts_with("held");
    match (holder_held, standby_held) {
        (true, false) => Ok(true),
        (false, true) => Ok(false),
        (true, true) => Err(Error::Stuck(format!(
            "{name}: the holder says it holds the lock, and the standby holds it too"
        ))),
        (false, false) => Err(Error::Stuck(format!(
            "{name}: the holder lost the lock ({status}) and the standby did not take it"
        ))),
    }
}

/// The hidden `lease-holder` subcommand: a `Mutex` (a `FairMutex` when `fair`) with a renewed
/// lease of `lease_ms`, driven on stdin. `lock` waits for the lock (printing `waiting` once
/// asked, `holding <unix ns>` once held); `status` prints `held` or `lost <how>`; SIGTERM
/// unlocks (printing `released <unix ns>`) and exits.
///
/// # Errors
///
/// A failed connection or lock operation, or an unknown command.
pub async fn holder_process(url: &str, name: &str, lease_ms: u64, fair: bool) -> Result<()> {
    let options = fencelock::ClientOptions::default()
        .default_lease(fencelock::Lease::Renewed(Duration::from_millis(lease_ms)));
    let client = fencelock::Client::connect_with_options(url, options).await?;
    let (mutex, fair_mutex) = if fair {
        (None, Some(client.fair_mutex(name)?))
    } else {
        (Some(client.mutex(name)?), None)
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::io("handling SIGTERM", e))?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut guard = None;
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Some(line) = line.map_err(|e| Error::io("reading stdin", e))? else {
                    break;
                };
                match line.as_str() {
                    "lock" => {
                        println!("waiting");
                        let held: fencelock::Guard = match (&mutex, &fair_mutex) {
                            (Some(mutex), _) => mutex.lock().await?.into(),
                            (None, Some(fair)) => fair.lock().await?.into(),
                            (None, None) => return Err(Error::Stuck("no lock".to_owned())),
                        };
                        guard = Some(held);
                        println!("holding {}", unix_nanos());
                    }
                    "status" => match &guard {
                        Some(held) if held.is_held() => println!("held"),
                        Some(held) => {
                            let how = tokio::time::timeout(Duration::from_secs(1), held.lost())
                                .await
                                .map_or_else(|_| "unknown".to_owned(), |lost| format!("{lost:?}"));
                            println!("lost {how}");
                        }
                        None => println!("lost never held"),
                    },
                    _ => return Err(Error::Parse(format!("lease holder command {line:?}"))),
                }
            }
            _ = terminate.recv() => {
                if let Some(held) = guard.take() {
                    held.unlock().await?;
                }
                println!("released {}", unix_nanos());
                break;
            }
        }
    }
    client.shutdown().await?;
    Ok(())
}

/// Measures, prints and writes `takeover.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<TakeoverResults> {
    println!("== takeover: a holder killed, terminated or paused, at each lease");
    let rounds = settings.takeover_rounds;
    let expected: Duration = settings
        .takeover_leases
        .iter()
        .map(|lease| *lease * 2 * rounds + lease.mul_f64(PAUSES.iter().sum::<f64>() + 1.0) * rounds)
        .sum();
    let progress = Progress::new("takeover", expected);
    let results = measure(settings, &progress).await?;
    let summary: Vec<String> = results
        .takeovers
        .iter()
        .map(|t| {
            format!(
                "{} ms {:?} median {:.2} s",
                t.lease_ms,
                t.departure,
                t.median_ms / 1000.0
            )
        })
        .collect();
    progress.finish(&summary.join(", "));
    let report = Report {
        scenario: "takeover".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![
            (
                format!(
                    "Takeover: from the signal to the standby holding the lock ({} rounds)",
                    results.rounds
                ),
                takeover_table(&results.takeovers),
            ),
            (
                "Pauses: the holder's process stopped (SIGSTOP), then resumed".to_owned(),
                pause_table(&results.pauses),
            ),
        ],
        notes: vec![
            "holder and standby are separate processes, each a fencelock client with one Mutex \
             on a renewed lease (renewed every third of it); the holder goes at a random point \
             of its renewal period, at least 300 ms after the standby asked"
                .to_owned(),
            "after a pause, the holder is asked whether it holds the lock once what was left of \
             its lease and 3 s more have passed: kept means it did and the standby did not, \
             lost that it knew it had lost the lock and the standby held it (any other outcome \
             fails the run)"
                .to_owned(),
        ],
    };
    let chart = Chart {
        title: "Takeover after a SIGKILL, median (the lease decides it)".to_owned(),
        unit: "seconds from the kill to the standby holding".to_owned(),
        bars: results
            .takeovers
            .iter()
            .filter(|t| t.departure == Departure::Killed)
            .map(|t| Bar {
                label: format!("fencelock, lease {}", seconds(t.lease_ms as f64)),
                value: t.median_ms / 1000.0,
            })
            .collect(),
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}

/// Milliseconds as seconds for a table: `2.03 s`.
fn seconds(ms: f64) -> String {
    format!("{:.2} s", ms / 1000.0)
}

fn takeover_table(takeovers: &[Takeover]) -> Table {
    let mut table = Table::new(&["lease", "holder stopped by", "fastest", "median", "slowest"]);
    for t in takeovers {
        table.row(vec![
            seconds(t.lease_ms as f64),
            t.departure.label().to_owned(),
            seconds(t.min_ms),
            seconds(t.median_ms),
            seconds(t.max_ms),
        ]);
    }
    table
}

fn pause_table(pauses: &[Pause]) -> Table {
    let mut table = Table::new(&[
        "lease",
        "pause",
        "rounds",
        "holder kept the lock",
        "holder lost it, the standby took it",
    ]);
    for p in pauses {
        table.row(vec![
            seconds(p.lease_ms as f64),
            seconds(p.pause_ms as f64),
            p.rounds.to_string(),
            p.kept.to_string(),
            p.lost.to_string(),
        ]);
    }
    table
}
