//! Reading the text formats of the inputs.

use std::time::Duration;

/// `input` split at its first newline: the first line, and the rest.
pub(crate) fn first_line(input: &[u8]) -> (&[u8], &[u8]) {
    match input.iter().position(|&b| b == b'\n') {
        Some(end) => (&input[..end], &input[end + 1..]),
        None => (input, &[]),
    }
}

/// A duration written `<seconds>[.<nanoseconds>]` (whole numbers), or `max` for
/// `Duration::MAX`; `None` for anything else.
pub(crate) fn duration(word: &str) -> Option<Duration> {
    if word == "max" {
        return Some(Duration::MAX);
    }
    let (secs, nanos) = word.split_once('.').unwrap_or((word, "0"));
    let nanos: u32 = nanos.parse().ok().filter(|&n| n < 1_000_000_000)?;
    Some(Duration::new(secs.parse().ok()?, nanos))
}
