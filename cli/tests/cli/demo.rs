//! The billing demo against a real server: the fenced run keeps the invoice sent exactly
//! once and the table refuses the paused worker's write; `--no-fence` shows the double send.

use crate::support::*;
use rusqlite::Connection;
use serde_json::Value;

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

#[test]
fn with_the_fence_the_invoice_is_sent_exactly_once_and_the_stale_write_refused() {
    let server = Server::start();
    let dir = scratch();
    let db = p(dir.path(), "billing.db");
    let out = run(&["demo", "--redis", &server.url(), "--ttl", "400ms", "--db", db.to_str().unwrap()]);
    assert_eq!(out.code(), 0, "{out:?}");
    let text = &out.stdout;
    for expected in ["PAUSED", "REFUSED by the table", "sent 1 time", "Invariant holds", "already sent"] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert_eq!(text.matches("acquired the lock with fence").count(), 3, "{text}");

    // The table itself agrees: one send, by a fence above the paused worker's.
    let (sent, last_fence, outbox) = sends(&db);
    assert_eq!(sent, 1);
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0].1, last_fence);
    let fence_of = |worker: &str| -> i64 {
        let line =
            text.lines().find(|l| l.contains(worker) && l.contains("acquired the lock with fence")).unwrap();
        line.split("fence ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    let paused = text.lines().find(|l| l.contains("PAUSED")).unwrap();
    let paused_worker = paused.split_whitespace().nth(2).unwrap();
    assert!(fence_of(paused_worker) < last_fence, "the refused writer held the older fence");
    assert_ne!(outbox[0].0, paused_worker);
}

#[test]
fn without_the_fence_the_paused_worker_sends_the_invoice_twice() {
    let server = Server::start();
    let dir = scratch();
    let db = p(dir.path(), "billing.db");
    let out =
        run(&["demo", "--no-fence", "--redis", &server.url(), "--ttl", "1s", "--db", db.to_str().unwrap()]);
    assert_eq!(out.code(), INVARIANT_VIOLATED, "{out:?}");
    for expected in ["ACCEPTED", "sent 2 times", "VIOLATED"] {
        assert!(out.stdout.contains(expected), "missing {expected:?} in:\n{}", out.stdout);
    }
    let (sent, _, outbox) = sends(&db);
    assert_eq!(sent, 2, "the double send is in the table");
    assert_eq!(outbox.len(), 2);
    assert!(outbox[1].1 < outbox[0].1, "the second send carried the older fence: {outbox:?}");
}

#[test]
fn json_reports_the_outcome_and_the_timeline() {
    let server = Server::start();
    let out = run(&["demo", "--json", "--redis", &server.url(), "--ttl", "300ms"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let report: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(report["mode"], "fenced");
    assert_eq!(report["sent"], 1);
    assert_eq!(report["stale_writes_refused"], 1);
    assert_eq!(report["invariant_holds"], true);
    assert!(report["events"].as_array().unwrap().len() >= 8);

    let out = run(&["demo", "--json", "--no-fence", "--redis", &server.url(), "--ttl", "300ms"]);
    assert_eq!(out.code(), INVARIANT_VIOLATED, "{out:?}");
    let report: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!((report["sent"].as_u64(), report["invariant_holds"].as_bool()), (Some(2), Some(false)));
}
