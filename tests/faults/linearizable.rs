//! A linearizability checker for histories of read-write locks on a few keys, taken one key or
//! several at once (all or nothing), in the manner of Porcupine (the Wing & Gong search with
//! Lowe's memoization): is there one order of the operations, consistent with real time (an
//! operation that returned before another was called comes first), in which the locks answer
//! exactly what the clients were told?
//!
//! The model is the module's contract for leases that do not expire within the test, per key:
//! a writer holds alone, readers together; every grant's fence is above every earlier grant's
//! on that key, of either mode; `RELEASE` says 1 exactly when the token held the key. A set of
//! keys (`ACQUIREALL`) is granted only if every key admits the mode, with a rising fence on
//! each; it is refused (nil) only if at least one key does not admit; either way all or
//! nothing. A single `ACQUIRE` is a set of one. An operation without a reply (the server was
//! killed) may have taken effect or not (an acquisition: on every key of its set, or on none);
//! its return time is unbounded. An error reply changed nothing and is left out of the history.
//!
//! Pure: the fault tests record histories against a real server and hand them here; the tests
//! below hand it histories that a broken lock would produce.

use std::collections::{BTreeMap, HashMap, HashSet};

/// How many keys a history may name: keys are the indices `0..MAX_KEYS`.
pub const MAX_KEYS: usize = 4;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `ACQUIREALL n key… token ttl [SHARED]` (or `ACQUIRE key token ttl [SHARED]`: a set of
    /// one) with a token used for nothing else; `keys` are distinct, in the order asked.
    Acquire { token: u32, keys: Vec<usize>, shared: bool },
    /// `RELEASE key token`.
    Release { token: u32, key: usize },
}

impl Call {
    /// `ACQUIRE` of key 0 alone.
    pub fn acquire_one(token: u32, shared: bool) -> Call {
        Call::Acquire { token, keys: vec![0], shared }
    }

    /// The token the call names.
    pub fn token(&self) -> u32 {
        match self {
            Call::Acquire { token, .. } | Call::Release { token, .. } => *token,
        }
    }
}

/// What it was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// One fence per key, in the order the keys were asked.
    Granted(Vec<u64>),
    Busy,
    Released(bool),
    /// No reply: it may or may not have taken effect.
    Unknown,
}

/// One operation: the call, its reply, when it was sent and when the reply came (`None`:
/// never), in any monotonic unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub call: Call,
    pub reply: Reply,
    pub start: u64,
    pub end: Option<u64>,
}

/// One key as the model sees it: each holder's mode (`true`: shared), and the highest fence
/// granted so far (a lower bound where a grant's fence was never seen).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Lock {
    holders: BTreeMap<u32, bool>,
    last: u64,
}

impl Lock {
    /// Whether a lease of `shared` mode may be granted now.
    fn admits(&self, shared: bool) -> bool {
        if shared {
            self.holders.values().all(|s| *s)
        } else {
            self.holders.is_empty()
        }
    }
}

/// Every key's lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    locks: [Lock; MAX_KEYS],
}

impl State {
    fn new(floor: u64) -> State {
        State { locks: std::array::from_fn(|_| Lock { holders: BTreeMap::new(), last: floor }) }
    }

    /// Whether every key of `keys` admits a lease of `shared` mode now.
    fn admits(&self, keys: &[usize], shared: bool) -> bool {
        keys.iter().all(|k| self.locks[*k].admits(shared))
    }

    /// `token` holding every key of `keys`, with their fences where they were seen.
    fn with_holder(&self, token: u32, keys: &[usize], shared: bool, fences: Option<&[u64]>) -> State {
        let mut next = self.clone();
        for (i, k) in keys.iter().enumerate() {
            next.locks[*k].holders.insert(token, shared);
            if let Some(fences) = fences {
                next.locks[*k].last = fences[i];
            }
        }
        next
    }

    fn without(&self, token: u32, key: usize) -> State {
        let mut next = self.clone();
        next.locks[key].holders.remove(&token);
        next
    }

    /// The states `op` may lead to from here; none when its reply is impossible.
    fn step(&self, op: &Op) -> Vec<State> {
        match (&op.call, &op.reply) {
            (Call::Acquire { token, keys, shared }, Reply::Granted(fences)) => {
                let rising = fences.len() == keys.len()
                    && keys.iter().zip(fences).all(|(k, fence)| *fence > self.locks[*k].last);
                if rising && self.admits(keys, *shared) {
                    vec![self.with_holder(*token, keys, *shared, Some(fences))]
                } else {
                    vec![]
                }
            }
            (Call::Acquire { keys, shared, .. }, Reply::Busy) => {
                if self.admits(keys, *shared) {
                    vec![]
                } else {
                    vec![self.clone()]
                }
            }
            (Call::Acquire { token, keys, shared }, Reply::Unknown) => {
                let mut next = vec![self.clone()];
                if self.admits(keys, *shared) {
                    next.push(self.with_holder(*token, keys, *shared, None));
                }
                next
            }
            (Call::Release { token, key }, Reply::Released(held)) => {
                if self.locks[*key].holders.contains_key(token) == *held {
                    vec![self.without(*token, *key)]
                } else {
                    vec![]
                }
            }
            (Call::Release { token, key }, Reply::Unknown) => {
                let mut next = vec![self.clone()];
                if self.locks[*key].holders.contains_key(token) {
                    next.push(self.without(*token, *key));
                }
                next
            }
            // A reply of the other command's kind: the recorder's bug, never linearizable.
            _ => vec![],
        }
    }
}

/// Whether `history` is linearizable for read-write locks on keys `0..MAX_KEYS` that start
/// free with fences above `floor`. `Err` says how far the longest linearized prefix got, for
/// the report. Panics on a call no client could make (no keys, a key twice, a key out of
/// range): the recorder's bug.
pub fn check(history: &[Op], floor: u64) -> Result<(), String> {
    for op in history {
        let keys = match &op.call {
            Call::Acquire { keys, .. } => keys.as_slice(),
            Call::Release { key, .. } => std::slice::from_ref(key),
        };
        let distinct = keys.iter().enumerate().all(|(i, k)| !keys[..i].contains(k));
        assert!(
            !keys.is_empty() && distinct && keys.iter().all(|k| *k < MAX_KEYS),
            "a malformed call: {op:?}"
        );
    }
    let mut ops: Vec<Op> = history.to_vec();
    ops.sort_by_key(|op| op.start);
    let lost: Vec<usize> = (0..ops.len()).filter(|i| ops[*i].end.is_none()).collect();
    let mut lost_bits = vec![0u64; ops.len().div_ceil(64)];
    lost.iter().for_each(|i| flip(&mut lost_bits, *i));
    let mut search = Search { ops: &ops, lost, lost_bits, failed: HashMap::new(), longest: 0 };
    if search.run(State::new(floor)) {
        Ok(())
    } else {
        Err(format!(
            "not linearizable: no order explains the {} operations (the longest explained prefix has {})",
            ops.len(),
            search.longest
        ))
    }
}

/// A depth-first search over linearization orders, on a stack of its own (a history of
/// thousands of operations is as deep).
struct Search<'a> {
    /// The history, by call time.
    ops: &'a [Op],
    /// The operations that never returned (they bound no other), and the same as bits.
    lost: Vec<usize>,
    lost_bits: Vec<u64>,
    /// Which operations are linearized (a bit each) → the states known to lead nowhere from
    /// there.
    failed: HashMap<Vec<u64>, HashSet<State>>,
    longest: usize,
}

/// One step of the order being built: the state after it, the operation it linearized (none
/// at the start), and the ways on from it not yet tried (the next operation and its state),
/// the earliest called last.
struct Step {
    state: State,
    linearized: Option<usize>,
    untried: Vec<(usize, State)>,
}

fn is_done(done: &[u64], i: usize) -> bool {
    done[i / 64] & (1 << (i % 64)) != 0
}

fn flip(done: &mut [u64], i: usize) {
    done[i / 64] ^= 1 << (i % 64);
}

impl Search<'_> {
    /// Whether some order of every operation starts from `initial`.
    fn run(&mut self, initial: State) -> bool {
        let mut done = vec![0u64; self.ops.len().div_ceil(64)];
        let untried = self.ways_on(&done, &initial);
        let mut path = vec![Step { state: initial, linearized: None, untried }];
        // The operations linearized so far are one fewer than the steps on the path.
        while let Some(count) = path.len().checked_sub(1) {
            if count == self.ops.len() {
                return true;
            }
            self.longest = self.longest.max(count);
            match path[count].untried.pop() {
                Some((i, state)) => {
                    flip(&mut done, i);
                    if self.failed.get(done.as_slice()).is_some_and(|states| states.contains(&state)) {
                        flip(&mut done, i);
                    } else {
                        let untried = self.ways_on(&done, &state);
                        path.push(Step { state, linearized: Some(i), untried });
                    }
                }
                None => {
                    let Step { state, linearized, .. } = path.pop().expect("the last step");
                    self.failed.entry(done.clone()).or_default().insert(state);
                    if let Some(i) = linearized {
                        flip(&mut done, i);
                    }
                }
            }
        }
        false
    }

    /// The operations that may be linearized next from `state`, with the states each may
    /// lead to: any operation called before every pending one returned. Those before the
    /// first pending one that returned are all linearized, or never returned; by call time,
    /// the scans stop at the first operation called after the horizon (it returned later).
    fn ways_on(&self, done: &[u64], state: &State) -> Vec<(usize, State)> {
        let pending = |i: &usize| !is_done(done, *i) && self.ops[*i].end.is_some();
        let settled = done.iter().zip(&self.lost_bits).map(|(done, lost)| done | lost);
        let first = settled.into_iter().position(|bits| bits != u64::MAX).map_or(self.ops.len(), |w| w * 64);
        let first = (first..self.ops.len()).find(pending).unwrap_or(self.ops.len());
        let mut horizon = u64::MAX;
        for (i, op) in self.ops.iter().enumerate().skip(first) {
            if op.start > horizon {
                break;
            }
            if !is_done(done, i) {
                horizon = horizon.min(op.end.unwrap_or(u64::MAX));
            }
        }
        let lost = self.lost.iter().filter(|i| **i < first && !is_done(done, **i));
        let mut ways: Vec<(usize, State)> =
            lost.flat_map(|i| state.step(&self.ops[*i]).into_iter().map(|next| (*i, next))).collect();
        for (i, op) in self.ops.iter().enumerate().skip(first) {
            if op.start > horizon {
                break;
            }
            if !is_done(done, i) {
                ways.extend(state.step(op).into_iter().map(|next| (i, next)));
            }
        }
        ways.reverse();
        ways
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `ACQUIRE` of key 0.
    fn acquire(token: u32, shared: bool, reply: Reply, start: u64, end: u64) -> Op {
        Op { call: Call::acquire_one(token, shared), reply, start, end: Some(end) }
    }

    /// A `RELEASE` of key 0.
    fn release(token: u32, held: bool, start: u64, end: u64) -> Op {
        release_of(token, 0, held, start, end)
    }

    /// An `ACQUIREALL` of `keys` (a writer's unless `shared`).
    fn set(token: u32, keys: &[usize], shared: bool, reply: Reply, start: u64, end: u64) -> Op {
        Op { call: Call::Acquire { token, keys: keys.to_vec(), shared }, reply, start, end: Some(end) }
    }

    fn release_of(token: u32, key: usize, held: bool, start: u64, end: u64) -> Op {
        Op { call: Call::Release { token, key }, reply: Reply::Released(held), start, end: Some(end) }
    }

    fn granted(fences: &[u64]) -> Reply {
        Reply::Granted(fences.to_vec())
    }

    #[test]
    fn overlapping_calls_may_be_ordered_either_way() {
        // A writer and a reader asked at once: the reader won, so the writer was refused.
        let history = [
            acquire(1, false, Reply::Busy, 0, 10),
            acquire(2, true, granted(&[5]), 1, 9),
            release(2, true, 11, 12),
            acquire(3, false, granted(&[6]), 13, 14),
        ];
        assert_eq!(check(&history, 0), Ok(()));
        // Readers together, fences in either order of their overlapping calls.
        let readers = [
            acquire(1, true, granted(&[8]), 0, 10),
            acquire(2, true, granted(&[7]), 1, 9),
            acquire(3, false, Reply::Busy, 11, 12),
        ];
        assert_eq!(check(&readers, 0), Ok(()));
    }

    #[test]
    fn two_writers_at_once_are_caught() {
        let history = [acquire(1, false, granted(&[1]), 0, 1), acquire(2, false, granted(&[2]), 2, 3)];
        assert!(check(&history, 0).is_err());
    }

    #[test]
    fn a_reader_beside_a_writer_is_caught() {
        let history = [acquire(1, false, granted(&[1]), 0, 1), acquire(2, true, granted(&[2]), 2, 3)];
        assert!(check(&history, 0).is_err());
        let writer_after_reader =
            [acquire(1, true, granted(&[1]), 0, 1), acquire(2, false, granted(&[2]), 2, 3)];
        assert!(check(&writer_after_reader, 0).is_err());
    }

    #[test]
    fn a_fence_that_does_not_rise_is_caught() {
        let history = [
            acquire(1, false, granted(&[9]), 0, 1),
            release(1, true, 2, 3),
            acquire(2, true, granted(&[9]), 4, 5),
        ];
        assert!(check(&history, 0).is_err());
        assert!(check(&[acquire(1, true, granted(&[3]), 0, 1)], 3).is_err(), "at or below the floor");
    }

    #[test]
    fn a_refusal_of_a_free_key_and_a_wrong_release_are_caught() {
        assert!(check(&[acquire(1, true, Reply::Busy, 0, 1)], 0).is_err());
        let released_twice =
            [acquire(1, false, granted(&[1]), 0, 1), release(1, true, 2, 3), release(1, true, 4, 5)];
        assert!(check(&released_twice, 0).is_err());
    }

    #[test]
    fn an_operation_without_a_reply_may_or_may_not_have_happened() {
        let lost = Op { call: Call::acquire_one(1, false), reply: Reply::Unknown, start: 0, end: None };
        // It happened: the next writer is refused, and its release says so.
        let happened = [lost.clone(), acquire(2, false, Reply::Busy, 5, 6), release(1, true, 7, 8)];
        assert_eq!(check(&happened, 0), Ok(()));
        // It did not: the next writer is granted.
        let did_not = [lost.clone(), acquire(2, false, granted(&[4]), 5, 6), release(1, false, 7, 8)];
        assert_eq!(check(&did_not, 0), Ok(()));
        // Not both at once.
        let both = [lost, acquire(2, false, granted(&[4]), 5, 6), release(1, true, 7, 8)];
        assert!(check(&both, 0).is_err());
    }

    #[test]
    fn sets_that_overlap_in_time_and_keys_may_be_ordered_either_way() {
        let history = [
            // A writer's set and a reader's set that share key 1, asked at once: the writer won.
            set(1, &[0, 1], false, granted(&[5, 6]), 0, 10),
            set(2, &[2, 1], true, Reply::Busy, 1, 9),
            // Key 2 alone was free all along, and its fence is above nothing but the floor.
            set(3, &[2], false, granted(&[7]), 2, 8),
            release_of(3, 2, true, 11, 12),
            release_of(1, 1, true, 13, 14),
            // Key 0 is still the writer's; keys 1 and 2 take two readers, the one called second first.
            set(4, &[1, 2], true, granted(&[11, 12]), 15, 20),
            set(5, &[2, 1], true, granted(&[9, 10]), 16, 19),
            set(6, &[1, 0], true, Reply::Busy, 21, 22),
            release_of(1, 0, true, 23, 24),
            release_of(1, 0, false, 25, 26),
            set(7, &[0], true, granted(&[13]), 27, 28),
            release_of(4, 2, true, 29, 30),
            // Key 3 is untouched by everyone else: a lone writer's set is granted.
            set(8, &[3, 2], false, Reply::Busy, 31, 32),
            set(9, &[3], false, granted(&[14]), 33, 34),
        ];
        assert_eq!(check(&history, 0), Ok(()));
    }

    #[test]
    fn a_set_granted_while_one_key_has_a_writer_is_caught() {
        let history = [acquire(1, false, granted(&[1]), 0, 1), set(2, &[1, 0], true, granted(&[2, 3]), 2, 3)];
        assert!(check(&history, 0).is_err());
        let writer_set_over_a_reader =
            [set(1, &[2], true, granted(&[1]), 0, 1), set(2, &[0, 1, 2], false, granted(&[2, 3, 4]), 2, 3)];
        assert!(check(&writer_set_over_a_reader, 0).is_err());
    }

    #[test]
    fn a_partial_grant_of_a_refused_set_is_caught() {
        // The set is refused for key 1's writer; a broken server kept key 0 for it anyway.
        let refused_then = |last: Op| {
            vec![
                set(1, &[1], false, granted(&[1]), 0, 1),
                set(2, &[0, 1], false, Reply::Busy, 2, 3),
                release_of(1, 1, true, 4, 5),
                last,
            ]
        };
        // Key 0 is refused with nothing holding it: the signature of the stored part.
        assert!(check(&refused_then(set(3, &[0], false, Reply::Busy, 6, 7)), 0).is_err());
        // Or the refused set's token turns out to hold key 0.
        assert!(check(&refused_then(release_of(2, 0, true, 6, 7)), 0).is_err());
        // A sound server grants key 0, and the refused token holds nothing.
        assert_eq!(check(&refused_then(set(3, &[0], false, granted(&[2]), 6, 7)), 0), Ok(()));
        assert_eq!(check(&refused_then(release_of(2, 0, false, 6, 7)), 0), Ok(()));
    }

    #[test]
    fn a_fence_that_does_not_rise_on_one_key_of_a_set_is_caught() {
        let history = |fences: &[u64]| {
            vec![
                set(1, &[0, 1], false, granted(&[3, 4]), 0, 1),
                release_of(1, 0, true, 2, 3),
                release_of(1, 1, true, 4, 5),
                set(2, &[2, 1], false, granted(fences), 6, 7),
            ]
        };
        assert_eq!(check(&history(&[5, 6]), 0), Ok(()));
        assert!(check(&history(&[5, 4]), 0).is_err(), "key 1's fence repeated");
        assert!(check(&history(&[5, 2]), 0).is_err(), "key 1's fence went down");
        assert!(check(&history(&[5]), 0).is_err(), "a fence missing");
        assert!(check(&history(&[5, 6, 7]), 0).is_err(), "a fence too many");
    }

    #[test]
    fn a_wrong_release_of_a_key_of_a_set_is_caught() {
        let granted_set = set(1, &[0, 1], false, granted(&[1, 2]), 0, 1);
        // Each key is released once; a key the set did not name never was the token's.
        let sound = [granted_set.clone(), release_of(1, 1, true, 2, 3), release_of(1, 2, false, 4, 5)];
        assert_eq!(check(&sound, 0), Ok(()));
        let twice = [granted_set.clone(), release_of(1, 1, true, 2, 3), release_of(1, 1, true, 4, 5)];
        assert!(check(&twice, 0).is_err());
        let not_named = [granted_set.clone(), release_of(1, 2, true, 2, 3)];
        assert!(check(&not_named, 0).is_err());
        let not_held = [granted_set, release_of(1, 0, false, 2, 3)];
        assert!(check(&not_held, 0).is_err());
    }

    #[test]
    fn a_set_without_a_reply_took_every_key_or_none() {
        let lost = Op {
            call: Call::Acquire { token: 1, keys: vec![0, 1], shared: false },
            reply: Reply::Unknown,
            start: 0,
            end: None,
        };
        // Key 0 went to another writer, which keeps it: the lost set took nothing.
        let none = [lost.clone(), acquire(2, false, granted(&[4]), 5, 6), release_of(1, 1, false, 7, 8)];
        assert_eq!(check(&none, 0), Ok(()));
        // Or it took both: the writer is refused, and both releases say so.
        let all = [
            lost.clone(),
            acquire(2, false, Reply::Busy, 5, 6),
            release_of(1, 1, true, 7, 8),
            release_of(1, 0, true, 9, 10),
        ];
        assert_eq!(check(&all, 0), Ok(()));
        // Never key 1 alone.
        let some = [lost, acquire(2, false, granted(&[4]), 5, 6), release_of(1, 1, true, 7, 8)];
        assert!(check(&some, 0).is_err());
    }

    #[test]
    fn a_history_of_thousands_of_operations_is_checked_without_running_out_of_stack() {
        let history: Vec<Op> = (0..10_000u32)
            .flat_map(|t| {
                let (key, at) = (t as usize % 3, 4 * u64::from(t));
                [
                    set(t, &[key], false, granted(&[u64::from(t) + 1]), at, at + 1),
                    release_of(t, key, true, at + 2, at + 3),
                ]
            })
            .collect();
        assert_eq!(check(&history, 0), Ok(()));
        let mut wrong = history;
        wrong.push(release_of(0, 0, true, u64::MAX - 1, u64::MAX));
        assert!(check(&wrong, 0).is_err());
    }
}
