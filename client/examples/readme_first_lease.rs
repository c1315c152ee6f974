//! The front page's Rust example (README.md): one lease on one server. Needs a server to run.

use fencedlock::{LockConfig, Locker};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let locker = Locker::open("redis://127.0.0.1:6379", LockConfig::default())?;
    let lease = locker.acquire("invoice:inv_72").await?; // a 10 s lease; waits up to 10 s if busy
    println!("invoice sent with fence {}", lease.fence()); // the resource checks the fence
    lease.release().await?;
    Ok(())
}
