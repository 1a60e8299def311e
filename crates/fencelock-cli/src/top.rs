//! `fencelock top`: a live view of the locks with holders or recorded waiters, read from the
//! wait-for graph once a second. On a terminal it takes the screen (raw mode, the alternate
//! screen) until `q`; `s` cycles the sort key. On a pipe it prints one snapshot.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, SystemTime};

use fencelock::{Client, LockKind, LockWaits, WaitGraph};
use nix::sys::termios::{self, SetArg, Termios};

use crate::output::{self, human};
use crate::Failure;

const TOP_HELP_KEYS: &str = "q quit  s sort";

/// What the rows are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// By name, then kind.
    Name,
    /// Longest held first.
    Held,
    /// Most waiters first.
    Waiters,
    /// Longest wait first.
    Wait,
}

impl SortKey {
    /// The key named `name` (`name`, `held`, `waiters`, `wait`).
    pub fn parse(name: &str) -> Option<SortKey> {
        match name {
            "name" => Some(SortKey::Name),
            "held" => Some(SortKey::Held),
            "waiters" => Some(SortKey::Waiters),
            "wait" => Some(SortKey::Wait),
            _ => None,
        }
    }

    fn next(self) -> SortKey {
        match self {
            SortKey::Name => SortKey::Held,
            SortKey::Held => SortKey::Waiters,
            SortKey::Waiters => SortKey::Wait,
            SortKey::Wait => SortKey::Name,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Held => "held",
            SortKey::Waiters => "waiters",
            SortKey::Wait => "wait",
        }
    }
}

/// One row of the view.
struct Row {
    name: String,
    kind: String,
    holder: String,
    held: Option<Duration>,
    waiters: u64,
    longest: Option<Duration>,
    marks: String,
}

fn row(lock: &LockWaits, graph: &WaitGraph, now: SystemTime) -> Row {
    let holder = lock
        .holders
        .first()
        .and_then(|h| {
            h.label
                .clone()
                .or_else(|| h.task.as_ref().map(ToString::to_string))
        })
        .unwrap_or_else(|| "-".to_owned());
    let holder = match lock.holders.len() {
        0 | 1 => holder,
        n => format!("{holder} +{}", n - 1),
    };
    let held = lock
        .holders
        .iter()
        .filter_map(|h| h.since)
        .filter_map(|since| now.duration_since(since).ok())
        .max();
    let recorded = lock.waiters.len() as u64;
    let waiting = lock.info.as_ref().map_or(0, |i| i.waiting_clients);
    let mut marks = Vec::new();
    if graph.cycles.iter().any(|c| {
        c.steps
            .iter()
            .any(|s| s.name == lock.name && s.kind == lock.kind)
    }) {
        marks.push("DEADLOCK");
    }
    // A hold a waiting task recorded that Redis no longer keeps: its lease was lost (an
    // election's leadership is not read from Redis here, so it is never marked).
    if lock.kind != LockKind::Election && lock.info.is_none() && !lock.holders.is_empty() {
        marks.push("LOST");
    }
    Row {
        name: lock.name.clone(),
        kind: lock.kind.to_string(),
        holder,
        held,
        waiters: recorded.max(waiting),
        longest: lock.waiters.iter().map(|w| w.waited).max(),
        marks: marks.join(" "),
    }
}

/// The view of `graph`: a header line, then one row per lock, sorted by `sort`.
pub(crate) fn screen(graph: &WaitGraph, sort: SortKey, pattern: &str) -> String {
    let now = SystemTime::now();
    let mut rows: Vec<Row> = graph.locks.iter().map(|l| row(l, graph, now)).collect();
    match sort {
        SortKey::Name => rows.sort_by(|a, b| (&a.name, &a.kind).cmp(&(&b.name, &b.kind))),
        SortKey::Held => rows.sort_by_key(|r| std::cmp::Reverse(r.held)),
        SortKey::Waiters => rows.sort_by_key(|r| std::cmp::Reverse(r.waiters)),
        SortKey::Wait => rows.sort_by_key(|r| std::cmp::Reverse(r.longest)),
    }
    let mut out = format!(
        "fencelock top  {} lock(s) matching {pattern:?}, {} deadlock(s)  sorted by {}  [{TOP_HELP_KEYS}]\n",
        rows.len(),
        graph.cycles.len(),
        sort.name()
    );
    let header = [
        "NAME",
        "KIND",
        "HOLDER",
        "HELD FOR",
        "WAITERS",
        "LONGEST WAIT",
        "MARKS",
    ];
    let cells: Vec<[String; 7]> = rows
        .into_iter()
        .map(|r| {
            [
                r.name,
                r.kind,
                r.holder,
                r.held.map_or("-".to_owned(), human),
                r.waiters.to_string(),
                r.longest.map_or("-".to_owned(), human),
                r.marks,
            ]
        })
        .collect();
    out.push_str(&output::columns(header, &cells));
    out
}

/// Puts the terminal back as it was when dropped, however `top` ends.
struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    fn enter() -> Result<RawTerminal, Failure> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).map_err(|e| {
            Failure::new(
                crate::exit::SOFTWARE,
                format!("cannot read the terminal's mode: {e}"),
            )
        })?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).map_err(|e| {
            Failure::new(
                crate::exit::SOFTWARE,
                format!("cannot set the terminal's mode: {e}"),
            )
        })?;
        // The alternate screen, the cursor hidden.
        print!("\x1b[?1049h\x1b[?25l");
        let _ = std::io::stdout().flush();
        Ok(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = std::io::stdout().flush();
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Runs `fencelock top`.
pub(crate) async fn top(client: &Client, pattern: &str, mut sort: SortKey) -> Result<u8, Failure> {
    let interactive = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !interactive {
        let graph = client.wait_graph(pattern).await?;
        output::print(&screen(&graph, sort, pattern));
        return Ok(crate::exit::SUCCESS);
    }
    let terminal = RawTerminal::enter()?;
    let (keys, mut pressed) = tokio::sync::mpsc::unbounded_channel();
    // Reads keys on a thread of its own: a read of the terminal blocks.
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while let Ok(1) = std::io::stdin().read(&mut byte) {
            if keys.send(byte[0]).is_err() {
                return;
            }
        }
    });
    loop {
        let graph = client.wait_graph(pattern).await?;
        // Raw mode: each line ends with a carriage return too.
        let text = screen(&graph, sort, pattern).replace('\n', "\r\n");
        print!("\x1b[H\x1b[2J{text}");
        let _ = std::io::stdout().flush();
        let next = tokio::time::sleep(Duration::from_secs(1));
        tokio::pin!(next);
        loop {
            tokio::select! {
                () = &mut next => break,
                key = pressed.recv() => match key {
                    Some(b'q') | None => {
                        drop(terminal);
                        return Ok(crate::exit::SUCCESS);
                    }
                    Some(b's') => {
                        sort = sort.next();
                        break;
                    }
                    Some(_) => {}
                },
            }
        }
    }
}
