//! Keeping 1,000 leases alive (issue 36): one `Session` (one pipeline of renewals per
//! interval) against 1,000 independent keep-alives (`Lease::keep_alive`, one renewal each), on
//! one server this bench starts (127.0.0.1, module loaded).
//!
//! Per renew interval, from the server's own counters (`INFO stats`, `INFO cpu`): the requests
//! it read (`total_reads_processed`: each is a read system call, so a round trip's worth of
//! work, however many commands it carried), the commands it ran, and its CPU time. Paired: the
//! two ways alternate for `FENCEDLOCK_BENCH_PAIRED_SECS` (default 12, at least two rounds of
//! each) and each ratio is the median over rounds. Writes `target/bench-results/session.json`.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fencedlock::{KeptLease, LockConfig, Locker, SessionLease};
use harness::Server;

const LEASES: usize = 1_000;
/// ttl 3 s: renewed every second.
const TTL: Duration = Duration::from_secs(3);
/// Intervals measured per round, after one to settle.
const INTERVALS: u32 = 3;

/// What the server did in one measured window.
#[derive(Debug, Clone, Copy)]
struct Counters {
    reads: f64,
    commands: f64,
    cpu: f64,
}

fn counters(server: &Server) -> Counters {
    let number = |section: &str, field: &str| -> f64 {
        server
            .info_field(section, field)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO {field}"))
    };
    Counters {
        reads: number("stats", "total_reads_processed"),
        commands: number("stats", "total_commands_processed"),
        cpu: number("cpu", "used_cpu_user") + number("cpu", "used_cpu_sys"),
    }
}

/// The server's work per interval while `hold` keeps the leases alive.
async fn per_interval(server: &Server, interval: Duration) -> Counters {
    tokio::time::sleep(interval).await;
    let before = counters(server);
    tokio::time::sleep(interval * INTERVALS).await;
    let after = counters(server);
    let n = f64::from(INTERVALS);
    Counters {
        reads: (after.reads - before.reads) / n,
        commands: (after.commands - before.commands) / n,
        cpu: (after.cpu - before.cpu) / n,
    }
}

fn main() {
    let Some(budget) = support::paired_budget(Duration::from_secs(12)) else { return };
    let rt = support::runtime();
    let servers = support::redis_servers(1);
    let server = &servers[0];
    let config = LockConfig::builder().ttl(TTL).build().expect("a valid config");
    let interval = config.renew_interval();
    let locker = Locker::open(&server.url(), config).expect("locker");
    let mut samples: BTreeMap<&str, Vec<Counters>> = BTreeMap::new();
    let started = Instant::now();
    let mut round = 0;
    while round < 2 || (started.elapsed() < budget && round < 50) {
        rt.block_on(async {
            let session = locker.session();
            let mut held: Vec<SessionLease> = Vec::with_capacity(LEASES);
            for i in 0..LEASES {
                held.push(session.try_acquire(&format!("bench:s:{i}")).await.expect("granted"));
            }
            samples.entry("session").or_default().push(per_interval(server, interval).await);
            assert!(held.iter().all(|l| l.ensure_valid().is_ok()), "a session lease was lost");
            assert_eq!(session.close().await, LEASES);

            let mut kept: Vec<KeptLease> = Vec::with_capacity(LEASES);
            for i in 0..LEASES {
                kept.push(locker.try_acquire(&format!("bench:k:{i}")).await.expect("granted").keep_alive());
            }
            samples.entry("independent").or_default().push(per_interval(server, interval).await);
            assert!(kept.iter().all(|l| l.ensure_valid().is_ok()), "a kept-alive lease was lost");
            futures::future::join_all(kept.into_iter().map(KeptLease::release)).await;
        });
        round += 1;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (session, independent) = (&samples["session"], &samples["independent"]);
    let ratio =
        |f: fn(&Counters) -> f64| median(session.iter().zip(independent).map(|(s, i)| f(s) / f(i)).collect());
    let each = |v: &[Counters], f: fn(&Counters) -> f64| median(v.iter().map(f).collect());
    let report = format!(
        "{{\n  \"leases\": {LEASES}, \"interval_ms\": {}, \"rounds\": {round},\n  \
         \"session\": {{ \"reads\": {:.1}, \"commands\": {:.1}, \"cpu_ms\": {:.2} }},\n  \
         \"independent\": {{ \"reads\": {:.1}, \"commands\": {:.1}, \"cpu_ms\": {:.2} }},\n  \
         \"ratio\": {{ \"reads\": {:.4}, \"commands\": {:.3}, \"cpu\": {:.3} }}\n}}\n",
        interval.as_millis(),
        each(session, |c| c.reads),
        each(session, |c| c.commands),
        each(session, |c| c.cpu) * 1e3,
        each(independent, |c| c.reads),
        each(independent, |c| c.commands),
        each(independent, |c| c.cpu) * 1e3,
        ratio(|c| c.reads),
        ratio(|c| c.commands),
        ratio(|c| c.cpu),
    );
    let path = support::results_file("session.json");
    std::fs::write(&path, &report).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    eprint!("{report}");
    eprintln!("per renew interval, session / independent keep-alives; written to {}", path.display());
}
