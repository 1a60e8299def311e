//! The MultiMutex against a real redis-server: all or none, exclusion with single-name mutexes,
//! fences per name, waking on any name, renewal, the lost signal, cancellation, and freedom
//! from deadlock between sets given in opposite orders.

use std::time::{Duration, Instant};

use crate::common::{client, client_with, command_calls, ms};
use fencelock::{Client, ClientOptions, Error, Fence, Lease, LockOptions, Lost, MultiMutexGuard};
use fencelock_testkit::process::monotonic_nanos;
use fencelock_testkit::{check_no_overlap, RedisServer};

fn fixed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Fixed(lease))
}

fn renewed(lease: Duration) -> LockOptions {
    LockOptions::default().lease(Lease::Renewed(lease))
}

fn key(name: &str) -> String {
    format!("fencelock:{{{name}}}:mutex")
}

/// Whether `key` holds a lock: a released one keeps only the name's last fence (`~<fence>`).
fn is_held(server: &RedisServer, key: &str) -> bool {
    let value = server.cli(&["GET", key]);
    !value.is_empty() && !value.starts_with('~')
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cli(&["PTTL", key]).parse().expect("pttl")
}

/// Waiters that only notifications can wake in time: the fallback timer is far longer than any
/// hand-off these tests accept.
fn slow_fallback() -> ClientOptions {
    ClientOptions::default().wake_fallback(Duration::from_secs(10))
}

fn fences(guard: &MultiMutexGuard) -> Vec<(String, Fence)> {
    guard.fences().map(|(n, f)| (n.to_owned(), f)).collect()
}

#[tokio::test]
async fn a_held_name_refuses_the_whole_set_and_nothing_is_taken() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a
        .mutex_with_options("b", fixed(Duration::from_secs(20)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    for names in [["a", "b", "c"], ["c", "b", "a"]] {
        match b.multi_mutex(names).expect("names").try_lock().await {
            Err(Error::Held { remaining, .. }) => {
                let left = remaining.expect("the holder's lease has an expiry");
                assert!(left > Duration::from_secs(19) && left <= Duration::from_secs(20));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        for name in ["a", "c"] {
            assert!(!is_held(&server, &key(name)), "{name} was taken");
        }
    }
    // The longest remaining lease among the held names.
    let longer = a
        .mutex_with_options("c", fixed(Duration::from_secs(40)))
        .expect("name")
        .lock()
        .await
        .expect("lock");
    match b
        .multi_mutex(["a", "b", "c"])
        .expect("names")
        .try_lock()
        .await
    {
        Err(Error::Held { remaining, .. }) => {
            assert!(remaining.expect("expiry") > Duration::from_secs(39));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    held.unlock().await.expect("unlock");
    longer.unlock().await.expect("unlock");
    let all = b
        .multi_mutex(["a", "b", "c"])
        .expect("names")
        .try_lock()
        .await
        .expect("free now");
    all.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_multi_lock_and_a_mutex_of_one_of_its_names_exclude_each_other() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let multi = a.multi_mutex(["x", "y"]).expect("names");
    let guard = multi.try_lock().await.expect("lock");
    for name in ["x", "y"] {
        assert!(matches!(
            b.mutex(name).expect("name").try_lock().await,
            Err(Error::Held { .. })
        ));
    }
    // The same client, and the names in the other order, are no exception.
    assert!(matches!(
        a.multi_mutex(["y", "x"]).expect("names").try_lock().await,
        Err(Error::Held { .. })
    ));
    guard.unlock().await.expect("unlock");

    let single = b.mutex("y").expect("name").try_lock().await.expect("lock");
    assert!(matches!(multi.try_lock().await, Err(Error::Held { .. })));
    assert!(!is_held(&server, &key("x")));
    single.unlock().await.expect("unlock");
    multi
        .try_lock()
        .await
        .expect("free")
        .unlock()
        .await
        .expect("unlock");
}

#[tokio::test]
async fn each_name_gets_its_own_rising_fence_from_mutexes_and_multi_locks_alike() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let multi = c.multi_mutex(["p", "q"]).expect("names");
    let mut last = std::collections::HashMap::<String, Fence>::new();
    let mut check = |name: &str, fence: Fence| {
        if let Some(&before) = last.get(name) {
            assert!(fence > before, "{name}: fence {fence} after {before}");
        }
        last.insert(name.to_owned(), fence);
    };
    for i in 0..100 {
        match i % 4 {
            0 | 1 => {
                let guard = multi.lock().await.expect("lock");
                let got = fences(&guard);
                assert_eq!(
                    got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
                    ["p", "q"],
                    "the caller's order"
                );
                assert_eq!(guard.fence_of("q"), Some(got[1].1));
                assert_eq!(guard.fence_of("r"), None);
                for (name, fence) in got {
                    check(&name, fence);
                }
                guard.unlock().await.expect("unlock");
                if i % 4 == 1 {
                    // Lose the remembered fences behind the client's back.
                    server.cli(&["DEL", &key("p"), &key("q")]);
                }
            }
            _ => {
                let name = if i % 4 == 2 { "p" } else { "q" };
                let guard = c.mutex(name).expect("name").lock().await.expect("lock");
                check(name, guard.fence());
                guard.unlock().await.expect("unlock");
            }
        }
    }
}

/// Holds `held` with single-name mutexes, starts a multi-lock of `{a, b}` waiting, then releases
/// the held names one by one; returns how long after the last release the waiter got the lock.
async fn wake_after_releasing(server: &RedisServer, held: &[&str]) -> Duration {
    let holder = client(server).await;
    let waiter = client_with(server, slow_fallback()).await;
    let mut guards = Vec::new();
    for name in held {
        guards.push(
            holder
                .mutex(name)
                .expect("name")
                .lock()
                .await
                .expect("lock"),
        );
    }
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .multi_mutex(["a", "b"])
            .expect("names")
            .lock()
            .await
            .expect("lock");
        (Instant::now(), guard)
    });
    tokio::time::sleep(ms(300)).await;
    let mut released = Instant::now();
    let last = guards.len() - 1;
    for (i, guard) in guards.into_iter().enumerate() {
        released = Instant::now();
        guard.unlock().await.expect("unlock");
        if i < last {
            tokio::time::sleep(ms(300)).await;
            assert!(
                !waiting.is_finished(),
                "granted while a name was still held"
            );
        }
    }
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken well before the 10 s fallback")
        .expect("task");
    guard.unlock().await.expect("unlock");
    acquired - released
}

#[tokio::test]
async fn a_waiting_multi_lock_is_woken_by_a_release_of_either_name() {
    for held in [&["a"][..], &["b"], &["a", "b"], &["b", "a"]] {
        let server = RedisServer::start();
        let woken = wake_after_releasing(&server, held).await;
        println!("held {held:?}: acquired {woken:?} after the last release");
        assert!(woken < Duration::from_secs(1), "{held:?}: {woken:?}");
    }
}

#[tokio::test]
async fn a_release_by_a_multi_lock_wakes_the_waiters_of_each_name() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let guard = holder
        .multi_mutex(["a", "b"])
        .expect("names")
        .lock()
        .await
        .expect("lock");
    let mut waiting = Vec::new();
    for name in ["a", "b"] {
        let c = client_with(&server, slow_fallback()).await;
        waiting.push(tokio::spawn(async move {
            let guard = c.mutex(name).expect("name").lock().await.expect("lock");
            (Instant::now(), guard)
        }));
    }
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    for waiter in waiting {
        let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken well before the 10 s fallback")
            .expect("task");
        assert!(acquired - released < Duration::from_secs(1));
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test]
async fn a_refused_multi_waiter_passes_the_wake_on_to_a_mutex_waiter_of_the_freed_name() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    // Both waiters in one client, where a release wakes one waiter of the name at a time; the
    // multi-lock registered first, so the release of `a` reaches it first.
    let waiters = client_with(&server, slow_fallback()).await;
    let lease = fixed(Duration::from_secs(30));
    let a = holder
        .mutex_with_options("a", lease.clone())
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let b = holder
        .mutex_with_options("b", lease)
        .expect("name")
        .lock()
        .await
        .expect("lock");
    let multi = waiters.multi_mutex(["a", "b"]).expect("names");
    let multi_waiting = tokio::spawn(async move { multi.lock().await.expect("lock") });
    tokio::time::sleep(ms(200)).await;
    let single = waiters.mutex("a").expect("name");
    let single_waiting = tokio::spawn(async move {
        let guard = single.lock().await.expect("lock");
        (Instant::now(), guard)
    });
    tokio::time::sleep(ms(200)).await;
    let released = Instant::now();
    a.unlock().await.expect("unlock");
    let (acquired, single_guard) = tokio::time::timeout(Duration::from_secs(5), single_waiting)
        .await
        .expect("the mutex waiter gets the freed name")
        .expect("task");
    println!(
        "mutex waiter got `a` {:?} after release",
        acquired - released
    );
    assert!(acquired - released < Duration::from_secs(1));
    assert!(!multi_waiting.is_finished());
    b.unlock().await.expect("unlock");
    single_guard.unlock().await.expect("unlock");
    let guard = tokio::time::timeout(Duration::from_secs(2), multi_waiting)
        .await
        .expect("the multi-lock follows")
        .expect("task");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn renewal_keeps_every_name_for_three_leases() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let rival = client(&server).await;
    // Long enough that a loaded machine's scheduling delays do not outlast two renewals.
    let lease = ms(900);
    let guard = holder
        .multi_mutex_with_options(["r1", "r2", "r3"], renewed(lease))
        .expect("names")
        .lock()
        .await
        .expect("lock");
    let start = Instant::now();
    while start.elapsed() < lease * 3 {
        assert!(guard.is_held(), "renewal must keep the lease valid");
        for name in ["r1", "r2", "r3"] {
            assert!(
                matches!(
                    rival.mutex(name).expect("name").try_lock().await,
                    Err(Error::Held { .. })
                ),
                "{name} must stay taken at {:?}",
                start.elapsed()
            );
        }
        tokio::time::sleep(ms(50)).await;
    }
    for name in ["r1", "r2", "r3"] {
        assert!(pttl(&server, &key(name)) > 0);
    }
    guard.unlock().await.expect("every name still ours");
    for name in ["r1", "r2", "r3"] {
        assert!(!is_held(&server, &key(name)));
    }
}

#[tokio::test]
async fn lost_fires_when_one_key_is_deleted_and_unlock_frees_the_rest() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lease = ms(600);
    let guard = c
        .multi_mutex_with_options(["d1", "d2"], renewed(lease))
        .expect("names")
        .lock()
        .await
        .expect("lock");
    server.cli(&["DEL", &key("d2")]);
    let reason = tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost must fire within the next renewal");
    assert_eq!(reason, Lost::Revoked);
    assert!(!guard.is_held());
    assert!(is_held(&server, &key("d1")));
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        !is_held(&server, &key("d1")),
        "what was still held is released"
    );
}

#[tokio::test]
async fn extend_moves_every_lease_or_none() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .multi_mutex_with_options(["e1", "e2"], fixed(ms(2000)))
        .expect("names")
        .lock()
        .await
        .expect("lock");
    guard.extend(Duration::from_secs(60)).await.expect("extend");
    for name in ["e1", "e2"] {
        assert!(pttl(&server, &key(name)) > 50_000);
    }
    // One name taken by another owner: nothing is extended and the guard is lost.
    server.cli(&["DEL", &key("e2")]);
    let taken = b.mutex("e2").expect("name").lock().await.expect("lock");
    assert!(matches!(
        guard.extend(Duration::from_secs(120)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(pttl(&server, &key("e1")) <= 60_000);
    assert!(!guard.is_held());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(!is_held(&server, &key("e1")));
    assert!(taken.is_held());
    taken
        .unlock()
        .await
        .expect("the other owner's name was left alone");
}

#[tokio::test]
async fn aborting_an_acquire_in_flight_leaves_every_name_free() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    let warm = a.multi_mutex(["w1", "w2"]).expect("names");
    warm.lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    server.pause();
    let multi = a.multi_mutex(["f1", "f2", "f3"]).expect("names");
    let aborted = tokio::time::timeout(ms(100), multi.lock()).await;
    assert!(aborted.is_err());
    server.resume();
    // The grant happened after the abort; the background release must undo it long before the
    // 30 s lease would.
    let start = Instant::now();
    for name in ["f1", "f2", "f3"] {
        let guard = b
            .mutex(name)
            .expect("name")
            .lock_timeout(Duration::from_secs(5))
            .await
            .expect("the aborted grant is released");
        guard.unlock().await.expect("unlock");
    }
    println!("every name free {:?} after the resume", start.elapsed());
}

#[tokio::test]
async fn a_dropped_guard_releases_every_name_in_the_background() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let multi = c.multi_mutex(["g1", "g2"]).expect("names");
    drop(multi.lock().await.expect("lock"));
    let again = multi
        .lock_timeout(Duration::from_secs(2))
        .await
        .expect("released by drop, not by its 30 s lease");
    again.unlock().await.expect("unlock");
}

/// Runs `rounds` critical sections under `lock`, recording each as a monotonic interval. Each
/// guard is dropped, so it is released in the background.
async fn hold_repeatedly<F, Fut, G>(rounds: usize, lock: F) -> Vec<(u64, u64)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = fencelock::Result<G>>,
{
    let mut intervals = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let guard = tokio::time::timeout(Duration::from_secs(10), lock())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no grant in 10 s, a deadlock"))
            .expect("lock");
        let entered = monotonic_nanos();
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
        intervals.push((entered, monotonic_nanos()));
        drop(guard);
    }
    intervals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_in_opposite_orders_never_deadlock_and_never_overlap() {
    let server = RedisServer::start();
    const ROUNDS: usize = 150;
    let ab = client(&server)
        .await
        .multi_mutex(["A", "B"])
        .expect("names");
    let ba = client(&server)
        .await
        .multi_mutex(["B", "A"])
        .expect("names");
    let only_a = client(&server).await.mutex("A").expect("name");
    let only_b = client(&server).await.mutex("B").expect("name");
    let started = Instant::now();
    let ab_task = tokio::spawn(async move { hold_repeatedly(ROUNDS, || ab.lock()).await });
    let ba_task = tokio::spawn(async move { hold_repeatedly(ROUNDS, || ba.lock()).await });
    let a_task = tokio::spawn(async move { hold_repeatedly(ROUNDS, || only_a.lock()).await });
    let b_task = tokio::spawn(async move { hold_repeatedly(ROUNDS, || only_b.lock()).await });
    let ab = ab_task.await.expect("task");
    let ba = ba_task.await.expect("task");
    let a = a_task.await.expect("task");
    let b = b_task.await.expect("task");
    println!(
        "4 × {ROUNDS} critical sections over A and B in {:?}",
        started.elapsed()
    );
    let mut holders_of_a: Vec<_> = ab.iter().chain(&ba).chain(&a).copied().collect();
    let mut holders_of_b: Vec<_> = ab.iter().chain(&ba).chain(&b).copied().collect();
    if let Err(overlap) = check_no_overlap(&mut holders_of_a) {
        panic!("two holders of A at once: {overlap}");
    }
    if let Err(overlap) = check_no_overlap(&mut holders_of_b) {
        panic!("two holders of B at once: {overlap}");
    }
}

#[tokio::test]
async fn unlock_reports_not_held_when_a_name_was_taken_and_frees_the_rest() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .multi_mutex_with_options(["u1", "u2"], fixed(ms(5000)))
        .expect("names")
        .lock()
        .await
        .expect("lock");
    server.cli(&["DEL", &key("u1")]);
    let taken = b.mutex("u1").expect("name").lock().await.expect("lock");
    let value = server.cli(&["GET", &key("u1")]);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        server.cli(&["GET", &key("u1")]),
        value,
        "another owner's name is untouched"
    );
    assert!(!is_held(&server, &key("u2")));
    taken.unlock().await.expect("unlock");
}

#[tokio::test]
async fn unlock_resent_after_a_timeout_reports_success() {
    let server = RedisServer::start();
    let options = ClientOptions::default().response_timeout(ms(200));
    let c = client_with(&server, options).await;
    let multi = c.multi_mutex(["s1", "s2"]).expect("names");
    // Load the scripts first: on a fresh server the paused request would only get NOSCRIPT.
    multi
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let guard = multi.lock().await.expect("lock");
    server.pause();
    let unlock = tokio::spawn(guard.unlock());
    tokio::time::sleep(ms(260)).await;
    server.resume();
    unlock
        .await
        .expect("task")
        .expect("a release whose reply was lost is still a release");
    assert!(!is_held(&server, &key("s1")) && !is_held(&server, &key("s2")));
}

#[tokio::test]
async fn each_operation_is_one_script_call() {
    let server = RedisServer::start();
    let c = client_with(&server, ClientOptions::default()).await;
    let names: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
    let multi = c
        .multi_mutex_with_options(&names, fixed(Duration::from_secs(30)))
        .expect("names");
    // Load the scripts first, so that every call below is one EVALSHA.
    let warm = multi.lock().await.expect("lock");
    warm.extend(Duration::from_secs(30)).await.expect("extend");
    warm.unlock().await.expect("unlock");
    let calls =
        |server: &RedisServer| command_calls(server, "evalsha") + command_calls(server, "eval");
    let before = calls(&server);
    let guard = multi.try_lock().await.expect("lock");
    assert_eq!(calls(&server) - before, 1, "acquire");
    guard.extend(Duration::from_secs(30)).await.expect("extend");
    assert_eq!(calls(&server) - before, 2, "extend");
    assert_eq!(guard.fences().len(), 100);
    guard.unlock().await.expect("unlock");
    assert_eq!(calls(&server) - before, 3, "release");
    assert_eq!(
        server.cli(&["DBSIZE"]),
        "100",
        "only the fence keys are left"
    );
}

#[tokio::test]
async fn bad_input_gets_typed_errors_and_repeated_names_are_locked_once() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert!(matches!(
        c.multi_mutex(Vec::<&str>::new()),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        c.multi_mutex(["a", ""]),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        c.multi_mutex([vec![b'x'; fencelock::MAX_NAME_LEN + 1]]),
        Err(Error::InvalidName { .. })
    ));
    let most: Vec<String> = (0..fencelock::MAX_MULTI_NAMES)
        .map(|i| i.to_string())
        .collect();
    assert!(c.multi_mutex(&most).is_ok());
    let too_many = (0..).map(|i: u64| i.to_string());
    assert!(matches!(
        c.multi_mutex(too_many),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        c.multi_mutex_with_options(["a"], fixed(Duration::ZERO)),
        Err(Error::InvalidOption {
            option: "lease",
            ..
        })
    ));

    let repeated = c.multi_mutex(["from", "to", "from"]).expect("names");
    assert_eq!(repeated.names().collect::<Vec<_>>(), ["from", "to"]);
    let guard = repeated.lock().await.expect("lock");
    assert_eq!(guard.fences().len(), 2);
    guard.unlock().await.expect("unlock");
    let same = c.multi_mutex(["self", "self"]).expect("names");
    same.lock()
        .await
        .expect("a transfer to the same account")
        .unlock()
        .await
        .expect("unlock");

    // Names may be any bytes, braces included.
    let odd: [&[u8]; 3] = [b"\x00\xff{}", "ключ/🔒".as_bytes(), b"}"];
    let guard = c
        .multi_mutex(odd)
        .expect("names")
        .lock()
        .await
        .expect("lock");
    assert_eq!(guard.fence_of(b"}").map(|f| f.get() > 0), Some(true));
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_key_of_another_type_is_a_typed_error_and_nothing_is_taken() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cli(&["HSET", &key("t2"), "field", "value"]);
    let err = c
        .multi_mutex(["t1", "t2"])
        .expect("names")
        .try_lock()
        .await
        .expect_err("wrong type");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert!(!is_held(&server, &key("t1")));
}

#[tokio::test]
async fn public_types_are_send_and_sync() {
    fn is_send_sync<T: Send + Sync + 'static>(_: &T) {}
    let server = RedisServer::start();
    let c: Client = client(&server).await;
    let multi = c.multi_mutex(["k"]).expect("name");
    is_send_sync(&multi);
    let guard = tokio::spawn(async move { multi.lock().await })
        .await
        .expect("task")
        .expect("lock");
    is_send_sync(&guard);
    guard.unlock().await.expect("unlock");
}
