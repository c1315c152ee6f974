//! The lease metrics of `INFO fencedlock` (issue #12) on real servers: known hold times land in
//! their buckets, hold time as a share of the lease, expiries counted once by whichever command
//! sees them first (late release, takeover, handoff at the deadline, reclaim), leases the server
//! did not grant kept out of the distributions, a replica's counters, and `CONFIG RESETSTAT`.
//!
//! Times are checked without trusting sleeps: a lease held by a client that slept `s` between
//! the grant's reply and sending its release was held longer than `s` on the server and no
//! longer than the client saw from sending the ACQUIRE to the RELEASE's reply. So for every
//! bucket bound `b`, the cumulative count is at least the leases certainly ≤ `b` and at most
//! those that may be ≤ `b`; on an idle machine the two meet and the check is exact.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fencedlock_protocol::config::RECLAIM_AFTER_MS;

use crate::support::*;
use harness::{poll, redis, Server};

/// One distribution as `INFO` shows it.
#[derive(Debug)]
struct Dist {
    /// `le_<bound>` → cumulative count, by bound (`u64::MAX` for `le_inf`).
    le: BTreeMap<u64, u64>,
    count: u64,
    sum: u64,
    max: u64,
    p50: u64,
    p90: u64,
    p99: u64,
}

impl Dist {
    fn le(&self, bound: u64) -> u64 {
        *self.le.get(&bound).unwrap_or_else(|| panic!("no le_{bound} in {self:?}"))
    }

    /// For every bound: at least the values whose range lies at or below it, at most those
    /// whose range starts below it. `ranges` are (exclusive low, inclusive high).
    fn assert_within(&self, what: &str, ranges: &[(u64, u64)]) {
        for (&bound, &cum) in &self.le {
            let surely = ranges.iter().filter(|(_, hi)| *hi <= bound).count() as u64;
            let maybe = ranges.iter().filter(|(lo, _)| *lo < bound).count() as u64;
            assert!(
                (surely..=maybe).contains(&cum),
                "{what}: le_{bound}={cum}, expected {surely}..={maybe} for {ranges:?}: {self:?}"
            );
        }
        assert_eq!(self.count, ranges.len() as u64, "{what}: count: {self:?}");
    }
}

/// A `fencedlock_<name>` dict field; panics if it is missing or malformed.
fn dist(s: &Server, name: &str) -> Dist {
    let field = format!("fencedlock_{name}");
    let text =
        info(s).remove(&field).unwrap_or_else(|| panic!("INFO fencedlock on {} has no {field}", s.addr()));
    let mut le = BTreeMap::new();
    let mut other = BTreeMap::new();
    for pair in text.split(',') {
        let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{field}: bad entry {pair:?} in {text}"));
        let v: u64 = v.parse().unwrap_or_else(|_| panic!("{field}: {k}={v} is not a number"));
        match k.strip_prefix("le_") {
            Some("inf") => le.insert(u64::MAX, v),
            Some(b) => le.insert(b.parse().unwrap_or_else(|_| panic!("{field}: bad bound {k}")), v),
            None => other.insert(k.to_string(), v),
        };
    }
    let get = |k: &str| *other.get(k).unwrap_or_else(|| panic!("{field} has no {k}: {text}"));
    let d = Dist {
        count: get("count"),
        sum: get("sum"),
        max: get("max"),
        p50: get("p50"),
        p90: get("p90"),
        p99: get("p99"),
        le,
    };
    assert!(d.le.values().is_sorted(), "{field}: cumulative counts never decrease: {text}");
    assert_eq!(d.le(u64::MAX), d.count, "{field}: le_inf is the count: {text}");
    d
}

fn counter(s: &Server, name: &str) -> u64 {
    s.fencedlock_counter(&format!("fencedlock_{name}"))
}

fn ms(d: Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}

/// One lease held for a while: the client's bounds on how long the server saw it held.
struct Held {
    key: String,
    token: Vec<u8>,
    sent: Instant,
    sleep: Duration,
}

impl Held {
    fn grant(s: &Server, key: &str, ttl_ms: u64, sleep_ms: u64) -> Held {
        let sent = Instant::now();
        let token = format!("tok-{key}").into_bytes();
        grant(s, key, &token, ttl_ms);
        Held { key: key.into(), token, sent, sleep: Duration::from_millis(sleep_ms) }
    }

    /// Releases it once its sleep has passed since the grant's reply; the hold in ms as an
    /// (exclusive low, inclusive high) range.
    fn release_after(&self, s: &Server, granted: Instant) -> (u64, u64) {
        std::thread::sleep((granted + self.sleep).saturating_duration_since(Instant::now()));
        assert_eq!(release(s, &self.key, &self.token), 1, "{} released in time", self.key);
        (self.sleep.as_millis() as u64, ms(self.sent.elapsed()))
    }
}

#[test]
fn known_hold_times_land_in_their_buckets() {
    let s = Server::start();
    let released0 = counter(&s, "leases_released");
    const TTL: u64 = 1000;
    // Three short holds and two long ones, all granted together.
    let plan = [("m:s1", 50), ("m:s2", 50), ("m:s3", 50), ("m:l1", 300), ("m:l2", 300)];
    let leases: Vec<(Held, Instant)> =
        plan.iter().map(|(k, sleep)| (Held::grant(&s, k, TTL, *sleep), Instant::now())).collect();
    let holds: Vec<(u64, u64)> = leases.iter().map(|(h, at)| h.release_after(&s, *at)).collect();
    assert!(holds.iter().all(|(_, hi)| *hi < TTL), "the machine stalled past the ttl: {holds:?}");

    assert_eq!(counter(&s, "leases_released"), released0 + 5);
    assert_eq!(counter(&s, "leases_expired"), 0);
    let hold = dist(&s, "hold_time_ms");
    hold.assert_within("hold_time_ms", &holds);
    assert_eq!(hold.le(50), 0, "every hold was longer than 50 ms");
    assert!(hold.le(200) <= 3, "the long holds were longer than 300 ms: {hold:?}");
    let (lo_sum, hi_sum): (u64, u64) = holds.iter().fold((0, 0), |(a, b), (lo, hi)| (a + lo, b + hi));
    assert!((lo_sum..=hi_sum).contains(&hold.sum), "sum {} not in {lo_sum}..={hi_sum}", hold.sum);
    let long_hi = holds[3..].iter().map(|(_, hi)| *hi).max().unwrap_or(0);
    assert!((300..=long_hi).contains(&hold.max), "max {} not in 300..={long_hi}", hold.max);
    // The 3rd of 5 is a short hold: its bucket's edge, at least the hold itself.
    let short_hi = holds[..3].iter().map(|(_, hi)| *hi).max().unwrap_or(0);
    assert!(hold.p50 > 50 && hold.p50 <= bucket_edge(&hold, short_hi), "p50 {}: {hold:?}", hold.p50);
    assert_eq!((hold.p90, hold.p99), (hold.max, hold.max), "the 5th of 5 is the longest: {hold:?}");

    // The share of a 1000 ms lease: (sleep/10 %, high/10 %], rounded up to whole percents.
    let share = dist(&s, "hold_share_pct");
    let shares: Vec<(u64, u64)> =
        holds.iter().map(|(lo, hi)| (lo * 100 / TTL, (hi * 100).div_ceil(TTL))).collect();
    share.assert_within("hold_share_pct", &shares);
    assert_eq!(
        (share.le(25), share.le(100)),
        (3, 5),
        "more than 30 % for the long ones, never past 100 %: {share:?}"
    );

    // No expiry yet, and CONFIG RESETSTAT leaves the module's fields alone (documented).
    assert_eq!(dist(&s, "expired_lifetime_ms").count, 0);
    let _: () = s.cmd(&["CONFIG", "RESETSTAT"]).unwrap();
    assert_eq!(counter(&s, "leases_released"), released0 + 5);
    assert_eq!(dist(&s, "hold_time_ms").count, 5);
}

/// The smallest bound at or above `v` (the bucket a value `v` lands in).
fn bucket_edge(d: &Dist, v: u64) -> u64 {
    d.le.keys().copied().find(|&b| b >= v).unwrap_or(u64::MAX)
}

#[test]
fn a_renewed_lease_is_one_lease_from_its_grant() {
    let s = Server::start();
    // Held 100 ms of a 200 ms lease, renewed for 1000 ms, held 100 ms more, released.
    let h = Held::grant(&s, "m:renewed", 200, 0);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(renew(&s, "m:renewed", &h.token, 1000), 1, "renewed within 200 ms");
    let renewed = Instant::now();
    let renewed_by = ms(renewed - h.sent);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(release(&s, "m:renewed", &h.token), 1, "released within the renewed lease");
    let held_by = ms(h.sent.elapsed());
    assert!(held_by < 1100, "the machine stalled past the lease: {held_by} ms");
    // Held from the grant, not from the renewal: more than 200 ms.
    dist(&s, "hold_time_ms").assert_within("hold_time_ms", &[(200, held_by)]);
    // Of a lease given from the grant to the renewed deadline: (1100 ms, renewed_by + 1000].
    let share = (200 * 100 / (1000 + renewed_by), (held_by * 100).div_ceil(1100));
    dist(&s, "hold_share_pct").assert_within("hold_share_pct", &[share]);
    assert_eq!(counter(&s, "leases_expired"), 0, "a renewed lease released in time did not expire");
}

#[test]
fn an_expiry_is_counted_once_whoever_sees_it_first() {
    let s = Server::start();
    let takeovers0 = counter(&s, "takeovers");
    // 1. A late release sees it; the takeover after it does not count it again.
    grant(&s, "m:late", b"a", 100);
    wait_expired(&s, "m:late");
    assert_eq!(release(&s, "m:late", b"a"), 0, "a late release");
    assert_eq!(counter(&s, "leases_expired"), 1);
    grant(&s, "m:late", b"b", LONG_TTL);
    assert_eq!(counter(&s, "leases_expired"), 1, "counted once");
    // 2. A takeover sees it.
    grant(&s, "m:taken", b"a", 200);
    wait_expired(&s, "m:taken");
    grant(&s, "m:taken", b"b", LONG_TTL);
    assert_eq!(counter(&s, "leases_expired"), 2);
    // 3. A refused renewal sees it; the holder's own new grant after it does not count it again.
    grant(&s, "m:renew", b"a", 300);
    wait_expired(&s, "m:renew");
    assert_eq!(renew(&s, "m:renew", b"a", 1000), 0);
    assert_eq!(counter(&s, "leases_expired"), 3);
    grant(&s, "m:renew", b"a", LONG_TTL);
    assert_eq!(counter(&s, "leases_expired"), 3, "counted once");
    // A live lease is nobody's expiry.
    assert_eq!(acquire(&s, "m:renew", b"x", LONG_TTL), None);
    assert_eq!(release(&s, "m:renew", b"x"), 0);
    assert_eq!(counter(&s, "leases_expired"), 3);

    assert_eq!(counter(&s, "takeovers"), takeovers0 + 2, "m:late and m:taken changed owner");
    assert_eq!(counter(&s, "leases_released"), 0);
    // Lifetimes are exact: grant to deadline, on the server's clock.
    let life = dist(&s, "expired_lifetime_ms");
    assert_eq!(
        (life.le(50), life.le(100), life.le(200), life.le(500), life.count),
        (0, 1, 2, 3, 3),
        "{life:?}"
    );
    assert_eq!((life.sum, life.max, life.p50, life.p99), (600, 300, 200, 300), "{life:?}");
    assert_eq!(dist(&s, "hold_time_ms").count, 0, "no lease was released in time");
}

#[test]
fn a_handoff_at_the_deadline_counts_the_expiry() {
    let s = Server::start();
    // Long enough that the waiter is queued before the deadline even on a loaded machine.
    grant(&s, "m:handoff", b"holder", 300);
    let mut waiter = s.queue_acquire("m:handoff", b"waiter", LONG_TTL, 5000);
    let reply = waiter.reply(Duration::from_secs(5));
    assert!(reply.fence() > 1, "the waiter was granted at the deadline");
    assert_eq!(counter(&s, "handoffs"), 1);
    assert_eq!(counter(&s, "leases_expired"), 1);
    let life = dist(&s, "expired_lifetime_ms");
    assert_eq!((life.le(200), life.le(500), life.count, life.max), (0, 1, 1, 300), "{life:?}");
    // The waiter's own lease is timed from the handoff.
    let _: i64 =
        redis::cmd("FENCEDLOCK.RELEASE").arg("m:handoff").arg("waiter").query(waiter.conn()).unwrap();
    assert_eq!(counter(&s, "leases_released"), 1);
    assert_eq!(dist(&s, "hold_time_ms").count, 1);
    assert_eq!(counter(&s, "leases_expired"), 1);
}

#[test]
fn an_expiry_nobody_saw_is_counted_when_its_key_is_reclaimed() {
    let s = Server::start();
    s.config_set(RECLAIM_AFTER_MS.full_name, "0");
    grant(&s, "m:forgotten", b"a", 100);
    poll("m:forgotten to be reclaimed", Duration::from_secs(5), || !s.exists("m:forgotten"));
    assert_eq!(counter(&s, "reclaimed"), 1);
    assert_eq!(counter(&s, "leases_expired"), 1);
    let life = dist(&s, "expired_lifetime_ms");
    assert_eq!((life.le(100), life.count), (1, 1), "{life:?}");
    // A released key reclaimed later counts nothing more.
    grant(&s, "m:released", b"a", LONG_TTL);
    assert_eq!(release(&s, "m:released", b"a"), 1);
    poll("m:released to be reclaimed", Duration::from_secs(5), || !s.exists("m:released"));
    assert_eq!((counter(&s, "leases_expired"), counter(&s, "leases_released")), (1, 1));
}

#[test]
fn deleting_a_held_lease_is_not_a_lease_ending() {
    let s = Server::start();
    grant(&s, "m:del", b"a", 100);
    let _: i64 = s.cmd(&["DEL", "m:del"]).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    grant(&s, "m:del", b"b", LONG_TTL);
    assert_eq!((counter(&s, "leases_expired"), counter(&s, "leases_released")), (0, 0));
}

#[test]
fn leases_the_server_did_not_grant_stay_out_of_the_distributions() {
    let p = Server::start();
    let r = p.start_replica();
    p.wait_for_replicas(1, Duration::from_secs(5));
    // On the primary: one release, one expiry (seen by a takeover), one lease left held.
    grant(&p, "m:rel", b"a", LONG_TTL);
    assert_eq!(release(&p, "m:rel", b"a"), 1);
    grant(&p, "m:exp", b"a", 100);
    wait_expired(&p, "m:exp");
    grant(&p, "m:exp", b"b", LONG_TTL);
    grant(&p, "m:held", b"h", LONG_TTL);
    p.wait_caught_up(&r);
    assert_eq!((counter(&p, "leases_released"), counter(&p, "leases_expired")), (1, 1));

    // The replica applied all of it and decided none of it: it counts nothing.
    for name in ["leases_released", "leases_expired", "grants", "takeovers"] {
        assert_eq!(counter(&r, name), 0, "replica {name}");
    }
    for name in ["hold_time_ms", "hold_share_pct", "expired_lifetime_ms"] {
        assert_eq!(dist(&r, name).count, 0, "replica {name}");
    }

    // Promoted, it counts the end of a lease it inherited, without a made-up hold time.
    r.promote();
    assert_eq!(release(&r, "m:held", b"h"), 1);
    assert_eq!(counter(&r, "leases_released"), 1);
    assert_eq!(dist(&r, "hold_time_ms").count, 0);
    assert_eq!(dist(&r, "hold_share_pct").count, 0);
    // Its own grants are timed.
    grant(&r, "m:new", b"n", LONG_TTL);
    assert_eq!(release(&r, "m:new", b"n"), 1);
    assert_eq!((counter(&r, "leases_released"), dist(&r, "hold_time_ms").count), (2, 1));
}

#[test]
fn a_lease_loaded_from_disk_has_no_hold_time() {
    let s = Server::start();
    grant(&s, "m:loaded", b"a", LONG_TTL);
    let _: () = s.cmd(&["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(release(&s, "m:loaded", b"a"), 1);
    assert_eq!(counter(&s, "leases_released"), 1);
    assert_eq!(dist(&s, "hold_time_ms").count, 0);
}
