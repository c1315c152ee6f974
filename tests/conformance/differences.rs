//! The one list of expected differences between the engines: each names its case and step,
//! says why, and checks the exact pair of replies, so a difference that changes shape, or
//! goes away, fails the suite as an unlisted one would.

use fencedlock_protocol::ReplyError;

use crate::engines::{Norm, Outcome, Rel};

/// A difference the Functions engine documents.
pub struct Expected {
    pub case: &'static str,
    /// Index of the step within the case (the case's last step, so nothing after it depends
    /// on the differing state).
    pub step: usize,
    pub why: &'static str,
    /// Whether (module, functions) are the documented pair.
    pub matches: fn(&Outcome, &Outcome) -> bool,
}

/// Every expected difference.
pub fn all() -> Vec<Expected> {
    vec![
        Expected {
            case: "raise:above-2^53",
            step: 1,
            why: "RAISE above 2^53 - 1: the module raises (its bound is 2^63 - 1); the Functions \
                  engine replies the module's FencesExhausted text, since Lua numbers are doubles \
                  and exact only up to 2^53 (functions::MAX_SAFE_FENCE)",
            matches: |module, functions| {
                matches!(module.reply, Norm::Fence(Rel::New(_, true)))
                    && functions.reply == Norm::Error(ReplyError::FencesExhausted.message(0))
            },
        },
        Expected {
            case: "block:busy-key",
            step: 1,
            why: "ACQUIRE … BLOCK on a busy key: the module queues the caller and replies nil when \
                  the timeout passes; a script cannot block, so the Functions engine replies nil at \
                  once (one refused attempt, as the module does inside MULTI and scripts) and the \
                  client does the waiting",
            matches: |module, functions| {
                module.reply == Norm::Nil
                    && module.waited == Some(true)
                    && functions.reply == Norm::Nil
                    && functions.waited == Some(false)
            },
        },
    ]
}

/// The list as printed at the start of a run.
pub fn describe() -> String {
    let mut out = String::from("expected differences between the engines (module = reference):\n");
    for e in all() {
        let why: String = e.why.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!("  - {} (step {}): {why}\n", e.case, e.step));
    }
    out
}
