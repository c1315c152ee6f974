//! Port selection for test servers.
//!
//! Ports are drawn from 10000..=22000: below the kernel's ephemeral range (32768+), where a
//! client's source port could collide with a server, and low enough that a cluster bus port
//! (port + 10000) stays below it too. A bind probe filters out ports in use; the caller still
//! retries on a start failure, because another process can take the port in between.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Lowest port handed out.
pub const PORT_MIN: u16 = 10000;
/// Highest port handed out.
pub const PORT_MAX: u16 = 22000;
/// Offset of the cluster bus port.
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// Ports this process has handed out; never reused, so a stopped server keeps its port for
/// a restart and parallel tests never race for the same one.
static CLAIMED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port that is free right now (and whose bus port is free too when `with_bus`), claimed
/// for this process. Panics if none is found after many draws (machine is saturated).
pub fn pick_port(with_bus: bool) -> u16 {
    const DRAWS: usize = 500;
    for _ in 0..DRAWS {
        let span = u64::from(PORT_MAX - PORT_MIN) + 1;
        let port = PORT_MIN + (random_u64() % span) as u16;
        if !bindable(port) || (with_bus && !bindable(port + CLUSTER_BUS_OFFSET)) {
            continue;
        }
        let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
        if claimed.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
    panic!("no free port in {PORT_MIN}..={PORT_MAX} after {DRAWS} draws");
}
