//! The Rust guide's replica-confirmed grants example (docs/rust.md). Needs a Sentinel group to run.

use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .confirm_replicas(1) // the replica Sentinel would promote
        .confirm_timeout(Duration::from_millis(500))
        .build()?;
    let locker = Locker::open("redis+sentinel://s1:26379,s2:26379,s3:26379/locks", config)?;
    match locker.acquire("report:daily").await {
        Ok(lease) => {
            // The grant is on the primary and on >= 1 replica.
            lease.release().await?;
        }
        Err(e @ Error::NotConfirmed { .. }) => println!("released; no lease was handed out: {e}"),
        Err(e) => println!("contended, timed out, ...: {e}"),
    }
    Ok(())
}
