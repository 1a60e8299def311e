//! Exercises `RedisServer` against real redis-server processes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use fencelock_testkit::{check_no_overlap, RedisServer, ServerOptions};

fn raw_connect(server: &RedisServer) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    stream
}

/// Sends PING on `stream` and returns the raw reply, or the read error.
fn raw_ping(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.write_all(b"PING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn starts_and_answers_cli() {
    let server = RedisServer::start();
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.dir().join("redis.conf").is_file());
    assert!(server.log().contains("Ready to accept connections"));
    let info = server.cli(&["INFO", "server"]);
    assert!(
        info.contains(&format!("process_id:{}", server.pid())),
        "{info}"
    );
    // Persistence is off by default.
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save");
}

#[test]
fn extra_args_reach_the_server() {
    let server = RedisServer::start_with(ServerOptions::default().args(["--maxmemory", "1mb"]));
    assert_eq!(
        server.cli(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n1048576"
    );
}

#[test]
fn pause_blocks_replies_until_resume() {
    let mut server = RedisServer::start();
    let mut stream = raw_connect(&server);
    assert_eq!(raw_ping(&mut stream).unwrap(), "+PONG\r\n");

    server.pause();
    let err = raw_ping(&mut stream).expect_err("a paused server must not answer");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    assert!(server.is_running(), "a paused server is still alive");

    server.resume();
    // The PING sent while paused is answered once the process continues.
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 7];
    stream.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+PONG\r\n");
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn kill9_then_restart_on_same_port() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    server.cli(&["SET", "k", "v"]);

    server.kill9();
    assert!(!server.is_running());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    // Without persistence the data is gone.
    assert_eq!(server.cli(&["EXISTS", "k"]), "0");

    // Restarting a running server kills it first.
    let pid = server.pid();
    server.restart();
    assert_ne!(server.pid(), pid);
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn stop_works_even_when_paused() {
    let mut server = RedisServer::start();
    server.pause();
    server.stop();
    assert!(!server.is_running());
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn aof_always_survives_kill9() {
    let mut server = RedisServer::start_with(ServerOptions::default().aof_always());
    assert_eq!(server.cli(&["SET", "fence", "42"]), "OK");
    server.kill9();
    server.restart();
    assert_eq!(server.cli(&["GET", "fence"]), "42");
    assert!(server.dir().join("appendonlydir").is_dir());
}

#[test]
fn password_and_acl_user() {
    let server = RedisServer::start_with(ServerOptions::default().password("top secret").acl_user(
        "app",
        "app-pass",
        &["~fencelock:*", "+@all"],
    ));
    assert_eq!(server.password(), Some("top secret"));
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert!(server.cli_as(None, None, &["PING"]).contains("NOAUTH"));

    let app = |args: &[&str]| server.cli_as(Some("app"), Some("app-pass"), args);
    assert_eq!(app(&["SET", "fencelock:x", "1"]), "OK");
    assert!(app(&["SET", "other", "1"]).contains("NOPERM"));
    assert_eq!(app(&["ACL", "WHOAMI"]), "app");

    assert_eq!(
        server.url_with_auth(None, "top secret"),
        format!("redis://:top%20secret@127.0.0.1:{}/", server.port())
    );
    assert_eq!(
        server.url_with_auth(Some("app"), "app-pass"),
        format!("redis://app:app-pass@127.0.0.1:{}/", server.port())
    );
}

#[test]
fn replica_follows_password_protected_master() {
    let master = RedisServer::start_with(ServerOptions::default().password("m-pass"));
    let replica = RedisServer::start_with(ServerOptions::default().replica_of(&master));
    replica.wait_replication_link_up(Duration::from_secs(10));

    master.cli(&["SET", "replicated", "yes"]);
    eventually("the key on the replica", Duration::from_secs(5), || {
        replica.cli(&["GET", "replicated"]) == "yes"
    });
    assert!(replica.cli(&["SET", "x", "1"]).contains("READONLY"));
}

#[test]
fn script_flush_forgets_scripts() {
    let server = RedisServer::start();
    let sha = server.cli(&["SCRIPT", "LOAD", "return 7"]);
    assert_eq!(server.cli(&["EVALSHA", &sha, "0"]), "7");
    server.script_flush();
    assert!(server.cli(&["EVALSHA", &sha, "0"]).contains("NOSCRIPT"));
}

#[test]
fn client_kill_drops_connections() {
    let server = RedisServer::start();
    let mut stream = raw_connect(&server);
    assert_eq!(raw_ping(&mut stream).unwrap(), "+PONG\r\n");

    assert!(server.client_kill(&["TYPE", "normal"]) >= 1);
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 16];
    // The server closed the socket: EOF, or a reset if our write raced it.
    match stream
        .write_all(b"PING\r\n")
        .and_then(|()| stream.read(&mut buf))
    {
        Ok(n) => assert_eq!(n, 0, "connection should be closed"),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
            "{e:?}"
        ),
    }
}

#[test]
fn wait_ready_accepts_running_server() {
    let server = RedisServer::start_with(ServerOptions::default().password("pw"));
    server.wait_ready(Duration::from_secs(1));
}

#[test]
fn check_no_overlap_finds_overlaps() {
    let mut disjoint = vec![(30, 40), (0, 10), (10, 20)];
    assert_eq!(check_no_overlap(&mut disjoint), Ok(()));
    assert_eq!(disjoint, vec![(0, 10), (10, 20), (30, 40)]);

    // (0, 100) swallows (50, 60) without overlapping its sorted neighbour
    // in the naive sense; it must still be caught.
    let mut overlapping = vec![(50, 60), (0, 100), (200, 300)];
    let err = check_no_overlap(&mut overlapping).unwrap_err();
    assert!(err.contains("(0, 100) and (50, 60)"), "{err}");

    assert!(check_no_overlap(&mut [(5, 1)]).is_err());
    assert_eq!(check_no_overlap(&mut []), Ok(()));
}

#[test]
fn restart_reports_a_taken_port_with_the_log() {
    let mut server = RedisServer::start();
    server.kill9();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", server.port())).expect("bind");
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()))
        .expect_err("restart on a taken port must panic");
    drop(squatter);
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("did not start after 5 attempts"),
        "{message}"
    );
    assert!(message.contains("Address already in use"), "{message}");
    assert!(!server.is_running());

    // Once the port is free again the same server comes back.
    server.restart();
    assert_eq!(server.cli(&["PING"]), "PONG");
}

#[test]
fn bad_config_panics_with_the_servers_complaint() {
    let panic = std::panic::catch_unwind(|| {
        RedisServer::start_with(ServerOptions::default().arg("--no-such-directive"))
    })
    .expect_err("an invalid directive must fail the start");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("no-such-directive"), "{message}");
    assert!(message.contains("exited early"), "{message}");
}
