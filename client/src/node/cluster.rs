//! A Redis Cluster as one node: its client, routed by key, and the seed that tells a refused
//! TLS handshake from an outage. (Only with the `cluster` feature.)

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::timeout::bounded;
use crate::error::Error;
use crate::tls::{self, Tls};

/// A cluster's client, and for `rediss://` seeds a standalone client of the first seed.
///
/// The cluster client reports a refused TLS handshake only as text inside an I/O error,
/// which would read as an outage; one standalone connect to a seed recovers the typed
/// error, so a cluster that does not trust us (or that we do not trust) is a configuration
/// error as a single server is.
#[derive(Clone)]
pub(super) struct ClusterTarget {
    client: redis::cluster::ClusterClient,
    tls_seed: Option<redis::Client>,
}

impl ClusterTarget {
    /// The cluster reached through `seeds` (checked against `tls` already).
    pub(super) fn new(seeds: &[&str], tls: &Tls) -> Result<ClusterTarget, Error> {
        let client = tls
            .cluster_client(seeds.to_vec())
            .map_err(|e| Error::Config(format!("bad cluster URLs {seeds:?}: {e}")))?;
        let tls_seed = tls::is_tls_url(seeds[0]).then(|| tls.client(seeds[0]).ok()).flatten();
        Ok(ClusterTarget { client, tls_seed })
    }

    /// A cluster connection within `timeout`; a failure that a seed's handshake explains is
    /// that handshake's error.
    pub(super) async fn connect(&self, timeout: Duration) -> Result<ClusterConnection, RedisError> {
        let err = match bounded(timeout, self.client.get_async_connection()).await {
            Ok(conn) => return Ok(conn),
            Err(err) => err,
        };
        if let (Some(seed), true) = (&self.tls_seed, err.is_io_error()) {
            let config = AsyncConnectionConfig::new().set_connection_timeout(Some(timeout));
            if let Err(probe) =
                bounded(timeout, seed.get_multiplexed_async_connection_with_config(&config)).await
            {
                let probe = tls::classify(probe);
                if probe.kind() == redis::ErrorKind::InvalidClientConfig {
                    return Err(probe);
                }
            }
        }
        Err(err)
    }
}
