//! What `status` and `unlock` print. A closed pipe (`fencelock status | head -1`) ends the output
//! quietly: it is not an error.

use std::io::Write;
use std::time::Duration;

use fencelock::{LockInfo, LockKind};

/// Writes to standard output, ignoring a reader that went away.
pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
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
