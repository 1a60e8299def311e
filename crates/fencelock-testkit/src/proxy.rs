//! A TCP proxy between clients and one server, which can cut them off: while cut, it forwards
//! nothing in either direction and leaves the bytes in the kernel's buffers, as a network that
//! drops every packet does (TCP retransmits them once the link heals). It needs no privileges
//! and no network namespace, and works the same everywhere.
//!
//! It cuts every connection at once, or one connection alone, known by its number in the order
//! the proxy accepted them: a client's connections open in an order the test controls (its
//! command connection while it is made, its pub/sub connection right after, in the background).
//! One connection can also be sent to another server than the rest (a client whose pub/sub
//! connection stayed on a node that is no longer master, as behind a DNS name or a virtual IP
//! that moved), closed (a killed connection), or have what the server sends it held back for a
//! while (a slow or congested link).

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How often an idle or cut pump looks at its flags again.
const POLL: Duration = Duration::from_millis(5);

/// A listening proxy to one upstream server, and the switch that cuts it.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    flags: Flags,
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
        let flags = Flags::default();
        let accepting = flags.clone();
        thread::spawn(move || accept_loop(&listener, upstream, &accepting));
        Proxy { port, flags }
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Cuts (`true`) or heals (`false`) every connection through the proxy, current and new.
    pub fn set_cut(&self, cut: bool) {
        self.flags.cut.store(cut, Ordering::SeqCst);
    }

    /// How many connections the proxy accepted so far. The next one is numbered this.
    pub fn accepted(&self) -> usize {
        self.flags.accepted.load(Ordering::SeqCst)
    }

    /// Cuts (`true`) or heals (`false`) the connection numbered `connection` (from 0, in the
    /// order they were accepted) alone; the others go on. [`set_cut`](Proxy::set_cut) cuts it
    /// too, whatever this says.
    pub fn set_cut_connection(&self, connection: usize, cut: bool) {
        let mut cut_alone = locked(&self.flags.cut_alone);
        if cut {
            cut_alone.insert(connection);
        } else {
            cut_alone.remove(&connection);
        }
    }

    /// Sends the connection numbered `connection`, once it is accepted, to `upstream` instead
    /// of the proxy's own server; a connection accepted already keeps its server.
    pub fn route_connection(&self, connection: usize, upstream: SocketAddr) {
        locked(&self.flags.routes).insert(connection, upstream);
    }

    /// Sends every connection accepted from now on to `upstream`; those accepted before keep
    /// their server (a name or address that moved to a new master).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *locked(&self.flags.upstream) = Some(upstream);
    }

    /// Closes the connection numbered `connection` on both sides, as a server's `CLIENT KILL`
    /// or a reset does; the others go on.
    pub fn close_connection(&self, connection: usize) {
        locked(&self.flags.closed).insert(connection);
    }

    /// Holds back what the server sends on the connection numbered `connection` for `delay`
    /// before passing it on, in order (`Duration::ZERO` ends the delay): a slow link one way.
    pub fn delay_connection(&self, connection: usize, delay: Duration) {
        let mut delays = locked(&self.flags.delays);
        if delay.is_zero() {
            delays.remove(&connection);
        } else {
            delays.insert(connection, delay);
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flags.stop.store(true, Ordering::SeqCst);
    }
}

#[derive(Clone, Debug, Default)]
struct Flags {
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    /// The connections cut one by one.
    cut_alone: Arc<Mutex<HashSet<usize>>>,
    /// Where connections go that are not routed one by one, once set.
    upstream: Arc<Mutex<Option<SocketAddr>>>,
    /// Connections routed one by one, by number.
    routes: Arc<Mutex<HashMap<usize, SocketAddr>>>,
    /// Connections closed by the test.
    closed: Arc<Mutex<HashSet<usize>>>,
    /// How long what the server sends on a connection is held back.
    delays: Arc<Mutex<HashMap<usize, Duration>>>,
}

impl Flags {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether connection number `connection` is cut.
    fn cut(&self, connection: usize) -> bool {
        self.cut.load(Ordering::SeqCst) || locked(&self.cut_alone).contains(&connection)
    }

    /// Whether connection number `connection` was closed by the test, or the proxy stopped.
    fn ended(&self, connection: usize) -> bool {
        self.stopped() || locked(&self.closed).contains(&connection)
    }

    /// Where connection number `connection` goes, the proxy's own server being `upstream`.
    fn upstream_of(&self, connection: usize, upstream: SocketAddr) -> SocketAddr {
        locked(&self.routes)
            .get(&connection)
            .copied()
            .or(*locked(&self.upstream))
            .unwrap_or(upstream)
    }

    /// How long what the server sends on connection `connection` is held back.
    fn delay(&self, connection: usize) -> Option<Duration> {
        locked(&self.delays).get(&connection).copied()
    }
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, flags: &Flags) {
    while !flags.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                let flags = flags.clone();
                let connection = flags.accepted.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || connect(client, upstream, &flags, connection));
            }
            // Nothing to accept yet, or a connection that failed before it was accepted.
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// Opens the upstream side of one connection (not while cut: a connection attempt through a
/// dead link does not complete either) and pumps both ways until one side closes.
fn connect(client: TcpStream, upstream: SocketAddr, flags: &Flags, connection: usize) {
    while flags.cut(connection) && !flags.stopped() {
        thread::sleep(POLL);
    }
    let Ok(server) = TcpStream::connect(flags.upstream_of(connection, upstream)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = flags.clone();
    thread::spawn(move || pump(server_in, client, &back, connection, Direction::ToClient));
    pump(client_in, server, flags, connection, Direction::ToServer);
}

/// Which way a pump copies: only what goes to the client is ever delayed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// Copies `from` to `to` while the link is up; stops when either side closes, the connection
/// is closed or the proxy stops, and then closes both. What goes to the client waits out the
/// connection's delay, counted from when it was read.
fn pump(
    mut from: TcpStream,
    to: TcpStream,
    flags: &Flags,
    connection: usize,
    direction: Direction,
) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut sink = Sink::new(to, flags, connection, direction);
    let mut buf = [0u8; 16 * 1024];
    while !flags.ended(connection) {
        if flags.cut(connection) {
            thread::sleep(POLL);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let read_at = Instant::now();
                // Read just as the link was cut: hold it back like the rest.
                while flags.cut(connection) && !flags.ended(connection) {
                    thread::sleep(POLL);
                }
                if !sink.send(read_at, &buf[..n]) {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    sink.close();
}

/// Where a pump's bytes go: straight to the server, or, towards the client, through a queue
/// whose writer holds each chunk back until the connection's delay after it was read. Reading
/// goes on meanwhile, so a delay is a link's latency: every chunk comes that much later, in
/// order, however many are on their way.
enum Sink {
    Direct(TcpStream),
    Delayed {
        queue: mpsc::Sender<(Instant, Vec<u8>)>,
        writer: thread::JoinHandle<()>,
    },
}

impl Sink {
    fn new(to: TcpStream, flags: &Flags, connection: usize, direction: Direction) -> Sink {
        if direction == Direction::ToServer {
            return Sink::Direct(to);
        }
        let (queue, chunks) = mpsc::channel::<(Instant, Vec<u8>)>();
        let flags = flags.clone();
        let writer = thread::spawn(move || {
            let mut to = to;
            for (read_at, chunk) in chunks {
                if let Some(delay) = flags.delay(connection) {
                    thread::sleep(delay.saturating_sub(read_at.elapsed()));
                }
                while flags.cut(connection) && !flags.ended(connection) {
                    thread::sleep(POLL);
                }
                if flags.ended(connection) || to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
        });
        Sink::Delayed { queue, writer }
    }

    /// Passes `chunk`, read at `read_at`, on; false when the other side is gone.
    fn send(&mut self, read_at: Instant, chunk: &[u8]) -> bool {
        match self {
            Sink::Direct(to) => to.write_all(chunk).is_ok(),
            Sink::Delayed { queue, .. } => queue.send((read_at, chunk.to_vec())).is_ok(),
        }
    }

    /// Closes the other side, once what is on its way was written (unless the connection was
    /// closed).
    fn close(self) {
        match self {
            Sink::Direct(to) => {
                let _ = to.shutdown(Shutdown::Both);
            }
            Sink::Delayed { queue, writer } => {
                drop(queue);
                let _ = writer.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on loopback for the first `connections` connections.
    fn echo(connections: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || {
            for _ in 0..connections {
                let Ok((mut s, _)) = listener.accept() else {
                    return;
                };
                thread::spawn(move || {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// Writes `bytes` and reads them back within `within`, or says it could not.
    fn echoes(s: &mut TcpStream, bytes: &[u8; 4], within: Duration) -> bool {
        s.set_read_timeout(Some(within)).expect("timeout");
        let mut buf = [0u8; 4];
        s.write_all(bytes).is_ok() && s.read_exact(&mut buf).is_ok() && &buf == bytes
    }

    #[test]
    fn one_connection_is_cut_alone() {
        let proxy = Proxy::start(echo(2));
        let mut first = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(echoes(&mut first, b"one!", Duration::from_secs(5)));
        let mut second = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(echoes(&mut second, b"two!", Duration::from_secs(5)));
        assert_eq!(proxy.accepted(), 2);

        proxy.set_cut_connection(1, true);
        assert!(!echoes(&mut second, b"lost", Duration::from_millis(300)));
        assert!(
            echoes(&mut first, b"live", Duration::from_secs(5)),
            "the other goes on"
        );
    }

    #[test]
    fn one_connection_goes_to_another_server_and_one_is_closed() {
        let first_server = echo(1);
        let other_server = echo(1);
        let proxy = Proxy::start(first_server);
        proxy.route_connection(1, other_server);
        let mut first = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(echoes(&mut first, b"one!", Duration::from_secs(5)));
        let mut second = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(
            echoes(&mut second, b"two!", Duration::from_secs(5)),
            "the routed connection reaches the other server, which has a connection to spare"
        );
        proxy.close_connection(0);
        let mut buf = [0u8; 4];
        first
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        assert!(
            matches!(first.read(&mut buf), Ok(0) | Err(_)),
            "a closed connection reads its end"
        );
        assert!(echoes(&mut second, b"live", Duration::from_secs(5)));
    }

    #[test]
    fn a_delayed_connection_passes_the_bytes_on_after_the_delay() {
        let proxy = Proxy::start(echo(1));
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(echoes(&mut s, b"ping", Duration::from_secs(5)));
        proxy.delay_connection(0, Duration::from_millis(400));
        s.write_all(b"slow").expect("write");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut buf = [0u8; 4];
        assert!(s.read_exact(&mut buf).is_err(), "held back for the delay");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.read_exact(&mut buf).expect("delivered after the delay");
        assert_eq!(&buf, b"slow");
    }

    #[test]
    fn a_delay_is_a_latency_not_a_queue_of_delays() {
        let proxy = Proxy::start(echo(1));
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).expect("connect");
        assert!(echoes(&mut s, b"ping", Duration::from_secs(5)));
        proxy.delay_connection(0, Duration::from_millis(300));
        let started = Instant::now();
        let mut buf = [0u8; 4];
        for chunk in [b"one!", b"two!", b"six!"] {
            s.write_all(chunk).expect("write");
            thread::sleep(Duration::from_millis(20));
        }
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        for chunk in [b"one!", b"two!", b"six!"] {
            s.read_exact(&mut buf).expect("delivered after the delay");
            assert_eq!(&buf, chunk);
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "held back: {took:?}");
        assert!(
            took < Duration::from_millis(800),
            "chunks on their way together: {took:?}"
        );
    }

    #[test]
    fn a_cut_link_holds_the_bytes_until_it_heals() {
        let proxy = Proxy::start(echo(1));
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
