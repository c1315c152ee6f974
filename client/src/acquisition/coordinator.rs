//! The one place that knows a locker's topology: one server (replica-confirmed or not), or a
//! Redlock majority of N independent masters, decided once when the locker is built.
//!
//! Everything above (the lease, the policy, the primitives) asks the coordinator for an
//! acquisition round or a waiting step and never looks at the topology itself; everything
//! below (the plain rounds, the replica-confirmed round, the waiting steps) runs one way and
//! is chosen here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquisition::confirm;
use crate::acquisition::fenced::Fencing;
use crate::acquisition::rounds::{Grant, Rounds};
use crate::acquisition::terms::Request;
use crate::acquisition::waiting::{self, Turn};
use crate::config::LockConfig;
use crate::error::Error;
use crate::node::replicas::Confirm;
use crate::node::Node;

/// How a locker's nodes decide a grant, chosen once when it is built.
#[derive(Debug, Clone, Copy)]
enum Topology {
    /// One server, or one Redis Cluster routing by key; each grant confirmed on replicas first
    /// where configured.
    Single { confirm: Option<Confirm> },
    /// A majority of N independent masters; `raise`: fenced Redlock's raise step.
    Quorum { raise: bool },
}

impl Topology {
    /// The topology of `nodes` under `config` and `fencing`, or the [`Error::Config`] that
    /// refuses options these nodes cannot honour, before anything connects.
    fn of(nodes: &[Node], config: &LockConfig, fencing: Fencing) -> Result<Topology, Error> {
        let refused = |why: &str| Err(Error::Config(why.into()));
        for (i, node) in nodes.iter().enumerate() {
            // One server counted twice would let a minority of real servers make a "majority".
            if nodes[..i].iter().any(|earlier| earlier.name() == node.name()) {
                return refused(&format!(
                    "server {} is given twice; Redlock needs independent servers, each once",
                    node.name()
                ));
            }
        }
        let confirm = Confirm::configured(config);
        match (nodes, confirm) {
            ([], _) => refused("a lock needs at least one server"),
            ([node], Some(_)) if node.is_cluster() => refused(
                "replica confirmation is not supported on a Redis Cluster (WAIT would be sent to every primary, not the key's)",
            ),
            ([_], confirm) => Ok(Topology::Single { confirm }),
            (_, Some(_)) => refused(
                "replica confirmation needs a single server: Redlock's independent masters have no replicas to confirm on",
            ),
            (_, None) => Ok(Topology::Quorum { raise: fencing == Fencing::Raise }),
        }
    }
}

/// A locker's shared state: its rounds, and the topology that picks which of them to run.
#[derive(Debug)]
pub(crate) struct Coordinator {
    pub(crate) rounds: Arc<Rounds>,
    /// The fencing mode asked for (the raise step runs only where the topology has a quorum).
    pub(crate) fencing: Fencing,
    topology: Topology,
}

impl Coordinator {
    /// A coordinator over `nodes`, each given the configured per-node timeout, waiting limit
    /// and engine choice; [`Error::Config`] for a topology that cannot honour `config`.
    pub(crate) fn new(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Result<Coordinator, Error> {
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|n| {
                n.with_timeout(config.node_timeout())
                    .with_max_blocking(config.max_blocking())
                    .with_engine(config.engine())
            })
            .collect();
        let topology = Topology::of(&nodes, &config, fencing)?;
        let raise = matches!(topology, Topology::Quorum { raise: true });
        Ok(Coordinator { rounds: Rounds::new(nodes, config, raise), fencing, topology })
    }

    pub(crate) fn config(&self) -> &LockConfig {
        &self.rounds.config
    }

    /// The locker's one server, when its grants need no replica confirmation: where a set of
    /// keys can be taken in one command (`ACQUIREALL`).
    pub(crate) fn plain_single(&self) -> Option<&Node> {
        match (self.topology, self.rounds.nodes.as_slice()) {
            (Topology::Single { confirm: None }, [node]) => Some(node),
            _ => None,
        }
    }

    /// One acquisition round: replica-confirmed (which never waits on the server, so `block`
    /// does not apply) or the plain round, waiting up to `block` on each node that can.
    pub(crate) async fn attempt(
        &self,
        request: Request<'_>,
        block: Option<Duration>,
    ) -> Result<Grant, Error> {
        match (self.topology, self.rounds.nodes.as_slice()) {
            (Topology::Single { confirm: Some(confirm) }, [node]) => {
                // Boxed: a plain round's future would otherwise be as large as this one's.
                Box::pin(confirm::attempt(&self.rounds, node, request, &confirm)).await
            }
            _ => self.rounds.attempt(request, block).await,
        }
    }

    /// One waiting step for `request`, waiting on the server until `until` at most (see the
    /// `waiting` module).
    pub(crate) async fn take_turn(&self, request: Request<'_>, until: Instant) -> Turn {
        let rounds = &self.rounds;
        match (self.topology, rounds.nodes.as_slice()) {
            (Topology::Single { confirm }, [node]) => {
                waiting::single(rounds, node, request, until, confirm.as_ref()).await
            }
            (_, nodes) => waiting::reserve(rounds, nodes, request, until).await,
        }
    }

    /// Whether a waiting step that ran out of time is the last word: one server's nil at the
    /// deadline is; a Redlock majority needs one more plain round to tell how every node stands.
    pub(crate) fn timed_out_is_final(&self) -> bool {
        matches!(self.topology, Topology::Single { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(urls: &[&str]) -> Vec<Node> {
        urls.iter().map(|url| Node::new(url).unwrap()).collect()
    }

    fn topology(nodes: &[Node], confirm: usize, fencing: Fencing) -> Result<Topology, Error> {
        let config = LockConfig::builder().confirm_replicas(confirm).build().unwrap();
        Topology::of(nodes, &config, fencing)
    }

    #[test]
    fn the_topology_is_decided_once_and_what_cannot_work_is_refused() {
        let one = nodes(&["redis://127.0.0.1:1"]);
        let three = nodes(&["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"]);
        assert!(matches!(topology(&one, 0, Fencing::Raise), Ok(Topology::Single { confirm: None })));
        assert!(
            matches!(topology(&one, 2, Fencing::Raise), Ok(Topology::Single { confirm: Some(c) }) if c.replicas() == 2)
        );
        assert!(matches!(topology(&three, 0, Fencing::Raise), Ok(Topology::Quorum { raise: true })));
        assert!(matches!(topology(&three, 0, Fencing::QuorumMax), Ok(Topology::Quorum { raise: false })));
        for refused in [
            topology(&[], 0, Fencing::Raise),
            topology(&three, 1, Fencing::Raise),
            // The same server twice would be one vote counted as two.
            topology(
                &nodes(&["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:1"]),
                0,
                Fencing::Raise,
            ),
        ] {
            assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
        }
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn a_cluster_is_one_node_without_replica_confirmation() {
        let cluster = [Node::cluster(&["redis://127.0.0.1:1"]).unwrap()];
        assert!(matches!(topology(&cluster, 0, Fencing::Raise), Ok(Topology::Single { confirm: None })));
        assert!(matches!(topology(&cluster, 1, Fencing::Raise), Err(Error::Config(_))));
    }

    #[cfg(not(feature = "cluster"))]
    #[test]
    fn without_the_feature_a_cluster_is_a_configuration_error() {
        assert!(matches!(Node::cluster(&["redis://127.0.0.1:1"]), Err(Error::Config(_))));
    }
}
