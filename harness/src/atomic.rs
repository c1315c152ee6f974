//! Atomic slot migration, as each server offers it: Valkey 9's `CLUSTER MIGRATESLOTS` (sent
//! to the source, watched with `CLUSTER GETSLOTMIGRATIONS`, cancelled with `CLUSTER
//! CANCELSLOTMIGRATIONS`) and Redis 8.4+'s `CLUSTER MIGRATION IMPORT` (sent to the target,
//! which answers a task id that `CLUSTER MIGRATION STATUS` also knows on the source). Watched
//! on the source.

use std::collections::HashMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Value;

use crate::cluster::{Cluster, CLUSTER_TIMEOUT};
use crate::flavor::{Flavor, Release};
use crate::reply::error_text;
use crate::wait::poll;

/// Which atomic slot migration a server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicMigration {
    /// `CLUSTER MIGRATESLOTS` (Valkey 9.0+).
    Valkey,
    /// `CLUSTER MIGRATION IMPORT` (Redis 8.4+).
    Redis,
}

impl Release {
    /// The server's atomic slot migration, `None` before Valkey 9.0 and Redis 8.4.
    pub fn atomic_slot_migration(self) -> Option<AtomicMigration> {
        match self.flavor {
            Flavor::Valkey if self.version >= (9, 0) => Some(AtomicMigration::Valkey),
            Flavor::Redis if self.version >= (8, 4) => Some(AtomicMigration::Redis),
            _ => None,
        }
    }
}

/// How an atomic migration ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The target owns the slot, and every node says so.
    Moved,
    /// Failed or cancelled, with the server's state and message: the source keeps the slot.
    NotMoved(String),
}

/// An atomic migration under way (see [`Cluster::start_atomic_migration`]).
#[derive(Debug)]
pub struct AtomicMove<'a> {
    cluster: &'a Cluster,
    kind: AtomicMigration,
    slot: u16,
    from: usize,
    to: usize,
    /// Redis's task id; Valkey names none, its job is found by slot and target.
    task: Option<String>,
    to_id: String,
}

impl Cluster {
    /// Starts moving `slot` to master `to` by the server's atomic slot migration. `Err` with
    /// the server's refusal (a module that does not declare support, a server without it).
    pub fn start_atomic_migration(&self, slot: u16, to: usize) -> Result<AtomicMove<'_>, String> {
        let from = self.slot_owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let release = self.nodes()[to].release();
        let kind = release
            .atomic_slot_migration()
            .ok_or_else(|| format!("{release} has no atomic slot migration"))?;
        let to_id = self.node_id(to);
        let task = match kind {
            AtomicMigration::Valkey => {
                let mut cmd = redis::cmd("CLUSTER");
                cmd.arg("MIGRATESLOTS").arg("SLOTSRANGE").arg(slot).arg(slot).arg("NODE").arg(&to_id);
                let _: Value = self.nodes()[from].query(&cmd).map_err(|e| error_text(&e))?;
                None
            }
            AtomicMigration::Redis => {
                let mut cmd = redis::cmd("CLUSTER");
                cmd.arg("MIGRATION").arg("IMPORT").arg(slot).arg(slot);
                Some(self.nodes()[to].query::<String>(&cmd).map_err(|e| error_text(&e))?)
            }
        };
        Ok(AtomicMove { cluster: self, kind, slot, from, to, task, to_id })
    }

    /// Moves `slot` to master `to` atomically and waits until every node sees it there.
    /// Panics if the server refuses or the migration does not complete.
    pub fn migrate_slot_atomically(&self, slot: u16, to: usize) {
        let m = self
            .start_atomic_migration(slot, to)
            .unwrap_or_else(|e| panic!("atomic migration of slot {slot}: {e}"));
        match m.wait() {
            Ended::Moved => {}
            Ended::NotMoved(why) => {
                panic!("atomic migration of slot {slot} to node {to} did not complete: {why}")
            }
        }
    }
}

impl AtomicMove<'_> {
    /// The migration's state as its server names it (`success` / `completed` when done), and
    /// its message.
    pub fn state(&self) -> (String, String) {
        let fields = match self.kind {
            AtomicMigration::Valkey => {
                let reply: Value = self.cluster.nodes()[self.from]
                    .query(redis::cmd("CLUSTER").arg("GETSLOTMIGRATIONS"))
                    .unwrap_or_else(|e| panic!("CLUSTER GETSLOTMIGRATIONS: {}", error_text(&e)));
                let range = format!("{0}-{0}", self.slot);
                // The newest export of this slot to this target (the list is oldest first).
                entries(&reply).into_iter().rev().find(|e| {
                    e.get("operation").map(String::as_str) == Some("EXPORT")
                        && e.get("slot_ranges") == Some(&range)
                        && e.get("target_node") == Some(&self.to_id)
                })
            }
            AtomicMigration::Redis => {
                let task = self.task.as_deref().unwrap_or_default();
                let reply: Value = self.cluster.nodes()[self.from]
                    .query(redis::cmd("CLUSTER").arg("MIGRATION").arg("STATUS").arg("ID").arg(task))
                    .unwrap_or_else(|e| panic!("CLUSTER MIGRATION STATUS: {}", error_text(&e)));
                entries(&reply).into_iter().next()
            }
        }
        .unwrap_or_default();
        let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
        (field("state"), [field("message"), field("last_error")].concat())
    }

    /// Cancels the migration where it is driven: `CLUSTER CANCELSLOTMIGRATIONS` on Valkey's
    /// source, `CLUSTER MIGRATION CANCEL ID` on Redis's target (cancelled on Redis's source, the
    /// target's import fails and starts again by itself).
    pub fn cancel(&self) {
        let (node, cmd) = match self.kind {
            AtomicMigration::Valkey => (self.from, redis::cmd("CLUSTER").arg("CANCELSLOTMIGRATIONS").clone()),
            AtomicMigration::Redis => {
                let task = self.task.as_deref().unwrap_or_default();
                (self.to, redis::cmd("CLUSTER").arg("MIGRATION").arg("CANCEL").arg("ID").arg(task).clone())
            }
        };
        let _: Value = self.cluster.nodes()[node]
            .query(&cmd)
            .unwrap_or_else(|e| panic!("cancelling the migration of slot {}: {}", self.slot, error_text(&e)));
    }

    /// Waits (bounded) until the migration ended; when it moved the slot, until every node
    /// names the target as its owner.
    pub fn wait(&self) -> Ended {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let ended = loop {
            let (state, message) = self.state();
            match state.as_str() {
                "success" | "completed" => break Ended::Moved,
                "failed" | "cancelled" | "canceled" => break Ended::NotMoved(format!("{state}: {message}")),
                _ if Instant::now() >= deadline => {
                    panic!("the migration of slot {} is still {state:?} after {CLUSTER_TIMEOUT:?}", self.slot)
                }
                _ => sleep(Duration::from_millis(10)),
            }
        };
        if ended == Ended::Moved {
            let (slot, to) = (self.slot, self.to);
            poll(&format!("every node to see slot {slot} on node {to}"), CLUSTER_TIMEOUT, || {
                (0..self.cluster.nodes().len()).all(|v| self.cluster.slot_owner_seen_by(v, slot) == Some(to))
            });
        }
        ended
    }
}

/// The entries of a migration listing: an array of flat `[name, value, ...]` arrays (RESP2)
/// or maps (RESP3), values as text.
fn entries(reply: &Value) -> Vec<HashMap<String, String>> {
    let Value::Array(items) = reply else { return Vec::new() };
    items.iter().map(fields).collect()
}

fn fields(entry: &Value) -> HashMap<String, String> {
    let pairs: Vec<(&Value, &Value)> = match entry {
        Value::Array(flat) => flat.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    };
    pairs.into_iter().filter_map(|(k, v)| Some((text(k)?, text(v).unwrap_or_default()))).collect()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Nil => Some(String::new()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_migration_entries() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("operation"),
            bulk("EXPORT"),
            bulk("slot_ranges"),
            bulk("7-7"),
            bulk("create_time"),
            Value::Int(5),
        ])]);
        let e = entries(&reply);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0]["operation"], "EXPORT");
        assert_eq!(e[0]["slot_ranges"], "7-7");
        assert_eq!(e[0]["create_time"], "5");
    }

    #[test]
    fn which_servers_have_it() {
        let at = |flavor, version| Release { flavor, version }.atomic_slot_migration();
        assert_eq!(at(Flavor::Valkey, (9, 1)), Some(AtomicMigration::Valkey));
        assert_eq!(at(Flavor::Valkey, (8, 1)), None);
        assert_eq!(at(Flavor::Redis, (8, 6)), Some(AtomicMigration::Redis));
        assert_eq!(at(Flavor::Redis, (8, 2)), None);
        assert_eq!(at(Flavor::Redis, (7, 4)), None);
    }
}
