//! `options`: the settings a program passes to a client and to its locks.
//!
//! Input: one setting a line, applied in order to `ClientOptions::default()`:
//! `prefix TEXT`, `holder_label TEXT`, `default_lease fixed|renewed D`, `wake_fallback D`,
//! `response_timeout D`, `connection_timeout D`, `node_timeout D`, `outage_limit D`,
//! `fence_memory D`, `renew_batch N`, `clock_drift FACTOR D`, `wait_for_replicas N D`; and for
//! a lock, `lease fixed|renewed D` and `permits N`. `D` is `<seconds>[.<nanoseconds>]` or `max`.
//! Lines that do not read as one of these are skipped.

use std::collections::BTreeMap;
use std::time::Duration;

use fencelock::fuzzing::{check_permits, drift_margin, lease_millis};
use fencelock::{ClientOptions, Error, Lease, MAX_LEASE, MIN_LEASE};

use crate::text;

/// Applies the settings and checks them as a client does: a value the documentation refuses
/// is refused, what is accepted can be computed with, and a lock's lease and permits are
/// checked as a handle checks them.
pub fn options(input: &[u8]) {
    let text = String::from_utf8_lossy(input);
    let mut options = ClientOptions::default();
    // Whether the value each setting has now is one the documentation refuses.
    let mut refused = BTreeMap::new();
    let mut leases = Vec::new();
    for line in text.lines() {
        let (setting, value) = line.split_once(' ').unwrap_or((line, ""));
        match setting {
            "lease" => leases.extend(lease(value)),
            "permits" => {
                if let Ok(permits) = value.parse::<u32>() {
                    assert_eq!(check_permits(permits).is_ok(), permits > 0);
                }
            }
            _ => {
                if let Some((set, documented_refusal)) = client_setting(options.clone(), line) {
                    options = set;
                    refused.insert(setting, documented_refusal);
                }
            }
        }
    }
    match options.validate() {
        Ok(()) => assert!(
            !refused.values().any(|&r| r),
            "accepted what is documented as refused: {refused:?} {options:?}"
        ),
        Err(e) => assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}"),
    }
    for lease in leases {
        let Ok(millis) = lease_millis(lease) else {
            continue;
        };
        let length = lease.duration();
        assert_eq!(u128::from(millis), length.as_nanos().div_ceil(1_000_000));
        if options.validate().is_ok() {
            let _margin = drift_margin(&options, length);
        }
    }
}

/// A lease: `fixed|renewed D`, checked against its documented range.
fn lease(value: &str) -> Option<Lease> {
    let (kind, length) = value.split_once(' ')?;
    let length = text::duration(length)?;
    let lease = match kind {
        "fixed" => Lease::Fixed(length),
        "renewed" => Lease::Renewed(length),
        _ => return None,
    };
    let in_range = (MIN_LEASE..=MAX_LEASE).contains(&length);
    assert_eq!(lease_millis(lease).is_ok(), in_range, "{lease:?}");
    Some(lease)
}

/// The options with the setting of `line`, and whether the documentation says the value is
/// refused; `None` when the line is not a setting.
fn client_setting(options: ClientOptions, line: &str) -> Option<(ClientOptions, bool)> {
    let mut words = line.split(' ');
    let setting = words.next()?;
    let first = words.next().unwrap_or_default();
    let second = words.next().unwrap_or_default();
    let text_value = line.split_once(' ').map_or("", |(_, v)| v);
    let timeout = |set: fn(ClientOptions, Duration) -> ClientOptions| {
        let d = text::duration(first)?;
        Some((set(options.clone(), d), d.is_zero() || d > MAX_LEASE))
    };
    match setting {
        "prefix" => Some((
            options.clone().prefix(text_value),
            text_value.contains(['{', '}']) || text_value.len() > 256,
        )),
        "holder_label" => Some((
            options.clone().holder_label(text_value),
            text_value.contains(':') || text_value.len() > 128,
        )),
        "default_lease" => {
            let lease = lease(text_value)?;
            let length = lease.duration();
            let outside = !(MIN_LEASE..=MAX_LEASE).contains(&length);
            Some((options.clone().default_lease(lease), outside))
        }
        "wake_fallback" => timeout(ClientOptions::wake_fallback),
        "response_timeout" => timeout(ClientOptions::response_timeout),
        "connection_timeout" => timeout(ClientOptions::connection_timeout),
        "node_timeout" => timeout(ClientOptions::node_timeout),
        "outage_limit" => {
            let d = text::duration(first)?;
            Some((options.clone().outage_limit(d), false))
        }
        "fence_memory" => {
            let d = text::duration(first)?;
            Some((options.clone().fence_memory(d), d > MAX_LEASE))
        }
        "renew_batch" => {
            let n: usize = first.parse().ok()?;
            Some((options.clone().renew_batch(n), n == 0))
        }
        "clock_drift" => {
            let factor: f64 = first.parse().ok()?;
            let extra = text::duration(second)?;
            let outside = !(0.0..0.5).contains(&factor) || extra > MAX_LEASE;
            Some((options.clone().clock_drift(factor, extra), outside))
        }
        "wait_for_replicas" => {
            let replicas: usize = first.parse().ok()?;
            let timeout = text::duration(second)?;
            let refused = replicas == 0 || timeout < Duration::from_millis(1);
            Some((
                options.clone().wait_for_replicas(replicas, timeout),
                refused,
            ))
        }
        _ => None,
    }
}
