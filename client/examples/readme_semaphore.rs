//! The Rust guide's fenced semaphore example (docs/rust.md). Needs a server to run.

use std::time::Duration;

use fencedlock::{LockConfig, Locker, Semaphore};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config =
        LockConfig::builder().ttl(Duration::from_secs(30)).max_wait(Duration::from_secs(600)).build()?;
    let exports = Semaphore::new(Locker::open("redis://127.0.0.1:6379", config)?, "nightly-export", 3)?
        .with_label("host-a")?; // public: STATUS shows it next to the fence
    let permit = exports.acquire().await?; // at most 3 holders at once
    write_export(permit.fence()).await; // checked against this slot's last fence
    permit.release().await?;

    // Anyone: the permits and each holder's fence, time left and label (never a token).
    if let Some(status) = exports.status().await? {
        println!("{} of {} permits held", status.holders.len(), status.permits);
    }
    Ok(())
}

// The application's work on its own slot of the resource.
async fn write_export(fence: u64) {
    println!("export written with fence {fence}");
}
