//! The billing demo against a real server, in each of the lesson's combinations: the stale
//! write arriving after the new owner's send (refused, with or without claiming), arriving
//! before it (accepted, and the invoice goes twice, unless the new owner claimed the fence
//! first), and `--no-fence` (the double send). The verdict is checked three ways: the exit
//! code, the timeline's key lines in causal order, and the SQLite table itself. The same race
//! on a real PostgreSQL (`--database`), every combination, checked against its tables.

use crate::support::*;
use rusqlite::Connection;
use serde_json::Value;

/// The table after a run: (sent, last_fence, outbox as (worker, fence)).
fn sends(db: &std::path::Path) -> (i64, i64, Vec<(String, i64)>) {
    let conn = Connection::open(db).unwrap();
    let (sent, last): (i64, i64) = conn
        .query_row("SELECT sent, last_fence FROM invoices WHERE id = 'inv_72'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let mut stmt = conn.prepare("SELECT worker, fence FROM outbox ORDER BY id").unwrap();
    let outbox =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    (sent, last, outbox)
}

/// One demo run, in text mode, with its database kept for inspection.
struct Demo {
    out: Outcome,
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
}

impl Demo {
    fn run(server: &Server, flags: &[&str]) -> Demo {
        let dir = scratch();
        let db = p(dir.path(), "billing.db");
        let url = server.url();
        let mut args = vec!["demo", "--redis", &url, "--ttl", "400ms", "--db", db.to_str().unwrap()];
        args.extend_from_slice(flags);
        Demo { out: run(&args), _dir: dir, db }
    }

    /// The timeline as printed: (worker, event), in order.
    fn events(&self) -> Vec<(&str, &str)> {
        self.out
            .stdout
            .lines()
            .filter(|l| l.trim_start().starts_with('+'))
            .map(|l| {
                let rest = l.split_once(" ms ").expect("timeline line").1.trim_start();
                rest.split_once(' ').map(|(w, e)| (w, e.trim_start())).expect("worker and event")
            })
            .collect()
    }

    /// The index of the first event containing `what` (by `worker`, if given); panics if none.
    fn at(&self, worker: Option<&str>, what: &str) -> usize {
        self.events()
            .iter()
            .position(|(w, e)| worker.is_none_or(|x| x == *w) && e.contains(what))
            .unwrap_or_else(|| panic!("no event {what:?} by {worker:?} in:\n{}", self.out.stdout))
    }

    /// The worker that stalled, and the one granted the lock after it (the takeover).
    fn stalled_and_takeover(&self) -> (String, String) {
        let acquired: Vec<_> = self
            .events()
            .into_iter()
            .filter(|(_, e)| e.starts_with("acquired the lock with fence"))
            .map(|(w, _)| w.to_owned())
            .collect();
        assert_eq!(acquired.len(), 3, "each worker is granted the lock once:\n{}", self.out.stdout);
        let stalled = self.events()[self.at(None, "PAUSED")].0.to_owned();
        assert_eq!(stalled, acquired[0], "the first owner stalls");
        (stalled, acquired[1].clone())
    }

    fn fence_of(&self, worker: &str) -> i64 {
        let event = self.events()[self.at(Some(worker), "acquired the lock with fence")].1;
        event.split("fence ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    }

    fn assert_says(&self, expected: &[&str]) {
        for e in expected {
            assert!(self.out.stdout.contains(e), "missing {e:?} in:\n{}", self.out.stdout);
        }
    }
}

#[test]
fn new_owner_first_the_stale_write_is_refused_and_the_invoice_sent_once() {
    let server = Server::start();
    let demo = Demo::run(&server, &[]);
    assert_eq!(demo.out.code(), 0, "{:?}", demo.out);
    demo.assert_says(&["Invariant: ", "sent 1 time", "Invariant holds", "already sent"]);
    let (stalled, takeover) = demo.stalled_and_takeover();
    // The new owner sends, then the stale write arrives and is refused.
    assert!(
        demo.at(Some(&takeover), "accepted: invoice sent") < demo.at(Some(&stalled), "REFUSED by the table")
    );

    // The table itself agrees: one send, by the takeover's fence, above the stalled one's.
    let (sent, last_fence, outbox) = sends(&demo.db);
    assert_eq!(sent, 1);
    assert_eq!(outbox, vec![(takeover.clone(), demo.fence_of(&takeover))]);
    assert_eq!(outbox[0].1, last_fence, "without --claim only sends move the fence");
    assert!(demo.fence_of(&stalled) < last_fence, "the refused writer held the older fence");
}

#[test]
fn new_owner_first_with_claim_the_stale_write_is_refused_and_the_invoice_sent_once() {
    let server = Server::start();
    let demo = Demo::run(&server, &["--claim"]);
    assert_eq!(demo.out.code(), 0, "{:?}", demo.out);
    demo.assert_says(&[r#"RETURNING "sent""#, "sent 1 time", "Invariant holds"]);
    let (stalled, takeover) = demo.stalled_and_takeover();
    assert_eq!(demo.events().iter().filter(|(_, e)| e.starts_with("claimed the invoice")).count(), 3);
    let claimed = demo.at(Some(&takeover), "claimed the invoice: last_fence raised to");
    let sent = demo.at(Some(&takeover), "accepted: invoice sent");
    let refused = demo.at(Some(&stalled), "REFUSED by the table");
    assert!(claimed < sent && sent < refused, "{}", demo.out.stdout);

    let (sent, _, outbox) = sends(&demo.db);
    assert_eq!(sent, 1);
    assert_eq!(outbox, vec![(takeover.clone(), demo.fence_of(&takeover))]);
}

#[test]
fn stale_first_without_claim_the_stale_write_is_accepted_and_the_invoice_goes_twice() {
    let server = Server::start();
    let demo = Demo::run(&server, &["--stale-first"]);
    assert_eq!(demo.out.code(), INVARIANT_VIOLATED, "{:?}", demo.out);
    demo.assert_says(&["sent 2 times", "Invariant VIOLATED", "nothing newer to compare", "--claim"]);
    let (stalled, takeover) = demo.stalled_and_takeover();
    // The lesson's ordering: the new owner reads, the stale write lands, the new owner sends
    // from what it read before.
    let read = demo.at(Some(&takeover), "read the invoice: not sent");
    let stale = demo.at(Some(&stalled), "UPDATE with stale fence");
    let again = demo.at(Some(&takeover), "invoice sent AGAIN");
    assert!(read < stale && stale < again, "{}", demo.out.stdout);
    assert!(demo.events()[stale].1.contains("ACCEPTED"), "{}", demo.out.stdout);

    // In the table: the stale fence's send first, then the new owner's.
    let (sent, last_fence, outbox) = sends(&demo.db);
    assert_eq!(sent, 2);
    assert_eq!(
        outbox,
        vec![(stalled.clone(), demo.fence_of(&stalled)), (takeover.clone(), demo.fence_of(&takeover))]
    );
    assert!(outbox[0].1 < outbox[1].1 && outbox[1].1 == last_fence, "{outbox:?}");
}

#[test]
fn stale_first_with_claim_the_stale_write_is_refused_although_it_arrives_first() {
    let server = Server::start();
    let demo = Demo::run(&server, &["--stale-first", "--claim"]);
    assert_eq!(demo.out.code(), 0, "{:?}", demo.out);
    demo.assert_says(&["sent 1 time", "Invariant holds", "claimed the fence first"]);
    let (stalled, takeover) = demo.stalled_and_takeover();
    // The stale write lands after the claim and before the new owner's send: still refused.
    let claimed = demo.at(Some(&takeover), "claimed the invoice: last_fence raised to");
    let refused = demo.at(Some(&stalled), "REFUSED by the table");
    let sent = demo.at(Some(&takeover), "accepted: invoice sent");
    assert!(claimed < refused && refused < sent, "{}", demo.out.stdout);
    let takeover_fence = demo.fence_of(&takeover);
    assert!(
        demo.events()[refused].1.contains(&format!("(last_fence is {takeover_fence})")),
        "refused by the claim's fence, not a send's: {}",
        demo.out.stdout
    );

    let (sent, _, outbox) = sends(&demo.db);
    assert_eq!(sent, 1);
    assert_eq!(outbox, vec![(takeover.clone(), takeover_fence)]);
}

#[test]
fn without_the_fence_the_paused_worker_sends_the_invoice_twice() {
    let server = Server::start();
    let demo = Demo::run(&server, &["--no-fence"]);
    assert_eq!(demo.out.code(), INVARIANT_VIOLATED, "{:?}", demo.out);
    demo.assert_says(&["ACCEPTED", "sent 2 times", "VIOLATED", "run without --no-fence"]);
    let (sent, _, outbox) = sends(&demo.db);
    assert_eq!(sent, 2, "the double send is in the table");
    assert_eq!(outbox.len(), 2);
    assert!(outbox[1].1 < outbox[0].1, "the second send carried the older fence: {outbox:?}");
}

/// One combination's expected `--json` report.
struct Case {
    flags: &'static [&'static str],
    ordering: &'static str,
    claim: bool,
    exit: i32,
    sent: u64,
    stale_refused: u64,
    stale_accepted: u64,
    sent_on_changed_state: u64,
}

/// Every combination of the race, with its expected verdict.
fn cases() -> [Case; 5] {
    let case = |flags,
                ordering,
                claim,
                exit,
                [sent, stale_refused, stale_accepted, sent_on_changed_state]: [u64; 4]| {
        Case { flags, ordering, claim, exit, sent, stale_refused, stale_accepted, sent_on_changed_state }
    };
    [
        case(&[], "new-owner-first", false, 0, [1, 1, 0, 0]),
        case(&["--claim"], "new-owner-first", true, 0, [1, 1, 0, 0]),
        case(&["--stale-first"], "stale-first", false, INVARIANT_VIOLATED, [2, 0, 1, 1]),
        case(&["--stale-first", "--claim"], "stale-first", true, 0, [1, 1, 0, 0]),
        case(&["--no-fence"], "new-owner-first", false, INVARIANT_VIOLATED, [2, 0, 1, 0]),
    ]
}

#[test]
fn json_reports_each_combination_with_its_verdict() {
    let server = Server::start();
    let url = server.url();
    for c in cases() {
        let mut args = vec!["demo", "--json", "--redis", &url, "--ttl", "300ms"];
        args.extend_from_slice(c.flags);
        let out = run(&args);
        assert_eq!(out.code(), c.exit, "{:?}: {out:?}", c.flags);
        let report: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
        check_report(&c, &report);
        assert_eq!(report["database"].as_str(), Some("sqlite"), "{report}");
    }
}

/// The same race on a real PostgreSQL: the same verdicts, and the demo's own tables (in its
/// schema) say the same as its report.
#[test]
fn on_postgres_each_combination_gives_the_same_verdict_and_the_tables_agree() {
    let server = Server::start();
    let pg = harness::Postgres::start();
    let (url, database) = (server.url(), pg.url());
    for c in cases() {
        let mut args = vec!["demo", "--json", "--redis", &url, "--database", &database, "--ttl", "300ms"];
        args.extend_from_slice(c.flags);
        let out = run(&args);
        assert_eq!(out.code(), c.exit, "{:?}: {out:?}", c.flags);
        let report: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
        check_report(&c, &report);
        assert_eq!(report["database"].as_str(), Some("postgres"), "{report}");
        let table =
            pg.psql("SELECT sent || ' ' || last_fence FROM fencedlock_demo.invoices WHERE id = 'inv_72'");
        assert_eq!(table, format!("{} {}", c.sent, report["last_fence"]), "{:?}", c.flags);
        let outbox =
            pg.psql("SELECT string_agg(worker || ':' || fence, ',' ORDER BY id) FROM fencedlock_demo.outbox");
        let reported: Vec<String> = report["outbox"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{}:{}", e["worker"].as_str().unwrap(), e["fence"]))
            .collect();
        assert_eq!(outbox, reported.join(","), "{:?}", c.flags);
    }
}

#[test]
fn on_postgres_the_header_names_the_database_without_its_password_and_the_guards_statements() {
    let server = Server::start();
    let pg = harness::Postgres::start();
    let url = server.url();
    // Trust authentication ignores the password; the header must not print it.
    let database = pg.url().replace("postgres@", "postgres:hunter2@");
    let out = run(&[
        "demo",
        "--redis",
        &url,
        "--database",
        &database,
        "--ttl",
        "300ms",
        "--stale-first",
        "--claim",
    ]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    for expected in [
        format!("Resource: PostgreSQL postgres://postgres@127.0.0.1:{}/postgres (schema fencedlock_demo)", pg.port()),
        r#"UPDATE "fencedlock_demo"."invoices" SET "sent" = ("sent" + 1), "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 RETURNING "sent""#.to_owned(),
        r#"UPDATE "fencedlock_demo"."invoices" SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 RETURNING "sent""#.to_owned(),
        "Invariant holds".to_owned(),
    ] {
        assert!(out.stdout.contains(&expected), "missing {expected:?} in:\n{}", out.stdout);
    }
}

#[test]
fn a_database_that_is_not_postgres_is_a_usage_error_and_an_unreachable_one_is_unavailable() {
    let server = Server::start();
    let url = server.url();
    let out = run(&["demo", "--redis", &url, "--database", "mysql://127.0.0.1/db"]);
    assert_eq!(out.code(), USAGE, "{out:?}");
    assert!(out.stderr.contains("PostgreSQL URL"), "{}", out.stderr);
    let out = run(&["demo", "--redis", &url, "--database", "postgres://x@127.0.0.1:1/db", "--db", "x.db"]);
    assert_eq!(out.code(), USAGE, "--database and --db together: {out:?}");
    let out = run(&["demo", "--redis", &url, "--database", "postgres://postgres@127.0.0.1:1/postgres"]);
    assert_eq!(out.code(), UNAVAILABLE, "{out:?}");
    assert!(out.stderr.contains("PostgreSQL postgres://postgres@127.0.0.1:1/postgres"), "{}", out.stderr);
}

fn check_report(c: &Case, report: &Value) {
    let got = (
        report["ordering"].as_str(),
        report["claim"].as_bool(),
        report["sent"].as_u64(),
        report["stale_writes_refused"].as_u64(),
        report["stale_writes_accepted"].as_u64(),
        report["sent_on_changed_state"].as_u64(),
        report["invariant_holds"].as_bool(),
        report["exit_code"].as_i64(),
    );
    let want = (
        Some(c.ordering),
        Some(c.claim),
        Some(c.sent),
        Some(c.stale_refused),
        Some(c.stale_accepted),
        Some(c.sent_on_changed_state),
        Some(c.exit == 0),
        Some(i64::from(c.exit)),
    );
    assert_eq!(got, want, "{:?}: {report}", c.flags);
    assert!(report["invariant"].as_str().is_some_and(|s| s.contains("exactly once")), "{report}");
    assert!(report["events"].as_array().unwrap().len() >= 8, "{report}");
}
