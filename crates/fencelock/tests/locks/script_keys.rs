//! Every Lua script touches only the keys it is given in `KEYS`, as Redis asks of scripts
//! ("all keys a script accesses must be explicitly provided as input key arguments") and as
//! Dragonfly and ElastiCache Serverless enforce.
//!
//! The client talks to a real redis-server through a proxy that loads a guarded copy of
//! every script in place of the script itself: a Lua prologue shadows `redis` with a table
//! whose `call` and `pcall` check each key argument of the commands the scripts use against
//! `KEYS`, log a violation to the server's log and fail the script. Every script is then run
//! through the public API of every primitive (lock, wait, release, extend, renew, inspect,
//! force unlock, on one server and on RedLock), and the test fails if the server's log holds
//! a violation, if a script ran unguarded, or if a script file ran in no script at all.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fencelock::{
    Client, ClientOptions, Deployment, Error, Guard, Handle, Layout, Lease, LockKind, LockOptions,
    Optional,
};
use fencelock_testkit::RedisServer;

/// Bounds each wait of the test.
const LIMIT: Duration = Duration::from_secs(10);

/// What the prologue writes to the server's log, and into its error, for a key access the
/// script was not given.
const VIOLATION: &str = "FENCELOCK-UNDECLARED-KEY";

/// Put in front of every script the proxy loads. Commands and where their keys are: every
/// command a script of the crate runs must be in one of the tables, so that a new command
/// cannot slip past unchecked.
const PROLOGUE: &str = r#"
local redis = (function(real, keys)
  local declared = {}
  for _, key in ipairs(keys) do
    declared[key] = true
  end
  local keyless = {TIME = true, PUBLISH = true, SPUBLISH = true}
  local first_key = {
    GET = true, SET = true, PEXPIRE = true, PTTL = true, TYPE = true,
    HGET = true, HSET = true, HSETNX = true, HDEL = true, HEXISTS = true,
    HGETALL = true, HINCRBY = true,
    ZADD = true, ZREM = true, ZRANGE = true, ZRANGEBYSCORE = true, ZSCORE = true,
    ZCARD = true, ZPOPMIN = true, LPUSH = true,
  }
  local every_key = {DEL = true, EXISTS = true}
  local function refuse(what)
    real.log(real.LOG_WARNING, 'FENCELOCK-UNDECLARED-KEY ' .. what)
    error('FENCELOCK-UNDECLARED-KEY ' .. what)
  end
  local function check(command, ...)
    if #keys == 0 then
      refuse('a script run with no KEYS')
    end
    local name = string.upper(tostring(command))
    if keyless[name] then
      return
    end
    local args = {...}
    local last
    if first_key[name] then
      last = 1
    elseif every_key[name] then
      last = #args
    else
      refuse('a command not in the table of key positions: ' .. name)
    end
    for i = 1, last do
      if not declared[args[i]] then
        refuse(name .. ' ' .. tostring(args[i]) .. ' (KEYS: ' .. table.concat(keys, ' ') .. ')')
      end
    end
  end
  return setmetatable({
    call = function(command, ...)
      check(command, ...)
      return real.call(command, ...)
    end,
    pcall = function(command, ...)
      check(command, ...)
      return real.pcall(command, ...)
    end,
  }, {__index = real})
end)(redis, KEYS)
"#;

/// What the proxies saw, shared by every proxy of a test.
#[derive(Debug, Default)]
struct Seen {
    /// The hash the client knows each script by, and the script's text.
    scripts: BTreeMap<String, String>,
    /// The hashes of the scripts run guarded (an `EVALSHA` of a loaded script).
    run: BTreeSet<String>,
    /// The hashes of `EVALSHA`s sent before their script was loaded: answered `NOSCRIPT`,
    /// since only guarded copies are ever loaded.
    unloaded: BTreeSet<String>,
    /// What a proxy could not handle.
    faults: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

fn seen(shared: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A proxy to one server that swaps every script for its guarded copy.
struct GuardProxy {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl GuardProxy {
    fn start(server: &RedisServer, shared: &Shared) -> GuardProxy {
        let upstream: SocketAddr = ([127, 0, 0, 1], server.port()).into();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let loader = Arc::new(Mutex::new(
            TcpStream::connect(upstream).expect("the loader's connection"),
        ));
        let (accepting, shared) = (Arc::clone(&stop), Arc::clone(shared));
        thread::spawn(move || {
            while !accepting.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (client_in, server_in) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let back = Arc::clone(&accepting);
                thread::spawn(move || copy(server_in, client, &back));
                let (stop, shared, loader) = (
                    Arc::clone(&accepting),
                    Arc::clone(&shared),
                    Arc::clone(&loader),
                );
                thread::spawn(move || commands(client_in, server, &stop, &shared, &loader));
            }
        });
        GuardProxy { port, stop }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for GuardProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies the server's replies to the client unchanged.
fn copy(mut from: TcpStream, mut to: TcpStream, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
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

/// Reads the client's commands, swaps scripts for their guarded copies, and sends them on.
fn commands(
    mut from: TcpStream,
    mut to: TcpStream,
    stop: &AtomicBool,
    shared: &Shared,
    loader: &Mutex<TcpStream>,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut pending = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    'pump: while !stop.load(Ordering::SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        }
        loop {
            match parse(&pending) {
                Ok(Some((args, used))) => {
                    pending.drain(..used);
                    let args = rewrite(args, shared, loader);
                    if to.write_all(&encode(&args)).is_err() {
                        break 'pump;
                    }
                }
                Ok(None) => break,
                Err(fault) => {
                    seen(shared).faults.push(fault);
                    break 'pump;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A command's arguments, and how many bytes of the stream it took.
type Parsed = (Vec<Vec<u8>>, usize);

/// One command of the client, an array of bulk strings, and how many bytes it took; `None`
/// while it has not all arrived.
fn parse(buf: &[u8]) -> Result<Option<Parsed>, String> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")?;
        Some((&buf[at..at + end], at + end + 2))
    }
    fn number(text: &[u8]) -> Result<usize, String> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("not a length: {:?}", String::from_utf8_lossy(text)))
    }
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return Err(format!("not an array: {:?}", String::from_utf8_lossy(buf)));
    }
    let Some((count, mut at)) = line(buf, 1) else {
        return Ok(None);
    };
    let mut args = Vec::new();
    for _ in 0..number(count)? {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err("not a bulk string".into());
        }
        let Some((len, start)) = line(buf, at + 1) else {
            return Ok(None);
        };
        let len = number(len)?;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        args.push(buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    Ok(Some((args, at)))
}

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn hash(script: &str) -> String {
    redis::Script::new(script).get_hash().to_owned()
}

/// The command to send in place of `args`: `SCRIPT LOAD` loads the guarded copy on the
/// proxy's own connection and becomes an `ECHO` of the hash the client expects; `EVALSHA` of a
/// loaded script runs its guarded copy; `EVAL` runs the guarded text.
fn rewrite(mut args: Vec<Vec<u8>>, shared: &Shared, loader: &Mutex<TcpStream>) -> Vec<Vec<u8>> {
    let upper = |i: usize| {
        args.get(i)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default()
    };
    match (upper(0).as_str(), upper(1).as_str()) {
        ("SCRIPT", "LOAD") if args.len() == 3 => {
            let script = String::from_utf8_lossy(&args[2]).into_owned();
            let known = hash(&script);
            let guarded = format!("{PROLOGUE}{script}");
            let loaded = load(loader, &guarded);
            let mut seen = seen(shared);
            if loaded.as_deref() != Ok(hash(&guarded).as_str()) {
                seen.faults
                    .push(format!("loading a guarded script: {loaded:?}"));
            }
            seen.scripts.insert(known.clone(), script);
            vec![b"ECHO".to_vec(), known.into_bytes()]
        }
        ("EVALSHA", _) if args.len() >= 3 => {
            let known = String::from_utf8_lossy(&args[1]).into_owned();
            let mut seen = seen(shared);
            if let Some(script) = seen.scripts.get(&known) {
                args[1] = hash(&format!("{PROLOGUE}{script}")).into_bytes();
                seen.run.insert(known);
            } else {
                seen.unloaded.insert(known);
            }
            args
        }
        ("EVAL", _) if args.len() >= 3 => {
            let script = String::from_utf8_lossy(&args[1]).into_owned();
            let known = hash(&script);
            args[1] = format!("{PROLOGUE}{script}").into_bytes();
            let mut seen = seen(shared);
            seen.scripts.insert(known.clone(), script);
            seen.run.insert(known);
            args
        }
        _ => args,
    }
}

/// Loads `script` on the proxy's own connection; its hash, or the server's refusal.
fn load(loader: &Mutex<TcpStream>, script: &str) -> Result<String, String> {
    let mut conn = loader.lock().unwrap_or_else(|p| p.into_inner());
    let command = encode(&[
        b"SCRIPT".to_vec(),
        b"LOAD".to_vec(),
        script.as_bytes().to_vec(),
    ]);
    conn.write_all(&command).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(&*conn);
    let mut head = String::new();
    reader.read_line(&mut head).map_err(|e| e.to_string())?;
    if !head.starts_with("$40") {
        return Err(head);
    }
    let mut sha = String::new();
    reader.read_line(&mut sha).map_err(|e| e.to_string())?;
    Ok(sha.trim_end().to_owned())
}

/// The lease of every lock of the test: short, so that renewals run within its holds.
const LEASE: Lease = Lease::Renewed(Duration::from_millis(600));

/// A client through `proxy` whose leases are renewed within the test's holds.
async fn client(proxy: &GuardProxy) -> Client {
    let options = ClientOptions::default()
        .default_lease(LEASE)
        .holder_label("script-keys");
    Client::connect_with_options(proxy.url().as_str(), options)
        .await
        .expect("connect through the proxy")
}

/// Long enough for a few renewals of the leases (every 200 ms).
async fn renewals() {
    tokio::time::sleep(Duration::from_millis(700)).await;
}

fn short() -> Duration {
    Duration::from_millis(300)
}

/// Asserts that `lock`, held by another, is not granted within [`short`]: the waiter gives up.
async fn gives_up(lock: impl Into<Handle>) {
    let lock: Handle = lock.into();
    let granted = lock.lock_timeout(short()).await.optional().expect("wait");
    assert!(granted.is_none(), "granted while another held it");
}

/// Every primitive, held, waited for, given up on, extended, renewed, released, inspected
/// and forced free, on one server: each kind of [`LockKind::ALL`], the multi-lock (whose names
/// are listed as mutexes), then every kind held under one name.
async fn every_primitive(a: &Client, b: &Client) {
    for kind in LockKind::ALL {
        exercise(kind, a, b).await;
    }
    exercise_multi(a, b).await;
    every_kind_under_one_name(a, b).await;
}

/// Runs `kind`'s own part of [`every_primitive`].
async fn exercise(kind: LockKind, a: &Client, b: &Client) {
    match kind {
        LockKind::Mutex => exercise_mutex(a, b).await,
        LockKind::ReentrantMutex => exercise_reentrant(a, b).await,
        LockKind::RwLock => exercise_rwlock(a, b).await,
        LockKind::Semaphore => exercise_semaphore(a, b).await,
        LockKind::FairMutex => exercise_fair(a, b).await,
        LockKind::Election => exercise_election(a, b).await,
        LockKind::ForeignMutex => exercise_foreign(a, b).await,
        other => panic!("no exercise of {other}: teach this test the new kind"),
    }
}

/// The mutex: what [`every_primitive`] runs of it.
async fn exercise_mutex(a: &Client, b: &Client) {
    // Mutex: a waiter woken by the release, a waiter giving up, extension, renewal, a release
    // kept until a point, `using`.
    let mutex = a.mutex("m").expect("name");
    let guard = mutex.lock().await.expect("lock");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.mutex("m").expect("name").lock_timeout(LIMIT).await })
    };
    gives_up(b.mutex("m").expect("name")).await;
    guard.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    guard.unlock().await.expect("unlock");
    let next = waiter.await.expect("task").expect("woken");
    renewals().await;
    next.unlock_no_earlier_than(Instant::now() + short())
        .await
        .expect("kept");
    mutex
        .lock_timeout(LIMIT)
        .await
        .expect("after the point")
        .unlock()
        .await
        .expect("unlock");
    mutex.using(|_| async {}).await.expect("using");
}

/// The fair mutex: what [`every_primitive`] runs of it.
async fn exercise_fair(a: &Client, b: &Client) {
    // FairMutex: a line, a hand-off, a waiter giving up.
    let fair = a.fair_mutex("f").expect("name");
    let held = fair.lock().await.expect("lock");
    let queued = {
        let b = b.clone();
        tokio::spawn(async move { b.fair_mutex("f").expect("name").lock_timeout(LIMIT).await })
    };
    gives_up(b.fair_mutex("f").expect("name")).await;
    assert!(b
        .fair_mutex("f")
        .expect("name")
        .try_lock()
        .await
        .optional()
        .expect("try")
        .is_none());
    held.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    held.unlock().await.expect("unlock");
    queued
        .await
        .expect("task")
        .expect("handed over")
        .unlock()
        .await
        .expect("unlock");
}

/// The reentrant mutex: what [`every_primitive`] runs of it.
async fn exercise_reentrant(a: &Client, b: &Client) {
    // ReentrantMutex: re-entry, another owner refused, extension, renewal.
    let reentrant = a.reentrant_mutex("r").expect("name");
    let owner = a.holder().expect("holder");
    let outer = reentrant.lock(&owner).await.expect("lock");
    let inner = reentrant.lock(&owner).await.expect("re-enter");
    let other = b.holder().expect("holder");
    let refused = b
        .reentrant_mutex("r")
        .expect("name")
        .lock_timeout(&other, short())
        .await;
    assert!(refused.optional().expect("wait").is_none());
    inner.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");
}

/// The read-write lock: what [`every_primitive`] runs of it.
async fn exercise_rwlock(a: &Client, b: &Client) {
    // RwLock: readers together, a writer waiting behind them and giving up, an upgrade
    // refused, extension, renewal.
    let rwlock = a.rwlock("rw").expect("name");
    let reader = a.holder().expect("holder");
    let read = rwlock.read_as(&reader).await.expect("read");
    let second = b
        .rwlock("rw")
        .expect("name")
        .read()
        .await
        .expect("a second reader");
    let writer = b
        .rwlock_with_options("rw", LockOptions::default())
        .expect("name");
    assert!(writer
        .write_timeout(short())
        .await
        .optional()
        .expect("wait")
        .is_none());
    assert!(matches!(
        rwlock.write_as(&reader).await,
        Err(Error::WouldDeadlock { .. })
    ));
    read.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    read.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    let write = writer.write().await.expect("write");
    write
        .unlock_no_earlier_than(Instant::now() + short())
        .await
        .expect("kept");
    rwlock
        .write_timeout(LIMIT)
        .await
        .expect("after the point")
        .unlock()
        .await
        .expect("unlock");
}

/// The semaphore: what [`every_primitive`] runs of it.
async fn exercise_semaphore(a: &Client, b: &Client) {
    // Semaphore: permits, a total changed at run time, a wait for permits, too many asked.
    let options = LockOptions::default();
    let semaphore = a.semaphore_with_options("s", 2, options).expect("name");
    let permit = semaphore.acquire().await.expect("permit");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.semaphore("s", 2)
                .expect("name")
                .acquire_many_timeout(2, LIMIT)
                .await
        })
    };
    assert!(matches!(
        semaphore.try_acquire_many(3).await,
        Err(Error::InvalidOption { .. })
    ));
    assert_eq!(semaphore.available().await.expect("available"), 1);
    semaphore.set_permits(3).await.expect("raise the total");
    assert_eq!(semaphore.permits().await.expect("total"), 3);
    permit.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    permit
        .unlock_no_earlier_than(Instant::now() + short())
        .await
        .expect("kept");
    let many = waiting.await.expect("task").expect("permits");
    many.release().await.expect("release");
    semaphore.set_permits(2).await.expect("lower the total");
}

/// The multi-lock: what [`every_primitive`] runs of it.
async fn exercise_multi(a: &Client, b: &Client) {
    // MultiMutex: all or none, against a mutex of one of its names.
    let multi = a.multi_mutex(["x", "y"]).expect("names");
    let blocker = b.mutex("y").expect("name").lock().await.expect("lock");
    gives_up(multi.clone()).await;
    let taking = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock_timeout(LIMIT).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    blocker.unlock().await.expect("unlock");
    let both = taking.await.expect("task").expect("both names");
    both.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    both.unlock().await.expect("unlock");
}

/// The election: what [`every_primitive`] runs of it.
async fn exercise_election(a: &Client, b: &Client) {
    // Election: a leader, a standby that gives up, a new value, an observer, a resignation.
    let election = a.election("e").expect("name");
    let mut watch = b.election("e").expect("name").observe();
    let leadership = election.campaign("first").await.expect("lead");
    let standby = b
        .election_with_options("e", LockOptions::default().wait_timeout(short()))
        .expect("name");
    assert!(standby
        .campaign("second")
        .await
        .optional()
        .expect("wait")
        .is_none());
    leadership.proclaim("renamed").await.expect("proclaim");
    let deadline = Instant::now() + LIMIT;
    loop {
        let state = tokio::time::timeout(LIMIT, watch.next())
            .await
            .expect("a change");
        if state
            .expect("observe")
            .is_some_and(|l| l.value() == "renamed")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the observer never saw the new value"
        );
    }
    assert_eq!(
        election
            .leader()
            .await
            .expect("leader")
            .expect("one")
            .value(),
        "renamed"
    );
    leadership
        .extend(Duration::from_secs(2))
        .await
        .expect("extend");
    renewals().await;
    leadership.resign().await.expect("resign");
}

/// The foreign mutex, one per family of layouts: what [`every_primitive`] runs of it.
async fn exercise_foreign(a: &Client, b: &Client) {
    // ForeignMutex, one per family of layouts: a waiter (woken by Redisson's unlock message,
    // polling in the others), extension, renewal, the release.
    for layout in [Layout::RedisPy, Layout::PythonRedisLock, Layout::Redisson] {
        let options = LockOptions::default().lease(Lease::Renewed(Duration::from_secs(1)));
        let foreign = a
            .foreign_mutex_with_options(layout, "foreign", options.clone())
            .expect("name");
        let held = foreign.lock().await.expect("lock");
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                b.foreign_mutex_with_options(layout, "foreign", options)
                    .expect("name")
                    .lock_timeout(LIMIT)
                    .await
            })
        };
        assert!(foreign.try_lock().await.optional().expect("try").is_none());
        held.extend(Duration::from_secs(2)).await.expect("extend");
        renewals().await;
        held.unlock().await.expect("unlock");
        let taken = waiter.await.expect("task").expect("in after the release");
        // Inspection and a forced release of the waiter's hold, in the layout's own keys.
        assert!(foreign.info().await.expect("info").is_some());
        assert!(foreign.force_unlock().await.expect("force").is_some());
        drop(taken);
    }
}

/// What [`hold_under_one_name`] keeps of one kind's lock until the forced release: its guard,
/// and a waiter in line behind it, if the kind has a line.
type Kept = (
    Box<dyn std::any::Any + Send>,
    Option<tokio::task::JoinHandle<Result<Guard, Error>>>,
);

/// Holds `kind`'s lock `all`, in `a`, and for a fair mutex puts a waiter of `b` in line
/// behind it after one of `b` gave up; `None` for a kind that cannot share the name.
async fn hold_under_one_name(kind: LockKind, a: &Client, b: &Client) -> Option<Kept> {
    let kept: Box<dyn std::any::Any + Send> = match kind {
        LockKind::Mutex => Box::new(a.mutex("all").expect("name").lock().await.expect("mutex")),
        LockKind::ReentrantMutex => {
            let holder = a.holder().expect("holder");
            Box::new(
                a.reentrant_mutex("all")
                    .expect("name")
                    .lock(&holder)
                    .await
                    .expect("rmutex"),
            )
        }
        LockKind::RwLock => Box::new(a.rwlock("all").expect("name").read().await.expect("read")),
        LockKind::Semaphore => Box::new(
            a.semaphore("all", 2)
                .expect("name")
                .acquire()
                .await
                .expect("permit"),
        ),
        LockKind::FairMutex => {
            let fair = a
                .fair_mutex("all")
                .expect("name")
                .lock()
                .await
                .expect("fair");
            gives_up(b.fair_mutex("all").expect("name")).await;
            let in_line = {
                let b = b.clone();
                tokio::spawn(async move {
                    b.fair_mutex("all")
                        .expect("name")
                        .lock_timeout(LIMIT)
                        .await
                        .map(Guard::from)
                })
            };
            return Some((Box::new(fair), Some(in_line)));
        }
        LockKind::Election => Box::new(
            a.election("all")
                .expect("name")
                .campaign("leader")
                .await
                .expect("lead"),
        ),
        // A foreign mutex lives under its layout's own key, without the client's prefix: it
        // shares no name with the others, and `force_unlock` of a name does not reach it (the
        // foreign mutex's own `force_unlock` is exercised in `exercise_foreign`).
        LockKind::ForeignMutex => return None,
        other => panic!("no lock under one name for {other}: teach this test the new kind"),
    };
    Some((kept, None))
}

/// Inspection and a forced release of every kind held under one name, with a fair mutex's
/// waiter in line.
async fn every_kind_under_one_name(a: &Client, b: &Client) {
    let mut kept = Vec::new();
    for kind in LockKind::ALL {
        if let Some(held) = hold_under_one_name(kind, a, b).await {
            kept.push(held);
        }
    }
    // Every kind but the foreign mutex, which cannot share the name.
    let under_one_name = LockKind::ALL
        .iter()
        .filter(|kind| **kind != LockKind::ForeignMutex)
        .count();
    assert_eq!(kept.len(), under_one_name);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a.locks("*").await.expect("locks").len() >= under_one_name);
    assert!(a.lock_info("all").await.expect("info").is_some());
    assert_eq!(
        a.force_unlock("all").await.expect("force").len(),
        under_one_name
    );
    let mut in_line = kept.iter_mut().filter_map(|(_, waiter)| waiter.take());
    in_line
        .next()
        .expect("the fair mutex's waiter")
        .await
        .expect("task")
        .expect("the waiter in line")
        .unlock()
        .await
        .expect("unlock");
}

/// The server logs of `servers` hold no violation.
fn no_violation(servers: &[&RedisServer]) {
    for server in servers {
        let log = server.log();
        let violations: Vec<&str> = log.lines().filter(|l| l.contains(VIOLATION)).collect();
        assert!(
            violations.is_empty(),
            "undeclared key accesses:\n{}",
            violations.join("\n")
        );
    }
}

/// The script files of the crate (every `.lua` file under `src/`), by path from `src/`, with
/// their text.
fn script_files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "lua") {
                let text = std::fs::read_to_string(&path).expect("a script file");
                let name = path.strip_prefix(&src).expect("under src/");
                files.push((name.to_string_lossy().into_owned(), text));
            }
        }
    }
    files.sort();
    assert!(files.len() >= 25, "{files:?}");
    files
}

/// Every script file ran: a file that says it is prepended to others inside some script run,
/// every other one as the end of one. And no script ran unguarded: an `EVALSHA` that reached
/// the server before its script was loaded found nothing to run, since only guarded copies
/// are loaded.
fn every_script_ran_guarded(shared: &Shared, servers: &[&RedisServer]) {
    let seen = seen(shared);
    assert!(seen.faults.is_empty(), "{:?}", seen.faults);
    let run: Vec<&String> = seen
        .run
        .iter()
        .filter_map(|h| seen.scripts.get(h))
        .collect();
    let mut missing = Vec::new();
    for (file, text) in script_files() {
        let prepended = text.lines().take(3).any(|l| l.contains("prepended to"));
        let ran = if prepended {
            run.iter().any(|script| script.contains(&text))
        } else {
            run.iter().any(|script| script.ends_with(&text))
        };
        if !ran {
            missing.push(file);
        }
    }
    assert!(
        missing.is_empty(),
        "script files that ran in no script: {missing:?}"
    );
    for server in servers {
        for unguarded in &seen.unloaded {
            let exists = server.cli(&["SCRIPT", "EXISTS", unguarded]);
            assert_eq!(exists.trim(), "0", "{unguarded} was loaded unguarded");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_touches_only_the_keys_it_declares() {
    let shared = Shared::default();
    let server = RedisServer::start();
    let proxy = GuardProxy::start(&server, &shared);
    let (a, b) = (client(&proxy).await, client(&proxy).await);
    every_primitive(&a, &b).await;
    // A guard dropped, released in the background; and the shutdown's releases.
    let dropped = a
        .mutex("dropped")
        .expect("name")
        .lock()
        .await
        .expect("lock");
    drop(dropped);
    let _held = b
        .rwlock("at-exit")
        .expect("name")
        .write()
        .await
        .expect("write");
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");

    // RedLock over three masters: the fence key, raising it on a majority, releases that
    // delete and announce.
    let masters = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let proxies: Vec<GuardProxy> = masters
        .iter()
        .map(|m| GuardProxy::start(m, &shared))
        .collect();
    let urls: Vec<String> = proxies.iter().map(GuardProxy::url).collect();
    let options = ClientOptions::default().default_lease(LEASE);
    let connect = || {
        let masters = Deployment::redlock(urls.iter().map(String::as_str)).expect("addresses");
        Client::connect_with_options(masters, options.clone())
    };
    let (c, d) = (
        connect().await.expect("redlock"),
        connect().await.expect("redlock"),
    );
    let guard = c.mutex("red").expect("name").lock().await.expect("lock");
    let waiter = {
        let d = d.clone();
        tokio::spawn(async move { d.mutex("red").expect("name").lock_timeout(LIMIT).await })
    };
    guard.extend(Duration::from_secs(2)).await.expect("extend");
    renewals().await;
    guard.unlock().await.expect("unlock");
    waiter
        .await
        .expect("task")
        .expect("woken")
        .unlock()
        .await
        .expect("unlock");
    c.shutdown().await.expect("shutdown");
    d.shutdown().await.expect("shutdown");

    let servers = [&server, &masters[0], &masters[1], &masters[2]];
    no_violation(&servers);
    every_script_ran_guarded(&shared, &servers);
}

/// The guard itself: a script that reads a key it was not given fails, and says so in the
/// server's log; a script given its key runs; a script given no key fails.
#[tokio::test]
async fn the_guard_refuses_a_key_the_script_was_not_given() {
    let shared = Shared::default();
    let server = RedisServer::start();
    let proxy = GuardProxy::start(&server, &shared);
    let mut conn = redis::Client::open(proxy.url().as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect through the proxy");
    let declared = redis::Script::new("return redis.call('GET', KEYS[1])");
    let value: Option<String> = declared
        .key("k")
        .invoke_async(&mut conn)
        .await
        .expect("declared");
    assert_eq!(value, None);
    let undeclared = redis::Script::new("return redis.call('GET', KEYS[1] .. ':other')");
    let refused = undeclared
        .key("k")
        .invoke_async::<Option<String>>(&mut conn)
        .await;
    let refused = refused.expect_err("an undeclared key");
    assert!(refused.to_string().contains(VIOLATION), "{refused}");
    let pcalled = redis::Script::new("return redis.pcall('HGET', 'elsewhere', 'f')");
    assert!(pcalled
        .key("k")
        .invoke_async::<Option<String>>(&mut conn)
        .await
        .is_err());
    let keyless = redis::Script::new("return redis.call('TIME')");
    let no_keys = keyless.prepare_invoke();
    assert!(no_keys
        .invoke_async::<Vec<String>>(&mut conn)
        .await
        .is_err());
    assert!(server
        .log()
        .contains(&format!("{VIOLATION} GET k:other (KEYS: k)")));
    assert!(seen(&shared).run.len() >= 4);
}
