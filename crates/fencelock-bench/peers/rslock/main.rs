//! Workers of the rslock peer for fencelock-bench: W tasks, each with its own `LockManager`,
//! contend for one lock in one process.
//!
//! Usage: rslock-worker URL NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT
//! VARIANT: rslock (its default retries: 3, 0..200 ms apart) or rslock-1ms (0..1 ms apart).
//! MODE: handoff, immediate or uncontended (each worker locks names of its own).
//! Prints "start 0", one "grant WORKER ACQUIRED_NS RELEASED_NS" per grant or, uncontended,
//! one "cycles WORKER COUNT" per worker and "elapsed NS", then "end".

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rslock::LockManager;
use tokio::sync::watch;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 8 {
        eprintln!("usage: rslock-worker URL NAME WORKERS MODE HOLD_MS DURATION_MS VARIANT");
        std::process::exit(64);
    }
    let url = args[1].clone();
    let name = args[2].clone();
    let workers: usize = args[3].parse().expect("WORKERS is a number");
    let handoff = args[4] == "handoff";
    let uncontended = args[4] == "uncontended";
    let hold = Duration::from_secs_f64(args[5].parse::<f64>().expect("HOLD_MS") / 1000.0);
    let window = Duration::from_secs_f64(args[6].parse::<f64>().expect("DURATION_MS") / 1000.0);
    let best = args[7].ends_with("-1ms");
    let start = Instant::now();
    let end = start + window;
    let acquires = Arc::new(watch::Sender::new(0u64));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let cycles = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..workers {
        let mut manager = LockManager::new(vec![url.clone()]);
        if best {
            manager.set_retry(3, Duration::from_millis(1));
        }
        let (name, acquires, grants) = (name.clone(), acquires.clone(), grants.clone());
        let cycles = cycles.clone();
        tasks.push(tokio::spawn(async move {
            if uncontended {
                let mut count = 0u64;
                while Instant::now() < end {
                    let resource = format!("{name}:{index}:{count}");
                    let guard = manager
                        .acquire(resource.as_bytes(), Duration::from_secs(30))
                        .await
                        .expect("acquire");
                    guard.release().await;
                    count += 1;
                }
                cycles.lock().expect("cycles").push((index, count));
                return;
            }
            while Instant::now() < end {
                let guard = manager
                    .acquire(name.as_bytes(), Duration::from_secs(30))
                    .await
                    .expect("acquire");
                let acquired = Instant::now();
                let mut seq = 0;
                acquires.send_modify(|n| {
                    *n += 1;
                    seq = *n;
                });
                if handoff {
                    tokio::task::block_in_place(|| std::thread::sleep(hold));
                }
                let released = Instant::now();
                guard.release().await;
                let ns = |t: Instant| t.duration_since(start).as_nanos();
                grants
                    .lock()
                    .expect("grants")
                    .push((index, ns(acquired), ns(released)));
                if handoff {
                    let mut rx = acquires.subscribe();
                    let until = tokio::time::Instant::from_std(end);
                    tokio::select! {
                        _ = rx.wait_for(|n| *n > seq) => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    let mut out = format!("start 0\nelapsed {}\n", start.elapsed().as_nanos());
    for (i, c) in cycles.lock().expect("cycles").iter() {
        out.push_str(&format!("cycles {i} {c}\n"));
    }
    for (i, a, r) in grants.lock().expect("grants").iter() {
        out.push_str(&format!("grant {i} {a} {r}\n"));
    }
    out.push_str("end");
    println!("{out}");
}
