//! How lock state is shown: a key's fence, whether it is held and for how long, and its
//! holders' labels; never a token. Shared by `status` and `list`.

use std::time::Duration;

use fencedlock::{LastRun, PermitStatus, SemaphoreStatus};
use serde_json::json;

use crate::duration;

/// A holder's public label as text: arbitrary bytes, shown lossily (quoted and escaped by
/// the caller's `{:?}`).
pub fn label_text(holder: &PermitStatus) -> Option<String> {
    holder.label_lossy().map(|label| label.into_owned())
}

/// A semaphore's fence and permits (or a read-shared key's readers), then one indented line
/// per holder (lowest fence first).
pub fn describe_semaphore(semaphore: &SemaphoreStatus) -> String {
    let held = semaphore.holders.len();
    let mut text = if semaphore.is_shared() {
        format!("fence {}  shared by {held} reader{}", semaphore.fence, if held == 1 { "" } else { "s" })
    } else {
        format!("fence {}  permits {held} of {} held", semaphore.fence, semaphore.permits)
    };
    for holder in &semaphore.holders {
        let pttl = Some(holder.remaining.as_millis() as u64);
        text.push_str(&format!(
            "\n  {}",
            describe(Some(holder.fence), true, pttl, label_text(holder).as_deref())
        ));
    }
    text
}

/// `--json` for a semaphore: `into`'s fields, then its fence, permits and holders (never a
/// token); `held` while anyone holds a permit; `shared` for a key of readers (`permits` 0).
pub fn semaphore_json(semaphore: &SemaphoreStatus, mut into: serde_json::Value) -> serde_json::Value {
    let holders: Vec<_> = semaphore
        .holders
        .iter()
        .map(|h| json!({ "fence": h.fence, "pttl_ms": h.remaining.as_millis() as u64, "label": label_text(h) }))
        .collect();
    into["fence"] = json!(semaphore.fence);
    into["held"] = json!(!holders.is_empty());
    into["permits"] = json!(semaphore.permits);
    into["shared"] = json!(semaphore.is_shared());
    into["holders"] = json!(holders);
    into
}

/// A periodic job's last counted run, as `status` shows it.
pub fn describe_last_run(last: &LastRun) -> String {
    let by = last
        .label
        .as_deref()
        .map_or_else(|| "no label".into(), |l| format!("label {:?}", String::from_utf8_lossy(l)));
    let failed = if last.exit_code == 0 { String::new() } else { format!(", exit {}", last.exit_code) };
    format!("last run {} ago (fence {}, {by}{failed})", duration::format_approx(last.age), last.fence)
}

/// [`describe_last_run`]'s fields, for `--json`.
pub fn last_run_json(last: &LastRun) -> serde_json::Value {
    let started_ms = last.started.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    json!({
        "started_ms": started_ms, "age_ms": last.age.as_millis() as u64, "fence": last.fence,
        "label": last.label.as_deref().map(String::from_utf8_lossy), "exit_code": last.exit_code
    })
}

/// A lock key's state on one line: `fence F  held  T left  label "L"`, or for a key the
/// server has no record of, what is known instead of a fence.
pub fn describe(fence: Option<u64>, held: bool, pttl: Option<u64>, label: Option<&str>) -> String {
    let text = describe_lease(fence, held, pttl);
    match label {
        Some(label) => format!("{text}  label {label:?}"),
        None => text,
    }
}

fn describe_lease(fence: Option<u64>, held: bool, pttl: Option<u64>) -> String {
    let Some(fence) = fence else {
        // STATUS answers nil both for a key never locked and for one reclaimed after its
        // lease ended, whose fence was not 0: only "no record" is known, and that the next
        // fence is above every earlier one.
        return "free  no record (never locked, or reclaimed after its lease ended): its next fence exceeds every earlier one".to_string();
    };
    match (held, pttl) {
        (true, Some(ms)) => {
            format!("fence {fence}  held  {} left", duration::format(Duration::from_millis(ms)))
        }
        (true, None) => format!("fence {fence}  held"),
        (false, _) => format!("fence {fence}  free"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holders_label_is_shown_quoted_and_escaped() {
        assert_eq!(describe(Some(7), true, None, Some("node-a")), "fence 7  held  label \"node-a\"");
        // Arbitrary bytes cannot break the line or the terminal.
        assert_eq!(
            describe(Some(7), true, None, Some("a\nb\u{1b}")),
            "fence 7  held  label \"a\\nb\\u{1b}\""
        );
        assert_eq!(describe(Some(7), false, None, None), "fence 7  free");
    }

    #[test]
    fn a_key_without_a_record_shows_no_fence() {
        let text = describe(None, false, None, None);
        assert!(!text.contains("fence 0") && text.contains("no record"), "{text}");
    }
}
