//! The cost of the fence at the resource (issue 32): a guarded `UPDATE` against the same
//! `UPDATE` without the fence condition, on a real PostgreSQL this bench starts (127.0.0.1).
//!
//! - `plain_sql` / `guarded_helper`: what an application pays per write. The plain side runs
//!   the guard's own statement text with ` AND "last_fence" <= $1` cut out, through
//!   `Client::execute` like any hand-written query; the guarded side is
//!   `fencedlock_guard::postgres::write` with the same update. Same values, same round trips.
//! - `plain_prepared` / `guarded_prepared`: both statements prepared once and executed with
//!   the same values: the condition's own cost to the server, without the prepare round trip.
//!
//! Every write is applied (each carries a fence above the row's), one row of 10,000 per write
//! in turn, autocommit. Criterion measures each on its own; the ratios come from a paired pass
//! (`cargo bench` only): short alternating blocks, the median of the per-round ratios, written
//! to `target/bench-results/guard.json` and printed.

mod support;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::Criterion;
use fencedlock_guard::postgres::{self, Update};
use fencedlock_guard::{Table, Written};
use harness::Postgres;
use tokio_postgres::{Client, Statement};

const ROWS: i32 = 10_000;
const FENCE_CONDITION: &str = r#" AND "last_fence" <= $1"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    PlainSql,
    GuardedSql,
    GuardedHelper,
    PlainPrepared,
    GuardedPrepared,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::PlainSql => "plain_sql",
            Op::GuardedSql => "guarded_sql",
            Op::GuardedHelper => "guarded_helper",
            Op::PlainPrepared => "plain_prepared",
            Op::GuardedPrepared => "guarded_prepared",
        }
    }
}

/// Each group's operations; every ratio is an operation's time over the group's first (the
/// plain `UPDATE`). `guarded_sql` is the guard's statement text through `Client::execute`,
/// to tell the statement's cost from the helper's own.
const GROUPS: [(&str, &[Op]); 2] = [
    ("helper", &[Op::PlainSql, Op::GuardedSql, Op::GuardedHelper]),
    ("prepared", &[Op::PlainPrepared, Op::GuardedPrepared]),
];

struct Fixture {
    _pg: Postgres,
    client: Client,
    table: Table,
    plain_sql: String,
    guarded_sql: String,
    plain: Statement,
    guarded: Statement,
    /// Each write's fence and row: a fence above every earlier one, so every write applies.
    next: Cell<i64>,
}

fn update<'a>(total: &'a i32, written_by: &'a i64) -> Update<'a> {
    Update::new().set("total", total).set("written_by", written_by)
}

impl Fixture {
    fn start(rt: &tokio::runtime::Runtime) -> Fixture {
        let pg = Postgres::start();
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls).await.expect("connect");
            tokio::spawn(connection);
            client
                .batch_execute(&format!(
                    "CREATE TABLE bench_rows (id integer PRIMARY KEY, total integer NOT NULL DEFAULT 0, written_by bigint);
                     INSERT INTO bench_rows (id) SELECT generate_series(1, {ROWS});"
                ))
                .await
                .expect("schema");
            let table = Table::new("bench_rows");
            postgres::add_fence_column(&client, &table).await.expect("the schema step");
            client.batch_execute("VACUUM ANALYZE bench_rows").await.expect("vacuum");
            let guarded_sql = postgres::write_sql(&table, &update(&0, &0), &[]).expect("the guarded statement");
            assert!(guarded_sql.contains(FENCE_CONDITION), "{guarded_sql}");
            let plain_sql = guarded_sql.replacen(FENCE_CONDITION, "", 1);
            let plain = client.prepare(&plain_sql).await.expect("prepare");
            let guarded = client.prepare(&guarded_sql).await.expect("prepare");
            eprintln!("guarded: {guarded_sql}\nplain:   {plain_sql}");
            Fixture { _pg: pg, client, table, plain_sql, guarded_sql, plain, guarded, next: Cell::new(1) }
        })
    }

    async fn run(&self, op: Op) {
        let fence = self.next.get();
        self.next.set(fence + 1);
        let id = i32::try_from(fence % i64::from(ROWS)).expect("row id") + 1;
        let total = id;
        let changed = match op {
            Op::GuardedHelper => {
                let update = update(&total, &fence);
                let written = postgres::write(&self.client, &self.table, &id, fence as u64, &update).await;
                u64::from(written.expect("guarded write") == Written::Applied(()))
            }
            Op::GuardedSql => {
                self.client.execute(&self.guarded_sql, &[&fence, &id, &total, &fence]).await.expect("update")
            }
            Op::PlainSql => {
                self.client.execute(&self.plain_sql, &[&fence, &id, &total, &fence]).await.expect("update")
            }
            Op::PlainPrepared => {
                self.client.execute(&self.plain, &[&fence, &id, &total, &fence]).await.expect("update")
            }
            Op::GuardedPrepared => {
                self.client.execute(&self.guarded, &[&fence, &id, &total, &fence]).await.expect("update")
            }
        };
        assert_eq!(changed, 1, "{} wrote no row", op.name());
    }
}

fn criterion_pass(c: &mut Criterion, rt: &tokio::runtime::Runtime, fx: &Fixture) {
    let mut group = c.benchmark_group("guard_update");
    for op in GROUPS.iter().flat_map(|(_, ops)| ops.iter().copied()) {
        group.bench_function(op.name(), |b| b.iter(|| rt.block_on(fx.run(op))));
    }
    group.finish();
}

/// Alternating blocks of each group's writes, about `budget` per group.
fn paired_pass(rt: &tokio::runtime::Runtime, fx: &Fixture, budget: Duration) {
    const BLOCK: u32 = 50;
    let mut json = Vec::new();
    for (group, ops) in GROUPS {
        let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut ratios: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let started = Instant::now();
        let mut round = 0usize;
        while started.elapsed() < budget && round < 100_000 {
            // Reverse the order every other round, so no operation always follows the same one.
            let order: Vec<Op> =
                if round & 1 == 0 { ops.to_vec() } else { ops.iter().rev().copied().collect() };
            let mut micros = BTreeMap::new();
            for op in order {
                let t0 = Instant::now();
                rt.block_on(async {
                    for _ in 0..BLOCK {
                        fx.run(op).await;
                    }
                });
                let each = t0.elapsed().as_secs_f64() * 1e6 / f64::from(BLOCK);
                micros.insert(op.name(), each);
                times.entry(op.name()).or_default().push(each);
            }
            for op in &ops[1..] {
                ratios.entry(op.name()).or_default().push(micros[op.name()] / micros[ops[0].name()]);
            }
            round += 1;
        }
        let mut fields = vec![format!("\"rounds\": {round}")];
        for op in ops {
            let us = median(&times[op.name()]);
            fields.push(format!("\"{}_us\": {us:.2}", op.name()));
            let Some(r) = ratios.get(op.name()) else { continue };
            let ratio = median(r);
            fields.push(format!("\"{}_ratio\": {ratio:.4}", op.name()));
            eprintln!(
                "guard {group}: {} {:.1} µs, {} {us:.1} µs per write: {ratio:.3}× (median of {round} paired rounds)",
                ops[0].name(),
                median(&times[ops[0].name()]),
                op.name()
            );
        }
        json.push(format!(" \"{group}\": {{{}}}", fields.join(", ")));
    }
    let path = support::results_file("guard.json");
    std::fs::write(&path, format!("{{\n{}\n}}\n", json.join(",\n")))
        .unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    eprintln!("paired results written to {}", path.display());
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut c = support::criterion();
    // One thread: the driver's connection task and the writes take turns on it, so the
    // comparison is the statements', not the scheduler's (a write waits on the server anyway).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let fx = Fixture::start(&rt);
    criterion_pass(&mut c, &rt, &fx);
    if let Some(budget) = support::paired_budget(Duration::from_secs(20)) {
        paired_pass(&rt, &fx, budget);
    }
    c.final_summary();
}
