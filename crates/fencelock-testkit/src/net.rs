//! Loopback networking: free ports and a tiny RESP client for readiness probes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Returns a currently free TCP port on 127.0.0.1.
///
/// The port is found by binding `127.0.0.1:0` and releasing it at once, so
/// another process may grab it before it is used; [`RedisServer`](crate::RedisServer)
/// copes with that by retrying on a fresh port.
///
/// # Panics
///
/// If no loopback socket can be bound at all.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("cannot bind a TCP socket on 127.0.0.1 to find a free port")
}

/// What a readiness probe learned about whoever listens on a port.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing answered, or the answer was not (yet) a usable server.
    NotReady,
    /// A server answered `PONG`; `pid` is its `process_id` when INFO was readable.
    Ready { pid: Option<u32> },
    /// The server is up but wants credentials we do not have.
    NoAuth,
}

const PROBE_IO_TIMEOUT: Duration = Duration::from_millis(250);

/// Connects, authenticates if `password` is given, and checks that the server
/// answers `PING` and reports its `process_id`. The pid lets the caller tell
/// its own child from an unrelated server that won a race for the port.
pub(crate) fn probe(port: u16, password: Option<&str>) -> Probe {
    probe_inner(port, password).unwrap_or(Probe::NotReady)
}

fn probe_inner(port: u16, password: Option<&str>) -> std::io::Result<Probe> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_IO_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_IO_TIMEOUT))?;
    let mut conn = Resp {
        reader: BufReader::new(stream.try_clone()?),
        writer: stream,
    };
    if let Some(password) = password {
        if let Reply::Error(e) = conn.call(&["AUTH", password])? {
            return Ok(if e.contains("NOAUTH") || e.contains("WRONGPASS") {
                Probe::NoAuth
            } else {
                Probe::NotReady
            });
        }
    }
    match conn.call(&["PING"])? {
        Reply::Simple(s) if s == "PONG" => {}
        Reply::Error(e) if e.contains("NOAUTH") => return Ok(Probe::NoAuth),
        _ => return Ok(Probe::NotReady),
    }
    let pid = match conn.call(&["INFO", "server"])? {
        Reply::Bulk(info) => info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok()),
        _ => None,
    };
    Ok(Probe::Ready { pid })
}

enum Reply {
    Simple(String),
    Error(String),
    Bulk(String),
    Other,
}

struct Resp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Resp {
    fn call(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        let mut cmd = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            cmd.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            cmd.extend_from_slice(arg.as_bytes());
            cmd.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&cmd)?;
        self.read_reply()
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(line.len().min(1));
        Ok(match kind {
            "+" => Reply::Simple(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            "$" => {
                let Ok(len) = rest.parse::<usize>() else {
                    // `$-1`, a null bulk string.
                    return Ok(Reply::Other);
                };
                let mut body = vec![0; len + 2];
                self.reader.read_exact(&mut body)?;
                body.truncate(len);
                Reply::Bulk(String::from_utf8_lossy(&body).into_owned())
            }
            _ => Reply::Other,
        })
    }
}
