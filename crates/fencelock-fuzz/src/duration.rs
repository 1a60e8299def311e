//! `duration`: what `fencelock run --lease/--wait/--kill-grace` read. Input: the text typed.

use std::time::Duration;

use fencelock_cli::parse_duration;

/// The longest duration `parse_duration` accepts, as it documents: 10 years of 365 days.
pub(crate) const LONGEST: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Parses the input; a duration read is at most 10 years, whole milliseconds, reads back
/// the same from its milliseconds, and written twice adds up to twice as long when it ends
/// with a unit (a bare number of seconds cannot be summed).
pub fn duration(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let parsed = match parse_duration(text) {
        Ok(parsed) => parsed,
        Err(refused) => {
            assert!(refused.to_string().starts_with("bad duration"), "{refused}");
            return;
        }
    };
    assert!(parsed <= LONGEST, "{text:?} read as {parsed:?}");
    assert_eq!(parsed.subsec_nanos() % 1_000_000, 0, "{text:?}");
    let millis = format!("{}ms", parsed.as_millis());
    assert_eq!(parse_duration(&millis), Ok(parsed), "{text:?} as {millis}");
    if text.ends_with(|c: char| c.is_ascii_digit()) {
        return;
    }
    let twice = parse_duration(&text.repeat(2));
    match parsed.checked_mul(2).filter(|&d| d <= LONGEST) {
        Some(sum) => assert_eq!(twice, Ok(sum), "{text:?} twice"),
        None => assert!(twice.is_err(), "{text:?} twice is over 10 years"),
    }
}
