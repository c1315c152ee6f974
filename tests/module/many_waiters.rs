//! 10,000 waiters on one key (issue 24): every one is served in arrival order with a rising
//! fence, and the server's memory returns to its baseline after they are gone.
//!
//! Raw sockets, not the harness's `redis::Connection`s: 10,000 of those would mean 10,000
//! threads. Waiter `i` is sent only once the server has queued waiter `i - 1`, so the order is
//! certain; the chain is then read in that order, so a waiter served out of turn leaves the
//! next read waiting and the read timeout fails the test.
//!
//! The memory wait is long because of the server, not the module: each blocked client takes two
//! temporary clients (`moduleBlockClient` in module.c), which go back to a pool that
//! `modulesCron` frees at 50 per 100 ms.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;
use fencedlock_protocol::command::RELEASE;
use harness::{acquire_cmd, redis, Server};

const WAITERS: usize = 10_000;
/// Bound on one reply that must come.
const REPLY: Duration = Duration::from_secs(10);
/// `modulesCron` frees 50 pooled temporary clients per 100 ms; two per waiter.
const POOL_FREED_PER_SEC: u64 = 500;
/// What may stay above the baseline: allocator slack, the control connection's buffers.
const SLACK_BYTES: u64 = 2 << 20;

fn used_memory(s: &Server) -> u64 {
    s.info_field("memory", "used_memory").and_then(|v| v.parse().ok()).expect("used_memory")
}

/// Reads one single-line reply (`:n`, `+OK`, `$-1`, `-ERR …`) without the CRLF.
fn read_line(stream: &mut TcpStream, what: &str) -> String {
    let mut line = Vec::with_capacity(32);
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert!(line.len() < 1024, "{what}: reply line too long");
        let n = stream.read(&mut byte).unwrap_or_else(|e| panic!("{what}: no reply ({e})"));
        assert_eq!(n, 1, "{what}: connection closed");
        line.push(byte[0]);
    }
    line.truncate(line.len() - 2);
    String::from_utf8_lossy(&line).into_owned()
}

#[test]
fn ten_thousand_waiters_are_served_in_order_and_leave_no_memory_behind() {
    let s = Server::start();
    s.cmd::<()>(&["CONFIG", "SET", "maxclients", &(WAITERS + 100).to_string()]).expect("maxclients");
    let key = "many:lock";
    let token = |i: usize| format!("w{i}");
    thread::sleep(Duration::from_millis(500));
    let baseline = used_memory(&s);
    let first = grant(&s, key, b"holder", LONG_TTL);

    let started = Instant::now();
    let mut waiters = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        let mut stream = TcpStream::connect(s.addr()).unwrap_or_else(|e| panic!("connect waiter {i}: {e}"));
        stream.set_read_timeout(Some(REPLY)).expect("read timeout");
        stream.set_nodelay(true).expect("nodelay");
        let cmd = acquire_cmd(key, token(i).as_bytes(), LONG_TTL, Some(0));
        stream.write_all(&cmd.get_packed_command()).expect("send ACQUIRE");
        s.wait_waiters(i as u64 + 1, REPLY);
        waiters.push(stream);
    }
    let queued = started.elapsed();
    let held = used_memory(&s);

    assert_eq!(release(&s, key, b"holder"), 1);
    let chain = Instant::now();
    let mut last = first;
    for (i, stream) in waiters.iter_mut().enumerate() {
        let reply = read_line(stream, &format!("waiter {i}'s grant"));
        let fence: u64 = reply
            .strip_prefix(':')
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("waiter {i}: expected a fence, got {reply:?}"));
        assert!(fence > last, "waiter {i}: fence {fence} after {last}");
        last = fence;
        let mut release = redis::cmd(RELEASE.name);
        release.arg(key).arg(token(i));
        stream.write_all(&release.get_packed_command()).expect("send RELEASE");
        assert_eq!(read_line(stream, &format!("waiter {i}'s RELEASE")), ":1", "waiter {i} held its lease");
    }
    let chain = chain.elapsed();
    assert_eq!(last, first + WAITERS as u64, "one grant per waiter, no fence skipped");
    assert_eq!(s.waiters(), 0);
    drop(waiters);

    let limit = Duration::from_secs(2 * WAITERS as u64 / POOL_FREED_PER_SEC + 20);
    let drain = Instant::now();
    let mut now = used_memory(&s);
    while now > baseline + SLACK_BYTES && drain.elapsed() < limit {
        thread::sleep(Duration::from_millis(200));
        now = used_memory(&s);
    }
    assert!(
        now <= baseline + SLACK_BYTES,
        "used_memory {now} did not return to within {SLACK_BYTES} of {baseline} in {limit:?}"
    );
    eprintln!(
        "{WAITERS} waiters: queued in {queued:.1?}, {} bytes each while they waited, chain {chain:.1?} \
         ({:.0} handoffs/s), memory back to baseline in {:.1?}",
        held.saturating_sub(baseline) / WAITERS as u64,
        WAITERS as f64 / chain.as_secs_f64(),
        drain.elapsed()
    );
}
