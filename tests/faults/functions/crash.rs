//! `kill -9` of a module-less server while clients take and release leases through the
//! library, then a restart from its AOF.
//!
//! - `appendfsync always`: every acknowledged grant is on disk (an AOF rewrite during the load
//!   included), so the restarted server remembers every fence and every lease (deadlines are
//!   wall-clock times, which a restart does not move), and its first grant per slot starts a
//!   new epoch at the wall clock.
//! - `appendfsync everysec` with a power loss (the AOF cut back to what was on disk): the
//!   lost grants' fences are never repeated (the new epoch is taken from the wall clock), but
//!   a lost lease is granted to somebody else at once: the library has no restart grace.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencedlock::{Error, Locker};
use harness::Server;

use super::*;
use crate::support::{copy_dir, runtime, AOF_DIR};

const CYCLES: usize = 3;
const LOAD_TASKS: usize = 3;
const LOAD_KEYS: usize = 4;
/// Requests per load task at most, so a load never runs unbounded.
const MAX_GRANTS_PER_TASK: usize = 20_000;
const LOAD_TIME: Duration = Duration::from_millis(300);

/// Grants (each released at once) from `LOAD_TASKS` tasks until `stop` or the first request
/// that finds the server gone: the acknowledged fences, by key.
async fn grant_until_stopped(
    locker: Locker,
    cycle: usize,
    task: usize,
    stop: Arc<AtomicBool>,
) -> Vec<(String, u64)> {
    let mut fences = Vec::new();
    for n in 0..MAX_GRANTS_PER_TASK {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let key = format!("crash:{cycle}:{}", (n + task) % LOAD_KEYS);
        match locker.try_acquire(&key).await {
            Ok(lease) => {
                fences.push((key.clone(), lease.fence()));
                if lease.release().await.is_err() {
                    break;
                }
            }
            Err(Error::Contended { .. }) => {}
            Err(_) => break,
        }
    }
    fences
}

#[test]
fn kill9_and_restarts_from_an_always_fsynced_aof_keep_leases_and_never_repeat_a_fence() {
    let rt = runtime();
    let mut server = module_less(with_aof(Server::builder(), "always"));
    let client = rt.block_on(async { locker(&server, HELD_TTL) });
    let rival = rt.block_on(async { locker(&server, HELD_TTL) });
    // Every acknowledged grant, (key, fence): fences are per key (its slot's floor), so two
    // keys may share one; across keys, an epoch taken after a restart is above them all.
    let mut acknowledged: Vec<(String, u64)> = Vec::new();
    for cycle in 0..CYCLES {
        let held_key = format!("held:{cycle}");
        let held = rt
            .block_on(answered("the held lease", || client.try_acquire(&held_key)))
            .expect("a fresh key is granted");
        acknowledged.push((held_key.clone(), held.fence()));

        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..LOAD_TASKS)
            .map(|task| rt.spawn(grant_until_stopped(client.clone(), cycle, task, stop.clone())))
            .collect();
        let old_run = run_id(&server);
        // Cycle 1: an AOF rewrite runs in the middle of the load; cycle 2: the kill lands
        // while one has just started.
        let rewrite_after = [None, Some(LOAD_TIME / 2), Some(LOAD_TIME)][cycle];
        if let Some(at) = rewrite_after {
            std::thread::sleep(at);
            let _: redis::Value = server.cmd(&["BGREWRITEAOF"]).expect("BGREWRITEAOF");
        }
        std::thread::sleep(LOAD_TIME - rewrite_after.unwrap_or(Duration::ZERO));
        server.kill9();
        stop.store(true, Ordering::SeqCst);
        let before = acknowledged.len();
        for task in tasks {
            acknowledged.extend(rt.block_on(task).expect("load task"));
        }
        assert!(
            acknowledged.len() - before >= 10,
            "the load must really run: {}",
            acknowledged.len() - before
        );
        let max_before = acknowledged.iter().map(|(_, f)| *f).max().expect("fences");

        let restarted_at = wall_ms();
        server.restart();
        assert_ne!(run_id(&server), old_run, "a restart is another server process");
        let version: u64 = server.cmd(&["FCALL_RO", functions::VERSION_FUNCTION, "0"]).expect("the library");
        assert_eq!(version, functions::VERSION, "the library is in the AOF too");

        // The lease survived: same fence, still held, refused to another token, renewable.
        let (fence, is_held) = held_fence(&server, &held_key).expect("the held key survived the crash");
        assert_eq!((fence, is_held), (held.fence(), true), "cycle {cycle}");
        let refused = rt.block_on(answered("a rival", || rival.try_acquire(&held_key)));
        assert!(matches!(refused, Err(Error::Contended { .. })), "cycle {cycle}: {refused:?}");
        let renewed = rt.block_on(answered("renew", || client.renew_token(&held_key, held.token())));
        assert!(renewed.expect("renew"), "the holder's token renews after the restart");
        assert!(rt.block_on(held.release()).expect("release"), "the holder still held it");

        // Every grant after the restart is above every acknowledged one, in an epoch the
        // restarted server took from the wall clock (its first grant per slot). A load key
        // whose release the kill cut off is still held (and refused): it is skipped.
        let keys = (0..LOAD_KEYS).map(|k| format!("crash:{cycle}:{k}"));
        let mut checked = 0;
        for key in keys.chain([held_key.clone(), format!("fresh:{cycle}")]) {
            let lease = match rt.block_on(answered("a grant after the restart", || rival.try_acquire(&key))) {
                Ok(lease) => lease,
                Err(Error::Contended { .. }) if key.starts_with("crash:") => continue,
                Err(e) => panic!("cycle {cycle} {key}: {e}"),
            };
            checked += 1;
            assert!(lease.fence() > max_before, "cycle {cycle} {key}: {} after {max_before}", lease.fence());
            assert!(
                lease.fence() > epoch_at(restarted_at),
                "cycle {cycle} {key}: {} is not in an epoch taken after the restart at {restarted_at} ms",
                lease.fence()
            );
            assert_eq!(
                floor_field(&server, &key, "run"),
                Some(run_id(&server)),
                "the floor names the new process"
            );
            acknowledged.push((key.clone(), lease.fence()));
            assert!(rt.block_on(lease.release()).expect("release"));
        }
        assert!(checked >= 3, "cycle {cycle}: only {checked} keys granted after the restart");
        eprintln!(
            "cycle {cycle}: {} fences acknowledged so far, max {max_before} before the kill",
            acknowledged.len()
        );
    }
    let mut sorted = acknowledged.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), acknowledged.len(), "a fence was acknowledged twice on one key");
}

// ---------------------------------------------------------------------------------------
// Power loss with appendfsync everysec: the AOF loses its tail
// ---------------------------------------------------------------------------------------

const LOST: usize = 4;
const LOST_TTL_MS: u64 = 20_000;

#[test]
fn a_power_loss_of_the_aof_tail_regrants_lost_leases_at_once_without_repeating_their_fences() {
    let mut server = module_less(with_aof(Server::builder(), "everysec"));
    // One resource per key: fences order the grants of one key (its slot's floor).
    let mut resources: Vec<FencedResource> = (0..LOST).map(|_| FencedResource::default()).collect();
    for (i, resource) in resources.iter_mut().enumerate() {
        let key = format!("pl:{i}");
        let fence = grant(&server, &key, "before", LOST_TTL_MS);
        assert!(release(&server, &key, "before"));
        assert!(resource.write(fence));
    }
    // What the disk holds at the "last fsync": taken with the server frozen, so it is whole,
    // once the AOF buffer is in the file (under `everysec` a slow fsync postpones the write).
    harness::poll("the AOF buffer written to the file", Duration::from_secs(10), || {
        server.info_field("persistence", "aof_buffer_length").as_deref() == Some("0")
    });
    let image = tempfile::tempdir().expect("tempdir");
    server.pause();
    copy_dir(&server.dir().join(AOF_DIR), &image.path().join(AOF_DIR));
    server.resume();
    // Grants acknowledged after it, which the power loss takes away; their holders write.
    let lost: Vec<(String, u64, Instant)> = resources
        .iter_mut()
        .enumerate()
        .map(|(i, resource)| {
            let key = format!("pl:{i}");
            let asked = Instant::now();
            let fence = grant(&server, &key, "lost-holder", LOST_TTL_MS);
            assert!(resource.write(fence), "the lost holder writes while it holds the lease");
            (key, fence, asked + Duration::from_millis(LOST_TTL_MS))
        })
        .collect();
    server.kill9();
    let live = server.dir().join(AOF_DIR);
    fs::remove_dir_all(&live).expect("remove the AOF the power loss destroys");
    copy_dir(&image.path().join(AOF_DIR), &live);
    server.restart();

    for ((key, lost_fence, valid_until), resource) in lost.iter().zip(&mut resources) {
        assert_eq!(
            held_fence(&server, key).map(|(_, held)| held),
            Some(false),
            "{key}: the lost grant is gone"
        );
        // Not held: the library has no restart grace, so another token is granted a lease
        // its holder still believes it has...
        let intruder = try_grant(&server, key, "intruder", LOST_TTL_MS);
        assert!(Instant::now() < *valid_until, "asked within the lost lease's validity");
        let intruder = intruder.expect("the lost lease is granted again at once");
        // ...but never its fence: the restart's epoch comes from the wall clock, so the
        // intruder's is above it, and the resource refuses the lost holder once it wrote.
        assert!(intruder > *lost_fence, "{key}: {intruder} repeats or undercuts the lost {lost_fence}");
        assert!(resource.write(intruder));
        assert!(!resource.write(*lost_fence), "{key}: the lost holder's late write is refused");
    }
}
