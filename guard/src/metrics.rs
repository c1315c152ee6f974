//! The guard's metric, reported through the [`metrics`](https://docs.rs/metrics) facade
//! (nothing is recorded until the application installs a recorder).
//!
//! | name | kind | what |
//! | --- | --- | --- |
//! | [`STALE_REFUSALS_TOTAL`] | counter, label [`RESOURCE`] | claims and writes refused for a stale fence |
//!
//! It is the client's `fencedlock::metrics::FENCE_REFUSALS_TOTAL`, under the same name, with a
//! [`RESOURCE`] label: an application that fences with this crate gets the lesson's "stale-write
//! rejections from the fence" counted per table without calling `record_fence_refusal()`
//! itself (call that only for refusals of guards you write by hand, or they count twice).
//! Each refusal is also a `tracing` event (`WARN`, target `fencedlock_guard`) with the
//! resource, the step (`claim` or `write`), the stale fence and the row's fence.

/// Counter: claims and guarded writes refused because the row carries a newer fence. Each is
/// a stale holder caught: not a bug to silence, the measure of how often pauses outlive leases.
pub const STALE_REFUSALS_TOTAL: &str = "fencedlock_fence_refusals_total";
/// The label of [`STALE_REFUSALS_TOTAL`]: the table's resource label
/// ([`Table::resource`](crate::Table::resource)), a bounded set (tables, never row ids).
pub const RESOURCE: &str = "resource";

/// Describes the metric to the installed recorder (exporters show the text). Optional.
pub fn describe() {
    metrics::describe_counter!(STALE_REFUSALS_TOTAL, "Writes the resource refused for a stale fence");
}

/// Which helper refused a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Claim,
    Write,
}

impl Step {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Claim => "claim",
            Step::Write => "write",
        }
    }
}

/// Counts one refusal and logs it.
pub(crate) fn record_stale(resource: &str, step: Step, fence: u64, last_fence: Option<u64>) {
    metrics::counter!(STALE_REFUSALS_TOTAL, RESOURCE => resource.to_owned()).increment(1);
    tracing::warn!(
        target: "fencedlock_guard",
        resource,
        step = step.name(),
        fence,
        last_fence,
        "stale fence refused: a newer holder has claimed or written the row"
    );
}
