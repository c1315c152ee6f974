//! The wall-clock floor of an epoch taken now, for tests that check the module's epoch rule
//! (`fencedlock_protocol::epoch`): the servers read the same clock, later.

use std::time::{SystemTime, UNIX_EPOCH};

use fencedlock_protocol::epoch::floor_at;

/// The first fence of an epoch taken now: every fence of an epoch a server on this machine
/// takes after this call is at least this.
pub fn floor_now() -> u64 {
    let since_1970 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    floor_at(u64::try_from(since_1970.as_micros()).unwrap_or(u64::MAX))
}
