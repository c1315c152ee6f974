//! Bounded polling: every wait in the harness ends, with a message naming what it waited for.

use std::thread::sleep;
use std::time::{Duration, Instant};

/// Poll `cond` every 20 ms until it holds; panics after `limit` naming `what`.
pub fn poll(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        sleep(Duration::from_millis(20));
    }
}
