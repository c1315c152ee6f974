//! Read leases (`ACQUIRE … SHARED`, issue #36) through a failover: the primary dies with
//! readers in, a replica that had caught up is promoted. The promoted replica keeps every
//! reader with its fence, a writer still waits for them, and every grant after the failover
//! (reader or writer) is above every fence before it.

use fencedlock_protocol::command::{ACQUIRE, RELEASE, SHARED};
use harness::redis;
use harness::{epoch_of, error_text, Server};

const TTL_MS: u64 = 20_000;

/// `ACQUIRE key token TTL_MS`, with `SHARED` when `shared`: the fence, or `None`.
fn take(s: &Server, key: &str, token: &str, shared: bool) -> Option<u64> {
    let mut cmd = redis::cmd(ACQUIRE.name);
    cmd.arg(key).arg(token).arg(TTL_MS);
    if shared {
        cmd.arg(SHARED);
    }
    s.query(&cmd).unwrap_or_else(|e| panic!("ACQUIRE {key} {token} on {}: {}", s.addr(), error_text(&e)))
}

fn release(s: &Server, key: &str, token: &str) -> i64 {
    s.query(redis::cmd(RELEASE.name).arg(key).arg(token)).expect("RELEASE")
}

#[test]
fn a_promoted_replica_keeps_the_readers_and_fences_rise_in_both_modes() {
    let mut p = Server::start();
    let r = p.start_replica();
    let key = "frw:fo";
    let writer = take(&p, key, "w0", false).expect("the write lease");
    assert_eq!(release(&p, key, "w0"), 1);
    let readers: Vec<u64> =
        ["r1", "r2"].iter().map(|t| take(&p, key, t, true).expect("a read lease")).collect();
    assert!(writer < readers[0] && readers[0] < readers[1]);
    p.wait_caught_up(&r);
    p.kill9();
    r.promote();

    let st = r.semaphore_status(key).expect("the key survived");
    assert!(st.is_shared(), "{st:?}");
    assert_eq!(st.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), readers, "the same readers");
    assert_eq!(take(&r, key, "w1", false), None, "a writer still waits for the readers");
    assert_eq!(take(&r, key, "r1", true), Some(readers[0]), "a reader re-enters with its fence");
    let top = readers[1];
    let r3 = take(&r, key, "r3", true).expect("a new reader");
    assert!(r3 > top && epoch_of(r3) > epoch_of(top), "reader {r3} after the failover, {top} before");
    for token in ["r1", "r2", "r3"] {
        assert_eq!(release(&r, key, token), 1, "{token}");
    }
    let w1 = take(&r, key, "w1", false).expect("the writer once the readers left");
    assert!(w1 > r3, "writer {w1} after reader {r3}");
}
