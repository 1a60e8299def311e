//! Leader election across real OS processes, against a real `redis-server`.
//!
//! `takeovers_keep_one_leader_at_a_time`: three candidate processes run [`Election::lead`],
//! whose task, while leading, goes through short units of work and reports each as an interval
//! of the machine's monotonic clock; an observer process reports every change it sees. The
//! leader is killed with SIGKILL (another takes over within one lease), the next one is frozen
//! with SIGSTOP past its lease (another takes over, and the frozen one, once resumed, learns
//! that it lost and stops its task without finishing the unit it was in), then the third is
//! shut down gracefully (it resigns, and a standby takes over at once, woken by the
//! announcement: the candidates' fallback is far longer than the bound). No two leaders'
//! units may overlap in time, fences rise with each leader, and the observer saw every leader
//! in order.

use std::time::{Duration, Instant};

use crate::common::{runtime, URL_ENV};
use fencelock::{Client, ClientOptions, Election, Lease, LockOptions};
use fencelock_testkit::process::{
    env_var, hear, monotonic_nanos, say, worker_index, Event, Workers,
};
use fencelock_testkit::{check_no_overlap, RedisServer};

/// Worker roles.
const CANDIDATE: &str = "election::candidate";
const OBSERVER: &str = "election::observer";

const ELECTION: &str = "scheduler";
/// The lease of each leadership, renewed every third of it.
const LEASE: Duration = Duration::from_millis(1500);
/// Far longer than any bound below: a standby that takes over in time after a resignation was
/// woken by its announcement.
const NO_FALLBACK: Duration = Duration::from_secs(30);
/// One unit of the leader's work.
const UNIT: Duration = Duration::from_millis(20);

/// Bounds on every wait, so that a hung worker fails the test instead of stalling it.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
const STEP_LIMIT: Duration = Duration::from_secs(15);
const REAP_LIMIT: Duration = Duration::from_secs(10);
/// How long a worker runs at most before giving up by itself.
const WORKER_LIMIT: Duration = Duration::from_secs(120);

/// Lines of the candidates' protocol: `LEADING fence`, `I fence enter exit` for each unit of
/// work, `STOPPED fence` when the task was stopped, `RESIGNED` after a graceful shutdown.
const LEADING: &str = "LEADING";
const STOPPED: &str = "STOPPED";
const RESIGNED: &str = "RESIGNED";
/// What the orchestrator sends a candidate to shut it down.
const SHUTDOWN: &str = "SHUTDOWN";
/// The observer's line for each change: `SEEN value fence`, or `SEEN none`.
const SEEN: &str = "SEEN";

/// The scenarios, named as libtest names the tests of module `election`.
pub(crate) const SCENARIOS: &[(&str, fn())] = &[(
    "election::takeovers_keep_one_leader_at_a_time",
    takeovers_keep_one_leader_at_a_time,
)];

/// The worker roles of these scenarios.
pub(crate) const WORKERS: &[(&str, fn())] =
    &[(CANDIDATE, candidate_worker), (OBSERVER, observer_worker)];

/// What the orchestrator learned from the candidates' lines so far.
#[derive(Default)]
struct Log {
    /// `(worker, fence)` of each `LEADING`, in order.
    leaders: Vec<(usize, u64)>,
    /// Every unit of work, `(enter, exit)`.
    units: Vec<(u64, u64)>,
    /// Workers that reported their task stopped.
    stopped: Vec<usize>,
    /// Workers whose output closed (they exited or were killed).
    closed: Vec<usize>,
}

impl Log {
    fn read(&mut self, candidates: &Workers, deadline: Instant) {
        match candidates.next_event(deadline) {
            Event::Line(worker, line) => self.record(worker, &line),
            Event::Closed(worker) => self.closed.push(worker),
        }
    }

    fn record(&mut self, worker: usize, line: &str) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            [LEADING, fence] => self.leaders.push((worker, number(fence))),
            ["I", _fence, enter, exit] => self.units.push((number(enter), number(exit))),
            [STOPPED, _fence] => self.stopped.push(worker),
            [RESIGNED] => {}
            _ => panic!("candidate {worker} printed {line:?}"),
        }
    }

    /// Reads candidate lines until a new leader reports, within [`STEP_LIMIT`]; returns it and
    /// when its line arrived.
    fn next_leader(&mut self, candidates: &Workers) -> (usize, Instant) {
        let deadline = Instant::now() + STEP_LIMIT;
        let known = self.leaders.len();
        while self.leaders.len() == known {
            self.read(candidates, deadline);
        }
        (self.leaders[known].0, Instant::now())
    }

    /// Reads candidate lines until `worker` reports its task stopped.
    fn wait_stopped(&mut self, candidates: &Workers, worker: usize) -> Instant {
        let deadline = Instant::now() + STEP_LIMIT;
        while !self.stopped.contains(&worker) {
            self.read(candidates, deadline);
        }
        Instant::now()
    }
}

fn number(text: &str) -> u64 {
    text.parse()
        .unwrap_or_else(|_| panic!("{text:?} is not a number"))
}

fn takeovers_keep_one_leader_at_a_time() {
    let server = RedisServer::start();
    let envs = [(URL_ENV, server.url())];
    let observer = Workers::spawn(OBSERVER, 1, &envs);
    // The observer reports the state before any candidate runs.
    match observer.next_event(Instant::now() + STARTUP_LIMIT) {
        Event::Line(0, line) if line == format!("{SEEN} none") => {}
        other => panic!("observer: {other:?}"),
    }
    let mut candidates = Workers::spawn(CANDIDATE, 3, &envs);
    let mut log = Log::default();
    let deadline = Instant::now() + STARTUP_LIMIT;
    while log.leaders.is_empty() {
        log.read(&candidates, deadline);
    }
    let first = log.leaders[0].0;
    std::thread::sleep(LEASE);

    // SIGKILL: a standby takes over once the dead leader's lease ran out.
    candidates.kill(first);
    let killed = Instant::now();
    let (second, took_over) = log.next_leader(&candidates);
    let after_kill = took_over - killed;
    println!("    SIGKILL to takeover: {after_kill:?} (lease {LEASE:?})");
    assert!(
        after_kill <= LEASE + Duration::from_millis(1500),
        "the takeover after a crash took {after_kill:?}, more than one lease and a margin"
    );
    candidates.reap_killed(first, Instant::now() + REAP_LIMIT);
    std::thread::sleep(LEASE);

    // SIGSTOP past the lease: the third takes over; the frozen one, resumed, stops its task.
    candidates.pause(second);
    let (third, _) = log.next_leader(&candidates);
    assert_ne!(third, second);
    candidates.resume(second);
    let resumed = Instant::now();
    let stopped = log.wait_stopped(&candidates, second) - resumed;
    println!("    SIGCONT to the frozen leader stopping its task: {stopped:?}");
    assert!(
        stopped < Duration::from_secs(5),
        "the resumed leader took {stopped:?} to learn that it lost"
    );
    std::thread::sleep(LEASE);

    // A graceful shutdown resigns: the resumed candidate, campaigning again, takes over at once.
    candidates.send(third, SHUTDOWN);
    let shut_down = Instant::now();
    let (fourth, took_over) = log.next_leader(&candidates);
    let after_resign = took_over - shut_down;
    println!("    resignation to takeover: {after_resign:?}");
    assert_eq!(fourth, second, "the only candidate left campaigning");
    assert!(
        after_resign < Duration::from_secs(3),
        "took {after_resign:?} after a resignation: the announcement did not wake the standby"
    );
    let status = candidates.reap(third, Instant::now() + REAP_LIMIT);
    assert!(
        status.success(),
        "the shut down candidate exited with {status}"
    );
    std::thread::sleep(LEASE / 2);
    candidates.kill(second);
    candidates.reap_killed(second, Instant::now() + REAP_LIMIT);

    // Every line the candidates printed, then the checks.
    let deadline = Instant::now() + STEP_LIMIT;
    while log.closed.len() < 3 {
        log.read(&candidates, deadline);
    }
    let fences: Vec<u64> = log.leaders.iter().map(|&(_, fence)| fence).collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fences must rise with each leader: {fences:?}"
    );
    assert!(
        log.units.len() > 10,
        "the leaders worked: {}",
        log.units.len()
    );
    if let Err(overlap) = check_no_overlap(&mut log.units) {
        panic!("two leaders worked at once: {overlap}");
    }

    // The observer saw each leader, in order (and nobody leading in some gaps between).
    let seen = observed_fences(&observer, fences.len());
    assert_eq!(seen, fences, "the observer saw every leader in order");
}

/// The fences of the leaders the observer reported, until it reported `count` of them.
fn observed_fences(observer: &Workers, count: usize) -> Vec<u64> {
    let deadline = Instant::now() + STEP_LIMIT;
    let mut fences = Vec::new();
    while fences.len() < count {
        match observer.next_event(deadline) {
            Event::Line(_, line) => match line.split(' ').collect::<Vec<_>>().as_slice() {
                [SEEN, "none"] => {}
                [SEEN, _value, fence] => fences.push(number(fence)),
                _ => panic!("observer printed {line:?}"),
            },
            Event::Closed(_) => panic!("the observer exited"),
        }
    }
    fences
}

fn options() -> ClientOptions {
    ClientOptions::default().wake_fallback(NO_FALLBACK)
}

fn election(client: &Client) -> Election {
    client
        .election_with_options(
            ELECTION,
            LockOptions::default().lease(Lease::Renewed(LEASE)),
        )
        .expect("valid election")
}

/// Campaigns under [`Election::lead`] until told [`SHUTDOWN`] on stdin; while leading, prints
/// `LEADING fence`, then each unit of work as `I fence enter exit`, and `STOPPED fence` when
/// the task is stopped.
fn candidate_worker() {
    let url = env_var(URL_ENV);
    let value = format!("candidate-{}", worker_index());
    runtime().block_on(async {
        let client = Client::connect_with_options(url.as_str(), options())
            .await
            .expect("the candidate connects to redis");
        let shutdown = async {
            let heard = tokio::task::spawn_blocking(|| hear(SHUTDOWN));
            tokio::select! {
                _ = heard => {}
                () = tokio::time::sleep(WORKER_LIMIT) => {}
            }
        };
        election(&client)
            .lead(value, shutdown, |fence| async move {
                say(&format!("{LEADING} {fence}"));
                let _stopped = ReportStop(fence.get());
                loop {
                    let enter = monotonic_nanos();
                    tokio::time::sleep(UNIT).await;
                    let exit = monotonic_nanos();
                    say(&format!("I {fence} {enter} {exit}"));
                }
            })
            .await
            .expect("leading ends only on shutdown");
        say(RESIGNED);
    });
    // The stdin reader still blocks; the process ends here all the same.
    std::process::exit(0);
}

/// Prints `STOPPED fence` when the leader's task is dropped.
struct ReportStop(u64);

impl Drop for ReportStop {
    fn drop(&mut self) {
        say(&format!("{STOPPED} {}", self.0));
    }
}

/// Prints every change of the leader as `SEEN value fence` or `SEEN none`.
fn observer_worker() {
    let url = env_var(URL_ENV);
    runtime().block_on(async {
        let client = Client::connect(url.as_str())
            .await
            .expect("the observer connects to redis");
        let mut watch = election(&client).observe();
        let give_up = Instant::now() + WORKER_LIMIT;
        while Instant::now() < give_up {
            match watch.next().await.expect("the leader can be read") {
                Some(leader) => say(&format!("{SEEN} {} {}", leader.value(), leader.fence())),
                None => say(&format!("{SEEN} none")),
            }
        }
    });
}
