//! The Rust guide's first example (docs/rust.md): a lease on one server, a kept-alive lease,
//! and fenced Redlock. Needs a server (and, for the Redlock part, three masters) to run.

use std::time::Duration;

use fencedlock::{LockConfig, Locker, Redlock};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10)) // lease time
        .max_wait(Duration::from_secs(2)) // acquire() waits this long, queued on the server
        .build()?;

    // One server (or Locker::open_cluster for Redis Cluster, routed by key).
    let locker = Locker::open("redis://127.0.0.1:6379", config.clone())?;
    let lease = locker.acquire("invoice:inv_72").await?;
    lease.ensure_valid()?; // typed error once local validity ran out
    send_invoice(lease.fence()).await; // the resource checks the fence
    lease.release().await?;

    // Kept alive (renewed every ttl/3); the work is dropped if a renewal fails. Its own error
    // and the lock's come out of one `?`.
    locker.with_lease("nightly-report", |lease| async move { build_report(lease.fence()).await }).await?;

    // Fenced Redlock over independent masters: a majority must grant, and the fence still
    // increases across successive grants.
    let masters = ["redis://lock1:6379", "redis://lock2:6379", "redis://lock3:6379"];
    let redlock = Redlock::open(&masters, config)?;
    let lease = redlock.acquire("invoice:inv_72").await?;
    send_invoice(lease.fence()).await;
    lease.release().await?;
    Ok(())
}

// The application's work: each write to the resource carries the fence.
async fn send_invoice(fence: u64) {
    println!("invoice sent with fence {fence}");
}

async fn build_report(fence: u64) -> Result<(), fencedlock::Error> {
    println!("report built with fence {fence}");
    Ok(())
}
