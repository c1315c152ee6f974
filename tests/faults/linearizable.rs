//! A linearizability checker for read-write lock histories, in the manner of Porcupine (the
//! Wing & Gong search with Lowe's memoization): is there one order of the operations,
//! consistent with real time (an operation that returned before another was called comes
//! first), in which a single read-write lock answers exactly what the clients were told?
//!
//! The model is the module's contract for leases that do not expire within the test: a writer
//! holds alone, readers together; every grant's fence is above every earlier grant's, of
//! either mode; a refusal (nil) only while the other mode (or a writer) holds; `RELEASE` says 1
//! exactly when the token held. An operation without a reply (the server was killed) may have
//! taken effect or not; its return time is unbounded. An error reply changed nothing and is
//! left out of the history.
//!
//! Pure: the fault test records histories against a real server and hands them here; the
//! tests below hand it histories that a broken lock would produce.

use std::collections::{BTreeMap, HashSet};

/// What a client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `ACQUIRE key token ttl [SHARED]` with a token used for nothing else.
    Acquire { token: u32, shared: bool },
    /// `RELEASE key token`.
    Release { token: u32 },
}

/// What it was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Granted(u64),
    Busy,
    Released(bool),
    /// No reply: it may or may not have taken effect.
    Unknown,
}

/// One operation: the call, its reply, when it was sent and when the reply came (`None`:
/// never), in any monotonic unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub call: Call,
    pub reply: Reply,
    pub start: u64,
    pub end: Option<u64>,
}

/// The lock as the model sees it: each holder's mode, and the highest fence granted so far
/// (a lower bound where a grant's fence was never seen).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct State {
    holders: BTreeMap<u32, bool>,
    last: u64,
}

impl State {
    /// Whether a lease of `shared` mode may be granted now.
    fn admits(&self, shared: bool) -> bool {
        if shared {
            self.holders.values().all(|s| *s)
        } else {
            self.holders.is_empty()
        }
    }

    fn with_holder(&self, token: u32, shared: bool, fence: Option<u64>) -> State {
        let mut next = self.clone();
        next.holders.insert(token, shared);
        if let Some(fence) = fence {
            next.last = fence;
        }
        next
    }

    fn without(&self, token: u32) -> State {
        let mut next = self.clone();
        next.holders.remove(&token);
        next
    }

    /// The states `op` may lead to from here; none when its reply is impossible.
    fn step(&self, op: &Op) -> Vec<State> {
        match (op.call, op.reply) {
            (Call::Acquire { token, shared }, Reply::Granted(fence)) => {
                if self.admits(shared) && fence > self.last {
                    vec![self.with_holder(token, shared, Some(fence))]
                } else {
                    vec![]
                }
            }
            (Call::Acquire { shared, .. }, Reply::Busy) => {
                if self.admits(shared) {
                    vec![]
                } else {
                    vec![self.clone()]
                }
            }
            (Call::Acquire { token, shared }, Reply::Unknown) => {
                let mut next = vec![self.clone()];
                if self.admits(shared) {
                    next.push(self.with_holder(token, shared, None));
                }
                next
            }
            (Call::Release { token }, Reply::Released(held)) => {
                if self.holders.contains_key(&token) == held {
                    vec![self.without(token)]
                } else {
                    vec![]
                }
            }
            (Call::Release { token }, Reply::Unknown) => {
                let mut next = vec![self.clone()];
                if self.holders.contains_key(&token) {
                    next.push(self.without(token));
                }
                next
            }
            // A reply of the other command's kind: the recorder's bug, never linearizable.
            _ => vec![],
        }
    }
}

/// Whether `history` is linearizable for one read-write lock that starts free with fences
/// above `floor`. `Err` says how far the longest linearized prefix got, for the report.
pub fn check(history: &[Op], floor: u64) -> Result<(), String> {
    let mut ops: Vec<Op> = history.to_vec();
    ops.sort_by_key(|op| op.start);
    let mut search = Search { ops: &ops, failed: HashSet::new(), longest: 0 };
    let mut done = vec![false; ops.len()];
    if search.from(&mut done, 0, &State { holders: BTreeMap::new(), last: floor }) {
        Ok(())
    } else {
        Err(format!(
            "not linearizable: no order explains the {} operations (the longest explained prefix has {})",
            ops.len(),
            search.longest
        ))
    }
}

struct Search<'a> {
    ops: &'a [Op],
    /// (which operations are linearized, state) pairs known to lead nowhere.
    failed: HashSet<(Vec<bool>, State)>,
    longest: usize,
}

impl Search<'_> {
    fn from(&mut self, done: &mut Vec<bool>, count: usize, state: &State) -> bool {
        if count == self.ops.len() {
            return true;
        }
        self.longest = self.longest.max(count);
        if self.failed.contains(&(done.clone(), state.clone())) {
            return false;
        }
        // Any operation called before every pending one returned may go next.
        let horizon = (0..self.ops.len())
            .filter(|i| !done[*i])
            .filter_map(|i| self.ops[i].end)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.ops.len() {
            if done[i] || self.ops[i].start > horizon {
                continue;
            }
            for next in state.step(&self.ops[i]) {
                done[i] = true;
                let found = self.from(done, count + 1, &next);
                done[i] = false;
                if found {
                    return true;
                }
            }
        }
        self.failed.insert((done.clone(), state.clone()));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(token: u32, shared: bool, reply: Reply, start: u64, end: u64) -> Op {
        Op { call: Call::Acquire { token, shared }, reply, start, end: Some(end) }
    }

    fn release(token: u32, held: bool, start: u64, end: u64) -> Op {
        Op { call: Call::Release { token }, reply: Reply::Released(held), start, end: Some(end) }
    }

    #[test]
    fn overlapping_calls_may_be_ordered_either_way() {
        // A writer and a reader asked at once: the reader won, so the writer was refused.
        let history = [
            acquire(1, false, Reply::Busy, 0, 10),
            acquire(2, true, Reply::Granted(5), 1, 9),
            release(2, true, 11, 12),
            acquire(3, false, Reply::Granted(6), 13, 14),
        ];
        assert_eq!(check(&history, 0), Ok(()));
        // Readers together, fences in either order of their overlapping calls.
        let readers = [
            acquire(1, true, Reply::Granted(8), 0, 10),
            acquire(2, true, Reply::Granted(7), 1, 9),
            acquire(3, false, Reply::Busy, 11, 12),
        ];
        assert_eq!(check(&readers, 0), Ok(()));
    }

    #[test]
    fn two_writers_at_once_are_caught() {
        let history =
            [acquire(1, false, Reply::Granted(1), 0, 1), acquire(2, false, Reply::Granted(2), 2, 3)];
        assert!(check(&history, 0).is_err());
    }

    #[test]
    fn a_reader_beside_a_writer_is_caught() {
        let history = [acquire(1, false, Reply::Granted(1), 0, 1), acquire(2, true, Reply::Granted(2), 2, 3)];
        assert!(check(&history, 0).is_err());
        let writer_after_reader =
            [acquire(1, true, Reply::Granted(1), 0, 1), acquire(2, false, Reply::Granted(2), 2, 3)];
        assert!(check(&writer_after_reader, 0).is_err());
    }

    #[test]
    fn a_fence_that_does_not_rise_is_caught() {
        let history = [
            acquire(1, false, Reply::Granted(9), 0, 1),
            release(1, true, 2, 3),
            acquire(2, true, Reply::Granted(9), 4, 5),
        ];
        assert!(check(&history, 0).is_err());
        assert!(check(&[acquire(1, true, Reply::Granted(3), 0, 1)], 3).is_err(), "at or below the floor");
    }

    #[test]
    fn a_refusal_of_a_free_key_and_a_wrong_release_are_caught() {
        assert!(check(&[acquire(1, true, Reply::Busy, 0, 1)], 0).is_err());
        let released_twice =
            [acquire(1, false, Reply::Granted(1), 0, 1), release(1, true, 2, 3), release(1, true, 4, 5)];
        assert!(check(&released_twice, 0).is_err());
    }

    #[test]
    fn an_operation_without_a_reply_may_or_may_not_have_happened() {
        let lost = Op {
            call: Call::Acquire { token: 1, shared: false },
            reply: Reply::Unknown,
            start: 0,
            end: None,
        };
        // It happened: the next writer is refused, and its release says so.
        let happened = [lost, acquire(2, false, Reply::Busy, 5, 6), release(1, true, 7, 8)];
        assert_eq!(check(&happened, 0), Ok(()));
        // It did not: the next writer is granted.
        let did_not = [lost, acquire(2, false, Reply::Granted(4), 5, 6), release(1, false, 7, 8)];
        assert_eq!(check(&did_not, 0), Ok(()));
        // Not both at once.
        let both = [lost, acquire(2, false, Reply::Granted(4), 5, 6), release(1, true, 7, 8)];
        assert!(check(&both, 0).is_err());
    }
}
