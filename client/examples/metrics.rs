//! The client's metrics: install a recorder, take, hold, renew and release leases, meet a busy
//! lock, lose a lease, fail open against a server that is down, report a stale fence refused
//! by the resource, and print every metric.
//!
//! ```text
//! cargo run -p fencedlock --example metrics -- redis://127.0.0.1:6379
//! ```
//! The URL comes from the first argument, else `FENCEDLOCK_URL`, else `redis://127.0.0.1:6379`.
//! A real application installs an exporter instead (`metrics-exporter-prometheus`, ...); this
//! example uses `metrics-util`'s debugging recorder to print what was recorded.

use std::time::Duration;

use fencedlock::{metrics, Acquisition, Error, LockConfig, Locker, OnUnavailable};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

mod support;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = support::url();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    if recorder.install().is_err() {
        return Err(Error::Config("a metrics recorder is installed already".into()));
    }
    metrics::describe();

    let config = LockConfig::builder()
        .ttl(Duration::from_secs(2))
        .max_wait(Duration::from_millis(300))
        .on_unavailable(OnUnavailable::FailOpen)
        .build()?;
    let locker = Locker::open(&url, config.clone())?;
    let key = "example:metrics";

    // A lease held for a while, renewed once, released: hold time and hold / ttl.
    let mut lease = locker.acquire(key).await?;
    println!("holding {key:?} with fence {}", lease.fence());
    // Somebody else meets the busy lock: once without waiting, once waiting 300 ms.
    for outcome in [locker.try_acquire(key).await, locker.acquire(key).await] {
        match outcome {
            Err(err) => println!("second owner: {err}"),
            Ok(other) => println!("unexpected: granted fence {}", other.fence()),
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    lease.renew().await?;
    let stale_fence = lease.fence();
    println!("released: {}", lease.release().await?);

    // The resource: a row whose writes carry fences; a write with an older fence is refused.
    let mut last_fence = 0u64;
    let mut write = |fence: u64| {
        if fence >= last_fence {
            last_fence = fence;
            true
        } else {
            metrics::record_fence_refusal();
            false
        }
    };
    let newer = locker.acquire(key).await?;
    println!("new owner writes with fence {}: {}", newer.fence(), write(newer.fence()));
    println!("a paused old owner writes with fence {stale_fence}: {}", write(stale_fence));

    // A lease lost: another process releases it with its token, and the renewal is refused.
    let mut lost = newer;
    let token = lost.token().clone();
    locker.release_token(key, &token).await?;
    match lost.renew().await {
        Err(err) => println!("renewal: {err}"),
        Ok(()) => println!("unexpected: renewed"),
    }
    drop(lost);

    // The lock service down (nothing listens on port 1): failing open runs the work unlocked.
    let down = Locker::open("redis://127.0.0.1:1", config)?;
    match down.acquire_with_policy(key).await? {
        Acquisition::Unlocked(err) => println!("running unlocked, no fence: {err}"),
        Acquisition::Locked(lease) => println!("unexpected: fence {}", lease.fence()),
    }

    // Drops and background releases finish.
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("--- metrics");
    let mut lines: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels: Vec<String> =
                key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            let name = if labels.is_empty() {
                key.key().name().to_owned()
            } else {
                format!("{}{{{}}}", key.key().name(), labels.join(","))
            };
            match value {
                DebugValue::Counter(n) => format!("{name} {n}"),
                DebugValue::Gauge(v) => format!("{name} {v}"),
                DebugValue::Histogram(values) => {
                    let n = values.len();
                    let sum: f64 = values.iter().map(|v| v.into_inner()).sum();
                    let max = values.iter().map(|v| v.into_inner()).fold(0.0, f64::max);
                    format!("{name} count={n} sum={sum:.4} max={max:.4}")
                }
            }
        })
        .collect();
    lines.sort();
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
