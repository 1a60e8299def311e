//! Durations on the command line: `500ms`, `30s`, `5m`, `1h`, sums such as `1m30s`,
//! decimals such as `1.5s`, and a bare number of seconds such as `1.5`, as `flock -w` reads.

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
            "bad duration {:?}: {} (examples: 1.5, 500ms, 30s, 5m, 1h, 1m30s)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for DurationError {}

/// The longest duration accepted, in milliseconds: 10 years of 365 days.
const MAX_MS: u128 = 10 * 365 * 24 * 3600 * 1000;

/// Parses a duration: one or more `<number><unit>` parts, units `ms`, `s`, `m`, `h`, `d`, each
/// number whole or with a decimal fraction (`1.5s`); or a single number alone, read as seconds
/// (`30`, `0.25`). Rejects empty input, units after a bare number's sum (`1m30`), durations
/// finer than a millisecond, and totals beyond 10 years.
///
/// # Errors
///
/// A [`DurationError`] saying what is wrong with the input.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// assert_eq!(fencelock_cli::parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(fencelock_cli::parse_duration("1.5"), Ok(Duration::from_millis(1500)));
/// assert!(fencelock_cli::parse_duration("1m30").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    if input.is_empty() {
        return Err(fail("it is empty"));
    }
    let mut total_ms: u128 = 0;
    let mut rest = input;
    let mut first = true;
    while !rest.is_empty() {
        let (number, tail) = split_number(rest).map_err(fail)?;
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" if first && tail.is_empty() => 1000,
            "" => return Err(fail("a number in a sum needs a unit")),
            _ => return Err(fail("unknown unit")),
        };
        let ms = number.millis(per_unit).map_err(fail)?;
        total_ms = total_ms
            .checked_add(ms)
            .filter(|&ms| ms <= MAX_MS)
            .ok_or_else(|| fail("longer than 10 years"))?;
        rest = tail;
        first = false;
    }
    let millis = u64::try_from(total_ms).map_err(|_| fail("longer than 10 years"))?;
    Ok(Duration::from_millis(millis))
}

/// A number as typed: its whole part and its decimal fraction's digits.
struct Number<'a> {
    whole: &'a str,
    fraction: &'a str,
}

/// The number at the start of `text`, and what follows it.
fn split_number(text: &str) -> Result<(Number<'_>, &str), &'static str> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let whole_len = digits(text);
    if whole_len == 0 {
        return Err("expected a number");
    }
    let (whole, tail) = text.split_at(whole_len);
    let Some(after_point) = tail.strip_prefix('.') else {
        return Ok((
            Number {
                whole,
                fraction: "",
            },
            tail,
        ));
    };
    let fraction_len = digits(after_point);
    if fraction_len == 0 {
        return Err("expected digits after the decimal point");
    }
    let (fraction, tail) = after_point.split_at(fraction_len);
    Ok((Number { whole, fraction }, tail))
}

impl Number<'_> {
    /// The number of milliseconds this many units of `per_unit` ms make, when whole.
    fn millis(&self, per_unit: u128) -> Result<u128, &'static str> {
        const TOO_LONG: &str = "longer than 10 years";
        const TOO_FINE: &str = "finer than a millisecond";
        if self.whole.len() > 20 {
            return Err(TOO_LONG);
        }
        let whole: u128 = self.whole.parse().map_err(|_| TOO_LONG)?;
        let ms = whole.checked_mul(per_unit).ok_or(TOO_LONG)?;
        if self.fraction.is_empty() {
            return Ok(ms);
        }
        // More than 9 decimals are refused as finer than a millisecond.
        let decimals = u32::try_from(self.fraction.len())
            .ok()
            .filter(|&d| d <= 9)
            .ok_or(TOO_FINE)?;
        let fraction: u128 = self.fraction.parse().map_err(|_| TOO_FINE)?;
        let scaled = fraction * per_unit;
        let scale = 10u128.pow(decimals);
        if !scaled.is_multiple_of(scale) {
            return Err(TOO_FINE);
        }
        ms.checked_add(scaled / scale).ok_or(TOO_LONG)
    }
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
    fn accepts_bare_seconds_and_decimals() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.001"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.5m"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h0.5m"), Ok(Duration::from_secs(3630)));
        assert_eq!(
            parse_duration("2.50ms"),
            Err(DurationError {
                input: "2.50ms".into(),
                reason: "finer than a millisecond"
            })
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "1m30",
            "30s5",
            "1.",
            ".5",
            "1.5.5s",
            "0.0001",
            "1.0000000001s",
            "s",
            "1x",
            "-1s",
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
