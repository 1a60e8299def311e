//! What `status` (its table and its wait-for graph) and `unlock` print. A closed pipe (`fencelock status | head -1`) ends the output
//! quietly: it is not an error.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock::{LockInfo, LockKind, TaskId, Verdict, WaitGraph};

/// Writes to standard output, ignoring a reader that went away.
pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// The width of each column of `header` and `rows`: its widest cell, in characters.
pub(crate) fn widths<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> [usize; N] {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    widths
}

/// `header` and `rows` as aligned columns, two spaces apart, one line each.
pub(crate) fn columns<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let widths = widths(header, rows);
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(&header.map(str::to_owned));
    for row in rows {
        line(row);
    }
    out
}

/// A progress line on standard error while the key space is read: shown at the first `SCAN`
/// call, then at most every 100 ms, and cleared at the end, so that nothing of it stays
/// before the output.
#[derive(Default)]
pub(crate) struct ProgressLine {
    shown: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ProgressLine {
    /// Shows how far the walk is, unless the line was shown in the last 100 ms.
    pub(crate) fn show(&self, seen: fencelock::ScanProgress) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.is_some_and(|at| at.elapsed() < std::time::Duration::from_millis(100)) {
            return;
        }
        *shown = Some(std::time::Instant::now());
        let mut stderr = std::io::stderr().lock();
        let _ = stderr
            .write_all(progress_text(seen).as_bytes())
            .and_then(|()| stderr.flush());
    }

    /// Erases the line, if it was shown.
    pub(crate) fn clear(&self) {
        let shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = stderr.write_all(b"\r\x1b[K").and_then(|()| stderr.flush());
        }
    }
}

/// The progress line's text: back to the start of the line, the counts, the rest erased.
fn progress_text(seen: fencelock::ScanProgress) -> String {
    format!(
        "\rreading the key space (SCAN calls: {}, keys: {})\x1b[K",
        seen.scans, seen.keys
    )
}

/// One line about a lock, for messages: `mutex "report" held by vm/14741 (fence 17…, lease
/// ends in 29.5s)`.
pub(crate) fn describe(info: &LockInfo) -> String {
    let who = match (info.kind, info.holders.as_slice()) {
        (LockKind::Semaphore, []) => plural(info.holds, "grant"),
        (LockKind::Semaphore, holders) => {
            format!("{} of {}", plural(info.holds, "grant"), holders.join(", "))
        }
        (_, []) if info.holds > 1 => plural(info.holds, "unlabelled holder"),
        (_, []) => "an unlabelled holder".to_owned(),
        (_, holders) => holders.join(", "),
    };
    let mut details = Vec::new();
    if let Some(held) = held(info) {
        details.push(held);
    }
    if info.kind != LockKind::Semaphore {
        details.push(format!(
            "fence {}",
            info.fence.map_or("-".to_owned(), |f| f.to_string())
        ));
    }
    details.push(format!("lease ends in {}", remaining(info.remaining)));
    if let Some(queued) = info.queued.filter(|&q| q > 0) {
        details.push(format!("{queued} queued"));
    }
    format!(
        "{} {:?} held by {who} ({})",
        info.kind,
        info.name,
        details.join(", ")
    )
}

/// What is held, where there is more to say than "the lock": `2 holds`, `3 read`,
/// `2/3 permits`.
fn held(info: &LockInfo) -> Option<String> {
    match info.kind {
        LockKind::ReentrantMutex => Some(plural(info.holds, "hold")),
        LockKind::RwLock => {
            let writes = info.write_holds.unwrap_or(0);
            let reads = info.holds.saturating_sub(writes);
            Some(match (writes, reads) {
                (0, r) => format!("{r} read"),
                (w, 0) => format!("{w} write"),
                (w, r) => format!("{w} write + {r} read"),
            })
        }
        LockKind::Semaphore => Some(format!(
            "{}/{} permits",
            info.permits_in_use.unwrap_or(0),
            info.permits_total.map_or("?".to_owned(), |t| t.to_string())
        )),
        _ => None,
    }
}

fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// At most three holders, then how many more.
fn holders_cell(holders: &[String]) -> String {
    match holders {
        [] => "-".to_owned(),
        [first, second, third, more @ ..] if !more.is_empty() => {
            format!("{first},{second},{third},+{}", more.len())
        }
        _ => holders.join(","),
    }
}

pub(crate) fn table(locks: &[LockInfo]) -> String {
    let header = [
        "NAME",
        "KIND",
        "HOLDER",
        "HELD",
        "FENCE",
        "REMAINING",
        "WAITING",
    ];
    let rows: Vec<[String; 7]> = locks
        .iter()
        .map(|l| {
            let waiting = match l.queued.filter(|&q| q > 0) {
                Some(queued) => format!("{} ({queued} queued)", l.waiting_clients),
                None => l.waiting_clients.to_string(),
            };
            [
                l.name.clone(),
                l.kind.to_string(),
                holders_cell(&l.holders),
                held(l).unwrap_or_else(|| l.holds.to_string()),
                l.fence.map_or("-".to_owned(), |f| f.to_string()),
                remaining(l.remaining),
                waiting,
            ]
        })
        .collect();
    let mut out = columns(header, &rows);
    if rows.is_empty() {
        out.push_str("(no locks held)\n");
    }
    out
}

pub(crate) fn json(locks: &[LockInfo]) -> String {
    let items: Vec<serde_json::Value> = locks
        .iter()
        .map(|l| {
            serde_json::json!({
                "name": l.name,
                "kind": l.kind.to_string(),
                "holder": l.holder,
                "holders": l.holders,
                "holds": l.holds,
                "write_holds": l.write_holds,
                "permits_in_use": l.permits_in_use,
                "permits_total": l.permits_total,
                "fence": l.fence.map(|f| f.get()),
                "remaining_ms": l.remaining.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
                "waiting_clients": l.waiting_clients,
                "queued": l.queued,
            })
        })
        .collect();
    let mut text = serde_json::Value::Array(items).to_string();
    text.push('\n');
    text
}

fn remaining(left: Option<Duration>) -> String {
    left.map_or("no expiry".to_owned(), human)
}

/// A duration as people write it, in the form fencelock reads: `250ms`, `4.5s`, `2m30s`,
/// `1h5m`, `3d2h`; tenths of a second below a minute, whole seconds up to an hour, whole
/// minutes beyond.
pub(crate) fn human(d: Duration) -> String {
    const MINUTE: u64 = 60;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.as_millis()),
        1..MINUTE => {
            let tenths = d.as_millis() / 100;
            match tenths % 10 {
                0 => format!("{}s", tenths / 10),
                tenth => format!("{}.{tenth}s", tenths / 10),
            }
        }
        MINUTE..HOUR => pair(secs / MINUTE, "m", secs % MINUTE, "s"),
        HOUR..DAY => pair(secs / HOUR, "h", secs % HOUR / MINUTE, "m"),
        _ => pair(secs / DAY, "d", secs % DAY / HOUR, "h"),
    }
}

/// `2m30s`, or `2m` when the smaller unit is zero.
fn pair(big: u64, big_unit: &str, small: u64, small_unit: &str) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit}{small}{small_unit}")
    }
}

/// A task and its label: `billing-3/4711 [3fZk0a1Q/t42]`.
fn task_cell(task: Option<&TaskId>, label: Option<&str>) -> String {
    match (label, task) {
        (Some(label), Some(task)) => format!("{label} [{task}]"),
        (Some(label), None) => label.to_owned(),
        (None, Some(task)) => format!("[{task}]"),
        (None, None) => "(unlabelled)".to_owned(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// The wait-for graph for people: each lock, its holders and its waiters (with what each waits
/// for), then each deadlock.
pub(crate) fn graph_text(graph: &WaitGraph) -> String {
    let now = SystemTime::now();
    let mut out = String::new();
    for lock in &graph.locks {
        out.push_str(&format!("{} {:?}\n", lock.kind, lock.name));
        for holder in &lock.holders {
            let mut line = format!(
                "  held by {}",
                task_cell(holder.task.as_ref(), holder.label.as_deref())
            );
            if let Some(since) = holder.since {
                let held = now.duration_since(since).unwrap_or_default();
                line.push_str(&format!(" for {}", human(held)));
            }
            if let Some(fence) = holder.fence {
                line.push_str(&format!(", fence {fence}"));
            }
            out.push_str(&line);
            out.push('\n');
        }
        for waiter in &lock.waiters {
            let mut line = format!(
                "  waited for by {} for {}",
                task_cell(Some(&waiter.task), waiter.label.as_deref()),
                human(waiter.waited)
            );
            if !waiter.waits_for.is_empty() {
                let tasks: Vec<String> = waiter.waits_for.iter().map(|t| t.to_string()).collect();
                line.push_str(&format!(" -> {}", tasks.join(", ")));
            }
            out.push_str(&line);
            out.push('\n');
        }
        if lock.unrecorded > 0 {
            out.push_str(&format!(
                "  {} more waiting, wait(s) not recorded\n",
                lock.unrecorded
            ));
        }
    }
    if graph.locks.is_empty() {
        out.push_str("(no locks held or waited for)\n");
    }
    match graph.verdict() {
        Verdict::NoDeadlock => out.push_str("no deadlock\n"),
        Verdict::Unknown if graph.cycles.is_empty() => out.push_str(&format!(
            "no deadlock among the recorded waits, but {}: cannot tell\n",
            unseen(graph)
        )),
        _ => {}
    }
    for (at, cycle) in graph.cycles.iter().enumerate() {
        out.push_str(&format!("DEADLOCK {}:\n", at + 1));
        for step in &cycle.steps {
            out.push_str(&format!(
                "  {} waits {} for {} {:?} held by {}\n",
                task_cell(Some(&step.waiter), step.waiter_label.as_deref()),
                human(step.waited),
                step.kind,
                step.name,
                task_cell(Some(&step.holder), step.holder_label.as_deref()),
            ));
        }
    }
    out
}

/// What the graph could not see, in words: waiters that recorded no wait (those waiting less
/// than their client's threshold, 1 s by default, or whose client records none), and records
/// beyond those it reads.
fn unseen(graph: &WaitGraph) -> String {
    let mut parts = Vec::new();
    if graph.unrecorded > 0 {
        parts.push(format!(
            "{} waiter(s) recorded no wait (waiting under their client's threshold, or not \
             recording)",
            graph.unrecorded
        ));
    }
    if !graph.complete {
        parts.push("more waits were recorded than were read".to_owned());
    }
    parts.join(", and ")
}

/// The wait-for graph as one JSON object.
pub(crate) fn graph_json(graph: &WaitGraph) -> String {
    let now = SystemTime::now();
    let locks: Vec<serde_json::Value> = graph
        .locks
        .iter()
        .map(|lock| {
            let holders: Vec<serde_json::Value> = lock
                .holders
                .iter()
                .map(|h| {
                    serde_json::json!({
                        "task": h.task.as_ref().map(ToString::to_string),
                        "label": h.label,
                        "since_ms": h.since.map(epoch_ms),
                        "held_ms": h.since.map(|s| millis(now.duration_since(s).unwrap_or_default())),
                        "fence": h.fence.map(|f| f.get()),
                    })
                })
                .collect();
            let waiters: Vec<serde_json::Value> = lock
                .waiters
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "task": w.task.to_string(),
                        "label": w.label,
                        "since_ms": epoch_ms(w.since),
                        "waited_ms": millis(w.waited),
                        "waits_for": w.waits_for.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    })
                })
                .collect();
            serde_json::json!({
                "name": lock.name,
                "kind": lock.kind.to_string(),
                "holders": holders,
                "waiters": waiters,
                "unrecorded": lock.unrecorded,
                "waiting_clients": lock.info.as_ref().map(|i| i.waiting_clients),
            })
        })
        .collect();
    let cycles: Vec<serde_json::Value> = graph
        .cycles
        .iter()
        .map(|cycle| {
            let steps: Vec<serde_json::Value> = cycle
                .steps
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "waiter": s.waiter.to_string(),
                        "waiter_label": s.waiter_label,
                        "name": s.name,
                        "kind": s.kind.to_string(),
                        "waited_ms": millis(s.waited),
                        "holder": s.holder.to_string(),
                        "holder_label": s.holder_label,
                    })
                })
                .collect();
            serde_json::json!({ "steps": steps })
        })
        .collect();
    let verdict = match graph.verdict() {
        Verdict::Deadlock => "deadlock",
        Verdict::NoDeadlock => "no_deadlock",
        _ => "unknown",
    };
    let mut text = serde_json::json!({
        "locks": locks,
        "cycles": cycles,
        "complete": graph.complete,
        "unrecorded": graph.unrecorded,
        "verdict": verdict,
    })
    .to_string();
    text.push('\n');
    text
}

/// The wait-for graph as Graphviz dot: locks as ellipses, tasks as boxes, an edge from each
/// lock to its holders and from each waiter to its lock; the waits of a deadlock in red.
pub(crate) fn graph_dot(graph: &WaitGraph) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let lock_id = |kind: LockKind, name: &str| quote(&format!("{kind} {name}"));
    let in_cycle = |task: &TaskId, kind: LockKind, name: &str| {
        graph.cycles.iter().any(|c| {
            c.steps
                .iter()
                .any(|s| &s.waiter == task && s.kind == kind && s.name == name)
        })
    };
    let mut out = String::from("digraph waits {\n  rankdir=LR;\n");
    let mut tasks: Vec<(String, String)> = Vec::new();
    let mut edges = String::new();
    for lock in &graph.locks {
        out.push_str(&format!(
            "  {} [shape=ellipse];\n",
            lock_id(lock.kind, &lock.name)
        ));
        for (at, holder) in lock.holders.iter().enumerate() {
            let id = match &holder.task {
                Some(task) => task.to_string(),
                None => format!("{} {} holder {at}", lock.kind, lock.name),
            };
            let label = task_cell(holder.task.as_ref(), holder.label.as_deref());
            tasks.push((id.clone(), label));
            edges.push_str(&format!(
                "  {} -> {} [label=\"held by\"];\n",
                lock_id(lock.kind, &lock.name),
                quote(&id)
            ));
        }
        for waiter in &lock.waiters {
            let id = waiter.task.to_string();
            tasks.push((
                id.clone(),
                task_cell(Some(&waiter.task), waiter.label.as_deref()),
            ));
            let colour = if in_cycle(&waiter.task, lock.kind, &lock.name) {
                ", color=red, fontcolor=red"
            } else {
                ""
            };
            edges.push_str(&format!(
                "  {} -> {} [label=\"waits {}\"{colour}];\n",
                quote(&id),
                lock_id(lock.kind, &lock.name),
                human(waiter.waited)
            ));
        }
    }
    for lock in graph.locks.iter().filter(|lock| lock.unrecorded > 0) {
        let id = format!("{} {} unrecorded", lock.kind, lock.name);
        out.push_str(&format!(
            "  {} [shape=box, style=dashed, label={}];\n",
            quote(&id),
            quote(&format!("{} waiting, not recorded", lock.unrecorded))
        ));
        edges.push_str(&format!(
            "  {} -> {} [style=dashed, label=\"waits\"];\n",
            quote(&id),
            lock_id(lock.kind, &lock.name)
        ));
    }
    if graph.verdict() == Verdict::Unknown {
        out.push_str(&format!(
            "  label={};\n",
            quote(&format!("cannot tell: {}", unseen(graph)))
        ));
    }
    tasks.sort();
    tasks.dedup_by(|a, b| a.0 == b.0);
    for (id, label) in tasks {
        out.push_str(&format!(
            "  {} [shape=box, label={}];\n",
            quote(&id),
            quote(&label)
        ));
    }
    out.push_str(&edges);
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(4_560), "4.5s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(150), "2m30s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(3_900), "1h5m"),
            (Duration::from_secs(2 * 86_400 + 3_600), "2d1h"),
        ];
        for (d, shown) in cases {
            assert_eq!(human(d), shown);
            assert!(crate::parse_duration(shown).is_ok(), "{shown} reads back");
        }
    }
}
