//! What users hold: the [`locker`] (one server, a cluster, or a Redlock), the [`keepalive`]
//! that renews a lease, the failure [`policy`], the [`election`], the [`semaphore`] and the
//! [`read_write`] lock built on a locker, the [`session`]s that keep many leases alive at once, leases on [`multi`]ple keys at once, the [`periodic`] jobs' records, and the [`listing`] of held keys. Each asks the acquisition layer for leases;
//! none knows the topology.

pub(crate) mod election;
pub(crate) mod keepalive;
pub(crate) mod listing;
pub(crate) mod locker;
pub(crate) mod multi;
pub(crate) mod periodic;
pub(crate) mod policy;
pub(crate) mod read_write;
pub(crate) mod semaphore;
pub(crate) mod session;
