//! The client's metrics, reported through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! Every name is defined here, once, as a public constant, so an application can find them
//! (to describe them to its exporter, build dashboards, or filter them). Nothing is recorded
//! anywhere until the application installs a recorder (`metrics-exporter-prometheus`, a
//! `metrics-util` layer, ...); without one every call is the facade's no-op.
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | [`ACQUIRE_SECONDS`] | histogram, label [`OUTCOME`] | duration of each acquisition call |
//! | [`WAIT_SECONDS`] | histogram | how long acquisitions that may wait took to be granted or to give up |
//! | [`CONTENDED_TOTAL`] | counter | attempts that found the lock held by another owner |
//! | [`UNAVAILABLE_TOTAL`] | counter | attempts the lock service could not answer |
//! | [`RENEWALS_TOTAL`] | counter | successful renewals |
//! | [`RENEWAL_FAILURES_TOTAL`] | counter | failed renewals |
//! | [`LEASES_LOST_TOTAL`] | counter | leases lost while held (a renewal refused or failed, validity ran out, gone at release) |
//! | [`HOLD_SECONDS`] | histogram | time from grant to release |
//! | [`HOLD_RATIO`] | histogram | hold time divided by the ttl, at release |
//! | [`FENCE_REFUSALS_TOTAL`] | counter | stale fences the application's resource refused ([`record_fence_refusal`]) |
//!
//! **No per-key labels.** Lock keys are often built from ids (`invoice:42`), and a label per
//! key would give the recorder one time series per id, without bound. An application that
//! needs a key's numbers wraps the calls for the few keys it cares about.
//!
//! Events (a lease lost, an acquisition that failed open, a release that failed) are logged
//! with `tracing` as well: the numbers aggregate across processes and over time, the events
//! say which key, which fence and why.
//!
//! A build without the `metrics` feature keeps the names and records nothing.

use std::time::{Duration, Instant};

#[cfg(feature = "metrics")]
use metrics::{counter, histogram};

use crate::error::Error;

/// Without the `metrics` feature the recording calls below compile to nothing.
#[cfg(not(feature = "metrics"))]
mod off {
    /// The counter or histogram of a build without metrics: it records nothing.
    pub(super) struct Off;

    impl Off {
        pub(super) fn increment(&self, _: u64) {}
        pub(super) fn record(&self, _: f64) {}
    }

    /// The facade's macros' shape: a name, then `label => value` pairs (evaluated, so the
    /// code reads the same with and without the feature, and dropped).
    macro_rules! counter {
        ($name:expr $(, $label:expr => $value:expr)*) => {{
            let _ = ($name $(, $label, $value)*);
            off::Off
        }};
    }
    macro_rules! histogram {
        ($name:expr $(, $label:expr => $value:expr)*) => {{
            let _ = ($name $(, $label, $value)*);
            off::Off
        }};
    }
    pub(super) use {counter, histogram};
}
#[cfg(not(feature = "metrics"))]
use off::{counter, histogram};

/// Histogram, seconds: how long each acquisition call took (`try_acquire`, `acquire`,
/// `with_lease`, `acquire_with_policy`), labelled with its [`OUTCOME`].
pub const ACQUIRE_SECONDS: &str = "fencedlock_acquire_seconds";
/// Histogram, seconds: for acquisitions that may wait (`acquire`, `with_lease`,
/// `acquire_with_policy`) and that were granted or gave up busy, the time from the call until
/// then. About one round trip for a free lock: the server does not say whether a request
/// queued, so the distribution (not a count) shows how long callers wait for busy locks.
pub const WAIT_SECONDS: &str = "fencedlock_wait_seconds";
/// Counter: acquisition attempts that found the lock held by another owner (a refused
/// `try_acquire`, each refused polling round, a wait that ran out, a Redlock round that failed
/// with a refusal).
pub const CONTENDED_TOTAL: &str = "fencedlock_contended_total";
/// Counter: acquisition attempts the lock service could not answer
/// ([`Error::is_unavailable`]), one per round, so retries within `max_wait` count each.
pub const UNAVAILABLE_TOTAL: &str = "fencedlock_unavailable_total";
/// Counter: renewals that extended a lease (by [`Lease::renew`](crate::Lease::renew) or the
/// keep-alive).
pub const RENEWALS_TOTAL: &str = "fencedlock_renewals_total";
/// Counter: renewals that did not (refused, timed out, failed, or still in flight when the
/// validity ran out).
pub const RENEWAL_FAILURES_TOTAL: &str = "fencedlock_renewal_failures_total";
/// Counter: leases lost while held, each counted once: a renewal refused or failed under the
/// keep-alive, the validity found run out ([`Lease::ensure_valid`](crate::Lease::ensure_valid)),
/// or the lease already gone when it was released.
pub const LEASES_LOST_TOTAL: &str = "fencedlock_leases_lost_total";
/// Histogram, seconds: time from the grant to the release of a lease (explicit, or the
/// background release of a dropped lease; a detached lease is not counted).
pub const HOLD_SECONDS: &str = "fencedlock_hold_seconds";
/// Histogram, ratio: [`HOLD_SECONDS`] divided by the ttl. Near or above 1 the critical section
/// runs as long as the lease: renew (keep-alive) or take a longer lease.
pub const HOLD_RATIO: &str = "fencedlock_hold_ratio";
/// Counter: writes the application's resource refused for carrying a stale fence, reported by
/// the application with [`record_fence_refusal`]. Each is a stale owner caught: not a bug to
/// silence, the measure of how often pauses outlive leases.
pub const FENCE_REFUSALS_TOTAL: &str = "fencedlock_fence_refusals_total";

/// The label of [`ACQUIRE_SECONDS`]: one of [`LOCKED`], [`CONTENDED`], [`UNAVAILABLE`],
/// [`UNLOCKED`], [`FAILED`].
pub const OUTCOME: &str = "outcome";
/// [`OUTCOME`]: a lease was granted.
pub const LOCKED: &str = "locked";
/// [`OUTCOME`]: another owner held the lock (after waiting, for calls that wait).
pub const CONTENDED: &str = "contended";
/// [`OUTCOME`]: the lock service could not answer and the call returned the error (fail closed).
pub const UNAVAILABLE: &str = "unavailable";
/// [`OUTCOME`]: the lock service could not answer and the policy let the work run unlocked
/// ([`OnUnavailable::FailOpen`](crate::OnUnavailable::FailOpen)).
pub const UNLOCKED: &str = "unlocked";
/// [`OUTCOME`]: any other error (configuration, a reply that breaks the contract, a final
/// server error such as `WRONGTYPE` or `NOPERM`).
pub const FAILED: &str = "failed";

/// Every metric name, for applications that describe or filter them all.
pub const ALL: [&str; 10] = [
    ACQUIRE_SECONDS,
    WAIT_SECONDS,
    CONTENDED_TOTAL,
    UNAVAILABLE_TOTAL,
    RENEWALS_TOTAL,
    RENEWAL_FAILURES_TOTAL,
    LEASES_LOST_TOTAL,
    HOLD_SECONDS,
    HOLD_RATIO,
    FENCE_REFUSALS_TOTAL,
];

/// Reports that the application's resource refused a write for carrying a stale fence
/// (counted in [`FENCE_REFUSALS_TOTAL`]), so the lesson's most telling number shows next to
/// the lock's own. Call it where the conditional write (`… WHERE last_fence <= :fence`)
/// matched no row.
pub fn record_fence_refusal() {
    counter!(FENCE_REFUSALS_TOTAL).increment(1);
}

/// Describes every metric (unit and help text) to the installed recorder; exporters show
/// the text. Optional: the metrics are recorded either way.
pub fn describe() {
    #[cfg(feature = "metrics")]
    describe_all();
}

#[cfg(feature = "metrics")]
fn describe_all() {
    use metrics::Unit;
    metrics::describe_histogram!(ACQUIRE_SECONDS, Unit::Seconds, "Duration of acquisition calls, by outcome");
    metrics::describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time waiting acquisitions took to be granted or give up"
    );
    metrics::describe_counter!(
        CONTENDED_TOTAL,
        "Acquisition attempts that found the lock held by another owner"
    );
    metrics::describe_counter!(UNAVAILABLE_TOTAL, "Acquisition attempts the lock service could not answer");
    metrics::describe_counter!(RENEWALS_TOTAL, "Renewals that extended a lease");
    metrics::describe_counter!(RENEWAL_FAILURES_TOTAL, "Renewals that failed");
    metrics::describe_counter!(LEASES_LOST_TOTAL, "Leases lost while held");
    metrics::describe_histogram!(HOLD_SECONDS, Unit::Seconds, "Time from grant to release");
    metrics::describe_histogram!(HOLD_RATIO, "Hold time divided by the lease's ttl");
    metrics::describe_counter!(FENCE_REFUSALS_TOTAL, "Writes the resource refused for a stale fence");
}

/// An acquisition call's outcome, as the [`OUTCOME`] label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Locked,
    Contended,
    Unavailable,
    Unlocked,
    Failed,
}

impl Outcome {
    /// The outcome of a call that returned `result` (never [`Outcome::Unlocked`]: only the
    /// policy turns an error into that).
    pub(crate) fn of<T>(result: &Result<T, Error>) -> Outcome {
        match result {
            Ok(_) => Outcome::Locked,
            Err(err) => Outcome::of_error(err),
        }
    }

    pub(crate) fn of_error(err: &Error) -> Outcome {
        if err.is_unavailable() {
            Outcome::Unavailable
        } else if is_contention(err) {
            Outcome::Contended
        } else {
            Outcome::Failed
        }
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Locked => LOCKED,
            Outcome::Contended => CONTENDED,
            Outcome::Unavailable => UNAVAILABLE,
            Outcome::Unlocked => UNLOCKED,
            Outcome::Failed => FAILED,
        }
    }
}

/// Another owner holds the lock: the server said so, or Redlock masters did (a round without
/// a majority in which some master refused; see [`Error::is_unavailable`]).
fn is_contention(err: &Error) -> bool {
    match err {
        Error::Contended { .. } => true,
        Error::QuorumNotReached(report) => report.refused() > 0,
        _ => false,
    }
}

/// Records one acquisition call that started at `start`; `waits`: whether the call could wait.
pub(crate) fn acquired(start: Instant, waits: bool, outcome: Outcome) {
    let took = start.elapsed().as_secs_f64();
    histogram!(ACQUIRE_SECONDS, OUTCOME => outcome.label()).record(took);
    if waits && matches!(outcome, Outcome::Locked | Outcome::Contended) {
        histogram!(WAIT_SECONDS).record(took);
    }
}

/// Records one acquisition attempt (round) that failed with `err`.
pub(crate) fn attempt_failed(err: &Error) {
    match Outcome::of_error(err) {
        Outcome::Contended => counter!(CONTENDED_TOTAL).increment(1),
        Outcome::Unavailable => counter!(UNAVAILABLE_TOTAL).increment(1),
        _ => {}
    }
}

/// Records a renewal's result.
pub(crate) fn renewed(ok: bool) {
    counter!(if ok { RENEWALS_TOTAL } else { RENEWAL_FAILURES_TOTAL }).increment(1);
}

/// Records a lease lost while held (the caller makes sure each lease counts once).
pub(crate) fn lease_lost() {
    counter!(LEASES_LOST_TOTAL).increment(1);
}

/// Records the end of a lease held for `held` out of a `ttl` lease.
pub(crate) fn released(held: Duration, ttl: Duration) {
    let held = held.as_secs_f64();
    histogram!(HOLD_SECONDS).record(held);
    histogram!(HOLD_RATIO).record(held / ttl.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_prefixed() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert!(ALL.iter().all(|n| n.starts_with("fencedlock_")));
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn records_go_to_the_installed_recorder() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            record_fence_refusal();
            record_fence_refusal();
            released(Duration::from_millis(500), Duration::from_secs(2));
            acquired(Instant::now(), true, Outcome::Unlocked);
            attempt_failed(&Error::Contended { key: "k".into() });
            attempt_failed(&Error::Config("x".into()));
        });
        let snapshot = snapshotter.snapshot().into_vec();
        let value = |name: &str| {
            snapshot.iter().find(|(k, ..)| k.key().name() == name).map(|(k, _, _, v)| (k.key().clone(), v))
        };
        assert_eq!(value(FENCE_REFUSALS_TOTAL).map(|(_, v)| v), Some(&DebugValue::Counter(2)));
        assert_eq!(value(CONTENDED_TOTAL).map(|(_, v)| v), Some(&DebugValue::Counter(1)));
        assert!(value(UNAVAILABLE_TOTAL).is_none(), "a config error is not an outage");
        assert_eq!(value(HOLD_RATIO).map(|(_, v)| v), Some(&DebugValue::Histogram(vec![0.25.into()])));
        let (key, _) = value(ACQUIRE_SECONDS).expect("acquire latency recorded");
        assert!(key.labels().any(|l| l.key() == OUTCOME && l.value() == UNLOCKED), "{key:?}");
        assert!(value(WAIT_SECONDS).is_none(), "an unlocked call did not wait for a busy lock");
    }
}
