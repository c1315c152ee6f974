//! Commands whose answer is per server rather than per key (`SCAN`): sent to every primary
//! of a cluster, or to one primary by its address, as the cluster connection routes them.

use redis::Cmd;
#[cfg(feature = "cluster")]
use redis::FromRedisValue;

use super::connection::Transport;
use super::Node;
#[cfg(feature = "cluster")]
use super::{connection::Conn, Failure};
use crate::error::Error;

impl Node {
    /// `cmd` on every server this node stands for: the server itself, or each primary of a
    /// cluster. Each one's reply by its address (a primary's error reply as
    /// `Value::ServerError`, to be told apart by the caller), for commands with no key whose
    /// answer is per server (`SCAN`).
    pub(crate) async fn on_every_primary(
        &self,
        cmd: &Cmd,
        operation: &'static str,
    ) -> Result<Vec<(String, redis::Value)>, Error> {
        match &self.transport {
            Transport::Standalone { .. } => Ok(vec![(self.name.clone(), self.call(cmd, operation).await?)]),
            #[cfg(feature = "cluster")]
            Transport::Cluster { .. } => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let every = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match self.routed(cmd, every).await.map_err(|f| self.error(operation, f))? {
                    redis::Value::Map(replies) => Ok(replies
                        .into_iter()
                        .map(|(address, reply)| {
                            (String::from_redis_value(address).unwrap_or_default(), reply)
                        })
                        .collect()),
                    other => Err(Error::Server {
                        node: self.name.clone(),
                        source: redis::make_extension_error(
                            "BADREPLY".to_owned(),
                            Some(format!("expected a reply per primary, got {other:?}")),
                        ),
                    }),
                }
            }
        }
    }

    /// `cmd` on the one server at `address`, as [`Node::on_every_primary`] named it.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) async fn on_server(
        &self,
        address: &str,
        cmd: &Cmd,
        operation: &'static str,
    ) -> Result<redis::Value, Error> {
        match &self.transport {
            Transport::Standalone { .. } => self.call(cmd, operation).await,
            #[cfg(feature = "cluster")]
            Transport::Cluster { .. } => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| Error::Config(format!("not a cluster node's address: {address:?}")))?;
                let one = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                let reply = self.routed(cmd, one).await.map_err(|f| self.error(operation, f))?;
                Ok(reply)
            }
        }
    }

    #[cfg(feature = "cluster")]
    /// `cmd` sent by the cluster connection to `routing`'s nodes, within the per-node timeout.
    pub(super) async fn routed(
        &self,
        cmd: &Cmd,
        routing: redis::cluster_routing::RoutingInfo,
    ) -> Result<redis::Value, Failure> {
        let request = async {
            match self.connection().await? {
                Conn::Cluster(mut conn) => conn.route_command(cmd.clone(), routing).await,
                Conn::Standalone(mut conn, _) => cmd.query_async(&mut conn).await,
            }
        };
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(|e| self.failure(e, None)),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }
}
