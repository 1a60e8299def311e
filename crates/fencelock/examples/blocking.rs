//! The blocking API, for programs without an async runtime (a command-line tool, the threads
//! of a synchronous server): four threads write the parts of a report, one at a time, under
//! the lock `nightly-report`, as threads of several instances would.
//!
//! `cargo run -p fencelock --example blocking` uses the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1/`). The lock handle is the async one; the blocking client runs its
//! `lock()` to completion on the calling thread, which blocks until the lock is its own, and
//! the guard it returns blocks on `unlock`. The lease is renewed meanwhile by the client's own
//! runtime thread. Each grant's fence is larger than the one before it, and goes with what the
//! thread writes.

use std::error::Error;
use std::thread;
use std::time::Duration;

use fencelock::blocking::Client;
use fencelock::{Fence, Mutex};

const THREADS: usize = 4;

fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = Client::connect(url.as_str())?;
    let report = client.mutex("nightly-report")?;

    let threads: Vec<_> = (1..=THREADS)
        .map(|part| {
            let (client, report) = (client.clone(), report.clone());
            thread::spawn(move || write_part(&client, &report, part))
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "a thread panicked")??;
    }
    // Gives back what a thread that failed left held, before the program exits.
    client.shutdown()?;
    println!("{THREADS} parts written, one at a time");
    Ok(())
}

/// Blocks until this thread holds the lock, writes its part, and releases the lock.
fn write_part(client: &Client, report: &Mutex, part: usize) -> Result<(), fencelock::Error> {
    let guard = client.lock(report.lock())?;
    append(part, guard.fence());
    guard.unlock() // Err(NotHeld) if the lease had been lost
}

/// Stands for the write: what it writes to keeps the fence and refuses a lower one.
fn append(part: usize, fence: Fence) {
    println!("part {part}: writing (fence {fence})");
    thread::sleep(Duration::from_millis(100));
    println!("part {part}: written");
}
