//! Several keys at once, all or nothing: [`Locker::acquire_all`] and
//! [`Locker::try_acquire_all`] hand back a lease on every key, each with its own fence, or no
//! lease at all.
//!
//! **In one command where the server can.** A locker on one server (without replica
//! confirmation) takes the whole set in one `ACQUIREALL` for one token where its module serves
//! `FENCEDLOCK.ACQUIREALL`, or its Functions library `fencedlock_acquireall` (library version
//! 7 on): the server grants every key or none, so no other client ever sees part of the set
//! held, and a process that dies mid-call leaves nothing half-taken. The library needs the
//! keys in one slot (hash tags) on any server, the module on a Redis Cluster. The command
//! never waits, so the call retries whole attempts with backoff until the maximum wait; a
//! caller that waits holds nothing, so overlapping sets cannot deadlock.
//!
//! **Key by key elsewhere** (Redlock, replica confirmation, keys of several slots where one is
//! needed, a module older than `ACQUIREALL`):
//!
//! - *No deadlock.* Every caller takes the keys in one order, the keys' byte order, whatever
//!   order it named them in. Two callers asking for `{a, b}` and `{b, a}` both take `a` first,
//!   so neither waits for `a` while holding `b`: the one that waits holds nothing the other
//!   needs. (Taking them in each caller's own order would let each hold one key and wait
//!   forever for the other.)
//! - *No partial holds on return.* A key refused (busy past the wait, an error) releases every
//!   key already taken before the call returns, so the caller never holds a subset. The keys
//!   are taken one after another, not in one atomic step: while a call is under way, another
//!   client may see some of its keys held and not yet the others, and a process that dies
//!   mid-call leaves the keys it took until their ttl ends, as for any lease.
//! - *Every lease valid on return.* A key that waited long lets the leases taken before it
//!   age; each one that used more than a quarter of its validity is renewed before the call
//!   returns, so all of them are good for most of a ttl.
//!
//! The keys may live anywhere the locker reaches: one server, different slots of a Redis
//! Cluster, a Redlock majority per key.

use std::collections::BTreeSet;
use std::time::Instant;

use fencedlock_protocol::cluster::key_slot;
use fencedlock_protocol::limits::MAX_ACQUIRE_KEYS;
use fencedlock_protocol::AcquireAll;
use futures::future::join_all;

use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::error::Error;
use crate::metrics;
use crate::node::{Failure, Node};
use crate::primitives::locker::Locker;
use crate::token::Token;

/// A lease on each of several keys, taken together ([`Locker::acquire_all`]).
#[derive(Debug)]
pub struct Leases {
    /// In the order the caller named the keys.
    leases: Vec<Lease>,
}

impl Leases {
    /// The leases, in the order the keys were named.
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.leases.iter()
    }

    /// The lease on `key`.
    pub fn get(&self, key: &str) -> Option<&Lease> {
        self.leases.iter().find(|lease| lease.key() == key)
    }

    /// `Err(Error::LeaseLost)` as soon as any of the leases is.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        self.leases.iter().try_for_each(Lease::ensure_valid)
    }

    /// The leases, to keep alive or release one by one.
    pub fn into_vec(self) -> Vec<Lease> {
        self.leases
    }

    /// Releases every lease; `Ok(true)` if each was still held. Every release is sent even
    /// if one fails; the first error is returned.
    pub async fn release(self) -> Result<bool, Error> {
        let released = join_all(self.leases.into_iter().map(Lease::release)).await;
        released.into_iter().try_fold(true, |all, held| Ok(all && held?))
    }
}

impl Locker {
    /// A lease on every key of `keys`, waiting for each up to the locker's
    /// [`max_wait`](crate::LockConfig::max_wait) in all, or none (see the module docs for
    /// the order that rules out deadlock). [`Error::Config`] for no keys or a key named twice;
    /// otherwise the first key's error that stopped the call.
    pub async fn acquire_all(&self, keys: &[&str]) -> Result<Leases, Error> {
        self.take_all(keys, Attempts::UntilMaxWait).await
    }

    /// [`acquire_all`](Self::acquire_all) with one attempt per key: [`Error::Contended`] as
    /// soon as one is held elsewhere, nothing kept.
    pub async fn try_acquire_all(&self, keys: &[&str]) -> Result<Leases, Error> {
        self.take_all(keys, Attempts::Once).await
    }

    async fn take_all(&self, keys: &[&str], attempts: Attempts) -> Result<Leases, Error> {
        let order = canonical_order(keys)?;
        let config = self.config();
        let give_up = Instant::now() + config.max_wait();
        let terms = Terms::mutex(config.label());
        if let Some(node) = self.one_command_server(keys).await {
            return self.take_at_once(node, keys, attempts, give_up, terms).await;
        }
        let mut taken: Vec<Option<Lease>> = keys.iter().map(|_| None).collect();
        for i in order {
            let token = config.new_token();
            match Lease::take(self.coordinator(), keys[i], token, attempts, give_up, terms).await {
                Ok(lease) => taken[i] = Some(lease),
                Err(err) => {
                    give_back(taken).await;
                    return Err(err);
                }
            }
        }
        let mut leases: Vec<Lease> = taken.into_iter().flatten().collect();
        if let Err(err) = refresh(&mut leases).await {
            give_back(leases.into_iter().map(Some).collect()).await;
            return Err(err);
        }
        Ok(Leases { leases })
    }
}

impl Locker {
    /// The server that takes `keys` in one `ACQUIREALL`, if there is one (see the module docs).
    /// A server that cannot be asked now is passed over: the keys are then taken one by one,
    /// with the retries of each key's acquisition.
    async fn one_command_server(&self, keys: &[&str]) -> Option<&Node> {
        let node = self.coordinator().plain_single()?;
        if keys.len() > MAX_ACQUIRE_KEYS {
            return None;
        }
        let one_slot = keys.iter().all(|key| key_slot(key.as_bytes()) == key_slot(keys[0].as_bytes()));
        node.serves_acquire_all(one_slot).await.ok()?.then_some(node)
    }

    /// `keys` in `ACQUIREALL`s for one token on `node`: once, or with backoff until granted, an
    /// error is final, or `give_up`. Every attempt sends the same token, so one whose reply was
    /// lost and that is sent again gets the same fences; an acquisition that fails after such
    /// an attempt releases every key.
    async fn take_at_once(
        &self,
        node: &Node,
        keys: &[&str],
        attempts: Attempts,
        give_up: Instant,
        terms: Terms<'_>,
    ) -> Result<Leases, Error> {
        keys.iter().try_for_each(|key| Error::check_key(key))?;
        let config = self.config();
        let token = config.new_token();
        let each = terms.request(keys[0], &token, config.ttl_ms()).acquire;
        let request = AcquireAll::new(keys.iter().map(|key| key.as_bytes()).collect(), each);
        let mut round = 0u32;
        loop {
            let sent = Instant::now();
            let err = match node.acquire_all(&request).await {
                Ok(Some(fences)) => match self.leases_of(keys, &token, &fences, sent) {
                    Some(leases) => return Ok(leases),
                    // Granted too late to be of use: dropping the leases gives them back.
                    None => node.error("ACQUIREALL", Failure::TimedOut),
                },
                Ok(None) => Error::Contended { key: keys.join(" ") },
                Err(failure) => node.error("ACQUIREALL", failure),
            };
            metrics::attempt_failed(&err);
            let now = Instant::now();
            if attempts == Attempts::Once || !err.is_retryable() || now >= give_up {
                if matches!(err, Error::Contended { .. }) {
                    return Err(Error::Contended { key: busy_key(node, keys).await });
                }
                // The set may have been granted with the answer lost; RELEASE by our token
                // cannot hurt another holder.
                give_back_set(node, keys, &token).await;
                return Err(err);
            }
            let delay = config.backoff().delay(round, &mut rand::rng());
            tracing::debug!(?keys, round, ?delay, error = %err, "a key of the set is busy, retrying");
            tokio::time::sleep(delay.min(give_up - now)).await;
            round = round.saturating_add(1);
        }
    }

    /// The leases of a set granted with `fences` for a request sent at `sent`; `None` (each
    /// released as it is dropped) when the grant came too late to leave any validity.
    fn leases_of(&self, keys: &[&str], token: &Token, fences: &[u64], sent: Instant) -> Option<Leases> {
        let coordinator = self.coordinator();
        let leases: Vec<Lease> = keys
            .iter()
            .zip(fences)
            .map(|(key, &fence)| {
                let grant = coordinator.rounds.single_grant(key, fence, sent);
                Lease::from_grant(coordinator, key, token.clone(), grant)
            })
            .collect();
        (leases.len() == keys.len() && leases.iter().all(Lease::is_valid)).then_some(Leases { leases })
    }
}

/// The key of a refused set to name in the error: the first one held now (`STATUS`), or
/// every key when none is (the set was refused for waiters, or freed since).
async fn busy_key(node: &Node, keys: &[&str]) -> String {
    for key in keys {
        if let Ok(Some(status)) = node.semaphore_status(key).await {
            if !status.holders.is_empty() {
                return (*key).to_owned();
            }
        }
    }
    keys.join(" ")
}

/// Releases every key of a set that may have been granted to `token`.
async fn give_back_set(node: &Node, keys: &[&str], token: &Token) {
    for result in join_all(keys.iter().map(|key| node.release(key, token))).await {
        if let Err(failure) = result {
            let err = node.error("RELEASE", failure);
            tracing::debug!(error = %err, "release after a failed acquire_all; the lease expires after its ttl");
        }
    }
}

/// The positions of `keys` in the order every caller takes them (by key bytes); refuses what
/// cannot be taken all at once.
fn canonical_order(keys: &[&str]) -> Result<Vec<usize>, Error> {
    if keys.is_empty() {
        return Err(Error::Config("acquire_all needs at least one key".into()));
    }
    let distinct: BTreeSet<&str> = keys.iter().copied().collect();
    if distinct.len() != keys.len() {
        return Err(Error::Config("acquire_all: a key is named twice (one lease per key)".into()));
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i].as_bytes());
    Ok(order)
}

/// Renews each lease that used more than a quarter of its validity while later keys were
/// taken, so that all of them are good for most of a ttl on return.
async fn refresh(leases: &mut [Lease]) -> Result<(), Error> {
    for lease in leases.iter_mut() {
        let window = lease.report().validity.unwrap_or_default();
        if lease.remaining() < window - window / 4 {
            lease.renew().await?;
        }
    }
    Ok(())
}

/// Releases what was taken of an acquisition that failed (in the background where a release
/// does not answer: dropping an armed lease releases it).
async fn give_back(taken: Vec<Option<Lease>>) {
    for result in join_all(taken.into_iter().flatten().map(Lease::release)).await {
        if let Err(err) = result {
            tracing::debug!(error = %err, "release after a failed acquire_all; the lease expires after its ttl");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_caller_takes_the_keys_in_one_order() {
        assert_eq!(canonical_order(&["b", "a", "c"]).unwrap(), vec![1, 0, 2]);
        assert_eq!(canonical_order(&["a", "c", "b"]).unwrap(), vec![0, 2, 1]);
        // Two callers naming the same keys in opposite orders take them in the same order.
        let (x, y) = (["k:2", "k:10", "k:1"], ["k:1", "k:2", "k:10"]);
        let take = |keys: &[&'static str]| {
            canonical_order(keys).unwrap().into_iter().map(|i| keys[i]).collect::<Vec<_>>()
        };
        assert_eq!(take(&x), take(&y));
    }

    #[test]
    fn no_keys_or_a_key_twice_is_refused() {
        assert!(matches!(canonical_order(&[]), Err(Error::Config(_))));
        assert!(matches!(canonical_order(&["a", "b", "a"]), Err(Error::Config(_))));
    }
}
