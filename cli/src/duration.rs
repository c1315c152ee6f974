//! Human durations on the command line (`500ms`, `30s`, `5m`, `1h`, `1d`, `1m30s`), so an
//! operator never has to guess whether a bare number means seconds or milliseconds.

use std::time::Duration;

/// Parses `500ms`, `30s`, `1.5s`, `5m`, `1h`, `1d`, `1m30s`, or `0`. A bare number other than
/// `0` is refused: it is the classic source of "30 ms instead of 30 s" mistakes.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let usage =
        || format!("invalid duration {text:?}: use a number with a unit, e.g. 500ms, 30s, 5m, 1h or 1d");
    if s.is_empty() {
        return Err(usage());
    }
    if s.chars().all(|c| c == '0') {
        return Ok(Duration::ZERO);
    }
    if s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "invalid duration {text:?}: it has no unit, and tools disagree on what a bare number \
             means (flock -w and etcdctl --ttl count seconds, others milliseconds); write {s}s \
             or {s}ms (units: ms, s, m, h, d)"
        ));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(usage)?;
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| usage())?;
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(usage()),
        };
        let part = Duration::try_from_secs_f64(value * scale).map_err(|_| usage())?;
        total = total.checked_add(part).ok_or_else(usage)?;
        rest = tail;
    }
    // Whole milliseconds: the server counts in ms, and 1.0001s would be silently truncated.
    if total.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("invalid duration {text:?}: use whole milliseconds"));
    }
    Ok(total)
}

/// [`parse`] for a lease time, which must be at least 1 ms: a zero ttl would be a lease that
/// has expired before it is granted, and saying so beats the client's "got 0ns".
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse(text)?;
    if ttl.is_zero() {
        return Err(format!(
            "invalid duration {text:?}: a lease of 0 expires as it is granted; give it at least 1ms"
        ));
    }
    Ok(ttl)
}

/// [`parse`] for a timeout or an interval, which must be positive: a request timeout of 0
/// would fail every request, and the error would blame something else.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse(text)?;
    if timeout.is_zero() {
        return Err(format!("invalid duration {text:?}: it must be positive, e.g. 250ms or 1s"));
    }
    Ok(timeout)
}

/// A short human rendering: `500ms`, `30s`, `1.5s`, `5m`, `1h`, `2m5s`.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms % 1000 != 0 {
        return format!("{}s", d.as_secs_f64());
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// [`format`] of an elapsed or remaining time, measured to the millisecond but read by a
/// person: whole seconds from a minute up (`59m50s`, not `3590.141s`).
pub fn format_approx(d: Duration) -> String {
    if d < Duration::from_secs(60) {
        return format(d);
    }
    format(Duration::from_secs(d.as_secs_f64().round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_times_are_shown_in_whole_seconds() {
        assert_eq!(format_approx(Duration::from_millis(3_590_141)), "59m50s");
        assert_eq!(format_approx(Duration::from_millis(1_049)), "1.049s");
        assert_eq!(format_approx(Duration::from_millis(59_999)), "59.999s");
        assert_eq!(format_approx(Duration::from_millis(60_600)), "1m1s");
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("500ms").unwrap(), 500 * MS);
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("1.5s").unwrap(), 1500 * MS);
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse("1d12h").unwrap(), Duration::from_secs(129_600));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse(" 10s ").unwrap(), Duration::from_secs(10));
    }

    #[test]
    fn refuses_what_would_be_guessed() {
        for bad in ["", "30", "1.5", "30x", "s", "ms", "-1s", "1w", "30 s", "1..5s", "0.0001s", "1e3s"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad:?}: {err}");
        }
        assert!(parse("30").unwrap_err().contains("30s"));
        assert!(parse("30").unwrap_err().contains("seconds"), "says why a unit is needed");
    }

    #[test]
    fn a_zero_ttl_says_what_it_would_mean() {
        for zero in ["0", "0s", "0ms"] {
            let err = parse_ttl(zero).unwrap_err();
            assert!(err.contains("at least 1ms") && !err.contains("0ns"), "{zero:?}: {err}");
        }
        assert_eq!(parse_ttl("1ms").unwrap(), MS);
    }

    #[test]
    fn formats_round_trip() {
        for text in ["500ms", "30s", "1.5s", "5m", "1h", "2m5s", "1h1m1s"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
        assert_eq!(format(Duration::ZERO), "0s");
    }
}
