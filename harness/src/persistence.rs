//! Persistence helpers: snapshot and AOF rewrite that return only when the work is done.

use std::time::Duration;

use crate::server::Server;
use crate::wait::poll;

/// Bound for a background save or rewrite of test-sized data.
pub const PERSIST_TIMEOUT: Duration = Duration::from_secs(15);

impl Server {
    /// `SAVE` (foreground RDB snapshot); panics on error.
    pub fn save(&self) {
        let _: () =
            self.query(&redis::cmd("SAVE")).unwrap_or_else(|e| panic!("SAVE on {}: {e}", self.addr()));
    }

    /// `BGREWRITEAOF`, then wait until `aof_rewrite_in_progress:0` and no rewrite is
    /// scheduled, and check the rewrite succeeded (`aof_last_bgrewrite_status:ok`).
    pub fn rewrite_aof(&self) {
        let _: redis::Value = self
            .query(&redis::cmd("BGREWRITEAOF"))
            .unwrap_or_else(|e| panic!("BGREWRITEAOF on {}: {e}", self.addr()));
        poll(&format!("AOF rewrite on {}", self.addr()), PERSIST_TIMEOUT, || {
            let info = self.info("persistence");
            info.get("aof_rewrite_in_progress").map(String::as_str) == Some("0")
                && info.get("aof_rewrite_scheduled").map(String::as_str) == Some("0")
        });
        let status = self.info_field("persistence", "aof_last_bgrewrite_status");
        assert_eq!(status.as_deref(), Some("ok"), "AOF rewrite failed:\n{}", self.log_tail(30));
    }
}
