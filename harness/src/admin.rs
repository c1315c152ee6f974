//! Server settings and sizes a test reads or changes while the server runs: `CONFIG GET` /
//! `CONFIG SET`, `DBSIZE`, the keys matching a pattern, memory use.

use crate::reply::error_text;
use crate::server::Server;
use crate::slots::FLOOR_KEY_PREFIX;

/// Keys `SCAN` asks for per round, and the bound on rounds (a test keyspace is small when a
/// test lists it).
const SCAN_COUNT: usize = 1_000;
const MAX_SCAN_ROUNDS: usize = 100_000;

impl Server {
    /// `CONFIG GET name`: the value; panics if the server knows no such config.
    pub fn config_get(&self, name: &str) -> String {
        let pair: Vec<String> = self
            .admin_cmd(&["CONFIG", "GET", name])
            .unwrap_or_else(|e| panic!("CONFIG GET {name} on {}: {}", self.addr(), error_text(&e)));
        match pair.as_slice() {
            [n, value] if n.eq_ignore_ascii_case(name) => value.clone(),
            other => panic!("CONFIG GET {name} on {}: {other:?}", self.addr()),
        }
    }

    /// `CONFIG SET name value`, which must be accepted (use [`Server::try_config_set`] to see a
    /// refusal).
    pub fn config_set(&self, name: &str, value: &str) {
        self.try_config_set(name, value)
            .unwrap_or_else(|e| panic!("CONFIG SET {name} {value} on {}: {}", self.addr(), error_text(&e)));
    }

    /// `CONFIG SET name value`: `Err` with the server's refusal.
    pub fn try_config_set(&self, name: &str, value: &str) -> redis::RedisResult<()> {
        self.admin_cmd(&["CONFIG", "SET", name, value])
    }

    /// `DBSIZE` of the selected database (0 on the cached connection).
    pub fn dbsize(&self) -> u64 {
        self.cmd(&["DBSIZE"]).unwrap_or_else(|e| panic!("DBSIZE on {}: {}", self.addr(), error_text(&e)))
    }

    /// `EXISTS key` as a bool.
    pub fn exists(&self, key: &str) -> bool {
        let n: i64 = self
            .cmd(&["EXISTS", key])
            .unwrap_or_else(|e| panic!("EXISTS on {}: {}", self.addr(), error_text(&e)));
        n == 1
    }

    /// Every key matching the glob `pattern`, by `SCAN` (sorted; a key seen twice is listed once).
    pub fn scan_match(&self, pattern: &str) -> Vec<String> {
        let mut keys = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        for _ in 0..MAX_SCAN_ROUNDS {
            let (next, batch): (u64, Vec<String>) = self
                .query(redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT))
                .unwrap_or_else(|e| panic!("SCAN on {}: {}", self.addr(), error_text(&e)));
            keys.extend(batch);
            if next == 0 {
                return keys.into_iter().collect();
            }
            cursor = next;
        }
        panic!("SCAN on {} did not finish within {MAX_SCAN_ROUNDS} rounds", self.addr());
    }

    /// The module's slot floor keys this node stores (`fencedlock:floor:{…}`; only a Redis
    /// Cluster node has any).
    pub fn floor_keys(&self) -> Vec<String> {
        self.scan_match(&format!("{FLOOR_KEY_PREFIX}*"))
    }

    /// `used_memory` from `INFO memory`: bytes the server's allocator handed out.
    pub fn used_memory(&self) -> u64 {
        let v = self
            .info_field("memory", "used_memory")
            .unwrap_or_else(|| panic!("{}: no used_memory", self.addr()));
        v.parse().unwrap_or_else(|e| panic!("used_memory={v:?}: {e}"))
    }

    /// `MEMORY PURGE` (gives jemalloc's dirty pages back; answers OK and does nothing with
    /// libc malloc), then [`Server::used_memory`].
    pub fn purged_used_memory(&self) -> u64 {
        let _: () = self
            .cmd(&["MEMORY", "PURGE"])
            .unwrap_or_else(|e| panic!("MEMORY PURGE on {}: {}", self.addr(), error_text(&e)));
        self.used_memory()
    }

    /// The allocator the server was built with (`mem_allocator`, e.g. `jemalloc-5.3.0`, `libc`).
    pub fn allocator(&self) -> String {
        self.info_field("memory", "mem_allocator").unwrap_or_default()
    }
}
