//! Leader election: two candidates campaign, an observer follows who leads, the leader works
//! under its epoch and resigns, and the other candidate takes over at once with a higher epoch.
//!
//! ```text
//! cargo run -p fencedlock --example election -- redis://127.0.0.1:6379
//! ```
//! While it runs, `redis-cli FENCEDLOCK.STATUS example:leader` shows the leader's label (never
//! its token). The URL comes from the first argument, else `FENCEDLOCK_URL`, else
//! `redis://127.0.0.1:6379`.

use std::time::Duration;

use fencedlock::{Election, Error, Leadership, LockConfig, Locker};
use futures::StreamExt;

mod support;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = support::url();
    // A 3 s lease renewed every second: a leader that dies is replaced within 3 s.
    let config = LockConfig::builder().ttl(Duration::from_secs(3)).build()?;
    let election = Election::new(Locker::open(&url, config)?, "example:leader")
        .with_poll_interval(Duration::from_millis(100));

    // Anyone can follow the leadership; it never takes part in the election.
    let watcher = election.clone();
    let observer = tokio::spawn(async move {
        let mut changes = Box::pin(watcher.observe());
        while let Some(change) = changes.next().await {
            match change {
                Ok(Some(leader)) => println!(
                    "observer: {} leads at epoch {} ({:?} left)",
                    leader.label_lossy().unwrap_or_default(),
                    leader.epoch,
                    leader.remaining
                ),
                Ok(None) => println!("observer: nobody leads"),
                Err(err) => println!("observer: {err}"),
            }
        }
    });

    let first = election.campaign("candidate-1").await?;
    println!("candidate-1 elected, epoch {}", first.epoch());
    // candidate-2 waits in the server's queue while candidate-1 leads.
    let next = election.clone();
    let second = tokio::spawn(async move { next.campaign("candidate-2").await });

    lead(&first).await;
    first.resign().await?;
    let second = second.await.expect("campaign task")?;
    println!("candidate-2 elected, epoch {} (higher: older epochs are refused downstream)", second.epoch());
    lead(&second).await;
    second.resign().await?;

    tokio::time::sleep(Duration::from_millis(300)).await;
    observer.abort();
    Ok(())
}

/// A leader's work: every write carries the epoch (`UPDATE … WHERE last_epoch <= :epoch`), and
/// the work stops the moment leadership is lost.
async fn lead(leadership: &Leadership) {
    let label = String::from_utf8_lossy(leadership.label()).into_owned();
    let stop = leadership.cancellation();
    for step in 1..=3 {
        tokio::select! {
            _ = stop.cancelled() => {
                println!("{label}: leadership lost, stopping");
                return;
            }
            _ = tokio::time::sleep(Duration::from_millis(700)) => {
                println!("{label}: step {step}/3 written with epoch {}", leadership.epoch());
            }
        }
    }
}
