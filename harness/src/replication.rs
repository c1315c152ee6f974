//! Primary / replica helpers: start a replica, wait until it is really in sync, promote it.

use std::time::Duration;

use crate::server::Server;
use crate::wait::poll;

/// How long a replica may take to finish its initial sync.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(15);

impl Server {
    /// Start a replica of this server (same flavor, module, module args) and wait until the
    /// primary lists it as `state=online`.
    pub fn start_replica(&self) -> Server {
        let replica = self.replica_builder().start();
        wait_replica_online(self, &replica);
        replica
    }

    /// `WAIT replicas timeout`: block until `replicas` replicas acknowledged every write so
    /// far; panics if fewer did within `timeout`.
    pub fn wait_for_replicas(&self, replicas: usize, timeout: Duration) {
        let acked: i64 = self
            .query(redis::cmd("WAIT").arg(replicas).arg(timeout.as_millis() as u64))
            .unwrap_or_else(|e| panic!("WAIT on {}: {e}", self.addr()));
        assert!(
            acked >= replicas as i64,
            "WAIT {replicas}: only {acked} replica(s) acknowledged within {timeout:?}"
        );
    }

    /// Wait until `replica` has applied every write this primary had accepted when called,
    /// from any client. (`WAIT` only covers the calling connection's own writes: after writes
    /// made through other connections it returns at once.)
    pub fn wait_caught_up(&self, replica: &Server) {
        let target: u64 = self
            .info_field("replication", "master_repl_offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or_else(|| panic!("{} reports no master_repl_offset", self.addr()));
        poll(
            &format!("replica {} to reach offset {target} of {}", replica.addr(), self.addr()),
            SYNC_TIMEOUT,
            || {
                let info = replica.info("replication");
                let offset = info
                    .get("slave_repl_offset")
                    .or_else(|| info.get("master_repl_offset"))
                    .and_then(|o| o.parse::<u64>().ok());
                info.get("master_link_status").map(String::as_str) == Some("up")
                    && info.get("master_sync_in_progress").map(String::as_str) == Some("0")
                    && offset.is_some_and(|o| o >= target)
            },
        );
    }

    /// Make this running server a replica of `primary` now (`REPLICAOF`; a restart does not
    /// keep it), and wait up to `limit` until the primary lists it online (as
    /// [`wait_replica_online`]). For a replica that joins a primary already holding data or busy
    /// with a load; a large dataset needs a `limit` above [`SYNC_TIMEOUT`].
    pub fn attach_as_replica_of(&self, primary: &Server, limit: Duration) {
        let _: () = self
            .query(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(primary.port()))
            .unwrap_or_else(|e| panic!("REPLICAOF on {}: {e}", self.addr()));
        wait_online_within(primary, self, limit);
    }

    /// Promote this replica (`REPLICAOF NO ONE`) and wait until it reports `role:master`.
    pub fn promote(&self) {
        let _: () = self
            .query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"))
            .unwrap_or_else(|e| panic!("REPLICAOF NO ONE on {}: {e}", self.addr()));
        poll(&format!("{} to report role:master", self.addr()), Duration::from_secs(5), || {
            self.info_field("replication", "role").as_deref() == Some("master")
        });
    }
}

/// Wait until `primary`'s `INFO replication` lists `replica` with `state=online` and the
/// replica reports `master_link_status:up`.
///
/// With disk-based sync (the harness default) `online` means the RDB was loaded and the
/// command stream flows; after that `WAIT` is meaningful.
pub fn wait_replica_online(primary: &Server, replica: &Server) {
    wait_online_within(primary, replica, SYNC_TIMEOUT);
}

fn wait_online_within(primary: &Server, replica: &Server, limit: Duration) {
    let needle = format!("port={},state=online", replica.port());
    poll(&format!("replica {} online at primary {}", replica.addr(), primary.addr()), limit, || {
        let online =
            primary.info("replication").iter().any(|(k, v)| k.starts_with("slave") && v.contains(&needle));
        online && replica.info_field("replication", "master_link_status").as_deref() == Some("up")
    });
}
