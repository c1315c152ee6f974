//! New epochs and the restart grace window, driven by server events.
//!
//! A node that becomes the source of truth after others may have issued fences it never saw —
//! a replica promoted after its primary died, a primary restarted from an AOF that lost its last
//! second — starts a new epoch at the wall clock ([`HighWater::start_epoch`](crate::fence::HighWater::start_epoch)):
//! its next fences are above every fence issued by an epoch taken earlier, on any node whose
//! clock agrees with this one's within the time between the two.

use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{Context, ContextFlags};
use redis_module_macros::{loading_event_handler, role_changed_event_handler};

use crate::ffi::{self, clock};
use crate::server::{Load, SERVER};

fn start_epoch(why: &str) {
    let mark = SERVER.update_high_water(|mark| mark.start_epoch(clock::wall_micros()));
    ffi::log_notice(&format!(
        "fencedlock: {why}: new epoch {} (ms since 1970), high-water mark {}",
        mark.epoch(),
        mark.get()
    ));
}

#[role_changed_event_handler]
fn on_role_changed(_ctx: &Context, role: ServerRole) {
    ffi::guard("role change", (), || {
        if role == ServerRole::Primary {
            start_epoch("promoted to primary");
        }
    });
}

#[loading_event_handler]
fn on_loading(ctx: &Context, event: LoadingSubevent) {
    ffi::guard("loading event", (), || match event {
        LoadingSubevent::RdbStarted | LoadingSubevent::AofStarted => SERVER.loading(Load::Disk),
        LoadingSubevent::ReplStarted => SERVER.loading(Load::Replication),
        LoadingSubevent::Failed => SERVER.loading(Load::None),
        LoadingSubevent::Ended => {
            let from = SERVER.loaded();
            let primary = ctx.get_flags().contains(ContextFlags::MASTER);
            if from == Load::Disk && primary {
                start_epoch("loaded from disk as primary");
                if SERVER.first_load_from_disk() {
                    SERVER.start_grace(clock::now());
                }
            }
        }
    });
}
