//! The faked clock against a real server: `TIME` and key expiry follow the offset the test
//! sets, and a fast clock runs fast.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock_testkit::{FakedClock, RedisServer, ServerOptions};

/// The server's `TIME`, in seconds since the epoch.
fn server_time(server: &RedisServer) -> f64 {
    let reply = server.cli(&["TIME"]);
    let mut parts = reply
        .lines()
        .map(|l| l.trim().parse::<f64>().expect("a number"));
    let (secs, micros) = (parts.next().expect("seconds"), parts.next().expect("µs"));
    secs + micros / 1e6
}

fn true_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64()
}

#[test]
fn a_stepped_clock_moves_time_and_expiry() {
    if !FakedClock::available() {
        eprintln!("skipped: no libfaketime or no server to run under it");
        return;
    }
    let clock = FakedClock::new();
    let server = RedisServer::start_with(ServerOptions::default().faked_clock(&clock));
    // Generous margins: the machine is shared, and only the sign and size of a step matter.
    assert!((server_time(&server) - true_time()).abs() < 5.0);
    assert_eq!(server.cli(&["SET", "k", "v", "PX", "60000"]), "OK");
    clock.set_offset(90.0);
    assert!(server_time(&server) - true_time() > 80.0);
    assert_eq!(
        server.cli(&["EXISTS", "k"]),
        "0",
        "a step forward expires the key"
    );
    clock.set_offset(-90.0);
    assert!(true_time() - server_time(&server) > 80.0);
}

#[test]
fn a_fast_clock_runs_fast() {
    if !FakedClock::available() {
        eprintln!("skipped: no libfaketime or no server to run under it");
        return;
    }
    let clock = FakedClock::with_rate(4.0);
    let server = RedisServer::start_with(ServerOptions::default().faked_clock(&clock));
    let (server_before, true_before) = (server_time(&server), true_time());
    std::thread::sleep(Duration::from_secs(2));
    let server_went = server_time(&server) - server_before;
    let true_went = true_time() - true_before;
    assert!(
        server_went > true_went * 2.0,
        "{server_went} s on the server in {true_went} s"
    );
}
