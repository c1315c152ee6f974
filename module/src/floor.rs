//! Keeps each cluster slot's fence floor (see `slot.rs`) at or above every fence the slot may
//! grant, before it grants it. Outside cluster mode it does nothing: the server-wide high-water
//! mark already outlives every key there.

use crate::error::LockError;
use crate::ffi::{self, clock, replication, Names};
use crate::lock::record::Record;
use crate::lock::Lock;
use crate::server::SERVER;
use crate::slot;
use crate::store::Store;

/// Makes sure the floor of `key`'s slot covers `fence`, raising it (with headroom) and
/// replicating the raise when it does not. `names` is the running command or timer.
pub fn cover(names: &impl Names, key: &[u8], fence: u64) -> Result<(), LockError> {
    if !ffi::in_cluster() {
        return Ok(());
    }
    let name = slot::floor_key(slot::slot(key));
    let name = names.string(&name).ok_or(LockError::Internal)?;
    let mut key = Store::named(&name);
    let floor = key.lock()?;
    if !slot::needs_raise(floor.as_ref().map(|lock| lock.fence()), fence) {
        return Ok(());
    }
    let now = clock::now();
    let raised = Lock::from_record(&Record { fence: slot::floor_for(fence), holder: None }, now)?;
    let stored = match floor {
        Some(mut floor) => {
            floor.replace(raised);
            floor
        }
        None => key.insert(raised)?,
    };
    replication::replicate_named(&name, SERVER.high_water(), &stored.snapshot(now));
    Ok(())
}
