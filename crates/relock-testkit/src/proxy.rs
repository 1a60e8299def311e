//! A TCP proxy between clients and one server, which can cut them off: while cut, it forwards
//! nothing in either direction and leaves the bytes in the kernel's buffers, as a network that
//! drops every packet does (TCP retransmits them once the link heals). It needs no privileges and no network namespace, and works the same everywhere.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// How often an idle or cut pump looks at its flags again.
const POLL: Duration = Duration::from_millis(5);

/// A listening proxy to one upstream server, and the switch that cuts it.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port for a proxy");
        listener
            .set_nonblocking(true)
            .expect("make the proxy's listener non-blocking");
        let port = listener
            .local_addr()
            .expect("the proxy's listening address")
            .port();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let flags = Flags {
            cut: Arc::clone(&cut),
            stop: Arc::clone(&stop),
        };
        thread::spawn(move || accept_loop(&listener, upstream, &flags));
        Proxy { port, cut, stop }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Cuts (`true`) or heals (`false`) every connection through the proxy, current and new.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct Flags {
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Flags {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, flags: &Flags) {
    while !flags.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                let flags = flags.clone();
                thread::spawn(move || connect(client, upstream, &flags));
            }
            // Nothing to accept yet, or a connection that failed before it was accepted.
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// Opens the upstream side of one connection (not while cut: a connection attempt through a
/// dead link does not complete either) and pumps both ways until one side closes.
fn connect(client: TcpStream, upstream: SocketAddr, flags: &Flags) {
    while flags.cut() && !flags.stopped() {
        thread::sleep(POLL);
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = flags.clone();
    thread::spawn(move || pump(server_in, client, &back));
    pump(client_in, server, flags);
}

/// Copies `from` to `to` while the link is up; stops when either side closes or the proxy
/// stops, and then closes both.
fn pump(mut from: TcpStream, mut to: TcpStream, flags: &Flags) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    while !flags.stopped() {
        if flags.cut() {
            thread::sleep(POLL);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Read just as the link was cut: hold it back like the rest.
                while flags.cut() && !flags.stopped() {
                    thread::sleep(POLL);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A one-shot echo server on loopback.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        });
        addr
    }

    #[test]
    fn a_cut_link_holds_the_bytes_until_it_heals() {
        let proxy = Proxy::start(echo());
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut buf = [0u8; 4];
        s.write_all(b"ping").expect("write");
        s.read_exact(&mut buf).expect("echo through the proxy");
        assert_eq!(&buf, b"ping");

        proxy.set_cut(true);
        s.write_all(b"lost").expect("write");
        let started = Instant::now();
        assert!(s.read_exact(&mut buf).is_err(), "nothing passes while cut");
        assert!(started.elapsed() >= Duration::from_millis(250));

        proxy.set_cut(false);
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.read_exact(&mut buf).expect("delivered after healing");
        assert_eq!(&buf, b"lost");
    }
}
