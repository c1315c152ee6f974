//! Blocked `ACQUIRE … BLOCK`s: one FIFO queue per lock key and every decision about serving it,
//! as pure functions of the queues, the lock, the high-water mark and an injected `now`.
//!
//! The FFI side (`blocking.rs`) blocks and answers clients and runs the wake-up timer; this
//! module only decides who is answered what, and when the next look at a key is due. `H` is a
//! waiter's handle (the blocked client there, a number in the tests).
//!
//! Guarantees kept here: waiters are granted strictly in arrival order; a waiter that left the
//! queue (timeout, disconnect) is never served; a lease is handed over at the moment it ends, to
//! the head only, so nobody barges past the queue.
//!
//! Each waiter's `BLOCK` deadline is kept here, not by the server: a waiter whose deadline has
//! passed when it is looked at (its wake-up, or a handoff that comes late because the server was
//! busy or stopped) is answered [`Answer::TimedOut`] and skipped, never granted. That makes the
//! timeout and the grant one decision, so no server can answer both or neither (Redis 7.0 drops
//! the reply of a client answered and timed out in the same event-loop pass).

mod queue;

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use queue::{KeyQueue, Seq};

use crate::error::LockError;
use crate::fence::HighWater;
use crate::lock::{Acquired, Ask, Lock, Micros, Moment};

/// A lock key: its database and name.
pub type KeyId = (i32, Box<[u8]>);

/// One blocked acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    pub handle: H,
    pub token: Box<[u8]>,
    /// The label it asked with (`LABEL`): a handoff grant gets this one, not the last holder's.
    pub label: Option<Box<[u8]>>,
    /// The permit count it asked with (`PERMITS`; 1 for the mutex).
    pub permits: u32,
    /// The ttl its lease gets, counted from the handoff.
    pub ttl: Micros,
    /// When it started waiting.
    pub since: Micros,
    /// When its `BLOCK` timeout ends its wait (`None`: `BLOCK 0`, no limit).
    pub deadline: Option<Micros>,
}

impl<H> Waiter<H> {
    /// The ACQUIRE this waiter asked for, decided at `now`.
    fn acquire(
        &self,
        lock: &mut Lock,
        mark: &mut HighWater,
        now: Micros,
        grace_left: Micros,
    ) -> Result<Acquired, LockError> {
        let ask = Ask {
            token: &self.token,
            label: self.label.as_deref(),
            permits: self.permits,
            ttl: self.ttl,
            // It is at the head of the queue when it is decided.
            queued_ahead: false,
        };
        lock.acquire_for(mark, &ask, now, grace_left)
    }
}

/// `timeout_ms` after `since` (`None` for 0: no limit), as the wait's deadline.
pub fn deadline(since: Micros, timeout_ms: u64) -> Option<Micros> {
    (timeout_ms > 0).then(|| since.saturating_add(timeout_ms.saturating_mul(1000)))
}

impl<H> Waiter<H> {
    /// Whether its wait is over at `now`: it may no longer be granted.
    fn timed_out(&self, now: Micros) -> bool {
        self.deadline.is_some_and(|at| at <= now)
    }
}

/// What a waiter that leaves the queue is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A new lease from the handoff on; `took_over` when the previous holder's lease expired.
    Granted { fence: u64, took_over: bool },
    /// Its token already held the lease (another of its requests was granted): same fence.
    Reentered { fence: u64 },
    /// Its `BLOCK` deadline passed before a lease came: nil, nothing held.
    TimedOut,
    /// No lease: the error the acquire would have replied (fences exhausted, wrong type, the
    /// key moved away in a cluster).
    Failed(LockError),
}

impl Answer {
    /// Whether the waiter holds the lease after this answer (so the lock changed and is
    /// replicated).
    pub fn holds(&self) -> bool {
        matches!(self, Answer::Granted { .. } | Answer::Reentered { .. })
    }
}

/// A waiter taken off its queue, with its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served<H> {
    pub waiter: Waiter<H>,
    pub answer: Answer,
}

impl<H> Served<H> {
    /// How long it waited, for `INFO`.
    pub fn waited(&self, now: Micros) -> Micros {
        now.saturating_sub(self.waiter.since)
    }
}

/// Every key's queue, where each waiter waits, and when each key must be looked at next.
#[derive(Debug)]
pub struct Queues<H> {
    queues: HashMap<KeyId, KeyQueue<H>>,
    /// The key each waiter waits on and its place there, so a timeout or disconnect finds it.
    keys: HashMap<H, (KeyId, Seq)>,
    /// Wake-ups, earliest first: a holder's deadline, or "now" after the key was deleted.
    due: BTreeSet<(Micros, KeyId)>,
}

impl<H: Copy + Eq + Hash> Default for Queues<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Copy + Eq + Hash> Queues<H> {
    pub fn new() -> Self {
        Self { queues: HashMap::new(), keys: HashMap::new(), due: BTreeSet::new() }
    }

    /// Waiters in all queues.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether anyone waits on `key`.
    pub fn is_waited(&self, key: &KeyId) -> bool {
        self.queues.contains_key(key)
    }

    /// The keys of `db` with waiters (`None`: of every database), e.g. after a `FLUSHDB`.
    pub fn keys_in(&self, db: Option<i32>) -> Vec<KeyId> {
        self.queues.keys().filter(|key| db.is_none_or(|db| key.0 == db)).cloned().collect()
    }

    /// Queues `waiter` at the tail of `key`'s queue, with a wake-up at its deadline. The caller
    /// files a wake-up at the holder's deadline with [`Queues::wake`].
    pub fn push(&mut self, key: KeyId, waiter: Waiter<H>) {
        let (deadline, handle) = (waiter.deadline, waiter.handle);
        let seq = self.queues.entry(key.clone()).or_default().push(waiter);
        self.keys.insert(handle, (key.clone(), seq));
        if let Some(at) = deadline {
            self.wake(&key, at);
        }
    }

    /// Takes the waiters of `key` whose deadline passed at `now` off the queue, answered
    /// [`Answer::TimedOut`], oldest first, and files a wake-up at the next deadline.
    pub fn expire(&mut self, key: &KeyId, now: Micros) -> Vec<Served<H>> {
        let Some(queue) = self.queues.get_mut(key) else { return Vec::new() };
        let expired: Vec<_> = queue
            .take_expired(now)
            .into_iter()
            .map(|waiter| Served { waiter, answer: Answer::TimedOut })
            .collect();
        debug_assert!(expired.iter().all(|s| s.waiter.timed_out(now)));
        let next = queue.next_deadline();
        let empty = queue.is_empty();
        if empty {
            self.drop_queue(key);
        } else if let Some(at) = next {
            self.wake(key, at);
        }
        self.answered(expired)
    }

    /// Takes a waiter out of its queue (it timed out or disconnected); `None` if it no longer
    /// waits (it was already served).
    pub fn remove(&mut self, handle: H) -> Option<(KeyId, Waiter<H>)> {
        let (key, seq) = self.keys.remove(&handle)?;
        let queue = self.queues.get_mut(&key)?;
        let waiter = queue.remove(seq)?;
        if queue.is_empty() {
            self.drop_queue(&key);
        }
        Some((key, waiter))
    }

    /// Files a look at `key` at `at`, unless an earlier one is filed. No-op without waiters.
    pub fn wake(&mut self, key: &KeyId, at: Micros) {
        let Some(queue) = self.queues.get_mut(key) else { return };
        if queue.wake.is_some_and(|filed| filed <= at) {
            return;
        }
        if let Some(filed) = queue.wake.replace(at) {
            self.due.remove(&(filed, key.clone()));
        }
        self.due.insert((at, key.clone()));
    }

    /// The earliest filed wake-up.
    pub fn next_due(&self) -> Option<Micros> {
        self.due.first().map(|(at, _)| *at)
    }

    /// A key whose wake-up is due at `now`, taken off the schedule.
    pub fn pop_due(&mut self, now: Micros) -> Option<KeyId> {
        let (at, _) = self.due.first()?;
        if *at > now {
            return None;
        }
        let (_, key) = self.due.pop_first()?;
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.wake = None;
        }
        Some(key)
    }

    /// Serves `key`'s queue against its lock after a lease may have ended (release, expiry,
    /// a new key in place of a deleted one): while a holder can be granted (a free mutex, a
    /// free permit), the head is granted a lease from `now` with its own ttl and a new fence,
    /// and every other waiter with the same token re-enters it (a waiter never shares a live
    /// holder's token otherwise: that token's ACQUIRE is answered at once). A head that asks
    /// for another permit count than the key is held with is answered that error, and the next
    /// one is served. Files the next wake-up when a holder's lease ends, or at the end of the
    /// restart grace if the lease ended during it (`at` says when it is, and how much grace is left). Waiters whose deadline passed are answered
    /// [`Answer::TimedOut`] first ([`Queues::expire`]): a late handoff skips them.
    pub fn serve(
        &mut self,
        key: &KeyId,
        lock: &mut Lock,
        mark: &mut HighWater,
        at: Moment,
    ) -> Vec<Served<H>> {
        let Moment { now, grace_left } = at;
        let mut served = self.expire(key, now);
        let Some(queue) = self.queues.get_mut(key) else { return served };
        while lock.has_room(now) {
            // The head is decided in place and taken off only once it is answered.
            let Some(head) = queue.head() else { break };
            let answer = match head.acquire(lock, mark, now, grace_left) {
                Ok(Acquired::Granted { fence, took_over }) => Answer::Granted { fence, took_over },
                Ok(Acquired::Reentered { fence }) => Answer::Reentered { fence },
                // Room for readers, and a writer at the head: it waits for them to leave, and
                // everyone behind it waits with it (arrival order keeps readers from starving
                // it). Nothing else is busy while there is room; the head stays either way.
                Ok(Acquired::Busy) => break,
                // During the restart grace nobody may be granted: the queue waits for its end.
                Err(LockError::RestartGrace { .. }) => {
                    self.wake(key, now.saturating_add(grace_left));
                    return self.answered(served);
                }
                // This head disagrees with the holders on the count, or holds a read lease of
                // its own and asks to write (a second request of the token's); the next may not.
                Err(e @ (LockError::PermitsMismatch { .. } | LockError::UpgradeRefused)) => {
                    served
                        .extend(queue.pop_head().map(|waiter| Served { waiter, answer: Answer::Failed(e) }));
                    continue;
                }
                // The same error would meet every waiter (no fences left, the wrong type): answer
                // them all rather than keep them waiting for nothing.
                Err(e) => {
                    let mut served = self.answered(served);
                    let failed = self.take_all(key).into_iter();
                    served.extend(failed.map(|waiter| Served { waiter, answer: Answer::Failed(e.clone()) }));
                    return served;
                }
            };
            let Some(head) = queue.pop_head() else { break };
            let same = queue.take_token(&head.token);
            served.push(Served { waiter: head, answer });
            for waiter in same {
                let answer = match waiter.acquire(lock, mark, now, 0) {
                    Ok(Acquired::Reentered { fence }) => Answer::Reentered { fence },
                    Err(e) => Answer::Failed(e),
                    // It holds the lease the head was just granted; cannot be otherwise.
                    Ok(Acquired::Granted { .. } | Acquired::Busy) => Answer::Failed(LockError::Internal),
                };
                served.push(Served { waiter, answer });
            }
        }
        if self.queues.get(key).is_some_and(|q| !q.is_empty()) {
            if let Some(frees_at) = lock.next_free(now) {
                self.wake(key, frees_at);
            }
        } else {
            self.drop_queue(key);
        }
        self.answered(served)
    }

    /// Forgets where the served waiters waited.
    fn answered(&mut self, served: Vec<Served<H>>) -> Vec<Served<H>> {
        for s in &served {
            self.keys.remove(&s.waiter.handle);
        }
        served
    }

    /// Empties `key`'s queue (e.g. its key left this cluster node), oldest first.
    pub fn take_all(&mut self, key: &KeyId) -> Vec<Waiter<H>> {
        let Some(queue) = self.queues.get_mut(key) else { return Vec::new() };
        let waiters = queue.drain();
        for w in &waiters {
            self.keys.remove(&w.handle);
        }
        self.drop_queue(key);
        waiters
    }

    fn drop_queue(&mut self, key: &KeyId) {
        if let Some(queue) = self.queues.remove(key) {
            if let Some(at) = queue.wake {
                self.due.remove(&(at, key.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MS: Micros = 1000;

    fn key(name: &str) -> KeyId {
        (0, name.as_bytes().into())
    }

    fn waiter(handle: u32, token: &str, since: Micros) -> Waiter<u32> {
        Waiter {
            handle,
            token: token.as_bytes().into(),
            label: None,
            permits: 1,
            ttl: 100 * MS,
            since,
            deadline: None,
        }
    }

    /// A lock held by `token` from 0 for `ttl`, and the mark after its grant.
    fn held(token: &str, ttl: Micros) -> (Lock, HighWater) {
        let (mut lock, mut mark) = (Lock::new(), HighWater::default());
        assert!(matches!(
            lock.acquire(&mut mark, token.as_bytes(), None, ttl, 0, 0),
            Ok(Acquired::Granted { .. })
        ));
        (lock, mark)
    }

    fn handles(served: &[Served<u32>]) -> Vec<u32> {
        served.iter().map(|s| s.waiter.handle).collect()
    }

    #[test]
    fn a_semaphore_grants_as_many_heads_as_it_has_free_permits_in_order() {
        let (mut lock, mut mark) = (Lock::new(), HighWater::default());
        for (token, ttl) in [(&b"x"[..], 10 * MS), (b"y", 50 * MS)] {
            assert!(matches!(
                lock.acquire_permit(&mut mark, token, None, 2, ttl, 0, 0),
                Ok(Acquired::Granted { .. })
            ));
        }
        let mut q = Queues::new();
        let semaphore_waiter = |h, token: &str, permits| Waiter { permits, ..waiter(h, token, 0) };
        q.push(key("k"), semaphore_waiter(1, "t1", 2));
        q.push(key("k"), semaphore_waiter(2, "t2", 3));
        q.push(key("k"), semaphore_waiter(3, "t3", 2));
        q.push(key("k"), semaphore_waiter(4, "t4", 2));
        q.push(key("k"), semaphore_waiter(5, "t5", 2));
        // Full: nothing, and a wake-up at the earliest holder's deadline.
        assert!(q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 0 }).is_empty());
        assert_eq!(q.next_due(), Some(10 * MS));
        // x expires: one permit, the head; the next (another count) is answered its mismatch and
        // the one after it takes nothing (no permit left).
        assert_eq!(q.pop_due(10 * MS), Some(key("k")));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 10 * MS, grace_left: 0 });
        assert_eq!(handles(&served), [1]);
        assert_eq!(served[0].answer, Answer::Granted { fence: 3, took_over: true });
        assert_eq!(q.next_due(), Some(50 * MS), "y's deadline is next");
        // t1 leaves while y holds: one permit; the waiter with another count is answered its
        // mismatch in its turn, and the next one is granted.
        assert!(matches!(lock.release(b"t1", 11 * MS), crate::lock::Released::Ended { .. }));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 11 * MS, grace_left: 0 });
        assert_eq!(handles(&served), [2, 3]);
        assert_eq!(served[0].answer, Answer::Failed(LockError::PermitsMismatch { permits: 2 }));
        assert_eq!(served[1].answer, Answer::Granted { fence: 4, took_over: false });
        // y expires: one more.
        assert_eq!(q.pop_due(50 * MS), Some(key("k")));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 50 * MS, grace_left: 0 });
        assert_eq!(handles(&served), [4]);
        assert_eq!(served[0].answer, Answer::Granted { fence: 5, took_over: true });
        assert_eq!(lock.semaphore_status(50 * MS).map(|s| s.holders.len()), Some(2));
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_due(), Some(111 * MS), "t3's deadline");
        // Both leave at once: the last waiter, and the queue is gone.
        assert!(matches!(lock.release(b"t3", 60 * MS), crate::lock::Released::Ended { .. }));
        assert!(matches!(lock.release(b"t4", 60 * MS), crate::lock::Released::Ended { .. }));
        assert_eq!(
            handles(&q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 60 * MS, grace_left: 0 })),
            [5]
        );
        assert_eq!((q.len(), q.next_due()), (0, None));
    }

    #[test]
    fn a_waiting_writer_holds_back_the_readers_behind_it_and_they_enter_together_after_it() {
        use fencedlock_protocol::command::SHARED_PERMITS;
        let reader = |h, token: &str| Waiter { permits: SHARED_PERMITS, ..waiter(h, token, 0) };
        let (mut lock, mut mark) = (Lock::new(), HighWater::default());
        for token in [&b"r1"[..], b"r2"] {
            let r = lock.acquire_permit(&mut mark, token, None, SHARED_PERMITS, 10 * MS, 0, 0);
            assert!(matches!(r, Ok(Acquired::Granted { .. })));
        }
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "w", 0));
        q.push(key("k"), reader(2, "r3"));
        q.push(key("k"), reader(3, "r4"));
        q.push(key("k"), waiter(4, "w2", 0));
        q.push(key("k"), reader(5, "r5"));
        // Readers hold and there is room for more, but the writer is first: nobody passes it.
        let at = |now| Moment { now, grace_left: 0 };
        assert!(q.serve(&key("k"), &mut lock, &mut mark, at(MS)).is_empty());
        assert_eq!((q.len(), q.next_due()), (5, Some(10 * MS)));
        // One reader leaves: still one; the other expires: the writer, above both.
        assert!(matches!(lock.release(b"r1", 2 * MS), crate::lock::Released::Ended { .. }));
        assert!(q.serve(&key("k"), &mut lock, &mut mark, at(2 * MS)).is_empty());
        let served = q.serve(&key("k"), &mut lock, &mut mark, at(10 * MS));
        assert_eq!(handles(&served), [1]);
        assert_eq!(served[0].answer, Answer::Granted { fence: 3, took_over: true });
        // The writer leaves: the readers up to the next writer enter together.
        assert!(matches!(lock.release(b"w", 11 * MS), crate::lock::Released::Ended { .. }));
        let served = q.serve(&key("k"), &mut lock, &mut mark, at(11 * MS));
        assert_eq!(handles(&served), [2, 3]);
        let fences: Vec<_> = served.iter().map(|s| s.answer.clone()).collect();
        assert_eq!(
            fences,
            [Answer::Granted { fence: 4, took_over: false }, Answer::Granted { fence: 5, took_over: false }]
        );
        assert_eq!(q.len(), 2, "the second writer, and the reader behind it");
    }

    #[test]
    fn a_queued_write_request_of_a_reader_is_refused_alone() {
        use fencedlock_protocol::command::SHARED_PERMITS;
        let (mut lock, mut mark) = (Lock::new(), HighWater::default());
        let r = lock.acquire_permit(&mut mark, b"r", None, SHARED_PERMITS, 10 * MS, 0, 0);
        assert!(matches!(r, Ok(Acquired::Granted { .. })));
        let mut q = Queues::new();
        // The reader's token also asked to write, from another connection; a writer behind.
        q.push(key("k"), waiter(1, "r", 0));
        q.push(key("k"), waiter(2, "w", 0));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 0 });
        assert_eq!(handles(&served), [1]);
        assert_eq!(served[0].answer, Answer::Failed(LockError::UpgradeRefused));
        assert_eq!(q.len(), 1, "the writer behind still waits");
    }

    #[test]
    fn waiters_are_granted_in_arrival_order_with_rising_fences() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        for h in 1..=5 {
            q.push(key("k"), waiter(h, &format!("t{h}"), u64::from(h)));
        }
        assert!(matches!(lock.release(b"holder", 5 * MS), crate::lock::Released::Ended { .. }));
        let mut order = Vec::new();
        let mut last = lock.fence();
        let mut now = 5 * MS;
        while q.len() != 0 {
            let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now, grace_left: 0 });
            assert_eq!(served.len(), 1);
            let Answer::Granted { fence, took_over: false } = served[0].answer else { panic!("{served:?}") };
            assert!(fence > last);
            last = fence;
            order.push(served[0].waiter.handle);
            let token = served[0].waiter.token.clone();
            now += MS;
            lock.release(&token, now);
        }
        assert_eq!(order, [1, 2, 3, 4, 5]);
        assert_eq!(q.next_due(), None, "no queue, no wake-up left behind");
    }

    #[test]
    fn a_handoff_grant_carries_the_waiters_label_not_the_last_holders() {
        let (mut lock, mut mark) = (Lock::new(), HighWater::default());
        let labelled = lock.acquire(&mut mark, b"holder", Some(&b"old-leader"[..]), 10 * MS, 0, 0);
        assert!(matches!(labelled, Ok(Acquired::Granted { .. })));
        let mut q = Queues::new();
        q.push(key("k"), Waiter { label: Some((*b"new-leader").into()), ..waiter(1, "t1", 0) });
        q.push(key("k"), waiter(2, "t2", 0));
        // Expiry hands the lease over: the head's label, and a later handoff to an unlabelled
        // waiter leaves no label behind.
        assert_eq!(
            handles(&q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 10 * MS, grace_left: 0 })),
            [1]
        );
        assert_eq!(lock.status(10 * MS).label, Some(&b"new-leader"[..]));
        assert!(lock.held_by(b"t1", 10 * MS));
        lock.release(b"t1", 11 * MS);
        assert_eq!(
            handles(&q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 11 * MS, grace_left: 0 })),
            [2]
        );
        assert_eq!(lock.status(11 * MS).label, None);
    }

    #[test]
    fn nobody_is_served_while_the_lease_runs() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        assert!(q
            .serve(&key("k"), &mut lock, &mut mark, Moment { now: 10 * MS - 1, grace_left: 0 })
            .is_empty());
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn expiry_hands_over_at_the_deadline_and_counts_a_takeover() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 2 * MS));
        q.wake(&key("k"), lock.next_free(0).unwrap());
        assert_eq!(q.pop_due(10 * MS - 1), None, "not before the deadline");
        assert_eq!(q.pop_due(10 * MS), Some(key("k")));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 10 * MS, grace_left: 0 });
        assert_eq!(served[0].answer, Answer::Granted { fence: 2, took_over: true });
        assert_eq!(served[0].waited(10 * MS), 8 * MS);
        assert_eq!(lock.status(10 * MS).pttl_ms, Some(100), "the lease starts at the handoff");
    }

    #[test]
    fn the_next_wake_up_follows_the_new_holders_deadline() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        q.push(key("k"), Waiter { ttl: 3 * MS, ..waiter(2, "b", 0) });
        q.wake(&key("k"), 10 * MS);
        lock.release(b"holder", 4 * MS);
        q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 4 * MS, grace_left: 0 });
        assert_eq!(q.next_due(), Some(10 * MS), "an earlier wake-up stays filed");
        assert_eq!(q.pop_due(10 * MS), Some(key("k")));
        assert_eq!(q.next_due(), None);
        // Waiter 1 (ttl 100 ms) holds until 104 ms; a later look files its deadline.
        assert!(q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 10 * MS, grace_left: 0 }).is_empty());
        assert_eq!(q.next_due(), Some(104 * MS));
    }

    #[test]
    fn a_waiter_that_timed_out_or_disconnected_is_never_served() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        for h in 1..=3 {
            q.push(key("k"), waiter(h, &format!("t{h}"), 0));
        }
        assert_eq!(q.remove(1).map(|(k, w)| (k, w.handle)), Some((key("k"), 1)));
        assert_eq!(q.remove(3).map(|(_, w)| w.handle), Some(3));
        assert_eq!(q.remove(3), None, "gone already");
        lock.release(b"holder", MS);
        assert_eq!(
            handles(&q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 0 })),
            [2]
        );
        assert!((q.len() == 0));
        assert_eq!(q.remove(2), None, "a served waiter is not in any queue");
    }

    #[test]
    fn the_last_waiter_leaving_drops_the_queue_and_its_wake_up() {
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        q.wake(&key("k"), 5 * MS);
        q.remove(1);
        assert!(!q.is_waited(&key("k")));
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn the_holder_reenters_while_others_wait_and_the_queue_is_untouched() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        // The holder's own ACQUIRE is decided by the lock alone; serving in between changes nothing.
        assert_eq!(
            lock.acquire(&mut mark, b"holder", None, 10 * MS, 5 * MS, 0),
            Ok(Acquired::Reentered { fence: 1 })
        );
        assert!(q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 5 * MS, grace_left: 0 }).is_empty());
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn waiters_with_the_new_holders_token_reenter_with_its_fence() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        q.push(key("k"), waiter(2, "b", 0));
        q.push(key("k"), Waiter { ttl: 50 * MS, ..waiter(3, "a", 0) });
        lock.release(b"holder", MS);
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 0 });
        assert_eq!(handles(&served), [1, 3]);
        assert_eq!(served[0].answer, Answer::Granted { fence: 2, took_over: false });
        assert_eq!(served[1].answer, Answer::Reentered { fence: 2 });
        assert_eq!(lock.status(MS).pttl_ms, Some(50), "the re-entry restarted the lease with its ttl");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_look_while_the_lease_runs_files_the_holders_deadline() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        assert!(lock.renew(b"holder", 30 * MS, 5 * MS));
        assert!(q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 5 * MS, grace_left: 0 }).is_empty());
        assert_eq!(q.next_due(), Some(35 * MS), "the renewed deadline, not the old one");
    }

    #[test]
    fn an_error_that_meets_every_waiter_answers_them_all() {
        let mut lock = Lock::new();
        let mut mark = HighWater::new(fencedlock_protocol::limits::MAX_FENCE);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        q.push(key("k"), waiter(2, "b", 0));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 0, grace_left: 0 });
        assert_eq!(handles(&served), [1, 2]);
        assert!(served.iter().all(|s| s.answer == Answer::Failed(LockError::FencesExhausted)));
        assert!((q.len() == 0) && q.next_due().is_none());
    }

    #[test]
    fn a_lease_that_ends_during_the_restart_grace_is_handed_over_when_the_grace_ends() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        lock.release(b"holder", MS);
        assert!(q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 4 * MS }).is_empty());
        assert_eq!(q.len(), 1, "still waiting, not failed");
        assert_eq!(q.pop_due(5 * MS - 1), None);
        assert_eq!(q.pop_due(5 * MS), Some(key("k")));
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 5 * MS, grace_left: 0 });
        assert_eq!(served[0].answer, Answer::Granted { fence: 2, took_over: false });
    }

    #[test]
    fn queues_are_per_key_and_per_database() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), waiter(1, "a", 0));
        q.push(key("other"), waiter(2, "b", 0));
        q.push((1, b"k"[..].into()), waiter(3, "c", 0));
        lock.release(b"holder", MS);
        assert_eq!(
            handles(&q.serve(&key("k"), &mut lock, &mut mark, Moment { now: MS, grace_left: 0 })),
            [1]
        );
        assert_eq!(q.len(), 2);
        let mut db0 = q.keys_in(Some(0));
        db0.sort();
        assert_eq!(db0, [key("other")]);
        assert_eq!(q.keys_in(None).len(), 2);
        assert_eq!(q.take_all(&(1, b"k"[..].into())).len(), 1);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_waiter_past_its_deadline_is_answered_timed_out_and_skipped_by_a_late_handoff() {
        let (mut lock, mut mark) = held("holder", 10 * MS);
        let mut q = Queues::new();
        q.push(key("k"), Waiter { deadline: deadline(0, 3), ..waiter(1, "short", 0) });
        q.push(key("k"), Waiter { deadline: deadline(0, 50), ..waiter(2, "long", 0) });
        q.push(key("k"), waiter(3, "forever", 0));
        assert_eq!(deadline(0, 0), None, "BLOCK 0 has no deadline");
        assert_eq!(q.next_due(), Some(3 * MS), "the first deadline is filed at push");
        // The server was busy past the head's deadline; the release comes at 5 ms: the head is
        // answered timed out, and the lease goes to the next one in the same look.
        lock.release(b"holder", 5 * MS);
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 5 * MS, grace_left: 0 });
        assert_eq!(handles(&served), [1, 2]);
        assert_eq!(served[0].answer, Answer::TimedOut);
        assert!(!served[0].answer.holds() && served[1].answer.holds());
        assert_eq!(served[1].answer, Answer::Granted { fence: 2, took_over: false });
        assert!(!lock.held_by(b"short", 5 * MS));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_deadline_is_its_own_wake_up_and_ends_the_wait_at_that_instant() {
        let (mut lock, mut mark) = held("holder", 100 * MS);
        let mut q = Queues::new();
        q.push(key("k"), Waiter { deadline: deadline(MS, 20), ..waiter(1, "a", MS) });
        assert_eq!(q.next_due(), Some(21 * MS), "before the holder's deadline");
        assert_eq!(q.pop_due(21 * MS - 1), None, "never early");
        assert_eq!(q.pop_due(21 * MS), Some(key("k")));
        assert!(q.expire(&key("k"), 21 * MS - 1).is_empty(), "still in time a µs before");
        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: 21 * MS, grace_left: 0 });
        assert_eq!(served.len(), 1);
        assert_eq!((served[0].answer.clone(), served[0].waited(21 * MS)), (Answer::TimedOut, 20 * MS));
        assert_eq!((q.len(), q.next_due()), (0, None), "no queue, no wake-up left behind");
        assert!(lock.held_by(b"holder", 21 * MS));
    }

    /// The rules of serving a mutex's queue, written as plainly as possible (every step a scan
    /// of the whole list), for the indexed queues to be compared with.
    #[derive(Default)]
    struct Model {
        waiters: Vec<(u32, Box<[u8]>, Option<Micros>)>,
    }

    impl Model {
        /// Served after a release at `now`: the timed out oldest first, then the first one left
        /// granted and every later one with its token re-entering.
        fn serve(&mut self, now: Micros) -> Vec<(u32, bool)> {
            let timed_out = |d: &Option<Micros>| d.is_some_and(|at| at <= now);
            let mut out: Vec<(u32, bool)> =
                self.waiters.iter().filter(|w| timed_out(&w.2)).map(|w| (w.0, false)).collect();
            self.waiters.retain(|w| !timed_out(&w.2));
            if !self.waiters.is_empty() {
                let token = self.waiters[0].1.clone();
                out.extend(self.waiters.iter().filter(|w| w.1 == token).map(|w| (w.0, true)));
                self.waiters.retain(|w| w.1 != token);
            }
            out
        }
    }

    proptest::proptest! {
        /// Pushes (a few tokens, so that some wait twice; some deadlines), removals, expiries and
        /// handoffs in any order serve exactly whom the plain rules serve, in the same order, and
        /// the next wake-up is the earliest deadline left.
        #[test]
        fn indexed_queues_serve_as_the_plain_rules_do(
            ops in proptest::collection::vec((0u8..5, 0u8..4, proptest::option::of(1u64..40), 0usize..16), 1..80)
        ) {
            let (mut lock, mut mark) = (Lock::new(), HighWater::default());
            let mut q: Queues<u32> = Queues::new();
            let mut model = Model::default();
            let mut holder: Option<Box<[u8]>> = None;
            let mut next = 0u32;
            let mut now = 0;
            for (op, token, timeout, pick) in ops {
                now += MS;
                match op {
                    0 | 1 => {
                        next += 1;
                        let token = format!("t{token}");
                        let w = Waiter { deadline: timeout.map(|t| now + t * MS), ..waiter(next, &token, now) };
                        model.waiters.push((next, token.as_bytes().into(), w.deadline));
                        q.push(key("k"), w);
                    }
                    2 => {
                        if !model.waiters.is_empty() {
                            let h = model.waiters.remove(pick % model.waiters.len()).0;
                            proptest::prop_assert_eq!(q.remove(h).map(|(_, w)| w.handle), Some(h));
                        }
                    }
                    3 => {
                        let expired: Vec<u32> = q.expire(&key("k"), now).iter().map(|s| s.waiter.handle).collect();
                        let mut kept = Vec::new();
                        let mut gone = Vec::new();
                        for w in model.waiters.drain(..) {
                            if w.2.is_some_and(|at| at <= now) { gone.push(w.0) } else { kept.push(w) }
                        }
                        model.waiters = kept;
                        proptest::prop_assert_eq!(expired, gone);
                    }
                    _ => {
                        // Whoever holds lets go: the queue is served as the model says.
                        // (Leases last 100 ms, longer than the run: only a release ends one.)
                        if let Some(t) = holder.take() {
                            let ended = matches!(lock.release(&t, now), crate::lock::Released::Ended { .. });
                            proptest::prop_assert!(ended, "the holder's release ends the lease");
                        }
                        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now, grace_left: 0 });
                        holder = served.iter().find(|s| s.answer.holds()).map(|s| s.waiter.token.clone());
                        let served: Vec<(u32, bool)> = served.iter().map(|s| (s.waiter.handle, s.answer.holds())).collect();
                        proptest::prop_assert_eq!(served, model.serve(now));
                    }
                }
                proptest::prop_assert_eq!(q.len(), model.waiters.len());
                let earliest = model.waiters.iter().filter_map(|w| w.2).min();
                let filed = q.queues.get(&key("k")).and_then(|kq| kq.next_deadline());
                proptest::prop_assert_eq!(filed, earliest);
            }
        }

        /// Whatever leaves the queues in whatever order, grants follow arrival order among the
        /// waiters still queued, no handle is served twice or after it left, and the waiter
        /// count stays exact.
        #[test]
        fn grants_follow_arrival_order(ops in proptest::collection::vec((0u8..4, 0usize..8), 1..60)) {
            let (mut lock, mut mark) = held("holder", MS);
            let mut q: Queues<u32> = Queues::new();
            let mut queued: VecDeque<u32> = VecDeque::new();
            let mut next = 0u32;
            let mut now = 2 * MS;
            for (op, pick) in ops {
                now += MS;
                match op {
                    0 | 1 => {
                        next += 1;
                        q.push(key("k"), waiter(next, &format!("t{next}"), now));
                        queued.push_back(next);
                    }
                    2 => {
                        if let Some(&h) = queued.get(pick % queued.len().max(1)) {
                            proptest::prop_assert!(q.remove(h).is_some());
                            queued.retain(|x| *x != h);
                        }
                    }
                    _ => {
                        // The holder's lease ran out: the head, and only the head, is granted.
                        let served = q.serve(&key("k"), &mut lock, &mut mark, Moment { now: now + 100 * MS, grace_left: 0 });
                        now += 100 * MS;
                        let expected: Vec<u32> = queued.pop_front().into_iter().collect();
                        proptest::prop_assert_eq!(handles(&served), expected);
                    }
                }
                proptest::prop_assert_eq!(q.len(), queued.len());
            }
        }

        /// Whatever the deadlines and the instants of the looks, a waiter is granted only before
        /// its deadline, answered timed out only at or after it, and answered exactly once.
        #[test]
        fn nobody_is_granted_past_its_deadline(
            timeouts in proptest::collection::vec(0u64..50, 1..12),
            looks in proptest::collection::vec((0u64..80, proptest::bool::ANY), 1..20),
        ) {
            let (mut lock, mut mark) = held("holder", 1000 * MS);
            let mut q: Queues<u32> = Queues::new();
            for (h, t) in (1..).zip(&timeouts) {
                q.push(key("k"), Waiter { deadline: deadline(0, *t), ..waiter(h, &format!("t{h}"), 0) });
            }
            let mut answered = std::collections::HashSet::new();
            let mut looks = looks;
            looks.sort_unstable();
            for (at_ms, release) in looks {
                let now = at_ms * MS;
                if release {
                    for h in 0..=timeouts.len() {
                        lock.release(format!("t{h}").as_bytes(), now);
                    }
                    lock.release(b"holder", now);
                }
                for s in q.serve(&key("k"), &mut lock, &mut mark, Moment { now, grace_left: 0 }) {
                    proptest::prop_assert!(answered.insert(s.waiter.handle), "answered twice");
                    let due = s.waiter.deadline.unwrap_or(u64::MAX);
                    match s.answer {
                        Answer::TimedOut => proptest::prop_assert!(now >= due),
                        Answer::Granted { .. } => proptest::prop_assert!(now < due),
                        other => proptest::prop_assert!(false, "{other:?}"),
                    }
                }
            }
            proptest::prop_assert_eq!(q.len() + answered.len(), timeouts.len());
        }
    }
}
