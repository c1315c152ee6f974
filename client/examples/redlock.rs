//! Fenced Redlock over several independent masters: the grant reports how each node voted,
//! and its fence is larger than every earlier grant's even when majorities differ.
//!
//! ```text
//! cargo run -p fencedlock --example redlock -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//! URLs come from the arguments, else `FENCEDLOCK_URLS` (comma-separated), else
//! `redis://127.0.0.1:6379` alone.

use std::time::Duration;

use fencedlock::{Error, LockConfig, Redlock};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty() {
        urls = std::env::var("FENCEDLOCK_URLS")
            .map(|v| v.split(',').map(str::to_owned).collect())
            .unwrap_or_else(|_| vec!["redis://127.0.0.1:6379".to_owned()]);
    }
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(100))
        .build()?;
    let redlock = Redlock::open(&urls, config)?;
    println!("{} masters, quorum {}", redlock.nodes().len(), redlock.quorum());

    let mut last = 0;
    for round in 1..=3 {
        match redlock.acquire("example:ledger").await {
            Ok(lease) => {
                println!("round {round}: fence {} ({})", lease.fence(), lease.report());
                assert!(lease.fence() > last, "fences increase");
                last = lease.fence();
                lease.release().await?;
            }
            Err(Error::QuorumNotReached(report)) => {
                println!("round {round}: no majority: {report}");
            }
            Err(other) => return Err(other),
        }
    }
    Ok(())
}
