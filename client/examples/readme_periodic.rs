//! The Rust guide's periodic job example (docs/rust.md). Needs a server to run.

use std::time::Duration;

use fencedlock::{LockConfig, Locker, Periodic};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config = LockConfig::builder().ttl(Duration::from_secs(30)).label("host-a").build()?;
    let locker = Locker::open("redis://127.0.0.1:6379", config)?;
    // Every host runs this on its own schedule; the job runs at most once an hour.
    let hour = Duration::from_secs(3600);
    let outcome = locker
        .run_at_most_every("nightly-sync", hour, |lease| async move { sync(lease.fence()).await })
        .await?;
    match outcome {
        Periodic::Ran(rows) => println!("synced {rows} rows"),
        Periodic::NotDue { last, due_in } => {
            println!("ran {:?} ago (fence {}); due in {due_in:?}", last.age, last.fence)
        }
        Periodic::Busy => println!("another host holds the lock"),
    }
    Ok(())
}

// The job: every write it makes carries the fence (see the lesson's fourth step).
async fn sync(fence: u64) -> Result<u64, fencedlock::Error> {
    println!("syncing with fence {fence}");
    Ok(0)
}
