//! Checks the merged history of a run: the sections of every worker on the shared monotonic
//! clock, the writes the resource accepted, and the counter it ended with.

use std::time::Duration;

use crate::event::{self, Event};

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Measurement {
    /// Critical sections that ran to their end.
    pub sections: usize,
    /// Sections that another worker entered before they ended: each one a holder whose
    /// exclusivity was broken (two holders at once).
    pub overlaps: usize,
    /// Increments accepted by the resource that the final counter does not show.
    pub lost_updates: u64,
    /// Writes the resource accepted although a later holder had already read the counter:
    /// writes from a holder whose turn was over, which fencing exists to refuse.
    pub stale_writes: usize,
    /// Reads and writes the fenced resource refused.
    pub refused: usize,
    /// Grants whose fence was lower than that of a grant entered before them: the fence went
    /// back, and the resource refuses a holder it should serve.
    pub fences_back: usize,
    /// Acquire attempts that got the lock.
    pub acquired: usize,
    /// Acquire attempts that ended without it.
    pub gave_up: usize,
    /// Faults injected by the workers (kill, pause, slow section) and on the servers.
    pub faults: usize,
    /// Sections entered after the first holder was killed, if one was.
    pub entered_after_crash: Option<usize>,
    /// Sections entered on a grant the lock's Redis did not show right after the entry (read
    /// back only under the faults that go after a handoff): a holder by a grant that was never
    /// written, or no longer held.
    pub unheld_grants: usize,
    /// The longest time, in milliseconds, the lock had no holder while a worker that could
    /// take it waited (one not killed, stopped or cut off meanwhile): a lock sitting idle, as
    /// behind a grant to a waiter that cannot use it.
    pub longest_idle_ms: u64,
    /// Sections entered while a worker that asked more than [`ORDER_MARGIN`] earlier still
    /// waited (neither one stopped meanwhile): served out of turn, which a fair lock must not do.
    pub out_of_turn: usize,
}

/// How much earlier one acquire must have begun than another for the checker to call them
/// ordered: far more than two processes' requests reach Redis apart on a loaded machine, so
/// that a fair lock's line is never misread.
pub const ORDER_MARGIN: Duration = Duration::from_millis(100);

impl Measurement {
    /// The share of acquire attempts that got the lock, from 0 to 1 (1 when none was made).
    pub fn availability(&self) -> f64 {
        let attempts = self.acquired + self.gave_up;
        if attempts == 0 {
            1.0
        } else {
            self.acquired as f64 / attempts as f64
        }
    }
}

impl Measurement {
    /// Adds `other`'s counts to these: the measurement of two runs, or of two lanes of one.
    pub fn add(&mut self, other: &Measurement) {
        self.sections += other.sections;
        self.overlaps += other.overlaps;
        self.lost_updates += other.lost_updates;
        self.stale_writes += other.stale_writes;
        self.refused += other.refused;
        self.fences_back += other.fences_back;
        self.acquired += other.acquired;
        self.gave_up += other.gave_up;
        self.faults += other.faults;
        self.longest_idle_ms = self.longest_idle_ms.max(other.longest_idle_ms);
        self.out_of_turn += other.out_of_turn;
        self.unheld_grants += other.unheld_grants;
        self.entered_after_crash = match (self.entered_after_crash, other.entered_after_crash) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// Checks each lane (one lock name and its counter) on its own, `histories[lane][worker]`
/// against `final_counters[lane]`, and adds up what they measured. `server_faults` counts the
/// faults injected on the servers, once for all lanes.
pub fn analyse_lanes(
    histories: &[Vec<Vec<Event>>],
    final_counters: &[i64],
    server_faults: usize,
) -> Measurement {
    let mut total = Measurement {
        faults: server_faults,
        ..Measurement::default()
    };
    for (lane, workers) in histories.iter().enumerate() {
        let counter = final_counters.get(lane).copied().unwrap_or(0);
        total.add(&analyse(workers, counter, 0));
    }
    total
}

/// One critical section of one worker.
#[derive(Clone, Debug, Default)]
struct Section {
    worker: usize,
    enter: u64,
    /// The grant's fence, for fenced strategies.
    fence: Option<u64>,
    /// Whether the hold was shared (a reader's).
    shared: bool,
    /// When its acquire began.
    asked: u64,
    /// When it ended: its exit, its death, or its worker's last event.
    end: u64,
    /// When its read of the counter came back, if the resource allowed it.
    read_done: Option<u64>,
    /// When each accepted write was sent.
    accepted_writes: Vec<u64>,
    /// Whether its worker was stopped (killed, paused or cut off) while it waited.
    interrupted: bool,
}

/// What one worker's history says of its waits, as it is read.
#[derive(Debug, Default)]
struct Waits {
    /// An acquire began and has not ended.
    asking: bool,
    /// Since when it waits able to take the lock, while it does.
    since: Option<u64>,
    /// Whether the current acquire was stopped meanwhile.
    interrupted: bool,
    /// The spans it waited able to take the lock.
    spans: Vec<(u64, u64)>,
}

impl Waits {
    fn ask(&mut self, t: u64) {
        self.asking = true;
        self.interrupted = false;
        self.since = Some(t);
    }

    /// The acquire ended (entered or gave up) at `t`; whether it was stopped meanwhile.
    fn end(&mut self, t: u64) -> bool {
        self.pause(t);
        self.asking = false;
        std::mem::take(&mut self.interrupted)
    }

    fn pause(&mut self, t: u64) {
        if let Some(since) = self.since.take() {
            self.spans.push((since, t.max(since)));
        }
    }

    fn out(&mut self, t: u64) {
        if self.asking {
            self.interrupted = true;
        }
        self.pause(t);
    }

    fn back(&mut self, t: u64) {
        if self.asking {
            self.since = Some(t);
        }
    }
}

/// Checks the histories, one per worker in the order it reported, against the counter's final
/// value. `server_faults` counts the faults injected on the servers.
pub fn analyse(histories: &[Vec<Event>], final_counter: i64, server_faults: usize) -> Measurement {
    let mut m = Measurement {
        faults: server_faults,
        ..Measurement::default()
    };
    let mut sections = Vec::new();
    let mut waiting = Vec::new();
    let mut first_crash: Option<u64> = None;
    for (worker, events) in histories.iter().enumerate() {
        let mut open: Option<Section> = None;
        let mut waits = Waits::default();
        let mut last_time = 0;
        for event in events {
            match event {
                Event::Enter {
                    t,
                    fence,
                    shared,
                    asked,
                } => {
                    m.acquired += 1;
                    sections.extend(open.take());
                    open = Some(Section {
                        worker,
                        enter: *t,
                        fence: *fence,
                        shared: *shared,
                        asked: *asked,
                        end: *t,
                        interrupted: waits.end(*t),
                        ..Section::default()
                    });
                    last_time = *t;
                }
                Event::Ask { t } => {
                    waits.ask(*t);
                    last_time = *t;
                }
                Event::Unheld { t } => {
                    m.unheld_grants += 1;
                    last_time = *t;
                }
                Event::Out { t } => waits.out(*t),
                Event::Back { t } => waits.back(*t),
                Event::Read { done, value, .. } => {
                    last_time = *done;
                    match (value, open.as_mut()) {
                        (Some(_), Some(section)) => section.read_done = Some(*done),
                        (None, _) => m.refused += 1,
                        (Some(_), None) => {}
                    }
                }
                Event::Write {
                    sent,
                    done,
                    accepted,
                } => {
                    last_time = *done;
                    if !accepted {
                        m.refused += 1;
                    } else if let Some(section) = open.as_mut() {
                        section.accepted_writes.push(*sent);
                    }
                }
                Event::Exit { t } => {
                    m.sections += 1;
                    if let Some(mut section) = open.take() {
                        section.end = *t;
                        sections.push(section);
                    }
                    last_time = *t;
                }
                Event::GaveUp { t, .. } => {
                    m.gave_up += 1;
                    waits.end(*t);
                    last_time = *t;
                }
                Event::Pause { t }
                | Event::Slow { t }
                | Event::Cut { t }
                | Event::KillPubsub { t } => {
                    m.faults += 1;
                    last_time = *t;
                }
                Event::Crash { t } => {
                    m.faults += 1;
                    first_crash = Some(first_crash.map_or(*t, |c| c.min(*t)));
                    match open.take() {
                        Some(mut section) => {
                            section.end = *t;
                            sections.push(section);
                        }
                        // Killed inside its acquire, once it was the holder.
                        None => m.acquired += 1,
                    }
                    last_time = *t;
                }
            }
        }
        if let Some(mut section) = open.take() {
            section.end = last_time.max(section.enter);
            sections.push(section);
        }
        waits.pause(last_time);
        waiting.extend(waits.spans);
    }
    sections.sort_by_key(|s| s.enter);
    m.overlaps = count_overlaps(&sections);
    m.stale_writes = count_stale_writes(&sections);
    m.fences_back = count_fences_back(&sections);
    m.longest_idle_ms = longest_idle(&sections, waiting) / 1_000_000;
    m.out_of_turn = count_out_of_turn(&sections);
    let accepted: usize = sections.iter().map(|s| s.accepted_writes.len()).sum();
    let accepted = i64::try_from(accepted).unwrap_or(i64::MAX);
    m.lost_updates = u64::try_from(accepted - final_counter).unwrap_or(0);
    m.entered_after_crash =
        first_crash.map(|crash| sections.iter().filter(|s| s.enter > crash).count());
    m
}

/// Sections that a section of another worker entered before they ended, unless both were
/// shared (readers'). Counting broken
/// sections rather than intersecting pairs keeps one long pause from counting once per section
/// that ran during it. `sections` is sorted by entry, so each one is compared only with those
/// entered before it ended.
fn count_overlaps(sections: &[Section]) -> usize {
    sections
        .iter()
        .enumerate()
        .filter(|(i, earlier)| {
            sections[i + 1..]
                .iter()
                .take_while(|later| later.enter < earlier.end)
                .any(|later| later.worker != earlier.worker && !(later.shared && earlier.shared))
        })
        .count()
}

/// Exclusive grants whose fence is lower than that of a grant that had certainly come before
/// them: one whose holder entered before this grant was even asked for. Entry order alone
/// would not do: two holders at once log their entries in either order. Shared holds
/// (readers') are left out: readers are granted together, in no order of their fences.
fn count_fences_back(sections: &[Section]) -> usize {
    let mut fenced: Vec<&Section> = sections
        .iter()
        .filter(|s| !s.shared && s.fence.is_some())
        .collect();
    fenced.sort_by_key(|s| s.enter);
    // highest[i]: the highest fence among the first i grants entered.
    let highest: Vec<u64> = std::iter::once(0)
        .chain(fenced.iter().scan(0, |high, s| {
            *high = (*high).max(s.fence.unwrap_or(0));
            Some(*high)
        }))
        .collect();
    fenced
        .iter()
        .filter(|s| {
            let before = fenced.partition_point(|earlier| earlier.enter < s.asked);
            s.fence.unwrap_or(0) < highest[before]
        })
        .count()
}

/// Accepted writes sent after a section later in the lock's order had its read answered: the
/// resource executed that read before this write, so the write overwrote what a later holder
/// based its own write on. Comparing the send time of the write with the reply time of the
/// read keeps this free of false alarms: both are on the shared clock.
fn count_stale_writes(sections: &[Section]) -> usize {
    sections
        .iter()
        .map(|section| {
            section
                .accepted_writes
                .iter()
                .filter(|&&sent| {
                    sections.iter().any(|later| {
                        later.worker != section.worker
                            && comes_after(later, section)
                            && later.read_done.is_some_and(|read| read < sent)
                    })
                })
                .count()
        })
        .sum()
}

/// Whether `later` comes after `earlier` in the lock's order. Between two exclusive fenced
/// grants that order is their fences': two holders at once (after an eviction, say) log their
/// entries in either order, and the one with the lower fence is the earlier grant even when
/// its acquire returned last (its later write is the one the resource refuses). Otherwise it
/// is the order of entry.
fn comes_after(later: &Section, earlier: &Section) -> bool {
    match (later.fence, earlier.fence) {
        (Some(l), Some(e)) if !later.shared && !earlier.shared => l > e,
        _ => later.enter > earlier.enter,
    }
}

/// The longest span, in nanoseconds, inside the `waiting` spans (some worker able to take the
/// lock waited) and outside every section (nobody held it).
fn longest_idle(sections: &[Section], waiting: Vec<(u64, u64)>) -> u64 {
    let held = merged(sections.iter().map(|s| (s.enter, s.end)).collect());
    let mut longest = 0;
    for (from, to) in merged(waiting) {
        let mut idle_from = from;
        for &(enter, end) in held
            .iter()
            .filter(|(enter, end)| *end > from && *enter < to)
        {
            longest = longest.max(enter.saturating_sub(idle_from));
            idle_from = idle_from.max(end);
        }
        longest = longest.max(to.saturating_sub(idle_from));
    }
    longest
}

/// `spans` sorted and joined where they touch or overlap.
fn merged(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut joined: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (from, to) in spans {
        match joined.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => joined.push((from, to)),
        }
    }
    joined
}

/// Sections (sorted by entry) entered while a section entered later had begun its acquire more
/// than [`ORDER_MARGIN`] earlier: that waiter was passed over. Sections whose wait was stopped
/// by a fault take no part, either way.
fn count_out_of_turn(sections: &[Section]) -> usize {
    let margin = event::nanos(ORDER_MARGIN);
    // The earliest acquire among the sections entered after each one.
    let mut earliest_after = vec![u64::MAX; sections.len()];
    let mut earliest = u64::MAX;
    for (i, section) in sections.iter().enumerate().rev() {
        earliest_after[i] = earliest;
        if !section.interrupted {
            earliest = earliest.min(section.asked);
        }
    }
    sections
        .iter()
        .zip(earliest_after)
        .filter(|(s, earliest)| !s.interrupted && earliest.saturating_add(margin) < s.asked)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(enter: u64, read: u64, write: u64, exit: u64, accepted: bool) -> Vec<Event> {
        vec![
            Event::Enter {
                t: enter,
                fence: None,
                shared: false,
                asked: enter,
            },
            Event::Read {
                sent: read,
                done: read + 1,
                value: Some(0),
            },
            Event::Write {
                sent: write,
                done: write + 1,
                accepted,
            },
            Event::Exit { t: exit },
        ]
    }

    #[test]
    fn holders_one_after_the_other_are_clean() {
        let histories = vec![section(0, 1, 3, 5, true), section(6, 7, 8, 9, true)];
        let m = analyse(&histories, 2, 0);
        assert_eq!(m.sections, 2);
        assert_eq!((m.overlaps, m.lost_updates, m.stale_writes), (0, 0, 0));
        assert_eq!(m.availability(), 1.0);
    }

    #[test]
    fn a_paused_holder_writing_after_a_later_read_is_stale_and_loses_an_update() {
        // Worker 0 reads at 1, stalls; worker 1 enters at 10, reads at 11, writes at 12;
        // worker 0 writes at 20 what it read at 1.
        let histories = vec![section(0, 1, 20, 21, true), section(10, 11, 12, 13, true)];
        let m = analyse(&histories, 1, 0);
        assert_eq!(m.overlaps, 1);
        assert_eq!(m.stale_writes, 1);
        assert_eq!(m.lost_updates, 1);
    }

    #[test]
    fn a_refused_stale_write_is_no_violation_but_the_overlap_stays() {
        let histories = vec![section(0, 1, 20, 21, false), section(10, 11, 12, 13, true)];
        let m = analyse(&histories, 1, 0);
        assert_eq!((m.overlaps, m.stale_writes, m.lost_updates), (1, 0, 0));
        assert_eq!(m.refused, 1);
    }

    #[test]
    fn a_fence_lower_than_a_grant_entered_before_the_ask_counts_as_gone_back() {
        let fenced = |enter: u64, fence: u64| {
            let mut events = section(enter, enter + 1, enter + 2, enter + 3, true);
            events[0] = Event::Enter {
                t: enter,
                fence: Some(fence),
                shared: false,
                asked: enter - 5,
            };
            events
        };
        // Asked for at 15, after the grant of fence 200 entered at 10: fence 50 went back.
        let mut first = fenced(10, 100);
        first.extend(fenced(20, 50));
        let histories = vec![first, fenced(11, 200)];
        let m = analyse(&histories, 3, 0);
        assert_eq!(m.fences_back, 1);
        // Asked for at 6, before either earlier grant entered: they may have come after it.
        let histories = vec![fenced(11, 50), fenced(10, 200)];
        assert_eq!(analyse(&histories, 2, 0).fences_back, 0);
    }

    #[test]
    fn a_write_after_the_read_of_a_lower_fence_entered_later_is_not_stale() {
        let fenced = |enter: u64, read: u64, write: u64, fence: u64, accepted: bool| {
            let mut events = section(enter, read, write, write + 1, accepted);
            events[0] = Event::Enter {
                t: enter,
                fence: Some(fence),
                shared: false,
                asked: 0,
            };
            events
        };
        // Two holders at once: fence 50's acquire returned at 9, after fence 100's at 5. The
        // write of fence 100 at 12 follows fence 50's read, answered at 11; fence 50's write at
        // 13 is refused. Fence 50 is the earlier grant: nothing was overwritten.
        let histories = vec![fenced(5, 6, 12, 100, true), fenced(9, 10, 13, 50, false)];
        let m = analyse(&histories, 1, 0);
        assert_eq!((m.overlaps, m.stale_writes, m.lost_updates), (1, 0, 0));
        // Fences in the order of entry: fence 100's read, answered at 10, came before fence
        // 50's accepted write at 12, which is stale.
        let histories = vec![fenced(5, 6, 12, 50, true), fenced(8, 9, 13, 100, true)];
        assert_eq!(analyse(&histories, 1, 0).stale_writes, 1);
    }

    #[test]
    fn a_crash_ends_the_section_and_counts_who_entered_after() {
        let mut crashed = section(0, 1, 2, 3, true);
        crashed.push(Event::Crash { t: 4 });
        let histories = vec![
            crashed,
            vec![Event::GaveUp {
                t: 9,
                reason: "timeout".into(),
            }],
        ];
        let m = analyse(&histories, 1, 0);
        assert_eq!(m.faults, 1);
        assert_eq!(m.acquired, 2);
        assert_eq!(m.gave_up, 1);
        assert_eq!(m.entered_after_crash, Some(0));
        assert!((m.availability() - 2.0 / 3.0).abs() < 1e-9);
    }
    const MS: u64 = 1_000_000;

    /// A worker's acquire asked at `asked` ms, entered at `enter` ms and left at `exit` ms.
    fn waited(asked: u64, enter: u64, exit: u64) -> Vec<Event> {
        vec![
            Event::Ask { t: asked * MS },
            Event::Enter {
                t: enter * MS,
                fence: None,
                shared: false,
                asked: asked * MS,
            },
            Event::Exit { t: exit * MS },
        ]
    }

    #[test]
    fn the_lock_idle_while_someone_waits_is_measured_and_a_stopped_waiter_does_not_count() {
        // Worker 0 holds from 0 to 10 ms; worker 1 asks at 5 and enters only at 4010 ms.
        let histories = vec![waited(0, 0, 10), waited(5, 4010, 4020)];
        assert_eq!(analyse(&histories, 0, 0).longest_idle_ms, 4000);
        // Stopped from 100 to 3900 ms: it could not have taken the lock meanwhile.
        let mut stopped = waited(5, 4010, 4020);
        stopped.insert(1, Event::Out { t: 100 * MS });
        stopped.insert(2, Event::Back { t: 3900 * MS });
        let histories = vec![waited(0, 0, 10), stopped];
        assert_eq!(analyse(&histories, 0, 0).longest_idle_ms, 110);
        // Nobody waits after the last exit: no idle lock.
        assert_eq!(analyse(&[waited(0, 0, 10)], 0, 0).longest_idle_ms, 0);
    }

    #[test]
    fn a_waiter_passed_over_by_one_that_asked_well_after_is_out_of_turn() {
        let holder = waited(0, 0, 1000);
        // Asked at 10 and at 500 ms: served in that order, then the other way round.
        let in_turn = vec![
            holder.clone(),
            waited(10, 1001, 1010),
            waited(500, 1011, 1020),
        ];
        assert_eq!(analyse(&in_turn, 0, 0).out_of_turn, 0);
        let passed_over = vec![
            holder.clone(),
            waited(10, 1011, 1020),
            waited(500, 1001, 1010),
        ];
        assert_eq!(analyse(&passed_over, 0, 0).out_of_turn, 1);
        // Asked within the margin of each other: their order is not known.
        let close = vec![holder, waited(10, 1011, 1020), waited(60, 1001, 1010)];
        assert_eq!(analyse(&close, 0, 0).out_of_turn, 0);
    }

    #[test]
    fn a_grant_redis_does_not_show_is_counted() {
        let mut unheld = section(0, 1, 2, 3, true);
        unheld.insert(1, Event::Unheld { t: 1 });
        let m = analyse(&[unheld], 1, 0);
        assert_eq!((m.unheld_grants, m.sections), (1, 1));
    }
}
