//! Leader election on one lock key, after etcd's Election API: candidates campaign, one of
//! them leads under a kept-alive lease, and the lease's fence is the leader's **epoch**.
//!
//! A leader is simply the holder of a lease that is renewed for as long as it leads. Its label
//! (a public name, `ACQUIRE … LABEL`) is stored with the lease, so anyone can ask the server
//! who leads and since which epoch (`STATUS`) without ever seeing the token. Candidates wait in
//! the server's queue, so a resignation or an expiry hands the lease to the next candidate at
//! once, with a higher fence.
//!
//! # Losing leadership
//!
//! The keep-alive declares the lease lost at its first failed renewal, and at the latest when
//! the lease's validity ends on the leader's monotonic clock. That validity is measured from
//! *before* the request that granted or renewed the lease and shortened by the clock drift,
//! while the server counts its ttl from when it processed that request: the leader's deadline
//! passes before the server's, and the server grants no successor before its own. So the
//! [`Leadership::cancellation`] token fires before another candidate can be elected, and work
//! that selects on it stops in time.
//!
//! # The deposed leader that has not noticed
//!
//! Cancellation only reaches a process that runs. A leader frozen by a GC pause, a SIGSTOP or
//! a swapped-out VM misses its renewals, is deposed, and on waking still believes it leads
//! until it next looks: it is exactly the stale owner that fencing exists for. Downstream
//! resources must therefore check the epoch on every write and refuse older ones:
//!
//! ```sql
//! UPDATE jobs SET state = :state, last_epoch = :epoch
//!  WHERE id = :id AND last_epoch <= :epoch;  -- 0 rows: a newer leader wrote; stop
//! ```
//!
//! # Redlock
//!
//! Elections run on a [`Locker`] (one server, or a Redis Cluster routed by key), not on a
//! [`Redlock`](crate::Redlock): "who leads" is one server's `STATUS`, and a quorum of
//! independent masters has no single answer to read (each master holds its own fence and
//! expiry). Leadership across failures of the server is what replication with
//! `appendfsync always` and the module's epoch jump on promotion give a [`Locker`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fencedlock_protocol::keyspace::{
    journal_key, JOURNAL_EPOCH, JOURNAL_LABEL, JOURNAL_LENGTH, JOURNAL_RETENTION_MS,
};
use futures::Stream;
use tokio_util::sync::CancellationToken;

use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::cause::Cause;
use crate::error::Error;
use crate::primitives::keepalive::{KeptLease, LeaseHandle};
use crate::primitives::locker::Locker;

/// The shortest time one campaign request waits in the server's queue before it is sent
/// again; the window is the locker's [`max_wait`](crate::LockConfig::max_wait) if longer. A
/// campaign waits indefinitely: the windows only bound each request (and its connection), and
/// a candidate re-queues at the back after each, so a window of 0 must not turn into polling.
pub const MIN_CAMPAIGN_WINDOW: Duration = Duration::from_secs(1);

/// Shortest interval between two `STATUS` polls of an [`Election::observe`] stream.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Leader election on one key of a [`Locker`]'s server.
///
/// Cheap to clone; clones share the locker's connections. The lease options (ttl, renew
/// interval, waiting) are the locker's [`LockConfig`](crate::LockConfig).
///
/// ```no_run
/// # async fn demo() -> Result<(), fencedlock::Error> {
/// use std::time::Duration;
/// use fencedlock::{Election, LockConfig, Locker};
///
/// let config = LockConfig::builder().ttl(Duration::from_secs(6)).build()?;
/// let election = Election::new(Locker::open("redis://127.0.0.1:6379", config)?, "scheduler");
/// let leadership = election.campaign("host-a:4711").await?;
/// let stop = leadership.cancellation();
/// tokio::select! {
///     _ = stop.cancelled() => eprintln!("deposed; stopping"),
///     _ = async {
///         // Every write carries leadership.epoch(); the resource refuses older epochs.
///     } => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locker: Locker,
    key: String,
    poll: Duration,
}

/// Who leads, as the server tells anyone who asks; never the leader's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The label the leader campaigned with; `None` when the key is held by a lease taken
    /// without one (a plain lock on the same key).
    pub label: Option<Vec<u8>>,
    /// The leader's epoch: its lease's fence, higher than every earlier leader's.
    pub epoch: u64,
    /// Lease time left by the server's clock (renewed while the leader is alive).
    pub remaining: Duration,
}

impl Leader {
    /// The label as text, invalid UTF-8 replaced (for logs and displays).
    pub fn label_lossy(&self) -> Option<String> {
        self.label.as_deref().map(|label| String::from_utf8_lossy(label).into_owned())
    }
}

impl Election {
    /// An election on `key` among the candidates that campaign through `locker`'s server.
    /// Observers poll every [`renew_interval`](crate::LockConfig::renew_interval).
    pub fn new(locker: Locker, key: impl Into<String>) -> Election {
        let poll = locker.config().renew_interval().max(MIN_POLL_INTERVAL);
        Election { locker, key: key.into(), poll }
    }

    /// The same election with observers polling every `every` (at least
    /// [`MIN_POLL_INTERVAL`]): the latency of [`Election::observe`] against its load.
    pub fn with_poll_interval(mut self, every: Duration) -> Election {
        self.poll = every.max(MIN_POLL_INTERVAL);
        self
    }

    /// The election's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until elected, then leads under a kept-alive lease labelled `label` (public:
    /// shown by [`Election::leader`] to anyone; never put a secret in it). `label` must be 1
    /// to [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes ([`Error::Config`] otherwise).
    ///
    /// The wait has no end: the candidate waits in the server's queue, one request per
    /// window (the locker's [`max_wait`](crate::LockConfig::max_wait), at least
    /// [`MIN_CAMPAIGN_WINDOW`]), and is elected the moment the leader before it resigns or its
    /// lease expires. Errors other than contention end the campaign: a final one at once, a
    /// retryable one (the server unreachable) once it persisted for a whole window.
    ///
    /// Cancel-safe: dropping the future leaves no lease and no queued waiter behind. Must be
    /// called inside a Tokio runtime (the keep-alive is a task).
    pub async fn campaign(&self, label: impl Into<Vec<u8>>) -> Result<Leadership, Error> {
        let label = Error::checked_label(label)?;
        let coordinator = self.locker.coordinator();
        // One token for every window: ACQUIRE is idempotent for its holder.
        let token = coordinator.config().new_token();
        let window = coordinator.config().max_wait().max(MIN_CAMPAIGN_WINDOW);
        // Not recorded as an acquisition: a campaign may wait for hours, which would swamp the
        // acquire latency and wait-time histograms (each window's contention is counted).
        let lease = loop {
            let give_up = Instant::now() + window;
            let attempt = Attempts::UntilMaxWait;
            let terms = Terms::mutex(Some(&label));
            match Lease::take(coordinator, &self.key, token.clone(), attempt, give_up, terms).await {
                Err(Error::Contended { .. }) => continue,
                other => break other?,
            }
        };
        self.record(lease.fence(), &label).await;
        Ok(Leadership { kept: lease.keep_alive(), label })
    }

    /// Appends the new leader to the election's journal
    /// ([`journal_key`](fencedlock_protocol::keyspace::journal_key)), where watchers find it
    /// even if it resigns before their next poll. Best effort: a journal that cannot be
    /// written (an ACL that allows only the lock keys, a slow server) costs the leader nothing
    /// more than the attempt, and watchers then see this leader by `STATUS` alone.
    async fn record(&self, epoch: u64, label: &[u8]) {
        let journal = journal_key(self.key.as_bytes());
        let mut add = redis::cmd("XADD");
        add.arg(&journal).arg("MAXLEN").arg("~").arg(JOURNAL_LENGTH).arg("*");
        add.arg(JOURNAL_EPOCH).arg(epoch).arg(JOURNAL_LABEL).arg(label);
        let mut expire = redis::cmd("PEXPIRE");
        expire.arg(&journal).arg(JOURNAL_RETENTION_MS);
        let node = self.locker.node();
        let written = async {
            node.call::<redis::Value>(&add, "XADD").await?;
            node.call::<redis::Value>(&expire, "PEXPIRE").await
        };
        if let Err(err) = written.await {
            tracing::debug!(key = %self.key, epoch, error = %err, "the election journal was not written; watchers see this leader by STATUS only");
        }
    }

    /// Who leads now, from the server's `STATUS`: `None` while nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let status = self.locker.node().status(&self.key).await?;
        Ok(status.filter(|st| st.held).map(|st| Leader {
            label: st.label,
            epoch: st.fence,
            remaining: st.remaining.unwrap_or_default(),
        }))
    }

    /// The leadership as it changes: the current leader (or `None`) first, then each change
    /// of leader or epoch (never a mere renewal). An error is yielded as it happens and
    /// polling goes on; drop the stream to stop.
    ///
    /// The stream polls `STATUS` every poll interval ([`Election::with_poll_interval`],
    /// by default the renew interval, ttl / 3) while it is consumed, sooner when the leader's
    /// lease runs out earlier: a resignation is seen within one interval, a leader that died
    /// without resigning (its successor elected at its lease's expiry) about one millisecond
    /// after the expiry. No candidate is involved: observing never takes part in the election.
    ///
    /// # Leaders shorter than a poll
    ///
    /// A leader that is elected and resigns between two polls leaves no trace in `STATUS`.
    /// Every leader this crate elects also appends its epoch and label to the election's
    /// journal (a capped stream beside the key, see
    /// [`journal_key`](fencedlock_protocol::keyspace::journal_key)), and each poll reads the
    /// journal from where the last one stopped before it asks `STATUS`: such a leader is
    /// yielded in epoch order, with [`Leader::remaining`] zero (it no longer leads). Only
    /// leaders whose journal entry was written are seen this way (candidates of other clients
    /// keep none, and an ACL may deny a leader the journal's key or a watcher its reads); a
    /// leader that does not resign still leads for a whole lease, longer than a poll interval
    /// shorter than the ttl, so `STATUS` sees it.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<Leader>, Error>> + Send + 'static {
        let state = Observed {
            election: self.clone(),
            last: None,
            last_epoch: 0,
            pause: Duration::ZERO,
            journal: Journal::Unread,
            unplaced: Vec::new(),
            pending: VecDeque::new(),
        };
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next_change().await;
            Some((item, state))
        })
    }
}

/// An observer's state: the identity last yielded (`Some(None)`: nobody led), the highest
/// epoch yielded, the pause before the next poll, where it stands in the journal, the journal
/// entries read but not yet placed (a poll failed after reading them), and the changes found
/// but not yet yielded.
struct Observed {
    election: Election,
    last: Option<Option<(u64, Option<Vec<u8>>)>>,
    last_epoch: u64,
    pause: Duration,
    journal: Journal,
    unplaced: Vec<(u64, Vec<u8>)>,
    pending: VecDeque<Option<Leader>>,
}

/// Where an observer stands in the election's journal.
enum Journal {
    /// Not read yet: the first read only finds its end (earlier leaders are history).
    Unread,
    /// The id of the last entry read (`0-0`: none yet).
    At(String),
    /// This watcher may not read it (an ACL, a server without streams): `STATUS` alone.
    Off,
}

impl Observed {
    /// Polls until the leadership differs from the last one yielded (or a poll fails).
    async fn next_change(&mut self) -> Result<Option<Leader>, Error> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            tokio::time::sleep(self.pause).await;
            self.pause = self.election.poll;
            // The journal first: every entry read was written before the STATUS that
            // follows, so a journaled leader that STATUS does not show had resigned by then.
            let entries = self.read_journal().await;
            self.unplaced.extend(entries);
            let leader = self.election.leader().await?;
            if let Some(leader) = &leader {
                // Look again just after this lease would run out, unless it is renewed.
                let expiry = leader.remaining.saturating_add(Duration::from_millis(1));
                self.pause = self.pause.min(expiry).max(MIN_POLL_INTERVAL);
            }
            let now = leader.as_ref().map(|l| l.epoch);
            let mut gone = std::mem::take(&mut self.unplaced);
            gone.sort_unstable_by_key(|(epoch, _)| *epoch);
            for (epoch, label) in gone {
                if epoch > self.last_epoch && Some(epoch) != now {
                    self.last_epoch = epoch;
                    self.last = Some(Some((epoch, Some(label.clone()))));
                    let leader = Leader { label: Some(label), epoch, remaining: Duration::ZERO };
                    self.pending.push_back(Some(leader));
                }
            }
            let identity = leader.as_ref().map(|l| (l.epoch, l.label.clone()));
            if self.last.as_ref() != Some(&identity) {
                self.last = Some(identity);
                self.last_epoch = self.last_epoch.max(now.unwrap_or(0));
                self.pending.push_back(leader);
            }
        }
    }

    /// The journal's entries since the last read, as `(epoch, label)`. A failed read is
    /// retried at the next poll (nothing is lost: the stream keeps them), except a refusal
    /// that will not pass (an ACL), which turns the journal off for this watcher.
    async fn read_journal(&mut self) -> Vec<(u64, Vec<u8>)> {
        let journal = journal_key(self.election.key.as_bytes());
        let node = self.election.locker.node();
        let read = match &self.journal {
            Journal::Off => return Vec::new(),
            Journal::Unread => {
                let mut last = redis::cmd("XREVRANGE");
                last.arg(&journal).arg("+").arg("-").arg("COUNT").arg(1);
                node.call::<Vec<JournalEntry>>(&last, "XREVRANGE").await.map(|entries| {
                    let end = entries.into_iter().next().map_or_else(|| "0-0".to_owned(), |e| e.id);
                    self.journal = Journal::At(end);
                    Vec::new()
                })
            }
            Journal::At(after) => {
                let mut since = redis::cmd("XRANGE");
                since.arg(&journal).arg(format!("({after}")).arg("+").arg("COUNT").arg(JOURNAL_LENGTH);
                node.call::<Vec<JournalEntry>>(&since, "XRANGE").await.map(|entries| {
                    if let Some(last) = entries.last() {
                        self.journal = Journal::At(last.id.clone());
                    }
                    entries.into_iter().filter_map(|e| e.epoch.map(|epoch| (epoch, e.label))).collect()
                })
            }
        };
        read.unwrap_or_else(|err| {
            let refused = matches!(&err, Error::Server { source, .. }
                if matches!(Cause::of(source), Cause::NoPermission | Cause::NoModule));
            tracing::debug!(key = %self.election.key, error = %err, refused, "the election journal could not be read");
            if refused {
                self.journal = Journal::Off;
            }
            Vec::new()
        })
    }
}

/// One entry of an election's journal: its stream id, the leader's epoch (`None` when the
/// entry is not one of ours) and label.
struct JournalEntry {
    id: String,
    epoch: Option<u64>,
    label: Vec<u8>,
}

impl redis::FromRedisValue for JournalEntry {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let (id, fields) = <(String, Vec<Vec<u8>>)>::from_redis_value(v)?;
        let field = |name: &str| {
            fields.chunks_exact(2).find(|pair| pair[0] == name.as_bytes()).map(|pair| pair[1].clone())
        };
        let epoch = field(JOURNAL_EPOCH).and_then(|e| String::from_utf8(e).ok()?.parse().ok());
        Ok(JournalEntry { id, epoch, label: field(JOURNAL_LABEL).unwrap_or_default() })
    }
}

/// Being the leader: a kept-alive lease whose fence is the epoch.
///
/// Dropping it stops the renewals and releases the lease in the background, which elects the
/// next candidate; [`Leadership::resign`] does the same and says whether we still led.
#[derive(Debug)]
#[must_use = "leadership ends (the lease is released) as soon as it is dropped"]
pub struct Leadership {
    kept: KeptLease,
    label: Vec<u8>,
}

impl Leadership {
    /// The election's key.
    pub fn key(&self) -> &str {
        self.kept.key()
    }

    /// The epoch of this leadership: the lease's fence, strictly higher than every earlier
    /// leader's. Send it with every write; the resource refuses epochs below the highest it
    /// has seen.
    pub fn epoch(&self) -> u64 {
        self.kept.fence()
    }

    /// The label this leader campaigned with.
    pub fn label(&self) -> &[u8] {
        &self.label
    }

    /// A cloneable handle on the lease (epoch, validity, loss) for the leader's tasks.
    pub fn handle(&self) -> LeaseHandle {
        self.kept.handle()
    }

    /// Cancelled when leadership is lost (the first failed renewal, or the validity running
    /// out), before another candidate can be elected; see the module docs.
    pub fn cancellation(&self) -> CancellationToken {
        self.kept.cancellation()
    }

    /// Completes when leadership is lost, with the reason ([`Error::LeaseLost`]).
    pub async fn lost(&self) -> Error {
        self.kept.lost().await
    }

    /// `Err(Error::LeaseLost)` once leadership is lost.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        self.kept.ensure_valid()
    }

    /// Validity left on this process's clock; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.kept.remaining()
    }

    /// Steps down: stops renewing and releases the lease, which the server hands to the next
    /// queued candidate at once. `Ok(true)` if we still led, `Ok(false)` if leadership had
    /// already been lost.
    pub async fn resign(self) -> Result<bool, Error> {
        self.kept.release().await
    }
}
