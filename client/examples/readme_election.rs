//! The Rust guide's leader election example (docs/rust.md). Needs a server to run.

use std::time::Duration;

use fencedlock::{Election, LockConfig, Locker};
use futures::StreamExt;

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config = LockConfig::builder().ttl(Duration::from_secs(6)).build()?; // renewed every 2 s
    let election = Election::new(Locker::open("redis://127.0.0.1:6379", config)?, "scheduler");

    // Anyone: who leads now, and the changes as they happen (never the token).
    if let Some(leader) = election.leader().await? {
        println!("{:?} leads at epoch {}", leader.label_lossy(), leader.epoch);
    }
    let mut changes = Box::pin(election.observe()); // Stream of Result<Option<Leader>, Error>
    if let Some(now) = changes.next().await {
        println!("the current leadership: {:?}", now?);
    }

    // A candidate: waits (indefinitely, cancel-safe) until elected.
    let leadership = election.campaign("host-a:4711").await?;
    let stop = leadership.cancellation(); // cancelled when leadership is lost
    tokio::select! {
        _ = stop.cancelled() => {}                  // deposed: stop at once
        _ = run_scheduler(leadership.epoch()) => {} // every write carries the epoch
    }
    leadership.resign().await?; // the next candidate is elected at once
    Ok(())
}

// The leader's work: each write it makes carries the epoch.
async fn run_scheduler(epoch: u64) {
    println!("scheduling at epoch {epoch}");
}
