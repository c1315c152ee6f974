//! Take a lease on one server, use its fence, release it.
//!
//! ```text
//! cargo run -p fencedlock --example single_node -- redis://127.0.0.1:6379
//! ```
//! The URL comes from the first argument, else `FENCEDLOCK_URL`, else `redis://127.0.0.1:6379`.

use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker};

mod support;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = support::url();
    let config =
        LockConfig::builder().ttl(Duration::from_secs(5)).max_wait(Duration::from_secs(3)).build()?;
    let locker = Locker::open(&url, config)?;

    let lease = locker.acquire("example:report").await?;
    println!("holding {:?} on {url} with fence {} for {:?}", lease.key(), lease.fence(), lease.remaining());
    // A second owner is refused while we hold it.
    match locker.try_acquire("example:report").await {
        Err(Error::Contended { .. }) => println!("a second try_acquire is refused: contended"),
        other => println!("unexpected: {other:?}"),
    }
    // Before each write to the protected resource, check the lease locally and send the fence.
    lease.ensure_valid()?;
    println!("UPDATE reports SET ..., last_fence = {0} WHERE ... AND last_fence <= {0}", lease.fence());

    let released = lease.release().await?;
    println!("released: {released}");
    Ok(())
}
