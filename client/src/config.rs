//! Lease options and their builder. Validation happens once, in [`LockConfigBuilder::build`],
//! so the lock code can rely on sane values.

use std::time::Duration;

use fencedlock_protocol::limits::MAX_MAX_TTL_MS;

use crate::backend::EngineChoice;
use crate::backoff::Backoff;
use crate::error::Error;
use crate::tls::Tls;
use crate::token::{Token, TokenFormat};
use crate::validity;

/// The longest ttl a [`LockConfig`] accepts: the most any server can be configured to allow
/// (the upper bound of `fencedlock.max-ttl-ms`, about 139 years). The limit that applies is
/// each server's own `fencedlock.max-ttl-ms` (one day by default): a longer ttl is refused by
/// the server with [`ReplyError::TtlTooLarge`](crate::ReplyError::TtlTooLarge), which names
/// the setting, and changes nothing.
pub const MAX_TTL: Duration = Duration::from_millis(MAX_MAX_TTL_MS);

/// The per-node timeout of a new [`Node`](crate::Node), of a default [`LockConfig`] and of
/// the CLI (`--timeout`): one default for every client of this crate. It bounds each request,
/// connecting included: a healthy server answers in well under a millisecond on a LAN and a
/// TLS connect takes a few, so 250 ms leaves a wide margin, while a stopped or paused server
/// costs a Redlock round, a renewal or a cron run at most this long before the failure policy
/// decides (a renewal that fails early leaves the holder more of its lease to stop in). A
/// [`Locker`](crate::Locker) or [`Redlock`](crate::Redlock) applies its configured timeout to
/// its nodes; raise it for servers far away.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Default of [`LockConfigBuilder::max_blocking`]: waiting acquisitions per server, each on a
/// connection of its own. Enough that a busy process's waiters queue on the server (where
/// order and handoff are exact) while bounding the connections one locker opens.
pub const DEFAULT_MAX_BLOCKING: usize = 16;

/// Validated lease options shared by [`Locker`](crate::Locker) and [`Redlock`](crate::Redlock).
///
/// Build one with [`LockConfig::builder`]; [`LockConfig::default`] is a 10 s ttl, drift
/// `ttl * 0.01 + 2 ms`, a 250 ms per-node timeout, waiting on the server for at most 10 s
/// (up to [`DEFAULT_MAX_BLOCKING`] waiting requests per node; 20–400 ms jittered retries where
/// a server cannot wait), and keep-alive renewals every ttl / 3.
#[derive(Debug, Clone)]
pub struct LockConfig {
    ttl: Duration,
    drift_factor: f64,
    drift_constant: Duration,
    max_wait: Duration,
    backoff: Backoff,
    node_timeout: Duration,
    max_blocking: usize,
    renew_interval: Option<Duration>,
    token_format: TokenFormat,
    on_unavailable: OnUnavailable,
    confirm_replicas: usize,
    confirm_timeout: Duration,
    tls: Tls,
    engine: EngineChoice,
    label: Option<Vec<u8>>,
}

/// What [`Locker::acquire_with_policy`](crate::Locker::acquire_with_policy) does when the lock
/// service cannot answer (unreachable, timed out, no quorum, loading, out of memory, restart
/// grace; see [`Error::is_unavailable`]). Declared in advance, because the right answer depends
/// on the work, not on the outage: a lock-protected job that must never run twice fails closed;
/// one whose duplicate is harmless, or whose resource checks fences anyway, may fail open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnavailable {
    /// Return the error: the work does not run. Today's behaviour and the default.
    #[default]
    FailClosed,
    /// Hand the caller an explicit "unlocked" outcome (never a fake fence) and log a warning.
    FailOpen,
}

/// Default of [`LockConfigBuilder::confirm_timeout`].
pub const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(1);

impl LockConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> LockConfigBuilder {
        LockConfigBuilder { config: LockConfig::unchecked_default() }
    }

    fn unchecked_default() -> LockConfig {
        LockConfig {
            ttl: Duration::from_secs(10),
            drift_factor: 0.01,
            drift_constant: Duration::from_millis(2),
            max_wait: Duration::from_secs(10),
            backoff: Backoff::default(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            max_blocking: DEFAULT_MAX_BLOCKING,
            renew_interval: None,
            token_format: TokenFormat::Raw,
            on_unavailable: OnUnavailable::FailClosed,
            confirm_replicas: 0,
            confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
            tls: Tls::new(),
            engine: EngineChoice::Auto,
            label: None,
        }
    }

    /// The lease time asked of the servers.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lease time in whole milliseconds, as sent to the server.
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The clock-drift allowance subtracted from every validity: `ttl * factor + constant`.
    pub fn drift(&self) -> Duration {
        validity::drift(self.ttl, self.drift_factor, self.drift_constant)
    }

    /// How long [`acquire`](crate::Locker::acquire) waits (on the server, or retrying)
    /// before giving up.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Delays between acquisition attempts.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// Which engine the servers are asked to serve leases with.
    pub fn engine(&self) -> EngineChoice {
        self.engine
    }

    /// How long one node may take to answer one request (connecting included).
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// How many requests waiting on the server (`FENCEDLOCK.ACQUIRE … BLOCK`) one node may
    /// have in flight at once, each on a connection of its own; 0 turns waiting on the server
    /// off (acquisition polls with backoff).
    pub fn max_blocking(&self) -> usize {
        self.max_blocking
    }

    /// How often the keep-alive renews: the configured interval, or ttl / 3.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.ttl / 3)
    }

    /// How generated tokens are encoded.
    pub fn token_format(&self) -> TokenFormat {
        self.token_format
    }

    pub(crate) fn new_token(&self) -> Token {
        Token::generate(self.token_format)
    }

    /// The declared failure policy ([`LockConfigBuilder::on_unavailable`]).
    pub fn on_unavailable(&self) -> OnUnavailable {
        self.on_unavailable
    }

    /// Replicas that must confirm each grant before it is handed out; 0: no confirmation.
    pub fn confirm_replicas(&self) -> usize {
        self.confirm_replicas
    }

    /// How long a grant waits for its replica confirmations.
    pub fn confirm_timeout(&self) -> Duration {
        self.confirm_timeout
    }

    /// TLS settings for the `rediss://` servers opened by URL with this configuration.
    pub fn tls(&self) -> &Tls {
        &self.tls
    }

    /// The public label every lease of a locker with this configuration carries, if any.
    pub fn label(&self) -> Option<&[u8]> {
        self.label.as_deref()
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.ttl < Duration::from_millis(1) {
            return bad(format!("ttl must be at least 1 ms, got {:?}", self.ttl));
        }
        if self.ttl > MAX_TTL {
            return bad(format!("ttl must be at most {MAX_TTL:?}, got {:?}", self.ttl));
        }
        if self.ttl.subsec_nanos() % 1_000_000 != 0 {
            return bad(format!("ttl must be whole milliseconds, got {:?}", self.ttl));
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return bad(format!("drift factor must be in [0, 1), got {}", self.drift_factor));
        }
        if self.drift() >= self.ttl {
            return bad(format!("drift {:?} leaves no validity in a {:?} ttl", self.drift(), self.ttl));
        }
        if self.node_timeout.is_zero() {
            return bad("node timeout must be positive".into());
        }
        if self.backoff.min.is_zero() || self.backoff.min > self.backoff.max {
            return bad(format!(
                "backoff needs 0 < min <= max, got {:?}..{:?}",
                self.backoff.min, self.backoff.max
            ));
        }
        if let Some(every) = self.renew_interval {
            if every.is_zero() || every >= self.ttl - self.drift() {
                return bad(format!(
                    "renew interval {every:?} must be positive and shorter than ttl minus drift ({:?})",
                    self.ttl - self.drift()
                ));
            }
        }
        if let Some(label) = &self.label {
            Error::check_label(label)?;
        }
        if self.confirm_replicas > 0 {
            if self.confirm_timeout.is_zero() {
                return bad("confirm timeout must be positive (WAIT's 0 would wait forever)".into());
            }
            // The confirmation's wait is charged against the lease like the round's own time.
            if self.confirm_timeout >= self.ttl - self.drift() {
                return bad(format!(
                    "confirm timeout {:?} must be shorter than ttl minus drift ({:?})",
                    self.confirm_timeout,
                    self.ttl - self.drift()
                ));
            }
            // WAIT blocks its connection, so it runs on one of the node's waiting connections.
            if self.max_blocking == 0 {
                return bad("confirm_replicas needs max_blocking of at least 1: each confirmation \
                     waits on a connection of its own"
                    .into());
            }
        }
        Ok(())
    }
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig::unchecked_default()
    }
}

/// Builder for [`LockConfig`]; every setter has a sensible default.
#[derive(Debug, Clone)]
pub struct LockConfigBuilder {
    config: LockConfig,
}

impl LockConfigBuilder {
    /// Lease time asked of the servers (whole milliseconds, 1 ms to [`MAX_TTL`]). Default 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Clock-drift factor: the fraction of the ttl by which the servers' clocks may run
    /// faster than ours. Default 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// Constant drift allowance added to the proportional part. Default 2 ms.
    pub fn drift_constant(mut self, constant: Duration) -> Self {
        self.config.drift_constant = constant;
        self
    }

    /// How long `acquire` waits for a busy lock, on the server or retrying. `Duration::ZERO`
    /// means one attempt (no waiting). There is no "forever": the server's `BLOCK 0` is never
    /// sent. Default 10 s.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.config.max_wait = max_wait;
        self
    }

    /// Jittered delay between attempts where the server cannot wait (or after a failed
    /// Redlock round): retry `n` waits a random time in `[min, min(max, min * 2^n)]`.
    /// Default 20 ms to 400 ms.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.config.backoff = Backoff { min, max };
        self
    }

    /// Per-node request timeout, connecting included. Keep it well below the ttl: a Redlock
    /// round whose outcome is still open waits for the slowest node up to this long (a round
    /// that a majority already decided does not). Default 250 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = timeout;
        self
    }

    /// How many acquisitions may wait on one server at once (`FENCEDLOCK.ACQUIRE … BLOCK`),
    /// each on a connection of its own: a waiting request holds its connection until the
    /// lock is handed over, so it must not share the connection that carries renewals. More
    /// waiters than this wait in the client, in arrival order, for a free connection (within
    /// the same maximum wait). `0` turns waiting on the server off: `acquire` then polls with
    /// the backoff, as against servers whose module cannot wait. Default
    /// [`DEFAULT_MAX_BLOCKING`].
    pub fn max_blocking(mut self, limit: usize) -> Self {
        self.config.max_blocking = limit;
        self
    }

    /// Keep-alive renewal period. Default ttl / 3.
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.config.renew_interval = Some(every);
        self
    }

    /// Encoding of generated tokens. Default [`TokenFormat::Raw`].
    pub fn token_format(mut self, format: TokenFormat) -> Self {
        self.config.token_format = format;
        self
    }

    /// What to do when the lock service cannot answer. Default [`OnUnavailable::FailClosed`].
    pub fn on_unavailable(mut self, policy: OnUnavailable) -> Self {
        self.config.on_unavailable = policy;
        self
    }

    /// Which engine serves the leases: [`EngineChoice::Auto`] (the default) uses the module
    /// where a server has it and the Functions library elsewhere, loading the library when it
    /// is missing or older; [`EngineChoice::Only`] insists on one (a server without the module
    /// then fails, or the module is never used).
    pub fn engine(mut self, choice: EngineChoice) -> Self {
        self.config.engine = choice;
        self
    }

    /// Confirm each grant on this many replicas (`WAIT`) before handing the lease out, so a
    /// failover to a confirming replica keeps it. A grant not confirmed within
    /// [`confirm_timeout`](Self::confirm_timeout) is released and reported as
    /// [`Error::NotConfirmed`]. Renewals are not confirmed. For a single server only (not a
    /// Redis Cluster, not Redlock: [`Error::Config`] when the locker is built); each
    /// confirmation runs on one of the node's [`max_blocking`](Self::max_blocking)
    /// connections, so that must be at least 1. Default 0 (no confirmation).
    pub fn confirm_replicas(mut self, replicas: usize) -> Self {
        self.config.confirm_replicas = replicas;
        self
    }

    /// How long a grant waits for its replica confirmations (`WAIT`'s timeout, rounded up to
    /// whole milliseconds); shorter than the ttl minus drift, since the wait is charged against
    /// the lease. Default [`DEFAULT_CONFIRM_TIMEOUT`].
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.config.confirm_timeout = timeout;
        self
    }

    /// TLS settings (a private certificate authority, a client certificate) for the
    /// `rediss://` servers that [`Locker::open`](crate::Locker::open),
    /// [`Locker::open_cluster`](crate::Locker::open_cluster) and
    /// [`Redlock::open`](crate::Redlock::open) connect to. A plaintext `redis://` URL with
    /// settings here is refused. Default: the system's authorities, no client certificate.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.config.tls = tls;
        self
    }

    /// A public label for every lease taken with this configuration (`ACQUIRE … LABEL`):
    /// `STATUS` shows it next to the fence to anyone who may read the key, so operators see
    /// who holds a lock (a host name and process id, a job's run id). 1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes ([`Error::Config`] from
    /// [`build`](Self::build) otherwise); never put a secret in it. A
    /// [`Semaphore`](crate::Semaphore) uses it unless given its own; an
    /// [`Election`](crate::Election)'s candidates campaign with their own. Default: none.
    pub fn label(mut self, label: impl Into<Vec<u8>>) -> Self {
        self.config.label = Some(label.into());
        self
    }

    /// Checks the options; [`Error::Config`] names the first one that makes no sense.
    pub fn build(self) -> Result<LockConfig, Error> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn err(b: LockConfigBuilder) -> String {
        match b.build() {
            Err(Error::Config(msg)) => msg,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        let c = LockConfig::builder().build().unwrap();
        assert_eq!(c.ttl(), Duration::from_secs(10));
        assert_eq!(c.drift(), 102 * MS);
        assert_eq!(c.renew_interval(), Duration::from_secs(10) / 3);
        assert_eq!(c.ttl_ms(), 10_000);
        assert_eq!(c.max_blocking(), DEFAULT_MAX_BLOCKING);
        assert_eq!(LockConfig::builder().max_blocking(0).build().unwrap().max_blocking(), 0);
        assert!(LockConfig::default().validate().is_ok());
    }

    #[test]
    fn bad_ttls_are_refused() {
        assert!(err(LockConfig::builder().ttl(Duration::ZERO)).contains("ttl"));
        assert!(err(LockConfig::builder().ttl(Duration::from_micros(1500))).contains("whole"));
        assert!(err(LockConfig::builder().ttl(MAX_TTL + MS)).contains("at most"));
        // No cap at the servers' default day: the limit that applies is each server's.
        assert!(LockConfig::builder().ttl(Duration::from_secs(2 * 86_400)).build().is_ok());
        assert!(LockConfig::builder().ttl(MAX_TTL).build().is_ok());
        // 2 ms of constant drift leaves nothing in a 2 ms lease.
        assert!(err(LockConfig::builder().ttl(2 * MS)).contains("drift"));
        assert!(LockConfig::builder().ttl(2 * MS).drift_constant(Duration::ZERO).build().is_ok());
    }

    #[test]
    fn bad_drift_is_refused() {
        assert!(err(LockConfig::builder().drift_factor(-0.1)).contains("drift"));
        assert!(err(LockConfig::builder().drift_factor(1.0)).contains("drift"));
        assert!(err(LockConfig::builder().drift_factor(f64::NAN)).contains("drift"));
        assert!(err(LockConfig::builder().drift_constant(Duration::from_secs(11))).contains("drift"));
    }

    #[test]
    fn bad_timeouts_and_backoff_are_refused() {
        assert!(err(LockConfig::builder().node_timeout(Duration::ZERO)).contains("timeout"));
        assert!(err(LockConfig::builder().backoff(Duration::ZERO, MS)).contains("backoff"));
        assert!(err(LockConfig::builder().backoff(10 * MS, MS)).contains("backoff"));
        assert!(err(LockConfig::builder().renew_interval(Duration::ZERO)).contains("renew"));
        assert!(err(LockConfig::builder().renew_interval(Duration::from_secs(10))).contains("renew"));
        assert!(LockConfig::builder().max_wait(Duration::ZERO).build().is_ok());
    }

    #[test]
    fn confirmation_needs_a_usable_timeout_and_a_waiting_connection() {
        let confirm = || LockConfig::builder().confirm_replicas(1);
        assert!(err(confirm().confirm_timeout(Duration::ZERO)).contains("confirm timeout"));
        assert!(err(confirm().confirm_timeout(Duration::from_secs(10))).contains("shorter than ttl"));
        assert!(err(confirm().max_blocking(0)).contains("max_blocking"));
        let ok = confirm().confirm_timeout(500 * MS).build().unwrap();
        assert_eq!((ok.confirm_replicas(), ok.confirm_timeout()), (1, 500 * MS));
        assert_eq!(LockConfig::default().confirm_timeout(), DEFAULT_CONFIRM_TIMEOUT);
        // Without confirmation the confirm options are not checked.
        assert!(LockConfig::builder().max_blocking(0).confirm_timeout(Duration::ZERO).build().is_ok());
    }

    #[test]
    fn a_label_follows_the_protocol_limits() {
        assert_eq!(LockConfig::default().label(), None);
        let labelled = LockConfig::builder().label("host-a:4711").build().unwrap();
        assert_eq!(labelled.label(), Some(&b"host-a:4711"[..]));
        assert!(err(LockConfig::builder().label("")).contains("label"));
        let longest = vec![b'x'; crate::MAX_LABEL_LEN];
        assert!(LockConfig::builder().label(longest.clone()).build().is_ok());
        assert!(err(LockConfig::builder().label([longest, vec![b'y']].concat())).contains("label"));
    }
}
