//! The blocking API against a real redis-server, from plain threads: exclusion, hand-off to a
//! waiting thread, renewal while the holder blocks, release on drop, and refusal inside a
//! tokio runtime.

use std::sync::mpsc;
use std::sync::{Arc, Mutex as StdMutex};
use std::thread;
use std::time::{Duration, Instant};

use relock::blocking::Client;
use relock::{ClientOptions, Error, Lease, Lost, MutexOptions};
use relock_testkit::RedisServer;

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
        let guard = a.mutex("job").expect("name").lock().expect("lock");
        assert!(guard.is_held());
        assert_eq!(guard.name(), "job");
        let contender = b.mutex("job").expect("name");
        let refused = thread::spawn(move || contender.try_lock())
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
        let again = b.mutex("job").expect("name").try_lock().expect("free now");
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
                let mutex = clients[i % 2].mutex("counter").expect("name");
                let sections = Arc::clone(&sections);
                thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        let guard = mutex.lock_timeout(Duration::from_secs(20)).expect("lock");
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
        let guard = holder.mutex("handoff").expect("name").lock().expect("lock");
        let mutex = waiting.mutex("handoff").expect("name");
        let waiter = thread::spawn(move || {
            let guard = mutex.lock().expect("lock after the release");
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
        let options = MutexOptions::default().lease(Lease::Renewed(ms(300)));
        let guard = a
            .mutex_with_options("renewed", options)
            .expect("name")
            .lock()
            .expect("lock");
        // The holding thread blocks on something else for several leases.
        thread::sleep(ms(1500));
        assert!(guard.is_held(), "renewed while the thread slept");
        assert!(guard.valid_until() > Instant::now());
        assert_eq!(guard.wait_lost(ms(100)).expect("outside a runtime"), None);
        assert!(matches!(
            b.mutex("renewed").expect("name").try_lock(),
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
        let options = MutexOptions::default().lease(Lease::Fixed(ms(300)));
        let mutex = c.mutex_with_options("fixed", options).expect("name");
        let guard = mutex.lock().expect("lock");
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
        let next = mutex
            .lock_timeout(Duration::from_secs(1))
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
        let options = MutexOptions::default().lease(Lease::Renewed(ms(300)));
        let guard = c
            .mutex_with_options("revoked", options)
            .expect("name")
            .lock()
            .expect("lock");
        server.cli(&["DEL", "relock:{revoked}:mutex"]);
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
            let guard = a.mutex("dropped").expect("name").lock().expect("lock");
            assert!(matches!(mutex.try_lock(), Err(Error::Held { .. })));
            drop(guard);
            let next = mutex.try_lock().expect("released by the drop");
            next.unlock().expect("unlock");
        }
    });
}

#[test]
fn handles_and_guards_outlive_their_client() {
    within(Duration::from_secs(20), || {
        let server = RedisServer::start();
        let c = client(&server);
        let options = MutexOptions::default().lease(Lease::Renewed(ms(300)));
        let mutex = c.mutex_with_options("orphan", options).expect("name");
        drop(c);
        let guard = mutex.lock().expect("the runtime lives on with the handle");
        drop(mutex);
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
        let outside = mutex.lock().expect("lock outside a runtime");
        let url = server.url();

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
            assert!(matches!(mutex.try_lock(), Err(Error::BlockingInAsync)));
            assert!(matches!(
                outside.wait_lost(ms(10)),
                Err(Error::BlockingInAsync)
            ));
            assert!(matches!(
                outside.extend(ms(5000)),
                Err(Error::BlockingInAsync)
            ));
            let in_task = tokio::spawn(async move {
                let refused = mutex.lock();
                (mutex, refused.map(drop))
            });
            let (mutex, refused) = in_task.await.expect("task");
            assert!(matches!(refused, Err(Error::BlockingInAsync)));
            let refused = tokio::task::spawn_blocking(move || mutex.try_lock().map(drop))
                .await
                .expect("blocking task");
            assert!(matches!(refused, Err(Error::BlockingInAsync)));
            // Still held: none of the refused calls touched it.
            assert!(outside.is_held());
            let async_client = relock::Client::connect(url.as_str())
                .await
                .expect("connect");
            (outside, async_client)
        });
        assert!(outside.is_held());

        // Dropped inside a runtime, a guard releases in the background, and a client drops
        // without a panic.
        let async_mutex = async_client.mutex("in-async").expect("name");
        runtime.block_on(async move {
            drop(outside);
            drop(c);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match async_mutex.try_lock().await {
                    Ok(guard) => break guard.unlock().await.expect("unlock"),
                    Err(Error::Held { .. }) if Instant::now() < deadline => {
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
