//! What each operation costs Redis, as Redis itself reports it: every call a client sends
//! (`MONITOR`'s lines from a client) and every command a script runs in it (its `lua` lines),
//! and the docs that quote those costs checked against them.
//!
//! A doc quotes a cost with a marker naming this file and a scenario measured here:
//! `6 commands<!-- figure asserted by crates/fencelock/tests/locks/costs.rs: mutex.offer -->
//! (`EVALSHA GET ZPOPMIN TIME SET PUBLISH`)`. The number before the marker must be the
//! scenario's count, and a list of commands in backticks right after it (in parentheses, after
//! a colon or bare) must be the scenario's commands in the order Redis ran them. A marker naming
//! a scenario this file does not measure fails, and so does a doc that names this file in no
//! marker at all (a quote that lost its check).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use fencelock::{Client, ClientOptions, Guard, Lease, LockOptions};
use fencelock_testkit::RedisServer;
use futures_core::Stream;

use crate::common::{client_with, ms};

/// This file, as the docs' markers name it.
const THIS: &str = "crates/fencelock/tests/locks/costs.rs";

/// The docs that quote a cost measured here, from the crate's root.
const DOCS: [&str; 6] = [
    "docs/design.md",
    "docs/fair.md",
    "docs/guide.md",
    "docs/multi.md",
    "docs/rwlock.md",
    "docs/semaphore.md",
];

/// How long a trace waits for the calls it expects before it reports what it saw.
const TRACE_LIMIT: Duration = Duration::from_secs(10);

/// Commands a connection sends for itself, not for an operation: left out of every trace.
const CONNECTION_COMMANDS: [&str; 13] = [
    "HELLO",
    "CLIENT",
    "PING",
    "SELECT",
    "AUTH",
    "ECHO",
    "INFO",
    "ROLE",
    "SUBSCRIBE",
    "SSUBSCRIBE",
    "PSUBSCRIBE",
    "UNSUBSCRIBE",
    "SUNSUBSCRIBE",
];

/// One call a client sent: its command, then each command its script ran, in order.
type Call = Vec<String>;

/// `MONITOR` on one server, collecting every line until [`stop`](Monitor::stop).
struct Monitor {
    server_url: String,
    lines: Arc<StdMutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    marks: u32,
}

impl Monitor {
    /// Starts monitoring `server`, and returns once the monitor has seen a mark sent after it
    /// started: nothing sent later is missed.
    async fn start(server: &RedisServer) -> Monitor {
        let url = server.url();
        let monitor = redis::Client::open(url.as_str())
            .expect("url")
            .get_async_monitor()
            .await
            .expect("MONITOR");
        let lines = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let task = tokio::spawn(async move {
            let mut messages = Box::pin(monitor.into_on_message::<String>());
            while let Some(line) = std::future::poll_fn(|cx| messages.as_mut().poll_next(cx)).await
            {
                sink.lock().expect("lines").push(line);
            }
        });
        let mut monitor = Monitor {
            server_url: url,
            lines,
            task,
            marks: 0,
        };
        monitor.mark().await;
        monitor.lines.lock().expect("lines").clear();
        monitor
    }

    /// Sends a mark and waits until the monitor saw it: every call sent before it was seen.
    async fn mark(&mut self) {
        self.marks += 1;
        let mark = format!("fencelock-costs-mark-{}", self.marks);
        let mut conn = redis::Client::open(self.server_url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: String = redis::cmd("ECHO")
            .arg(&mark)
            .query_async(&mut conn)
            .await
            .expect("ECHO");
        let deadline = Instant::now() + TRACE_LIMIT;
        while !self
            .lines
            .lock()
            .expect("lines")
            .iter()
            .any(|line| line.contains(&mark))
        {
            assert!(Instant::now() < deadline, "the monitor never saw {mark}");
            tokio::time::sleep(ms(2)).await;
        }
    }

    /// The calls seen since the monitor started or was last drained, without connection
    /// commands; and empties it.
    async fn drain(&mut self) -> Vec<Call> {
        self.mark().await;
        let lines = std::mem::take(&mut *self.lines.lock().expect("lines"));
        calls(&lines)
    }

    /// Waits until at least `n` calls were seen (their scripts finished: Redis runs a script
    /// whole, and reports its commands before the next call), then drains.
    async fn drain_after(&mut self, n: usize) -> Vec<Call> {
        let deadline = Instant::now() + TRACE_LIMIT;
        loop {
            let seen = calls(&self.lines.lock().expect("lines")).len();
            if seen >= n || Instant::now() >= deadline {
                return self.drain().await;
            }
            tokio::time::sleep(ms(2)).await;
        }
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// The calls in `MONITOR`'s lines: a line from a client starts one, a line from a script adds
/// to the last.
fn calls(lines: &[String]) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    for line in lines {
        let Some((source, command)) = parse(line) else {
            continue;
        };
        if source == "lua" {
            if let Some(call) = calls.last_mut() {
                call.push(command);
            }
        } else {
            calls.push(vec![command]);
        }
    }
    calls.retain(|call| !CONNECTION_COMMANDS.contains(&call[0].as_str()));
    calls
}

/// A `MONITOR` line's source (`lua`, or the client's address) and command, upper case:
/// `1795861206.623659 [0 127.0.0.1:54396] "EVALSHA" "99ee…" …`.
fn parse(line: &str) -> Option<(String, String)> {
    let (_, rest) = line.split_once('[')?;
    let (bracket, rest) = rest.split_once(']')?;
    let source = bracket.split_whitespace().nth(1)?.to_owned();
    let command = rest.trim_start().strip_prefix('"')?.split('"').next()?;
    Some((source, command.to_ascii_uppercase()))
}

/// The options every scenario runs under: waiters that only ask again when told, an offer that
/// outlasts a scenario, and no wait recorded, so that nothing but the operation traced calls
/// Redis while it is traced.
fn quiet() -> ClientOptions {
    ClientOptions::default()
        .wake_fallback(Duration::from_secs(60))
        .handoff_window(Duration::from_secs(30))
        .record_waits(None)
}

fn fixed() -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(Duration::from_secs(30)))
}

/// The costs measured, by scenario.
#[derive(Default)]
struct Costs(BTreeMap<String, Cost>);

/// One scenario's cost: the calls a client sent and the commands they ran.
#[derive(Clone, Debug, PartialEq)]
enum Cost {
    /// Commands run, in order (calls and the commands of their scripts).
    Commands(Vec<String>),
    /// Round trips: calls sent, whatever their scripts ran.
    Calls(usize),
}

impl Costs {
    fn commands(&mut self, scenario: &str, calls: &[Call]) {
        let commands = calls.iter().flatten().cloned().collect();
        self.0.insert(scenario.to_owned(), Cost::Commands(commands));
    }

    fn calls(&mut self, scenario: &str, calls: &[Call]) {
        self.0.insert(scenario.to_owned(), Cost::Calls(calls.len()));
    }

    /// The note to the waiter behind an offer: what an offer with a waiter behind it runs
    /// after what one with nobody behind runs.
    fn note(&mut self, kind: &str) {
        let commands = |scenario: String| match self.0.get(&scenario) {
            Some(Cost::Commands(commands)) => commands.clone(),
            other => panic!("{scenario}: {other:?}"),
        };
        let (alone, noted) = (
            commands(format!("{kind}.offer")),
            commands(format!("{kind}.offer-and-note")),
        );
        let note = noted.strip_prefix(alone.as_slice()).unwrap_or_else(|| {
            panic!("{kind}: the offer with a note does not begin as one without: {noted:?}")
        });
        self.0
            .insert(format!("{kind}.note"), Cost::Commands(note.to_vec()));
    }

    /// Each operation of `calls` (one entry per operation) took `n` calls, the same for all.
    fn round_trips(&mut self, scenario: &str, operations: &[(&str, Vec<Call>)]) {
        let counts: Vec<(&str, usize)> = operations
            .iter()
            .map(|(operation, calls)| (*operation, calls.len()))
            .collect();
        let n = counts[0].1;
        assert!(
            counts.iter().all(|(_, c)| *c == n),
            "{scenario}: the operations take different round trips: {counts:?}"
        );
        self.0.insert(scenario.to_owned(), Cost::Calls(n));
    }
}

/// A lock of a kind that hands over to its waiters: how to take it, erased.
type Take = Arc<
    dyn Fn(Client) -> std::pin::Pin<Box<dyn std::future::Future<Output = Guard> + Send>>
        + Send
        + Sync,
>;

fn mutex_take(name: &'static str) -> Take {
    Arc::new(move |client: Client| {
        Box::pin(async move {
            let mutex = client.mutex_with_options(name, fixed()).expect("name");
            mutex.lock().await.expect("lock").into()
        })
    })
}

fn fair_take(name: &'static str) -> Take {
    Arc::new(move |client: Client| {
        Box::pin(async move {
            let fair = client.fair_mutex_with_options(name, fixed()).expect("name");
            fair.lock().await.expect("lock").into()
        })
    })
}

/// A kind that hands over: uncontended lock and unlock; a waiter's first refusal, the
/// release that offers the lock to it and its claim; the release that offers it to a waiter
/// with another behind it (and tells that one when the offer ends); a refusal of a waiter
/// asking again.
async fn hand_over_costs(costs: &mut Costs, kind: &str, take: Take) {
    let server = RedisServer::start();
    let (holder, first, second, third) = (
        client_with(&server, quiet()).await,
        client_with(&server, quiet()).await,
        client_with(&server, quiet()).await,
        client_with(&server, quiet()).await,
    );
    // Load the scripts before anything is traced (a first call is reloaded after NOSCRIPT).
    take(holder.clone()).await.unlock().await.expect("unlock");
    let mut monitor = Monitor::start(&server).await;

    let guard = take(holder.clone()).await;
    costs.commands(&format!("{kind}.lock"), &monitor.drain().await);
    guard.unlock().await.expect("unlock");
    costs.commands(&format!("{kind}.unlock"), &monitor.drain().await);

    // One waiter: its first attempt, and the one after it subscribed (a client that did not
    // listen to the name tries once before it subscribes); then the release's offer and the
    // claim.
    let guard = take(holder.clone()).await;
    monitor.drain().await;
    let waiting = tokio::spawn(take(first.clone()));
    let arrival = monitor.drain_after(2).await;
    assert_eq!(arrival.len(), 2, "{kind}: two attempts: {arrival:?}");
    costs.commands(&format!("{kind}.arrival"), &arrival[..1]);
    costs.commands(&format!("{kind}.arrival-listening"), &arrival[1..]);
    guard.unlock().await.expect("unlock");
    let guard = waiting.await.expect("waiter");
    let handed = monitor.drain_after(2).await;
    assert_eq!(handed.len(), 2, "{kind}: a release and a claim: {handed:?}");
    costs.commands(&format!("{kind}.offer"), &handed[..1]);
    costs.commands(&format!("{kind}.claim"), &handed[1..]);
    costs.calls(&format!("{kind}.handoff-calls"), &handed);
    costs.calls(&format!("{kind}.claim-calls"), &handed[1..]);

    // Two waiters: the offer to the first and the note to the one behind it, then the claim;
    // the one behind asks again only when told the offer ended, after this trace.
    let next = tokio::spawn(take(second.clone()));
    monitor.drain_after(2).await;
    let behind = tokio::spawn(take(third.clone()));
    let joined = monitor.drain_after(2).await;
    assert_eq!(joined.len(), 2, "{kind}: two attempts: {joined:?}");
    costs.commands(&format!("{kind}.arrival-behind"), &joined[..1]);
    guard.unlock().await.expect("unlock");
    let guard = next.await.expect("waiter");
    let handed = monitor.drain_after(2).await;
    assert_eq!(handed.len(), 2, "{kind}: a release and a claim: {handed:?}");
    costs.commands(&format!("{kind}.offer-and-note"), &handed[..1]);
    costs.note(kind);
    guard.unlock().await.expect("unlock");
    let guard = behind.await.expect("waiter");
    guard.unlock().await.expect("unlock");

    // A waiter refused again when its fallback comes (shortened for it alone).
    let guard = take(holder.clone()).await;
    let impatient = client_with(&server, quiet().wake_fallback(FALLBACK)).await;
    monitor.drain().await;
    let again = tokio::spawn(take(impatient.clone()));
    let arrival = monitor.drain_after(2).await;
    assert_eq!(arrival.len(), 2, "{kind}: two attempts: {arrival:?}");
    costs.calls(&format!("{kind}.arrival-calls"), &arrival);
    let fallback = monitor.drain_after(1).await;
    costs.calls(&format!("{kind}.fallback-calls"), &fallback);
    costs.commands(&format!("{kind}.refused-again"), &fallback);
    guard.unlock().await.expect("unlock");
    again.await.expect("waiter").unlock().await.expect("unlock");
    monitor.stop();
}

/// The fallback of a waiter whose refusals are traced: long enough that its arrival's two
/// attempts are drained before it, short enough for a test.
const FALLBACK: Duration = Duration::from_secs(1);

/// A lock whose waiters are woken to try again, not offered the lock (an RwLock, a Semaphore):
/// the calls of a waiter's arrival, of an attempt at its fallback, and of the attempt a release
/// wakes it to make, which takes the lock.
async fn woken_waiter_costs(costs: &mut Costs, kind: &str, hold: Take, wait: Take) {
    let server = RedisServer::start();
    let holder = client_with(&server, quiet()).await;
    let waiter = client_with(&server, quiet().wake_fallback(FALLBACK)).await;
    hold(holder.clone()).await.unlock().await.expect("unlock");
    let mut monitor = Monitor::start(&server).await;
    let guard = hold(holder.clone()).await;
    monitor.drain().await;
    let waiting = tokio::spawn(wait(waiter.clone()));
    let arrival = monitor.drain_after(2).await;
    assert_eq!(arrival.len(), 2, "{kind}: two attempts: {arrival:?}");
    costs.calls(&format!("{kind}.arrival-calls"), &arrival);
    costs.calls(
        &format!("{kind}.fallback-calls"),
        &monitor.drain_after(1).await,
    );
    guard.unlock().await.expect("unlock");
    let taken = waiting.await.expect("waiter");
    let woken = monitor.drain_after(2).await;
    assert_eq!(
        woken.len(),
        2,
        "{kind}: the release and the woken attempt: {woken:?}"
    );
    costs.calls(&format!("{kind}.wake-calls"), &woken[1..]);
    taken.unlock().await.expect("unlock");
    monitor.stop();
}

/// Each kind's uncontended acquire, extend and release: its round trips.
async fn round_trip_costs(costs: &mut Costs) {
    let server = RedisServer::start();
    let client = client_with(&server, quiet()).await;
    let holder = client.holder().expect("holder");
    let extend = Duration::from_secs(20);
    // Load every script first.
    for pass in 0..2 {
        let mut monitor = Monitor::start(&server).await;
        macro_rules! traced {
            ($e:expr) => {{
                let value = $e;
                (value, monitor.drain().await)
            }};
        }
        let mutex = client.mutex("costs-mutex").expect("name");
        let (guard, acquire) = traced!(mutex.lock().await.expect("lock"));
        let ((), extended) = traced!(guard.extend(extend).await.expect("extend"));
        let ((), released) = traced!(guard.unlock().await.expect("unlock"));
        let mutex_ops = [
            ("lock", acquire),
            ("extend", extended),
            ("unlock", released),
        ];

        let reentrant = client.reentrant_mutex("costs-reentrant").expect("name");
        let (guard, acquire) = traced!(reentrant.lock(&holder).await.expect("lock"));
        let (again, reentered) = traced!(reentrant.lock(&holder).await.expect("again"));
        let ((), extended) = traced!(guard.extend(extend).await.expect("extend"));
        let ((), released) = traced!(again.unlock().await.expect("unlock"));
        let ((), last_released) = traced!(guard.unlock().await.expect("unlock"));
        let reentrant_ops = [
            ("lock", acquire),
            ("lock again", reentered),
            ("extend", extended),
            ("unlock", released),
            ("unlock the last", last_released),
        ];

        let rwlock = client.rwlock("costs-rwlock").expect("name");
        let (read, acquire) = traced!(rwlock.try_read().await.expect("read"));
        let ((), extended) = traced!(read.extend(extend).await.expect("extend"));
        let ((), released) = traced!(read.unlock().await.expect("unlock"));
        let (write, written) = traced!(rwlock.write().await.expect("write"));
        let ((), write_released) = traced!(write.unlock().await.expect("unlock"));
        let rwlock_ops = [
            ("try_read", acquire),
            ("extend", extended),
            ("unlock", released),
            ("write", written),
            ("unlock", write_released),
        ];

        let semaphore = client.semaphore("costs-semaphore", 3).expect("name");
        let (permit, acquire) = traced!(semaphore.try_acquire().await.expect("acquire"));
        let ((), extended) = traced!(permit.extend(extend).await.expect("extend"));
        let ((), released) = traced!(permit.release().await.expect("release"));
        let ((), resized) = traced!(semaphore.set_permits(4).await.expect("set_permits"));
        let (_, counted) = traced!(semaphore.available().await.expect("available"));
        let (_, total) = traced!(semaphore.permits().await.expect("permits"));
        let semaphore_ops = [
            ("try_acquire", acquire),
            ("extend", extended),
            ("release", released),
            ("set_permits", resized),
            ("available", counted),
            ("permits", total),
        ];

        let fair = client.fair_mutex("costs-fair").expect("name");
        let (guard, acquire) = traced!(fair.lock().await.expect("lock"));
        let ((), extended) = traced!(guard.extend(extend).await.expect("extend"));
        let ((), released) = traced!(guard.unlock().await.expect("unlock"));
        let fair_ops = [
            ("lock", acquire),
            ("extend", extended),
            ("unlock", released),
        ];

        let multi = client
            .multi_mutex(["costs-a", "costs-b", "costs-c"])
            .expect("names");
        let (guard, acquire) = traced!(multi.try_lock().await.expect("lock"));
        let ((), extended) = traced!(guard.extend(extend).await.expect("extend"));
        let ((), released) = traced!(guard.unlock().await.expect("unlock"));
        let multi_ops = [
            ("try_lock", acquire),
            ("extend", extended),
            ("unlock", released),
        ];

        let election = client.election("costs-election").expect("name");
        let (leadership, campaigned) = traced!(election.campaign("a").await.expect("campaign"));
        let ((), proclaimed) = traced!(leadership.proclaim("b").await.expect("proclaim"));
        let ((), resigned) = traced!(leadership.resign().await.expect("resign"));
        let election_ops = [
            ("campaign", campaigned),
            ("proclaim", proclaimed),
            ("resign", resigned),
        ];

        monitor.stop();
        if pass == 1 {
            costs.round_trips("mutex.round-trips", &mutex_ops);
            costs.round_trips("reentrant.round-trips", &reentrant_ops);
            costs.round_trips("rwlock.round-trips", &rwlock_ops);
            costs.round_trips("semaphore.round-trips", &semaphore_ops);
            costs.round_trips("fair.round-trips", &fair_ops);
            costs.round_trips("multi.round-trips", &multi_ops);
            costs.round_trips("election.round-trips", &election_ops);
        }
    }
    upgrade_costs(costs, &server, &client).await;
    observer_costs(costs, &server, &client).await;
}

/// A reader's refused upgrade to a write: its request, then the release of what the refused
/// request might have left, in the background.
async fn upgrade_costs(costs: &mut Costs, server: &RedisServer, client: &Client) {
    let rwlock = client.rwlock("costs-upgrade").expect("name");
    let (one, other) = (
        client.holder().expect("holder"),
        client.holder().expect("holder"),
    );
    let read = rwlock.read_as(&one).await.expect("read");
    let other_read = rwlock.read_as(&other).await.expect("read");
    let mut monitor = Monitor::start(server).await;
    let refused = rwlock.try_write_as(&one).await;
    assert!(refused.is_err(), "another reader holds: {refused:?}");
    let calls = monitor.drain_after(2).await;
    costs.calls("rwlock.upgrade-refused-calls", &calls);
    monitor.stop();
    read.unlock().await.expect("unlock");
    other_read.unlock().await.expect("unlock");
}

/// An observer of an election reads the leader once per change it is told of.
async fn observer_costs(costs: &mut Costs, server: &RedisServer, client: &Client) {
    let observing = client_with(server, quiet()).await;
    let election = client.election("costs-observed").expect("name");
    let leadership = election.campaign("a").await.expect("campaign");
    let mut watch = observing
        .election("costs-observed")
        .expect("name")
        .observe();
    watch.next().await.expect("the leader").expect("a leader");
    let mut monitor = Monitor::start(server).await;
    leadership.proclaim("b").await.expect("proclaim");
    let seen = tokio::time::timeout(TRACE_LIMIT, watch.next())
        .await
        .expect("told of the change")
        .expect("read")
        .expect("a leader");
    assert_eq!(seen.value(), "b");
    let calls = monitor.drain().await;
    assert_eq!(
        calls.len(),
        2,
        "the proclaim and the observer's read: {calls:?}"
    );
    costs.round_trips("election.observer-read", &[("read", calls[1..].to_vec())]);
    monitor.stop();
    leadership.resign().await.expect("resign");
}

/// A marker of this file in a doc: the scenario it names, the number before it and the
/// commands after it, if listed.
#[derive(Debug)]
struct Quote {
    doc: String,
    scenario: String,
    number: usize,
    commands: Option<Vec<String>>,
}

fn quotes(doc: &str, text: &str) -> Vec<Quote> {
    let opening = format!("<!-- figure asserted by {THIS}:");
    let mut found = Vec::new();
    let mut rest = text;
    let mut before_len = 0;
    while let Some(at) = rest.find(&opening) {
        let before = &text[..before_len + at];
        let after_open = &rest[at + opening.len()..];
        let (scenario, after) = after_open.split_once("-->").expect("a closed marker");
        found.push(Quote {
            doc: doc.to_owned(),
            scenario: scenario.trim().to_owned(),
            number: number_before(before).unwrap_or_else(|| {
                panic!("{doc}: no number before the marker of {}", scenario.trim())
            }),
            commands: commands_after(after),
        });
        let consumed = at + opening.len() + scenario.len() + 3;
        before_len += consumed;
        rest = &rest[consumed..];
    }
    found
}

/// The number a marker follows: `6 commands`, `2 more`, `1`.
fn number_before(before: &str) -> Option<usize> {
    let mut words = before.trim_end().rsplit(|c: char| c.is_whitespace());
    let mut word = words.next()?;
    if ["commands", "command", "more"].contains(&word) {
        word = words.next()?;
    }
    word.trim_start_matches(['(', '|']).parse().ok()
}

/// The commands listed in backticks right after a marker: `` (`EVALSHA GET SET`)``,
/// `` : `EVALSHA GET SET` ``.
fn commands_after(after: &str) -> Option<Vec<String>> {
    let trimmed = after.trim_start_matches([' ', '(', ':']);
    let listed = trimmed.strip_prefix('`')?.split('`').next()?;
    let words: Vec<String> = listed.split_whitespace().map(str::to_owned).collect();
    let all_commands = words
        .iter()
        .all(|w| w.chars().all(|c| c.is_ascii_uppercase()));
    all_commands.then_some(words)
}

fn doc_text(doc: &str) -> String {
    let path = format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn the_docs_quote_what_each_operation_costs() {
    let mut costs = Costs::default();
    hand_over_costs(&mut costs, "mutex", mutex_take("costs")).await;
    hand_over_costs(&mut costs, "fair", fair_take("costs")).await;
    let write: Take = Arc::new(|client: Client| {
        Box::pin(async move {
            let rwlock = client.rwlock_with_options("costs", fixed()).expect("name");
            rwlock.write().await.expect("write").into()
        })
    });
    let read: Take = Arc::new(|client: Client| {
        Box::pin(async move {
            let rwlock = client.rwlock_with_options("costs", fixed()).expect("name");
            rwlock.read().await.expect("read").into()
        })
    });
    woken_waiter_costs(&mut costs, "rwlock", write, read).await;
    let permit: Take = Arc::new(|client: Client| {
        Box::pin(async move {
            let semaphore = client
                .semaphore_with_options("costs", 1, fixed())
                .expect("name");
            semaphore.acquire().await.expect("acquire").into()
        })
    });
    woken_waiter_costs(&mut costs, "semaphore", Arc::clone(&permit), permit).await;
    round_trip_costs(&mut costs).await;
    println!("measured:");
    for (scenario, cost) in &costs.0 {
        match cost {
            Cost::Commands(commands) => {
                println!("  {scenario}: {} `{}`", commands.len(), commands.join(" "))
            }
            Cost::Calls(n) => println!("  {scenario}: {n} round trip(s) per operation"),
        }
    }
    let mut wrong = Vec::new();
    for doc in DOCS {
        let quoted = quotes(doc, &doc_text(doc));
        assert!(!quoted.is_empty(), "{doc} quotes no cost checked here");
        for quote in quoted {
            let Some(cost) = costs.0.get(&quote.scenario) else {
                wrong.push(format!("{}: no scenario {:?}", quote.doc, quote.scenario));
                continue;
            };
            let (number, commands) = match cost {
                Cost::Commands(commands) => (commands.len(), Some(commands)),
                Cost::Calls(n) => (*n, None),
            };
            if quote.number != number {
                wrong.push(format!(
                    "{}: {} is {number}, the doc says {}",
                    quote.doc, quote.scenario, quote.number
                ));
            }
            let misquoted = match (&quote.commands, commands) {
                (Some(listed), Some(ran)) => (listed != ran).then_some((listed, ran)),
                _ => None,
            };
            if let Some((listed, ran)) = misquoted {
                wrong.push(format!(
                    "{}: {} runs `{}`, the doc lists `{}`",
                    quote.doc,
                    quote.scenario,
                    ran.join(" "),
                    listed.join(" ")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the docs misquote costs:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_quote_is_read_with_its_number_and_commands() {
    let text = format!(
        "the release is 6 commands<!-- figure asserted by {THIS}: mutex.offer --> (`EVALSHA GET \
         ZPOPMIN TIME SET PUBLISH`) and | 1<!-- figure asserted by {THIS}: mutex.round-trips --> |"
    );
    let found = quotes("doc.md", &text);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].scenario, "mutex.offer");
    assert_eq!(found[0].number, 6);
    assert_eq!(
        found[0].commands.as_deref(),
        Some(&["EVALSHA", "GET", "ZPOPMIN", "TIME", "SET", "PUBLISH"].map(String::from)[..])
    );
    assert_eq!(found[1].number, 1);
    assert_eq!(found[1].commands, None);
}
