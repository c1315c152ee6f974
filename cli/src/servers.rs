//! The lock servers given on the command line: one URL is a single-server [`Locker`], several
//! are a fenced [`Redlock`]. Everything else in the CLI goes through this one type.

use std::time::{Duration, Instant};

use fencedlock::{
    Error, Lease, LockConfig, LockStatus, Locker, Node, NodeVote, Phase, QuorumReport, Redlock,
    Token, TokenFormat, Vote,
};
use futures::future::join_all;

use crate::error::CliError;

/// The servers given on the command line and the locking mode they imply.
#[derive(Debug, Clone)]
pub struct Servers {
    mode: Mode,
    /// The URLs, in order (for requests the client crate has no API for).
    urls: Vec<String>,
}

/// One server or several.
#[derive(Debug, Clone)]
enum Mode {
    /// One server: its fence is the lease's fence.
    Single(Locker),
    /// Several independent masters: majority grants, fence raised across the quorum.
    Quorum(Redlock),
}

/// Options for a lease taken from the command line.
#[derive(Debug, Clone, Copy)]
pub struct LeaseOptions {
    /// Lease time.
    pub ttl: Duration,
    /// How long `acquire` may keep retrying.
    pub wait: Duration,
    /// Per-server request timeout.
    pub timeout: Duration,
}

/// One server's answer to `FENCEDLOCK.STATUS`.
#[derive(Debug)]
pub struct NodeStatus {
    /// The server's address.
    pub server: String,
    /// Its answer: `None` for a key without lock state.
    pub status: Result<Option<LockStatus>, Error>,
}

impl Servers {
    /// Checks the URLs and builds the locker. Nothing connects yet.
    pub fn open(urls: &[String], options: LeaseOptions) -> Result<Servers, CliError> {
        let urls: Vec<&str> = urls
            .iter()
            .map(|u| u.trim())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(CliError::Usage(
                "no server given: pass --redis redis://HOST:PORT or set FENCEDLOCK_REDIS".into(),
            ));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        for url in &urls {
            nodes.push(node(url)?);
        }
        for (i, node) in nodes.iter().enumerate() {
            if nodes[..i].iter().any(|n| n.name() == node.name()) {
                return Err(CliError::Usage(format!(
                    "server {} is given twice; Redlock needs independent servers, each once",
                    node.name()
                )));
            }
        }
        let config = LockConfig::builder()
            .ttl(options.ttl)
            .max_wait(options.wait)
            .node_timeout(options.timeout)
            .token_format(TokenFormat::Hex)
            .build()
            .map_err(|e| match e {
                Error::Config(msg) => CliError::Usage(format!(
                    "{msg}; use e.g. --ttl 30s (the server's limit is 1 day)"
                )),
                other => CliError::Internal(other.to_string()),
            })?;
        let mode = if nodes.len() == 1 {
            let node = nodes
                .pop()
                .ok_or_else(|| CliError::Internal("no node".into()))?;
            Mode::Single(Locker::new(node, config))
        } else {
            Redlock::new(nodes, config)
                .map(Mode::Quorum)
                .map_err(|e| CliError::Usage(e.to_string()))?
        };
        Ok(Servers {
            mode,
            urls: urls.iter().map(|u| u.to_string()).collect(),
        })
    }

    /// One attempt.
    pub async fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        match &self.mode {
            Mode::Single(l) => l.try_acquire(key).await,
            Mode::Quorum(r) => r.try_acquire(key).await,
        }
    }

    /// Attempts with backoff up to the configured wait.
    pub async fn acquire(&self, key: &str) -> Result<Lease, Error> {
        match &self.mode {
            Mode::Single(l) => l.acquire(key).await,
            Mode::Quorum(r) => r.acquire(key).await,
        }
    }

    /// Releases a lease known only by its token. `Ok(true)` if it was still held.
    pub async fn release_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        match &self.mode {
            Mode::Single(l) => l.release_token(key, token).await,
            Mode::Quorum(r) => r.release_token(key, token).await,
        }
    }

    /// Renews a lease known only by its token (the client crate renews only the `Lease`
    /// objects it handed out, so this sends `FENCEDLOCK.RENEW` itself). `Ok(true)` if a
    /// majority (the server) still held it and it now runs a full ttl from now, `Ok(false)`
    /// if a majority refused.
    pub async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        let config = self.config();
        let ttl_ms = config.ttl_ms();
        let timeout = config.node_timeout();
        let started = Instant::now();
        let votes = join_all(
            self.urls
                .iter()
                .map(|url| renew_one(url, key, token, ttl_ms, timeout)),
        )
        .await;
        let nodes = self.nodes();
        let report = QuorumReport {
            key: key.to_owned(),
            phase: Phase::Renew,
            quorum: self.quorum(),
            votes: nodes
                .iter()
                .zip(votes)
                .map(|(node, vote)| NodeVote {
                    node: node.name().to_owned(),
                    vote,
                    raise: None,
                })
                .collect(),
            elapsed: started.elapsed(),
            validity: config.ttl().checked_sub(started.elapsed() + config.drift()),
        };
        if report.reached() {
            return Ok(true);
        }
        if report.majority_refused() {
            return Ok(false);
        }
        if let [only] = report.votes.as_slice() {
            match &only.vote {
                Vote::TimedOut => {
                    return Err(Error::Timeout {
                        node: only.node.clone(),
                        operation: "RENEW",
                        after: timeout,
                    })
                }
                Vote::Failed { error } => {
                    return Err(Error::Server {
                        node: only.node.clone(),
                        source: error.clone(),
                    })
                }
                _ => {}
            }
        }
        Err(Error::QuorumNotReached(Box::new(report)))
    }

    /// The servers.
    pub fn nodes(&self) -> Vec<&Node> {
        match &self.mode {
            Mode::Single(l) => vec![l.node()],
            Mode::Quorum(r) => r.nodes().iter().collect(),
        }
    }

    /// Votes needed: 1 for a single server, N/2+1 for Redlock.
    pub fn quorum(&self) -> usize {
        match &self.mode {
            Mode::Single(_) => 1,
            Mode::Quorum(r) => r.quorum(),
        }
    }

    /// The lease options in force.
    pub fn config(&self) -> &LockConfig {
        match &self.mode {
            Mode::Single(l) => l.config(),
            Mode::Quorum(r) => r.config(),
        }
    }

    /// "127.0.0.1:6379" or "fenced Redlock over 3 servers (quorum 2)", for messages.
    pub fn describe(&self) -> String {
        match &self.mode {
            Mode::Single(l) => l.node().name().to_owned(),
            Mode::Quorum(r) => format!(
                "fenced Redlock over {} servers (quorum {})",
                r.nodes().len(),
                r.quorum()
            ),
        }
    }

    /// `FENCEDLOCK.STATUS` on every server, in parallel.
    pub async fn status(&self, key: &str) -> Vec<NodeStatus> {
        let nodes = self.nodes();
        let answers = join_all(nodes.iter().map(|n| n.status(key))).await;
        nodes
            .iter()
            .zip(answers)
            .map(|(node, status)| NodeStatus {
                server: node.name().to_owned(),
                status,
            })
            .collect()
    }
}

/// `FENCEDLOCK.RENEW` on one server over a fresh connection, bounded by `timeout`.
async fn renew_one(url: &str, key: &str, token: &Token, ttl_ms: u64, timeout: Duration) -> Vote {
    let request = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("FENCEDLOCK.RENEW")
            .arg(key)
            .arg(token.as_bytes())
            .arg(ttl_ms)
            .query_async::<i64>(&mut conn)
            .await
    };
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(1)) => Vote::Confirmed,
        Ok(Ok(_)) => Vote::Refused,
        Ok(Err(error)) => Vote::Failed { error },
        Err(_) => Vote::TimedOut,
    }
}

fn node(url: &str) -> Result<Node, CliError> {
    let known = [
        "redis://",
        "rediss://",
        "unix://",
        "redis+unix://",
        "valkey+unix://",
        "valkey://",
        "valkeys://",
    ];
    if !known.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(CliError::Usage(format!(
            "bad server URL {url:?}: use redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT/DB)"
        )));
    }
    Node::new(url).map_err(|e| {
        let detail = match e {
            Error::Config(msg) => msg,
            other => other.to_string(),
        };
        CliError::Usage(format!(
            "{detail}; use redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT/DB)"
        ))
    })
}
