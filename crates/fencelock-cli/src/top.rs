//! `fencelock top`: a live view of the locks with holders or recorded waiters, read from the
//! wait-for graph once a second. On a terminal it takes the screen (ratatui on crossterm: raw
//! mode and the alternate screen, given back on exit and on a panic) and redraws on a resize
//! until `q` or Ctrl-C; `s` cycles the sort key. On a pipe it prints one snapshot.
//!
//! The library reads the graph ([`Client::wait_graph`]); [`View`] is what is shown of it, drawn
//! once as text for a pipe and once as a table for the terminal.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use fencelock::{Client, LockKind, LockWaits, WaitGraph};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Row, Table};
use ratatui::{DefaultTerminal, Frame};
use tokio::sync::mpsc;

use crate::output::{self, human};
use crate::Failure;

const TOP_HELP_KEYS: &str = "q quit  s sort";

/// How often the graph is read again.
const REFRESH: Duration = Duration::from_secs(1);

const HEADER: [&str; 7] = [
    "NAME",
    "KIND",
    "HOLDER",
    "HELD FOR",
    "WAITERS",
    "LONGEST WAIT",
    "MARKS",
];

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

/// One lock of the view.
struct LockRow {
    name: String,
    kind: String,
    holder: String,
    held: Option<Duration>,
    waiters: u64,
    longest: Option<Duration>,
    deadlock: bool,
    lost: bool,
}

impl LockRow {
    fn of(lock: &LockWaits, graph: &WaitGraph, now: SystemTime) -> LockRow {
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
        LockRow {
            name: lock.name.clone(),
            kind: lock.kind.to_string(),
            holder,
            held,
            waiters: recorded.max(waiting),
            longest: lock.waiters.iter().map(|w| w.waited).max(),
            deadlock: graph.cycles.iter().any(|c| {
                c.steps
                    .iter()
                    .any(|s| s.name == lock.name && s.kind == lock.kind)
            }),
            // A hold a waiting task recorded that Redis no longer keeps: its lease was lost (an
            // election's leadership is not read from Redis here, so it is never marked).
            lost: lock.kind != LockKind::Election
                && lock.info.is_none()
                && !lock.holders.is_empty(),
        }
    }

    fn marks(&self) -> String {
        let marks: [(bool, &str); 2] = [(self.deadlock, "DEADLOCK"), (self.lost, "LOST")];
        let shown: Vec<&str> = marks.iter().filter(|m| m.0).map(|m| m.1).collect();
        shown.join(" ")
    }

    fn cells(&self) -> [String; 7] {
        [
            self.name.clone(),
            self.kind.clone(),
            self.holder.clone(),
            self.held.map_or("-".to_owned(), human),
            self.waiters.to_string(),
            self.longest.map_or("-".to_owned(), human),
            self.marks(),
        ]
    }
}

/// What `top` shows of one wait-for graph: a title line, then one row per lock, sorted.
struct View {
    title: String,
    rows: Vec<LockRow>,
}

impl View {
    fn of(graph: &WaitGraph, sort: SortKey, pattern: &str) -> View {
        let now = SystemTime::now();
        let mut rows: Vec<LockRow> = graph
            .locks
            .iter()
            .map(|l| LockRow::of(l, graph, now))
            .collect();
        match sort {
            SortKey::Name => rows.sort_by(|a, b| (&a.name, &a.kind).cmp(&(&b.name, &b.kind))),
            SortKey::Held => rows.sort_by_key(|r| std::cmp::Reverse(r.held)),
            SortKey::Waiters => rows.sort_by_key(|r| std::cmp::Reverse(r.waiters)),
            SortKey::Wait => rows.sort_by_key(|r| std::cmp::Reverse(r.longest)),
        }
        let title = format!(
            "fencelock top  {} lock(s) matching {pattern:?}, {} deadlock(s)  sorted by {}  [{TOP_HELP_KEYS}]",
            rows.len(),
            graph.cycles.len(),
            sort.name()
        );
        View { title, rows }
    }

    /// The view as text, for a pipe.
    fn text(&self) -> String {
        let cells: Vec<[String; 7]> = self.rows.iter().map(LockRow::cells).collect();
        format!("{}\n{}", self.title, output::columns(HEADER, &cells))
    }

    /// The view on the terminal: the title, then a table whose columns are as wide as their
    /// widest cell while the terminal is wide enough; every line is cut at its edge.
    fn draw(&self, frame: &mut Frame<'_>) {
        let [title, table] =
            Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(frame.area());
        frame.render_widget(Line::from(self.title.as_str()).bold(), title);
        let cells: Vec<[String; 7]> = self.rows.iter().map(LockRow::cells).collect();
        let widths = output::widths(HEADER, &cells);
        let rows = self.rows.iter().zip(cells).map(|(lock, cells)| {
            let mut cells = cells.map(Cell::from);
            let marked = if lock.deadlock {
                Some(Color::Red)
            } else if lock.lost {
                Some(Color::Yellow)
            } else {
                None
            };
            if let Some(colour) = marked {
                cells[6] = Cell::from(Span::styled(lock.marks(), Style::new().fg(colour).bold()));
            }
            Row::new(cells)
        });
        let widths = widths.map(|w| Constraint::Length(u16::try_from(w).unwrap_or(u16::MAX)));
        let table_widget = Table::new(rows, widths)
            .header(Row::new(HEADER).style(Style::new().reversed()))
            .column_spacing(2);
        frame.render_widget(table_widget, table);
    }
}

/// The terminal taken by `top`, given back when dropped however `top` ends; a panic gives it
/// back too (`ratatui::try_init` installs the hook).
struct Screen {
    terminal: DefaultTerminal,
}

impl Screen {
    fn enter() -> Result<Screen, Failure> {
        let terminal = ratatui::try_init().map_err(|e| {
            ratatui::restore();
            Failure::new(
                crate::exit::SOFTWARE,
                format!("cannot take the terminal: {e}"),
            )
        })?;
        Ok(Screen { terminal })
    }

    fn draw(&mut self, view: &View) -> Result<(), Failure> {
        self.terminal
            .draw(|frame| view.draw(frame))
            .map(drop)
            .map_err(|e| Failure::new(crate::exit::SOFTWARE, format!("cannot draw: {e}")))
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        // The cursor the draws hid is shown by the terminal's own drop, after this.
        ratatui::restore();
    }
}

/// What a terminal event asks of `top`.
enum Asked {
    Quit,
    Sort,
    /// Anything else, a resize included: the view drawn again (at the terminal's new size).
    Redraw,
}

fn asked(event: &Event) -> Asked {
    match event {
        Event::Key(key) if key.kind == KeyEventKind::Press => match key.code {
            KeyCode::Char('q') => Asked::Quit,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Asked::Quit,
            KeyCode::Char('s') => Asked::Sort,
            _ => Asked::Redraw,
        },
        _ => Asked::Redraw,
    }
}

/// The terminal's events, read on a thread of its own (a read blocks) until the receiver is
/// dropped; the thread looks for that every 100 ms.
fn terminal_events() -> mpsc::UnboundedReceiver<std::io::Result<Event>> {
    let (events, received) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !events.is_closed() {
            let read = match event::poll(Duration::from_millis(100)) {
                Ok(false) => continue,
                Ok(true) => event::read(),
                Err(e) => Err(e),
            };
            let failed = read.is_err();
            if events.send(read).is_err() || failed {
                return;
            }
        }
    });
    received
}

/// The graph of the locks `pattern` matches, read after `delay`.
async fn read_after(
    client: &Client,
    pattern: &str,
    delay: Duration,
) -> Result<WaitGraph, fencelock::Error> {
    tokio::time::sleep(delay).await;
    client.wait_graph(pattern).await
}

/// Runs `fencelock top`.
pub(crate) async fn top(client: &Client, pattern: &str, mut sort: SortKey) -> Result<u8, Failure> {
    let mut graph = client.wait_graph(pattern).await?;
    let interactive = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !interactive {
        output::print(&View::of(&graph, sort, pattern).text());
        return Ok(crate::exit::SUCCESS);
    }
    let mut screen = Screen::enter()?;
    // Declared after the screen, so dropped before it: no key is read once the terminal is back.
    let mut events = terminal_events();
    let mut next = Box::pin(read_after(client, pattern, REFRESH));
    loop {
        screen.draw(&View::of(&graph, sort, pattern))?;
        tokio::select! {
            read = &mut next => {
                graph = read?;
                next.set(read_after(client, pattern, REFRESH));
            }
            event = events.recv() => match event {
                None => return Ok(crate::exit::SUCCESS),
                Some(Err(e)) => {
                    return Err(Failure::new(
                        crate::exit::SOFTWARE,
                        format!("cannot read the terminal: {e}"),
                    ))
                }
                Some(Ok(event)) => match asked(&event) {
                    Asked::Quit => return Ok(crate::exit::SUCCESS),
                    Asked::Sort => sort = sort.next(),
                    Asked::Redraw => {}
                },
            },
        }
    }
}
