//! The Rust client's own cost per lease (issue 44): the client process's CPU time and context
//! switches per lease of a `Locker` (acquire + release) against the raw `ACQUIRE` and
//! `RELEASE` on one multiplexed connection, on one redis-server with the module that this
//! bench starts (127.0.0.1). Batches alternate; each figure is the median over rounds.
//!
//! A diagnosis, not in `run-all`: what the paired pass of `client.rs` shows as a ratio of
//! wall times, this splits into what the client spends. For deterministic counts, run one
//! side alone under callgrind (`valgrind --tool=callgrind target/release/deps/lease_cpu-…
//! --bench --rounds 1 --leases 3000 --only locker`, then `--only raw`) or under `strace -c -f`
//! for the system calls.
//!
//! `cargo bench --bench lease_cpu -- [--rounds N] [--leases N] [--only raw|locker]`

mod support;

use std::time::{Duration, Instant};

use fencedlock::{LockConfig, Locker};

const TTL: Duration = Duration::from_secs(10);

/// The process's CPU time (all threads, user and system) and context switches so far.
fn usage() -> (Duration, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // Linux reports these in USER_HZ, 100 on every platform it runs on.
    let cpu = Duration::from_millis(ticks * 10);
    let mut switches = 0;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(n) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or(line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += n.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    (cpu, switches)
}

fn arg(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect(name))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` builds it; only `cargo bench` runs it.
    }
    let (rounds, leases) = (arg("--rounds", 7), arg("--leases", 5000));
    let rt = support::runtime();
    let server = support::redis_servers(1).remove(0);
    let locker =
        Locker::open(&server.url(), LockConfig::builder().ttl(TTL).build().expect("config")).expect("locker");
    let mut conn = rt.block_on(server.async_conn());
    let raw = |conn: &mut harness::redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            for _ in 0..leases {
                support::raw_lease(&mut conn, "cpu:raw", TTL).await;
            }
        }
    };
    let lease = |locker: &Locker| {
        let locker = locker.clone();
        async move {
            for _ in 0..leases {
                let lease = locker.try_acquire("cpu:locker").await.expect("grant");
                assert!(lease.release().await.expect("release"), "lease lost");
            }
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(String::as_str);
    let sides: &[usize] = match only {
        None => &[0, 1],
        Some("raw") => &[0],
        Some("locker") => &[1],
        Some(other) => panic!("--only raw or --only locker, not {other:?}"),
    };
    // Warm up: connections open, the engine detected.
    for &which in sides {
        if which == 0 {
            rt.block_on(raw(&mut conn));
        } else {
            rt.block_on(lease(&locker));
        }
    }
    let mut samples: [Vec<(f64, f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order: Vec<usize> =
            if round % 2 == 0 { sides.to_vec() } else { sides.iter().rev().copied().collect() };
        for which in order {
            let (cpu0, switches0) = usage();
            let started = Instant::now();
            if which == 0 {
                rt.block_on(raw(&mut conn));
            } else {
                rt.block_on(lease(&locker));
            }
            let wall = started.elapsed();
            let (cpu1, switches1) = usage();
            let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(leases);
            samples[which].push((
                per(wall),
                per(cpu1 - cpu0),
                (switches1 - switches0) as f64 / f64::from(leases),
            ));
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("per lease, medians of {rounds} rounds of {leases} (load average {})", load.trim());
    for (name, s) in
        ["raw ACQUIRE + RELEASE", "Locker lease"].iter().zip(&samples).filter(|(_, s)| !s.is_empty())
    {
        let col = |f: fn(&(f64, f64, f64)) -> f64| median(s.iter().map(f).collect());
        println!(
            "  {name:<22} wall {:7.1} µs  client CPU {:6.1} µs  context switches {:5.2}",
            col(|x| x.0),
            col(|x| x.1),
            col(|x| x.2)
        );
    }
}
