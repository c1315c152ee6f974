//! Jobs that run at most once per period across hosts, measured on the server's clock (see
//! [`fencedlock_protocol::periodic`] for the record and the rule).
//!
//! The lock makes runs one at a time; the record makes them one per period. The holder reads
//! the record under its lease ([`Locker::schedule`]), runs the job only when it is
//! [`Schedule::Due`], and records the run ([`Due::record`]) before it releases, so the next
//! holder, whenever its cron fires and whatever its clock says, finds the run on record.
//! [`Locker::run_at_most_every`] does all of it around a closure.
//!
//! Periodic jobs need one server (or one Redis Cluster, where the record lives in the lock
//! key's slot): the period is measured on its clock, and independent Redlock masters have no
//! common one.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencedlock_protocol::periodic::{record_key, ReadReply, READ, RECORD_RETENTION_MS, WRITE};

use crate::acquisition::lease::Lease;
use crate::error::Error;
use crate::node::Node;
use crate::primitives::keepalive::{while_held, LeaseHandle};
use crate::primitives::locker::Locker;

/// A job's last counted run, as the server that keeps its record tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRun {
    /// When the run started, on the server's clock.
    pub started: SystemTime,
    /// How long ago that was, on the server's clock.
    pub age: Duration,
    /// The fence of the lease the run held.
    pub fence: u64,
    /// The label of the lease the run held, if it had one (who ran it).
    pub label: Option<Vec<u8>>,
    /// The job's exit code (non-zero only where failed runs are counted).
    pub exit_code: i64,
}

/// Whether a periodic job is to run now, as its lease holder finds it.
#[derive(Debug)]
#[must_use = "a due job's run is counted only once recorded"]
pub enum Schedule {
    /// Run the job, then [`Due::record`] it while the lease is still held.
    Due(Due),
    /// The last counted run started less than a period ago: do nothing now.
    NotDue {
        /// That run.
        last: LastRun,
        /// When the job is due, from now, on the server's clock.
        due_in: Duration,
    },
}

/// The right to run a due job once and to record the run. Records under the fence of the
/// lease that found the job due, stamped with the server's time at that moment.
#[derive(Debug)]
pub struct Due {
    locker: Locker,
    key: String,
    fence: u64,
    label: Option<Vec<u8>>,
    started_ms: u64,
    every: Duration,
    previous: Option<LastRun>,
}

impl Due {
    /// The run before this one, if the job has one on record.
    pub fn previous(&self) -> Option<&LastRun> {
        self.previous.as_ref()
    }

    /// Counts the run (with the job's `exit_code`): the next holder finds it on record and
    /// does not run the job until a period after this run started. Call it before releasing
    /// the lease. `Ok(false)` when a newer holder's run is on record already: this lease was
    /// lost meanwhile (its run may have overlapped the newer one, which is what fencing the
    /// job's writes guards against).
    pub async fn record(self, exit_code: i64) -> Result<bool, Error> {
        let retention =
            u64::try_from(self.every.as_millis()).unwrap_or(u64::MAX).saturating_add(RECORD_RETENTION_MS);
        let mut write = redis::cmd("EVAL");
        write
            .arg(WRITE)
            .arg(1)
            .arg(record_key(self.key.as_bytes()))
            .arg(self.started_ms)
            .arg(self.fence)
            .arg(self.label.as_deref().unwrap_or_default())
            .arg(exit_code)
            .arg(retention);
        let node = self.locker.periodic_node()?;
        let written: i64 = node.call(&write, "record a periodic run").await?;
        Ok(written == 1)
    }
}

/// What [`Locker::run_at_most_every`] came to.
#[derive(Debug)]
pub enum Periodic<T> {
    /// The job was due; it ran, produced this and was recorded.
    Ran(T),
    /// The job ran less than a period ago.
    NotDue {
        /// That run.
        last: LastRun,
        /// When the job is due, from now, on the server's clock.
        due_in: Duration,
    },
    /// Another holder has the lock (it is running the job, or finding it not due).
    Busy,
}

impl Locker {
    /// Whether the job guarded by `lease` (one this locker granted) is due, for a job that
    /// runs at most once every `every`: read under the lease, on the server's clock.
    ///
    /// [`Error::Config`] over several masters (see the module docs) or for a zero period;
    /// [`Error::BadRecord`] when the key's record was not written by fencedlock.
    pub async fn schedule(&self, lease: &Lease, every: Duration) -> Result<Schedule, Error> {
        if every.is_zero() {
            return Err(Error::Config("a periodic job's period must be at least 1 ms".into()));
        }
        let node = self.periodic_node()?;
        let read = read(node, lease.key()).await?;
        let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let previous = last_run(&read);
        match (read.due(every_ms), previous) {
            (Err(due_in_ms), Some(last)) => {
                Ok(Schedule::NotDue { last, due_in: Duration::from_millis(due_in_ms) })
            }
            (_, previous) => Ok(Schedule::Due(Due {
                locker: self.clone(),
                key: lease.key().to_owned(),
                fence: lease.fence(),
                label: self.config().label().map(<[u8]>::to_vec),
                started_ms: read.now_ms,
                every,
                previous,
            })),
        }
    }

    /// The last counted run of the periodic job on `key`, if one is on record.
    pub async fn last_run(&self, key: &str) -> Result<Option<LastRun>, Error> {
        Error::check_key(key)?;
        Ok(last_run(&read(self.periodic_node()?, key).await?))
    }

    /// Runs `work` at most once every `every` across every process that calls this for
    /// `key`: takes the lease without waiting ([`Periodic::Busy`] when another holder has
    /// it), runs `work` under the kept-alive lease only if the job is due, records the run
    /// when `work` succeeds, and releases. A failed `work` is not counted: the next holder
    /// runs the job again. If the lease is lost, `work` is dropped and the loss returned; a
    /// run that succeeded but could not be recorded is an error too (the job may then run
    /// again within the period).
    pub async fn run_at_most_every<F, Fut, T, E>(
        &self,
        key: &str,
        every: Duration,
        work: F,
    ) -> Result<Periodic<T>, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.periodic_node()?;
        let lease = match self.try_acquire(key).await {
            Ok(lease) => lease,
            Err(Error::Contended { .. }) => return Ok(Periodic::Busy),
            Err(err) => return Err(err.into()),
        };
        let due = match self.schedule(&lease, every).await {
            Ok(Schedule::Due(due)) => due,
            Ok(Schedule::NotDue { last, due_in }) => {
                lease.release().await?;
                return Ok(Periodic::NotDue { last, due_in });
            }
            Err(err) => {
                // Nothing ran; the release is a courtesy to the next holder.
                let _ = lease.release().await;
                return Err(err.into());
            }
        };
        let kept = lease.keep_alive();
        // On a loss, dropping `kept` stops the keep-alive and releases in the background.
        let output = while_held(&kept.handle(), work).await?;
        let recorded = match &output {
            Ok(_) => due.record(0).await.map(drop),
            Err(_) => Ok(()),
        };
        if let Err(err) = kept.release().await {
            tracing::warn!(key, error = %err, "release after a periodic run failed; the lease expires after its ttl");
        }
        recorded?;
        output.map(Periodic::Ran)
    }

    /// The one server whose clock measures periods.
    fn periodic_node(&self) -> Result<&Node, Error> {
        match self.nodes() {
            [node] => Ok(node),
            _ => Err(Error::Config(
                "a periodic job needs one server (or one Redis Cluster): the period is measured on its clock, and independent masters have none in common".into(),
            )),
        }
    }
}

/// The server's time and `key`'s record, in one script.
async fn read(node: &Node, key: &str) -> Result<ReadReply, Error> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(READ).arg(1).arg(record_key(key.as_bytes()));
    let fields: Vec<Option<Vec<u8>>> = node.call(&cmd, "read a periodic job's record").await?;
    ReadReply::parse(&fields).map_err(|source| Error::BadRecord {
        node: node.name().to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// The record in `read`, with its start as a time and its age.
fn last_run(read: &ReadReply) -> Option<LastRun> {
    let last = read.last.as_ref()?;
    Some(LastRun {
        started: UNIX_EPOCH + Duration::from_millis(last.started_ms),
        age: Duration::from_millis(read.age_ms().unwrap_or_default()),
        fence: last.fence,
        label: last.label.clone(),
        exit_code: last.exit,
    })
}
