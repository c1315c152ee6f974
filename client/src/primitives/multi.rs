//! Several keys at once, all or nothing: [`Locker::acquire_all`] and
//! [`Locker::try_acquire_all`] hand back a lease on every key, each with its own fence, or no
//! lease at all.
//!
//! **No deadlock.** Every caller takes the keys in one order, the keys' byte order, whatever
//! order it named them in. Two callers asking for `{a, b}` and `{b, a}` both take `a` first, so
//! neither waits for `a` while holding `b`: the one that waits holds nothing the other needs.
//! (Taking them in each caller's own order would let each hold one key and wait forever for
//! the other.)
//!
//! **No partial holds.** A key refused (busy past the wait, an error) releases every key
//! already taken before the call returns, so the caller never holds a subset. The keys are
//! taken one after another, not in one atomic step: while a call is under way, another client
//! may see some of its keys held and not yet the others, and a process that dies mid-call
//! leaves the keys it took until their ttl ends, as for any lease.
//!
//! **Every lease valid on return.** A key that waited long lets the leases taken before it
//! age; each one that used more than a quarter of its validity is renewed before the call
//! returns, so all of them are good for most of a ttl.
//!
//! The keys may live anywhere the locker reaches: one server, different slots of a Redis
//! Cluster, a Redlock majority per key.

use std::collections::BTreeSet;
use std::time::Instant;

use futures::future::join_all;

use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::error::Error;
use crate::primitives::locker::Locker;

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
