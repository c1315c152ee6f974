//! Crashes under load: `kill -9` of a server while several clients acquire, renew and release,
//! then a restart from the AOF. Assertions are on the clients' recorded history.
//!
//! - `appendfsync always`: every acknowledged grant is on disk, so no acknowledged, unexpired
//!   lease is lost and fences follow real time across the crash (also when an AOF rewrite
//!   runs during the load).
//! - `appendfsync everysec`: a crash of the *machine* can lose the last second of the AOF.
//!   A `kill -9` alone rarely loses anything (the AOF was already written to the page cache),
//!   so the power-loss tests cut the AOF back to a copy taken earlier, which is exactly what
//!   an OS crash leaves behind. Fences still never repeat (the restart epoch jump), a lost
//!   lease can be granted to somebody else, and `fencedlock.restart-grace-ms` closes that gap.

use std::fs;
use std::time::{Duration, Instant};

use crate::support::*;
use fencedlock_protocol::command::ACQUIRE;
use harness::{epoch_of, error_text, poll, Server};

/// Long enough that no lease in the crash tests expires by accident.
const LONG_TTL_MS: u64 = 20_000;
const LOAD_TIME: Duration = Duration::from_millis(400);

fn aof_server(fsync: &str) -> Server {
    Server::builder().arg("appendonly", "yes").arg("appendfsync", fsync).start()
}

#[test]
fn kill9_under_load_with_appendfsync_always_loses_no_acknowledged_grant_or_lease() {
    let rt = runtime();
    let mut s = aof_server("always");
    let mut history: Vec<Event> = Vec::new();
    for round in 0..3 {
        let spec = LoadSpec::new(&format!("round{round}"), "crash", 4, 12, LONG_TTL_MS);
        let load = start_load(&rt, &s.url(), &spec);
        // Round 1: an AOF rewrite runs in the middle of the load. Round 2: the kill lands
        // while a rewrite has just started.
        let rewrite_after = [None, Some(LOAD_TIME / 2), Some(LOAD_TIME)][round];
        if let Some(at) = rewrite_after {
            run_for(at);
            let _: harness::redis::Value = s.cmd(&["BGREWRITEAOF"]).expect("BGREWRITEAOF");
        }
        run_for(LOAD_TIME - rewrite_after.unwrap_or(Duration::ZERO));
        s.kill9();
        let events = load.stop(&rt);
        let cut_off = events.iter().filter(|e| e.acked.is_none()).count();
        eprintln!("round {round}: {}", summary(&events));
        assert!(grants(&events).len() >= 10, "the load must really run: {}", summary(&events));
        assert_no_error_replies(&events);
        let held = certainly_held(&events, Instant::now());
        history.extend(events);
        let epoch_before = epoch_of(max_fence(&history));

        s.restart();
        // Every acknowledged grant is in the AOF: each key's fence is at least the largest
        // fence a client was given for it.
        for key in &spec.keys {
            let acked = history.iter().filter(|e| e.key == *key).filter_map(Event::fence).max();
            if let Some(acked) = acked {
                let fence =
                    s.lock_status(key).unwrap_or_else(|| panic!("{key} vanished after the crash")).fence;
                assert!(fence >= acked, "{key}: fence {fence} after restart, but {acked} was acknowledged");
            }
        }
        // Every lease a client was told it holds is still held, by its token, with its fence.
        // (The leases of earlier rounds were checked and released then.)
        assert!(!held.is_empty(), "the crash must hit held leases");
        assert_leases_survived(&s, &held);
        assert!(s.fencedlock_counter("fencedlock_epoch") > 0);
        let next = assert_new_grants_above(&s, &spec.keys, max_fence(&history), true);
        assert!(epoch_of(next) > epoch_before);
        eprintln!("round {round}: {} leases survived, {cut_off} requests cut off", held.len());
    }
    // Across all three crashes: a grant acknowledged before another was sent has a smaller
    // fence, on any key.
    assert_fences_follow_real_time(&history);
}

#[test]
fn kill9_under_load_with_appendfsync_everysec_never_repeats_a_fence() {
    let rt = runtime();
    let mut s = aof_server("everysec");
    let spec = LoadSpec::new("everysec", "es", 4, 12, LONG_TTL_MS);
    let load = start_load(&rt, &s.url(), &spec);
    run_for(LOAD_TIME);
    s.kill9();
    let mut history = load.stop(&rt);
    assert_no_error_replies(&history);
    assert!(grants(&history).len() >= 10, "{}", summary(&history));
    s.restart();

    // With everysec an acknowledged grant may be missing after a crash (see the power-loss
    // tests, which make the loss certain). Count, for the log, what this crash lost.
    let lost = lost_grants(&s, &spec.keys, &history);
    eprintln!("everysec kill -9: {lost} key(s) lost acknowledged grants; {}", summary(&history));

    // The weaker property that always holds: every later fence is above every fence issued
    // before the crash, thanks to the restart's epoch jump.
    assert_new_grants_above(&s, &spec.keys, max_fence(&history), true);
    let after = start_load(&rt, &s.url(), &LoadSpec { label: "after".into(), ..spec.clone() });
    run_for(Duration::from_millis(200));
    history.extend(after.stop(&rt));
    assert_fences_follow_real_time(&history);
}

// ---------------------------------------------------------------------------------------
// Power loss with appendfsync everysec: the AOF loses its tail
// ---------------------------------------------------------------------------------------

/// Leases granted after the "last fsync". With a grace: short, so a grace longer than them
/// is a short wait. Without: long, so they are certainly unexpired when the restarted server
/// is asked about them, however slowly it restarts.
const LOST_TTL_MS: u64 = 1_500;
const LOST_LONG_TTL_MS: u64 = 20_000;
const LOST_KEYS: usize = 5;

/// A primary's AOF directory as an OS crash would leave it: what was on disk at the moment
/// the copy was taken (the server is frozen meanwhile, so the copy is consistent).
struct DiskImage {
    dir: tempfile::TempDir,
}

impl DiskImage {
    fn take(s: &Server) -> DiskImage {
        let dir = tempfile::tempdir().expect("tempdir");
        s.pause();
        copy_dir(&s.dir().join(AOF_DIR), &dir.path().join(AOF_DIR));
        s.resume();
        DiskImage { dir }
    }

    /// Replace the server's AOF with this image (the server must be dead).
    fn restore_into(&self, s: &Server) {
        let live = s.dir().join(AOF_DIR);
        fs::remove_dir_all(&live).expect("remove the AOF that the power loss destroys");
        copy_dir(&self.dir.path().join(AOF_DIR), &live);
    }
}

/// A lease granted after the disk image was taken: acknowledged to its client, lost with the
/// AOF's tail.
struct LostLease {
    key: String,
    token: String,
    fence: u64,
    /// Until when its holder believes it holds it (client clock, from before the request).
    until: Instant,
}

/// Run a load, take the disk image, grant `LOST_KEYS` more leases of `ttl_ms` (acknowledged),
/// crash, and put the old image back. Returns the history (all acknowledged fences) and the
/// lost leases.
fn power_loss(s: &mut Server, rt: &tokio::runtime::Runtime, ttl_ms: u64) -> (Vec<Event>, Vec<LostLease>) {
    let spec = LoadSpec::new("before-fsync", "pl", 3, 8, LONG_TTL_MS);
    let load = start_load(rt, &s.url(), &spec);
    run_for(Duration::from_millis(200));
    let history = load.stop(rt);
    assert!(grants(&history).len() >= 5, "{}", summary(&history));

    let image = DiskImage::take(s);
    let mut lost = Vec::new();
    for i in 0..LOST_KEYS {
        let key = format!("pl:after-fsync:{i}");
        let token = format!("holder-{i}");
        let sent = Instant::now();
        let fence: Option<u64> = s.cmd(&[ACQUIRE.name, &key, &token, &ttl_ms.to_string()]).unwrap();
        let fence = fence.expect("a fresh key is granted");
        lost.push(LostLease { key, token, fence, until: sent + Duration::from_millis(ttl_ms) });
    }
    assert!(lost.iter().all(|l| l.fence > max_fence(&history)));
    s.kill9();
    image.restore_into(s);
    (history, lost)
}

#[test]
fn power_loss_with_everysec_can_lose_acknowledged_leases_but_never_repeats_a_fence() {
    let rt = runtime();
    let mut s = aof_server("everysec");
    let (history, lost) = power_loss(&mut s, &rt, LOST_LONG_TTL_MS);
    let acked_max = lost.iter().map(|l| l.fence).max().unwrap_or(0).max(max_fence(&history));
    s.restart();

    // What can be lost: grants the clients were told about are gone...
    for l in &lost {
        assert_eq!(s.lock_status(&l.key), None, "{} should be lost with the AOF tail", l.key);
    }
    // ...so without a restart grace, another token is granted a lease its holder still
    // believes it has (the gap the grace closes, see the next test)...
    let mut double_grants = 0;
    for l in &lost {
        let fence: Option<u64> = s.cmd(&["FENCEDLOCK.ACQUIRE", &l.key, "intruder", "10000"]).unwrap();
        if let Some(fence) = fence {
            assert!(Instant::now() < l.until, "the test must ask within the lost lease's validity");
            // ...but with a fence above the lost holder's, so a fenced resource refuses the
            // lost holder's writes once the intruder has written.
            assert!(fence > acked_max && epoch_of(fence) > epoch_of(acked_max), "{fence} vs {acked_max}");
            double_grants += 1;
        }
    }
    assert_eq!(double_grants, LOST_KEYS, "every lost lease was granted again");
    assert_new_grants_above(&s, &["pl:0".to_string(), "pl:7".to_string()], acked_max, true);
    assert_fences_follow_real_time(&history);
}

#[test]
fn restart_grace_closes_the_lease_gap_after_a_power_loss() {
    let rt = runtime();
    let mut s = aof_server("everysec");
    // The grace must be at least the longest ttl (docs/guarantees.md).
    let grace = Duration::from_millis(LOST_TTL_MS + 300);
    s.set_restart_arg("fencedlock.restart-grace-ms", &grace.as_millis().to_string());
    let (history, lost) = power_loss(&mut s, &rt, LOST_TTL_MS);
    let acked_max = lost.iter().map(|l| l.fence).max().unwrap_or(0).max(max_fence(&history));
    s.restart();
    let grace_refusals_before = s.fencedlock_counter("fencedlock_grace_refusals");

    // Until the grace ends every new grant is refused with TRYAGAIN, so nobody can take a
    // lease whose holder may still be using it. Poll (bounded) until a grant goes through.
    let mut refusals = 0;
    let mut first_grant: Option<(Instant, u64)> = None;
    poll("the restart grace to end", grace + Duration::from_secs(10), || {
        for l in &lost {
            let asked = Instant::now();
            let reply: Result<Option<u64>, _> = s.cmd(&["FENCEDLOCK.ACQUIRE", &l.key, "intruder", "10000"]);
            match reply {
                Ok(Some(fence)) => {
                    first_grant = Some((asked, fence));
                    return true;
                }
                Ok(None) => {
                    panic!("{}: refused with nil, but the key was lost, so only the grace can refuse", l.key)
                }
                Err(e) => {
                    let text = error_text(&e);
                    assert!(text.starts_with("TRYAGAIN"), "{text}");
                    assert!(
                        !text.contains(&l.token) && !text.contains("intruder"),
                        "token in an error: {text}"
                    );
                    refusals += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        false
    });
    let (granted_at, fence) = first_grant.expect("polled until granted");
    assert!(refusals > 0, "the grace refused grants");
    assert!(s.fencedlock_counter("fencedlock_grace_refusals") >= grace_refusals_before + refusals);
    let last_lost_validity = lost.iter().map(|l| l.until).max().expect("lost leases");
    assert!(
        granted_at >= last_lost_validity,
        "a lost lease was granted again {:?} before its holder's validity ended",
        last_lost_validity - granted_at
    );
    assert!(fence > acked_max && epoch_of(fence) > epoch_of(acked_max));
    assert_fences_follow_real_time(&history);
}
