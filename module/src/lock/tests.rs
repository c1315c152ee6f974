//! The lock value's decisions, tested without a server.
use fencedlock_protocol::command::SHARED_PERMITS;
use fencedlock_protocol::limits::{MAX_LABEL_LEN, MAX_TOKEN_LEN};

use super::*;

const MS: Micros = 1000;

fn granted(r: Result<Acquired, LockError>) -> u64 {
    match r {
        Ok(Acquired::Granted { fence, .. }) => fence,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn first_acquire_grants_fence_one() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0);
    assert_eq!(r, Ok(Acquired::Granted { fence: 1, took_over: false }));
    assert_eq!(lock.status(0), Status { fence: 1, pttl_ms: Some(100), label: None });
    assert_eq!(hw.get(), 1);
}

#[test]
fn another_token_is_refused_while_the_lease_runs() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert_eq!(lock.acquire(&mut hw, b"b", None, 100 * MS, 99 * MS, 0), Ok(Acquired::Busy));
    assert_eq!(hw.get(), 1, "a refusal issues no fence");
}

#[test]
fn reacquire_by_the_holder_keeps_the_fence_and_restarts_the_lease() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 80 * MS, 0);
    assert_eq!(r, Ok(Acquired::Reentered { fence: 1 }));
    assert_eq!(lock.status(80 * MS).pttl_ms, Some(100));
    assert_eq!(hw.get(), 1);
}

#[test]
fn a_copy_keeps_the_lease_but_not_its_grant_time() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
    let mut copy = lock.copied();
    assert_eq!(copy.status(20 * MS), lock.status(20 * MS));
    assert_eq!(copy.release(b"a", 40 * MS), Released::Ended { span: None });
    assert_eq!(
        lock.release(b"a", 40 * MS),
        Released::Ended { span: Some(Span { held: 30 * MS, given: 100 * MS }) }
    );
}

#[test]
fn a_lock_value_stays_small() {
    // fence, the lease (token box + deadline + grant time, or the end time in the same
    // space), and the reclaim index position: every lock key pays this. 48 bytes is the
    // allocator's size class that a 40-byte value was rounded up to already (jemalloc's
    // classes go 32, 48, 64), so the grant time costs `used_memory` nothing per key; only
    // `MEMORY USAGE`, which counts `size_of`, shows 8 more bytes.
    assert_eq!(std::mem::size_of::<Lock>(), 48);
}

#[test]
fn a_label_lives_as_long_as_its_lease() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let label = |lock: &Lock, now| lock.status(now).label.map(<[u8]>::to_vec);
    granted(lock.acquire(&mut hw, b"a", Some(b"one"), 100 * MS, 0, 0));
    assert_eq!(label(&lock, 0), Some(b"one".to_vec()));
    // Re-entry without LABEL keeps it, with LABEL replaces it; RENEW and RAISE keep it.
    assert_eq!(lock.acquire(&mut hw, b"a", None, 100 * MS, MS, 0), Ok(Acquired::Reentered { fence: 1 }));
    assert_eq!(label(&lock, MS), Some(b"one".to_vec()));
    assert_eq!(
        lock.acquire(&mut hw, b"a", Some(b"two"), 100 * MS, 2 * MS, 0),
        Ok(Acquired::Reentered { fence: 1 })
    );
    assert_eq!(label(&lock, 2 * MS), Some(b"two".to_vec()));
    assert!(lock.renew(b"a", 100 * MS, 3 * MS));
    assert_eq!(lock.raise(&mut hw, b"a", 9, 3 * MS), Some(9));
    assert_eq!(label(&lock, 3 * MS), Some(b"two".to_vec()));
    // Another token is refused and changes nothing; the label is not a token.
    let before = lock.clone();
    assert_eq!(lock.acquire(&mut hw, b"b", Some(b"three"), 100 * MS, 4 * MS, 0), Ok(Acquired::Busy));
    assert_eq!(lock, before);
    assert!(!lock.held_by(b"two", 4 * MS) && !lock.held_by(b"twoa", 4 * MS) && lock.held_by(b"a", 4 * MS));
    assert_eq!(lock.token(), Some(&b"a"[..]));
    // The release ends it.
    assert!(matches!(lock.release(b"a", 5 * MS), Released::Ended { .. }));
    assert_eq!(label(&lock, 5 * MS), None);
    assert_eq!(lock.record(5 * MS).holder, None);
    // Expiry ends it too, and a grant without LABEL (the same token's, or a takeover) has none.
    granted(lock.acquire(&mut hw, b"a", Some(b"four"), 10 * MS, 6 * MS, 0));
    assert_eq!(label(&lock, 15 * MS), Some(b"four".to_vec()));
    assert_eq!(label(&lock, 16 * MS), None, "expired");
    assert_eq!(lock.record(16 * MS).holder, None);
    granted(lock.acquire(&mut hw, b"a", None, 10 * MS, 16 * MS, 0));
    assert_eq!(label(&lock, 16 * MS), None);
    granted(lock.acquire(&mut hw, b"b", Some(b"five"), 10 * MS, 26 * MS, 0));
    granted(lock.acquire(&mut hw, b"c", None, 10 * MS, 36 * MS, 0));
    assert_eq!(label(&lock, 36 * MS), None, "a takeover without LABEL has none");
}

#[test]
fn labels_travel_in_records_and_copies_and_keep_their_grant_time_metrics() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let longest = [0xffu8; fencedlock_protocol::limits::MAX_LABEL_LEN];
    granted(lock.acquire(&mut hw, b"tok", Some(&longest), 100 * MS, 0, 0));
    let rec = lock.record(40 * MS);
    let holding = Holding { token: b"tok", remaining: 60 * MS, label: Some(&longest[..]) };
    assert_eq!(rec, Record { fence: 1, holder: Some(holding) });
    let loaded = Lock::from_record(&rec, 7_000 * MS).unwrap();
    assert_eq!(loaded.status(7_000 * MS), Status { fence: 1, pttl_ms: Some(60), label: Some(&longest[..]) });
    assert!(loaded.held_by(b"tok", 7_000 * MS));
    let mut copy = lock.copied();
    assert_eq!(copy.status(50 * MS), lock.status(50 * MS));
    assert_eq!(copy.release(b"tok", 50 * MS), Released::Ended { span: None });
    // The grant time shares its word with the label's flag: both survive each other.
    assert!(lock.renew(b"tok", 100 * MS, 50 * MS));
    assert_eq!(lock.take_expiry(150 * MS), Some(Expired { lifetime: Some(150 * MS) }));
    assert_eq!(lock.take_expiry(150 * MS), None);
    assert_eq!(lock.status(149 * MS).label, Some(&longest[..]), "counting an expiry keeps the label");
    assert_eq!(lock.token(), Some(&b"tok"[..]));
    for bad in [&b""[..], &[b'x'; fencedlock_protocol::limits::MAX_LABEL_LEN + 1]] {
        let rec = Record { fence: 1, holder: Some(Holding { label: Some(bad), ..holding }) };
        assert_eq!(Lock::from_record(&rec, 0), Err(LockError::BadRecord));
    }
}

#[test]
fn a_label_costs_its_bytes_and_an_unlabelled_lease_nothing() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, &[7; 16], None, 100 * MS, 0, 0));
    assert_eq!(lock.heap_size(), 48 + 16, "the token alone, as before labels");
    assert_eq!(
        lock.acquire(&mut hw, &[7; 16], Some(b"node-a"), 100 * MS, 0, 0),
        Ok(Acquired::Reentered { fence: 1 })
    );
    assert_eq!(lock.heap_size(), 48 + 16 + 1 + 6, "token, label and its length byte");
}

#[test]
fn a_release_reports_how_long_the_lease_was_held_of_how_long_it_was_given() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
    let r = lock.release(b"a", 40 * MS);
    assert_eq!(r, Released::Ended { span: Some(Span { held: 30 * MS, given: 100 * MS }) });
}

#[test]
fn renewals_and_reentries_continue_the_lease_from_its_grant() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert!(lock.renew(b"a", 100 * MS, 80 * MS)); // deadline 180
    assert_eq!(
        lock.acquire(&mut hw, b"a", None, 100 * MS, 150 * MS, 0),
        Ok(Acquired::Reentered { fence: 1 })
    );
    // Held from 0 to 200, given 0 to 250.
    let r = lock.release(b"a", 200 * MS);
    assert_eq!(r, Released::Ended { span: Some(Span { held: 200 * MS, given: 250 * MS }) });
}

#[test]
fn an_expiry_is_reported_once_with_the_lifetime_it_was_given() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
    assert!(lock.renew(b"a", 100 * MS, 50 * MS)); // deadline 150
    assert_eq!(lock.take_expiry(149 * MS), None, "still live");
    let looks =
        |lock: &Lock| (lock.status(200 * MS).pttl_ms, lock.record(200 * MS).fence, lock.next_free(200 * MS));
    let before = looks(&lock);
    assert_eq!(lock.take_expiry(200 * MS), Some(Expired { lifetime: Some(140 * MS) }));
    assert_eq!(lock.take_expiry(300 * MS), None, "counted already");
    assert_eq!(looks(&lock), before);
    // The lost holder's late release is still refused as late, and a takeover still counts.
    assert_eq!(lock.release(b"a", 300 * MS), Released::Expired);
    assert_eq!(
        lock.acquire(&mut hw, b"b", None, MS, 300 * MS, 0),
        Ok(Acquired::Granted { fence: 2, took_over: true })
    );
}

#[test]
fn released_and_never_held_leases_report_no_expiry() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    assert_eq!(lock.take_expiry(0), None);
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert!(matches!(lock.release(b"a", 10 * MS), Released::Ended { .. }));
    assert_eq!(lock.take_expiry(500 * MS), None);
}

#[test]
fn a_loaded_lease_has_no_made_up_grant_time() {
    let rec =
        Record { fence: 3, holder: Some(Holding { token: &b"a"[..], remaining: 100 * MS, label: None }) };
    let mut lock = Lock::from_record(&rec, 1_000 * MS).unwrap();
    assert_eq!(lock.clone().release(b"a", 1_050 * MS), Released::Ended { span: None });
    assert_eq!(lock.take_expiry(1_100 * MS), Some(Expired { lifetime: None }));
    assert_eq!(lock.take_expiry(1_200 * MS), None);
}

#[test]
fn a_paused_holder_whose_lease_expired_loses_to_a_higher_fence() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let a = granted(lock.acquire(&mut hw, b"A", None, 100 * MS, 0, 0));
    // A pauses; its lease ends at 100 ms. B arrives at exactly the deadline.
    let r = lock.acquire(&mut hw, b"B", None, 100 * MS, 100 * MS, 0);
    let b = match r {
        Ok(Acquired::Granted { fence, took_over: true }) => fence,
        other => panic!("{other:?}"),
    };
    assert!(b > a);
    // A wakes up and acts on its stale lease.
    assert!(!lock.renew(b"A", 100 * MS, 150 * MS));
    assert_eq!(lock.release(b"A", 150 * MS), Released::NotOwner);
    assert_eq!(lock.status(150 * MS), Status { fence: b, pttl_ms: Some(50), label: None });
}

#[test]
fn renew_extends_only_an_unexpired_lease_of_the_caller() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert!(!lock.renew(b"b", 100 * MS, 50 * MS));
    assert!(lock.renew(b"a", 300 * MS, 50 * MS));
    assert_eq!(lock.status(50 * MS).pttl_ms, Some(300));
    assert!(!lock.renew(b"a", 300 * MS, 350 * MS), "expired at 350 ms");
    assert_eq!(lock.status(350 * MS).pttl_ms, None);
}

#[test]
fn release_ends_the_lease_but_keeps_the_fence() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let f1 = granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert_eq!(lock.release(b"b", 10 * MS), Released::NotOwner);
    assert!(matches!(lock.release(b"a", 10 * MS), Released::Ended { .. }));
    assert_eq!(lock.release(b"a", 10 * MS), Released::NotOwner);
    assert_eq!(lock.status(10 * MS), Status { fence: f1, pttl_ms: None, label: None });
    let f2 = granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 20 * MS, 0));
    assert!(f2 > f1);
}

#[test]
fn a_late_release_is_reported_and_changes_nothing() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    let before = lock.clone();
    assert_eq!(lock.release(b"a", 100 * MS), Released::Expired);
    assert_eq!(lock, before);
}

#[test]
fn the_holder_reacquiring_after_its_own_expiry_is_a_new_grant_not_a_takeover() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 200 * MS, 0);
    assert_eq!(r, Ok(Acquired::Granted { fence: 2, took_over: false }));
}

#[test]
fn fences_come_from_the_high_water_mark_across_keys() {
    let mut hw = HighWater::default();
    let (mut k1, mut k2) = (Lock::new(), Lock::new());
    assert_eq!(granted(k1.acquire(&mut hw, b"a", None, MS, 0, 0)), 1);
    assert_eq!(granted(k2.acquire(&mut hw, b"a", None, MS, 0, 0)), 2);
    // The key was deleted: a fresh key still starts above every fence issued.
    let mut k1_again = Lock::new();
    assert_eq!(granted(k1_again.acquire(&mut hw, b"a", None, MS, 0, 0)), 3);
}

#[test]
fn a_key_fence_above_the_mark_wins() {
    let mut hw = HighWater::new(5);
    let record = Record { fence: 90, holder: None };
    let mut lock = Lock::from_record(&record, 0).unwrap();
    assert_eq!(granted(lock.acquire(&mut hw, b"a", None, MS, 0, 0)), 91);
    assert_eq!(hw.get(), 91);
}

#[test]
fn restart_grace_refuses_new_grants_but_not_the_holder() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    assert_eq!(
        lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 1500),
        Err(LockError::RestartGrace { remaining_ms: 2 })
    );
    assert_eq!(lock, Lock::new());
    assert_eq!(hw.get(), 0);
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert_eq!(lock.acquire(&mut hw, b"a", None, 100 * MS, 1, 9 * MS), Ok(Acquired::Reentered { fence: 1 }));
    assert_eq!(lock.acquire(&mut hw, b"b", None, 100 * MS, 1, 9 * MS), Ok(Acquired::Busy));
}

#[test]
fn exhausted_fences_refuse_and_change_nothing() {
    let mut hw = HighWater::new(MAX_FENCE);
    let mut lock = Lock::new();
    assert_eq!(lock.acquire(&mut hw, b"a", None, MS, 0, 0), Err(LockError::FencesExhausted));
    assert_eq!(lock, Lock::new());
}

#[test]
fn raise_lifts_only_the_holders_fence_and_the_mark() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
    assert_eq!(lock.raise(&mut hw, b"b", 50, 0), None);
    assert_eq!(lock.raise(&mut hw, b"a", 50, 0), Some(50));
    assert_eq!(hw.get(), 50);
    assert_eq!(lock.raise(&mut hw, b"a", 10, 0), Some(50), "never lowers");
    assert_eq!(lock.acquire(&mut hw, b"a", None, 100 * MS, 1, 0), Ok(Acquired::Reentered { fence: 50 }));
    assert_eq!(lock.raise(&mut hw, b"a", 60, 200 * MS), None, "expired");
    assert_eq!(granted(lock.acquire(&mut hw, b"c", None, MS, 200 * MS, 0)), 51);
}

#[test]
fn records_carry_remaining_time_and_lengthen_on_the_receiver() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"tok", None, 100 * MS, 0, 0));
    let rec = lock.record(40 * MS);
    assert_eq!(
        rec,
        Record { fence: 1, holder: Some(Holding { token: &b"tok"[..], remaining: 60 * MS, label: None }) }
    );
    // Applied late, on a clock that reads something else entirely.
    let copy = Lock::from_record(&rec, 7_000 * MS).unwrap();
    assert_eq!(copy.status(7_000 * MS), Status { fence: 1, pttl_ms: Some(60), label: None });
    assert_eq!(lock.record(100 * MS).holder, None, "an expired lease travels as none");
}

#[test]
fn malformed_records_are_rejected() {
    let long = vec![0u8; MAX_TOKEN_LEN + 1];
    for rec in [
        Record { fence: MAX_FENCE + 1, holder: None },
        Record { fence: 1, holder: Some(Holding { token: &b""[..], remaining: 1, label: None }) },
        Record { fence: 1, holder: Some(Holding { token: &long[..], remaining: 1, label: None }) },
    ] {
        assert_eq!(Lock::from_record(&rec, 0), Err(LockError::BadRecord));
    }
}

#[test]
fn pttl_rounds_up_so_a_held_lease_never_shows_zero() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"a", None, 1, 0, 0));
    assert_eq!(lock.status(0).pttl_ms, Some(1));
}

fn semaphore(lock: &Lock, now: Micros) -> Vec<(u64, u64)> {
    let status = lock.semaphore_status(now).expect("a semaphore key");
    status.holders.iter().map(|h| (h.fence, h.remaining.as_millis() as u64)).collect()
}

#[test]
fn a_semaphore_admits_its_permits_each_with_its_own_fence() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    let mut take =
        |lock: &mut Lock, token: &[u8], now| lock.acquire_permit(&mut hw, token, None, 3, 100 * MS, now, 0);
    assert_eq!(take(&mut lock, b"a", 0), Ok(Acquired::Granted { fence: 1, took_over: false }));
    assert_eq!(take(&mut lock, b"b", MS), Ok(Acquired::Granted { fence: 2, took_over: false }));
    assert_eq!(take(&mut lock, b"a", 2 * MS), Ok(Acquired::Reentered { fence: 1 }), "its own fence");
    assert_eq!(take(&mut lock, b"c", 3 * MS), Ok(Acquired::Granted { fence: 3, took_over: false }));
    let before = lock.clone();
    assert_eq!(take(&mut lock, b"d", 4 * MS), Ok(Acquired::Busy));
    assert_eq!(lock, before, "a refusal changes nothing");
    assert_eq!(semaphore(&lock, 4 * MS), vec![(1, 98), (2, 97), (3, 99)]);
    assert_eq!(lock.fence_of(b"b", 4 * MS), Some(2));
    assert!(!lock.has_room(4 * MS) && lock.next_free(4 * MS) == Some(101 * MS));
    // One release frees one permit; the key's fence stays the highest.
    assert!(matches!(lock.release(b"b", 5 * MS), Released::Ended { span: Some(_) }));
    assert_eq!(lock.release(b"b", 5 * MS), Released::NotOwner);
    assert_eq!(take(&mut lock, b"d", 6 * MS), Ok(Acquired::Granted { fence: 4, took_over: false }));
    assert_eq!(take(&mut lock, b"e", 6 * MS), Ok(Acquired::Busy));
    // Expiry frees a permit too, and the grant that takes it over says so.
    assert!(lock.renew(b"a", 200 * MS, 6 * MS) && !lock.renew(b"e", 200 * MS, 6 * MS));
    assert_eq!(take(&mut lock, b"e", 103 * MS), Ok(Acquired::Granted { fence: 5, took_over: true }));
    assert_eq!(lock.release(b"c", 103 * MS), Released::NotOwner, "dropped by the grant that took it");
    assert_eq!(lock.release(b"d", 200 * MS), Released::Expired, "late, and told so");
    assert_eq!(semaphore(&lock, 103 * MS), vec![(1, 103), (4, 3), (5, 100)]);
    assert_eq!(lock.raise(&mut hw, b"a", 100, 103 * MS), None, "no raise on a semaphore");
    assert_eq!(lock.fence(), 5);
}

#[test]
fn a_held_key_refuses_another_count_and_an_idle_one_takes_it() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire_permit(&mut hw, b"a", None, 2, 100 * MS, 0, 0));
    let before = lock.clone();
    for (token, permits) in [(&b"b"[..], 1), (b"b", 3), (b"a", 3), (b"a", 1)] {
        let r = lock.acquire_permit(&mut hw, token, None, permits, 100 * MS, MS, 0);
        assert_eq!(r, Err(LockError::PermitsMismatch { permits: 2 }), "{token:?} {permits}");
    }
    assert_eq!(lock, before);
    // Idle: the next grant sets the count, a mutex here.
    assert!(matches!(lock.release(b"a", 2 * MS), Released::Ended { .. }));
    assert_eq!(lock.semaphore_status(2 * MS).map(|s| (s.permits, s.holders.len())), Some((2, 0)));
    granted(lock.acquire(&mut hw, b"c", None, 100 * MS, 3 * MS, 0));
    assert_eq!(lock.semaphore_status(3 * MS), None, "a mutex again");
    assert_eq!(lock.status(3 * MS).pttl_ms, Some(100));
    assert_eq!(
        lock.acquire_permit(&mut hw, b"d", None, 4, 100 * MS, 4 * MS, 0),
        Err(LockError::PermitsMismatch { permits: 1 })
    );
    // The mutex expires: a semaphore takes the key over, above its fence.
    let r = lock.acquire_permit(&mut hw, b"d", None, 4, 100 * MS, 103 * MS, 0);
    assert_eq!(r, Ok(Acquired::Granted { fence: 3, took_over: true }));
    assert_eq!(semaphore(&lock, 103 * MS), vec![(3, 100)]);
}

#[test]
fn a_semaphore_travels_whole_and_is_idle_after_its_last_holder() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire_permit(&mut hw, b"a", Some(b"w-a"), 3, 100 * MS, 0, 0));
    granted(lock.acquire_permit(&mut hw, b"b", None, 3, 50 * MS, 0, 0));
    let Snapshot::Semaphore(record) = lock.snapshot(10 * MS) else { panic!("a semaphore record") };
    assert_eq!((record.fence, record.permits, record.holders.len()), (2, 3, 2));
    let loaded = Lock::from_semaphore_record(record, 1_000 * MS).expect("loads");
    assert_eq!(semaphore(&loaded, 1_000 * MS), vec![(1, 90), (2, 40)]);
    assert_eq!(loaded.semaphore_status(1_000 * MS).unwrap().holders[0].label, Some(b"w-a".to_vec()));
    assert_eq!(loaded.clone().release(b"a", 1_001 * MS), Released::Ended { span: None }, "untimed");
    // Idle once the last holder left: its expiry here, then the release.
    assert!(!lock.reclaimable(99 * MS, 0));
    assert!(matches!(lock.release(b"a", 60 * MS), Released::Ended { .. }));
    assert_eq!(lock.idle_from(), 60 * MS);
    assert!(lock.reclaimable(60 * MS, 0) && !lock.reclaimable(60 * MS, MS));
    let mut expiries = Vec::new();
    lock.take_expiries(60 * MS, |e| expiries.push(e));
    assert_eq!(expiries, vec![Expired { lifetime: Some(50 * MS) }]);
    lock.take_expiries(70 * MS, |e| expiries.push(e));
    assert_eq!(expiries.len(), 1, "once");
    let Snapshot::Semaphore(record) = lock.snapshot(60 * MS) else { panic!("still a semaphore") };
    assert!(record.holders.is_empty());
    assert!(lock.copied().semaphore_status(0).is_some());
}

#[test]
fn a_mutex_value_stays_as_it_was() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, &[7; 16], None, 100 * MS, 0, 0));
    assert!(matches!(lock.snapshot(0), Snapshot::Mutex(_)));
    assert_eq!(lock.permits(), 1);
    assert_eq!(lock.holders().len(), 1);
}

/// A read lease (`SHARED`) of `token` for `ttl`, asked at `now`.
fn read(
    lock: &mut Lock,
    hw: &mut HighWater,
    token: &[u8],
    ttl: Micros,
    now: Micros,
) -> Result<Acquired, LockError> {
    lock.acquire_permit(hw, token, None, SHARED_PERMITS, ttl, now, 0)
}

#[test]
fn readers_hold_together_and_a_writer_only_alone_with_one_sequence_of_fences() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    assert_eq!(
        read(&mut lock, &mut hw, b"r1", 100 * MS, 0),
        Ok(Acquired::Granted { fence: 1, took_over: false })
    );
    assert_eq!(
        read(&mut lock, &mut hw, b"r2", 50 * MS, MS),
        Ok(Acquired::Granted { fence: 2, took_over: false })
    );
    assert_eq!(read(&mut lock, &mut hw, b"r1", 100 * MS, 2 * MS), Ok(Acquired::Reentered { fence: 1 }));
    let status = lock.semaphore_status(2 * MS).expect("read leases show as a semaphore");
    assert_eq!((status.permits, status.holders.len()), (SHARED_PERMITS, 2));
    // A writer waits for every reader, and its refusal changes nothing.
    let before = lock.clone();
    assert_eq!(lock.acquire(&mut hw, b"w", None, 100 * MS, 3 * MS, 0), Ok(Acquired::Busy));
    assert_eq!(lock, before);
    assert!(matches!(lock.release(b"r1", 4 * MS), Released::Ended { .. }));
    assert_eq!(lock.acquire(&mut hw, b"w", None, 100 * MS, 5 * MS, 0), Ok(Acquired::Busy), "r2 still reads");
    // r2 expires: the writer gets a fence above every reader's.
    let r = lock.acquire(&mut hw, b"w", None, 100 * MS, 51 * MS, 0);
    assert_eq!(r, Ok(Acquired::Granted { fence: 3, took_over: true }));
    assert_eq!(lock.semaphore_status(51 * MS), None, "a write lease is a mutex");
    // Readers wait for the writer.
    let before = lock.clone();
    assert_eq!(read(&mut lock, &mut hw, b"r3", 100 * MS, 52 * MS), Ok(Acquired::Busy));
    assert_eq!(lock, before);
    assert!(matches!(lock.release(b"w", 53 * MS), Released::Ended { .. }));
    assert_eq!(
        read(&mut lock, &mut hw, b"r3", 100 * MS, 54 * MS),
        Ok(Acquired::Granted { fence: 4, took_over: false })
    );
    assert_eq!(lock.raise(&mut hw, b"r3", 100, 54 * MS), None, "no raise on read leases");
}

#[test]
fn a_writer_downgrades_keeping_its_fence_and_a_reader_cannot_upgrade() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(read(&mut lock, &mut hw, b"x", 10 * MS, 0));
    assert!(matches!(lock.release(b"x", MS), Released::Ended { .. }));
    granted(lock.acquire(&mut hw, b"w", Some(b"old"), 100 * MS, 2 * MS, 0));
    assert_eq!(lock.fence(), 2);
    // The downgrade: same fence, fresh ttl, the new label; then readers come in above it.
    let r = lock.acquire_for(
        &mut hw,
        &Ask { token: b"w", label: Some(b"new"), permits: SHARED_PERMITS, ttl: 30 * MS, queued_ahead: true },
        10 * MS,
        0,
    );
    assert_eq!(r, Ok(Acquired::Reentered { fence: 2 }), "a downgrade goes ahead of the queue too");
    let status = lock.semaphore_status(10 * MS).expect("now read leases");
    assert_eq!((status.holders[0].fence, status.holders[0].remaining.as_millis()), (2, 30));
    assert_eq!(status.holders[0].label.as_deref(), Some(&b"new"[..]));
    assert_eq!(
        read(&mut lock, &mut hw, b"r", 100 * MS, 11 * MS),
        Ok(Acquired::Granted { fence: 3, took_over: false })
    );
    // No upgrade, whether others read or not; nothing changes.
    let before = lock.clone();
    assert_eq!(lock.acquire(&mut hw, b"w", None, 100 * MS, 12 * MS, 0), Err(LockError::UpgradeRefused));
    assert!(matches!(lock.release(b"r", 13 * MS), Released::Ended { .. }));
    let alone = lock.clone();
    assert_eq!(lock.acquire(&mut hw, b"w", None, 100 * MS, 14 * MS, 0), Err(LockError::UpgradeRefused));
    assert_eq!(lock, alone);
    assert_ne!(lock, before);
    // Another writer's token cannot downgrade what it does not hold.
    assert!(matches!(lock.release(b"w", 15 * MS), Released::Ended { .. }));
    granted(lock.acquire(&mut hw, b"w2", None, 100 * MS, 16 * MS, 0));
    assert_eq!(read(&mut lock, &mut hw, b"w", 100 * MS, 17 * MS), Ok(Acquired::Busy));
}

#[test]
fn read_leases_and_semaphores_refuse_each_other() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(read(&mut lock, &mut hw, b"r", 100 * MS, 0));
    let before = lock.clone();
    for permits in [2, 5] {
        let r = lock.acquire_permit(&mut hw, b"s", None, permits, 100 * MS, MS, 0);
        assert_eq!(r, Err(LockError::PermitsMismatch { permits: SHARED_PERMITS }));
    }
    assert_eq!(lock, before);
    assert!(matches!(lock.release(b"r", 2 * MS), Released::Ended { .. }));
    granted(lock.acquire_permit(&mut hw, b"s", None, 3, 100 * MS, 3 * MS, 0));
    assert_eq!(
        read(&mut lock, &mut hw, b"r", 100 * MS, 4 * MS),
        Err(LockError::PermitsMismatch { permits: 3 })
    );
    assert_eq!(
        read(&mut lock, &mut hw, b"s", 100 * MS, 4 * MS),
        Err(LockError::PermitsMismatch { permits: 3 })
    );
}

#[test]
fn a_fresh_grant_does_not_pass_the_queue_but_holders_go_on() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(read(&mut lock, &mut hw, b"r1", 100 * MS, 0));
    let ask = |token: &'static [u8], permits| Ask {
        token,
        label: None,
        permits,
        ttl: 100 * MS,
        queued_ahead: true,
    };
    let before = lock.clone();
    assert_eq!(lock.acquire_for(&mut hw, &ask(b"r2", SHARED_PERMITS), MS, 0), Ok(Acquired::Busy));
    assert_eq!(lock, before, "a reader behind a waiting writer is refused");
    assert_eq!(
        lock.acquire_for(&mut hw, &ask(b"r1", SHARED_PERMITS), MS, 0),
        Ok(Acquired::Reentered { fence: 1 })
    );
    // On an idle key too: whoever waits was there first.
    assert!(matches!(lock.release(b"r1", 2 * MS), Released::Ended { .. }));
    assert_eq!(lock.acquire_for(&mut hw, &ask(b"w", 1), 3 * MS, 0), Ok(Acquired::Busy));
    // The restart grace still says so first.
    assert!(matches!(
        lock.acquire_for(&mut hw, &ask(b"w", 1), 3 * MS, MS),
        Err(LockError::RestartGrace { .. })
    ));
}

#[test]
fn read_leases_travel_whole() {
    let (mut lock, mut hw) = (Lock::new(), HighWater::default());
    granted(lock.acquire(&mut hw, b"w", None, 100 * MS, 0, 0));
    assert_eq!(read(&mut lock, &mut hw, b"w", 100 * MS, MS), Ok(Acquired::Reentered { fence: 1 }));
    granted(read(&mut lock, &mut hw, b"r", 50 * MS, 2 * MS));
    let Snapshot::Semaphore(record) = lock.snapshot(10 * MS) else {
        panic!("read leases travel as a semaphore")
    };
    assert_eq!((record.fence, record.permits, record.holders.len()), (2, SHARED_PERMITS, 2));
    let mut loaded = Lock::from_semaphore_record(record, 1_000 * MS).expect("loads");
    assert_eq!(semaphore(&loaded, 1_000 * MS), vec![(1, 91), (2, 42)]);
    assert_eq!(loaded.acquire(&mut hw, b"x", None, 100 * MS, 1_000 * MS, 0), Ok(Acquired::Busy));
    assert_eq!(
        read(&mut loaded, &mut hw, b"x", 100 * MS, 1_000 * MS),
        Ok(Acquired::Granted { fence: 3, took_over: false })
    );
}

/// Random interleavings of every operation by three clients over a moving clock: grants
/// strictly increase, a refused or stale caller changes nothing, and at most one token
/// holds a live lease at any time. For the metrics: every lease's end is reported once (by
/// its release or by the first look at its expiry, which ACQUIRE takes before deciding, as
/// the command does), with the times the model expects, and none for a reloaded lease.
mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Client, ttl, and the label it asks with (an index into `LABELS`), if any.
        Acquire(usize, u64, Option<usize>),
        Renew(usize, u64),
        Release(usize),
        Raise(usize, u64),
        Advance(u64),
        Reload,
        /// A look at the lease that counts its expiry (a refused RENEW, the reclaim, ...).
        Observe,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize, 1..50u64, proptest::option::of(0..2usize)).prop_map(|(c, t, l)| Op::Acquire(c, t, l)),
            (0..3usize, 1..50u64).prop_map(|(c, t)| Op::Renew(c, t)),
            (0..3usize).prop_map(Op::Release),
            (0..3usize, 0..100u64).prop_map(|(c, f)| Op::Raise(c, f)),
            (0..40u64).prop_map(Op::Advance),
            Just(Op::Reload),
            Just(Op::Observe),
        ]
    }

    proptest! {
        #[test]
        fn leases_and_fences_stay_sound(ops in proptest::collection::vec(op(), 1..200)) {
            let tokens: [&[u8]; 3] = [b"a", b"b", b"c"];
            let labels: [&[u8]; 2] = [b"a", b"node-2"];
            let (mut lock, mut hw, mut now) = (Lock::new(), HighWater::default(), 0u64);
            let mut last_grant = 0u64;
            // The lease as the model sees it: its end is reported once, when it is released
            // or when its expiry is first observed; `granted` is `None` once reloaded.
            #[derive(Clone, Copy)]
            struct Model { client: usize, deadline: u64, granted: Option<u64>, reported: bool, label: Option<usize> }
            let mut holder: Option<Model> = None;
            // What `take_expiry` must say now, and the model's bookkeeping of it.
            fn observe(lock: &mut Lock, holder: &mut Option<Model>, now: u64) -> Result<(), TestCaseError> {
                let due = holder.filter(|h| now >= h.deadline && !h.reported);
                let want = due.map(|h| Expired { lifetime: h.granted.map(|g| h.deadline - g) });
                prop_assert_eq!(lock.take_expiry(now), want);
                if let Some(h) = holder.as_mut().filter(|_| due.is_some()) {
                    h.reported = true;
                }
                Ok(())
            }
            for op in ops {
                let live = holder.filter(|h| now < h.deadline).map(|h| h.client);
                match op {
                    Op::Acquire(c, t, l) => {
                        observe(&mut lock, &mut holder, now)?;
                        let before = lock.clone();
                        match lock.acquire(&mut hw, tokens[c], l.map(|l| labels[l]), t * MS, now, 0).unwrap() {
                            Acquired::Granted { fence, .. } => {
                                prop_assert!(live.is_none());
                                prop_assert!(fence > last_grant && fence > 0);
                                prop_assert!(holder.is_none_or(|h| h.reported), "the lease it replaces was counted");
                                last_grant = fence;
                                holder = Some(Model { client: c, deadline: now + t * MS, granted: Some(now), reported: false, label: l });
                            }
                            Acquired::Reentered { fence } => {
                                prop_assert_eq!(live, Some(c));
                                prop_assert_eq!(fence, lock.fence());
                                // A re-entry with a label replaces the lease's, without keeps it.
                                holder = holder.map(|h| Model { deadline: now + t * MS, label: l.or(h.label), ..h });
                            }
                            Acquired::Busy => {
                                prop_assert!(live.is_some() && live != Some(c));
                                prop_assert_eq!(&lock, &before, "a refusal changes nothing, the label included");
                            }
                        }
                    }
                    Op::Renew(c, t) => {
                        let ok = lock.renew(tokens[c], t * MS, now);
                        prop_assert_eq!(ok, live == Some(c));
                        if ok {
                            holder = holder.map(|h| Model { deadline: now + t * MS, ..h });
                        }
                    }
                    Op::Release(c) => {
                        let r = lock.release(tokens[c], now);
                        prop_assert_eq!(matches!(r, Released::Ended { .. }), live == Some(c));
                        if let (Released::Ended { span }, Some(h)) = (r, holder) {
                            let want = h.granted.map(|g| Span { held: now - g, given: h.deadline - g });
                            prop_assert_eq!(span, want);
                            prop_assert!(span.is_none_or(|s| s.held < s.given));
                            holder = None;
                        }
                    }
                    Op::Observe => observe(&mut lock, &mut holder, now)?,
                    Op::Raise(c, f) => {
                        let before = lock.fence();
                        match lock.raise(&mut hw, tokens[c], f, now) {
                            Some(raised) => {
                                prop_assert_eq!(live, Some(c));
                                prop_assert_eq!(raised, before.max(f));
                                last_grant = last_grant.max(raised);
                            }
                            None => prop_assert_eq!(lock.fence(), before),
                        }
                    }
                    Op::Advance(ms) => now += ms * MS,
                    Op::Reload => {
                        let rec = lock.record(now);
                        let sent = rec.holder.map(|h| (h.token.to_vec(), h.remaining, h.label.map(<[u8]>::to_vec)));
                        let holding = sent.as_ref().map(|(token, remaining, label)| Holding {
                            token,
                            remaining: *remaining,
                            label: label.as_deref(),
                        });
                        let reloaded = Lock::from_record(&Record { fence: rec.fence, holder: holding }, now);
                        // A key that was never granted is never stored, so never loaded.
                        if lock.fence() == 0 {
                            prop_assert_eq!(reloaded, Err(LockError::BadRecord));
                            continue;
                        }
                        lock = reloaded.unwrap();
                        // An expired lease travels as none; a live one without its grant time.
                        holder = holder
                            .filter(|h| now < h.deadline)
                            .map(|h| Model { granted: None, ..h });
                    }
                }
                prop_assert!(hw.get() >= lock.fence());
                let live = holder.filter(|h| now < h.deadline);
                prop_assert_eq!(lock.status(now).pttl_ms.is_some(), live.is_some());
                // The label is the live lease's, and it travels with it; the token is intact.
                let label = live.and_then(|h| h.label).map(|l| labels[l]);
                prop_assert_eq!(lock.status(now).label, label);
                prop_assert_eq!(lock.record(now).holder.and_then(|h| h.label), label);
                if let Some(h) = live {
                    prop_assert!(lock.held_by(tokens[h.client], now));
                    prop_assert_eq!(lock.token(), Some(tokens[h.client]));
                }
            }
        }

        /// A semaphore under random interleavings of five clients asking with its count or
        /// another: never more unexpired holders than permits, grants' fences strictly
        /// increase, each holder keeps its fence, mismatches and refusals change nothing,
        /// and what STATUS and the record show is the model's holder set.
        #[test]
        fn semaphores_stay_sound(
            permits in 2..5u32,
            ops in proptest::collection::vec(
                prop_oneof![
                    (0..5usize, 1..50u64, any::<bool>()).prop_map(|(c, t, same)| (0u8, c, t, same)),
                    (0..5usize, 1..50u64).prop_map(|(c, t)| (1u8, c, t, true)),
                    (0..5usize).prop_map(|c| (2u8, c, 0, true)),
                    (0..40u64).prop_map(|t| (3u8, 0, t, true)),
                    Just((4u8, 0, 0, true)),
                ],
                1..200,
            ),
        ) {
            let tokens: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
            let (mut lock, mut hw, mut now, mut last_grant) = (Lock::new(), HighWater::default(), 0u64, 0u64);
            // Client → (fence, deadline) of its permit, live or expired.
            let mut model: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
            let mut count: Option<u32> = None;
            for (kind, c, t, same) in ops {
                let live: Vec<usize> = model.iter().filter(|(_, (_, d))| now < *d).map(|(c, _)| *c).collect();
                match kind {
                    0 => {
                        let asked = if same { permits } else { permits + 1 };
                        let before = lock.clone();
                        match lock.acquire_permit(&mut hw, tokens[c], None, asked, t * MS, now, 0) {
                            Err(LockError::PermitsMismatch { permits: held_with }) => {
                                prop_assert!(!live.is_empty());
                                prop_assert_eq!(Some(held_with), count);
                                prop_assert_ne!(held_with, asked);
                                prop_assert_eq!(&lock, &before);
                            }
                            Err(e) => prop_assert!(false, "{e:?}"),
                            Ok(Acquired::Busy) => {
                                prop_assert_eq!(live.len() as u32, asked);
                                prop_assert!(!live.contains(&c));
                                prop_assert_eq!(&lock, &before);
                            }
                            Ok(Acquired::Reentered { fence }) => {
                                prop_assert!(live.contains(&c));
                                prop_assert_eq!(Some(fence), model.get(&c).map(|p| p.0));
                                model.insert(c, (fence, now + t * MS));
                            }
                            Ok(Acquired::Granted { fence, .. }) => {
                                prop_assert!(!live.contains(&c) && (live.len() as u32) < asked);
                                prop_assert!(fence > last_grant);
                                last_grant = fence;
                                if live.is_empty() {
                                    count = Some(asked);
                                }
                                model.retain(|_, (_, d)| now < *d);
                                model.insert(c, (fence, now + t * MS));
                            }
                        }
                    }
                    1 => {
                        let ok = lock.renew(tokens[c], t * MS, now);
                        prop_assert_eq!(ok, live.contains(&c));
                        if ok {
                            model.entry(c).and_modify(|p| p.1 = now + t * MS);
                        }
                    }
                    2 => {
                        let r = lock.release(tokens[c], now);
                        prop_assert_eq!(matches!(r, Released::Ended { .. }), live.contains(&c));
                        if matches!(r, Released::Ended { .. }) {
                            model.remove(&c);
                        }
                    }
                    3 => now += t * MS,
                    _ => {
                        let loaded = match lock.snapshot(now) {
                            Snapshot::Mutex(record) => Lock::from_record(&record, now),
                            Snapshot::Semaphore(record) => {
                                let blob = crate::lock::layout::encode_holders(&record.holders);
                                let holders = crate::lock::layout::decode_holders(&blob).expect("own blob");
                                let record = SemaphoreRecord { holders, ..record };
                                Lock::from_semaphore_record(record, now)
                            }
                        };
                        // A key that was never granted is never stored, so never loaded.
                        if lock.fence() == 0 {
                            prop_assert_eq!(loaded, Err(LockError::BadRecord));
                            continue;
                        }
                        lock = loaded.expect("a record we wrote loads");
                        model.retain(|_, (_, d)| now < *d);
                    }
                }
                let live: Vec<(u64, u64)> = model.values().filter(|(_, d)| now < *d).map(|(f, d)| (*f, (d - now).div_ceil(1000))).collect();
                let mut live = live;
                live.sort();
                prop_assert!(live.len() as u32 <= count.unwrap_or(0).max(1));
                prop_assert!(hw.get() >= lock.fence());
                prop_assert_eq!(lock.is_held(now), !live.is_empty());
                if let Some(status) = lock.semaphore_status(now) {
                    let shown: Vec<(u64, u64)> = status.holders.iter().map(|h| (h.fence, h.remaining.as_millis() as u64)).collect();
                    prop_assert_eq!(&shown, &live);
                    prop_assert!(status.holders.len() as u32 <= status.permits);
                } else {
                    // Only a count of 1 makes a mutex, and this test never asks for one.
                    prop_assert!(live.is_empty() && lock.fence() == 0);
                }
                for (c, token) in tokens.iter().enumerate() {
                    let want = model.get(&c).filter(|(_, d)| now < *d).map(|(f, _)| *f);
                    prop_assert_eq!(lock.fence_of(token, now), want);
                }
            }
        }

        /// Read and write leases of four clients under random interleavings: a writer holds
        /// alone, readers only together, every grant's fence is above every earlier one (across
        /// modes), a downgrade keeps the fence, an upgrade is refused, refusals change nothing,
        /// and STATUS and a reload show the model's holders.
        #[test]
        fn read_write_locks_stay_sound(
            ops in proptest::collection::vec(
                prop_oneof![
                    (0..4usize, 1..50u64, any::<bool>()).prop_map(|(c, t, shared)| (0u8, c, t, shared)),
                    (0..4usize, 1..50u64).prop_map(|(c, t)| (1u8, c, t, false)),
                    (0..4usize).prop_map(|c| (2u8, c, 0, false)),
                    (0..40u64).prop_map(|t| (3u8, 0, t, false)),
                    Just((4u8, 0, 0, false)),
                ],
                1..200,
            ),
        ) {
            let tokens: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
            let (mut lock, mut hw, mut now, mut last_grant) = (Lock::new(), HighWater::default(), 0u64, 0u64);
            // Client → (shared, fence, deadline) of its lease, live or expired.
            let mut model: std::collections::BTreeMap<usize, (bool, u64, u64)> = Default::default();
            for (kind, c, t, shared) in ops {
                let live = |model: &std::collections::BTreeMap<usize, (bool, u64, u64)>, now| {
                    model.iter().filter(|(_, l)| now < l.2).map(|(c, l)| (*c, *l)).collect::<Vec<_>>()
                };
                let held = live(&model, now);
                let mine = held.iter().find(|(h, _)| *h == c).map(|(_, l)| *l);
                let others_write = held.iter().any(|(h, l)| *h != c && !l.0);
                match kind {
                    0 => {
                        let permits = if shared { SHARED_PERMITS } else { 1 };
                        let before = lock.clone();
                        let r = lock.acquire_permit(&mut hw, tokens[c], None, permits, t * MS, now, 0);
                        match (mine, r) {
                            (Some((true, _, _)), Err(LockError::UpgradeRefused)) if !shared => {
                                prop_assert_eq!(&lock, &before);
                            }
                            (Some((_, fence, _)), Ok(Acquired::Reentered { fence: got })) => {
                                prop_assert_eq!(got, fence);
                                model.insert(c, (shared, fence, now + t * MS));
                            }
                            (None, Ok(Acquired::Busy)) => {
                                let kept_out = if shared { others_write } else { !held.is_empty() };
                                prop_assert!(kept_out);
                                prop_assert_eq!(&lock, &before);
                            }
                            (None, Ok(Acquired::Granted { fence, .. })) => {
                                let room = if shared { !others_write } else { held.is_empty() };
                                prop_assert!(room);
                                prop_assert!(fence > last_grant);
                                last_grant = fence;
                                model.retain(|_, l| now < l.2);
                                model.insert(c, (shared, fence, now + t * MS));
                            }
                            (mine, r) => prop_assert!(false, "{mine:?} asking shared={shared}: {r:?}"),
                        }
                    }
                    1 => {
                        let ok = lock.renew(tokens[c], t * MS, now);
                        prop_assert_eq!(ok, mine.is_some());
                        if ok {
                            model.entry(c).and_modify(|l| l.2 = now + t * MS);
                        }
                    }
                    2 => {
                        let r = lock.release(tokens[c], now);
                        prop_assert_eq!(matches!(r, Released::Ended { .. }), mine.is_some());
                        if mine.is_some() {
                            model.remove(&c);
                        }
                    }
                    3 => now += t * MS,
                    _ => {
                        if lock.fence() > 0 {
                            lock = Lock::from_snapshot(lock.snapshot(now), now).expect("a record we wrote loads");
                            model.retain(|_, l| now < l.2);
                        }
                    }
                }
                let held = live(&model, now);
                let writers = held.iter().filter(|(_, l)| !l.0).count();
                prop_assert!(writers == 0 || held.len() == 1, "a writer holds alone: {held:?}");
                match lock.semaphore_status(now) {
                    Some(status) => {
                        prop_assert_eq!(status.permits, SHARED_PERMITS);
                        prop_assert_eq!(writers, 0);
                        let mut want: Vec<u64> = held.iter().map(|(_, l)| l.1).collect();
                        want.sort();
                        let shown: Vec<u64> = status.holders.iter().map(|h| h.fence).collect();
                        prop_assert_eq!(shown, want);
                    }
                    None => prop_assert!(held.iter().all(|(_, l)| !l.0)),
                }
                for (c, token) in tokens.iter().enumerate() {
                    let want = model.get(&c).filter(|l| now < l.2).map(|l| l.1);
                    prop_assert_eq!(lock.fence_of(token, now), want);
                }
                prop_assert!(hw.get() >= lock.fence());
            }
        }

        /// The RDB loader's decisions: any field values either rebuild a lock or are refused.
        #[test]
        fn any_record_is_loaded_or_refused(
            fence in any::<u64>(),
            token in proptest::collection::vec(any::<u8>(), 0..600),
            remaining in prop_oneof![any::<u64>(), 0..=3u64, validate::LONGEST_LEASE - 2..=validate::LONGEST_LEASE + 2],
            has_holder in any::<bool>(),
            label in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        ) {
            let holding = Holding { token: &token, remaining, label: label.as_deref() };
            let rec = Record { fence, holder: has_holder.then_some(holding) };
            let label_ok = label.as_deref().is_none_or(|l| (1..=MAX_LABEL_LEN).contains(&l.len()));
            let lease_ok = (1..=validate::LONGEST_LEASE).contains(&remaining);
            let token_ok = (1..=MAX_TOKEN_LEN).contains(&token.len());
            let valid = (1..=MAX_FENCE).contains(&fence) && (!has_holder || (token_ok && label_ok && lease_ok));
            prop_assert_eq!(Lock::from_record(&rec, 5).is_ok(), valid);
        }
    }
}
