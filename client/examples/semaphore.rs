//! A fenced semaphore: five workers share two permits. Each waits in the server's queue for a
//! permit, works under the permit's own fence, and releases it for the next; the example
//! counts the workers running at once and exits non-zero if more than two ever did.
//!
//! ```text
//! cargo run -p fencedlock --example semaphore -- redis://127.0.0.1:6379
//! ```
//! While it runs, `redis-cli FENCEDLOCK.STATUS example:exports` shows the permits and each
//! holder's fence, time left and label (never a token). The URL comes from the first argument,
//! else `FENCEDLOCK_URL`, else `redis://127.0.0.1:6379`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker, Semaphore};

const WORKERS: usize = 5;
const PERMITS: u32 = 2;

mod support;

#[tokio::main]
async fn main() -> Result<ExitCode, Error> {
    let url = support::url();
    let config =
        LockConfig::builder().ttl(Duration::from_secs(5)).max_wait(Duration::from_secs(10)).build()?;
    let exports = Semaphore::new(Locker::open(&url, config)?, "example:exports", PERMITS)?;

    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (1..=WORKERS)
        .map(|w| {
            let exports = exports.clone().with_label(format!("worker-{w}"));
            let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
            tokio::spawn(async move {
                let permit = exports?.acquire().await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Each permit is fenced on its own: the resource checks this fence against
                // the last one seen for the slot this worker writes, not one global maximum.
                println!("worker-{w}: permit with fence {}, {now} running", permit.fence());
                tokio::time::sleep(Duration::from_millis(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
                Ok::<(), Error>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker task")?;
    }

    let peak = peak.load(Ordering::SeqCst);
    if peak > PERMITS as usize {
        eprintln!("BOUND BROKEN: {peak} of {WORKERS} workers ran at once with {PERMITS} permits");
        return Ok(ExitCode::FAILURE);
    }
    println!("at most {peak} of {WORKERS} workers ran at once ({PERMITS} permits)");
    Ok(ExitCode::SUCCESS)
}
