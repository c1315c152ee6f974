//! The server's clocks, in microseconds. Lease deadlines never use the wall clock, so a clock
//! step (NTP, an operator) cannot shorten or lengthen a lease; only new epochs read it.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use redis_module::raw;

use crate::lock::Micros;

/// Now, on the server's monotonic clock.
pub fn now() -> Micros {
    // SAFETY: the API pointers are filled by RedisModule_Init and only read afterwards.
    match unsafe { raw::RedisModule_MonotonicMicroseconds } {
        // SAFETY: the function takes no arguments and only reads the clock.
        Some(monotonic) => unsafe { monotonic() },
        None => fallback(),
    }
}

/// For servers without `RedisModule_MonotonicMicroseconds`: the same CLOCK_MONOTONIC, measured
/// from the first call.
fn fallback() -> Micros {
    static START: OnceLock<Instant> = OnceLock::new();
    let elapsed = START.get_or_init(Instant::now).elapsed();
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// The wall clock, in µs since 1970, for epochs only (see `epoch.rs`): the one order that nodes
/// which never talked to each other share. A clock before 1970 reads as 0, which makes the
/// epoch fall back to a jump from the mark.
pub fn wall_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX))
}
