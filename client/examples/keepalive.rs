//! Keep a short lease alive while long work runs, and stop the work if the lease is lost.
//!
//! ```text
//! cargo run -p fencedlock --example keepalive -- redis://127.0.0.1:6379
//! ```
//! While it runs, `redis-cli DEL example:job` takes the lease away: the work stops at once.
//! The URL comes from the first argument, else `FENCEDLOCK_URL`, else `redis://127.0.0.1:6379`.

use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker};

mod support;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = support::url();
    // A 1.5 s lease, renewed every 500 ms, held for 5 s of work.
    let config = LockConfig::builder().ttl(Duration::from_millis(1_500)).build()?;
    let locker = Locker::open(&url, config)?;

    let result = locker
        .with_lease("example:job", |lease| async move {
            for step in 1..=10 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                println!("step {step}/10 with fence {}, {:?} left", lease.fence(), lease.remaining());
            }
            Ok::<_, Error>("done")
        })
        .await;
    match result {
        Ok(outcome) => println!("work {outcome}, lease released"),
        Err(err @ Error::LeaseLost { .. }) => println!("work stopped: {err}"),
        Err(other) => return Err(other),
    }

    // The same with an explicit keep-alive and select!.
    let kept = locker.acquire("example:job").await?.keep_alive();
    tokio::select! {
        err = kept.lost() => println!("lost: {err}"),
        _ = tokio::time::sleep(Duration::from_secs(2)) => println!("2 s of work under fence {}", kept.fence()),
    }
    kept.release().await?;
    Ok(())
}
