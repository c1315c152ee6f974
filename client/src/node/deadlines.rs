//! The per-node timeout of requests on the shared connection, kept without a runtime timer per
//! request.
//!
//! `tokio::time::timeout` registers a timer for every request, and a timer due earlier than
//! the one the runtime's driver sleeps towards wakes the driver: a system call and a thread
//! wake-up per request, which cost a lease about 5% of its time on this project's 2-core
//! machine (issue #44: the `Locker`'s lease was 1.20× two `PING`s with it and 1.13–1.16×
//! without, in the paired bench). Here one thread of the process keeps every request's
//! deadline: a request enters its deadline under a mutex and takes it out when it ends, with
//! no system call, and the thread sleeps until the earliest deadline, expires what is due and
//! wakes those requests. Deadlines of a steady stream of requests only ever come later than
//! the one the thread sleeps towards, so they never wake it; it looks about once per limit.
//!
//! A thread rather than a task: a task lives on one runtime, and a node shared by several
//! would lose its timeouts while that runtime is not being driven (a current-thread runtime
//! between `block_on`s) or once it shut down. Wakers can be woken from any thread. Should the
//! thread not start (the process is out of threads), requests fall back to tokio's timer.

use std::collections::BTreeMap;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

/// `fut`, or [`Elapsed`] once `limit` has passed since its first poll (the request was sent
/// then). Dropping the returned future drops `fut` and forgets the deadline.
pub(crate) async fn within<F: Future>(limit: Duration, fut: F) -> Result<F::Output, Elapsed> {
    let Some(entry) = Entry::enter(Instant::now() + limit) else {
        return tokio::time::timeout(limit, fut).await.map_err(|_| Elapsed);
    };
    let mut fut = pin!(fut);
    poll_fn(|cx| {
        // Registered before the flag is read: the keeper sets the flag, then wakes.
        entry.slot.waker.register(cx.waker());
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if entry.slot.expired.load(Ordering::Acquire) {
            return Poll::Ready(Err(Elapsed));
        }
        Poll::Pending
    })
    .await
}

/// The limit passed before the request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

/// How long the keeper stays awake after the last deadline it looked at, so that a request
/// arriving in that time, whose deadline is later, need not wake it. Idle after that.
const LINGER: Duration = Duration::from_secs(1);

/// What a waiting request and the keeper share.
#[derive(Default)]
struct Slot {
    expired: AtomicBool,
    waker: AtomicWaker,
}

#[derive(Default)]
struct State {
    /// The deadlines of requests in flight, earliest first (a sequence number keeps equal
    /// instants apart).
    due: BTreeMap<(Instant, u64), Arc<Slot>>,
    next: u64,
    /// When the keeper looks next; `None` while it sleeps with nothing to keep.
    looks_at: Option<Instant>,
    /// Whether a deadline was entered since the keeper last looked.
    entered: bool,
    started: bool,
}

struct Keeper {
    state: Mutex<State>,
    changed: Condvar,
}

fn keeper() -> &'static Keeper {
    static KEEPER: OnceLock<Keeper> = OnceLock::new();
    KEEPER.get_or_init(|| Keeper { state: Mutex::new(State::default()), changed: Condvar::new() })
}

impl Keeper {
    /// The state; a panic elsewhere cannot leave it inconsistent (every change is one map
    /// operation or a field write), so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The keeper's loop: expire what is due, then sleep until the earliest deadline, for a
    /// linger when none is left, or until a deadline is entered.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let mut expired = Vec::new();
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                expired.push(entry.remove());
            }
            if !expired.is_empty() {
                drop(state);
                for slot in expired {
                    slot.expired.store(true, Ordering::Release);
                    slot.waker.wake();
                }
                state = self.lock();
                continue;
            }
            let next = state.due.first_key_value().map(|(&(at, _), _)| at);
            let entered = std::mem::take(&mut state.entered);
            state.looks_at = next.or_else(|| entered.then(|| now + LINGER));
            // The state is unlocked only inside the wait, so a deadline entered from here on
            // sees `looks_at` and wakes the keeper if it is earlier.
            state = match state.looks_at {
                Some(at) => {
                    let sleep = at.saturating_duration_since(Instant::now());
                    self.changed.wait_timeout(state, sleep).unwrap_or_else(PoisonError::into_inner).0
                }
                None => self.changed.wait(state).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// A request's deadline entered with the keeper; taken out when dropped.
struct Entry {
    key: (Instant, u64),
    slot: Arc<Slot>,
}

impl Entry {
    /// Enters `deadline`, starting the keeper on first use; `None` if it cannot start.
    fn enter(deadline: Instant) -> Option<Entry> {
        let keeper = keeper();
        let mut state = keeper.lock();
        if !state.started {
            let spawned = std::thread::Builder::new()
                .name("fencedlock-deadlines".into())
                .spawn(|| self::keeper().run());
            if spawned.is_err() {
                return None;
            }
            state.started = true;
        }
        let key = (deadline, state.next);
        state.next += 1;
        let slot = Arc::new(Slot::default());
        state.due.insert(key, Arc::clone(&slot));
        state.entered = true;
        if state.looks_at.is_none_or(|at| deadline < at) {
            keeper.changed.notify_one();
        }
        Some(Entry { key, slot })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        keeper().lock().due.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that is never answered, bounded by `limit`: how long it took to end. A
    /// keeper that missed it fails here instead of hanging the test.
    async fn unanswered(limit: Duration) -> Duration {
        let started = Instant::now();
        let request = within(limit, std::future::pending::<()>());
        let ended = tokio::time::timeout(limit + Duration::from_secs(2), request).await;
        assert_eq!(ended, Ok(Err(Elapsed)), "the request's deadline was never kept");
        started.elapsed()
    }

    #[tokio::test]
    async fn an_answer_in_time_is_returned() {
        assert_eq!(within(Duration::from_secs(5), async { 7 }).await, Ok(7));
        let slow = within(Duration::from_secs(5), tokio::time::sleep(Duration::from_millis(20))).await;
        assert_eq!(slow, Ok(()));
    }

    #[tokio::test]
    async fn a_request_that_is_never_answered_ends_at_its_limit() {
        for limit in [30, 120, 60].map(Duration::from_millis) {
            let took = unanswered(limit).await;
            assert!(took >= limit && took < limit + Duration::from_millis(500), "{took:?} for {limit:?}");
        }
    }

    #[tokio::test]
    async fn an_earlier_deadline_wakes_the_keeper_sleeping_towards_a_later_one() {
        let long = tokio::spawn(within(Duration::from_secs(3), std::future::pending::<()>()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let took = unanswered(Duration::from_millis(50)).await;
        assert!(took < Duration::from_millis(1000), "{took:?}: kept to the later deadline");
        long.abort();
    }

    #[test]
    fn deadlines_are_kept_for_runtimes_that_come_and_go() {
        // One current-thread runtime after another, each ending with a request in flight:
        // the keeper belongs to none of them.
        for _ in 0..3 {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                tokio::spawn(within(Duration::from_secs(60), std::future::pending::<()>()));
                unanswered(Duration::from_millis(40)).await;
            });
        }
    }

    #[test]
    fn a_request_that_ends_takes_its_deadline_out() {
        let entry = Entry::enter(Instant::now() + Duration::from_secs(60)).expect("the keeper starts");
        let key = entry.key;
        assert!(keeper().lock().due.contains_key(&key));
        drop(entry);
        assert!(!keeper().lock().due.contains_key(&key), "a forgotten deadline would be kept forever");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_requests_at_once_each_end_at_their_own_limit() {
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                tokio::spawn(async move {
                    let limit = Duration::from_millis(20 + i % 50);
                    if i % 2 == 0 {
                        assert!(unanswered(limit).await >= limit);
                    } else {
                        assert_eq!(within(limit * 20, tokio::time::sleep(limit)).await, Ok(()));
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }
}
