//! Finding the lock keys on a server: a `SCAN` of every server a [`Node`] stands for (each
//! primary of a cluster), filtered by the server to the engine's lock key type and a prefix,
//! and bounded in the work it asks of the servers. Never `KEYS`: that blocks a server for as
//! long as it walks the whole keyspace.

use fencedlock_protocol::keyspace::{self, LIBRARY_TYPE, MODULE_TYPE};
use redis::{FromRedisValue, Value};

use crate::backend::Engine;
use crate::error::Error;
use crate::node::Node;

/// How much of the servers' keyspaces a listing may walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// `SCAN`'s `COUNT`: roughly how many keys a server looks at per call (its work per call;
    /// the server answers each call on its own, so other clients wait at most that long).
    pub count: u64,
    /// Stop once the servers together looked at about this many keys (calls × `count`).
    pub max_visited: u64,
}

impl Default for ScanLimits {
    /// 1,000 keys per call, at most 100,000 keys in all.
    fn default() -> Self {
        ScanLimits { count: 1_000, max_visited: 100_000 }
    }
}

/// The lock keys a bounded scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyScan {
    /// Each lock key, with the address of the server it is on (a cluster's primary).
    pub keys: Vec<FoundKey>,
    /// Whether every server's scan ran to its end. `false`: [`ScanLimits::max_visited`]
    /// stopped it, and keys may be missing.
    pub complete: bool,
    /// About how many keys the servers looked at (calls × `COUNT`).
    pub visited: u64,
    /// Keys of the lock type whose names are not UTF-8 (this crate's keys are text), left out.
    pub not_text: usize,
}

/// One lock key a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundKey {
    /// The address of the server (or cluster primary) that has it.
    pub server: String,
    /// The key.
    pub key: String,
}

impl Node {
    /// The lock keys whose names start with `prefix` (every key for `""`), on this server or
    /// on every primary of this cluster, found by `SCAN … MATCH prefix* COUNT n TYPE t` with
    /// `t` the type of the engine's lock keys (the module's data type, or the Functions
    /// library's hash; a hash of an application's shows up too, and its `STATUS` is
    /// `WRONGTYPE`). fencedlock's own keys beside them (floors, wake-up lists, election
    /// journals) are left out. A key may appear twice, and keys created or deleted during the
    /// scan may be missed (`SCAN`'s guarantees); read each one's state with
    /// [`Node::semaphore_status`].
    pub async fn lock_keys(&self, prefix: &str, limits: ScanLimits) -> Result<KeyScan, Error> {
        let engine = self.detect_engine().await?;
        let key_type = match engine {
            Engine::Module => MODULE_TYPE,
            Engine::Functions | Engine::Script => LIBRARY_TYPE,
        };
        let pattern = format!("{}*", glob_escape(prefix));
        let count = limits.count.max(1);
        let scan = |cursor: u64| {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(count).arg("TYPE").arg(key_type);
            cmd
        };
        let mut found = KeyScan::default();
        let mut open = Vec::new();
        for (server, reply) in self.on_every_primary(&scan(0), "SCAN").await? {
            let cursor = found.take_page(self, &server, reply)?;
            found.visited += count;
            if cursor != 0 {
                open.push((server, cursor));
            }
        }
        while !open.is_empty() && found.visited < limits.max_visited {
            let mut next = Vec::new();
            for (server, cursor) in open {
                if found.visited >= limits.max_visited {
                    next.push((server, cursor));
                    continue;
                }
                let reply = self.on_server(&server, &scan(cursor), "SCAN").await?;
                let cursor = found.take_page(self, &server, reply)?;
                found.visited += count;
                if cursor != 0 {
                    next.push((server, cursor));
                }
            }
            open = next;
        }
        found.complete = open.is_empty();
        Ok(found)
    }
}

impl KeyScan {
    /// Takes one `SCAN` reply of `server` (`[cursor, [key, ...]]`) in; its next cursor.
    fn take_page(&mut self, node: &Node, server: &str, reply: Value) -> Result<u64, Error> {
        let bad = |detail: String| Error::Server {
            node: node.name().to_owned(),
            source: redis::make_extension_error("BADREPLY".to_owned(), Some(detail)),
        };
        if let Value::ServerError(refusal) = reply {
            return Err(Error::Server { node: server.to_owned(), source: refusal.into() });
        }
        let (cursor, keys) = <(String, Vec<Vec<u8>>)>::from_redis_value(reply)
            .map_err(|e| bad(format!("SCAN on {server} replied {e}")))?;
        let cursor =
            cursor.parse().map_err(|_| bad(format!("SCAN on {server} replied cursor {cursor:?}")))?;
        for key in keys.into_iter().filter(|key| !keyspace::is_internal(key)) {
            match String::from_utf8(key) {
                Ok(key) => self.keys.push(FoundKey { server: server.to_owned(), key }),
                Err(_) => self.not_text += 1,
            }
        }
        Ok(cursor)
    }
}

/// `text` as a glob pattern that matches exactly it: `*`, `?`, `[`, `]` and `\` escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_matches_itself_and_nothing_wider() {
        assert_eq!(glob_escape("jobs:"), "jobs:");
        assert_eq!(glob_escape("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
        assert_eq!(glob_escape(""), "");
    }
}
