//! The lock servers given on the command line: one URL is a single-server [`Locker`], several
//! are a fenced [`Redlock`]. Everything else in the CLI goes through this one type.

use std::time::Duration;

use fencedlock::{Error, Lease, LockConfig, LockStatus, Locker, Node, Redlock, Token, TokenFormat};
use futures::future::join_all;

use crate::error::CliError;

/// The servers given on the command line and the locking mode they imply.
#[derive(Debug, Clone)]
pub struct Servers {
    mode: Mode,
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
        let urls: Vec<&str> = urls.iter().map(|u| u.trim()).filter(|u| !u.is_empty()).collect();
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
                Error::Config(msg) => {
                    CliError::Usage(format!("{msg}; use e.g. --ttl 30s (the server's limit is 1 day)"))
                }
                other => CliError::Internal(other.to_string()),
            })?;
        let mode = if nodes.len() == 1 {
            let node = nodes.pop().ok_or_else(|| CliError::Internal("no node".into()))?;
            Mode::Single(Locker::new(node, config))
        } else {
            Redlock::new(nodes, config).map(Mode::Quorum).map_err(|e| CliError::Usage(e.to_string()))?
        };
        Ok(Servers { mode })
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

    /// Renews a lease known only by its token. `Ok(true)` if a majority (the server) still
    /// held it and it now runs a full ttl from now, `Ok(false)` if a majority no longer holds
    /// it; an error when that is unknown (no answer, no module, round slower than the ttl).
    pub async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        match &self.mode {
            Mode::Single(l) => l.renew_token(key, token).await,
            Mode::Quorum(r) => r.renew_token(key, token).await,
        }
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
            Mode::Quorum(r) => {
                format!("fenced Redlock over {} servers (quorum {})", r.nodes().len(), r.quorum())
            }
        }
    }

    /// `FENCEDLOCK.STATUS` on every server, in parallel.
    pub async fn status(&self, key: &str) -> Vec<NodeStatus> {
        let nodes = self.nodes();
        let answers = join_all(nodes.iter().map(|n| n.status(key))).await;
        nodes
            .iter()
            .zip(answers)
            .map(|(node, status)| NodeStatus { server: node.name().to_owned(), status })
            .collect()
    }
}

fn node(url: &str) -> Result<Node, CliError> {
    let known =
        ["redis://", "rediss://", "unix://", "redis+unix://", "valkey+unix://", "valkey://", "valkeys://"];
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
        CliError::Usage(format!("{detail}; use redis://HOST:PORT (or redis://:PASSWORD@HOST:PORT/DB)"))
    })
}
