//! The TLS example of docs/deployments.md: a private CA and a client certificate. Needs a
//! TLS server and the three files to run.

use fencedlock::{LockConfig, Locker, Tls};

#[tokio::main]
async fn main() -> Result<(), fencedlock::Error> {
    let tls = Tls::from_files(Some("ca.pem".as_ref()), Some(("client.pem".as_ref(), "client.key".as_ref())))?;
    let locker = Locker::open("rediss://redis.internal:6380", LockConfig::builder().tls(tls).build()?)?;
    let lease = locker.acquire("nightly").await?;
    lease.release().await?;
    Ok(())
}
