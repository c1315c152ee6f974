//! One key's FIFO of waiters, indexed so that no step of serving it scans the whole queue.
//!
//! Serving a key asks three things of its queue: who is the head, which waiters share the new
//! holder's token (they re-enter its lease with it), and whose `BLOCK` deadline has passed. With
//! a plain list the last two are scans of every waiter, once per handoff, so a chain of N
//! handoffs over N waiters costs O(N²) (at 10,000 waiters that was the chain's whole cost).
//! Here each waiter gets an arrival number, and two indexes name waiters by it: per token, and
//! per deadline. Every operation is O(log n) per waiter it touches.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Waiter;
use crate::lock::Micros;

/// A waiter's place in its queue: arrival order, never reused within the queue.
pub type Seq = u64;

#[derive(Debug)]
pub struct KeyQueue<H> {
    /// The next arrival number.
    next: Seq,
    /// Every waiter by arrival: the first entry is the head.
    waiters: BTreeMap<Seq, Waiter<H>>,
    /// The waiters of each token, by arrival (almost always one each).
    by_token: HashMap<Box<[u8]>, BTreeSet<Seq>>,
    /// The waiters with a `BLOCK` deadline, earliest first.
    deadlines: BTreeSet<(Micros, Seq)>,
    /// The wake-up filed for this key in `Queues::due`, if any.
    pub wake: Option<Micros>,
}

impl<H> Default for KeyQueue<H> {
    fn default() -> Self {
        Self {
            next: 0,
            waiters: BTreeMap::new(),
            by_token: HashMap::new(),
            deadlines: BTreeSet::new(),
            wake: None,
        }
    }
}

impl<H> KeyQueue<H> {
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Queues `waiter` at the tail; its place, for [`KeyQueue::remove`].
    pub fn push(&mut self, waiter: Waiter<H>) -> Seq {
        let seq = self.next;
        self.next += 1;
        self.by_token.entry(waiter.token.clone()).or_default().insert(seq);
        if let Some(at) = waiter.deadline {
            self.deadlines.insert((at, seq));
        }
        self.waiters.insert(seq, waiter);
        seq
    }

    /// The longest-waiting waiter.
    pub fn head(&self) -> Option<&Waiter<H>> {
        self.waiters.first_key_value().map(|(_, w)| w)
    }

    /// Takes the head off the queue.
    pub fn pop_head(&mut self) -> Option<Waiter<H>> {
        let seq = *self.waiters.first_key_value()?.0;
        self.remove(seq)
    }

    /// Takes the waiter at `seq` off the queue, wherever it is; `None` if it is not there.
    pub fn remove(&mut self, seq: Seq) -> Option<Waiter<H>> {
        let waiter = self.waiters.remove(&seq)?;
        if let Some(at) = waiter.deadline {
            self.deadlines.remove(&(at, seq));
        }
        if let Some(seqs) = self.by_token.get_mut(&waiter.token) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                self.by_token.remove(&waiter.token);
            }
        }
        Some(waiter)
    }

    /// Takes every waiter with `token` off the queue, oldest first.
    pub fn take_token(&mut self, token: &[u8]) -> Vec<Waiter<H>> {
        let Some(seqs) = self.by_token.remove(token) else { return Vec::new() };
        seqs.into_iter().filter_map(|seq| self.take_indexed(seq)).collect()
    }

    /// Takes every waiter whose deadline is at or before `now` off the queue, oldest first.
    pub fn take_expired(&mut self, now: Micros) -> Vec<Waiter<H>> {
        let mut seqs: Vec<Seq> =
            self.deadlines.iter().take_while(|(at, _)| *at <= now).map(|(_, s)| *s).collect();
        seqs.sort_unstable();
        seqs.into_iter().filter_map(|seq| self.remove(seq)).collect()
    }

    /// The earliest deadline of those still waiting.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Empties the queue, oldest first.
    pub fn drain(&mut self) -> Vec<Waiter<H>> {
        self.by_token.clear();
        self.deadlines.clear();
        std::mem::take(&mut self.waiters).into_values().collect()
    }

    /// Takes `seq` off the queue when its token's index entry is already gone.
    fn take_indexed(&mut self, seq: Seq) -> Option<Waiter<H>> {
        let waiter = self.waiters.remove(&seq)?;
        if let Some(at) = waiter.deadline {
            self.deadlines.remove(&(at, seq));
        }
        Some(waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(handle: u32, token: &str, deadline: Option<Micros>) -> Waiter<u32> {
        Waiter { handle, token: token.as_bytes().into(), label: None, permits: 1, ttl: 1, since: 0, deadline }
    }

    fn handles(ws: &[Waiter<u32>]) -> Vec<u32> {
        ws.iter().map(|w| w.handle).collect()
    }

    #[test]
    fn the_head_is_the_oldest_and_removal_anywhere_keeps_the_order() {
        let mut q = KeyQueue::default();
        let seqs: Vec<Seq> = (1..=4).map(|h| q.push(w(h, &format!("t{h}"), None))).collect();
        assert_eq!(q.remove(seqs[1]).map(|w| w.handle), Some(2));
        assert_eq!(q.remove(seqs[1]), None, "gone already");
        assert_eq!(q.head().map(|w| w.handle), Some(1));
        assert_eq!(q.pop_head().map(|w| w.handle), Some(1));
        assert_eq!(handles(&q.drain()), [3, 4]);
        assert!(q.is_empty() && q.by_token.is_empty() && q.deadlines.is_empty());
    }

    #[test]
    fn a_token_takes_all_its_waiters_oldest_first_and_no_other() {
        let mut q = KeyQueue::default();
        for (h, t) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "a")] {
            q.push(w(h, t, Some(10 * u64::from(h))));
        }
        assert_eq!(handles(&q.take_token(b"a")), [1, 3, 5]);
        assert!(q.take_token(b"a").is_empty());
        assert_eq!(q.len(), 2);
        assert_eq!(q.next_deadline(), Some(20), "the taken waiters' deadlines are gone too");
    }

    #[test]
    fn expiry_takes_exactly_the_passed_deadlines_in_arrival_order() {
        let mut q = KeyQueue::default();
        for (h, at) in [(1, Some(30)), (2, None), (3, Some(10)), (4, Some(20)), (5, Some(31))] {
            q.push(w(h, &format!("t{h}"), at));
        }
        assert!(q.take_expired(9).is_empty());
        assert_eq!(handles(&q.take_expired(30)), [1, 3, 4], "arrival order, not deadline order");
        assert_eq!(q.next_deadline(), Some(31));
        assert_eq!(q.head().map(|w| w.handle), Some(2));
        assert_eq!(q.remove(4), Some(w(5, "t5", Some(31))));
        assert_eq!(q.next_deadline(), None, "a removed waiter's deadline is gone");
        assert_eq!(q.by_token.len(), 1);
    }
}
