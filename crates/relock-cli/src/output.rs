//! What `status` and `unlock` print. A closed pipe (`relock status | head -1`) ends the output
//! quietly: it is not an error.

use std::io::Write;
use std::time::Duration;

use relock::LockInfo;

/// Writes to standard output, ignoring a reader that went away.
pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// One line about a lock, for messages.
pub(crate) fn describe(info: &LockInfo) -> String {
    format!(
        "{} {:?} held by {} (fence {}, lease ends in {})",
        info.kind,
        info.name,
        info.holder.as_deref().unwrap_or("an unlabelled holder"),
        info.fence.map_or("-".to_owned(), |f| f.to_string()),
        remaining(info.remaining),
    )
}

pub(crate) fn table(locks: &[LockInfo]) -> String {
    let header = ["NAME", "KIND", "HOLDER", "FENCE", "REMAINING", "WAITING"];
    let rows: Vec<[String; 6]> = locks
        .iter()
        .map(|l| {
            [
                l.name.clone(),
                l.kind.to_string(),
                l.holder.clone().unwrap_or_else(|| "-".to_owned()),
                l.fence.map_or("-".to_owned(), |f| f.to_string()),
                remaining(l.remaining),
                l.waiting_clients.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
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
    for row in &rows {
        line(row);
    }
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
                "fence": l.fence.map(|f| f.get()),
                "remaining_ms": l.remaining.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
                "waiting_clients": l.waiting_clients,
            })
        })
        .collect();
    let mut text = serde_json::Value::Array(items).to_string();
    text.push('\n');
    text
}

fn remaining(left: Option<Duration>) -> String {
    match left {
        Some(left) => format!("{:.1}s", left.as_secs_f64()),
        None => "no expiry".to_owned(),
    }
}
