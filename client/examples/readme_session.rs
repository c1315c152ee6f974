//! The Rust guide's session example (docs/rust.md). Needs a server to run.

use std::time::Duration;

use fencedlock::{LockConfig, Locker};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let config = LockConfig::builder().ttl(Duration::from_secs(30)).build()?;
    let locker = Locker::open("redis://127.0.0.1:6379", config)?;
    // One keep-alive for every lease of the session: one pipeline of renewals per interval.
    let session = locker.session();
    let mut shards = Vec::new();
    for shard in 0..64 {
        shards.push(session.try_acquire(&format!("shard:{shard}")).await?);
    }
    tokio::select! {
        // The one loss signal: the keep-alive failed, every lease of the session is lost.
        lost = session.lost() => eprintln!("stopping all shards: {lost}"),
        () = work(&shards) => {}
    }
    session.close().await; // releases every lease still held
    Ok(())
}

// The application's work on its shards, each write carrying its shard's fence.
async fn work(shards: &[fencedlock::SessionLease]) {
    for shard in shards {
        println!("{} owned with fence {}", shard.key(), shard.fence());
    }
}
