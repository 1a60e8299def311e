//! Who holds and who waits, as operators see it: every client names its process by default,
//! and reading the wait-for graph or checking for a deadlock costs the lock path nothing: the
//! commands Redis runs (`INFO commandstats`, the commands inside scripts included) for one
//! uncontended acquire and release of every kind are those it ran before.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common;
use fencelock::{Client, ClientOptions, Error, LockKind};
use fencelock_testkit::RedisServer;

/// Cycles per kind: enough that a stray background command would show as a fraction.
const CYCLES: u64 = 10;

/// The calls of every command since the last `CONFIG RESETSTAT`, without the test's own.
fn commands(server: &RedisServer) -> BTreeMap<String, u64> {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            (!matches!(name, "info" | "config|resetstat")).then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Runs one cycle of `kind` to load its scripts, then [`CYCLES`] more, and returns the
/// commands per cycle of those, by command.
async fn per_cycle<F, Fut>(
    server: &RedisServer,
    mut cycle: F,
) -> Result<BTreeMap<String, f64>, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    cycle().await?;
    // Let anything the first cycle set going (a background release, a subscription) settle.
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..CYCLES {
        cycle().await?;
    }
    Ok(commands(server)
        .into_iter()
        .map(|(name, calls)| (name, calls as f64 / CYCLES as f64))
        .collect())
}

fn total(commands: &BTreeMap<String, f64>) -> f64 {
    commands.values().sum()
}

/// Commands a kind's cycle runs on some cycles and not on others, by the server's clock, with
/// the most it may run per cycle: a semaphore's acquire and release each make its hash live
/// at least the same time (`PEXPIRE … GT`), and when both run within one millisecond of the
/// last, the second changes nothing and its script reads the time to live (`PTTL`) once.
const BY_THE_CLOCK: [(&str, &str, f64); 1] = [("Semaphore", "pttl", 1.0)];

/// The commands of one cycle of `kind` that do not depend on the clock, in all; those that do
/// ([`BY_THE_CLOCK`]) are checked against their bound, and left out.
fn fixed_total(kind: &str, commands: &BTreeMap<String, f64>) -> f64 {
    let mut total = total(commands);
    for (_, command, most) in BY_THE_CLOCK.iter().filter(|(k, ..)| *k == kind) {
        let runs = commands.get(*command).copied().unwrap_or(0.0);
        assert!(
            runs <= *most,
            "{kind}: {runs} {command} per cycle, at most {most}: {commands:?}"
        );
        total -= runs;
    }
    total
}

/// The commands per cycle of `kind`'s uncontended acquire and release on `client`, by what
/// was measured (a kind with two ways to hold, such as a read-write lock, measures each);
/// `None` for a kind left out.
async fn kind_path(
    kind: LockKind,
    server: &RedisServer,
    client: &Client,
) -> Result<Option<Vec<(&'static str, BTreeMap<String, f64>)>>, Error> {
    Ok(Some(match kind {
        LockKind::Mutex => {
            let mutex = client.mutex("m")?;
            let c = per_cycle(server, || async { mutex.lock().await?.unlock().await }).await?;
            vec![("Mutex", c)]
        }
        LockKind::FairMutex => {
            let fair = client.fair_mutex("f")?;
            let c = per_cycle(server, || async { fair.lock().await?.unlock().await }).await?;
            vec![("FairMutex", c)]
        }
        LockKind::ReentrantMutex => {
            let holder = client.holder()?;
            let reentrant = client.reentrant_mutex("r")?;
            let c = per_cycle(server, || async {
                reentrant.lock(&holder).await?.unlock().await
            })
            .await?;
            vec![("ReentrantMutex", c)]
        }
        LockKind::RwLock => {
            let rwlock = client.rwlock("rw")?;
            let read = per_cycle(server, || async { rwlock.read().await?.unlock().await }).await?;
            let write =
                per_cycle(server, || async { rwlock.write().await?.unlock().await }).await?;
            vec![("RwLock read", read), ("RwLock write", write)]
        }
        LockKind::Semaphore => {
            let semaphore = client.semaphore("s", 4)?;
            let c = per_cycle(server, || async {
                semaphore.acquire().await?.release().await
            })
            .await?;
            vec![("Semaphore", c)]
        }
        LockKind::Election => {
            let election = client.election("e")?;
            let c = per_cycle(server, || async {
                election.campaign("v").await?.resign().await
            })
            .await?;
            vec![("Election", c)]
        }
        // A foreign mutex runs another library's layout, not fencelock's lock path: it was not
        // measured at 3a4aa62 and has no figure to hold to here.
        LockKind::ForeignMutex => return Ok(None),
        other => panic!("no lock path measured for {other}: teach this test the new kind"),
    }))
}

/// The commands per cycle of every kind of [`LockKind::ALL`] (and of a multi-lock of two
/// names, whose names are listed as mutexes), on `client`, without those that depend on the
/// clock.
async fn lock_path(
    server: &RedisServer,
    client: &Client,
) -> Result<Vec<(&'static str, f64)>, Error> {
    let mut measured = Vec::new();
    for kind in LockKind::ALL {
        measured.extend(kind_path(kind, server, client).await?.into_iter().flatten());
    }
    let multi = client.multi_mutex(["a", "b"])?;
    let c = per_cycle(server, || async { multi.lock().await?.unlock().await }).await?;
    measured.push(("MultiMutex of 2", c));

    for (kind, commands) in &measured {
        println!(
            "{kind}: {:.1} commands per cycle: {commands:?}",
            total(commands)
        );
        // One script call to take, one to give back: no command of its own is sent.
        assert_eq!(commands.get("evalsha"), Some(&2.0), "{kind}: {commands:?}");
    }
    // Every other command runs once per cycle or not at all: the totals are whole.
    Ok(measured
        .iter()
        .map(|(kind, commands)| (*kind, fixed_total(kind, commands)))
        .collect())
}

#[tokio::test]
async fn an_uncontended_lock_runs_the_commands_it_ran_before() -> Result<(), Error> {
    let server = RedisServer::start();
    let unlabelled = common::client_with(&server, ClientOptions::default().holder_label("")).await;
    // Measured by this test at 3a4aa62, before clients were labelled by default and before
    // the wait-for graph and the deadlock check (Redis 7.0.15; a script's own commands
    // counted, as Redis 7 counts them), less the MultiMutex's second TIME, which its
    // acquire no longer sends since scripts read the server's clock once, and less the
    // semaphore's PTTL that depends on the clock (`BY_THE_CLOCK`).
    // In the order of `LockKind::ALL`, the multi-lock last.
    let before = [
        ("Mutex", 7.0),
        ("ReentrantMutex", 13.0),
        ("RwLock read", 23.0),
        ("RwLock write", 24.0),
        ("Semaphore", 18.0),
        ("FairMutex", 9.0),
        ("Election", 13.0),
        ("MultiMutex of 2", 11.0),
    ];
    assert_eq!(lock_path(&server, &unlabelled).await?, before);
    // A labelled client's reentrant mutex and semaphore store the label in a field of their
    // own, one HSET more, as any labelled client's did at 3a4aa62.
    let labelled: Client = common::client_with(&server, ClientOptions::default()).await;
    let mut with_label = before;
    for (kind, commands) in &mut with_label {
        if matches!(*kind, "ReentrantMutex" | "Semaphore") {
            *commands += 1.0;
        }
    }
    assert_eq!(lock_path(&server, &labelled).await?, with_label);
    Ok(())
}

#[tokio::test]
async fn a_client_names_its_process_unless_told_otherwise() -> Result<(), Error> {
    let server = RedisServer::start();
    let client: Client = common::client_with(&server, ClientOptions::default()).await;
    let named = common::client_with(&server, ClientOptions::default().holder_label("job-7")).await;
    let label = ClientOptions::process_label();
    assert!(
        label.ends_with(&format!("/{}", std::process::id())),
        "{label}"
    );

    let holder = client.holder()?;
    let mutex = client.mutex("a")?.lock().await?;
    let fair = client.fair_mutex("b")?.lock().await?;
    let reentrant = client.reentrant_mutex("c")?.lock(&holder).await?;
    let permit = client.semaphore("d", 2)?.acquire().await?;
    let other = named.semaphore("d", 2)?.acquire().await?;
    let listed = client.locks("*").await?;
    let shown: Vec<(&str, LockKind, Vec<&str>)> = listed
        .iter()
        .map(|info| {
            let mut holders: Vec<&str> = info.holders.iter().map(String::as_str).collect();
            holders.sort_unstable();
            (info.name.as_str(), info.kind, holders)
        })
        .collect();
    let mut both = vec![label.as_str(), "job-7"];
    both.sort_unstable();
    assert_eq!(
        shown,
        [
            ("a", LockKind::Mutex, vec![label.as_str()]),
            ("b", LockKind::FairMutex, vec![label.as_str()]),
            ("c", LockKind::ReentrantMutex, vec![label.as_str()]),
            ("d", LockKind::Semaphore, both),
        ]
    );
    mutex.unlock().await?;
    fair.unlock().await?;
    reentrant.unlock().await?;
    permit.release().await?;
    other.release().await?;
    Ok(())
}

/// How long a waiter waits before it checks for a deadlock, and between checks, here.
const CHECK: Duration = Duration::from_millis(200);

/// Bounds every wait of these tests: a deadlock not refused fails them instead of hanging.
const LIMIT: Duration = Duration::from_secs(10);

fn checked() -> fencelock::LockOptions {
    fencelock::LockOptions::default().deadlock_check(CHECK)
}

#[tokio::test]
async fn a_then_b_against_b_then_a_refuses_the_younger_waiter_only() -> Result<(), Error> {
    let server = RedisServer::start();
    let one = common::client_with(&server, ClientOptions::default().holder_label("one")).await;
    let two = common::client_with(&server, ClientOptions::default().holder_label("two")).await;
    // A hold belongs to the task that took it: each side holds and waits in one task.
    let b2 = two.mutex("B")?.lock().await?;
    let (held, mut holding) = tokio::sync::mpsc::channel(2);
    let first = held.clone();
    let older = tokio::spawn(async move {
        let a = one.mutex("A")?.lock().await?;
        let _ = first.send(()).await;
        let b = one
            .mutex_with_options("B", checked())?
            .lock_timeout(LIMIT)
            .await?;
        b.unlock().await?;
        a.unlock().await
    });
    holding.recv().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let refused = two
        .mutex_with_options("A", checked())?
        .lock_timeout(LIMIT)
        .await;
    let Err(Error::Deadlock { name, cycle }) = refused else {
        let older = older.await;
        panic!("the younger waiter was not refused: {refused:?}; the older: {older:?}");
    };
    assert!(started.elapsed() < LIMIT / 2, "{:?}", started.elapsed());
    assert_eq!(name, "A");
    println!("{cycle}");
    let steps: Vec<(&str, &str, &str)> = cycle
        .steps
        .iter()
        .map(|s| {
            (
                s.waiter_label.as_deref().unwrap_or(""),
                s.name.as_str(),
                s.holder_label.as_deref().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(steps, [("one", "B", "two"), ("two", "A", "one")]);
    assert!(cycle.steps.iter().all(|s| s.kind == LockKind::Mutex));
    assert!(cycle.steps[0].waited > cycle.steps[1].waited);
    // The older waiter goes on once the younger gives back what it held.
    b2.unlock().await?;
    older.await.expect("the older waiter's task")?;
    drop(held);
    Ok(())
}

#[tokio::test]
async fn a_long_wait_without_a_cycle_is_never_refused() -> Result<(), Error> {
    let server = RedisServer::start();
    let one: Client = common::client(&server).await;
    let two: Client = common::client(&server).await;
    // `two` holds B and waits for A, which `one` holds while it runs (waiting for nothing).
    let a1 = one.mutex("A")?.lock().await?;
    let b2 = two.mutex("B")?.lock().await?;
    let waited = two
        .mutex_with_options("A", checked())?
        .lock_timeout(CHECK * 6)
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    a1.unlock().await?;
    b2.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn two_tasks_of_one_client_make_no_false_cycle() -> Result<(), Error> {
    let server = RedisServer::start();
    let client: Client = common::client(&server).await;
    let other: Client = common::client(&server).await;
    // Task 1 holds A and waits for B; task 2 of the same client holds B and waits for C, which
    // another client holds while it runs. By client, A's holder waits for B's: by task, no
    // cycle.
    let c = other.mutex("C")?.lock().await?;
    let (held_b, hold_b) = tokio::sync::oneshot::channel();
    let (go, gone) = tokio::sync::oneshot::channel::<()>();
    let second = client.clone();
    let task2 = tokio::spawn(async move {
        let b = second.mutex("B")?.lock().await?;
        let _ = held_b.send(());
        let waited = second
            .mutex_with_options("C", checked())?
            .lock_timeout(CHECK * 6)
            .await;
        let _ = gone.await;
        b.unlock().await?;
        Ok::<_, Error>(waited.map(|_| ()))
    });
    hold_b.await.expect("task 2 holds B");
    let a = client.mutex("A")?.lock().await?;
    let waited = client
        .mutex_with_options("B", checked())?
        .lock_timeout(CHECK * 6)
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    let _ = go.send(());
    let task2 = task2.await.expect("task 2")?;
    assert!(matches!(task2, Err(Error::Timeout { .. })), "{task2:?}");
    a.unlock().await?;
    c.unlock().await?;
    Ok(())
}

#[tokio::test]
async fn a_cycle_of_three_kinds_is_refused_and_shown_in_the_graph() -> Result<(), Error> {
    let server = RedisServer::start();
    let label = |l: &str| ClientOptions::default().holder_label(l);
    let one = common::client_with(&server, label("one")).await;
    let two = common::client_with(&server, label("two")).await;
    let three = common::client_with(&server, label("three")).await;
    // one: semaphore S (its only permit), waits to write W; two: writes W, waits for fair F;
    // three: holds F, waits for S.
    let recorded = fencelock::LockOptions::default().record_wait(CHECK);
    // Each task takes its hold, says so, and waits only once every hold is taken.
    let (held, mut holding) = tokio::sync::mpsc::channel(2);
    let (go, _) = tokio::sync::broadcast::channel::<()>(2);
    let (sent, mut started, mut stop) = (held.clone(), go.subscribe(), go.subscribe());
    let (options, one2) = (recorded.clone(), one.clone());
    let first = tokio::spawn(async move {
        let s = one2.semaphore("S", 1)?.acquire().await?;
        let _ = sent.send(()).await;
        let _ = started.recv().await;
        let w = one2
            .rwlock_with_options("W", options)?
            .write_timeout(LIMIT)
            .await?;
        let _ = stop.recv().await;
        w.unlock().await?;
        s.release().await
    });
    let (sent, mut started, options, two2) =
        (held.clone(), go.subscribe(), recorded.clone(), two.clone());
    let second = tokio::spawn(async move {
        let w = two2.rwlock("W")?.write().await?;
        let _ = sent.send(()).await;
        let _ = started.recv().await;
        let f = two2
            .fair_mutex_with_options("F", options)?
            .lock_timeout(LIMIT)
            .await?;
        f.unlock().await?;
        w.unlock().await
    });
    let f = three.fair_mutex("F")?.lock().await?;
    holding.recv().await;
    holding.recv().await;
    let _ = go.send(());
    tokio::time::sleep(CHECK * 2).await;
    // The two recorded waits form no cycle yet: the graph shows them, each waiting for a task.
    let graph = one.wait_graph("*").await?;
    assert!(graph.cycles.is_empty(), "{:?}", graph.cycles);
    let waiting: Vec<(&str, usize)> = graph
        .locks
        .iter()
        .filter(|l| !l.waiters.is_empty())
        .map(|l| (l.name.as_str(), l.waiters.len()))
        .collect();
    assert_eq!(waiting, [("F", 1), ("W", 1)]);
    let refused = three
        .semaphore_with_options("S", 1, checked())?
        .acquire_timeout(LIMIT)
        .await;
    let Err(Error::Deadlock { cycle, .. }) = refused else {
        panic!("the cycle was not refused: {refused:?}");
    };
    println!("{cycle}");
    let mut kinds: Vec<(LockKind, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.kind, s.name.as_str()))
        .collect();
    // The cycle starts with the wait that began first: one's and two's began together.
    let w = kinds.iter().position(|k| k.1 == "W").unwrap_or(0);
    kinds.rotate_left(w);
    assert_eq!(cycle.youngest().map(|s| s.name.as_str()), Some("S"));
    assert_eq!(
        kinds,
        [
            (LockKind::RwLock, "W"),
            (LockKind::FairMutex, "F"),
            (LockKind::Semaphore, "S")
        ]
    );
    // `three` gives up F: two takes it and gives back W and F; one takes W, then lets go.
    f.unlock().await?;
    second.await.expect("task")?;
    let _ = go.send(());
    first.await.expect("task")?;
    drop(held);
    Ok(())
}

#[tokio::test]
async fn a_semaphore_with_a_running_holder_is_no_deadlock() -> Result<(), Error> {
    let server = RedisServer::start();
    let one: Client = common::client(&server).await;
    let two: Client = common::client(&server).await;
    let three: Client = common::client(&server).await;
    // S has two permits: one held by `one`'s task, which waits for A, one by `three`, which
    // runs. `two` holds A and waits for S. By the records, one and two wait for each other;
    // but `three` may release its permit, so neither is refused.
    let a = two.mutex("A")?.lock().await?;
    let running = three.semaphore("S", 2)?.acquire().await?;
    let (held, mut holding) = tokio::sync::mpsc::channel(1);
    let waiter = tokio::spawn(async move {
        let s = one.semaphore("S", 2)?.acquire().await?;
        let _ = held.send(()).await;
        let waited = one
            .mutex_with_options("A", checked())?
            .lock_timeout(CHECK * 6)
            .await;
        s.release().await?;
        Ok::<_, Error>(waited.map(|_| ()))
    });
    holding.recv().await;
    let waited = two
        .semaphore_with_options("S", 2, checked())?
        .acquire_timeout(CHECK * 5)
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    let other = waiter.await.expect("task")?;
    assert!(matches!(other, Err(Error::Timeout { .. })), "{other:?}");
    a.unlock().await?;
    running.release().await?;
    Ok(())
}

/// Seven tasks of one client, each holding a lock of one kind and waiting for the next one's,
/// the last for the first's: a mutex, a fair mutex, a reentrant mutex, a read hold a writer
/// waits for, a semaphore's only permit, a mutex a multi-lock waits for, and an election's
/// leadership. The graph shows every lock held and waited for, and the one cycle through all
/// of them; the waits are only recorded, so nobody is refused.
#[tokio::test]
async fn the_graph_links_every_kind_and_finds_a_cycle_through_all_of_them() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = common::client_with(&server, ClientOptions::default().holder_label("ring")).await;
    let recorded = fencelock::LockOptions::default().record_wait(Duration::from_millis(100));
    let (held, mut holding) = tokio::sync::mpsc::channel::<()>(7);
    let (go, _) = tokio::sync::broadcast::channel::<()>(4);
    let mut tasks = tokio::task::JoinSet::new();
    // Takes `$hold`, says so, and after the first broadcast waits for `$wait` until the second.
    macro_rules! ring_task {
        (|$c:ident, $o:ident| $hold:expr, $wait:expr) => {{
            let ($c, $o, sent) = (client.clone(), recorded.clone(), held.clone());
            let (mut start, mut stop) = (go.subscribe(), go.subscribe());
            tasks.spawn(async move {
                let kept = $hold;
                let _ = sent.send(()).await;
                let _ = start.recv().await;
                // `stop` hears the first broadcast too: the second ends the wait.
                let _ = stop.recv().await;
                tokio::select! {
                    _ = async { $wait.await } => panic!("a wait of the ring was granted"),
                    _ = stop.recv() => {}
                }
                drop(kept);
            });
        }};
    }
    ring_task!(
        |c, o| c.mutex("M").expect("n").lock().await.expect("M"),
        c.fair_mutex_with_options("F", o).expect("n").lock()
    );
    ring_task!(
        |c, o| c.fair_mutex("F").expect("n").lock().await.expect("F"),
        async {
            let h = c.holder().expect("holder");
            c.reentrant_mutex_with_options("R", o)
                .expect("n")
                .lock(&h)
                .await
        }
    );
    ring_task!(
        |c, o| {
            let h = c.holder().expect("holder");
            c.reentrant_mutex("R")
                .expect("n")
                .lock(&h)
                .await
                .expect("R")
        },
        c.rwlock_with_options("W", o).expect("n").write()
    );
    ring_task!(
        |c, o| c.rwlock("W").expect("n").read().await.expect("W"),
        c.semaphore_with_options("S", 1, o).expect("n").acquire()
    );
    ring_task!(
        |c, o| c.semaphore("S", 1).expect("n").acquire().await.expect("S"),
        c.multi_mutex_with_options(["X", "Y"], o).expect("n").lock()
    );
    ring_task!(
        |c, o| c.mutex("X").expect("n").lock().await.expect("X"),
        c.election_with_options("E", o).expect("n").campaign("x")
    );
    ring_task!(
        |c, o| c.election("E").expect("n").campaign("e").await.expect("E"),
        c.mutex_with_options("M", o).expect("n").lock()
    );
    for _ in 0..7 {
        holding.recv().await;
    }
    let _ = go.send(());
    let deadline = std::time::Instant::now() + LIMIT;
    let graph = loop {
        let graph = client.wait_graph("*").await?;
        if !graph.cycles.is_empty() {
            break graph;
        }
        assert!(std::time::Instant::now() < deadline, "no cycle: {graph:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(graph.cycles.len(), 1, "{:?}", graph.cycles);
    let cycle = &graph.cycles[0];
    println!("{cycle}");
    let mut steps: Vec<(LockKind, &str)> = cycle
        .steps
        .iter()
        .map(|s| (s.kind, s.name.as_str()))
        .collect();
    steps.sort();
    assert_eq!(
        steps,
        [
            (LockKind::Mutex, "M"),
            (LockKind::Mutex, "X"),
            (LockKind::ReentrantMutex, "R"),
            (LockKind::RwLock, "W"),
            (LockKind::Semaphore, "S"),
            (LockKind::FairMutex, "F"),
            (LockKind::Election, "E"),
        ]
    );
    // The ring passes through every kind but one the graph cannot see the holder of (a foreign
    // mutex lives under another library's key, without the client's prefix): a kind added to
    // `LockKind::ALL` fails this test until the ring passes through it too.
    let in_ring: std::collections::BTreeSet<LockKind> = steps.iter().map(|s| s.0).collect();
    let expected: std::collections::BTreeSet<LockKind> = LockKind::ALL
        .into_iter()
        .filter(|kind| *kind != LockKind::ForeignMutex)
        .collect();
    assert_eq!(in_ring, expected, "teach this test the new kind");
    // Seven distinct tasks of one client, each a holder of one step and the waiter of another.
    let tasks_seen: std::collections::BTreeSet<_> =
        cycle.steps.iter().map(|s| s.waiter.clone()).collect();
    assert_eq!(tasks_seen.len(), 7);
    assert!(cycle
        .steps
        .iter()
        .all(|s| s.holder_label.as_deref() == Some("ring")));
    // Every lock but Y (free, which the multi-lock waits for too) has a holder task and a
    // waiter linked to it.
    for lock in graph.locks.iter().filter(|l| l.name != "Y") {
        assert!(lock.holders.iter().any(|h| h.task.is_some()), "{lock:?}");
        assert!(
            !lock.waiters.is_empty() && lock.waiters.iter().all(|w| !w.waits_for.is_empty()),
            "{lock:?}"
        );
    }
    let _ = go.send(());
    while let Some(done) = tasks.join_next().await {
        done.expect("a task of the ring");
    }
    Ok(())
}

/// A walk of a big key space tells its progress after each `SCAN` call, in counts that only
/// grow, and reads the same graph as the walk without it.
#[tokio::test]
async fn the_graph_of_a_big_key_space_tells_its_progress_page_by_page() -> Result<(), Error> {
    let server = RedisServer::start();
    let client = common::client(&server).await;
    // 5,000 keys of someone else's beside the locks: several `SCAN` calls of 1,000 each.
    let mut other = Vec::new();
    for i in 0..5000 {
        other.push(format!("cache:{i}"));
        other.push("x".to_owned());
    }
    let mut args = vec!["MSET"];
    args.extend(other.iter().map(String::as_str));
    server.cli(&args);
    let held = client.mutex("ledger")?.lock().await?;
    let permit = client.semaphore("pdf", 2)?.acquire().await?;

    let seen = std::sync::Mutex::new(Vec::new());
    let graph = client
        .wait_graph_with_progress("*", &|progress| {
            seen.lock().expect("not poisoned").push(progress)
        })
        .await?;
    let seen = seen.into_inner().expect("not poisoned");
    // Two walks (the wait records, then the locks), each of more than one call.
    assert!(seen.len() >= 6, "{seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[1].scans == w[0].scans + 1 && w[1].keys >= w[0].keys),
        "{seen:?}"
    );
    // The lock walk matched the mutex's and the semaphore's keys, the records walk none.
    let last = seen.last().expect("a call");
    assert!(last.keys >= 2, "{last:?}");
    let plain = client.wait_graph("*").await?;
    let names = |g: &fencelock::WaitGraph| -> Vec<(String, LockKind, usize)> {
        g.locks
            .iter()
            .map(|l| (l.name.clone(), l.kind, l.holders.len()))
            .collect()
    };
    assert_eq!(names(&graph), names(&plain));
    assert_eq!(
        names(&graph),
        [
            ("ledger".to_owned(), LockKind::Mutex, 1),
            ("pdf".to_owned(), LockKind::Semaphore, 1)
        ]
    );
    held.unlock().await?;
    permit.release().await
}

/// Every wait is recorded once it has lasted the client's threshold (1 s by default), and a
/// client that records none leaves the graph unable to say there is no deadlock.
#[tokio::test]
async fn waits_are_recorded_by_default_and_a_graph_without_them_cannot_tell() -> Result<(), Error> {
    let server = RedisServer::start();
    let holder = common::client_with(&server, ClientOptions::default()).await;
    let recording = common::client_with(&server, ClientOptions::default()).await;
    let quiet = common::client_with(&server, ClientOptions::default().record_waits(None)).await;
    let held = holder.mutex("m")?.lock().await?;
    let recorded = tokio::spawn({
        let mutex = recording.mutex("m")?;
        async move { mutex.lock().await }
    });
    // Past the default second, with room: the wait is recorded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let graph = loop {
        let graph = holder.wait_graph("*").await?;
        if graph.locks.iter().any(|l| !l.waiters.is_empty()) {
            break graph;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never recorded: {graph:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(graph.verdict(), fencelock::Verdict::NoDeadlock, "{graph:?}");
    let waited = graph.locks[0].waiters[0].waited;
    assert!(
        waited >= Duration::from_millis(900),
        "recorded after a second: {waited:?}"
    );

    let unrecorded = tokio::spawn({
        let mutex = quiet.mutex("m")?;
        async move { mutex.lock().await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let graph = loop {
        let graph = holder.wait_graph("*").await?;
        if graph.unrecorded > 0 {
            break graph;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never queued: {graph:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(graph.verdict(), fencelock::Verdict::Unknown, "{graph:?}");
    assert_eq!(graph.locks[0].unrecorded, 1, "{graph:?}");
    assert_eq!(
        graph.locks[0].waiters.len(),
        1,
        "the other is still recorded"
    );

    held.unlock().await?;
    let first = recorded.await.expect("task")?;
    first.unlock().await?;
    unrecorded.await.expect("task")?.unlock().await?;
    Ok(())
}

/// What recording a wait costs: nothing for a lock taken at once (the uncontended counts above
/// are the same), and for a waiter one `SET` of its record per interval once it has waited
/// that long, nothing else.
#[tokio::test]
async fn a_recorded_wait_costs_one_set_per_interval() -> Result<(), Error> {
    let server = RedisServer::start();
    let interval = Duration::from_millis(200);
    let holder = common::client(&server).await;
    let waiter = common::client_with(
        &server,
        ClientOptions::default()
            .holder_label("")
            .record_waits(Some(interval))
            // No timer retries while it waits: every command counted is the recording's.
            .wake_fallback(Duration::from_secs(30)),
    )
    .await;
    let held = holder
        .mutex_with_options(
            "m",
            fencelock::LockOptions::default()
                .lease(fencelock::Lease::Fixed(Duration::from_secs(30))),
        )?
        .lock()
        .await?;
    let waiting = tokio::spawn({
        let mutex = waiter.mutex("m")?;
        async move { mutex.lock().await }
    });
    // Settled in its wait: queued and subscribed.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let watched = Duration::from_secs(2);
    tokio::time::sleep(watched).await;
    let ran = commands(&server);
    held.unlock().await?;
    waiting.await.expect("task")?.unlock().await?;
    let sets = ran.get("set").copied().unwrap_or(0);
    // One per interval while watched, give or take the timer's edges and a loaded machine.
    let most = u64::try_from(watched.as_millis() / interval.as_millis()).expect("count") + 2;
    assert!(
        (1..=most).contains(&sets),
        "{sets} SETs in {watched:?} at one per {interval:?}: {ran:?}"
    );
    let others: u64 = ran
        .iter()
        .filter(|(c, _)| *c != "set")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        others, 0,
        "a waiter sends nothing else while it waits: {ran:?}"
    );
    Ok(())
}
