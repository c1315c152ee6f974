//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4+'s `CLUSTER MIGRATION
//! IMPORT`) with the module loaded on every node (issue #42): the slot moves with its leases,
//! semaphore and read leases, and floor, there and back; its waiters are told to ask again when
//! it starts to move, never left waiting; a cancelled migration leaves the source as it was;
//! and the client, under load, follows the moving slot without a fence given twice or out of
//! order, through `DEL`s behind the holders' backs; the CLI's `run` keeps its lease across the
//! moves. On servers without atomic migration (Redis 7.x) each test checks the server refuses
//! the commands, which is what a user there meets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencedlock::{Engine, EngineChoice, Error, LockConfig, Locker};
use fencedlock_protocol::command::{ACQUIRE, PERMITS, RAISE, RENEW, SHARED};
use fencedlock_protocol::ReplyError;
use harness::{error_text, redis, Cluster, Ended, Server};

use crate::{grant, release, route, settings};

const LONG_TTL: u64 = 60_000;
/// Bound on a reply that must come.
const REPLY: Duration = Duration::from_secs(10);
/// Bound on a waiter's answer after the migration started (measured values are printed).
const PROMPT: Duration = Duration::from_millis(500);

/// Three masters with the module, or `None` after checking that this server refuses both
/// servers' atomic migration commands (it has none).
fn cluster() -> Option<Cluster> {
    let cluster = Cluster::builder().masters(3).start();
    let node = &cluster.nodes()[0];
    if node.release().atomic_slot_migration().is_some() {
        return Some(cluster);
    }
    for words in [
        &["CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", "1", "1", "NODE", "x"][..],
        &["CLUSTER", "MIGRATION", "IMPORT", "1", "1"],
    ] {
        let refused: redis::RedisResult<redis::Value> = node.cmd(words);
        assert!(refused.is_err(), "{}: {words:?} answered {refused:?}", node.release());
    }
    eprintln!("{} has no atomic slot migration: its refusal is checked", node.release());
    None
}

fn cmd<T: redis::FromRedisValue>(node: &Server, words: &[&str]) -> T {
    node.cmd(words).unwrap_or_else(|e| panic!("{words:?} on {}: {}", node.addr(), error_text(&e)))
}

/// Everything the slot holds, read on `node`: each key's last fence, permit count and its
/// holders' fences (`STATUS` as a semaphore; a mutex is one permit).
fn state(node: &Server, keys: &[&str]) -> Vec<(u64, u32, Vec<u64>)> {
    keys.iter()
        .map(|k| {
            let st = node
                .semaphore_status(*k)
                .unwrap_or_else(|| panic!("{k} has no lock state on {}", node.addr()));
            (st.fence, st.permits, st.holders.iter().map(|h| h.fence).collect())
        })
        .collect()
}

#[test]
fn a_slot_moves_there_and_back_with_its_leases_floor_and_waiters() {
    let Some(cluster) = cluster() else { return };
    let (mutex, sem, rw) = ("{asm}:mutex", "{asm}:sem", "{asm}:rw");
    let keys = [mutex, sem, rw];
    let (slot, mut from, mut to) = route(&cluster, mutex);

    // A mutex raised far above the target's fences, a semaphore with two holders, two readers.
    let held = grant(&cluster.nodes()[from], mutex, "holder", LONG_TTL);
    let raised: Option<u64> =
        cmd(&cluster.nodes()[from], &[RAISE.name, mutex, "holder", &(held + 1_000_000).to_string()]);
    let mut top = raised.expect("the holder raises");
    for t in ["s1", "s2"] {
        let f: Option<u64> = cmd(&cluster.nodes()[from], &[ACQUIRE.name, sem, t, "60000", PERMITS, "3"]);
        top = top.max(f.expect("a permit"));
    }
    for t in ["r1", "r2"] {
        let f: Option<u64> = cmd(&cluster.nodes()[from], &[ACQUIRE.name, rw, t, "60000", SHARED]);
        top = top.max(f.expect("a read lease"));
    }
    let before = state(&cluster.nodes()[from], &keys);

    for round in 0..2 {
        let (src, dst) = (&cluster.nodes()[from], &cluster.nodes()[to]);
        if round == 0 {
            assert!(dst.high_water() < top, "the target's fences are below the slot's");
        }
        let mut waiter = src.queue_acquire(mutex, format!("waiter-{round}").as_bytes(), LONG_TTL, 0);

        let m = cluster.start_atomic_migration(slot, to).expect("the module declares atomic migration");
        let started = Instant::now();
        let reply = waiter.reply(REPLY);
        let late = reply.at.saturating_duration_since(started);
        assert_eq!(reply.error_kind(), Some(ReplyError::WaitInterrupted), "round {round}: {reply:?}");
        assert!(late < PROMPT, "round {round}: the waiter was answered {late:?} after the migration started");
        assert_eq!(m.wait(), Ended::Moved, "round {round}");
        assert_eq!(src.waiters(), 0);

        // Every holder, fence and permit count moved; the holder renews on the new owner.
        assert_eq!(state(dst, &keys), before, "round {round}: the slot's state on the new owner");
        let renewed: i64 = cmd(dst, &[RENEW.name, mutex, "holder", "60000"]);
        assert_eq!(renewed, 1, "round {round}: the lease is still the holder's");
        eprintln!(
            "atomic migration round {round}: the waiter was told to ask again {late:?} after the start"
        );
        (from, to) = (to, from);
    }

    // A key deleted on its last owner: its next fence comes from the floor that moved with the
    // slot, above every fence granted before, on whichever node.
    let owner = &cluster.nodes()[from];
    let _: i64 = cmd(owner, &["DEL", sem]);
    let fence = grant(owner, sem, "after-del", LONG_TTL);
    assert!(fence > top, "fence {fence} after DEL, the slot had reached {top}");
    release(owner, mutex, "holder");
}

#[test]
fn a_cancelled_migration_leaves_the_source_as_it_was() {
    let Some(cluster) = cluster() else { return };
    let key = "{asm-cancel}:lock";
    let (slot, from, to) = route(&cluster, key);
    let (src, dst) = (&cluster.nodes()[from], &cluster.nodes()[to]);
    let held = grant(src, key, "holder", LONG_TTL);
    // Idle keys are reclaimed 200 ms after their lease ends (the default is minutes).
    let idle = "{asm-cancel}:idle";
    src.config_set("fencedlock.reclaim-after-ms", "200");

    // A slow snapshot (100 ms a key, 20 keys), so the migration is still under way when it is
    // cancelled.
    for i in 0..20 {
        let _: () = cmd(src, &["SET", &format!("{{asm-cancel}}:filler{i}"), "x"]);
    }
    src.config_set("rdb-key-save-delay", "100000");
    let m = cluster.start_atomic_migration(slot, to).expect("started");
    // On Redis the target connects to the source after `IMPORT` answers.
    harness::poll("the source to run the migration", REPLY, || !m.state().0.is_empty());
    // While the slot is leaving, a waiter is told at once to ask again: nothing queues.
    let mut early = src.send_acquire(key, b"early", LONG_TTL, Some(0));
    let reply = early.reply(REPLY);
    assert_eq!(reply.error_kind(), Some(ReplyError::WaitInterrupted), "{reply:?}");
    assert!(reply.latency() < PROMPT, "answered after {:?}", reply.latency());
    // Reclaim leaves the leaving slot's idle keys alone: a delete made during the hand-over
    // might not reach the new owner.
    let idle_fence = grant(src, idle, "brief", LONG_TTL);
    release(src, idle, "brief");
    std::thread::sleep(Duration::from_millis(800));
    assert!(src.lock_status(idle).is_some(), "an idle key of the leaving slot was reclaimed");
    m.cancel();
    let ended = m.wait();
    assert!(matches!(ended, Ended::NotMoved(_)), "the cancelled migration moved the slot: {ended:?}");
    src.config_set("rdb-key-save-delay", "0");
    assert_eq!(cluster.slot_owner(slot), from);

    // The source goes on as before: the lease, its renewals, waiting and handoff.
    let st = src.lock_status(key).expect("still there");
    assert_eq!((st.fence, st.held), (held, true));
    let renewed: i64 = cmd(src, &[RENEW.name, key, "holder", "60000"]);
    assert_eq!(renewed, 1);
    let mut waiter = src.queue_acquire(key, b"after", LONG_TTL, 0);
    release(src, key, "holder");
    let handed = waiter.reply(REPLY).fence();
    assert!(handed > held && handed > idle_fence, "handed over as before the migration, fence {handed}");
    harness::poll("reclaim to take the idle key once the slot stays", REPLY, || {
        src.lock_status(idle).is_none()
    });
    harness::poll("the target to drop what it imported", REPLY, || {
        let n: i64 = cmd(dst, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        n == 0
    });
    assert_eq!(cluster.slot_owner(slot), from, "a cancelled migration is not started again");
}

fn config(ttl: Duration) -> LockConfig {
    settings(ttl, Duration::from_secs(2), Duration::from_secs(10)).build().expect("valid config")
}

/// One acknowledged grant: its key, fence and token, and when the request was sent and
/// answered on the client's clock.
#[derive(Debug, Clone)]
struct Grant {
    key: String,
    fence: u64,
    token: Vec<u8>,
    sent: Instant,
    answered: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_follow_a_slot_moved_there_and_back_under_load() {
    let Some(cluster) = cluster() else { return };
    let urls = cluster.urls();
    let locker = Locker::open_cluster(&urls, config(Duration::from_secs(2))).expect("cluster locker");
    let keys: Vec<String> = (0..4).map(|i| format!("{{asm-load}}:k{i}")).collect();
    let (slot, mut from, mut to) = route(&cluster, &keys[0]);

    // A lease kept alive through every move, renewing on whichever node owns the slot.
    let kept = locker.try_acquire("{asm-load}:kept").await.expect("granted").keep_alive();
    let kept_fence = kept.fence();
    // A waiter on a key whose holder never releases: its lease runs out on the new owner, and
    // the wait must resume there.
    let holder = grant(&cluster.nodes()[from], "{asm-load}:wait", "gone", 3_000);
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire("{asm-load}:wait").await.map(|l| l.fence()) })
    };

    let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
    let refused_sets = Arc::new(Mutex::new(0u32));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for w in 0..3 {
        let (locker, keys, grants, stop) = (locker.clone(), keys.clone(), grants.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.is_cancelled() && n < 10_000 {
                n += 1;
                let key = &keys[(n + w) % keys.len()];
                let sent = Instant::now();
                match locker.try_acquire(key).await {
                    Ok(mut lease) => {
                        grants.lock().unwrap().push(Grant {
                            key: key.clone(),
                            fence: lease.fence(),
                            token: lease.token().as_bytes().to_vec(),
                            sent,
                            answered: Instant::now(),
                        });
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let _ = lease.renew().await;
                        let _ = lease.release().await;
                    }
                    Err(Error::Contended { .. }) => {}
                    // Retryable while the slot moves (a redirect in the instant of the
                    // hand-over, a node reconfiguring): the next round asks again.
                    Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(5)).await,
                    Err(e) => panic!("worker {w}: {e}"),
                }
            }
        }));
    }
    // DEL of the workers' keys behind their holders' backs, on whichever node owns the slot
    // (a DEL that meets the move is refused with a redirect and skipped): the next grant must
    // still be above every fence before, from the floor that moves with the slot.
    let deletes = {
        let (stop, keys, nodes) = (stop.clone(), keys.clone(), cluster.urls());
        tokio::spawn(async move {
            let clients: Vec<_> =
                nodes.iter().map(|u| redis::Client::open(u.as_str()).expect("url")).collect();
            let mut done = 0u32;
            let mut n = 0usize;
            while !stop.is_cancelled() {
                n += 1;
                for client in &clients {
                    let Ok(mut conn) = client.get_multiplexed_async_connection().await else { continue };
                    let del: redis::RedisResult<i64> =
                        redis::cmd("DEL").arg(&keys[n % keys.len()]).query_async(&mut conn).await;
                    done += u32::from(matches!(del, Ok(1)));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            done
        })
    };
    // Sets of two keys of the slot: granted whole or refused whole, whatever the moment.
    let sets = {
        let (locker, stop, refused) = (locker.clone(), stop.clone(), refused_sets.clone());
        tokio::spawn(async move {
            let pair = ["{asm-load}:a", "{asm-load}:b"];
            while !stop.is_cancelled() {
                match locker.try_acquire_all(&pair).await {
                    Ok(leases) => {
                        let _ = leases.release().await;
                    }
                    Err(_) => *refused.lock().unwrap() += 1,
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };

    for round in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cluster = &cluster;
        tokio::task::block_in_place(|| cluster.migrate_slot_atomically(slot, to));
        eprintln!("round {round}: slot {slot} moved to node {to}");
        (from, to) = (to, from);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    for w in workers {
        w.await.expect("worker");
    }
    sets.await.expect("sets");
    let deleted = deletes.await.expect("deletes");
    assert!(deleted > 0, "no DEL reached a key of the slot");

    // The kept lease renewed on every owner in turn and is still held, with its fence.
    kept.ensure_valid().expect("kept alive across every move");
    let owner = &cluster.nodes()[cluster.slot_owner(slot)];
    let st = owner.lock_status("{asm-load}:kept").expect("moved with the slot");
    assert_eq!((st.fence, st.held), (kept_fence, true));
    // The wait resumed on the new owner and was granted after the abandoned lease ran out.
    let fence =
        tokio::time::timeout(REPLY, waiting).await.expect("the wait ended").expect("task").expect("granted");
    assert!(fence > holder, "fence {fence} after the abandoned {holder}");

    // Per key: no fence given to two tokens, and fences follow real time (a grant asked for
    // after another was answered has a higher fence).
    let grants = grants.lock().unwrap().clone();
    assert!(grants.len() > 20, "only {} grants under load", grants.len());
    let mut by_key: HashMap<&str, Vec<&Grant>> = HashMap::new();
    for g in &grants {
        by_key.entry(&g.key).or_default().push(g);
    }
    for (key, gs) in &by_key {
        let mut seen: HashMap<u64, &[u8]> = HashMap::new();
        for g in gs {
            if let Some(other) = seen.insert(g.fence, &g.token) {
                assert_eq!(other, g.token, "{key}: fence {} given to two tokens", g.fence);
            }
        }
        for a in gs {
            for b in gs.iter().filter(|b| b.sent > a.answered) {
                assert!(b.fence > a.fence, "{key}: fence {} asked after {} was answered", b.fence, a.fence);
            }
        }
    }
    // Each set was granted whole or not at all: no key of the pair is left held.
    for k in ["{asm-load}:a", "{asm-load}:b"] {
        assert!(!owner.lock_held(k), "{k} left held by a set");
    }
    eprintln!(
        "{} grants on {} keys while slot {slot} moved 4 times; {deleted} keys deleted under their holders; {} sets refused",
        grants.len(),
        by_key.len(),
        refused_sets.lock().unwrap()
    );
    kept.release().await.expect("release");
}

/// Three module-less masters (the Functions library, loaded by the client itself), or `None`
/// on a server without atomic migration (its refusal checked as above).
fn library_cluster() -> Option<Cluster> {
    let cluster = Cluster::builder().masters(3).node(|b| b.without_module()).start();
    cluster.nodes()[0].release().atomic_slot_migration().map(|_| cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_moves_with_its_slot_on_both_forms() {
    let Some(cluster) = library_cluster() else {
        assert!(cluster().is_none(), "no atomic migration without the module either");
        return;
    };
    for engine in [Engine::Functions, Engine::Script] {
        let config = LockConfig::builder()
            .ttl(Duration::from_secs(2))
            .engine(EngineChoice::Only(engine))
            .node_timeout(Duration::from_secs(2))
            .backoff(Duration::from_millis(5), Duration::from_millis(50))
            .max_wait(Duration::from_secs(10))
            .build()
            .expect("valid config");
        let locker = Locker::open_cluster(&cluster.urls(), config).expect("cluster locker");
        let tag = format!("asm-{engine:?}");
        let (kept_key, gone_key, wait_key) =
            (format!("{{{tag}}}:kept"), format!("{{{tag}}}:gone"), format!("{{{tag}}}:wait"));
        let (slot, mut from, mut to) = route(&cluster, &kept_key);

        // Fences the floor alone remembers (the key deleted), a lease kept alive across the
        // moves, and a wait on an abandoned lease that runs out on the new owner.
        let mut top = 0;
        for _ in 0..5 {
            let lease = locker.try_acquire(&gone_key).await.expect("granted");
            top = top.max(lease.fence());
            lease.release().await.expect("release");
        }
        let _: i64 = cmd(&cluster.nodes()[from], &["DEL", &gone_key]);
        let kept = locker.try_acquire(&kept_key).await.expect("granted").keep_alive();
        let abandoned = locker.try_acquire(&wait_key).await.expect("granted");
        top = top.max(kept.fence()).max(abandoned.fence());
        let abandoned_fence = abandoned.fence();
        drop(abandoned.detach());
        let waiting = {
            let (locker, key) = (locker.clone(), wait_key.clone());
            tokio::spawn(async move { locker.acquire(&key).await.map(|l| l.fence()) })
        };

        for _ in 0..2 {
            let cluster = &cluster;
            tokio::task::block_in_place(|| cluster.migrate_slot_atomically(slot, to));
            (from, to) = (to, from);
            tokio::time::sleep(Duration::from_millis(300)).await;
            kept.ensure_valid().unwrap_or_else(|e| panic!("{engine:?}: the kept lease across the move: {e}"));
        }
        let fence = tokio::time::timeout(REPLY, waiting).await.expect("the wait ended").expect("task");
        let fence = fence.unwrap_or_else(|e| panic!("{engine:?}: the wait across the moves: {e}"));
        assert!(fence > abandoned_fence, "{engine:?}: {fence} after {abandoned_fence}");
        let next = locker.try_acquire(&gone_key).await.expect("granted on the slot's last owner");
        assert!(next.fence() > top, "{engine:?}: fence {} after the slot reached {top}", next.fence());
        next.release().await.expect("release");
        assert!(kept.release().await.expect("release"), "{engine:?}: still held at the end");
        eprintln!("{engine:?}: a kept lease, a wait and the floor crossed two atomic migrations");
    }
}

#[test]
fn the_cli_keeps_its_lease_while_its_slot_moves_there_and_back() {
    let Some(cluster) = cluster() else { return };
    let key = "{asm-cli}:job";
    let (slot, home, away) = route(&cluster, key);
    // A 1.5 s lease for a 4 s command: it lives only if every renewal reaches the slot's owner
    // of the moment (the CLI ends a command whose lease is lost, exit 76).
    let mut job = std::process::Command::new(harness::cli_binary())
        .args([
            "--cluster",
            "--redis",
            &cluster.urls()[0],
            "run",
            "-k",
            key,
            "--ttl",
            "1500ms",
            "--",
            "sleep",
            "4",
        ])
        .env_remove("FENCEDLOCK_REDIS")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start fencedlock");
    harness::poll("the job to hold its lease", REPLY, || cluster.nodes()[home].lock_held(key));
    let fence = cluster.nodes()[home].lock_status(key).expect("held").fence;
    cluster.migrate_slot_atomically(slot, away);
    std::thread::sleep(Duration::from_millis(1_000));
    cluster.migrate_slot_atomically(slot, home);
    let deadline = Instant::now() + REPLY;
    let status = loop {
        if let Some(status) = job.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = job.kill();
            panic!("fencedlock run did not end within {REPLY:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "the command ran to its end under one lease");
    let st = cluster.nodes()[home].lock_status(key).expect("the key stays, with its fence");
    assert_eq!((st.fence, st.held), (fence, false), "one lease, released at the end");
}
