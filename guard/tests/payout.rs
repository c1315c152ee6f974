//! The payout example (`examples/payout.rs`, compiled in here as it is) against a real
//! PostgreSQL and real leases: the provider pays once across a lease loss and a retry, and
//! across crashes before and after the call, settled by the reconciliation.

mod support;

#[path = "../examples/payout.rs"]
mod payout;

use std::time::Duration;

use fencedlock::{LockConfig, Locker};
use harness::{Postgres, Server};
use payout::{
    attempt, create_payout, lock_key, reconcile, record_intent, record_submitted, Attempt, Intent, Provider,
    Reconciled, SimulatedProvider,
};
use support::local_recorder;

const TTL: Duration = Duration::from_millis(200);

struct Setup {
    _pg: Postgres,
    _redis: Server,
    client: tokio_postgres::Client,
    locker: Locker,
}

async fn setup(payout_ids: &[&str]) -> Setup {
    let pg = Postgres::start();
    let redis = Server::start();
    let client = support::connect(&pg).await;
    client.batch_execute(payout::SCHEMA).await.unwrap();
    for (i, id) in payout_ids.iter().enumerate() {
        create_payout(&client, id, 1_000 * (i as i64 + 1)).await.unwrap();
    }
    let locker = Locker::open(&redis.url(), LockConfig::builder().ttl(TTL).build().unwrap()).unwrap();
    Setup { _pg: pg, _redis: redis, client, locker }
}

/// (state, provider_ref, last_fence) of a payout.
async fn row(client: &tokio_postgres::Client, id: &str) -> (String, Option<String>, i64) {
    let r = client
        .query_one("SELECT state, provider_ref, last_fence FROM payouts WHERE payout_id = $1", &[&id])
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn a_lost_answer_a_lost_lease_and_the_next_holders_retry_pay_once() {
    let (refusals, _recorder) = local_recorder();
    let Setup { _pg, _redis, mut client, locker } = setup(&["po_1"]).await;
    let provider = SimulatedProvider::default();

    // A pays, its answer is lost, its lease runs out.
    let a = locker.acquire(&lock_key("po_1")).await.unwrap();
    provider.lose_next_replies(1);
    assert_eq!(attempt(&mut client, &provider, "po_1", a.fence()).await.unwrap(), Attempt::Unknown);
    assert_eq!(row(&client, "po_1").await, ("SUBMITTING".into(), None, a.fence() as i64));
    tokio::time::sleep(TTL * 2).await;
    assert!(a.ensure_valid().is_err());

    // B retries with the same key: the provider answers with A's payment.
    let b = locker.acquire(&lock_key("po_1")).await.unwrap();
    assert!(b.fence() > a.fence());
    assert_eq!(
        attempt(&mut client, &provider, "po_1", b.fence()).await.unwrap(),
        Attempt::Submitted("tr_1".into())
    );
    assert_eq!(row(&client, "po_1").await, ("SUBMITTED".into(), Some("tr_1".into()), b.fence() as i64));

    // A's late answer, and A trying again from the top: both refused.
    assert_eq!(record_submitted(&client, "po_1", a.fence(), "tr_1").await.unwrap(), Attempt::Stale);
    assert_eq!(attempt(&mut client, &provider, "po_1", a.fence()).await.unwrap(), Attempt::Stale);
    // B (or anyone newer) running again finds it done, without calling out.
    assert_eq!(
        attempt(&mut client, &provider, "po_1", b.fence()).await.unwrap(),
        Attempt::AlreadySubmitted("tr_1".into())
    );

    assert_eq!(provider.transfers(), vec![("tr_1".to_owned(), 1_000)], "paid once");
    assert_eq!(refusals.counts("payouts"), (2, 2));
    // The provider is not what kept it to one: a retry with a fresh key would have paid again.
    provider.pay("payout-po_1-attempt-2", 1_000).await.unwrap();
    assert_eq!(provider.transfers().len(), 2);
}

#[tokio::test]
async fn the_reconciliation_settles_rows_stuck_in_submitting_by_key_and_each_payout_is_paid_once() {
    let (refusals, _recorder) = local_recorder();
    let Setup { _pg, _redis, mut client, locker } = setup(&["po_2", "po_3", "po_4"]).await;
    let provider = SimulatedProvider::default();

    // po_2: paid, then the worker died before recording the answer (its lease runs out).
    let crashed_after = locker.acquire(&lock_key("po_2")).await.unwrap();
    provider.lose_next_replies(1);
    assert_eq!(
        attempt(&mut client, &provider, "po_2", crashed_after.fence()).await.unwrap(),
        Attempt::Unknown
    );
    // po_3: the intent committed, then the worker died before calling.
    let crashed_before = locker.acquire(&lock_key("po_3")).await.unwrap();
    assert!(matches!(
        record_intent(&mut client, "po_3", crashed_before.fence()).await.unwrap(),
        Intent::Ready { .. }
    ));
    // po_4: a worker is on it right now (holds its lease): the job leaves it alone.
    let busy = locker.acquire(&lock_key("po_4")).await.unwrap();
    assert!(matches!(record_intent(&mut client, "po_4", busy.fence()).await.unwrap(), Intent::Ready { .. }));
    tokio::time::sleep(TTL * 2).await;
    let busy = locker.acquire(&lock_key("po_4")).await.unwrap(); // a fresh holder, current

    let settled = reconcile(&locker, &mut client, &provider).await.unwrap();
    assert_eq!(
        settled,
        vec![
            ("po_2".to_owned(), Reconciled::Submitted("tr_1".into())),
            ("po_3".to_owned(), Reconciled::Reset),
            ("po_4".to_owned(), Reconciled::Skipped),
        ]
    );
    assert_eq!(row(&client, "po_2").await.0, "SUBMITTED");
    assert_eq!(row(&client, "po_3").await.0, "PENDING");
    // The crashed worker's late answer cannot undo the reconciliation's record.
    assert_eq!(
        record_submitted(&client, "po_2", crashed_after.fence(), "tr_1").await.unwrap(),
        Attempt::Stale
    );

    // po_3's retry pays, with the same key; po_4's holder finishes.
    let retry = locker.acquire(&lock_key("po_3")).await.unwrap();
    assert_eq!(
        attempt(&mut client, &provider, "po_3", retry.fence()).await.unwrap(),
        Attempt::Submitted("tr_2".into())
    );
    assert_eq!(
        attempt(&mut client, &provider, "po_4", busy.fence()).await.unwrap(),
        Attempt::Submitted("tr_3".into())
    );
    assert!(reconcile(&locker, &mut client, &provider).await.unwrap().is_empty(), "nothing stuck");

    let transfers = provider.transfers();
    assert_eq!(
        transfers,
        vec![("tr_1".to_owned(), 1_000), ("tr_2".to_owned(), 2_000), ("tr_3".to_owned(), 3_000)]
    );
    assert_eq!(refusals.counts("payouts"), (1, 1));
}
