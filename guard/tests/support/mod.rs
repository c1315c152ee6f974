//! What the guard's test binaries share: a PostgreSQL client on a harness server, the
//! invoice-jobs table of the lesson, and the stale-refusal counter as recorded.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::cell::RefCell;
use std::collections::BTreeMap;

use fencedlock_guard::metrics::{RESOURCE, STALE_REFUSALS_TOTAL};
use fencedlock_guard::Table;
use harness::Postgres;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// The lesson's table: one invoice job per row, `sends` counts how often it went out.
pub const JOBS_DDL: &str = "CREATE TABLE invoice_jobs (
    job_id bigint PRIMARY KEY,
    status text NOT NULL DEFAULT 'PENDING',
    sends integer NOT NULL DEFAULT 0,
    sent_by bigint
)";
/// The job every single-row test works on.
pub const JOB: i64 = 72;

pub fn jobs() -> Table {
    Table::new("invoice_jobs").id_column("job_id")
}

/// A client on `pg`'s `postgres` database, its connection driven by a task on the current
/// runtime.
pub async fn connect(pg: &Postgres) -> tokio_postgres::Client {
    connect_url(&pg.url()).await
}

pub async fn connect_url(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection ended: {e}");
        }
    });
    client
}

/// A recorder for this thread only (tests run on a current-thread runtime), so each test
/// counts its own refusals. Keep the guard alive for the test.
pub fn local_recorder() -> (Refusals, metrics::LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let refusals = Refusals { snapshotter: recorder.snapshotter(), seen: RefCell::new(BTreeMap::new()) };
    (refusals, metrics::set_default_local_recorder(recorder))
}

/// The stale-refusal counter as recorded, by resource label. (A snapshot of the debugging
/// recorder takes the counts out of it; this keeps the running totals.)
pub struct Refusals {
    snapshotter: Snapshotter,
    seen: RefCell<BTreeMap<Option<String>, u64>>,
}

impl Refusals {
    /// The count under `resource`, and the total over every label (so a refusal counted
    /// under another label, or none, shows as a difference).
    pub fn counts(&self, resource: &str) -> (u64, u64) {
        let mut seen = self.seen.borrow_mut();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            if key.kind() != MetricKind::Counter || key.key().name() != STALE_REFUSALS_TOTAL {
                continue;
            }
            let DebugValue::Counter(n) = value else { continue };
            let label = key.key().labels().find(|l| l.key() == RESOURCE).map(|l| l.value().to_owned());
            *seen.entry(label).or_default() += n;
        }
        (seen.get(&Some(resource.to_owned())).copied().unwrap_or(0), seen.values().sum())
    }
}
