//! A leader frozen past its lease, end to end: a real SIGSTOPped leader process and a real SQL
//! table that checks the epoch.
//!
//! Leader A is a separate process (this test binary re-run as a worker, see `faults::pause`).
//! Each round it campaigns, is elected, writes with its epoch, and is frozen with SIGSTOP for
//! longer than its lease. Candidate B (this process) is elected with a higher epoch when A's
//! lease expires on the server, and writes. A is thawed and, not yet knowing it was deposed,
//! writes with its old epoch: the table (`... WHERE last_epoch <= :epoch`) refuses it. A then
//! observes its own loss: its keep-alive cancels its leadership, and the server names B.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use fencedlock::{Election, Error, LockConfig, Locker, LossCause};
use harness::Server;
use rusqlite::{params, Connection};

use crate::pause::{open_db, say, WorkerA};

const ROUNDS: u32 = 5;
const TTL_MS: u64 = 500;
const KEY: &str = "scheduler:leader";
/// Set in the worker process: the server URL and the database path.
const WORKER_ENV: &str = "FENCEDLOCK_ELECTION_WORKER_URL";
const WORKER_DB_ENV: &str = "FENCEDLOCK_ELECTION_WORKER_DB";
/// The worker test's own name (see [`worker_test`]).
const WORKER_FN: &str = "election_leader_process";

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(TTL_MS))
        .node_timeout(Duration::from_secs(2))
        .max_wait(Duration::from_secs(5))
        .build()
        .expect("valid config")
}

/// The leader's write: refused (false) when a newer epoch already wrote.
fn write(conn: &Connection, writer: &str, epoch: u64) -> bool {
    let epoch = i64::try_from(epoch).expect("epochs fit in i64");
    conn.execute(
        "UPDATE jobs SET last_epoch = ?1, runs = runs + 1, last_writer = ?2 WHERE id = 1 AND last_epoch <= ?1",
        params![epoch, writer],
    )
    .expect("epoch-checked update")
        == 1
}

/// Entry point of leader A's process. Protocol on stdin / stdout: `campaign` -> `@@ elected
/// <epoch> <accepted>`; then `write` (sent while A is frozen) -> `@@ wrote <accepted>
/// <cause of loss> <leader's epoch seen by A>`; `quit` ends it.
#[test]
#[ignore = "worker process of a_frozen_leader_is_deposed_and_its_writes_refused"]
fn election_leader_process() {
    let (Ok(url), Ok(db)) = (std::env::var(WORKER_ENV), std::env::var(WORKER_DB_ENV)) else {
        eprintln!("{WORKER_FN} is a worker process started by the election fault test; nothing to do");
        return;
    };
    // A worker thread of its own, so that the keep-alive runs while this thread reads stdin.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let election = Election::new(Locker::open(&url, config()).expect("locker"), KEY);
    let conn = open_db(Path::new(&db));
    let mut lines = std::io::stdin().lock().lines();
    while let Some(Ok(line)) = lines.next() {
        match line.trim() {
            "campaign" => {
                let leadership = rt.block_on(election.campaign("leader-a")).expect("A is elected");
                let accepted = write(&conn, "A", leadership.epoch());
                say(format!("elected {} {}", leadership.epoch(), u8::from(accepted)));
                // Here A is frozen. It wakes up believing it leads and writes at once.
                let Some(Ok(go)) = lines.next() else { return };
                assert_eq!(go, "write", "protocol");
                let accepted = write(&conn, "A", leadership.epoch());
                let lost = rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(5), leadership.lost()).await
                });
                let cause = match lost {
                    Ok(Error::LeaseLost { cause: LossCause::Refused, .. }) => "refused",
                    Ok(Error::LeaseLost { cause: LossCause::Expired, .. }) => "expired",
                    Ok(Error::LeaseLost { cause: LossCause::RenewFailed(_), .. }) => "renew-failed",
                    Ok(_) => "other",
                    Err(_) => "not-noticed",
                };
                let seen = rt.block_on(election.leader()).expect("STATUS").map_or(0, |leader| leader.epoch);
                say(format!("wrote {} {cause} {seen}", u8::from(accepted)));
            }
            "quit" => return,
            other => panic!("unknown worker command {other:?}"),
        }
    }
}

/// The worker test's name as libtest filters it (module path without the binary's name).
fn worker_test() -> String {
    match module_path!().split_once("::") {
        Some((_crate, module)) => format!("{module}::{WORKER_FN}"),
        None => WORKER_FN.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_is_deposed_and_its_writes_refused() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("jobs.sqlite");
    let conn = open_db(&db);
    conn.execute_batch(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY CHECK (id = 1), last_epoch INTEGER NOT NULL,
                            runs INTEGER NOT NULL, last_writer TEXT NOT NULL);
         INSERT INTO jobs VALUES (1, 0, 0, 'nobody');",
    )
    .expect("schema");
    let url = server.url();
    let mut a =
        WorkerA::spawn_test(&worker_test(), &[(WORKER_ENV, url.as_ref()), (WORKER_DB_ENV, db.as_os_str())]);
    let b = Election::new(Locker::open(&url, config()).expect("locker B"), KEY);

    let mut last_epoch = 0;
    for round in 0..ROUNDS {
        a.send("campaign");
        let elected = a.reply();
        let words: Vec<&str> = elected.split(' ').collect();
        let ["elected", epoch_a, accepted] = words.as_slice() else {
            panic!("round {round}: leader A said {elected:?}");
        };
        assert_eq!(*accepted, "1", "round {round}: the elected leader's first write was refused");
        let epoch_a: u64 = epoch_a.parse().expect("epoch");
        assert!(epoch_a > last_epoch, "round {round}: epochs increase");

        // A is frozen while it leads; its write order waits in its stdin.
        a.freeze();
        a.send("write");
        let leader_b = b.campaign("leader-b").await.unwrap_or_else(|e| panic!("round {round}: B: {e}"));
        let epoch_b = leader_b.epoch();
        assert!(epoch_b > epoch_a, "round {round}: B's epoch {epoch_b} is not above A's {epoch_a}");
        assert!(write(&conn, "B", epoch_b), "round {round}: the leader's write was refused");
        assert_eq!(a.state(), 'T', "round {round}: A is still frozen when B leads");

        a.thaw();
        let wrote = a.reply();
        let words: Vec<&str> = wrote.split(' ').collect();
        let ["wrote", accepted, cause, seen] = words.as_slice() else {
            panic!("round {round}: leader A said {wrote:?}");
        };
        assert_eq!(
            *accepted, "0",
            "round {round}: the stale leader's write (epoch {epoch_a} after {epoch_b}) was accepted"
        );
        assert_ne!(*cause, "not-noticed", "round {round}: A did not notice it was deposed");
        assert_eq!(*seen, epoch_b.to_string(), "round {round}: A sees B lead");
        let writer: String = conn.query_row("SELECT last_writer FROM jobs", [], |r| r.get(0)).expect("row");
        assert_eq!(writer, "B", "round {round}");
        assert!(leader_b.resign().await.expect("B resigns"), "round {round}");
        eprintln!("round {round}: A (epoch {epoch_a}) frozen, B elected at epoch {epoch_b}; A's write refused, A saw its loss ({cause})");
        last_epoch = epoch_b;
    }
    let runs: i64 = conn.query_row("SELECT runs FROM jobs", [], |r| r.get(0)).expect("row");
    assert_eq!(runs, 2 * i64::from(ROUNDS), "A's first write and B's write per round; no stale one");
}
