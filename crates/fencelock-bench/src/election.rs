//! Scenario 7, leader election beside etcd's: how long the service is leaderless when the
//! leader's process is killed (the next leader waits for the lease) and when it resigns, with
//! the same lease on both sides, and what each leadership change costs the server with 0, 1,
//! 10 or 100 observers following it.
//!
//! Candidates are separate processes: for fencelock the bench itself, run again with the hidden
//! `elect-candidate` subcommand; for etcd a Python candidate on etcd's own Election service
//! (`peers/elect_etcd.py`, which says why not `etcdctl elect`). Both read `campaign VALUE` and
//! `resign` on stdin and print `leading <unix ns>` once they lead, so that a takeover is timed
//! from the moment the bench kills or asks the leader to resign to the moment the next one
//! prints it leads, on the same clock. Observers are `etcdctl elect -l` processes for etcd and
//! fencelock clients in one `elect-observers` process for fencelock, each with connections of its
//! own; both print each leader's value.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::latency::{Latencies, LatencySummary};
use crate::peers::{self, EtcdServer};
use crate::progress::Progress;
use crate::redisinfo::{self, Meter, Usage};
use crate::report::{ratio, short_number, Bar, Chart, Output, Report, Table};
use crate::server::Server;
use crate::Settings;

const ETCD_CANDIDATE: &str = include_str!("../peers/elect_etcd.py");

/// Leadership changes measured at each observer count.
const CHANGES: u64 = 10;

/// The longest a candidate or observer may take to answer: generous, since a takeover after a
/// crash alone takes a lease, and a hundred processes start slowly on a small shared machine.
const ANSWER_BOUND: Duration = Duration::from_secs(60);

/// The election systems compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// fencelock's `Election` on the bench's Redis.
    Fencelock,
    /// etcd's Election service on a private etcd.
    Etcd,
}

impl System {
    /// The name in tables.
    pub fn label(self) -> &'static str {
        match self {
            System::Fencelock => "fencelock",
            System::Etcd => "etcd",
        }
    }
}

/// How the leader goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Departure {
    /// SIGKILL of the leader's process: the next leader waits for the lease.
    Killed,
    /// The leader resigns.
    Resigned,
}

impl Departure {
    /// The name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Departure::Killed => "leader killed (SIGKILL)",
            Departure::Resigned => "leader resigns",
        }
    }
}

/// Takeover times of one system after one kind of departure.
#[derive(Clone, Debug, Serialize)]
pub struct Takeover {
    /// The system measured.
    pub system: System,
    /// How the leader went.
    pub departure: Departure,
    /// Each round's time from the kill or the resignation to the next leader leading, in ms.
    pub rounds_ms: Vec<f64>,
    /// Their distribution.
    pub summary: LatencySummary,
}

/// What each leadership change cost with a number of observers.
#[derive(Clone, Debug, Serialize)]
pub struct ObserverCost {
    /// The system measured.
    pub system: System,
    /// Observers following the election, each with its own connections.
    pub observers: usize,
    /// Changes measured: each a campaign won, seen by every observer, then a resignation.
    pub changes: u64,
    /// Redis commands per change (fencelock only).
    pub redis_commands: Option<f64>,
    /// Redis main-thread CPU µs per change (fencelock only).
    pub redis_cpu_us: Option<f64>,
    /// gRPC messages etcd received per change, every service (etcd only).
    pub etcd_requests: Option<f64>,
    /// Watch responses etcd sent per change (etcd only).
    pub etcd_watch_responses: Option<f64>,
}

/// Scenario 7's measurements.
#[derive(Clone, Debug, Serialize)]
pub struct ElectionResults {
    /// fencelock's lease, renewed every third of it.
    pub lease_ms: u64,
    /// etcd's lease TTL (whole seconds), kept alive every third of it.
    pub etcd_ttl_ms: u64,
    /// Rounds of each takeover measurement.
    pub rounds: u32,
    /// The etcd measured, or why it was skipped.
    pub etcd: String,
    /// Takeover times.
    pub takeovers: Vec<Takeover>,
    /// Costs per change.
    pub observer_costs: Vec<ObserverCost>,
}

/// One system's servers and how to start its processes.
#[derive(Clone)]
struct Side {
    system: System,
    /// The program and first arguments of a candidate (the endpoint, name and lease follow).
    candidate: (String, Vec<String>),
    endpoint: String,
    meter: Option<Meter>,
}

/// Measures fencelock and, when it can be installed and is chosen, etcd.
///
/// # Errors
///
/// A failure of Redis, of fencelock or of a candidate process.
pub async fn measure(settings: &Settings, progress: &Progress) -> Result<ElectionResults> {
    let server = Server::start()?;
    let url = server.url();
    let program = settings.program.display().to_string();
    let mut sides = vec![Side {
        system: System::Fencelock,
        candidate: (program, vec!["elect-candidate".to_owned()]),
        endpoint: url.clone(),
        meter: Some(Meter::connect(&url).await?),
    }];
    let etcd = start_etcd(settings);
    let etcd_status = match &etcd {
        Ok((_, version, side)) => {
            sides.push(side.clone());
            version.clone()
        }
        Err(reason) => {
            println!("election: etcd skipped: {reason}");
            format!("skipped: {reason}")
        }
    };
    let mut takeovers = Vec::new();
    for side in &sides {
        for departure in [Departure::Killed, Departure::Resigned] {
            takeovers.push(takeover(side, departure, settings, progress).await?);
        }
    }
    let mut observer_costs = Vec::new();
    for side in &sides {
        for &observers in &settings.observers {
            progress.step(
                &format!("{}, {observers} observer(s)", side.system.label()),
                Duration::ZERO,
            );
            observer_costs.push(observer_cost(side, observers, settings.election_lease).await?);
            progress.add_operations(CHANGES);
        }
    }
    drop(etcd);
    Ok(ElectionResults {
        lease_ms: millis(settings.election_lease),
        etcd_ttl_ms: etcd_ttl(settings.election_lease).as_secs() * 1000,
        rounds: settings.election_rounds,
        etcd: etcd_status,
        takeovers,
        observer_costs,
    })
}

/// etcd's lease for a fencelock lease: etcd's are whole seconds.
fn etcd_ttl(lease: Duration) -> Duration {
    Duration::from_secs(lease.as_secs() + u64::from(lease.subsec_nanos() > 0))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A private etcd with its version and its side, when etcd is chosen and can be installed.
fn start_etcd(settings: &Settings) -> std::result::Result<(EtcdServer, String, Side), String> {
    if !(settings.peers.is_empty() || settings.peers.iter().any(|p| p == "etcd")) {
        return Err("not chosen".to_owned());
    }
    peers::ensure_etcd()?;
    let worker = peers::python_worker(&settings.peers_dir, "elect_etcd.py", ETCD_CANDIDATE)?;
    let server = EtcdServer::start()?;
    let version = std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "etcd (version unknown)".to_owned());
    let side = Side {
        system: System::Etcd,
        candidate: ("python3".to_owned(), vec![worker]),
        endpoint: server.endpoint(),
        meter: None,
    };
    Ok((server, version, side))
}

/// A candidate process and its pipes.
struct Candidate {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Candidate {
    async fn spawn(side: &Side, name: &str, lease: Duration) -> Result<Candidate> {
        let (program, args) = &side.candidate;
        let mut child = Command::new(program)
            .args(args)
            .arg(&side.endpoint)
            .arg(name)
            .arg(millis(lease).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::io(format!("starting the {} candidate", side.system.label()), e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Error::Stuck("a candidate without pipes".to_owned()));
        };
        Ok(Candidate {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    async fn send(&mut self, command: &str) -> Result<()> {
        let line = format!("{command}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| Error::io("writing to a candidate", e))
    }

    /// Reads lines until one that starts with `word` and returns the number after it (0 when
    /// there is none).
    async fn expect(&mut self, word: &str) -> Result<u64> {
        let wanted = async {
            while let Some(line) = self.lines.next_line().await.transpose() {
                let line = line.map_err(|e| Error::io("reading a candidate", e))?;
                let mut words = line.split_whitespace();
                if words.next() == Some(word) {
                    return Ok(words.next().and_then(|n| n.parse().ok()).unwrap_or(0));
                }
            }
            Err(Error::Stuck(format!("a candidate exited before {word:?}")))
        };
        tokio::time::timeout(ANSWER_BOUND, wanted)
            .await
            .map_err(|_| Error::Stuck(format!("no {word:?} within {ANSWER_BOUND:?}")))?
    }

    /// Campaigns and waits until this candidate leads.
    async fn lead(&mut self, value: &str) -> Result<u64> {
        self.send(&format!("campaign {value}")).await?;
        self.expect("leading").await
    }

    /// SIGKILL, and the moment it was sent.
    async fn kill(&mut self) -> Result<u64> {
        let at = unix_nanos();
        self.child
            .start_kill()
            .map_err(|e| Error::io("killing a candidate", e))?;
        self.child
            .wait()
            .await
            .map_err(|e| Error::io("reaping a candidate", e))?;
        Ok(at)
    }
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Rounds of: a leader, a standby campaigning behind it, then the leader killed (at a random
/// point of its renewal period) or resigning; the time until the standby leads.
async fn takeover(
    side: &Side,
    departure: Departure,
    settings: &Settings,
    progress: &Progress,
) -> Result<Takeover> {
    let lease = settings.election_lease;
    let mut latencies = Latencies::new();
    let mut rounds_ms = Vec::new();
    for round in 0..settings.election_rounds {
        let what = format!(
            "{}, {}, round {}",
            side.system.label(),
            departure.label(),
            round + 1
        );
        progress.step(&what, lease);
        let name = format!("takeover-{departure:?}-{round}");
        let mut leader = Candidate::spawn(side, &name, lease).await?;
        leader.lead("first").await?;
        let mut standby = Candidate::spawn(side, &name, lease).await?;
        standby.send("campaign second").await?;
        standby.expect("campaigning").await?;
        // The standby's campaign reaches the server, then the leader goes at a random point
        // between two renewals, as a crash would.
        let renewal_ms = millis(lease / 3).max(1);
        let pause = 300 + rand::rng().random_range(0..renewal_ms);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let gone_at = match departure {
            Departure::Killed => leader.kill().await?,
            Departure::Resigned => {
                let at = unix_nanos();
                leader.send("resign").await?;
                at
            }
        };
        let led_at = standby.expect("leading").await?;
        let taken = Duration::from_nanos(led_at.saturating_sub(gone_at));
        latencies.record(taken);
        rounds_ms.push(taken.as_secs_f64() * 1000.0);
        progress.add_operations(1);
        // The standby's lease is left to expire under a name no later round uses.
        standby.kill().await?;
        if departure == Departure::Resigned {
            leader.kill().await?;
        }
    }
    Ok(Takeover {
        system: side.system,
        departure,
        rounds_ms,
        summary: latencies.summary(),
    })
}

/// Observer processes and the values they print, in one stream.
struct Observers {
    children: Vec<Child>,
    seen: mpsc::UnboundedReceiver<String>,
}

impl Observers {
    async fn spawn(side: &Side, name: &str, count: usize) -> Result<Observers> {
        let (sender, seen) = mpsc::unbounded_channel();
        let mut children = Vec::new();
        if count > 0 {
            let commands: Vec<Command> = match side.system {
                System::Fencelock => {
                    // The fencelock candidate's program is the bench itself.
                    let mut command = Command::new(&side.candidate.0);
                    command
                        .arg("elect-observers")
                        .arg(&side.endpoint)
                        .arg(name)
                        .arg(count.to_string());
                    vec![command]
                }
                System::Etcd => (0..count)
                    .map(|_| {
                        let mut command = Command::new("etcdctl");
                        command
                            .args(["--endpoints", &side.endpoint, "elect", "-l", name])
                            .env("ETCDCTL_API", "3");
                        command
                    })
                    .collect(),
            };
            for mut command in commands {
                let mut child = command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| Error::io("starting an observer", e))?;
                let stdout = child
                    .stdout
                    .take()
                    .ok_or_else(|| Error::Stuck("an observer without stdout".to_owned()))?;
                let sender = sender.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stdout).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if sender.send(line).is_err() {
                            break;
                        }
                    }
                });
                children.push(child);
            }
        }
        Ok(Observers { children, seen })
    }

    /// Waits until `count` observers printed `value`.
    async fn seen_by(&mut self, value: &str, count: usize) -> Result<()> {
        let all = async {
            let mut seen = 0;
            while seen < count {
                match self.seen.recv().await {
                    Some(line) if line == value => seen += 1,
                    Some(_) => {}
                    None => return Err(Error::Stuck("every observer exited".to_owned())),
                }
            }
            Ok(())
        };
        tokio::time::timeout(ANSWER_BOUND, all)
            .await
            .map_err(|_| Error::Stuck(format!("{count} observers did not all see {value:?}")))?
    }
}

/// What `CHANGES` leadership changes cost with `count` observers, once every observer has seen
/// a first leader (the start-up of a hundred processes is not a change).
async fn observer_cost(side: &Side, count: usize, lease: Duration) -> Result<ObserverCost> {
    let name = format!("observed-{count}");
    let mut observers = Observers::spawn(side, &name, count).await?;
    let mut driver = Candidate::spawn(side, &name, lease).await?;
    driver.lead("v0").await?;
    observers.seen_by("v0", count).await?;
    driver.send("resign").await?;
    driver.expect("resigned").await?;
    let stretch = match &side.meter {
        Some(meter) => Some(meter.start().await?),
        None => None,
    };
    let etcd_before = match side.system {
        System::Etcd => Some(etcd_messages(&side.endpoint).await?),
        System::Fencelock => None,
    };
    for change in 1..=CHANGES {
        let value = format!("v{change}");
        driver.lead(&value).await?;
        observers.seen_by(&value, count).await?;
        driver.send("resign").await?;
        driver.expect("resigned").await?;
    }
    let usage: Option<Usage> = match stretch {
        Some(stretch) => Some(stretch.finish().await?),
        None => None,
    };
    let etcd = match etcd_before {
        Some(before) => Some(etcd_messages(&side.endpoint).await?.since(before)),
        None => None,
    };
    drop(observers.children);
    let per_change = |n: f64| n / CHANGES as f64;
    Ok(ObserverCost {
        system: side.system,
        observers: count,
        changes: CHANGES,
        redis_commands: usage.map(|u| u.commands_per(CHANGES)),
        redis_cpu_us: usage.map(|u| u.cpu_us_per(CHANGES)),
        etcd_requests: etcd.map(|m| per_change(m.received)),
        etcd_watch_responses: etcd.map(|m| per_change(m.watch_sent)),
    })
}

/// etcd's gRPC message counters, from its Prometheus metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct EtcdMessages {
    /// Messages received, every method of every service.
    received: f64,
    /// Messages sent on watch streams.
    watch_sent: f64,
}

impl EtcdMessages {
    fn since(self, before: EtcdMessages) -> EtcdMessages {
        EtcdMessages {
            received: self.received - before.received,
            watch_sent: self.watch_sent - before.watch_sent,
        }
    }
}

/// Reads `GET /metrics` of the etcd at `endpoint` (`http://127.0.0.1:PORT`).
async fn etcd_messages(endpoint: &str) -> Result<EtcdMessages> {
    let address = endpoint.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| Error::io(format!("connecting to etcd at {address}"), e))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .map_err(|e| Error::io("asking etcd for its metrics", e))?;
    let mut body = String::new();
    stream
        .read_to_string(&mut body)
        .await
        .map_err(|e| Error::io("reading etcd's metrics", e))?;
    parse_etcd_messages(&body)
}

fn parse_etcd_messages(metrics: &str) -> Result<EtcdMessages> {
    let mut messages = EtcdMessages::default();
    let mut found = false;
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let received = series.starts_with("grpc_server_msg_received_total{");
        let watch_sent = series.starts_with("grpc_server_msg_sent_total{")
            && series.contains("grpc_method=\"Watch\"");
        if !(received || watch_sent) {
            continue;
        }
        let value: f64 = value
            .parse()
            .map_err(|_| Error::Parse(format!("etcd metric {line:?}")))?;
        found = true;
        if received {
            messages.received += value;
        } else {
            messages.watch_sent += value;
        }
    }
    if !found {
        return Err(Error::Parse(
            "etcd's metrics have no gRPC message counters".to_owned(),
        ));
    }
    Ok(messages)
}

/// The hidden `elect-candidate` subcommand: a fencelock candidate driven on stdin.
///
/// # Errors
///
/// A failed connection or election operation, or an unknown command.
pub async fn candidate_process(url: &str, name: &str, lease_ms: u64) -> Result<()> {
    let client = fencelock::Client::connect(url).await?;
    let lease = fencelock::Lease::Renewed(Duration::from_millis(lease_ms));
    let options = fencelock::LockOptions::default().lease(lease);
    let election = client.election_with_options(name, options)?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut leadership = None;
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| Error::io("reading stdin", e))?
    {
        match line.split_once(' ').unwrap_or((line.as_str(), "")) {
            ("campaign", value) => {
                println!("campaigning");
                leadership = Some(election.campaign(value).await?);
                println!("leading {}", unix_nanos());
            }
            ("resign", _) => {
                if let Some(leadership) = leadership.take() {
                    leadership.resign().await?;
                }
                println!("resigned {}", unix_nanos());
            }
            _ => return Err(Error::Parse(format!("candidate command {line:?}"))),
        }
    }
    client.shutdown().await?;
    Ok(())
}

/// The hidden `elect-observers` subcommand: `count` fencelock clients, each observing `name` and
/// printing each leader's value, until killed.
///
/// # Errors
///
/// A failed connection or read.
pub async fn observers_process(url: &str, name: &str, count: usize) -> Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..count {
        let client = fencelock::Client::connect(url).await?;
        let election = client.election(name)?;
        set.spawn(async move {
            let _client = client;
            let mut watch = election.observe();
            loop {
                if let Some(leader) = watch.next().await? {
                    println!("{}", leader.value());
                }
            }
        });
    }
    match set.join_next().await {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(Error::Stuck(format!("an observer ended abnormally: {e}"))),
        None => Ok(()),
    }
}

/// Measures, prints and writes `election.{json,md,png}`.
///
/// # Errors
///
/// As [`measure`], and when the results cannot be written.
pub async fn run(settings: &Settings, output: &Output) -> Result<ElectionResults> {
    println!(
        "== election: takeover after a kill and a resignation, and observers, fencelock vs etcd"
    );
    let rounds = settings.election_rounds * 4;
    let progress = Progress::new("election", settings.election_lease * rounds);
    let results = measure(settings, &progress).await?;
    progress.finish(&summary(&results));
    let report = Report {
        scenario: "election".to_owned(),
        run: settings.run_info.clone(),
        results: results.clone(),
        tables: vec![
            (
                format!(
                    "Takeover: from the kill or the resignation to the next leader leading \
                     (fencelock lease {} ms, etcd lease TTL {} ms, {} rounds)",
                    results.lease_ms, results.etcd_ttl_ms, results.rounds
                ),
                takeover_table(&results.takeovers),
            ),
            (
                format!("Cost of each leadership change ({CHANGES} changes per row)"),
                observer_table(&results.observer_costs),
            ),
        ],
        notes: notes(&results),
    };
    let chart = Chart {
        title: "Election takeover, median (lower is better)".to_owned(),
        unit: "ms from the leader's kill or resignation to the next leader".to_owned(),
        bars: results
            .takeovers
            .iter()
            .map(|t| Bar {
                label: format!("{}, {}", t.system.label(), t.departure.label()),
                value: t.summary.p50_ms,
            })
            .collect(),
    };
    output.publish(&report, &[chart])?;
    Ok(results)
}

fn find(takeovers: &[Takeover], system: System, departure: Departure) -> Option<&Takeover> {
    takeovers
        .iter()
        .find(|t| t.system == system && t.departure == departure)
}

fn takeover_table(takeovers: &[Takeover]) -> Table {
    let mut table = Table::new(&[
        "departure",
        "fencelock p50 ms",
        "fencelock max ms",
        "etcd p50 ms",
        "etcd max ms",
        "fencelock ÷ etcd p50",
        "fencelock ÷ etcd max",
    ]);
    for departure in [Departure::Killed, Departure::Resigned] {
        let fencelock = find(takeovers, System::Fencelock, departure);
        let etcd = find(takeovers, System::Etcd, departure);
        let cell = |t: Option<&Takeover>, pick: fn(&LatencySummary) -> f64| {
            t.map_or_else(|| "n/a".to_owned(), |t| short_number(pick(&t.summary)))
        };
        let versus = |pick: fn(&LatencySummary) -> f64| match (fencelock, etcd) {
            (Some(r), Some(e)) => ratio(pick(&r.summary), pick(&e.summary)),
            _ => "n/a".to_owned(),
        };
        table.row(vec![
            departure.label().to_owned(),
            cell(fencelock, |s| s.p50_ms),
            cell(fencelock, |s| s.max_ms),
            cell(etcd, |s| s.p50_ms),
            cell(etcd, |s| s.max_ms),
            versus(|s| s.p50_ms),
            versus(|s| s.max_ms),
        ]);
    }
    table
}

fn observer_table(costs: &[ObserverCost]) -> Table {
    let mut table = Table::new(&[
        "observers",
        "fencelock Redis cmds/change, scripts' included",
        "fencelock Redis µs/change",
        "etcd gRPC requests/change",
        "etcd watch responses/change",
    ]);
    let mut counts: Vec<usize> = costs.iter().map(|c| c.observers).collect();
    counts.sort_unstable();
    counts.dedup();
    let figure = |value: Option<f64>| value.map_or_else(|| "n/a".to_owned(), short_number);
    for count in counts {
        let of = |system| {
            costs
                .iter()
                .find(|c| c.system == system && c.observers == count)
        };
        let fencelock = of(System::Fencelock);
        let etcd = of(System::Etcd);
        table.row(vec![
            count.to_string(),
            figure(fencelock.and_then(|c| c.redis_commands)),
            figure(fencelock.and_then(|c| c.redis_cpu_us)),
            figure(etcd.and_then(|c| c.etcd_requests)),
            figure(etcd.and_then(|c| c.etcd_watch_responses)),
        ]);
    }
    table
}

fn notes(results: &ElectionResults) -> Vec<String> {
    vec![
        "candidates are separate processes; the takeover is timed from the moment the bench \
         sends SIGKILL or the resign command to the moment the next leader prints it leads \
         (the same clock); the killed leader goes at a random point of its renewal period"
            .to_owned(),
        "etcd candidates use etcd's Election service through its JSON gateway, on a lease of \
         their own kept alive every third of its TTL: etcdctl elect has no TTL flag (its \
         session is always 60 s); etcd leases are whole seconds"
            .to_owned(),
        format!(
            "a change: a campaign won, seen by every observer, then a resignation; the \
             counts include the leader's own lease renewals and, for etcd, its keepalives; \
             fencelock observers are fencelock clients (a command and a subscriber connection \
             each) in one process, etcd observers `etcdctl elect -l` processes; etcd: {}",
            results.etcd
        ),
        "the two counts are not the same unit, so no ratio is given: fencelock's are every \
         command Redis ran, the commands each script runs inside Redis included (Redis counts \
         them); etcd's are the gRPC messages that reached it (grpc_server_msg_received_total \
         over every method, grpc_server_msg_sent_total of Watch), while the reads and writes \
         its Election service makes in-process are not counted; compare how each grows with \
         the observers; etcd reports no CPU time per request: Redis µs n/a"
            .to_owned(),
        redisinfo::CPU_NOTE.to_owned(),
    ]
}

/// The scenario in one line: takeover p50 of each system after a kill and a resignation.
fn summary(results: &ElectionResults) -> String {
    let parts: Vec<String> = results
        .takeovers
        .iter()
        .map(|t| {
            format!(
                "{} {} p50 {} ms",
                t.system.label(),
                t.departure.label(),
                short_number(t.summary.p50_ms)
            )
        })
        .collect();
    format!("takeover {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_message_counters_are_summed_from_the_metrics() {
        let metrics = "# HELP grpc_server_msg_received_total Total number\n\
            grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 5\n\
            grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 1.5e+06\n\
            grpc_server_msg_sent_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 10\n\
            grpc_server_msg_sent_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 5\n";
        let parsed = parse_etcd_messages(metrics).ok();
        assert_eq!(
            parsed,
            Some(EtcdMessages {
                received: 1_500_005.0,
                watch_sent: 10.0
            })
        );
        assert!(parse_etcd_messages("process_open_fds 7\n").is_err());
        assert!(
            parse_etcd_messages("grpc_server_msg_sent_total{grpc_method=\"Watch\"} x\n").is_err()
        );
    }

    #[test]
    fn etcd_leases_round_up_to_whole_seconds() {
        assert_eq!(etcd_ttl(Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(
            etcd_ttl(Duration::from_millis(1500)),
            Duration::from_secs(2)
        );
    }
}
