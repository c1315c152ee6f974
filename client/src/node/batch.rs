//! Many renewals in one round trip: a session's leases renewed as one pipeline on the shared
//! connection (on a cluster, one pipeline per slot, sent together: a cluster pipeline must stay
//! within a slot). The server does the same work per lease as for a lone `RENEW`; what the
//! pipeline saves is the round trips and the server's read and write system calls.

use std::collections::BTreeMap;

use fencedlock_protocol::cluster::key_slot;
use fencedlock_protocol::Renew;
use futures::future::join_all;
use redis::{Pipeline, RedisError};

use super::{deadlines, Failure, Node};
use crate::backend::{self, Engine};
use crate::token::Token;

impl Node {
    /// `FENCEDLOCK.RENEW` of each `(key, token)` for `ttl_ms`, in as few round trips as the
    /// topology allows: for each lease, whether we still held it, or the failure of its
    /// request (an answered error of its own, or the whole pipeline's).
    pub(crate) async fn renew_many(
        &self,
        leases: &[(&str, &Token)],
        ttl_ms: u64,
    ) -> Vec<Result<bool, Failure>> {
        let engine = match self.engine_now().await {
            Ok(engine) => engine,
            Err(failure) => return leases.iter().map(|_| Err(failure.clone())).collect(),
        };
        // Standalone: one pipeline. Cluster: one per slot, each routed to the slot's primary.
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, (key, _)) in leases.iter().enumerate() {
            let group = if self.is_cluster() { key_slot(key.as_bytes()) } else { 0 };
            groups.entry(group).or_default().push(i);
        }
        let sent =
            join_all(groups.values().map(|members| self.renew_group(engine, leases, members, ttl_ms))).await;
        let mut replies: Vec<Option<Result<bool, Failure>>> = leases.iter().map(|_| None).collect();
        for (members, answers) in groups.values().zip(sent) {
            for (&i, answer) in members.iter().zip(answers) {
                replies[i] = Some(answer);
            }
        }
        replies.into_iter().map(|reply| reply.unwrap_or(Err(Failure::TimedOut))).collect()
    }

    /// One pipeline of the renewals of `members` (indexes into `leases`), sent once more
    /// after loading the script where the server's cache lacked it.
    async fn renew_group(
        &self,
        engine: Engine,
        leases: &[(&str, &Token)],
        members: &[usize],
        ttl_ms: u64,
    ) -> Vec<Result<bool, Failure>> {
        let mut pipe = Pipeline::with_capacity(members.len());
        pipe.ignore_errors();
        for &i in members {
            let (key, token) = leases[i];
            pipe.add_command(engine.call(&Renew { key: key.as_bytes(), token: token.as_bytes(), ttl_ms }));
        }
        let mut answers = self.pipeline(&pipe).await;
        let reload = matches!(&answers, Ok(items) if items.iter().any(|item| matches!(item, Err(e) if backend::lacks_script(e))));
        if reload {
            answers = match self.query::<String>(&backend::script_load(), None).await {
                Ok(_) => self.pipeline(&pipe).await,
                Err(failure) => Err(failure),
            };
        }
        match answers {
            Ok(items) if items.len() == members.len() => members
                .iter()
                .zip(items)
                .map(|(&i, item)| {
                    item.map(|n| n == 1).map_err(|e| self.failure(e, Some(leases[i].1.as_bytes())))
                })
                .collect(),
            Ok(_) => members.iter().map(|_| Err(Failure::Redis(short_reply()))).collect(),
            Err(failure) => members.iter().map(|_| Err(failure.clone())).collect(),
        }
    }

    /// `pipe` on the shared connection within the node timeout, each command's own answer.
    async fn pipeline(&self, pipe: &Pipeline) -> Result<Vec<Result<i64, RedisError>>, Failure> {
        match deadlines::within(self.timeout, self.query_unbounded(pipe)).await {
            Ok(Ok(items)) => Ok(items),
            // Each command's error is its own item; this is the connection's (no token in it).
            Ok(Err(e)) => Err(self.failure(e, None)),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }
}

/// A pipeline answered with fewer replies than commands: a broken server or proxy.
fn short_reply() -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a pipeline's replies do not match its commands",
    ))
}
