//! A small Redis Cluster of harness servers, created with `redis-cli --cluster create`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::flavor::Flavor;
use crate::paths::redis_cli;
use crate::server::{Server, ServerBuilder};
use crate::tls::{Certs, ClientAuth};
use crate::wait::poll;

/// How long the cluster may take to agree on `cluster_state:ok` everywhere.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Configures and starts a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    masters: usize,
    replicas_per_master: usize,
    node: ServerBuilder,
    /// The CA to create the cluster with over TLS, for a cluster built with [`ClusterBuilder::tls`].
    tls_ca: Option<PathBuf>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder { masters: 3, replicas_per_master: 0, node: ServerBuilder::new(), tls_ca: None }
    }
}

impl ClusterBuilder {
    /// Three masters, no replicas, flavor from the environment, module loaded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of masters (redis-cli requires at least 3).
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// Replicas per master.
    pub fn replicas_per_master(mut self, n: usize) -> Self {
        self.replicas_per_master = n;
        self
    }

    /// Server flavor of every node.
    pub fn flavor(mut self, flavor: Flavor) -> Self {
        self.node = self.node.flavor(flavor);
        self
    }

    /// Every node also on TLS with `certs`' server certificate, the cluster bus and
    /// replication included (`tls-cluster yes`), so TLS clients are sent to TLS ports; reach
    /// it at [`Cluster::tls_urls`]. Redis flavor only (see [`ServerBuilder::tls`]).
    ///
    /// Under `tls-cluster yes` the bus listens at the TLS port + 10000, so the cluster is
    /// created over the TLS ports: created over the plaintext ones, its nodes would look for
    /// each other's buses where none listens. The bus always asks the connecting node for a
    /// certificate (whatever `tls-auth-clients` says), so nodes present the test client's.
    pub fn tls(mut self, certs: &Certs) -> Self {
        self.tls_ca = Some(certs.ca());
        let (cert, key) = certs.client();
        self.flavor(Flavor::Redis).node(|b| {
            b.tls(certs, ClientAuth::None)
                .arg("tls-cluster", "yes")
                .arg("tls-replication", "yes")
                .arg("tls-client-cert-file", cert.display().to_string())
                .arg("tls-client-key-file", key.display().to_string())
        })
    }

    /// Customise every node (config directives, module args), e.g.
    /// `.node(|b| b.arg("cluster-node-timeout", "2000"))`.
    pub fn node(mut self, f: impl FnOnce(ServerBuilder) -> ServerBuilder) -> Self {
        self.node = f(self.node);
        self
    }

    /// Start the nodes, create the cluster and wait until every node reports
    /// `cluster_state:ok` and knows every other node. Panics with details on failure.
    pub fn start(self) -> Cluster {
        let total = self.masters * (1 + self.replicas_per_master);
        let node = self.node.cluster_enabled().arg("cluster-node-timeout", "3000");
        let nodes: Vec<Server> = (0..total).map(|_| node.clone().start()).collect();
        // Bounded: nodes that cannot reach each other's buses leave redis-cli waiting forever.
        let mut create = Command::new("timeout");
        create.arg(CLUSTER_TIMEOUT.as_secs().to_string()).arg(redis_cli());
        if let Some(ca) = &self.tls_ca {
            create.arg("--tls").arg("--cacert").arg(ca);
        }
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(if self.tls_ca.is_some() { n.tls_addr() } else { n.addr() });
        }
        create.arg("--cluster-replicas").arg(self.replicas_per_master.to_string()).arg("--cluster-yes");
        let out = create.output().unwrap_or_else(|e| panic!("run redis-cli --cluster create: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster
    }
}

/// Running cluster nodes; dropped together.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    /// A builder with the defaults (3 masters, no replicas).
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::new()
    }

    /// Every node, masters and replicas, in start order.
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// Mutable access (to stop, kill or restart one node).
    pub fn nodes_mut(&mut self) -> &mut [Server] {
        &mut self.nodes
    }

    /// `redis://` URLs of every node: the seed list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// `rediss://` URLs of every node of a cluster built with [`ClusterBuilder::tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::tls_url).collect()
    }

    /// Wait until every running node reports `cluster_state:ok`, all slots assigned and
    /// every node known, and every replica finished its initial sync (a master lists a
    /// replica as `online` while the replica may still be loading the RDB).
    pub fn wait_ok(&self) {
        let total = self.nodes.len().to_string();
        for n in &self.nodes {
            poll(&format!("cluster_state:ok on {}", n.addr()), CLUSTER_TIMEOUT, || {
                let Ok(text) = n.query::<String>(redis::cmd("CLUSTER").arg("INFO")) else {
                    return false;
                };
                let info = crate::reply::parse_info(&text);
                info.get("cluster_state").map(String::as_str) == Some("ok")
                    && info.get("cluster_slots_ok").map(String::as_str) == Some("16384")
                    && info.get("cluster_known_nodes") == Some(&total)
            });
        }
        for n in &self.nodes {
            poll(&format!("replica {} in sync", n.addr()), CLUSTER_TIMEOUT, || {
                let info = n.info("replication");
                info.get("role").map(String::as_str) != Some("slave")
                    || (info.get("master_link_status").map(String::as_str) == Some("up")
                        && info.get("master_sync_in_progress").map(String::as_str) == Some("0"))
            });
        }
    }
}
