//! A model of the Mutex's and the FairMutex's handoff by offer and claim, checked
//! exhaustively for small sizes.
//!
//! # What it models
//!
//! One lock name on one Redis deployment (a master and a caught-up replica), and up to three
//! client processes with one waiting task each, every one calling `lock()` a few times.
//!
//! - **Redis** runs one script at a time, atomically ([`scripts`]): `kinds/mutex/acquire.lua`,
//!   `release.lua`, `extend.lua` (the keeper's `core/renew_batch.lua` renews the same values
//!   alike) and `value.lua`'s forms of a value (an offer marked `+?` until claimed),
//!   `hand_over` and `places_line`; `kinds/fair/acquire.lua`, `release.lua` and `line.lua`.
//!   Each function follows its file, so that a reader can hold one against the other.
//! - **A client** ([`step`]) follows `core/acquire.rs` (`wait_for_grant`, `Attempt::send`),
//!   `core/nodes.rs` (a grant answered after `valid_until(send)` is a late grant, given back in
//!   the background, the attempt going on with a new token), `core/notify.rs` (a message is a
//!   wake-up, never proof: its own token wakes it now, `<token>?<ms>` within `ms`; the
//!   registration keeps its old token until the next refusal retargets it), the guard's
//!   release and the keeper's renewal. Its requests go out in order on its connection; those
//!   of its background tasks (renewals, give-backs) may pass them.
//! - **The environment**: time passes by ticks (expiries of values and places, timers,
//!   validity); requests and replies wait on the wire; messages are delayed (a FIFO per
//!   connection), duplicated, or lost with a dropped pub/sub connection (the client then
//!   reconnects and retries); a client's connection may sit on the replica, which relays
//!   what the master publishes while the master does not count it; the master fails over
//!   (commands go to the new master, pub/sub connections stay on the demoted node); a reply
//!   comes past the client's validity; a resend runs a request twice; a client crashes (its
//!   connection maybe still counted, half-open), pauses and resumes, or gives up its wait; a
//!   pattern subscription makes every PUBLISH count one; a holder renews.
//!
//! Times are relative (ticks left, ticks since), so the state space is finite. A run is
//! either *untimed* (any delay anywhere: a retry may come at any time, so message contents
//! cannot matter to the fixed protocol's safety) or *timely* (every running client reads its
//! messages and replies, fires its due timer and has its requests run before time passes;
//! only the listed faults delay it), which is what the bounds on latency and order need.
//!
//! # Invariants ([`invariants`])
//!
//! - (a) [`Invariant::BackedHolder`]: never two clients that believe they hold with validity
//!   left, and one that does is backed by the master's value: its token, an expiry no earlier
//!   than its validity.
//! - (b) [`Invariant::OfferWithinWindow`]: an offer nobody claimed holds the lock for fewer
//!   than `window` ticks. [`Invariant::StandbyServed`]: in a timely run, the waiter a handoff
//!   told `<token>?<ms>` (first in line behind the one offered), while it can act on it, sees
//!   the lock held again, by itself or anyone, no more than `window` ticks after the handoff:
//!   the ticks of the window, then its retry, run and reply within the same tick.
//! - (c) [`Invariant::FairOrder`]: a FairMutex never serves (offers or grants the lock to) a
//!   waiter while a live waiter that arrived before it keeps its turn. A waiter's turn is
//!   kept in a ghost line: it joins at the back when refused without a place, keeps its turn
//!   while its place lasts, and leaves it when served (so one that fails to claim within the
//!   window has lost it, by design), when its place ends, or when it gives up.
//!
//! # Bounds
//!
//! Lease 3 ticks, window 1, fallback 2, place 3 ([`config::Times::SMALL`]): the window shorter
//! than the fallback, so that the standby message matters, and the fallback shorter than a
//! place, so that a waiter retrying in time keeps its place. Each run bounds the clients (2
//! or 3), their rounds (1 or 2) and a budget per fault (each test names its runs). The search
//! is breadth first over 64-bit fingerprints of states ([`check`]), so that a finding comes
//! with its shortest trace.
//!
//! # Broken variants ([`config::Variant`])
//!
//! `TrustAnnouncedGrant` (the old handoff: a release grants the whole lease and announces
//! `<token><fence>`, which the waiter takes as its grant, its validity counted from its last
//! refusal) breaks (a); `GrantForLease` (an offer written for the whole lease) breaks (b) when
//! the waiter offered is paused, crashed or only counted by a pattern subscription;
//! `FairSkipsUnheard` (the fair line skips a waiter whose client heard nothing) breaks (c);
//! `RenewOffers` and `FairKeepsEndedTurn` (the scripts before the two fixes below) break (b)
//! and (c). The tests show the checker finds each, with the trace, in a run the fixed
//! protocol passes.
//!
//! # What the model found in the scripts
//!
//! Two runs broke an invariant with the scripts as they were; the scripts were changed, and
//! each run is now a test the scripts pass and a broken variant fails:
//!
//! - (b) A resend of a first acquire (`refused_before` 0) whose first run was refused leaves
//!   the token's place behind when the resend is granted. After that holder's release (its
//!   value unmarked: no hand-over, so the place stays), a release of another token on the
//!   free lock offers the lock to that stale place, and the holder's renewal, sent before its
//!   release but run after it, lengthened the offer to a whole lease: `extend.lua` and
//!   `renew_batch.lua` renewed any value that starts with the token. An offer is now marked
//!   `+?` (`value.lua`) until its waiter's own acquire claims it (`SET` of the value without
//!   the `?`, for its lease), and neither script renews it (`RenewOffers` does). The stale
//!   place may still be offered the lock: that costs the window, as any waiter that cannot
//!   claim does.
//! - (c) A FairMutex waiter whose place ended while its entry was still in line kept its
//!   turn: `fair/acquire.lua` granted it a free lock it found itself first in line for
//!   (`take()` stopped at the caller's own member, ended or not), and a refusal's `ZADD` left
//!   an entry still there where it was. Now `take()` drops the caller's own ended entry like
//!   any other, and a refusal whose place had ended (`ZSCORE`) takes the entry out of the line
//!   and joins at the back (`FairKeepsEndedTurn` keeps the old way).
//!
//! # Replayed on the scripts themselves ([`replay`])
//!
//! The functions of [`scripts`] are a reading of the Lua, and a reading can be wrong. A test
//! takes traces of the fixed protocol (seeded random walks, and the shortest traces to the
//! steps worth seeing) and replays each on a real master and replica: every script a step runs
//! is run by the library's own `Lua`, and the server's answer, value, places, line and
//! messages are held against the model's after every step, the model's ticks mapped to long
//! lengths of server time that pass only when the model's do.
//!
//! # Running it
//!
//! `cargo test -p fencelock --lib kinds::handoff_model` runs every check in a debug build and
//! prints, for each run, the states explored and the depth; a finding prints its trace, one
//! line per step (the script a step runs named by its file), with the lock's value, the line
//! and every client after it. The replay starts its own `redis-server`s and prints how many
//! traces, steps and script runs it replayed, and what they covered.

mod check;
mod config;
mod invariants;
mod replay;
mod scripts;
mod state;
mod step;

use check::{explore, show, Found};
use config::{Config, Faults, Lock, Variant};
use invariants::Invariant;

/// The most states one run of the suite explores before it counts as too wide.
const LIMIT: usize = 2_000_000;

/// Explores `config` for `invariants`, printing the states explored and the depth, and the
/// finding's trace if there is one.
fn run(name: &str, config: Config, invariants: &[Invariant], limit: usize) -> Option<Found> {
    let started = std::time::Instant::now();
    let report = explore(&config, invariants, limit);
    println!(
        "{name}: {} states, depth {}, {:.1?}",
        report.states,
        report.depth,
        started.elapsed()
    );
    match report.found {
        Some(found) => {
            println!(
                "{name}: {:?} broken: {}\n{}",
                found.invariant,
                found.why,
                show(&found.trace, &config)
            );
            Some(found)
        }
        None => {
            assert!(report.complete, "{name}: more than {limit} states");
            None
        }
    }
}

/// Asserts the fixed protocol keeps `invariants` in every state of `config`.
fn holds(name: &str, config: Config, invariants: &[Invariant]) {
    assert_eq!(config.variant, Variant::Fixed);
    if let Some(found) = run(name, config, invariants, LIMIT) {
        panic!("{name}: {:?} broken: {}", found.invariant, found.why);
    }
}

/// Asserts the checker finds `config` breaks `expected`.
fn breaks(name: &str, config: Config, expected: Invariant) -> Found {
    let found = run(name, config, &Invariant::ALL, LIMIT)
        .unwrap_or_else(|| panic!("{name}: nothing found"));
    assert_eq!(found.invariant, expected, "{name}: {}", found.why);
    found
}

fn faults() -> Faults {
    Faults::default()
}

/// Untimed runs: any delay anywhere, late replies, resends, renewals and give-ups.
#[test]
fn the_fixed_protocol_never_has_two_holders() {
    let safety = [Invariant::BackedHolder];
    holds("mutex, 3 clients", Config::new(Lock::Mutex, 3, 1), &safety);
    holds("fair, 3 clients", Config::new(Lock::Fair, 3, 1), &safety);
    // Each with a late reply and a renewal, and a resend or a give-up: both at once take
    // three times as long and add no path the two runs miss.
    for (with, fault) in [
        (
            "resend",
            Faults {
                resend: 1,
                ..faults()
            },
        ),
        (
            "cancel",
            Faults {
                cancel: 1,
                ..faults()
            },
        ),
    ] {
        let client_faults = Faults {
            late: 1,
            renew: 1,
            ..fault
        };
        for lock in [Lock::Mutex, Lock::Fair] {
            holds(
                &format!("{lock:?}, 2 clients, late, renew, {with}"),
                Config::new(lock, 2, 1).faults(client_faults),
                &safety,
            );
        }
    }
    let relayed = Faults {
        failover: 1,
        late: 1,
        ..faults()
    };
    holds(
        "mutex, 2 clients, one on the replica, failover, late",
        Config::new(Lock::Mutex, 2, 1).on_replica(0).faults(relayed),
        &safety,
    );
}

/// Timely runs, each with the faults that keep a waiter from claiming or hearing.
#[test]
fn the_fixed_protocol_hands_over_within_the_window_and_in_order() {
    for (name, config) in timely_runs() {
        holds(name, config, &Invariant::ALL);
    }
}

/// The timely runs the fixed protocol passes and the broken variants of (b) and (c) fail.
fn timely_runs() -> [(&'static str, Config); 4] {
    let paused = Faults {
        freeze: 1,
        ..faults()
    };
    let crashed = Faults {
        crash: 1,
        ..faults()
    };
    let dropped = Faults {
        drop: 1,
        failover: 1,
        ..faults()
    };
    [
        (
            "mutex, 3 clients, timely, a pause",
            Config::new(Lock::Mutex, 3, 1).timely().faults(paused),
        ),
        (
            "mutex, 3 clients, timely, a crash (maybe half-open)",
            Config::new(Lock::Mutex, 3, 1).timely().faults(crashed),
        ),
        (
            "mutex, 3 clients, timely, a tap, a crash",
            Config::new(Lock::Mutex, 3, 1)
                .timely()
                .tap()
                .faults(crashed),
        ),
        (
            "fair, 3 clients, timely, a dropped connection, a failover",
            Config::new(Lock::Fair, 3, 1).timely().faults(dropped),
        ),
    ]
}

/// The run that found a renewal lengthening an offer to a stale place: a resend of a first
/// acquire refused leaves the token's place behind when the resend is granted; another
/// token's release on the free lock offers the lock to that place, and the holder's renewal,
/// sent before its own release but run after it, meets the offer.
fn renewal_after_release() -> (&'static str, Config) {
    let config = Config::new(Lock::Mutex, 2, 1).faults(Faults {
        resend: 1,
        renew: 1,
        ..faults()
    });
    ("mutex, 2 clients, resend, renew", config)
}

#[test]
fn a_renewal_run_after_its_release_leaves_an_offer_to_a_stale_place_its_window() {
    let (name, config) = renewal_after_release();
    holds(name, config, &Invariant::ALL);
}

#[test]
fn renewing_offers_stretches_one_to_a_stale_place() {
    let (name, config) = renewal_after_release();
    let found = breaks(
        name,
        config.variant(Variant::RenewOffers),
        Invariant::OfferWithinWindow,
    );
    let renewed_last = found
        .trace
        .iter()
        .rev()
        .find_map(|step| step.effects.run)
        .map(|run| run.script);
    assert_eq!(renewed_last, Some(scripts::Script::Extend));
}

/// The run that found a FairMutex waiter keeping its turn after its place ended: paused for
/// longer than a place, it comes back to a free lock with its entry first in line.
fn paused_past_a_place() -> (&'static str, Config) {
    let config = Config::new(Lock::Fair, 3, 1).timely().faults(Faults {
        freeze: 1,
        ..faults()
    });
    ("fair, 3 clients, timely, a pause", config)
}

#[test]
fn a_fair_waiter_whose_place_ended_loses_its_turn() {
    let (name, config) = paused_past_a_place();
    holds(name, config, &Invariant::ALL);
}

#[test]
fn a_fair_line_that_keeps_an_ended_turn_passes_a_live_waiter() {
    let (name, config) = paused_past_a_place();
    breaks(
        name,
        config.variant(Variant::FairKeepsEndedTurn),
        Invariant::FairOrder,
    );
}

#[test]
fn trusting_an_announced_grant_makes_two_holders() {
    let trust = Variant::TrustAnnouncedGrant;
    let relayed = Config::new(Lock::Mutex, 2, 1).on_replica(0).variant(trust);
    breaks("relayed by a replica", relayed, Invariant::BackedHolder);
    let stale = Config::new(Lock::Mutex, 2, 1)
        .variant(trust)
        .faults(Faults {
            late: 1,
            ..faults()
        });
    breaks("a stale announcement", stale, Invariant::BackedHolder);
}

#[test]
fn an_offer_for_the_whole_lease_idles_the_lock() {
    for (name, config) in timely_runs().into_iter().take(3) {
        let found = run(
            name,
            config.variant(Variant::GrantForLease),
            &Invariant::ALL,
            LIMIT,
        )
        .unwrap_or_else(|| panic!("{name}: nothing found"));
        assert!(
            matches!(
                found.invariant,
                Invariant::OfferWithinWindow | Invariant::StandbyServed
            ),
            "{name}: {}",
            found.why
        );
    }
}

#[test]
fn a_fair_line_that_skips_the_unheard_passes_a_waiter() {
    let [.., (name, config)] = timely_runs();
    breaks(
        name,
        config.variant(Variant::FairSkipsUnheard),
        Invariant::FairOrder,
    );
}
