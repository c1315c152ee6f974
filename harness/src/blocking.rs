//! Blocking `FENCEDLOCK.ACQUIRE … BLOCK` requests driven from tests.
//!
//! Each request gets its own connection (a blocked request holds back everything behind it on
//! its connection) and is sent without reading the reply, so a test can queue waiters in an
//! order it knows (send one, see the server block it, send the next), act on the lock, and then
//! read each reply together with the moment it arrived on the client's monotonic clock.

use std::time::{Duration, Instant};

use fencedlock_protocol::{Acquire, ReplyError, Request};
use redis::Value;

use crate::reply::{error_text, parse_info};
use crate::server::Server;

/// How often the queue helpers look: queuing takes one round trip, and the FIFO tests queue
/// a hundred waiters one at a time.
const LOOK_EVERY: Duration = Duration::from_millis(1);
/// Read timeout of a waiter's connection outside [`BlockedAcquire::reply`].
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// An `ACQUIRE` sent on its own connection whose reply has not been read yet.
pub struct BlockedAcquire {
    conn: redis::Connection,
    id: u64,
    sent: Instant,
    addr: String,
}

impl std::fmt::Debug for BlockedAcquire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedAcquire").field("addr", &self.addr).field("client_id", &self.id).finish()
    }
}

/// The reply to a [`BlockedAcquire`], and when it was sent and arrived.
#[derive(Debug)]
pub struct AcquireReply {
    /// `Ok(Some(fence))` granted, `Ok(None)` nil (refused or timed out), `Err` an error reply.
    pub outcome: Result<Option<u64>, redis::RedisError>,
    /// Just before the request was written.
    pub sent: Instant,
    /// Just after the reply was read.
    pub at: Instant,
}

impl AcquireReply {
    /// The fence of a grant; panics (naming the reply) on nil or an error.
    pub fn fence(&self) -> u64 {
        match &self.outcome {
            Ok(Some(fence)) => *fence,
            Ok(None) => panic!("expected a grant, got nil (after {:?})", self.at - self.sent),
            Err(e) => panic!("expected a grant, got the error {}", error_text(e)),
        }
    }

    /// Whether the reply was nil (no lease).
    pub fn is_nil(&self) -> bool {
        matches!(self.outcome, Ok(None))
    }

    /// The module's error kind of an error reply (`None` for a grant, nil, or a foreign error).
    pub fn error_kind(&self) -> Option<ReplyError> {
        self.outcome.as_ref().err().and_then(classify)
    }

    /// From send to reply.
    pub fn latency(&self) -> Duration {
        self.at.saturating_duration_since(self.sent)
    }
}

/// The module's error kind of an error reply, by its code and text ([`ReplyError::classify`]).
pub fn classify(err: &redis::RedisError) -> Option<ReplyError> {
    ReplyError::classify(err.code()?, err.detail().unwrap_or_default())
}

/// `FENCEDLOCK.ACQUIRE key token ttl_ms [BLOCK timeout_ms]` as a command, built by the
/// protocol's [`Acquire`] (tests append more options themselves).
pub fn acquire_cmd(key: &str, token: &[u8], ttl_ms: u64, block_ms: Option<u64>) -> redis::Cmd {
    let request = Acquire { block_ms, ..Acquire::mutex(key.as_bytes(), token, ttl_ms) };
    let mut cmd = redis::Cmd::new();
    for word in request.words() {
        cmd.arg(&word[..]);
    }
    cmd
}

impl Server {
    /// Send an `ACQUIRE` (with `BLOCK block_ms` when given) on a new connection of its own and
    /// return without reading the reply.
    pub fn send_acquire(
        &self,
        key: &str,
        token: &[u8],
        ttl_ms: u64,
        block_ms: Option<u64>,
    ) -> BlockedAcquire {
        self.send_acquire_cmd(&acquire_cmd(key, token, ttl_ms, block_ms))
    }

    /// [`Server::send_acquire`] of a command built by the caller (e.g. an [`acquire_cmd`] with
    /// more options).
    pub fn send_acquire_cmd(&self, cmd: &redis::Cmd) -> BlockedAcquire {
        let mut conn = self.conn();
        let id: u64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("CLIENT ID on {}: {}", self.addr(), error_text(&e)));
        let sent = Instant::now();
        conn.send_packed_command(&cmd.get_packed_command())
            .unwrap_or_else(|e| panic!("send ACQUIRE to {}: {e}", self.addr()));
        BlockedAcquire { conn, id, sent, addr: self.addr() }
    }

    /// [`Server::send_acquire`] with `BLOCK block_ms`, then wait (up to `limit`) until the
    /// server has blocked the client: it is queued, behind every waiter queued before.
    pub fn queue_acquire(&self, key: &str, token: &[u8], ttl_ms: u64, block_ms: u64) -> BlockedAcquire {
        let waiter = self.send_acquire(key, token, ttl_ms, Some(block_ms));
        waiter.wait_blocked(self, Duration::from_secs(10));
        waiter
    }

    /// Whether client `id` is blocked in a command (`CLIENT LIST ID` shows flag `b`); false
    /// for a client that is gone.
    pub fn client_blocked(&self, id: u64) -> bool {
        let line: String = self
            .query(redis::cmd("CLIENT").arg("LIST").arg("ID").arg(id))
            .unwrap_or_else(|e| panic!("CLIENT LIST ID {id} on {}: {}", self.addr(), error_text(&e)));
        line.split_whitespace()
            .find_map(|field| field.strip_prefix("flags="))
            .is_some_and(|flags| flags.contains('b'))
    }

    /// `fencedlock_waiters` of `INFO fencedlock`: clients queued now.
    pub fn waiters(&self) -> u64 {
        self.fencedlock_counter("fencedlock_waiters")
    }

    /// Wait (up to `limit`, looking every millisecond) until `fencedlock_waiters` is `n`.
    pub fn wait_waiters(&self, n: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut last;
        loop {
            let text: String = self
                .query(redis::cmd("INFO").arg("fencedlock"))
                .unwrap_or_else(|e| panic!("INFO fencedlock on {}: {}", self.addr(), error_text(&e)));
            last = parse_info(&text).remove("fencedlock_waiters");
            if last.as_deref().and_then(|v| v.parse::<u64>().ok()) == Some(n) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: fencedlock_waiters is {last:?}, not {n}, after {limit:?}",
                self.addr()
            );
            std::thread::sleep(LOOK_EVERY);
        }
    }
}

impl BlockedAcquire {
    /// The server's id of this waiter's connection (`CLIENT KILL ID`, `CLIENT UNBLOCK`).
    pub fn client_id(&self) -> u64 {
        self.id
    }

    /// When the request was written.
    pub fn sent(&self) -> Instant {
        self.sent
    }

    /// Whether `server` still has this client blocked.
    pub fn is_blocked(&self, server: &Server) -> bool {
        server.client_blocked(self.id)
    }

    /// Wait (up to `limit`, looking every millisecond) until `server` has blocked this client;
    /// panics if it does not (e.g. because it was answered at once).
    pub fn wait_blocked(&self, server: &Server, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !server.client_blocked(self.id) {
            assert!(
                Instant::now() < deadline,
                "client {} on {} was not blocked within {limit:?} (answered at once?)",
                self.id,
                self.addr
            );
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// Read the reply, waiting at most `limit`; panics if none comes (the waiter hangs).
    pub fn reply(&mut self, limit: Duration) -> AcquireReply {
        self.conn.set_read_timeout(Some(limit)).expect("set a read timeout");
        let value = self.conn.recv_response();
        let at = Instant::now();
        let value = match value {
            Err(e) if e.is_timeout() => panic!(
                "client {} on {}: no ACQUIRE reply within {limit:?} (sent {:?} ago)",
                self.id,
                self.addr,
                at - self.sent
            ),
            other => other.and_then(Value::extract_error),
        };
        self.conn.set_read_timeout(Some(IO_TIMEOUT)).expect("restore the read timeout");
        let outcome = match value {
            Ok(Value::Nil) => Ok(None),
            Ok(Value::Int(fence)) if fence > 0 => Ok(Some(fence as u64)),
            Ok(other) => panic!("ACQUIRE on {} replied {other:?}", self.addr),
            Err(e) if e.code().is_some() => Err(e),
            Err(e) => panic!("client {} on {}: connection failed: {e}", self.id, self.addr),
        };
        AcquireReply { outcome, sent: self.sent, at }
    }

    /// The connection, for commands after the reply was read (e.g. the granted waiter's
    /// `RELEASE`).
    pub fn conn(&mut self) -> &mut redis::Connection {
        &mut self.conn
    }
}
