//! Durations on the command line: `500ms`, `30s`, `5m`, `1h`, and sums such as `1m30s`.

use std::fmt;
use std::time::Duration;

/// Why a duration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad duration {:?}: {} (examples: 500ms, 30s, 5m, 1h, 1m30s)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration: one or more `<whole number><unit>` parts, units `ms`, `s`, `m`, `h`,
/// `d`. Rejects empty input, missing units, and totals beyond 10 years.
///
/// # Errors
///
/// A [`DurationError`] saying what is wrong with the input.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(relock_cli::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(relock_cli::parse_duration("30").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    const MAX_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
    if input.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total_ms: u128 = 0;
    let mut rest = input;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(fail("expected a whole number"));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(fail("a number needs a unit")),
            _ => return Err(fail("unknown unit")),
        };
        let value: u128 = number.parse().map_err(|_| fail("number too large"))?;
        total_ms = value
            .checked_mul(per_unit)
            .and_then(|ms| total_ms.checked_add(ms))
            .filter(|&ms| ms <= MAX_MS)
            .ok_or_else(|| fail("longer than 10 years"))?;
        rest = tail;
    }
    let millis = u64::try_from(total_ms).map_err(|_| fail("longer than 10 years"))?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_units_and_sums() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(
            parse_duration("1h1m1s1ms"),
            Ok(Duration::from_millis(3_661_001))
        );
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "30",
            "s",
            "1x",
            "-1s",
            "1.5s",
            " 1s",
            "1s ",
            "99999999999999999999999s",
            "3651d",
            "1h-",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
