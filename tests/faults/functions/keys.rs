//! The lock key removed under the library: `DEL` (while held and after release), `FLUSHDB`
//! and `FLUSHALL` (the floor goes too), and the library's own idle cleanup (the key's expiry
//! `RETENTION_MS` after its last lease ends). Fences continue from the floor, or from a new
//! epoch at the wall clock once the floor is gone too.

use std::time::Duration;

use fencedlock::{Error, Semaphore};
use fencedlock_protocol::command::{ACQUIRE, RELEASE, RENEW};
use fencedlock_protocol::limits::DEFAULT_RECLAIM_AFTER_MS;
use harness::{error_text, poll, Server};

use super::*;

/// The library's retention: an idle key expires this long after its last lease ended. It is
/// the module's default reclaim delay (`functions.rs` checks the Lua constant is that).
const RETENTION_MS: u64 = DEFAULT_RECLAIM_AFTER_MS;
/// Slack for the time between the test's reads of the server clock and the library's.
const SLACK_MS: i64 = 50;

fn del(server: &Server, key: &str) {
    let _: i64 = server.cmd(&["DEL", key]).unwrap_or_else(|e| panic!("DEL {key}: {}", error_text(&e)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_of_a_held_key_ends_its_lease_but_the_floor_keeps_every_fence_above() {
    let server = module_less(Server::builder());
    let locker = locker(&server, HELD_TTL);
    let mut resource = FencedResource::default();

    let mut holder = locker.try_acquire("del:k").await.expect("granted");
    assert!(resource.write(holder.fence()));
    del(&server, "del:k");
    // The lease is gone with its key (as with the module: a deleted key holds nothing), so
    // a rival is granted while the holder still believes it holds the lease...
    let rival = locker.try_acquire("del:k").await.expect("the deleted lease is free");
    // ...with a higher fence, from the floor: the resource refuses the holder once the rival
    // wrote, and the holder learns it lost the lease at its next renewal.
    assert!(rival.fence() > holder.fence(), "{} after {}", rival.fence(), holder.fence());
    assert!(resource.write(rival.fence()));
    assert!(!resource.write(holder.fence()), "the old holder's write is refused");
    assert!(matches!(holder.renew().await, Err(Error::LeaseLost { .. })));

    // Deleted after release: the next grant is still above.
    let last = rival.fence();
    assert!(rival.release().await.expect("release"));
    del(&server, "del:k");
    assert!(!server.exists("del:k"));
    assert_eq!(floor_fence(&server, "del:k"), Some(last), "the floor keeps the slot's highest fence");
    let next = locker.try_acquire("del:k").await.expect("granted");
    assert_eq!(next.fence(), last + 1, "one above the floor: the same server process, no new epoch");
    assert!(resource.write(next.fence()));
    assert!(next.release().await.expect("release"));
}

/// Grants and releases `n` times on `key` in one pipeline, as fast as one connection can: the
/// largest fence. Pushes the fences well past the epoch's start, to test the assumption that
/// grants stay under 1024 per ms.
fn burst(server: &Server, key: &str, n: usize) -> u64 {
    let mut pipe = redis::pipe();
    let (acquire, release) =
        (functions::function(&ACQUIRE).expect("served"), functions::function(&RELEASE).expect("served"));
    for i in 0..n {
        let token = format!("burst-{i}");
        pipe.cmd("FCALL").arg(acquire).arg(2).arg(key).arg(floor(key)).arg(&token).arg(60_000);
        pipe.cmd("FCALL").arg(release).arg(2).arg(key).arg(floor(key)).arg(&token).ignore();
    }
    let mut conn = server.conn();
    let fences: Vec<Option<u64>> =
        pipe.query(&mut conn).unwrap_or_else(|e| panic!("burst: {}", error_text(&e)));
    let fences: Vec<u64> = fences.into_iter().map(|f| f.expect("every burst grant is granted")).collect();
    assert!(fences.windows(2).all(|w| w[1] == w[0] + 1), "one above the other within an epoch");
    *fences.last().expect("n > 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushdb_and_flushall_take_the_floor_too_and_the_wall_clock_epoch_stays_above() {
    // Held with an assumption: with the floor gone, the next fence comes from the wall clock
    // alone (ms x 1024). That is above every earlier fence as long as the clock did not step
    // back and the slot granted fewer than 1024 fences per ms since its epoch began (a
    // script does far fewer: the burst below shows the rate).
    let server = module_less(Server::builder());
    let locker = locker(&server, HELD_TTL);
    let mut resource = FencedResource::default();
    for flush in ["FLUSHDB", "FLUSHALL"] {
        let key = format!("flush:{flush}");
        let first = locker.try_acquire(&key).await.expect("granted");
        assert!(resource.write(first.fence()));
        assert!(first.release().await.expect("release"));
        let started = std::time::Instant::now();
        let top = burst(&server, &key, 2_000);
        let per_ms = 2_000.0 / started.elapsed().as_secs_f64() / 1000.0;
        eprintln!("{flush}: 2000 grants at {per_ms:.0} per ms; top fence {top}");
        assert!(resource.write(top));

        let _: () = server.cmd(&[flush]).unwrap_or_else(|e| panic!("{flush}: {}", error_text(&e)));
        assert!(!server.exists(&key) && !server.exists(&floor(&key)), "{flush} took the key and its floor");
        let asked = wall_ms();
        let next = locker.try_acquire(&key).await.expect("granted after the flush: the library survives it");
        assert!(next.fence() > top, "{flush}: {} after {top}", next.fence());
        assert!(next.fence() > epoch_at(asked), "{flush}: the fence is from a wall-clock epoch");
        assert!(resource.write(next.fence()), "the resource takes the new holder's write");
        assert!(next.release().await.expect("release"));
    }
}

/// `(before, PEXPIRETIME key, now)` in ms of the server's clock, `before` read by the caller
/// just before its request.
fn expiry_since(server: &Server, key: &str, before: i64) -> (i64, i64, i64) {
    let at = pexpiretime(server, key);
    (before, at, server_ms(server) as i64)
}

fn clock(server: &Server) -> i64 {
    server_ms(server) as i64
}

/// The key's expiry is `ttl + RETENTION` after the request (within the time it took).
fn assert_expiry(what: &str, (before, at, after): (i64, i64, i64), ttl_ms: u64) {
    let wait = (ttl_ms + RETENTION_MS) as i64;
    assert!(
        at >= before + wait - SLACK_MS && at <= after + wait + SLACK_MS,
        "{what}: the key expires at {at}, not {wait} ms after {before}..{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_key_expires_retention_after_its_last_lease_and_fences_continue_from_the_floor() {
    let server = module_less(Server::builder());
    // An hour's lease: longer than the retention, so an expiry counted from the request
    // instead of the lease's end would be caught.
    let hour_ms = 3_600_000u64;
    let locker = locker(&server, Duration::from_millis(hour_ms));
    let key = "idle:k";

    let before = clock(&server);
    let mut lease = locker.try_acquire(key).await.expect("granted");
    assert_expiry("granted", expiry_since(&server, key, before), hour_ms);
    assert_eq!(pexpiretime(&server, &floor(key)), -1, "the floor never expires");

    // A renewal moves the expiry with the lease, both ways: longer by a raw renew...
    let two_hours_ms = 2 * hour_ms;
    let before = clock(&server);
    let renewed: i64 =
        call(&server, &RENEW, key, &[lease.token().as_bytes(), two_hours_ms.to_string().as_bytes()])
            .unwrap_or_else(|e| panic!("renew: {}", error_text(&e)));
    assert_eq!(renewed, 1);
    assert_expiry("renewed for two hours", expiry_since(&server, key, before), two_hours_ms);
    // ...and back to an hour by the client's renewal: never before the lease ends.
    let before = clock(&server);
    lease.renew().await.expect("renewed");
    assert_expiry("renewed for an hour", expiry_since(&server, key, before), hour_ms);
    let remaining = status(&server, key).and_then(|st| st.remaining).expect("held");
    assert!(
        pexpiretime(&server, key) > clock(&server) + remaining.as_millis() as i64,
        "a held key's expiry is after its lease ends"
    );

    // Released: idle from now, so it expires a retention from now.
    let last = lease.fence();
    let before = clock(&server);
    assert!(lease.release().await.expect("release"));
    assert_expiry("released", expiry_since(&server, key, before), 0);

    // The expiry itself, simulated: the real one is 600 s away, so a short PEXPIRE stands in
    // for it (the server removes the key the same way).
    let _: i64 = server.cmd(&["PEXPIRE", key, "1"]).expect("PEXPIRE");
    poll("the idle key to expire", Duration::from_secs(2), || !server.exists(key));
    assert_eq!(floor_fence(&server, key), Some(last), "the floor outlives the key");
    let next = locker.try_acquire(key).await.expect("granted");
    assert_eq!(next.fence(), last + 1, "the floor's fence continues");
    assert!(next.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_key_expires_after_its_last_holder_and_not_before() {
    let server = module_less(Server::builder());
    let short = Semaphore::new(locker(&server, Duration::from_secs(2)), "idle:sem", 2).expect("semaphore");
    let long = Semaphore::new(locker(&server, Duration::from_secs(3_600)), "idle:sem", 2).expect("semaphore");
    let before = clock(&server);
    let a = long.try_acquire().await.expect("a long permit");
    let b = short.try_acquire().await.expect("a short permit");
    // The later holder's shorter lease must not pull the expiry before the first one's end.
    assert_expiry("two holders", expiry_since(&server, "idle:sem", before), 3_600_000);
    assert!(b.release().await.expect("release"));
    assert!(a.release().await.expect("release"));
}

#[test]
fn without_its_floor_key_a_lock_key_never_expires_and_fences_rise_with_the_library_or_the_clock() {
    // The floor-less form (numkeys 1, as a person may type it in redis-cli; the client always
    // names the floor): the library does not expire the key, and once the key is deleted the
    // next fence starts a new epoch. The library's state starts it above every fence it issued;
    // the script form keeps nothing between calls, so there a key deleted and granted again
    // within the same millisecond repeats its fence. Not held on the script form: shown here.
    let server = module_less(Server::builder());
    let acquire = functions::function(&ACQUIRE).expect("served");
    let release = functions::function(&RELEASE).expect("served");
    for form in Form::both(&server) {
        let fence: u64 = server.query(&form.request(acquire, &["bare:k"], &["t", "60000"])).expect("granted");
        assert_eq!(pexpiretime(&server, "bare:k"), -1, "no floor, no cleanup: the key has no expiry");
        assert!(fence > epoch_at(wall_ms() - 1_000), "its first fence is a wall-clock epoch");
        let _: i64 = server.cmd(&["DEL", "bare:k"]).expect("DEL");

        // Release, DEL and grant again in one MULTI, so the two grants read the same
        // millisecond (a few tries: the EXEC may straddle a millisecond boundary).
        let mut repeated = None;
        for attempt in 0..20 {
            let token = format!("t{attempt}");
            let first: u64 =
                server.query(&form.request(acquire, &["bare:r"], &[&token, "60000"])).expect("granted");
            let mut tx = redis::pipe();
            tx.atomic()
                .add_command(form.request(release, &["bare:r"], &[&token]))
                .ignore()
                .cmd("DEL")
                .arg("bare:r")
                .ignore()
                .add_command(form.request(acquire, &["bare:r"], &["other", "60000"]));
            let (second,): (u64,) = tx.query(&mut server.conn()).expect("EXEC");
            assert!(second >= first, "the clock went back");
            let released: i64 =
                server.query(&form.request(release, &["bare:r"], &["other"])).expect("release");
            assert_eq!(released, 1);
            let _: i64 = server.cmd(&["DEL", "bare:r"]).expect("DEL");
            if second == first {
                repeated = Some((attempt, first));
                break;
            }
        }
        match (&form, repeated) {
            (Form::Library, None) => {}
            (Form::Library, Some((attempt, fence))) => {
                panic!("the library granted {fence} twice (try {attempt})")
            }
            (Form::Script(_), Some((attempt, fence))) => {
                eprintln!("as a script, without the floor, fence {fence} was granted twice (try {attempt})")
            }
            (Form::Script(_), None) => {
                panic!("as a script, a fence repeated within a millisecond in 20 tries")
            }
        }
    }
}
