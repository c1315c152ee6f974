//! A node's connections: the shared one (a reconnecting manager to a fixed or a
//! Sentinel-named server, or a cluster connection), opened once and cached, and the
//! dedicated ones that carry a waiting request each. Both send a Script engine request once
//! more after loading the script into a server whose cache lacks it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;

#[cfg(feature = "cluster")]
use super::cluster::ClusterTarget;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisError};
use tokio::sync::Mutex;

use super::send::{reloading, Packed};
#[cfg(feature = "sentinel")]
use super::sentinel::Primary;
use super::timeout::bounded;
use super::Node;
use crate::cause;

/// How a node reaches its server: one shared, cached connection to a standalone server (fixed
/// or Sentinel-named), or a cluster connection that routes each command by its key.
pub(super) enum Transport {
    Standalone {
        target: Target,
        slot: Arc<Mutex<Cached<ConnectionManager>>>,
    },
    #[cfg(feature = "cluster")]
    Cluster {
        target: Box<ClusterTarget>,
        slot: Arc<Mutex<Cached<ClusterConnection>>>,
    },
}

impl Transport {
    /// The cached connection of a standalone server (a cluster connection follows its
    /// primaries by itself).
    fn standalone_slot(&self) -> Option<&Arc<Mutex<Cached<ConnectionManager>>>> {
        match self {
            Transport::Standalone { slot, .. } => Some(slot),
            #[cfg(feature = "cluster")]
            Transport::Cluster { .. } => None,
        }
    }
}

/// Where a standalone node's connections go: a fixed address, or whichever server the
/// sentinels name as primary at the time of each connect.
#[derive(Clone)]
pub(super) enum Target {
    Fixed(Box<redis::Client>),
    #[cfg(feature = "sentinel")]
    Sentinel(Primary),
}

impl Target {
    /// A client for the server to connect to now.
    async fn client(&self) -> Result<redis::Client, RedisError> {
        match self {
            Target::Fixed(client) => Ok((**client).clone()),
            #[cfg(feature = "sentinel")]
            Target::Sentinel(primary) => primary.client().await,
        }
    }

    /// Whether the sentinels name the server, so one that stopped being the primary
    /// (`READONLY`) or stopped answering is worth leaving for the one they name now.
    pub(super) fn follows_sentinels(&self) -> bool {
        match self {
            Target::Fixed(_) => false,
            #[cfg(feature = "sentinel")]
            Target::Sentinel(_) => true,
        }
    }
}

/// The cached connection and a generation number, so a task that saw an old sentinel-named
/// primary fail does not throw away the connection to the new one another task just opened.
pub(super) struct Cached<C> {
    conn: Option<C>,
    generation: u64,
}

impl<C> Cached<C> {
    pub(super) fn new() -> Self {
        Cached { conn: None, generation: 0 }
    }
}

pub(super) enum Conn {
    Standalone(ConnectionManager, u64),
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
}

/// A connection that carries one waiting request at a time: closed (dropped) unless the
/// server answered, so a cancelled or timed-out waiter leaves the server's queue.
pub(crate) enum Dedicated {
    Standalone(MultiplexedConnection),
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
}

impl Node {
    /// A new connection for one waiting request: no response timeout of its own (the caller
    /// bounds the wait), the connect bounded by the per-node timeout.
    pub(super) async fn dedicated(&self) -> Result<Dedicated, RedisError> {
        match &self.transport {
            Transport::Standalone { target, .. } => {
                let conn = bounded(self.timeout, connect(target, self.timeout)).await?;
                Ok(Dedicated::Standalone(conn))
            }
            #[cfg(feature = "cluster")]
            Transport::Cluster { target, .. } => Ok(Dedicated::Cluster(target.connect(self.timeout).await?)),
        }
    }

    /// One command on the shared connection. A request that finds the cached connection
    /// broken (typically: the server restarted since the last request) is sent once more on a
    /// fresh one. Every command is safe to repeat for its token (ACQUIRE re-enters, RENEW and
    /// RAISE are idempotent); only a RELEASE whose first copy was processed before the
    /// connection broke answers 0 the second time.
    ///
    /// A Script engine request that finds the server's script cache without the script (a
    /// restart, a failover) loads it and is sent once more (see [`reloading`]).
    pub(super) async fn query_unbounded<T: FromRedisValue, P: Packed>(
        &self,
        cmd: &P,
    ) -> Result<T, RedisError> {
        let mut retried = false;
        loop {
            match self.connection().await? {
                Conn::Standalone(mut conn, generation) => {
                    let result = reloading(&mut conn, cmd).await;
                    if let Err(e) = &result {
                        // A demoted primary refused the command: the one the sentinels name
                        // now can take it at once.
                        let demoted = self.is_demoted(e);
                        // The manager reconnects to a fixed address by itself; a failed
                        // sentinel-named primary is worth asking the sentinels about again.
                        if demoted || (self.follows_primary() && cause::breaks_connection(e)) {
                            self.forget(generation).await;
                        }
                        // Not a reply that broke the protocol: that would break it again.
                        if !retried && (e.is_io_error() || e.is_connection_dropped() || demoted) {
                            retried = true;
                            tracing::debug!(node = %self.name, "connection broken; sending once more on a new one");
                            continue;
                        }
                    }
                    return result;
                }
                #[cfg(feature = "cluster")]
                Conn::Cluster(mut conn) => return reloading(&mut conn, cmd).await,
            }
        }
    }

    /// The cached connection, opening one if there is none. Concurrent callers wait for the
    /// same connect instead of each opening their own.
    ///
    /// The connect runs in a task of its own that stores the connection even if the request
    /// that started it is dropped: a Redlock round decided without this node drops its
    /// request, and a node slower to connect than the others to answer would otherwise never
    /// get a connection. The task holds the slot until it is done, bounded by the timeout.
    pub(super) async fn connection(&self) -> Result<Conn, RedisError> {
        let timeout = self.timeout;
        match &self.transport {
            Transport::Standalone { target, slot } => {
                let mut slot = Arc::clone(slot).lock_owned().await;
                if let Some(conn) = &slot.conn {
                    return Ok(Conn::Standalone(conn.clone(), slot.generation));
                }
                let target = target.clone();
                let connect = tokio::spawn(async move {
                    let conn = bounded(timeout, manage(&target, timeout)).await?;
                    slot.generation += 1;
                    slot.conn = Some(conn.clone());
                    Ok(Conn::Standalone(conn, slot.generation))
                });
                joined(connect.await)
            }
            #[cfg(feature = "cluster")]
            Transport::Cluster { target, slot } => {
                let mut slot = Arc::clone(slot).lock_owned().await;
                if let Some(conn) = &slot.conn {
                    return Ok(Conn::Cluster(conn.clone()));
                }
                let target = target.clone();
                let connect = tokio::spawn(async move {
                    let conn = target.connect(timeout).await?;
                    slot.conn = Some(conn.clone());
                    Ok(Conn::Cluster(conn))
                });
                joined(connect.await)
            }
        }
    }

    /// Drops the cached standalone connection, whichever it is, unless a connect is under
    /// way (that one is new).
    pub(super) fn drop_connection(&self) {
        if let Some(slot) = self.transport.standalone_slot() {
            if let Ok(mut slot) = slot.try_lock() {
                slot.conn = None;
            }
        }
    }

    /// Drops the connection to a primary that failed or was demoted, so the next request asks
    /// the sentinels again.
    async fn forget(&self, generation: u64) {
        if let Some(slot) = self.transport.standalone_slot() {
            let mut slot = slot.lock().await;
            if slot.generation == generation {
                slot.conn = None;
            }
        }
    }
}

/// A connection to `target` (the sentinels asked first, for a sentinel-monitored primary)
/// without a response timeout of its own: every caller bounds its requests.
async fn connect(target: &Target, timeout: Duration) -> Result<MultiplexedConnection, RedisError> {
    let config =
        AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(None);
    target.client().await?.get_multiplexed_async_connection_with_config(&config).await
}

/// The shared connection to `target`, connected before it is returned (a connection left
/// to connect lazily would make progress only while some request polls it, and a Redlock
/// round decided without this node drops its request). Its reconnects after an I/O error
/// start at once in the background, one attempt each (every request is bounded by the node
/// timeout, and the next request after a failed attempt starts another), and it has no
/// response timeout of its own: every caller bounds its requests.
async fn manage(target: &Target, timeout: Duration) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None)
        .set_number_of_retries(0);
    ConnectionManager::new_with_config(target.client().await?, config).await
}

/// The connect task's result; a task that panicked or was cancelled (runtime shutdown) is
/// an I/O error, so the connection is tried again next time.
fn joined(result: Result<Result<Conn, RedisError>, tokio::task::JoinError>) -> Result<Conn, RedisError> {
    result.unwrap_or_else(|e| Err(std::io::Error::other(format!("connect task ended: {e}")).into()))
}

impl Dedicated {
    /// `cmd` on this connection (see [`reloading`]).
    pub(super) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self {
            Dedicated::Standalone(conn) => reloading(conn, cmd).await,
            #[cfg(feature = "cluster")]
            Dedicated::Cluster(conn) => reloading(conn, cmd).await,
        }
    }
}
