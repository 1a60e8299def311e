//! Private `redis-server` processes on free loopback ports: every scenario measures against a
//! server of its own, so that nothing else's commands reach its statistics.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A `redis-server` child process, stopped on drop.
#[derive(Debug)]
pub struct Server {
    child: Child,
    port: u16,
    // Holds the server's working directory until the server is gone.
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `redis-server` (from the PATH, or `REDIS_SERVER`) without persistence on a free
    /// loopback port, and waits until it answers as itself: `INFO server` names its process.
    ///
    /// # Errors
    ///
    /// [`Error::Server`] when it cannot be spawned or does not answer within 10 seconds.
    pub fn start() -> Result<Server> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("temporary directory", e))?;
        let port = free_port()?;
        let program = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&program)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--logfile", "redis.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                Error::Server(format!(
                    "cannot start {program}: {e} (run `cargo xtask setup` to install Redis)"
                ))
            })?;
        let mut server = Server {
            child,
            port,
            _dir: dir,
        };
        server.wait_ready(Duration::from_secs(10))?;
        Ok(server)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops the server's process (SIGSTOP) until [`Server::resume`]: it answers nothing
    /// meanwhile, as a server in a long pause.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the signal cannot be sent.
    pub fn pause(&self) -> Result<()> {
        self.signal(nix::sys::signal::Signal::SIGSTOP)
    }

    /// Resumes a paused server (SIGCONT).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the signal cannot be sent.
    pub fn resume(&self) -> Result<()> {
        self.signal(nix::sys::signal::Signal::SIGCONT)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) -> Result<()> {
        let pid = i32::try_from(self.child.id())
            .map_err(|_| Error::Server(format!("pid {} out of range", self.child.id())))?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
            .map_err(|e| Error::io(format!("sending {signal}"), std::io::Error::from(e)))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Error::Server(format!(
                    "exited at start ({status}) on port {}",
                    self.port
                )));
            }
            if answers_as(self.port, self.child.id()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(Error::Server(format!(
            "no answer on port {} within {timeout:?}",
            self.port
        )))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the server on `port` answers and is process `pid`: another server that took the
/// port between the search for a free one and the child's bind would answer too, and every
/// measurement would then be of it.
fn answers_as(port: u16, pid: u32) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"INFO server\r\n").is_err() {
        return false;
    }
    read_bulk(&mut stream).is_some_and(|info| process_id(&info) == Some(pid))
}

/// Reads one RESP bulk string (`$<len>\r\n<bytes>\r\n`); `None` for anything else.
fn read_bulk(stream: &mut TcpStream) -> Option<String> {
    let mut header = Vec::new();
    let mut byte = [0u8; 1];
    while !header.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).ok()?;
        header.push(byte[0]);
        if header.len() > 32 {
            return None;
        }
    }
    let len: usize = std::str::from_utf8(header.strip_prefix(b"$")?.strip_suffix(b"\r\n")?)
        .ok()?
        .parse()
        .ok()?;
    let mut body = vec![0u8; len.checked_add(2)?];
    stream.read_exact(&mut body).ok()?;
    body.truncate(len);
    String::from_utf8(body).ok()
}

/// The `process_id` an `INFO` reply gives.
fn process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// A loopback port nothing listens on at the moment.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("finding a free loopback port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("finding a free loopback port", e))?
        .port();
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_known_by_its_process_not_by_its_port_answering() {
        let server = Server::start().expect("a server");
        assert!(answers_as(server.port, server.child.id()));
        assert!(
            !answers_as(server.port, server.child.id() + 1),
            "another process answering on the port is not the server started"
        );
    }
}
