//! New epochs and the restart grace window, driven by server events.
//!
//! A node that becomes the source of truth after others may have issued fences it never saw —
//! a replica promoted after its primary died, a primary restarted from an AOF that lost its last
//! second — starts a new epoch at the wall clock ([`HighWater::start_epoch`](crate::fence::HighWater::start_epoch)):
//! its next fences are above every fence issued by an epoch taken earlier, on any node whose
//! clock agrees with this one's within the time between the two.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use redis_module::server_events::{LoadingSubevent, ServerRole};
use redis_module::{Context, ContextFlags};
use redis_module_macros::{loading_event_handler, role_changed_event_handler};

use crate::ffi::{self, clock};
use crate::state;

const LOAD_NONE: u8 = 0;
const LOAD_DISK: u8 = 1;
const LOAD_REPLICATION: u8 = 2;

/// What the load in progress reads from: only loads from disk start an epoch.
static LOADING_FROM: AtomicU8 = AtomicU8::new(LOAD_NONE);
/// The first load from disk after the module loaded is the start-up load: it opens the grace.
static LOADED_FROM_DISK: AtomicBool = AtomicBool::new(false);

fn start_epoch(why: &str) {
    let mark = state::update_high_water(|mark| mark.start_epoch(clock::wall_micros()));
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
        LoadingSubevent::RdbStarted | LoadingSubevent::AofStarted => LOADING_FROM.store(LOAD_DISK, Relaxed),
        LoadingSubevent::ReplStarted => LOADING_FROM.store(LOAD_REPLICATION, Relaxed),
        LoadingSubevent::Failed => LOADING_FROM.store(LOAD_NONE, Relaxed),
        LoadingSubevent::Ended => {
            let from = LOADING_FROM.swap(LOAD_NONE, Relaxed);
            let primary = ctx.get_flags().contains(ContextFlags::MASTER);
            if from == LOAD_DISK && primary {
                start_epoch("loaded from disk as primary");
                if !LOADED_FROM_DISK.swap(true, Relaxed) {
                    state::start_grace(clock::now());
                }
            }
        }
    });
}
