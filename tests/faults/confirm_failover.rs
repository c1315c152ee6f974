//! Failover with replica-confirmed grants: every lease the client handed out before the
//! failover is still held on the promoted replica, with its fence and token. The replica is
//! promoted while the old primary still answers (a partition, as a sentinel sees it), so a
//! client still talking to the old primary is granted leases the new primary never sees;
//! confirmation refuses to hand those out.

use std::time::Duration;

use fencedlock::{Error, Lease, LockConfig, Locker};
use harness::Server;

use crate::support::runtime;

const TTL: Duration = Duration::from_secs(20);

fn locker(server: &Server, confirm: usize) -> Locker {
    let config = LockConfig::builder()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(250))
        .max_wait(Duration::ZERO)
        .confirm_replicas(confirm)
        .confirm_timeout(Duration::from_millis(500))
        .build()
        .expect("config");
    Locker::open(&server.url(), config).expect("locker")
}

#[test]
fn a_confirmed_lease_is_still_held_on_the_new_primary() {
    let rt = runtime();
    let mut old = Server::start();
    let target = old.start_replica();
    let client = locker(&old, 1);

    let mut handed_out: Vec<Lease> = Vec::new();
    for i in 0..4 {
        let lease = rt.block_on(client.try_acquire(&format!("cf:before:{i}"))).expect("confirmed grant");
        handed_out.push(lease);
    }

    // The replica is promoted while the old primary still answers this client.
    target.promote();
    match rt.block_on(client.try_acquire("cf:during")) {
        Ok(lease) => handed_out.push(lease),
        Err(err) => {
            assert!(matches!(err, Error::NotConfirmed { confirmed: 0, .. }), "{err:?}");
            assert!(!old.lock_held("cf:during"), "the unconfirmed grant was released");
        }
    }
    old.kill9();

    // Every lease handed out is held on the new primary with its fence, and its token renews
    // it there.
    let on_new = locker(&target, 0);
    for lease in &handed_out {
        let status = target.lock_status(lease.key());
        assert!(
            status.as_ref().is_some_and(|s| s.held && s.fence == lease.fence()),
            "{} (fence {}) handed out before the failover, on the new primary: {status:?}",
            lease.key(),
            lease.fence()
        );
        assert!(
            rt.block_on(on_new.renew_token(lease.key(), lease.token())).expect("renew"),
            "{}",
            lease.key()
        );
        let taken = rt.block_on(on_new.try_acquire(lease.key()));
        assert!(matches!(taken, Err(Error::Contended { .. })), "{}: {taken:?}", lease.key());
    }
    assert_eq!(handed_out.len(), 4, "the grant after the promotion was not handed out");
    for lease in handed_out {
        lease.detach();
    }
}
