//! `fencedlock plan`: the lesson's lease-sizing trade-off as numbers, before a ttl is chosen.
//!
//! The worst case is a holder that freezes just as a renewal falls due. Holder-side numbers
//! use the client's own view of the lease, `ttl - drift` (the clock-drift allowance the
//! client subtracts from every validity), because that is when `run` gives the lease up;
//! server-side numbers (recovery, the stale window) use the ttl itself, because that is when
//! the server may grant the lock to someone else. All arithmetic is in whole milliseconds,
//! like the server's.

use std::time::Duration;

use fencedlock::{Error, LockConfig};
use serde_json::{json, Value};

use crate::args::PlanArgs;
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;

/// A lease's sizing: everything `plan` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// The lease time.
    pub ttl: Duration,
    /// The renewal interval.
    pub renew_every: Duration,
    /// The client's clock-drift allowance for this ttl.
    pub drift: Duration,
    /// The longest freeze, starting as a renewal falls due, after which the holder still
    /// holds its lease: `ttl - drift - renew_every` (zero if negative).
    pub freeze_absorbed: Duration,
    /// Renewal attempts that fall strictly within one lease's local validity (`k * renew_every
    /// < ttl - drift`, k >= 1).
    pub renewals_per_lease: u64,
    /// Renewals that may fail (or be missed) in a row with the next attempt still inside the
    /// validity: `renewals_per_lease - 1`, zero if none fits.
    pub failed_renewals_tolerated: u64,
    /// After a crash, how long until the lock can be granted again: the crashed holder's
    /// lease must run out, up to a full ttl after its last renewal.
    pub recovery_after_crash: Duration,
    /// The pause checked, if any.
    pub pause: Option<Duration>,
    /// For a pause: how long another owner may hold the lock while the paused holder still
    /// believes it does, `pause - (ttl - renew_every)` (zero if the lease outlives the pause).
    pub stale_window: Option<Duration>,
    /// What makes the choice unsafe or fragile.
    pub warnings: Vec<Warning>,
}

/// A problem with the chosen numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warning {
    /// The renewal interval is not shorter than the lease's local validity: the lease lapses
    /// before it is renewed, even with every renewal succeeding.
    RenewalTooLate,
    /// Only one renewal fits in a lease: a single failed or slow renewal loses it.
    NoFailedRenewalTolerated,
    /// The pause is longer than the freeze the lease absorbs: the lease is lost.
    PauseLosesLease,
    /// The pause outlasts the lease on the server: a stale window opens.
    PauseOpensStaleWindow,
}

impl Warning {
    /// A stable name for `--json`.
    pub fn code(self) -> &'static str {
        match self {
            Warning::RenewalTooLate => "renewal_too_late",
            Warning::NoFailedRenewalTolerated => "no_failed_renewal_tolerated",
            Warning::PauseLosesLease => "pause_loses_lease",
            Warning::PauseOpensStaleWindow => "pause_opens_stale_window",
        }
    }

    fn message(self, s: &Sizing) -> String {
        let f = duration::format;
        match self {
            Warning::RenewalTooLate => format!(
                "unsafe: renewing every {} does not renew a {} lease in time (its validity by the client's clock is {}); the lease lapses between renewals. Renew at ttl/3",
                f(s.renew_every),
                f(s.ttl),
                f(s.ttl.saturating_sub(s.drift))
            ),
            Warning::NoFailedRenewalTolerated => format!(
                "fragile: renewing every {} tolerates no failed renewal; one slow round trip loses the lease. Renew at ttl/3 ({}) or more often",
                f(s.renew_every),
                f(ms(s.ttl.as_millis() / 3))
            ),
            Warning::PauseLosesLease => format!(
                "a {} pause is longer than the {} freeze the lease absorbs: the holder loses its lease",
                f(s.pause.unwrap_or_default()),
                f(s.freeze_absorbed)
            ),
            Warning::PauseOpensStaleWindow => format!(
                "for up to {} another owner may hold the lock while the paused holder still thinks it does: only the resource's fence check stops its writes",
                f(s.stale_window.unwrap_or_default())
            ),
        }
    }
}

fn ms(n: u128) -> Duration {
    Duration::from_millis(u64::try_from(n).unwrap_or(u64::MAX))
}

/// The sizing of a `ttl` lease renewed every `renew_every`, with the client's `drift`
/// allowance, and optionally checked against a `pause`. Callers validate that `ttl` and
/// `renew_every` are positive.
pub fn size(ttl: Duration, renew_every: Duration, drift: Duration, pause: Option<Duration>) -> Sizing {
    let (ttl_ms, every_ms) = (ttl.as_millis(), renew_every.as_millis().max(1));
    let local_ms = ttl_ms.saturating_sub(drift.as_millis());
    // k * every < local for k = 1..=n  <=>  n = floor((local - 1) / every).
    let renewals_per_lease = u64::try_from(local_ms.saturating_sub(1) / every_ms).unwrap_or(u64::MAX);
    let failed_renewals_tolerated = renewals_per_lease.saturating_sub(1);
    let freeze_absorbed = ms(local_ms.saturating_sub(every_ms));
    let server_freeze = ms(ttl_ms.saturating_sub(every_ms));
    let stale_window = pause.map(|p| p.saturating_sub(server_freeze));

    let mut warnings = Vec::new();
    if renewals_per_lease == 0 {
        warnings.push(Warning::RenewalTooLate);
    } else if failed_renewals_tolerated == 0 {
        warnings.push(Warning::NoFailedRenewalTolerated);
    }
    if let Some(p) = pause {
        if p > freeze_absorbed {
            warnings.push(Warning::PauseLosesLease);
        }
    }
    if stale_window.is_some_and(|w| !w.is_zero()) {
        warnings.push(Warning::PauseOpensStaleWindow);
    }
    Sizing {
        ttl,
        renew_every,
        drift,
        freeze_absorbed,
        renewals_per_lease,
        failed_renewals_tolerated,
        recovery_after_crash: ttl,
        pause,
        stale_window,
        warnings,
    }
}

impl Sizing {
    /// `--json`: stable keys, durations in milliseconds.
    pub fn to_json(&self) -> Value {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        json!({
            "ttl_ms": ms(self.ttl),
            "renew_every_ms": ms(self.renew_every),
            "drift_ms": ms(self.drift),
            "freeze_absorbed_ms": ms(self.freeze_absorbed),
            "renewals_per_lease": self.renewals_per_lease,
            "failed_renewals_tolerated": self.failed_renewals_tolerated,
            "recovery_after_crash_ms": ms(self.recovery_after_crash),
            "pause_ms": self.pause.map(ms),
            "stale_window_ms": self.stale_window.map(ms),
            "warnings": self.warnings.iter().map(|w| json!({ "code": w.code(), "message": w.message(self) })).collect::<Vec<_>>(),
        })
    }

    /// The human table, then one line per warning.
    pub fn to_text(&self) -> String {
        let f = duration::format;
        let mut rows = vec![
            ("lease (ttl)", f(self.ttl), String::new()),
            ("renewed every", f(self.renew_every), String::new()),
            (
                "freeze absorbed",
                f(self.freeze_absorbed),
                format!("ttl - renew interval - drift allowance {}", f(self.drift)),
            ),
            (
                "failed renewals tolerated",
                self.failed_renewals_tolerated.to_string(),
                format!("{} renewal(s) fit in one lease", self.renewals_per_lease),
            ),
            (
                "recovery after a crash",
                format!("up to {}", f(self.recovery_after_crash)),
                "the crashed holder's lease must run out; a --wait-ing successor gets it at expiry"
                    .to_string(),
            ),
        ];
        if let (Some(pause), Some(stale)) = (self.pause, self.stale_window) {
            let verdict = if pause <= self.freeze_absorbed {
                "absorbed: the lease is kept".to_string()
            } else if stale.is_zero() {
                "the lease is lost, but the holder wakes before the server lets it go".to_string()
            } else {
                format!("lease lost; stale window {}: only the fence protects the resource", f(stale))
            };
            rows.push(("pause", f(pause), verdict));
        }
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let value_width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        let mut text = String::new();
        for (name, value, note) in rows {
            let line = format!("{name:<width$}  {value:<value_width$}  {note}");
            text.push_str(line.trim_end());
            text.push('\n');
        }
        for w in &self.warnings {
            text.push_str(&format!("warning: {}\n", w.message(self)));
        }
        text.trim_end().to_string()
    }
}

/// `fencedlock plan`.
pub fn run(args: &PlanArgs, out: Output) -> Result<u8, CliError> {
    if args.ttl.is_zero() {
        return Err(CliError::Usage("--ttl must be positive, e.g. --ttl 30s".into()));
    }
    if args.renew_every.is_some_and(|d| d.is_zero()) {
        return Err(CliError::Usage("--renew-every must be positive, e.g. --renew-every 10s".into()));
    }
    // The client's own defaults and limits for this ttl (drift, the ttl/3 renewal, MAX_TTL),
    // so the plan describes what `run` would do.
    let config = LockConfig::builder().ttl(args.ttl).build().map_err(|e| match e {
        Error::Config(msg) => CliError::Usage(format!("{msg}; use e.g. --ttl 30s")),
        other => CliError::Internal(other.to_string()),
    })?;
    let renew_every = args.renew_every.unwrap_or_else(|| config.renew_interval());
    let sizing = size(args.ttl, renew_every, config.drift(), args.pause);
    out.result(&sizing.to_text(), sizing.to_json());
    Ok(code::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    const NO_DRIFT: Duration = Duration::ZERO;

    #[test]
    fn the_lessons_example_a_third_of_the_lease_tolerates_one_failure() {
        let p = size(s(30), s(10), NO_DRIFT, Some(s(45)));
        assert_eq!(p.freeze_absorbed, s(20));
        assert_eq!(p.renewals_per_lease, 2);
        assert_eq!(p.failed_renewals_tolerated, 1);
        assert_eq!(p.recovery_after_crash, s(30));
        assert_eq!(p.stale_window, Some(s(25)));
        assert_eq!(p.warnings, [Warning::PauseLosesLease, Warning::PauseOpensStaleWindow]);
    }

    #[test]
    fn the_drift_allowance_shortens_the_holders_side_only() {
        let drift = Duration::from_millis(302);
        let p = size(s(30), s(10), drift, Some(s(45)));
        assert_eq!(p.freeze_absorbed, Duration::from_millis(19_698));
        assert_eq!(p.failed_renewals_tolerated, 1);
        // The server lets the lease go at the ttl, not earlier.
        assert_eq!(p.stale_window, Some(s(25)));
        assert_eq!(p.recovery_after_crash, s(30));
        // A pause between the two freezes: lost, but no stale window.
        let p = size(s(30), s(10), drift, Some(Duration::from_millis(19_800)));
        assert_eq!(p.stale_window, Some(Duration::ZERO));
        assert_eq!(p.warnings, [Warning::PauseLosesLease]);
    }

    #[test]
    fn failed_renewals_at_the_edges() {
        // Exactly half: the second renewal would fall due at expiry, too late.
        let p = size(s(30), s(15), NO_DRIFT, None);
        assert_eq!((p.renewals_per_lease, p.failed_renewals_tolerated), (1, 0));
        assert_eq!(p.warnings, [Warning::NoFailedRenewalTolerated]);
        // Just under half: two renewals fit.
        let p = size(s(30), Duration::from_millis(14_999), NO_DRIFT, None);
        assert_eq!((p.renewals_per_lease, p.failed_renewals_tolerated), (2, 1));
        assert!(p.warnings.is_empty());
        // Exactly a third: the third renewal lands at expiry, so still one tolerated.
        let p = size(s(30), s(10), NO_DRIFT, None);
        assert_eq!(p.failed_renewals_tolerated, 1);
        let p = size(s(30), Duration::from_millis(9_999), NO_DRIFT, None);
        assert_eq!(p.failed_renewals_tolerated, 2);
        // Renewing at the lease length: the lease lapses first.
        let p = size(s(30), s(30), NO_DRIFT, None);
        assert_eq!((p.renewals_per_lease, p.failed_renewals_tolerated), (0, 0));
        assert_eq!(p.freeze_absorbed, Duration::ZERO);
        assert_eq!(p.warnings, [Warning::RenewalTooLate]);
        let p = size(s(30), s(60), NO_DRIFT, None);
        assert_eq!(p.warnings, [Warning::RenewalTooLate]);
        // With drift, renewing 1 ms inside the ttl is already too late.
        let p = size(s(30), Duration::from_millis(29_999), Duration::from_millis(302), None);
        assert_eq!(p.warnings, [Warning::RenewalTooLate]);
        // A 1 ms lease renewed every 1 ms: nothing fits.
        let p = size(Duration::from_millis(1), Duration::from_millis(1), NO_DRIFT, None);
        assert_eq!(p.renewals_per_lease, 0);
    }

    #[test]
    fn a_pause_within_the_freeze_is_absorbed() {
        let p = size(s(30), s(10), NO_DRIFT, Some(s(20)));
        assert_eq!(p.stale_window, Some(Duration::ZERO));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert!(p.to_text().contains("absorbed: the lease is kept"), "{}", p.to_text());
    }

    #[test]
    fn json_keys_are_stable() {
        let v = size(s(30), s(10), Duration::from_millis(302), Some(s(45))).to_json();
        for (key, expected) in [
            ("ttl_ms", json!(30_000)),
            ("renew_every_ms", json!(10_000)),
            ("drift_ms", json!(302)),
            ("freeze_absorbed_ms", json!(19_698)),
            ("renewals_per_lease", json!(2)),
            ("failed_renewals_tolerated", json!(1)),
            ("recovery_after_crash_ms", json!(30_000)),
            ("pause_ms", json!(45_000)),
            ("stale_window_ms", json!(25_000)),
        ] {
            assert_eq!(v[key], expected, "{key}");
        }
        let codes: Vec<&str> =
            v["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap()).collect();
        assert_eq!(codes, ["pause_loses_lease", "pause_opens_stale_window"]);
        let none = size(s(30), s(10), NO_DRIFT, None).to_json();
        assert_eq!((none["pause_ms"].clone(), none["stale_window_ms"].clone()), (Value::Null, Value::Null));
    }
}
