//! Moving hash slots between cluster masters while clients hold leases: the manual
//! `SETSLOT IMPORTING` / `MIGRATING`, `MIGRATE`, `SETSLOT NODE` sequence that
//! `redis-cli --cluster reshard` runs, split into steps so a test can act between them; and
//! `redis-cli --cluster reshard` itself, as an operator runs it.

use std::process::Command;

use redis::Value;

use crate::cluster::{Cluster, CLUSTER_TIMEOUT};
use crate::paths::redis_cli;
use crate::reply::error_text;
use crate::server::Server;
use crate::wait::poll;

/// Keys moved per `MIGRATE` call, and the bound on rounds (a slot in a test holds few keys).
const KEYS_PER_MIGRATE: usize = 100;
const MAX_MIGRATE_ROUNDS: usize = 1_000;
/// `MIGRATE`'s own I/O timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 5_000;

impl Cluster {
    /// `CLUSTER MYID` of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        let node = &self.nodes()[i];
        node.query(redis::cmd("CLUSTER").arg("MYID"))
            .unwrap_or_else(|e| panic!("CLUSTER MYID on {}: {e}", node.addr()))
    }

    /// Indexes of the nodes that currently report `role:master`.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes().len())
            .filter(|&i| self.nodes()[i].info_field("replication", "role").as_deref() == Some("master"))
            .collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn key_slot(&self, key: &str) -> u16 {
        let node = &self.nodes()[0];
        node.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT on {}: {e}", node.addr()))
    }

    /// Index of the master serving `slot` according to node `viewer`'s `CLUSTER SLOTS`.
    pub fn slot_owner_seen_by(&self, viewer: usize, slot: u16) -> Option<usize> {
        self.slot_view(viewer, slot)
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS on {}: {e}", self.nodes()[viewer].addr()))
    }

    fn slot_view(&self, viewer: usize, slot: u16) -> redis::RedisResult<Option<usize>> {
        let ranges: Value = self.nodes()[viewer].query(redis::cmd("CLUSTER").arg("SLOTS"))?;
        Ok(slot_owner_port(&ranges, slot)
            .and_then(|port| self.nodes().iter().position(|n| i64::from(n.port()) == port)))
    }

    /// Index of the master serving `slot`, once every node that answers agrees on it (a
    /// killed node does not answer).
    pub fn slot_owner(&self, slot: u16) -> usize {
        let mut owner = None;
        poll(&format!("every node to agree on the owner of slot {slot}"), CLUSTER_TIMEOUT, || {
            let seen: Vec<Option<usize>> =
                (0..self.nodes().len()).filter_map(|v| self.slot_view(v, slot).ok()).collect();
            owner = seen.first().copied().flatten();
            owner.is_some() && seen.iter().all(|s| *s == owner)
        });
        owner.expect("polled until known")
    }

    /// The slots master `node` serves by its own `CLUSTER SLOTS`, ascending.
    pub fn slots_of(&self, node: usize) -> Vec<u16> {
        let server = &self.nodes()[node];
        let ranges: Value = server
            .query(redis::cmd("CLUSTER").arg("SLOTS"))
            .unwrap_or_else(|e| panic!("CLUSTER SLOTS on {}: {e}", server.addr()));
        let port = i64::from(server.port());
        let mut slots: Vec<u16> = slot_ranges(&ranges)
            .into_iter()
            .filter(|&(_, _, owner)| owner == port)
            .flat_map(|(start, end, _)| start..=end)
            .collect();
        slots.sort_unstable();
        slots
    }

    /// The keys node `node` stores in `slot` (`CLUSTER GETKEYSINSLOT`, up to 100,000), as text.
    pub fn keys_in_slot(&self, node: usize, slot: u16) -> Vec<String> {
        let server = &self.nodes()[node];
        let keys: Vec<Vec<u8>> = server
            .query(redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100_000))
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot} on {}: {e}", server.addr()));
        keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect()
    }

    /// Run `redis-cli --cluster reshard` to move `slots` slots from master `from` to master
    /// `to` (redis-cli picks which: the source's lowest-numbered slots), with `extra` options
    /// such as `--cluster-replace`; panics with redis-cli's output if it fails. Then waits until
    /// the cluster agrees again ([`Cluster::wait_ok`]). Returns redis-cli's output.
    pub fn reshard_with_redis_cli(&self, from: usize, to: usize, slots: usize, extra: &[&str]) -> String {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let out = Command::new(redis_cli())
            .arg("--cluster")
            .arg("reshard")
            .arg(self.nodes()[from].addr())
            .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("run redis-cli --cluster reshard: {e}"));
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // redis-cli prints its errors with `[ERR]` and may still exit 0 for some of them.
        assert!(
            out.status.success() && !text.contains("[ERR]"),
            "redis-cli --cluster reshard {slots} slots from node {from} to node {to} failed ({}):\n{text}",
            out.status
        );
        self.wait_ok();
        text
    }

    /// Start moving `slot` to master `to`: `IMPORTING` on the target, then `MIGRATING` on the
    /// source. Until [`SlotMigration::finish`] the source serves keys it still has and answers
    /// `ASK` for the others.
    pub fn begin_slot_migration(&self, slot: u16, to: usize) -> SlotMigration<'_> {
        let from = self.slot_owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let m = SlotMigration {
            cluster: self,
            slot,
            from,
            to,
            from_id: self.node_id(from),
            to_id: self.node_id(to),
        };
        m.setslot(to, &["IMPORTING", &m.from_id]);
        m.setslot(from, &["MIGRATING", &m.to_id]);
        m
    }

    /// Move `slot` to master `to` in one go (begin, move every key, finish).
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let m = self.begin_slot_migration(slot, to);
        m.move_keys();
        m.finish();
    }
}

/// A slot migration in progress (see [`Cluster::begin_slot_migration`]).
#[derive(Debug)]
pub struct SlotMigration<'a> {
    cluster: &'a Cluster,
    slot: u16,
    from: usize,
    to: usize,
    from_id: String,
    to_id: String,
}

impl SlotMigration<'_> {
    /// `MIGRATE` the given keys (they must be in the slot and on the source) to the target.
    pub fn move_these(&self, keys: &[&[u8]]) {
        let source = &self.cluster.nodes()[self.from];
        let target = &self.cluster.nodes()[self.to];
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1").arg(target.port()).arg("").arg(0).arg(MIGRATE_TIMEOUT_MS).arg("KEYS");
        for k in keys {
            cmd.arg(*k);
        }
        let reply: redis::RedisResult<String> = source.query(&cmd);
        match reply {
            Ok(ok) if ok == "OK" || ok == "NOKEY" => {}
            Ok(other) => panic!("MIGRATE on {} replied {other}", source.addr()),
            Err(e) => panic!("MIGRATE on {}: {}\n{}", source.addr(), error_text(&e), source.log_tail(20)),
        }
    }

    /// `MIGRATE` every key still in the slot on the source, in batches.
    pub fn move_keys(&self) {
        self.move_keys_in_batches(KEYS_PER_MIGRATE, || {});
    }

    /// `MIGRATE` every key still in the slot on the source, `per_call` keys per `MIGRATE`
    /// (as listed by `GETKEYSINSLOT` just before), running `between` after each call: a test
    /// can let other things happen (time pass, reclaim run) in the middle of the move.
    pub fn move_keys_in_batches(&self, per_call: usize, mut between: impl FnMut()) {
        let source = &self.cluster.nodes()[self.from];
        for _ in 0..MAX_MIGRATE_ROUNDS {
            let keys: Vec<Vec<u8>> = source
                .query(redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(self.slot).arg(per_call.max(1)))
                .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT on {}: {e}", source.addr()));
            if keys.is_empty() {
                return;
            }
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.move_these(&refs);
            between();
        }
        panic!("slot {} still had keys after {MAX_MIGRATE_ROUNDS} MIGRATE rounds", self.slot);
    }

    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// Index of the master the slot leaves.
    pub fn source(&self) -> usize {
        self.from
    }

    /// Index of the master the slot moves to.
    pub fn target(&self) -> usize {
        self.to
    }

    /// `SETSLOT NODE` on the target, the source, then every other master; wait until every
    /// node names the target as the slot's owner.
    pub fn finish(self) {
        self.setslot(self.to, &["NODE", &self.to_id]);
        self.setslot(self.from, &["NODE", &self.to_id]);
        for m in self.cluster.masters() {
            if m != self.to && m != self.from {
                self.setslot(m, &["NODE", &self.to_id]);
            }
        }
        let (slot, to) = (self.slot, self.to);
        poll(&format!("every node to see slot {slot} on node {to}"), CLUSTER_TIMEOUT, || {
            (0..self.cluster.nodes().len()).all(|v| self.cluster.slot_owner_seen_by(v, slot) == Some(to))
        });
    }

    fn setslot(&self, node: usize, rest: &[&str]) {
        let server: &Server = &self.cluster.nodes()[node];
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(self.slot);
        for a in rest {
            cmd.arg(*a);
        }
        let _: () = server.query(&cmd).unwrap_or_else(|e| {
            panic!("CLUSTER SETSLOT {} {rest:?} on {}: {}", self.slot, server.addr(), error_text(&e))
        });
    }
}

/// The ranges of a `CLUSTER SLOTS` reply, `[[start, end, [ip, port, id, ...], replicas...],
/// ...]`, as `(start, end, master port)`.
fn slot_ranges(ranges: &Value) -> Vec<(u16, u16, i64)> {
    let Value::Array(ranges) = ranges else { return Vec::new() };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else { return None };
            match fields.as_slice() {
                [Value::Int(start), Value::Int(end), Value::Array(master), ..] => match master.get(1) {
                    Some(Value::Int(port)) => {
                        Some((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, *port))
                    }
                    _ => None,
                },
                _ => None,
            }
        })
        .collect()
}

/// The port of the master serving `slot` in a `CLUSTER SLOTS` reply.
fn slot_owner_port(ranges: &Value, slot: u16) -> Option<i64> {
    slot_ranges(ranges)
        .into_iter()
        .find(|&(start, end, _)| (start..=end).contains(&slot))
        .map(|(_, _, port)| port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_owner_port_of_a_slot() {
        let master = |port| Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec()), Value::Int(port)]);
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), master(7000)]),
            Value::Array(vec![Value::Int(5461), Value::Int(5461), master(7001)]),
            Value::Array(vec![Value::Int(5462), Value::Int(16383), master(7002)]),
        ]);
        assert_eq!(slot_owner_port(&reply, 0), Some(7000));
        assert_eq!(slot_owner_port(&reply, 5461), Some(7001));
        assert_eq!(slot_owner_port(&reply, 16383), Some(7002));
        assert_eq!(slot_owner_port(&Value::Array(vec![]), 3), None);
    }
}
