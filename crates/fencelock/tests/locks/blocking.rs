//! The blocking API against a real redis-server, from plain threads: exclusion, hand-off to a
//! waiting thread, renewal while the holder blocks, release on drop, and refusal inside a
//! tokio runtime. Lock handles are the async ones; the blocking client runs their acquires
//! (`client.lock(mutex.lock())`) and other operations (`client.block_on(...)`).

use std::sync::mpsc;
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::blocking::Client;
use fencelock::{ClientOptions, Deployment, Error, Lease, LockOptions, Lost};
use fencelock_testkit::RedisServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client(server: &RedisServer) -> Client {
    client_with(server, ClientOptions::default())
}

fn client_with(server: &RedisServer, options: ClientOptions) -> Client {
    Client::connect_with_options(server.url().as_str(), options)
        .expect("connect to the test server")
}

/// Runs `test` on its own thread and fails if it does not finish within `limit`.
fn within<T: Send + 'static>(limit: Duration, test: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    let worker = thread::spawn(move || {
        let _ = done.send(test());
    });
    match finished.recv_timeout(limit) {
        Ok(value) => {
            worker.join().expect("the test thread");
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the test thread sends before it ends"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the test ran past {limit:?}"),
    }
}

#[test]
fn lock_try_lock_and_unlock_from_plain_threads() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let a = client(&server);
        let b = client(&server);
        let guard = a.lock(a.mutex("job").expect("name").lock()).expect("lock");
        assert!(guard.is_held());
        assert_eq!(guard.name(), "job");
        let contender = b.mutex("job").expect("name");
        let refused = thread::spawn({
            let b = b.clone();
            move || b.lock(contender.try_lock())
        })
        .join()
        .expect("thread");
        match refused {
            Err(Error::Held { name, remaining }) => {
                assert_eq!(name, "job");
                assert!(remaining.expect("an expiry") > Duration::from_secs(29));
            }
            other => panic!("expected Held, got {other:?}"),
        }
        let fence = guard.fence();
        guard.unlock().expect("unlock");
        let again = b
            .lock(b.mutex("job").expect("name").try_lock())
            .expect("free now");
        assert!(again.fence() > fence);
        again.unlock().expect("unlock");
    });
}

#[test]
fn contending_threads_never_overlap() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 10;
    within(Duration::from_secs(60), || {
        let server = RedisServer::start();
        // Two clients, so that threads of different clients contend through Redis and not
        // only through one client.
        let clients = [client(&server), client(&server)];
        let sections = Arc::new(StdMutex::new(Vec::new()));
        let threads: Vec<_> = (0..THREADS)
            .map(|i| {
                let client = clients[i % 2].clone();
                let mutex = client.mutex("counter").expect("name");
                let sections = Arc::clone(&sections);
                thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let guard = client
                            .lock(mutex.lock_timeout(Duration::from_secs(20)))
                            .expect("lock");
                        let start = Instant::now();
                        thread::sleep(ms(5));
                        let end = Instant::now();
                        let fence = guard.fence();
                        guard.unlock().expect("still held");
                        sections.lock().expect("sections").push((start, end, fence));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("worker");
        }
        let mut sections = sections.lock().expect("sections").clone();
        assert_eq!(sections.len(), THREADS * ROUNDS);
        sections.sort_by_key(|&(start, _, _)| start);
        for pair in sections.windows(2) {
            let ((_, end, fence), (start, _, next_fence)) = (pair[0], pair[1]);
            assert!(end <= start, "two critical sections overlapped");
            assert!(next_fence > fence, "fences rise with each grant");
        }
    });
}

#[test]
fn a_waiting_thread_is_woken_by_a_release_in_another() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        // No polling to speak of: only the release notification can wake the waiter in time.
        let options = ClientOptions::default().wake_fallback(Duration::from_secs(30));
        let holder = client(&server);
        let waiting = client_with(&server, options);
        let guard = holder
            .lock(holder.mutex("handoff").expect("name").lock())
            .expect("lock");
        let mutex = waiting.mutex("handoff").expect("name");
        let waiter = thread::spawn(move || {
            let guard = waiting.lock(mutex.lock()).expect("lock after the release");
            let woken = Instant::now();
            guard.unlock().expect("unlock");
            woken
        });
        thread::sleep(ms(300));
        assert!(
            !waiter.is_finished(),
            "the waiter waits while the lock is held"
        );
        let released = Instant::now();
        guard.unlock().expect("unlock");
        let woken = waiter.join().expect("waiter");
        assert!(
            woken.duration_since(released) < Duration::from_secs(2),
            "woken {:?} after the release",
            woken.duration_since(released)
        );
    });
}

#[test]
fn the_lease_is_renewed_while_the_holding_thread_sleeps() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let a = client(&server);
        let b = client(&server);
        let options = LockOptions::default().lease(Lease::Renewed(ms(300)));
        let guard = a
            .lock(
                a.mutex_with_options("renewed", options)
                    .expect("name")
                    .lock(),
            )
            .expect("lock");
        // The holding thread blocks on something else for several leases.
        thread::sleep(ms(1500));
        assert!(guard.is_held(), "renewed while the thread slept");
        assert!(guard.valid_until() > Instant::now());
        assert_eq!(guard.wait_lost(ms(100)).expect("outside a runtime"), None);
        assert!(matches!(
            b.lock(b.mutex("renewed").expect("name").try_lock()),
            Err(Error::Held { .. })
        ));
        guard.unlock().expect("still held at the end");
    });
}

#[test]
fn a_fixed_lease_runs_out_and_extend_moves_it() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let options = LockOptions::default().lease(Lease::Fixed(ms(300)));
        let mutex = c.mutex_with_options("fixed", options).expect("name");
        let guard = c.lock(mutex.lock()).expect("lock");
        guard.extend(ms(1000)).expect("extend while held");
        thread::sleep(ms(500));
        assert!(guard.is_held(), "the extension outlives the first lease");
        assert_eq!(
            guard
                .wait_lost(Duration::from_secs(3))
                .expect("outside a runtime"),
            Some(Lost::Expired)
        );
        assert!(!guard.is_held());
        // The guard gives up a little before Redis does (the drift allowance).
        let next = c
            .lock(mutex.lock_timeout(Duration::from_secs(1)))
            .expect("free after the lease");
        assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
        next.unlock().expect("unlock");
    });
}

#[test]
fn a_deleted_lock_is_reported_lost() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let options = LockOptions::default().lease(Lease::Renewed(ms(300)));
        let guard = c
            .lock(
                c.mutex_with_options("revoked", options)
                    .expect("name")
                    .lock(),
            )
            .expect("lock");
        server.cli(&["DEL", "fencelock:{revoked}:mutex"]);
        assert_eq!(
            guard
                .wait_lost(Duration::from_secs(3))
                .expect("outside a runtime"),
            Some(Lost::Revoked)
        );
    });
}

#[test]
fn dropping_a_guard_frees_the_lock_before_drop_returns() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let a = client(&server);
        let b = client(&server);
        let mutex = b.mutex("dropped").expect("name");
        for _ in 0..5 {
            let guard = a
                .lock(a.mutex("dropped").expect("name").lock())
                .expect("lock");
            assert!(matches!(b.lock(mutex.try_lock()), Err(Error::Held { .. })));
            drop(guard);
            let next = b.lock(mutex.try_lock()).expect("released by the drop");
            next.unlock().expect("unlock");
        }
    });
}

#[test]
fn dropping_a_guard_while_redis_is_paused_returns_in_bounded_time() {
    within(Duration::from_secs(30), || {
        let server = RedisServer::start();
        let options = ClientOptions::default().response_timeout(ms(200));
        let c = client_with(&server, options);
        let guard = c
            .lock(c.mutex("paused").expect("name").lock())
            .expect("lock");
        server.pause();
        let started = Instant::now();
        drop(guard);
        let took = started.elapsed();
        server.resume();
        assert!(took < Duration::from_secs(5), "the drop took {took:?}");
        // The client goes on working once Redis answers again.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mutex = c.mutex("other").expect("name");
        loop {
            match c.lock(mutex.try_lock()) {
                Ok(guard) => break guard.unlock().expect("unlock"),
                Err(e) if e.is_unavailable() && Instant::now() < deadline => thread::sleep(ms(50)),
                Err(e) => panic!("after the pause: {e}"),
            }
        }
    });
}

#[test]
fn guards_outlive_their_client() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let options = LockOptions::default().lease(Lease::Renewed(ms(300)));
        let mutex = c.mutex_with_options("orphan", options).expect("name");
        let guard = c.lock(mutex.lock()).expect("lock");
        drop(c);
        drop(mutex);
        // The guard keeps the client's runtime, which goes on renewing.
        thread::sleep(ms(1000));
        assert!(guard.is_held(), "still renewed");
        guard.unlock().expect("unlock");
    });
}

#[test]
fn calls_inside_a_runtime_are_refused_not_blocked() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let mutex = c.mutex("in-async").expect("name");
        let outside = c.lock(mutex.lock()).expect("lock outside a runtime");
        let url = server.url();
        let inside = c.clone();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (outside, async_client) = runtime.block_on(async move {
            assert!(matches!(
                Client::connect(url.as_str()),
                Err(Error::BlockingInAsync)
            ));
            assert!(matches!(
                inside.lock(mutex.try_lock()),
                Err(Error::BlockingInAsync)
            ));
            assert!(matches!(
                inside.block_on(inside.locks("*")),
                Err(Error::BlockingInAsync)
            ));
            assert!(matches!(inside.shutdown(), Err(Error::BlockingInAsync)));
            assert!(matches!(
                outside.wait_lost(ms(10)),
                Err(Error::BlockingInAsync)
            ));
            assert!(matches!(
                outside.extend(ms(5000)),
                Err(Error::BlockingInAsync)
            ));
            let in_task = tokio::spawn(async move {
                let refused = inside.lock(mutex.lock());
                (inside, mutex, refused.map(drop))
            });
            let (inside, mutex, refused) = in_task.await.expect("task");
            assert!(matches!(refused, Err(Error::BlockingInAsync)));
            let refused =
                tokio::task::spawn_blocking(move || inside.lock(mutex.try_lock()).map(drop))
                    .await
                    .expect("blocking task");
            assert!(matches!(refused, Err(Error::BlockingInAsync)));
            // Still held: none of the refused calls touched it.
            assert!(outside.is_held());
            let async_client = fencelock::Client::connect(url.as_str())
                .await
                .expect("connect");
            (outside, async_client)
        });
        assert!(outside.is_held());

        // Unlocked inside a runtime, a guard is refused and released in the background;
        // dropped inside a runtime, it releases in the background too; the client drops
        // without a panic, its runtime finishing those releases first.
        let permit = c
            .lock(c.semaphore("in-async", 1).expect("name").acquire())
            .expect("permit");
        let async_mutex = async_client.mutex("in-async").expect("name");
        let async_semaphore = async_client.semaphore("in-async", 1).expect("name");
        runtime.block_on(async move {
            assert!(matches!(permit.release(), Err(Error::BlockingInAsync)));
            drop(outside);
            drop(c);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match (
                    async_mutex.try_lock().await,
                    async_semaphore.try_acquire().await,
                ) {
                    (Ok(guard), Ok(permit)) => {
                        guard.unlock().await.expect("unlock");
                        break permit.release().await.expect("release");
                    }
                    (Err(Error::Held { .. }), _) | (_, Err(Error::Held { .. }))
                        if Instant::now() < deadline =>
                    {
                        tokio::time::sleep(ms(20)).await;
                    }
                    other => panic!("not released in the background: {other:?}"),
                }
            }
        });
    });
}

#[test]
fn errors_display_in_lowercase() {
    let message = Error::BlockingInAsync.to_string();
    assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
}

#[test]
fn a_reentrant_mutex_is_granted_again_to_its_holder_only() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let lock = c.reentrant_mutex("ledger").expect("name");
        let (me, other) = (c.holder().expect("holder"), c.holder().expect("holder"));
        let outer = c.lock(lock.lock(&me)).expect("lock");
        let inner = {
            let (c, lock, me) = (c.clone(), lock.clone(), me.clone());
            thread::spawn(move || c.lock(lock.try_lock(&me)))
                .join()
                .expect("thread")
        }
        .expect("the same holder, from another thread");
        assert_eq!(inner.fence(), outer.fence());
        assert!(matches!(
            c.lock(lock.try_lock(&other)),
            Err(Error::Held { .. })
        ));
        drop(inner);
        assert!(
            matches!(c.lock(lock.try_lock(&other)), Err(Error::Held { .. })),
            "the outer hold keeps the lock"
        );
        outer.unlock().expect("unlock");
        let theirs = c
            .lock(lock.lock_timeout(&other, Duration::from_secs(2)))
            .expect("free");
        theirs.unlock().expect("unlock");
    });
}

#[test]
fn readers_share_an_rwlock_and_a_writer_waits_for_them() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let lock = c.rwlock("catalog").expect("name");
        let (alice, bob, writer) = (
            c.holder().expect("holder"),
            c.holder().expect("holder"),
            c.holder().expect("holder"),
        );
        let a = c.lock(lock.read_as(&alice)).expect("read");
        let b = {
            let (c, lock) = (c.clone(), lock.clone());
            thread::spawn(move || c.lock(lock.read_timeout_as(&bob, Duration::from_secs(2))))
                .join()
                .expect("thread")
        }
        .expect("a second reader at once");
        assert!(matches!(
            c.lock(lock.try_write_as(&writer)),
            Err(Error::Held { .. })
        ));
        assert!(
            matches!(
                c.lock(lock.write_as(&alice)),
                Err(Error::WouldDeadlock { .. })
            ),
            "a reader cannot wait to write"
        );
        let waiting = {
            let (c, lock) = (c.clone(), lock.clone());
            thread::spawn(move || {
                let guard = c
                    .lock(lock.write_as(&writer))
                    .expect("write after the readers");
                let fence = guard.fence();
                guard.unlock().expect("unlock");
                (Instant::now(), fence)
            })
        };
        thread::sleep(ms(300));
        assert!(!waiting.is_finished(), "the writer waits for the readers");
        a.unlock().expect("unlock");
        thread::sleep(ms(100));
        assert!(!waiting.is_finished(), "one reader still holds it");
        let last_release = Instant::now();
        let read_fence = b.fence();
        b.unlock().expect("unlock");
        let (wrote, write_fence) = waiting.join().expect("writer");
        assert!(wrote >= last_release);
        assert!(write_fence > read_fence);
    });
}

#[test]
fn a_semaphore_bounds_threads_to_its_permits() {
    const PERMITS: u32 = 3;
    const THREADS: usize = 6;
    within(Duration::from_secs(60), || {
        let server = RedisServer::start();
        let c = client(&server);
        let semaphore = c.semaphore("exports", PERMITS).expect("name");
        let inside = Arc::new(StdMutex::new((0_u32, 0_u32)));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (c, semaphore, inside) = (c.clone(), semaphore.clone(), Arc::clone(&inside));
                thread::spawn(move || {
                    for _ in 0..3 {
                        let permit = c
                            .lock(semaphore.acquire_timeout(Duration::from_secs(20)))
                            .expect("permit");
                        {
                            let mut inside = inside.lock().expect("count");
                            inside.0 += 1;
                            inside.1 = inside.1.max(inside.0);
                        }
                        thread::sleep(ms(50));
                        inside.lock().expect("count").0 -= 1;
                        permit.release().expect("still held");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("worker");
        }
        let most = inside.lock().expect("count").1;
        assert!(most <= PERMITS, "{most} permits held at once");
        assert!(most > 1, "permits are held side by side");

        let all = c
            .lock(semaphore.acquire_many(PERMITS))
            .expect("every permit");
        assert_eq!(all.permits(), PERMITS);
        assert!(matches!(
            c.lock(semaphore.try_acquire()),
            Err(Error::Held { .. })
        ));
        assert_eq!(c.block_on(semaphore.available()).expect("available"), 0);
        c.block_on(semaphore.set_permits(PERMITS + 2))
            .expect("raise");
        assert_eq!(
            c.block_on(semaphore.permits()).expect("permits"),
            PERMITS + 2
        );
        let more = c
            .lock(semaphore.try_acquire_many(2))
            .expect("the raised permits");
        drop(more);
        drop(all);
        assert_eq!(
            c.block_on(semaphore.available()).expect("available"),
            PERMITS + 2
        );
    });
}

/// How many wait in line for the fair mutex `name`.
fn queued(client: &Client, name: &str) -> usize {
    let info = client.block_on(client.locks_named(name)).expect("inspect");
    let queued = info.first().and_then(|lock| lock.queued).unwrap_or(0);
    usize::try_from(queued).expect("a small line")
}

#[test]
fn a_fair_mutex_serves_waiting_threads_in_arrival_order() {
    const WAITERS: usize = 3;
    within(Duration::from_secs(30), || {
        let server = RedisServer::start();
        let c = client(&server);
        let mutex = c.fair_mutex("ticket-counter").expect("name");
        let first = c.lock(mutex.lock()).expect("lock");
        let served = Arc::new(StdMutex::new(Vec::new()));
        let waiters: Vec<_> = (0..WAITERS)
            .map(|i| {
                let (own, mutex, served) = (c.clone(), mutex.clone(), Arc::clone(&served));
                let waiter = thread::spawn(move || {
                    let guard = own
                        .lock(mutex.lock_timeout(Duration::from_secs(20)))
                        .expect("turn");
                    served.lock().expect("order").push(i);
                    thread::sleep(ms(20));
                    guard.unlock().expect("unlock");
                });
                // Each takes its place in line before the next arrives.
                let deadline = Instant::now() + Duration::from_secs(10);
                while queued(&c, "ticket-counter") < i + 1 {
                    assert!(Instant::now() < deadline, "waiter {i} never took its place");
                    thread::sleep(ms(10));
                }
                waiter
            })
            .collect();
        assert!(
            matches!(c.lock(mutex.try_lock()), Err(Error::Held { .. })),
            "others wait"
        );
        first.unlock().expect("unlock");
        for waiter in waiters {
            waiter.join().expect("waiter");
        }
        assert_eq!(
            *served.lock().expect("order"),
            (0..WAITERS).collect::<Vec<_>>()
        );
    });
}

#[test]
fn a_multi_mutex_holds_every_name_and_drop_frees_them() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let transfer = c.multi_mutex(["account:17", "account:42"]).expect("names");
        assert_eq!(
            transfer.names().collect::<Vec<_>>(),
            ["account:17", "account:42"]
        );
        let guard = c.lock(transfer.lock()).expect("lock");
        assert_eq!(guard.fences().count(), 2);
        assert!(guard.fence_of("account:42").is_some());
        assert!(guard.fence_of("account:99").is_none());
        let one = c.mutex("account:42").expect("name");
        assert!(matches!(c.lock(one.try_lock()), Err(Error::Held { .. })));
        let waiter = {
            let (c, transfer) = (c.clone(), transfer.clone());
            thread::spawn(move || {
                c.lock(transfer.lock_timeout(Duration::from_secs(5)))
                    .map(drop)
            })
        };
        thread::sleep(ms(200));
        assert!(!waiter.is_finished());
        drop(guard);
        waiter.join().expect("waiter").expect("woken by the drop");
        c.lock(one.try_lock())
            .expect("free")
            .unlock()
            .expect("unlock");
    });
}

#[test]
fn inspection_lists_held_locks_and_force_unlock_revokes_them() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        assert!(c.block_on(c.lock_info("nightly")).expect("info").is_none());
        let options = LockOptions::default().lease(Lease::Renewed(ms(300)));
        let guard = c
            .lock(
                c.mutex_with_options("nightly", options)
                    .expect("name")
                    .lock(),
            )
            .expect("lock");
        let permit = c
            .lock(c.semaphore("nightly", 2).expect("name").acquire())
            .expect("permit");
        let info = c
            .block_on(c.lock_info("nightly"))
            .expect("info")
            .expect("held");
        assert_eq!(info.fence, Some(guard.fence()));
        assert_eq!(c.block_on(c.locks("night*")).expect("locks").len(), 2);
        assert_eq!(
            c.block_on(c.locks_named("nightly")).expect("locks").len(),
            2
        );
        assert_eq!(
            c.block_on(c.force_unlock("nightly")).expect("force").len(),
            2
        );
        assert_eq!(
            guard
                .wait_lost(Duration::from_secs(3))
                .expect("outside a runtime"),
            Some(Lost::Revoked)
        );
        assert!(matches!(permit.release(), Err(Error::NotHeld { .. })));
        assert!(c.block_on(c.locks("*")).expect("locks").is_empty());
    });
}

#[test]
fn a_redlock_client_offers_its_mutex_and_refuses_the_rest() {
    within(Duration::from_secs(30), || {
        let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let c = Client::connect(Deployment::redlock(urls).expect("addresses")).expect("connect");
        let guard = c
            .lock(c.mutex("report").expect("name").lock())
            .expect("lock");
        assert!(matches!(
            c.lock(c.mutex("report").expect("name").try_lock()),
            Err(Error::Held { .. })
        ));
        guard.unlock().expect("unlock");
        assert!(matches!(c.rwlock("report"), Err(Error::Unsupported { .. })));
    });
}

#[test]
fn a_cluster_client_locks_names_on_its_masters() {
    within(Duration::from_secs(60), || {
        let cluster = fencelock_testkit::RedisCluster::start();
        let nodes = || Deployment::cluster(cluster.urls()).expect("addresses");
        let a = Client::connect(nodes()).expect("connect");
        let b = Client::connect(nodes()).expect("connect");
        for name in ["report", "invoices", "lottery"] {
            let guard = a.lock(a.mutex(name).expect("name").lock()).expect("lock");
            let waiter = {
                let (b, mutex) = (b.clone(), b.mutex(name).expect("name"));
                thread::spawn(move || {
                    b.lock(mutex.lock_timeout(Duration::from_secs(10)))
                        .map(drop)
                })
            };
            thread::sleep(ms(100));
            assert!(!waiter.is_finished(), "{name} is held");
            guard.unlock().expect("unlock");
            waiter
                .join()
                .expect("waiter")
                .expect("woken by the release");
        }
    });
}

#[test]
fn a_sentinel_client_locks_on_the_master() {
    within(Duration::from_secs(60), || {
        let group = fencelock_testkit::SentinelGroup::start();
        let sentinels = Deployment::sentinel(group.sentinel_urls(), group.service_name());
        let c = Client::connect(sentinels.expect("addresses")).expect("connect");
        let permit = c
            .lock(c.semaphore("exports", 1).expect("name").acquire())
            .expect("permit");
        let info = c.block_on(c.locks_named("exports")).expect("locks");
        assert_eq!(info.len(), 1);
        permit.release().expect("release");
    });
}
