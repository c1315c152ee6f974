//! Which server and connection errors a later attempt may not meet. Retry decisions for a
//! single error ([`Error::is_retryable`](crate::Error::is_retryable)) and for a Redlock round
//! (a majority of permanent failures ends the retries) both ask here.

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Transient conditions: I/O errors and timeouts, `TRYAGAIN` (the module's restart grace
/// among them), `LOADING`, cluster reconfiguration, and sentinels that name no usable primary
/// (a failover in progress). Everything else is final.
pub(crate) fn is_transient(err: &RedisError) -> bool {
    if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
        return true;
    }
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        ) | ErrorKind::ClusterConnectionNotFound
            | ErrorKind::MasterNameNotFoundBySentinel
    )
}

/// The server or the path to it cannot serve requests right now: transient conditions (above),
/// a server out of memory (`OOM`), busy running a script (`BUSY`), or refusing writes for lack
/// of replicas (`NOREPLICAS`, `min-replicas-to-write`) — codes without a kind of their own in
/// the `redis` crate. Configuration errors (unknown command, `NOPERM`, `WRONGTYPE`) are not
/// outages: a declared fail-open policy must not turn a misconfiguration into silently
/// unlocked work.
pub(crate) fn is_outage(err: &RedisError) -> bool {
    // A MOVED or ASK that reaches the caller comes from a cluster node addressed as a single
    // server: a misconfiguration, which fail-open must not run through.
    let misrouted = matches!(err.kind(), ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask));
    (is_transient(err) && !misrouted) || matches!(err.code(), Some("OOM" | "BUSY" | "NOREPLICAS"))
}
