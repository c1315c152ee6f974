//! A paused worker against a fenced resource, end to end: a real frozen (SIGSTOPped) process
//! and a real SQL table.
//!
//! Worker A is a separate process (this test binary re-run as a worker). Each round it takes
//! a lease, checks that it is valid, and is then frozen with SIGSTOP right before its write,
//! for longer than its lease. Worker B (this process) takes the lease over with a higher
//! fence and writes. A is thawed with SIGCONT and writes with its old fence: the fenced table
//! (`... WHERE last_fence <= :fence`) refuses it. A table guarded by the lock alone takes the
//! stale write, which is what the fence is for.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use fencedlock::{Error, LockConfig, Locker};
use harness::{poll, Server};
use rusqlite::{params, Connection};

const ROUNDS: u32 = 20;
/// Long enough that A always passes its own lease check right after the grant, even on a
/// loaded CI machine; every round waits this long for the lease to expire.
const TTL_MS: u64 = 400;
/// Set in the worker process: the server URL.
const WORKER_ENV: &str = "FENCEDLOCK_PAUSE_WORKER_URL";
const WORKER_DB_ENV: &str = "FENCEDLOCK_PAUSE_WORKER_DB";
/// The worker test's own name; libtest knows it by its path inside the binary ([`worker_test`]).
const WORKER_FN: &str = "pause_worker_process";
/// Marks worker protocol lines (libtest prints its own output on the same stdout).
const TAG: &str = "@@ ";
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(TTL_MS))
        .node_timeout(Duration::from_secs(2))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .max_wait(Duration::from_secs(5))
        .build()
        .expect("valid config")
}

// ---------------------------------------------------------------------------------------
// The resource: a ledger row guarded by the fence, and a control row guarded by nothing
// ---------------------------------------------------------------------------------------

pub(super) fn open_db(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open sqlite");
    conn.busy_timeout(Duration::from_secs(5)).expect("busy timeout");
    conn
}

fn create_schema(conn: &Connection) {
    conn.execute_batch(
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY CHECK (id = 1), last_fence INTEGER NOT NULL,
                              invoices_sent INTEGER NOT NULL, last_writer TEXT NOT NULL);
         INSERT INTO ledger VALUES (1, 0, 0, 'nobody');
         CREATE TABLE lock_only (id INTEGER PRIMARY KEY CHECK (id = 1), last_writer TEXT NOT NULL);
         INSERT INTO lock_only VALUES (1, 'nobody');
         CREATE TABLE writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL,
                              writer TEXT NOT NULL, fence INTEGER NOT NULL, accepted INTEGER NOT NULL);",
    )
    .expect("create schema");
}

/// The write every worker does while it believes it holds the lease: the fenced ledger
/// refuses a fence below the last one it accepted; the lock-only row takes anything.
/// Returns whether the ledger accepted it.
fn write(conn: &mut Connection, round: u32, writer: &str, fence: u64) -> bool {
    let tx = conn.transaction().expect("begin");
    let fence = i64::try_from(fence).expect("fences fit in i64");
    let accepted = tx
        .execute(
            "UPDATE ledger SET last_fence = ?1, invoices_sent = invoices_sent + 1, last_writer = ?2
             WHERE id = 1 AND last_fence <= ?1",
            params![fence, writer],
        )
        .expect("fenced update")
        == 1;
    tx.execute("UPDATE lock_only SET last_writer = ?1 WHERE id = 1", params![writer]).expect("update");
    tx.execute(
        "INSERT INTO writes (round, writer, fence, accepted) VALUES (?1, ?2, ?3, ?4)",
        params![round, writer, fence, accepted],
    )
    .expect("log the write");
    tx.commit().expect("commit");
    accepted
}

// ---------------------------------------------------------------------------------------
// Worker A: a separate process
// ---------------------------------------------------------------------------------------

/// Writes one worker protocol line to the parent (tagged, flushed at once: the parent waits for it).
pub(super) fn say(line: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{line}").expect("stdout");
    out.flush().expect("flush");
}

/// Entry point of worker A's process; the parent test runs this binary with
/// `--ignored --exact <module path>::pause_worker_process`. Protocol on stdin / stdout:
/// `acquire <key> <round>` -> `@@ checked <fence>`; then `write` -> `@@ wrote <accepted>
/// <locally-valid> <renewal>`; `quit` ends it.
#[test]
#[ignore = "worker process of paused_worker_writes_are_refused_by_the_fenced_table"]
fn pause_worker_process() {
    let (Ok(url), Ok(db)) = (std::env::var(WORKER_ENV), std::env::var(WORKER_DB_ENV)) else {
        eprintln!("{WORKER_FN} is a worker process started by the pause test; nothing to do");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let locker = Locker::open(&url, config()).expect("locker");
    let mut conn = open_db(Path::new(&db));
    let mut lines = std::io::stdin().lock().lines();
    while let Some(Ok(line)) = lines.next() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["acquire", key, round] => {
                let round: u32 = round.parse().expect("round");
                let mut lease = rt.block_on(locker.acquire(key)).expect("worker A acquires");
                lease.ensure_valid().expect("A checks its lease before writing");
                say(format!("checked {}", lease.fence()));
                // Here the stop-the-world pause hits, between the check and the write.
                let Some(Ok(go)) = lines.next() else { return };
                assert_eq!(go, "write", "protocol");
                let locally_valid = lease.is_valid();
                let accepted = write(&mut conn, round, "A", lease.fence());
                let renewal = match rt.block_on(lease.renew()) {
                    Ok(()) => "renewed".to_string(),
                    Err(Error::LeaseLost { .. }) => "lost".to_string(),
                    Err(e) => format!("error:{e}"),
                };
                say(format!("wrote {} {} {renewal}", u8::from(accepted), u8::from(locally_valid)));
            }
            ["quit"] => return,
            other => panic!("unknown worker command {other:?}"),
        }
    }
}

/// The worker test's name as libtest filters it: its module path without the crate (test
/// binary) name, e.g. `pause::pause_worker_process`, so the name follows this file wherever
/// the binary's `main.rs` mounts it.
fn worker_test() -> String {
    match module_path!().split_once("::") {
        Some((_crate, module)) => format!("{module}::{WORKER_FN}"),
        None => WORKER_FN.to_string(),
    }
}

/// Worker A's process, killed (and thawed first) when dropped. Also the frozen leader of
/// `faults::election`.
pub(super) struct WorkerA {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
}

impl WorkerA {
    fn spawn(url: &str, db: &Path) -> WorkerA {
        WorkerA::spawn_test(&worker_test(), &[(WORKER_ENV, url.as_ref()), (WORKER_DB_ENV, db.as_os_str())])
    }

    /// This test binary re-run as the `#[ignore]`d worker test `test` (its libtest name),
    /// with `env` set; replies are its stdout lines tagged with [`TAG`].
    pub(super) fn spawn_test(test: &str, env: &[(&str, &std::ffi::OsStr)]) -> WorkerA {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = Command::new(exe)
            .args(["--ignored", "--exact", test, "--nocapture", "--test-threads=1"])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker A");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have printed "test name ... " on the same line first.
                if let Some(at) = line.find(TAG) {
                    if tx.send(line[at + TAG.len()..].to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        WorkerA { child, stdin, replies }
    }

    pub(super) fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to worker A");
        self.stdin.flush().expect("flush to worker A");
    }

    pub(super) fn reply(&self) -> String {
        self.replies.recv_timeout(REPLY_TIMEOUT).unwrap_or_else(|e| panic!("no reply from worker A: {e}"))
    }

    fn pid(&self) -> libc::pid_t {
        libc::pid_t::try_from(self.child.id()).expect("pid fits")
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own, not yet reaped child.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid());
    }

    /// The process state letter from /proc (`T` = stopped).
    pub(super) fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("read /proc stat");
        // "pid (comm) S ...": the state follows the last ')'.
        let after = &stat[stat.rfind(')').expect("comm") + 1..];
        after.trim_start().chars().next().expect("state")
    }

    pub(super) fn freeze(&self) {
        self.signal(libc::SIGSTOP);
        poll("worker A to be stopped", Duration::from_secs(5), || self.state() == 'T');
    }

    pub(super) fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl Drop for WorkerA {
    fn drop(&mut self) {
        let _ = self.send_quit();
        // SAFETY: as in `signal`.
        unsafe {
            libc::kill(self.pid(), libc::SIGCONT);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WorkerA {
    fn send_quit(&mut self) -> std::io::Result<()> {
        writeln!(self.stdin, "quit")?;
        self.stdin.flush()
    }
}

// ---------------------------------------------------------------------------------------
// The scenario
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_worker_writes_are_refused_by_the_fenced_table() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("ledger.sqlite");
    let mut conn = open_db(&db);
    create_schema(&conn);
    let mut a = WorkerA::spawn(&server.url(), &db);
    let locker_b = Locker::open(&server.url(), config()).expect("locker B");

    let mut refused = 0;
    for round in 0..ROUNDS {
        let key = "invoice:run";
        a.send(&format!("acquire {key} {round}"));
        let checked = a.reply();
        let fence_a: u64 = checked
            .strip_prefix("checked ")
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("round {round}: worker A said {checked:?}"));

        // A is frozen between its lease check and its write; the write order is queued.
        a.freeze();
        a.send("write");

        // B waits for A's lease to expire on the server, takes over, and writes.
        let lease_b = locker_b.acquire(key).await.unwrap_or_else(|e| panic!("round {round}: B: {e}"));
        let fence_b = lease_b.fence();
        assert!(fence_b > fence_a, "round {round}: B's fence {fence_b} is not above A's {fence_a}");
        assert!(write(&mut conn, round, "B", fence_b), "round {round}: the live holder's write was refused");
        // B's grant means A's lease ran out on the server while A was frozen.
        assert_eq!(a.state(), 'T', "A is still frozen when B has written");

        // A resumes and writes with its old fence.
        a.thaw();
        let wrote = a.reply();
        let words: Vec<&str> = wrote.split_whitespace().collect();
        let ["wrote", accepted, locally_valid, renewal] = words.as_slice() else {
            panic!("round {round}: worker A said {wrote:?}");
        };
        assert_eq!(
            *accepted, "0",
            "round {round}: the fenced table accepted A's stale write (fence {fence_a} after {fence_b})"
        );
        refused += 1;
        assert_eq!(*locally_valid, "0", "round {round}: A's own clock knows the lease ran out, too late");
        assert_eq!(*renewal, "lost", "round {round}: A's renewal must report the lost lease");
        let (ledger_writer, lock_only_writer): (String, String) = conn
            .query_row("SELECT ledger.last_writer, lock_only.last_writer FROM ledger, lock_only", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("read the rows");
        assert_eq!(ledger_writer, "B", "round {round}");
        assert_eq!(lock_only_writer, "A", "round {round}: the lock alone did not stop the stale write");
        assert!(lease_b.release().await.expect("B releases"), "round {round}");
    }

    // The recorded history: every accepted write carries a larger fence than the previous
    // accepted one, none came from the paused worker, and every write of A was refused.
    let writes: Vec<(u32, String, i64, bool)> = conn
        .prepare("SELECT round, writer, fence, accepted FROM writes ORDER BY seq")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(writes.len(), 2 * ROUNDS as usize);
    let accepted: Vec<&(u32, String, i64, bool)> = writes.iter().filter(|w| w.3).collect();
    assert!(accepted.windows(2).all(|p| p[0].2 < p[1].2), "accepted fences increase: {accepted:?}");
    let stale_accepted = writes.iter().filter(|w| w.1 == "A" && w.3).count();
    assert_eq!(stale_accepted, 0, "accepted stale writes");
    assert_eq!(refused, ROUNDS);
    let sent: i64 = conn.query_row("SELECT invoices_sent FROM ledger", [], |r| r.get(0)).expect("ledger");
    assert_eq!(sent, i64::from(ROUNDS), "exactly one invoice per round");
    eprintln!("{ROUNDS} rounds: {refused} stale writes refused by the fence, 0 accepted");
}
