//! Connecting within the node timeout.

use std::future::Future;
use std::time::Duration;

use redis::RedisError;

/// `connect` within `limit`; running out of time is an I/O timeout like the client's own, so
/// a connect that hangs is told and retried as one that failed.
pub(super) async fn bounded<C>(
    limit: Duration,
    connect: impl Future<Output = Result<C, RedisError>>,
) -> Result<C, RedisError> {
    tokio::time::timeout(limit, connect)
        .await
        .unwrap_or_else(|_elapsed| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
}
