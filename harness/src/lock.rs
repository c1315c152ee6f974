//! Reading the module's state straight from a server, bypassing the client under test:
//! `FENCEDLOCK.STATUS` decoded and checked, and the `INFO fencedlock` counters.

use redis::{ToRedisArgs, Value};

use crate::reply::error_text;
use crate::server::Server;

/// One block of the fence space: a restart or a promotion jumps the high-water mark by this,
/// so `fence / EPOCH_GAP` is the epoch a fence was issued in.
pub const EPOCH_GAP: u64 = 1 << 32;

/// `FENCEDLOCK.STATUS` decoded: `[fence, held, pttl_ms or -1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockStatus {
    /// The key's fence (kept after release and expiry).
    pub fence: u64,
    /// Whether an unexpired lease is held.
    pub held: bool,
    /// Remaining lease time in ms; -1 when not held.
    pub pttl: i64,
}

impl LockStatus {
    /// Decode a `STATUS` reply, `None` for nil. Panics on a reply that breaks the contract
    /// (wrong shape, fence not positive, held not 0/1, a held lease without a pttl, a free
    /// one with a pttl), so every test that reads a status also checks its shape.
    pub fn decode(reply: &Value) -> Option<LockStatus> {
        let items = match reply {
            Value::Nil => return None,
            Value::Array(items) => items,
            other => panic!("STATUS replied {other:?}"),
        };
        let [Value::Int(fence), Value::Int(held), Value::Int(pttl)] = items.as_slice() else {
            panic!("STATUS must be [fence, held, pttl]: {reply:?}");
        };
        assert!(*fence > 0, "fence must be positive: {reply:?}");
        let held = match held {
            0 => false,
            1 => true,
            _ => panic!("held must be 0 or 1: {reply:?}"),
        };
        if held {
            assert!(*pttl >= 0, "a held lease has a pttl: {reply:?}");
        } else {
            assert_eq!(*pttl, -1, "a free lock has pttl -1: {reply:?}");
        }
        Some(LockStatus { fence: *fence as u64, held, pttl: *pttl })
    }
}

impl Server {
    /// `FENCEDLOCK.STATUS key`, decoded and checked ([`LockStatus::decode`]); `None` for a
    /// key without lock state. Panics on an error reply.
    pub fn lock_status(&self, key: impl ToRedisArgs) -> Option<LockStatus> {
        let reply: Value = self
            .query(redis::cmd("FENCEDLOCK.STATUS").arg(key))
            .unwrap_or_else(|e| panic!("STATUS on {}: {}", self.addr(), error_text(&e)));
        LockStatus::decode(&reply)
    }

    /// One numeric `INFO fencedlock` field, e.g. `fencedlock_high_water_mark`; panics if it
    /// is missing or not a number.
    pub fn fencedlock_counter(&self, name: &str) -> u64 {
        let info = self.info("fencedlock");
        let value = info
            .get(name)
            .unwrap_or_else(|| panic!("INFO fencedlock on {} has no {name}: {info:?}", self.addr()));
        value.parse().unwrap_or_else(|e| panic!("{name}={value:?} is not a number: {e}"))
    }

    /// The server's fence high-water mark (`fencedlock_high_water_mark`).
    pub fn high_water(&self) -> u64 {
        self.fencedlock_counter("fencedlock_high_water_mark")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_status_replies() {
        let reply = |f, h, p| Value::Array(vec![Value::Int(f), Value::Int(h), Value::Int(p)]);
        assert_eq!(LockStatus::decode(&Value::Nil), None);
        assert_eq!(
            LockStatus::decode(&reply(7, 1, 250)),
            Some(LockStatus { fence: 7, held: true, pttl: 250 })
        );
        assert_eq!(
            LockStatus::decode(&reply(7, 0, -1)),
            Some(LockStatus { fence: 7, held: false, pttl: -1 })
        );
    }

    #[test]
    #[should_panic(expected = "a free lock has pttl -1")]
    fn a_free_lock_with_a_pttl_breaks_the_contract() {
        LockStatus::decode(&Value::Array(vec![Value::Int(7), Value::Int(0), Value::Int(5)]));
    }
}
