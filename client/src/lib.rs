//! Leases with fencing tokens on Redis and Valkey servers: served by the `fencedlock` module
//! where a server has it loaded, and elsewhere (managed services) by the `fencedlock` Functions
//! library, which the client loads itself (or runs as a script where `FUNCTION` is denied); see
//! [`EngineChoice`]. The API and the guarantees are the same on either engine.
//!
//! This crate owns the client side of a lease: tokens, validity on the local monotonic clock,
//! Redlock quorums and the fenced raise, keep-alive, and errors by kind. The command shapes,
//! limits and reply decoding are the `fencedlock-protocol` crate's; this crate must not restate
//! them, nor ever put a token into an error, a log line or a `Debug` output.
//!
//! A lock decides who may *try*; the protected resource decides which writes *count*. Every
//! lease carries a **fence**, a number that is larger for every later grant on the same key.
//! Send it with each write and have the resource refuse fences lower than the highest it has
//! seen (`UPDATE … SET last_fence = :fence WHERE … AND last_fence <= :fence`): a holder that was
//! paused past its lease then cannot overwrite its successor's work.
//!
//! - [`Locker`]: leases from one server (or a Redis Cluster, routed by key); `acquire` waits
//!   in the server's queue and is handed the lease at the release (see *Waiting* below).
//! - [`Redlock`]: the same locker built over N independent masters, taking leases by
//!   majority, with **fenced Redlock** by default: a fence that increases across successive
//!   grants even though they come from different majorities (see [`Fencing`] for the raise
//!   step and its safety argument). Every lease method is the [`Locker`]'s.
//!
//! Inside, three layers, each using only the ones below: the primitives (lockers, keep-alive,
//! the failure policy, elections, semaphores), the acquisition layer, whose coordinator alone
//! knows the topology (one server, with or without replica confirmation, or a quorum, with or
//! without the raise step; decided once, when the locker is built) and picks each round, and
//! the node, one server's connections and requests. Every request is the protocol crate's
//! typed request (`Acquire`, `Renew`, `Release`, `Raise`, `Status`), each ACQUIRE built once
//! from the lease's terms (label, permits) and sent through one entry point per server.
//! TLS, Sentinel, Cluster and metrics are cargo features, all on by default (`docs/rust.md`,
//! *Cargo features*).
//! - [`Lease`]: key, fence, 128-bit random token, validity on the local monotonic clock
//!   measured from *before* the request minus clock drift; [`Lease::ensure_valid`],
//!   [`Lease::renew`], [`Lease::release`].
//! - [`Locker::renew_token`] / [`Locker::release_token`] (on a [`Redlock`] too):
//!   renew or end a lease known only by its token, e.g. one handed over by another process.
//! - [`KeptLease`] / [`LeaseHandle`]: background renewal at ttl / 3 that cancels a
//!   [`CancellationToken`] (re-exported from `tokio-util`) on the first failed renewal;
//!   [`Locker::with_lease`] runs fallible work under a kept-alive lease and drops it when the
//!   lease is lost.
//! - [`Session`]: many leases kept alive by one pipeline of renewals per server per interval,
//!   lost together when that keep-alive fails ([`Locker::session`]).
//! - [`Locker::acquire_all`]: a lease on each of several keys, all or none, without deadlock
//!   between callers that name overlapping keys in different orders ([`Leases`]).
//! - Periodic jobs: [`Locker::run_at_most_every`] runs work at most once per period across
//!   processes, measured on the server's clock ([`Locker::schedule`], [`Due::record`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencedlock::Error> {
//! use std::time::Duration;
//! use fencedlock::{LockConfig, Locker};
//!
//! let config = LockConfig::builder()
//!     .ttl(Duration::from_secs(5))
//!     .max_wait(Duration::from_secs(2))
//!     .build()?;
//! let locker = Locker::open("redis://127.0.0.1:6379", config)?;
//! let rows = locker
//!     .with_lease("billing:run", |lease| async move {
//!         // Every write carries lease.fence(); the database refuses older fences.
//!         Ok::<_, fencedlock::Error>(lease.fence())
//!     })
//!     .await?;
//! # let _ = rows; Ok(()) }
//! ```
//!
//! # Waiting for a busy lock
//!
//! [`Locker::acquire`] (a [`Redlock`]'s too) waits *on the server*
//! (`FENCEDLOCK.ACQUIRE key token ttl_ms BLOCK ms`, `ms` the time left of the maximum wait):
//! the server queues waiters per key in arrival order and hands the lease to the head of the
//! queue the moment it ends (release, expiry at the holder's deadline, deletion), so a waiter
//! is granted one network hop after the release instead of at its next poll, and nobody
//! starves. Against a server whose module predates `BLOCK` (the server refuses the form with
//! its arity error, which changes nothing), the node is remembered as unable to wait (asked
//! again after a minute) and acquisition polls with jittered backoff, as
//! [`LockConfigBuilder::max_blocking`]`(0)` also makes it do.
//!
//! - **Connections.** A blocked request holds its connection until it is answered, and the
//!   node's shared connection carries every renewal, so each waiting request runs on a
//!   dedicated connection from a small per-node pool, at most
//!   [`max_blocking`](LockConfigBuilder::max_blocking) ([`DEFAULT_MAX_BLOCKING`]) at once.
//!   More waiters wait in the client, in arrival order, for a free connection: polling
//!   instead would not help, since while others are queued the server refuses non-blocking
//!   ACQUIREs (no barging), so a poller could only starve. A waiting request is bounded by
//!   its wait plus the per-node timeout (the timeout is for answering).
//! - **Cancellation.** Dropping the `acquire` future closes its waiting connection, and the
//!   server drops the waiter from its queue. The server may have granted the lease just
//!   before it saw the close, so the acquisition's claim stays armed while a waiting request
//!   is in flight and releases on drop — twice, the second time one node timeout later,
//!   because the release travels on another connection and may arrive before the close.
//! - **Validity.** A lease handed over after a wait began at the handoff, somewhere between
//!   sending and the reply, so its validity is measured (conservatively) from sending; a wait
//!   that used more than a quarter of the lease is followed by one RENEW, from which the
//!   validity is measured instead.
//! - **Redis Cluster.** A waiting request uses a cluster connection of its own from the pool,
//!   routed by key like every command. If the key's slot moves away (or the key is deleted)
//!   while requests wait on it, the server answers them `TRYAGAIN` (nothing granted); the
//!   cluster connection asks again after its retry delay and is routed to the slot's new owner,
//!   where the request queues again (at the back).
//! - **Redlock.** Waiting in every master's queue at once would split the votes: A first in
//!   two queues, B first in the other three, nobody with a majority until the leases expire.
//!   Instead every contender waits in *one* queue, the key's designated master, chosen by
//!   rendezvous hashing of key and master address (the same for every client whatever the
//!   order it lists the masters in, and spread over the masters across keys). Its grant is
//!   only a reservation: the holder then runs an ordinary round on every master (the
//!   designated one answers at once for its own token), each master allowed to wait one node
//!   timeout for the previous holder's releases still in flight, with validity measured from
//!   the round's start. A failed round releases everywhere (passing the reservation on) and
//!   backs off before queueing again. A designated master that cannot queue (unreachable, or
//!   silent: it is pinged on its shared connection every second while we wait) is passed
//!   over for the next in the ranking, which every client that sees the failure picks alike.
//!   See [`Redlock`] for the argument.
//!
//! # Leader election
//!
//! [`Election`] (after etcd's Election API) elects one leader among candidates on a
//! [`Locker`]'s key: [`Election::campaign`] waits in the server's queue until elected, then
//! leads under a kept-alive lease carrying a public label, whose fence is the leader's
//! **epoch** ([`Leadership::epoch`]); [`Leadership::resign`] hands over to the next candidate
//! at once. Anyone can ask who leads ([`Election::leader`]: label, epoch, time left, never the
//! token) or follow the changes ([`Election::observe`], a stream polled without busy-waiting).
//!
//! Losing leadership cancels [`Leadership::cancellation`] before another candidate can be
//! elected: the keep-alive gives up at its first failed renewal, within a validity that ends
//! on the leader's clock before the server's ttl does. But a leader that was frozen (a pause,
//! a SIGSTOP) cannot act on it, and on waking it still believes it leads: a deposed leader
//! that has not noticed is exactly the stale owner. Downstream resources must check the epoch
//! (`UPDATE … SET last_epoch = :epoch WHERE … AND last_epoch <= :epoch`) and refuse older ones.
//!
//! # Fenced semaphores
//!
//! [`Semaphore`] admits up to N holders on a [`Locker`]'s key at once
//! (`FENCEDLOCK.ACQUIRE … PERMITS n`). Each permit is an ordinary [`Lease`] with its own
//! token and fence, fences strictly increasing over every grant on the key; waiting is the
//! server's FIFO queue, as for a lock, and [`Semaphore::status`] shows every holder's fence,
//! time left and label (never a token). The N holders write at once, so each is fenced
//! separately (a per-slot `last_fence`, not one global maximum). Not on a [`Redlock`]: a
//! quorum of masters cannot bound the holders (see [`Semaphore`]).
//!
//! # Fenced read-write locks
//!
//! [`ReadWriteLock`] lets many readers or one writer hold a [`Locker`]'s key
//! (`FENCEDLOCK.ACQUIRE … SHARED` for a read lease). Both are ordinary [`Lease`]s; every grant
//! takes the key's next fence, so a writer's is above every earlier reader's and writer's.
//! Readers that come after a waiting writer wait behind it (no starvation);
//! [`ReadWriteLock::downgrade`] keeps the writer's fence; an upgrade is refused.
//!
//! # When the lock service is down
//!
//! [`Error::is_unavailable`] tells "the service could not answer" (unreachable, timed out, no
//! majority for lack of answers, loading, out of memory, restart grace, a grant replicas did
//! not confirm) from "someone holds it" ([`Error::Contended`], or a Redlock round with a
//! refusal) and from mistakes (configuration, `NOPERM`, `WRONGTYPE`). What to do then is
//! decided in advance, per locker, with [`LockConfigBuilder::on_unavailable`], and applied by
//! [`Locker::acquire_with_policy`] (a [`Redlock`]'s too):
//!
//! - [`OnUnavailable::FailClosed`] (default): the error is returned and the work does not
//!   run. Right for work that nothing else protects: a duplicate run is the harm.
//! - [`OnUnavailable::FailOpen`]: the result is [`Acquisition::Unlocked`] (a warning is logged
//!   and counted): the work may run without the lock. Right for work whose duplicate is
//!   harmless, or whose resource enforces the invariant anyway (a unique constraint, a
//!   conditional write): then the resource does the real job and the lock only saves effort.
//!   An unlocked run has no fence: none may be invented, since a made-up number could exceed
//!   the real holder's and lock it out of the resource.
//!
//! A busy lock is never "unlocked", whatever the policy. Failing open risks duplicates,
//! failing closed risks starvation while the service is down: choose by what a double grant
//! costs, and fence the resource either way.
//!
//! # Metrics and events
//!
//! The client records acquire latency by outcome, wait time, contended and unavailable
//! attempts, renewals and their failures, leases lost, and hold time against the ttl through
//! the [`metrics`](https://docs.rs/metrics) facade; the names are the constants of
//! [`mod@metrics`], and [`metrics::record_fence_refusal`] lets the application count the
//! stale writes its resource refused, next to the rest. Nothing is recorded until the
//! application installs a recorder (the facade's no-op costs a few nanoseconds per call). No
//! metric has a per-key label: keys built from ids would make a time series per id. Events —
//! a lease lost, a fail-open acquisition, a failed release — go to `tracing` as well: numbers
//! aggregate and alert, events say which key, which fence and why.
//!
//! # Fenced Redlock in one paragraph
//!
//! After a majority granted the lease, the client raises the key's fence on every granting
//! node to the largest fence among them (only where our token still holds the lease) and
//! hands the lease out only once a majority confirmed. Any later grant's majority shares a
//! node with the confirming majority; that node raised before it could grant again, so it
//! grants a larger fence, and the later lease's fence (the maximum over its majority) is
//! larger still. This holds while a majority of masters keeps its state across restarts
//! (`appendfsync always`, or the module's restart epoch jump / restart grace). The full
//! argument is on [`Fencing`].
//!
//! # Tokens stay secret
//!
//! A token is all it takes to renew or release a lease, so it never appears in what the
//! crate shows: [`Token`]'s `Debug` is redacted, and server error text is cleaned before it
//! becomes an [`Error`] or a [`QuorumReport`] vote (a server without the module echoes the
//! arguments of the command it does not know, token included; that echo and any occurrence
//! of the token are replaced). The error keeps its kind and code, so retry decisions and
//! [`Error::reply_error`], which names the module's refusals by kind, work as before.
//!
//! # Time
//!
//! All validity arithmetic uses [`std::time::Instant`] (monotonic) and starts before the first
//! request of a round is sent: `validity = ttl - elapsed - (ttl * drift_factor + 2 ms)`.
//! A Redlock round ends as soon as its outcome is certain — a majority granted, or enough
//! nodes refused or failed to rule a majority out — so stopped or slow masters cost nothing
//! while a majority answers quickly; nodes not waited for show as [`Vote::NotAwaited`].
//! Releases do not wait for them either: a release returns once a majority's answer is known,
//! and a failed acquisition round once the nodes that answered it have released. The RELEASEs
//! to nodes that did not answer still go out and continue in the background, each bounded by
//! the per-node timeout (a lease they do not reach expires after its ttl). So a silent
//! minority costs a release nothing, and an acquisition that cannot win retries once per
//! node timeout.
//! Servers decide expiry on their own monotonic clocks; no wall-clock time is exchanged.

#![warn(missing_docs)]

mod acquisition;
mod backend;
mod backoff;
mod cause;
mod config;
mod error;
pub mod metrics;
mod node;
mod primitives;
mod quorum;
mod redact;
mod tls;
mod token;
mod validity;

pub use acquisition::fenced::Fencing;
pub use acquisition::lease::Lease;
pub use backend::{Engine, EngineChoice};
pub use backoff::Backoff;
pub use cause::Cause;
pub use config::{
    LockConfig, LockConfigBuilder, OnUnavailable, DEFAULT_CONFIRM_TIMEOUT, DEFAULT_MAX_BLOCKING,
    DEFAULT_NODE_TIMEOUT, MAX_TTL,
};
pub use error::{Error, LossCause};
pub use fencedlock_protocol::command::SHARED_PERMITS;
pub use fencedlock_protocol::key::{check as check_key, KeyProblem};
pub use fencedlock_protocol::limits::{MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN};
pub use fencedlock_protocol::{LockStatus, PermitStatus, ReplyError, SemaphoreStatus, StatusError};
pub use node::Node;
pub use primitives::election::{Election, Leader, Leadership, MIN_CAMPAIGN_WINDOW, MIN_POLL_INTERVAL};
pub use primitives::keepalive::{KeptLease, LeaseHandle};
pub use primitives::listing::{FoundKey, KeyScan, ScanLimits};
pub use primitives::locker::{Locker, Redlock};
pub use primitives::multi::Leases;
pub use primitives::periodic::{Due, LastRun, Periodic, Schedule};
pub use primitives::policy::Acquisition;
pub use quorum::{NodeVote, Phase, QuorumReport, Vote};
// `Error::Server` and `Vote::Failed` carry a `redis::RedisError`, whose kind and code tell
// server errors apart: callers match on the very `redis` version this crate was built with.
pub use primitives::read_write::ReadWriteLock;
pub use primitives::semaphore::Semaphore;
pub use primitives::session::{Session, SessionLease};
pub use redis;
pub use tls::Tls;
pub use token::{Token, TokenFormat, TOKEN_BYTES};
// What a kept-alive lease, a leadership and `with_lease`'s work select on: named here so that
// callers need no `tokio-util` dependency of their own to hold or pass one.
pub use tokio_util::sync::CancellationToken;
