//! The Rust guide's declared failure policy example (docs/rust.md). Needs a server to run
//! (or none, to see the fail-open branch).

use fencedlock::{Acquisition, LockConfig, Locker, OnUnavailable};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config = LockConfig::builder().on_unavailable(OnUnavailable::FailOpen).build()?;
    let locker = Locker::open("redis://127.0.0.1:6379", config)?;
    match locker.acquire_with_policy("thumbnails:rebuild").await? {
        Acquisition::Locked(lease) => {
            rebuild_thumbnails(Some(lease.fence())).await;
            lease.release().await?;
        }
        Acquisition::Unlocked(why) => {
            println!("running without a lock: {why}");
            rebuild_thumbnails(None).await; // no fence: never invent one
        }
    }
    Ok(())
}

// The application's work; its resource enforces the invariant when there is no fence.
async fn rebuild_thumbnails(fence: Option<u64>) {
    println!("thumbnails rebuilt (fence {fence:?})");
}
