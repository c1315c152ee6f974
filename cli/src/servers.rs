//! The lock servers given on the command line, as one [`Redlock`]: several URLs are fenced
//! Redlock over independent masters, one URL is the same engine with N = 1 (quorum 1, no raise
//! step, the server's own errors), which is exactly what a single-server `Locker` runs. One
//! type for both keeps every subcommand free of "one server or several" branches.

use std::time::Duration;

use fencedlock::{
    Engine, Error, Lease, LockConfig, Node, ReadWriteLock, Redlock, Semaphore, SemaphoreStatus, Tls,
    TokenFormat,
};
use fencedlock_protocol::limits::DEFAULT_MAX_TTL_MS;
use futures::future::join_all;

use crate::args::{ConfirmArgs, ServerArgs, TlsArgs};
use crate::diagnose;
use crate::duration;
use crate::error::CliError;
use crate::urls::{split, SCHEMES};

/// How long fencedlock waits, before it exits, for releases still finishing in the background
/// ([`Locker::settle`](fencedlock::Locker::settle)): long enough for servers that answer, which then do not keep the lease
/// until its ttl; short, because a silent server must not delay the exit by a node timeout.
const SETTLE_GRACE: Duration = Duration::from_millis(100);

/// Lets the background releases of `lock` finish, for at most [`SETTLE_GRACE`].
pub async fn settle(lock: &Redlock) {
    let _ = tokio::time::timeout(SETTLE_GRACE, lock.settle()).await;
}

/// Options for a lease taken from the command line.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Lease time.
    pub ttl: Duration,
    /// How long `acquire` may keep retrying.
    pub wait: Duration,
    /// Per-server request timeout.
    pub timeout: Duration,
    /// The public label of every lease taken (`--label`), if any.
    pub label: Option<String>,
}

/// One server's answer to `FENCEDLOCK.STATUS`.
#[derive(Debug)]
pub struct NodeStatus {
    /// The server's address.
    pub server: String,
    /// Its answer, a lock key as one permit: `None` for a key without lock state.
    pub status: Result<Option<SemaphoreStatus>, Error>,
    /// The engine it answered with (`None` if it could not be found out).
    pub engine: Option<Engine>,
}

/// Checks the URLs (`--redis`) and builds the lock over them, with `--tls-*` for rediss://
/// servers. Nothing connects yet.
pub fn open(global: &ServerArgs, options: LeaseOptions) -> Result<Redlock, CliError> {
    open_confirmed(global, options, None)
}

/// [`open`], with each grant confirmed on replicas first when `confirm` asks for any
/// (`--confirm-replicas`).
pub fn open_confirmed(
    global: &ServerArgs,
    options: LeaseOptions,
    confirm: Option<&ConfirmArgs>,
) -> Result<Redlock, CliError> {
    let urls: Vec<&str> = global.redis.iter().flat_map(|value| split(value)).collect();
    if urls.is_empty() {
        return Err(CliError::Usage(
            "no server given: pass --redis redis://HOST:PORT or set FENCEDLOCK_REDIS".into(),
        ));
    }
    let tls = tls(&global.tls)?;
    let nodes = match global.cluster {
        // One node that routes every key to its slot's primary; the URLs are its seeds.
        true => vec![cluster(&urls, &tls)?],
        false => urls.iter().map(|url| node(url, &tls)).collect::<Result<Vec<_>, _>>()?,
    };
    let mut builder = LockConfig::builder()
        .ttl(options.ttl)
        .max_wait(options.wait)
        .node_timeout(options.timeout)
        .engine(global.engine.choice())
        .token_format(TokenFormat::Hex);
    if let Some(label) = &options.label {
        builder = builder.label(label.as_bytes());
    }
    if let Some(confirm) = confirm.filter(|c| c.confirm_replicas > 0) {
        if confirm.confirm_timeout.is_zero() {
            return Err(CliError::Usage(
                "--confirm-timeout must be positive with --confirm-replicas (e.g. --confirm-timeout 1s)"
                    .into(),
            ));
        }
        builder = builder.confirm_replicas(confirm.confirm_replicas).confirm_timeout(confirm.confirm_timeout);
    }
    let config = builder.build().map_err(|e| match e {
        // The other options were checked as they were parsed: what is left is the ttl's
        // relation to the drift allowance.
        Error::Config(msg) if msg.starts_with("ttl") || msg.starts_with("drift") => CliError::Usage(format!(
            "{msg}; use e.g. --ttl 30s (each server allows up to its fencedlock.max-ttl-ms, {} by default)",
            duration::format(Duration::from_millis(DEFAULT_MAX_TTL_MS))
        )),
        Error::Config(msg) => CliError::Usage(msg),
        other => CliError::Internal(other.to_string()),
    })?;
    // The topology's own refusals (a server twice, replica confirmation over several).
    Redlock::new(nodes, config).map_err(|e| CliError::Usage(e.to_string()))
}

/// What a lease on the key is: the ordinary lock, one of a semaphore's permits (`--permits N`
/// above 1), or a read lease of a read-write lock (`run --shared`).
pub enum Holding {
    Lock,
    Permit(Semaphore),
    Read(ReadWriteLock),
}

impl Holding {
    /// One attempt at the lease on `key` of `lock`, or (`wait`) up to the configured wait.
    pub async fn take(&self, lock: &Redlock, key: &str, wait: bool) -> Result<Lease, Error> {
        match (self, wait) {
            (Holding::Lock, false) => lock.try_acquire(key).await,
            (Holding::Lock, true) => lock.acquire(key).await,
            (Holding::Permit(semaphore), false) => semaphore.try_acquire().await,
            (Holding::Permit(semaphore), true) => semaphore.acquire().await,
            (Holding::Read(read_write), false) => read_write.try_read().await,
            (Holding::Read(read_write), true) => read_write.read().await,
        }
    }
}

/// The [`Holding`] `--permits` and `--shared` ask for, on `lock`'s single server (sharing its
/// connection). Several servers are a usage error for both: each server would grant its own
/// permits (and a majority of them suffices), and fenced Redlock cannot lift the fences of a
/// key several readers hold.
pub fn holding(lock: &Redlock, key: &str, permits: u32, shared: bool) -> Result<Holding, CliError> {
    if shared && permits != 1 {
        return Err(CliError::Usage(
            "--shared and --permits exclude each other: a key is read-shared, or a semaphore of N permits"
                .into(),
        ));
    }
    if permits == 1 && !shared {
        return Ok(Holding::Lock);
    }
    let Some(locker) = lock.as_locker() else {
        let servers = lock.nodes().len();
        if shared {
            return Err(CliError::Usage(format!(
                "--shared needs a single --redis server (or one Redis Cluster): read leases are kept on one server, not across {servers} independent ones"
            )));
        }
        let quorum = lock.quorum();
        let holders = servers * permits as usize / quorum;
        // The overrun is real only where the majority is small against the servers (3 and
        // up); with 2 servers the refusal is the design's, not a count that would go wrong.
        let why = if holders > permits as usize {
            format!(
                "each of the {servers} independent servers would grant its own {permits} permits and a majority of {quorum} suffices, so up to {holders} holders could run at once"
            )
        } else {
            format!("a semaphore is kept on one server, not across {servers} independent ones")
        };
        return Err(CliError::Usage(format!("--permits {permits} needs a single --redis server: {why}")));
    };
    if shared {
        return Ok(Holding::Read(ReadWriteLock::new(locker, key)));
    }
    Semaphore::new(locker, key, permits).map(Holding::Permit).map_err(|e| CliError::Usage(e.to_string()))
}

/// One attempt; if it failed in a way that may pass and the options allow waiting, `on_wait`
/// hears why before [`Locker::acquire`](fencedlock::Locker::acquire) waits up to the configured wait: in the server's
/// queue (for several servers, the key's designated one), or with backoff where the module
/// cannot wait. The pause is where `run` and the demo tell the operator that they wait, which
/// a plain `acquire` gives them no chance to do. The lease is what `holding` says (a
/// semaphore's permit, a read lease), taken the same way.
pub async fn acquire(
    lock: &Redlock,
    key: &str,
    holding: &Holding,
    on_wait: impl FnOnce(&Error),
) -> Result<Lease, Error> {
    let started = tokio::time::Instant::now();
    let first = holding.take(lock, key, false).await;
    match first {
        // A cluster node answering for a key it does not own will answer so again.
        Err(err)
            if err.is_retryable() && !diagnose::is_misrouted(&err) && !lock.config().max_wait().is_zero() =>
        {
            on_wait(&err);
            // The first attempt counts against `--wait` (with silent servers it can take a
            // node timeout); dropping `acquire` at the limit leaves nothing held or queued.
            let limit = started + lock.config().max_wait();
            tokio::time::timeout_at(limit, holding.take(lock, key, true)).await.unwrap_or(Err(err))
        }
        other => other,
    }
}

/// "127.0.0.1:6379" or "fenced Redlock over 3 servers (quorum 2)", for messages.
pub fn describe(lock: &Redlock) -> String {
    match lock.nodes() {
        [only] => only.name().to_owned(),
        nodes => format!("fenced Redlock over {} servers (quorum {})", nodes.len(), lock.quorum()),
    }
}

/// `FENCEDLOCK.STATUS` on every server, in parallel.
pub async fn status(lock: &Redlock, key: &str) -> Vec<NodeStatus> {
    let nodes = lock.nodes();
    let answers = join_all(nodes.iter().map(|n| n.semaphore_status(key))).await;
    nodes
        .iter()
        .zip(answers)
        .map(|(node, status)| NodeStatus { server: node.name().to_owned(), status, engine: node.engine() })
        .collect()
}

/// The `--tls-*` files, read.
fn tls(args: &TlsArgs) -> Result<Tls, CliError> {
    let client = args.tls_cert.as_deref().zip(args.tls_key.as_deref());
    Tls::from_files(args.tls_cacert.as_deref(), client).map_err(|e| match e {
        Error::Config(msg) => CliError::Usage(msg),
        other => CliError::Internal(other.to_string()),
    })
}

/// A Redis Cluster reached through `seeds` (`--cluster`).
fn cluster(seeds: &[&str], tls: &Tls) -> Result<Node, CliError> {
    if let Some(url) = seeds.iter().find(|url| !url.starts_with("redis://") && !url.starts_with("rediss://"))
    {
        return Err(CliError::Usage(format!(
            "bad cluster node URL {url:?}: --cluster takes redis://HOST:PORT or rediss://HOST:PORT of any cluster node"
        )));
    }
    Node::cluster_with_tls(seeds, tls).map_err(|e| CliError::Usage(e.to_string()))
}

fn node(url: &str, tls: &Tls) -> Result<Node, CliError> {
    if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(CliError::Usage(format!(
            "bad server URL {url:?}: use redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT/DB)"
        )));
    }
    Node::with_tls(url, tls).map_err(|e| {
        let detail = match e {
            Error::Config(msg) => msg,
            other => other.to_string(),
        };
        CliError::Usage(format!("{detail}; use redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT/DB)"))
    })
}
