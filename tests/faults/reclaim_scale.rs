//! Bounded memory at scale (issue #10): a million per-entity lock keys (one per invoice), each
//! taken and released once, plus 200,000 leases that expire without a release, plus a few held
//! leases. A replica joins once they are loaded (full sync). Then the retention is lowered: the
//! module reclaims every idle key while the server keeps answering `PING` within 50 ms, memory
//! returns to where it was before the load on the primary and on the replica (which deletes
//! nothing itself: it follows the primary's `DEL`s), and an AOF restart brings back only the
//! held keys.
//!
//! Measured numbers are printed (`--nocapture` shows them): memory before / at the peak /
//! after, the index size, the longest `PING` round trip, and how long the reclaim took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, RELEASE};
use fencedlock_protocol::config::RECLAIM_AFTER_MS;
use harness::redis::{self, Value};
use harness::{error_text, poll, Server};

const RECLAIM: &str = RECLAIM_AFTER_MS.full_name;
/// Per-entity keys taken and released once.
const RELEASED: usize = 1_000_000;
/// Leases taken with a short ttl and never released.
const EXPIRING: usize = 200_000;
/// The ttl the released keys were granted with: the index files each of them at that deadline
/// too, an entry that is skipped (stale) when it falls due.
const RELEASED_TTL_MS: u64 = 10_000;
const EXPIRING_TTL_MS: u64 = 2_000;
/// Held through the whole test.
const HELD: usize = 10;
const HELD_TTL_MS: u64 = 600_000;
/// Keys per pipeline (each key is one or two commands).
const BATCH: usize = 5_000;
/// The retention set once everything is loaded.
const RETENTION_MS: u64 = 1_000;
/// The server must answer a `PING` within this while it reclaims.
const MAX_PING: Duration = Duration::from_millis(50);
/// Pause between two `PING`s of the prober (it must not starve the server of CPU).
const PING_EVERY: Duration = Duration::from_millis(2);
/// Bound on the reclaim of all 1.2 million keys.
const RECLAIM_LIMIT: Duration = Duration::from_secs(120);
/// Bound on memory settling (the keyspace's hash table shrinks in the server's cron).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);
/// Memory after may exceed memory before by this much: max(5 %, 2 MiB).
const SLACK_BYTES: u64 = 2 << 20;

fn reclaimed(s: &Server) -> u64 {
    s.fencedlock_counter("fencedlock_reclaimed")
}

fn tracked(s: &Server) -> u64 {
    s.fencedlock_counter("fencedlock_reclaim_tracked")
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Runs one pipeline of `(command, key, token, ttl?)` and checks each reply: ACQUIRE grants a
/// fence, RELEASE answers 1. Returns the fences granted, in order.
fn run_pipeline(conn: &mut redis::Connection, pipe: &redis::Pipeline, what: &str) -> Vec<u64> {
    let replies: Vec<Value> = pipe.query(conn).unwrap_or_else(|e| panic!("{what}: {}", error_text(&e)));
    let mut fences = Vec::new();
    for (i, reply) in replies.into_iter().enumerate() {
        match reply {
            Value::Int(f) if f > 0 => fences.push(f as u64),
            other => panic!("{what}: reply {i} was {other:?}"),
        }
    }
    fences
}

/// What [`load`] wrote.
struct Loaded {
    /// The held keys and their fences.
    held: Vec<(String, u64)>,
    /// The largest fence granted.
    max: u64,
    /// When the last short lease was granted.
    expiring_granted: Instant,
}

/// Loads the keys.
fn load(s: &Server) -> Loaded {
    let mut conn = s.conn();
    let mut max = 0;
    for start in (0..RELEASED).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for n in start..(start + BATCH).min(RELEASED) {
            let key = format!("inv:{n}");
            pipe.cmd(ACQUIRE.name).arg(&key).arg("worker").arg(RELEASED_TTL_MS);
            pipe.cmd(RELEASE.name).arg(&key).arg("worker");
        }
        let replies = run_pipeline(&mut conn, &pipe, "acquire + release");
        // Pairs: (fence, 1).
        for pair in replies.chunks(2) {
            assert_eq!(pair[1], 1, "RELEASE of a key just granted");
            max = max.max(pair[0]);
        }
    }
    for start in (0..EXPIRING).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for n in start..(start + BATCH).min(EXPIRING) {
            pipe.cmd(ACQUIRE.name).arg(format!("exp:{n}")).arg("worker").arg(EXPIRING_TTL_MS);
        }
        max = max.max(run_pipeline(&mut conn, &pipe, "acquire").into_iter().max().unwrap_or(0));
    }
    let expiring_granted = Instant::now();
    let held: Vec<(String, u64)> = (0..HELD)
        .map(|n| {
            let key = format!("held:{n}");
            let fence: u64 =
                s.cmd(&[ACQUIRE.name, &key, "holder", &HELD_TTL_MS.to_string()]).expect("held grant");
            (key, fence)
        })
        .collect();
    max = max.max(held.iter().map(|(_, f)| *f).max().unwrap_or(0));
    Loaded { held, max, expiring_granted }
}

/// What the prober saw.
#[derive(Debug, Default, Clone, Copy)]
struct Pings {
    count: usize,
    worst: Duration,
    /// When the worst one was sent, from the start of the probe.
    worst_at: Duration,
    /// Round trips above 10 ms.
    over_10ms: usize,
}

/// `PING`s `s` every [`PING_EVERY`] on its own connection until `stop`.
fn probe(s: &Server, stop: &AtomicBool) -> Pings {
    let mut conn = s.conn();
    let mut pings = Pings::default();
    let started = Instant::now();
    while !stop.load(Ordering::SeqCst) && started.elapsed() < RECLAIM_LIMIT + SETTLE_LIMIT {
        let sent = Instant::now();
        let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
        let rtt = sent.elapsed();
        assert_eq!(pong, "PONG");
        if rtt > pings.worst {
            pings.worst = rtt;
            pings.worst_at = sent - started;
        }
        pings.over_10ms += usize::from(rtt > Duration::from_millis(10));
        pings.count += 1;
        thread::sleep(PING_EVERY);
    }
    pings
}

/// Seconds of CPU the server has used (`used_cpu_sys` + `used_cpu_user`).
fn server_cpu(s: &Server) -> f64 {
    let cpu = s.info("cpu");
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|f| cpu.get(*f))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// Waits until `s` holds `keys` keys (the held ones) and tracks only them.
fn wait_only_held(s: &Server, keys: usize, limit: Duration) {
    poll(&format!("{} to keep only the {keys} held keys", s.addr()), limit, || {
        s.dbsize() == keys as u64 && tracked(s) == keys as u64
    });
}

/// Waits until `s`'s memory is back within max(5 %, 2 MiB) of `before`; returns it.
fn settled_memory(s: &Server, before: u64, who: &str) -> u64 {
    let allowed = before + SLACK_BYTES.max(before / 20);
    let mut after = 0;
    let deadline = Instant::now() + SETTLE_LIMIT;
    while Instant::now() < deadline {
        after = s.purged_used_memory();
        if after <= allowed {
            return after;
        }
        thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "{who}: used_memory {} after the reclaim, {} before (allowed {}); INFO memory: {:?}",
        mib(after),
        mib(before),
        mib(allowed),
        s.info("memory")
    );
}

fn assert_held(s: &Server, held: &[(String, u64)], who: &str) {
    for (key, fence) in held {
        let st = s.lock_status(key).unwrap_or_else(|| panic!("{who}: the held key {key} is gone"));
        assert_eq!((st.fence, st.held), (*fence, true), "{who}: {key}");
    }
}

#[test]
fn a_million_idle_keys_are_reclaimed_in_bounded_slices_and_memory_returns() {
    let test_start = Instant::now();
    // The primary writes an AOF (checked after a restart); auto-rewrite is off so that the
    // restart replays every grant, release and reclaim. A 16 KiB replication backlog keeps
    // the fixed-size replication buffers out of the memory comparison.
    let mut primary = Server::builder()
        .arg("appendonly", "yes")
        .arg("auto-aof-rewrite-percentage", "0")
        .arg("repl-backlog-size", "16kb")
        // Replaying a million keys' history takes longer than the default start timeout.
        .start_timeout(Duration::from_secs(120))
        .start();
    // The replica starts on its own and is attached once the keys are loaded.
    let replica =
        Server::builder().arg("repl-backlog-size", "16kb").arg(RECLAIM, RETENTION_MS.to_string()).start();
    let before = primary.purged_used_memory();
    let replica_before = replica.purged_used_memory();
    eprintln!(
        "[{}] allocator {}; used_memory before: primary {}, replica {}",
        primary.flavor(),
        primary.allocator(),
        mib(before),
        mib(replica_before)
    );

    // Load with the default retention (10 min): nothing is reclaimed yet.
    let loading = Instant::now();
    let cpu_before = server_cpu(&primary);
    let Loaded { held, max, expiring_granted } = load(&primary);
    let load_time = loading.elapsed();
    let load_cpu = server_cpu(&primary) - cpu_before;
    let total = (RELEASED + EXPIRING + HELD) as u64;
    assert_eq!(primary.dbsize(), total);
    assert_eq!(tracked(&primary), total + RELEASED as u64, "released keys are filed twice");
    let peak = primary.used_memory();
    let index = primary.fencedlock_counter("fencedlock_reclaim_index_bytes");
    eprintln!(
        "[{}] loaded {total} keys in {load_time:?} (server CPU {load_cpu:.1} s): used_memory {} (+{}), reclaim index {} ({} B per key)",
        primary.flavor(),
        mib(peak),
        mib(peak.saturating_sub(before)),
        mib(index),
        index / total
    );
    assert_eq!(reclaimed(&primary), 0);
    // The replica joins now, with every key in place: a full sync (the primary forks for it,
    // which is why this happens before the latency probe starts), then the stream.
    let attaching = Instant::now();
    replica.attach_as_replica_of(&primary, RECLAIM_LIMIT);
    eprintln!(
        "[{}] replica attached in {:?} (primary's fork took {} µs)",
        primary.flavor(),
        attaching.elapsed(),
        primary.info_field("stats", "latest_fork_usec").unwrap_or_default()
    );
    assert_eq!(replica.dbsize(), total);
    // Let the short leases run out.
    thread::sleep(Duration::from_millis(EXPIRING_TTL_MS).saturating_sub(expiring_granted.elapsed()));

    let stop = AtomicBool::new(false);
    let pings = Mutex::new(Pings::default());
    let mut reclaim_time = Duration::ZERO;
    thread::scope(|scope| {
        scope.spawn(|| {
            let result = probe(&primary, &stop);
            *pings.lock().unwrap_or_else(|p| p.into_inner()) = result;
        });
        // Make sure the prober is connected and pinging before the reclaim starts.
        thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        primary.config_set(RECLAIM, &RETENTION_MS.to_string());
        wait_only_held(&primary, HELD, RECLAIM_LIMIT);
        reclaim_time = start.elapsed();
        stop.store(true, Ordering::SeqCst);
    });
    let pings = *pings.lock().unwrap_or_else(|p| p.into_inner());
    let worst_ping = pings.worst;
    eprintln!(
        "[{}] reclaimed {} keys in {reclaim_time:?} ({:.0} keys/s); {} PINGs meanwhile: longest round trip {worst_ping:?} (sent {:?} into the probe), {} above 10 ms",
        primary.flavor(),
        RELEASED + EXPIRING,
        (RELEASED + EXPIRING) as f64 / reclaim_time.as_secs_f64(),
        pings.count,
        pings.worst_at,
        pings.over_10ms
    );
    assert!(pings.count > 100, "the prober ran: {} PINGs", pings.count);
    assert_eq!(reclaimed(&primary), (RELEASED + EXPIRING) as u64);
    assert!(primary.fencedlock_counter("fencedlock_reclaim_index_bytes") > 0, "held keys are tracked");
    assert_held(&primary, &held, "primary");
    assert_eq!(primary.high_water(), max, "reclaiming moves no fence");
    assert!(
        worst_ping < MAX_PING,
        "a PING took {worst_ping:?} while the module reclaimed (limit {MAX_PING:?})"
    );

    let after = settled_memory(&primary, before, "primary");
    eprintln!(
        "[{}] primary used_memory: before {}, peak {}, after {} ({:+} bytes)",
        primary.flavor(),
        mib(before),
        mib(peak),
        mib(after),
        after as i64 - before as i64
    );

    // The replica: the same keys, deleted by its primary's DELs, not by itself.
    primary.wait_caught_up(&replica);
    wait_only_held(&replica, HELD, RECLAIM_LIMIT);
    assert_held(&replica, &held, "replica");
    assert_eq!(reclaimed(&replica), 0, "a replica deletes nothing itself");
    let replica_after = settled_memory(&replica, replica_before, "replica");
    eprintln!(
        "[{}] replica used_memory: before {}, after {} ({:+} bytes)",
        primary.flavor(),
        mib(replica_before),
        mib(replica_after),
        replica_after as i64 - replica_before as i64
    );
    // A fresh grant on a reclaimed key is above everything; it is held through the restart.
    let next: u64 = primary.cmd(&[ACQUIRE.name, "inv:0", "next", &HELD_TTL_MS.to_string()]).expect("grant");
    assert!(next > max, "{next} after {max}");
    let mut held = held;
    held.push(("inv:0".to_string(), next));
    primary.wait_caught_up(&replica);
    drop(replica);

    // An AOF restart replays every grant, release and reclaim: only the held keys come back.
    // The replay re-creates each reclaimed key before its DEL, so the index briefly has an
    // entry for every one of them; they are dropped once due.
    primary.set_restart_arg(RECLAIM, &RETENTION_MS.to_string());
    let restarting = Instant::now();
    primary.restart();
    let restart_time = restarting.elapsed();
    assert_eq!(primary.dbsize(), held.len() as u64, "only the held keys came back");
    for key in ["inv:1", "inv:999999", "exp:0", "exp:199999"] {
        assert_eq!(primary.lock_status(key), None, "{key} stayed reclaimed");
    }
    assert_held(&primary, &held, "primary after the restart");
    let (stale, stale_bytes, loaded_memory) = (
        tracked(&primary),
        primary.fencedlock_counter("fencedlock_reclaim_index_bytes"),
        primary.used_memory(),
    );
    let draining = Instant::now();
    wait_only_held(&primary, held.len(), RECLAIM_LIMIT);
    let drain_time = draining.elapsed();
    let restarted = settled_memory(&primary, before, "primary after the AOF restart");
    eprintln!(
        "[{}] AOF restart took {restart_time:?}; right after it: {stale} index entries ({}), used_memory {}; entries of deleted keys dropped {drain_time:?} later; used_memory then {}; whole test {:?}",
        primary.flavor(),
        mib(stale_bytes),
        mib(loaded_memory),
        mib(restarted),
        test_start.elapsed()
    );
    let again: u64 = primary.cmd(&[ACQUIRE.name, "inv:1", "again", "1000"]).expect("grant");
    assert!(again > next, "{again} after {next}");
}
