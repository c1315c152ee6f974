//! The Rust guide's read-write lock example (docs/rust.md). Needs a server to run.

use std::time::Duration;

use fencedlock::{LockConfig, Locker, ReadWriteLock};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config =
        LockConfig::builder().ttl(Duration::from_secs(30)).max_wait(Duration::from_secs(60)).build()?;
    let prices = ReadWriteLock::new(Locker::open("redis://127.0.0.1:6379", config)?, "prices");

    // Many readers at once; each read carries its fence to the resource.
    let reading = prices.read().await?;
    read_prices(reading.fence()).await;
    reading.release().await?;

    // One writer, after the readers already in; later readers wait behind it.
    let mut writing = prices.write().await?;
    write_prices(writing.fence()).await;
    // Keep reading what was written, with the same fence: no writer can come between.
    prices.downgrade(&mut writing).await?;
    read_prices(writing.fence()).await;
    writing.release().await?;
    Ok(())
}

// The application's reads and writes, checked against the resource's highest write fence.
async fn read_prices(fence: u64) {
    println!("prices read with fence {fence}");
}

async fn write_prices(fence: u64) {
    println!("prices written with fence {fence}");
}
