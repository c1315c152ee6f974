//! Two worker processes race claims and writes on 1,000 rows of a real PostgreSQL, with real
//! leases from a real Redis with the module, under READ COMMITTED and under REPEATABLE READ,
//! while this process freezes one of them now and then with SIGSTOP (and each sometimes
//! sleeps between its lease and its claim, or between its claim and its write, past the lease).
//!
//! Both workers go through the rows in the same order, so they contend on every row: the one
//! behind waits for the lease, and takes it over whenever the other is frozen or asleep past
//! its ttl; the frozen one then wakes up with a stale fence. Afterwards, from the rows and
//! from an event log written in the same transactions (under the row lock, so its order per row
//! is the commit order): no row's fences ever went down, every row ends with the write of its
//! newest fence, each row's total counts exactly its applied writes (no lost or stale
//! update), and every refusal a worker saw was counted in its metrics.
//!
//! A test binary of its own (`harness = false`): the same executable is the worker when run as
//! `race --worker …`.

use std::io::{BufRead, BufReader};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fencedlock::{LockConfig, Locker};
use fencedlock_guard::postgres::{self, Update};
use fencedlock_guard::{Error, Table};
use harness::{Postgres, Server};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::IsolationLevel;

mod support;

const ROWS: i32 = 1_000;
const RESOURCE: &str = "race_rows";
/// Short leases, so that a freeze or a sleep of a couple of them hands the row over.
const TTL: Duration = Duration::from_millis(80);
/// How long a worker sleeps when it "pauses" on its own: past its lease.
const SLEEP_PAST_LEASE: Duration = Duration::from_millis(130);
/// How often (per row) a worker sleeps between its lease and its claim, and between its claim
/// and its write.
const SLEEP_CHANCE: f64 = 0.01;
/// Bound on one transaction's retries after serialization failures (REPEATABLE READ).
const MAX_RETRIES: u32 = 20;
/// Bound on one scenario: the workers must be done by then.
const DEADLINE: Duration = Duration::from_secs(120);
const RESULT_TAG: &str = "RESULT ";

const SCENARIOS: [(&str, &str); 2] =
    [("race_read_committed", "read-committed"), ("race_repeatable_read", "repeatable-read")];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker::main(&args[1..]);
    }
    if args.iter().any(|a| a == "--list") {
        for (name, _) in SCENARIOS {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    // libtest's conventions, as far as cargo passes them here: `--ignored` runs only ignored
    // tests (none here), free words filter by name, other flags are ignored.
    let ignored_only = args.iter().any(|a| a == "--ignored");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> = SCENARIOS
        .iter()
        .filter(|(name, _)| {
            !ignored_only && (filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        })
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, isolation) in chosen {
        println!("test {name} ...");
        let started = Instant::now();
        match catch_unwind(AssertUnwindSafe(|| parent::race(isolation))) {
            Ok(()) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", started.elapsed().as_secs_f64());
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED");
            }
        }
    }
    println!("\n{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}

fn table() -> Table {
    Table::new(RESOURCE)
}

fn isolation_level(name: &str) -> IsolationLevel {
    match name {
        "read-committed" => IsolationLevel::ReadCommitted,
        "repeatable-read" => IsolationLevel::RepeatableRead,
        other => panic!("unknown isolation {other:?}"),
    }
}

/// What a worker reports when it is done.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    claims: u64,
    writes: u64,
    stale_claims: u64,
    stale_writes: u64,
    /// The stale-refusal counter as its metrics recorder holds it.
    counted: u64,
    retries: u64,
    sleeps: u64,
}

impl Tally {
    fn to_line(self) -> String {
        format!(
            "{RESULT_TAG}{} {} {} {} {} {} {}",
            self.claims,
            self.writes,
            self.stale_claims,
            self.stale_writes,
            self.counted,
            self.retries,
            self.sleeps
        )
    }

    fn parse(line: &str) -> Option<Tally> {
        let n: Vec<u64> = line
            .strip_prefix(RESULT_TAG)?
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        let [claims, writes, stale_claims, stale_writes, counted, retries, sleeps] = n[..] else {
            return None;
        };
        Some(Tally { claims, writes, stale_claims, stale_writes, counted, retries, sleeps })
    }
}

mod parent {
    use super::*;

    /// Worker processes, thawed and killed if the test fails before they finish.
    struct Workers(Vec<Child>);

    impl Drop for Workers {
        fn drop(&mut self) {
            for child in &mut self.0 {
                signal(child, libc::SIGCONT);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    fn signal(child: &Child, sig: libc::c_int) {
        let Ok(pid) = libc::pid_t::try_from(child.id()) else { return };
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child, not
        // yet reaped (the `Child` is held until after this call).
        unsafe {
            libc::kill(pid, sig);
        }
    }

    pub fn race(isolation: &str) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let pg = Postgres::start();
        let redis = Server::start();
        let client = rt.block_on(support::connect(&pg));
        rt.block_on(client.batch_execute(&format!(
            "CREATE TABLE {RESOURCE} (id integer PRIMARY KEY, total integer NOT NULL DEFAULT 0, written_by bigint);
             INSERT INTO {RESOURCE} (id) SELECT generate_series(1, {ROWS});
             CREATE TABLE events (seq bigserial PRIMARY KEY, row_id integer NOT NULL, fence bigint NOT NULL,
                                  kind text NOT NULL, worker text NOT NULL, total integer NOT NULL);"
        )))
        .expect("schema");
        rt.block_on(postgres::add_fence_column(&client, &table())).expect("the schema step");

        let exe = std::env::current_exe().expect("this test binary");
        let mut workers = Workers(Vec::new());
        for (i, name) in ["w1", "w2"].into_iter().enumerate() {
            let child = Command::new(&exe)
                .args(["--worker", name, &pg.url(), &redis.url(), isolation, &(1000 + i).to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a worker");
            workers.0.push(child);
        }
        let freezes = freeze_now_and_then(&mut workers);
        let tallies: Vec<Tally> = workers
            .0
            .iter_mut()
            .map(|child| {
                let status = child.wait().expect("wait for a worker");
                let stdout = child.stdout.take().expect("worker stdout");
                let tally =
                    BufReader::new(stdout).lines().map_while(Result::ok).find_map(|l| Tally::parse(&l));
                assert!(status.success(), "a worker failed: {status}");
                tally.expect("the worker's RESULT line")
            })
            .collect();
        println!("  {isolation}: {freezes} freezes; workers: {tallies:?}");

        // Every refusal was counted, once, under the table's resource label.
        for t in &tallies {
            assert_eq!(t.counted, t.stale_claims + t.stale_writes, "refusals seen vs counted: {t:?}");
        }
        let refused: u64 = tallies.iter().map(|t| t.stale_claims + t.stale_writes).sum();
        let writes: u64 = tallies.iter().map(|t| t.writes).sum();
        assert!(refused > 0, "the pauses produced no stale holder: the race tested nothing");
        assert!(freezes > 0);

        rt.block_on(check_rows(&client, writes));
    }

    /// SIGSTOPs a random running worker for 20..150 ms every 50..250 ms until both exit.
    fn freeze_now_and_then(workers: &mut Workers) -> u32 {
        let mut rng = StdRng::seed_from_u64(7);
        let deadline = Instant::now() + DEADLINE;
        let mut freezes = 0;
        loop {
            let running: Vec<usize> =
                (0..workers.0.len()).filter(|&i| matches!(workers.0[i].try_wait(), Ok(None))).collect();
            if running.is_empty() {
                return freezes;
            }
            assert!(Instant::now() < deadline, "the workers did not finish within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(rng.random_range(50..250)));
            let victim = &workers.0[running[rng.random_range(0..running.len())]];
            signal(victim, libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(rng.random_range(20..150)));
            signal(victim, libc::SIGCONT);
            freezes += 1;
        }
    }

    /// The rows and the event log agree, and no stale write landed.
    async fn check_rows(client: &tokio_postgres::Client, writes: u64) {
        let logged: i64 =
            client.query_one("SELECT count(*) FROM events WHERE kind = 'write'", &[]).await.unwrap().get(0);
        assert_eq!(logged as u64, writes, "each applied write is logged once");
        // Per row, in commit order: a fence below one already seen is a stale claim or write.
        let went_down: i64 = client
            .query_one(
                "SELECT count(*) FROM (SELECT fence < max(fence) OVER (PARTITION BY row_id ORDER BY seq
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS down FROM events) e WHERE down",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(went_down, 0, "events with a fence below an earlier one on the same row");
        let rows = client
            .query(
                &format!(
                    "SELECT r.id, r.total, r.written_by, r.last_fence,
                            (SELECT count(*) FROM events e WHERE e.row_id = r.id AND e.kind = 'write'),
                            (SELECT max(fence) FROM events e WHERE e.row_id = r.id)
                       FROM {RESOURCE} r ORDER BY r.id"
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), ROWS as usize);
        for row in rows {
            let (id, total, written_by, last_fence): (i32, i32, Option<i64>, i64) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            let (row_writes, max_fence): (i64, Option<i64>) = (row.get(4), row.get(5));
            assert!(row_writes > 0, "row {id} was never written");
            assert_eq!(i64::from(total), row_writes, "row {id}: its total counts exactly its applied writes");
            assert_eq!(
                Some(last_fence),
                max_fence,
                "row {id}: last_fence is the newest fence that touched it"
            );
            assert_eq!(
                written_by,
                Some(last_fence),
                "row {id} ends with a write from a fence below its last_fence"
            );
        }
    }
}

mod worker {
    use super::*;

    /// `--worker NAME PG_URL REDIS_URL ISOLATION SEED`: every row in order, one lease each.
    pub fn main(args: &[String]) -> ExitCode {
        let [name, pg, redis, isolation, seed] = args else {
            eprintln!("usage: race --worker NAME PG_URL REDIS_URL ISOLATION SEED");
            return ExitCode::from(2);
        };
        let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the worker's recorder");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let seed: u64 = seed.parse().expect("seed");
        let result = rt.block_on(run(name, pg, redis, isolation_level(isolation), seed));
        match result {
            Ok(mut tally) => {
                tally.counted = snapshotter
                    .snapshot()
                    .into_vec()
                    .into_iter()
                    .filter(|(key, ..)| {
                        key.key()
                            .labels()
                            .any(|l| l.key() == fencedlock_guard::metrics::RESOURCE && l.value() == RESOURCE)
                    })
                    .map(|(.., value)| match value {
                        DebugValue::Counter(n) => n,
                        _ => 0,
                    })
                    .sum();
                println!("{}", tally.to_line());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("worker {name} failed: {e}");
                ExitCode::FAILURE
            }
        }
    }

    async fn run(
        name: &str,
        pg: &str,
        redis: &str,
        level: IsolationLevel,
        seed: u64,
    ) -> Result<Tally, Box<dyn std::error::Error>> {
        let config = LockConfig::builder()
            .ttl(TTL)
            .node_timeout(Duration::from_secs(2))
            .max_wait(Duration::from_secs(20))
            .build()?;
        let locker = Locker::open(redis, config)?;
        let mut client = support::connect_url(pg).await;
        let mut barrier = Barrier::open(redis, name).await?;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tally = Tally::default();
        for id in 1..=ROWS {
            // Both workers start each row together, so they contend for every row's lease.
            barrier.meet(id).await?;
            let lease = acquire(&locker, id).await?;
            let fence = lease.fence();
            maybe_sleep(&mut rng, &mut tally).await;
            match claim(&mut client, level, name, id, fence, &mut tally).await? {
                Some(total) => {
                    tally.claims += 1;
                    maybe_sleep(&mut rng, &mut tally).await;
                    if write(&mut client, level, name, id, fence, total + 1, &mut tally).await? {
                        tally.writes += 1;
                    } else {
                        tally.stale_writes += 1;
                    }
                }
                None => tally.stale_claims += 1,
            }
            // Gone already if the lease was taken over; that is the point.
            let _ = lease.release().await;
        }
        Ok(tally)
    }

    /// Two workers meeting before each row: each pushes to the other's list for the row and
    /// pops its own (a dedicated connection, since BLPOP holds it).
    struct Barrier {
        conn: harness::redis::aio::MultiplexedConnection,
        me: String,
        other: String,
    }

    impl Barrier {
        async fn open(url: &str, me: &str) -> Result<Barrier, harness::redis::RedisError> {
            let client = harness::redis::Client::open(url)?;
            let other = if me == "w1" { "w2" } else { "w1" };
            Ok(Barrier {
                conn: client.get_multiplexed_async_connection().await?,
                me: me.into(),
                other: other.into(),
            })
        }

        async fn meet(&mut self, row: i32) -> Result<(), Box<dyn std::error::Error>> {
            use harness::redis::AsyncCommands;
            let _: i64 = self.conn.rpush(format!("barrier:{row}:{}", self.other), 1).await?;
            let met: Option<(String, i64)> =
                self.conn.blpop(format!("barrier:{row}:{}", self.me), 30.0).await?;
            met.map(drop)
                .ok_or_else(|| format!("row {row}: the other worker did not arrive within 30 s").into())
        }
    }

    /// The row's lease. A freeze during the request can use up the whole validity before the
    /// grant arrives (the client then reports the lease lost at once): ask again.
    async fn acquire(locker: &Locker, id: i32) -> Result<fencedlock::Lease, fencedlock::Error> {
        let key = format!("race:{id}");
        let mut tries = 0;
        loop {
            match locker.acquire(&key).await {
                Err(e) if e.is_lease_lost() && tries < MAX_RETRIES => tries += 1,
                result => return result,
            }
        }
    }

    async fn maybe_sleep(rng: &mut StdRng, tally: &mut Tally) {
        if rng.random_bool(SLEEP_CHANCE) {
            tally.sleeps += 1;
            tokio::time::sleep(SLEEP_PAST_LEASE).await;
        }
    }

    /// Claims row `id` and logs the claim, in one transaction: `Some(total)` it inherits, or
    /// `None` if a newer holder has it. Serialization failures are retried from the top.
    async fn claim(
        client: &mut tokio_postgres::Client,
        level: IsolationLevel,
        worker: &str,
        id: i32,
        fence: u64,
        tally: &mut Tally,
    ) -> Result<Option<i32>, Box<dyn std::error::Error>> {
        for _ in 0..MAX_RETRIES {
            let tx = client.build_transaction().isolation_level(level).start().await?;
            let attempt = async {
                let total: i32 = postgres::claim(&tx, &table(), &id, fence, &["total"]).await?.get(0);
                log_event(&tx, id, fence, "claim", worker, total).await?;
                Ok::<_, Error>(total)
            }
            .await;
            match attempt {
                Ok(total) => match tx.commit().await.map_err(Error::from) {
                    Ok(()) => return Ok(Some(total)),
                    Err(e) if e.is_retryable() => tally.retries += 1,
                    Err(e) => return Err(e.into()),
                },
                Err(e) if e.is_stale() => return Ok(None),
                Err(e) if e.is_retryable() => tally.retries += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Err(format!("row {id}: no claim after {MAX_RETRIES} serialization failures").into())
    }

    /// Writes `total` to row `id` with the guard and logs it, in one transaction: `true` if
    /// applied, `false` if refused as stale.
    async fn write(
        client: &mut tokio_postgres::Client,
        level: IsolationLevel,
        worker: &str,
        id: i32,
        fence: u64,
        total: i32,
        tally: &mut Tally,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let fence_sql = i64::try_from(fence).expect("fences fit in bigint");
        for _ in 0..MAX_RETRIES {
            let tx = client.build_transaction().isolation_level(level).start().await?;
            let attempt = async {
                let update = Update::new().set("total", &total).set("written_by", &fence_sql);
                let written = postgres::write(&tx, &table(), &id, fence, &update).await?;
                assert!(written.is_applied(), "no precondition, so applied or an error");
                log_event(&tx, id, fence, "write", worker, total).await
            }
            .await;
            match attempt {
                Ok(()) => match tx.commit().await.map_err(Error::from) {
                    Ok(()) => return Ok(true),
                    Err(e) if e.is_retryable() => tally.retries += 1,
                    Err(e) => return Err(e.into()),
                },
                Err(e) if e.is_stale() => return Ok(false),
                Err(e) if e.is_retryable() => tally.retries += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Err(format!("row {id}: no write after {MAX_RETRIES} serialization failures").into())
    }

    /// Appends to the event log while the claim or write holds the row lock, so the log's
    /// order per row is the order the row's transactions committed in.
    async fn log_event(
        tx: &tokio_postgres::Transaction<'_>,
        id: i32,
        fence: u64,
        kind: &str,
        worker: &str,
        total: i32,
    ) -> Result<(), Error> {
        let fence = i64::try_from(fence).expect("fences fit in bigint");
        tx.execute(
            "INSERT INTO events (row_id, fence, kind, worker, total) VALUES ($1, $2, $3, $4, $5)",
            &[&id, &fence, &kind, &worker, &total],
        )
        .await?;
        Ok(())
    }
}
