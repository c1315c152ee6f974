//! The server's monotonic clock, in microseconds. Lease deadlines never use the wall clock, so a
//! clock step (NTP, an operator) cannot shorten or lengthen a lease.

use std::sync::OnceLock;
use std::time::Instant;

use redis_module::raw;

use crate::lease::Micros;

pub fn now() -> Micros {
    // SAFETY: the pointer is filled by RedisModule_Init and the function takes no arguments.
    match unsafe { raw::RedisModule_MonotonicMicroseconds } {
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
