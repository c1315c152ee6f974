//! `STATUS` for a key of either kind, its reply taken apart and checked against the
//! contract's shapes.

use std::time::Duration;

use fencedlock_protocol::request;
use fencedlock_protocol::{LockStatus, PermitReply, SemaphoreStatus};
use redis::FromRedisValue;

use super::Node;
use crate::error::Error;

impl Node {
    /// `FENCEDLOCK.STATUS key`: the key's fence and whether it is held; `None` for a key
    /// without lock state. Never reveals the token. A reply that breaks the contract's shape
    /// is [`Error::BadReply`]; a semaphore key (several holders, which a [`LockStatus`] cannot
    /// show) is [`Error::Semaphore`]: read it with [`Node::semaphore_status`].
    pub async fn status(&self, key: &str) -> Result<Option<LockStatus>, Error> {
        match self.any_status(key).await? {
            None => Ok(None),
            Some(Status::Lock(status)) => Ok(Some(status)),
            Some(Status::Semaphore(status)) => Err(Error::Semaphore {
                node: self.name.clone(),
                key: key.to_owned(),
                permits: status.permits,
            }),
        }
    }

    /// `FENCEDLOCK.STATUS key` for a key of either kind: a semaphore's permits and holders
    /// (each holder's fence, time left and label; never a token), a mutex key shown as a
    /// semaphore of one permit; `None` for a key without lock state.
    pub async fn semaphore_status(&self, key: &str) -> Result<Option<SemaphoreStatus>, Error> {
        Ok(self.any_status(key).await?.map(|status| match status {
            Status::Lock(status) => SemaphoreStatus::from(status),
            Status::Semaphore(status) => status,
        }))
    }

    async fn any_status(&self, key: &str) -> Result<Option<Status>, Error> {
        Error::check_key(key)?;
        let engine = self.engine_now().await.map_err(|f| self.error("STATUS", f))?;
        let cmd = engine.call(&request::Status { key: key.as_bytes() });
        let reply: Option<StatusReply> = self.query(&cmd, None).await.map_err(|f| self.error("STATUS", f))?;
        self.decode_status(reply)
    }

    pub(super) fn decode_status(&self, reply: Option<StatusReply>) -> Result<Option<Status>, Error> {
        reply
            .map(|reply| match reply {
                StatusReply::Lock(numbers, label) => LockStatus::decode(numbers, label).map(Status::Lock),
                StatusReply::Semaphore(head, holders) => {
                    SemaphoreStatus::decode(head, holders).map(Status::Semaphore)
                }
            })
            .transpose()
            .map_err(|source| Error::BadReply { node: self.name.clone(), source })
    }
}

/// A decoded `STATUS` reply of either shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Status {
    Lock(LockStatus),
    Semaphore(SemaphoreStatus),
}

impl Status {
    /// How long until a new holder fits by the leases' expiry alone: zero for a free key
    /// or a semaphore with a free permit, else the time left on the lease that ends first
    /// (for readers: the first a waiting writer is woken at, by its release or expiry).
    pub(super) fn held_for(&self) -> Duration {
        match self {
            Status::Lock(status) => status.remaining.unwrap_or_default(),
            Status::Semaphore(status) if !status.is_shared() && status.free() > 0 => Duration::ZERO,
            Status::Semaphore(status) => {
                status.holders.iter().map(|holder| holder.remaining).min().unwrap_or_default()
            }
        }
    }
}

/// A `STATUS` reply taken apart. A mutex key: its three integers, then its label (a fourth
/// element, a bulk string, sent while a labelled lease holds the key). A semaphore key: three
/// integers, then an array of holders, each `[fence, pttl_ms, label or nil]`. The rules are
/// [`LockStatus::decode`]'s and [`SemaphoreStatus::decode`]'s.
pub(super) enum StatusReply {
    Lock([i64; 3], Option<Vec<u8>>),
    Semaphore([i64; 3], Vec<PermitReply<Vec<u8>>>),
}

impl FromRedisValue for StatusReply {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let redis::Value::Array(mut items) = v else {
            return Err(format!("STATUS must reply an array, not {v:?}").into());
        };
        let fourth = if items.len() == 4 { items.pop() } else { None };
        let head = <[i64; 3]>::from_redis_value(redis::Value::Array(items))?;
        match fourth {
            Some(redis::Value::Array(holders)) => {
                let holders = holders
                    .into_iter()
                    .map(|holder| {
                        let (fence, pttl, label) = <(i64, i64, Option<Vec<u8>>)>::from_redis_value(holder)?;
                        Ok(([fence, pttl], label))
                    })
                    .collect::<Result<_, redis::ParsingError>>()?;
                Ok(StatusReply::Semaphore(head, holders))
            }
            label => Ok(StatusReply::Lock(head, label.map(Vec::<u8>::from_redis_value).transpose()?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fencedlock_protocol::PermitStatus;

    #[test]
    fn status_replies_are_decoded_and_broken_ones_are_typed_errors() {
        let node = Node::new("redis://127.0.0.1:1").expect("a valid URL");
        assert_eq!(node.decode_status(None).ok(), Some(None));
        let ints = |v: [i64; 3]| v.map(redis::Value::Int).to_vec();
        let parse = |items: Vec<redis::Value>| {
            Option::<StatusReply>::from_redis_value(redis::Value::Array(items)).expect("a STATUS shape")
        };
        let held =
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(250)), label: None };
        assert_eq!(node.decode_status(parse(ints([7, 1, 250]))).ok(), Some(Some(Status::Lock(held.clone()))));
        let labelled = [ints([7, 1, 250]), vec![redis::Value::BulkString(b"node-a".to_vec())]].concat();
        let with_label = LockStatus { label: Some(b"node-a".to_vec()), ..held };
        assert_eq!(node.decode_status(parse(labelled)).ok(), Some(Some(Status::Lock(with_label))));
        for shape in [ints([7, 1, 250])[..2].to_vec(), [ints([7, 1, 250]), ints([1, 2, 3])].concat()] {
            assert!(Option::<StatusReply>::from_redis_value(redis::Value::Array(shape)).is_err());
        }
        let free_with_label = [ints([7, 0, -1]), vec![redis::Value::BulkString(b"x".to_vec())]].concat();
        let broken_ones = [[0, 0, -1], [7, 2, -1], [7, 1, -1], [7, 0, 5]].map(ints);
        for broken in broken_ones.into_iter().chain([free_with_label]) {
            let err = node.decode_status(parse(broken)).expect_err("broken");
            assert!(matches!(&err, Error::BadReply { node, .. } if node == "127.0.0.1:1"), "{err:?}");
            assert!(!err.is_retryable());
        }
    }

    fn holder(fence: i64, pttl: i64, label: Option<&[u8]>) -> redis::Value {
        let label = label.map_or(redis::Value::Nil, |l| redis::Value::BulkString(l.to_vec()));
        redis::Value::Array(vec![redis::Value::Int(fence), redis::Value::Int(pttl), label])
    }

    fn semaphore_reply(head: [i64; 3], holders: Vec<redis::Value>) -> Option<StatusReply> {
        let items = [head.map(redis::Value::Int).to_vec(), vec![redis::Value::Array(holders)]].concat();
        Option::<StatusReply>::from_redis_value(redis::Value::Array(items)).expect("a STATUS shape")
    }

    #[test]
    fn semaphore_status_replies_are_decoded_and_broken_ones_are_typed_errors() {
        let node = Node::new("redis://127.0.0.1:1").expect("a valid URL");
        let reply = semaphore_reply([9, 2, 3], vec![holder(4, 100, Some(b"w-1")), holder(9, 250, None)]);
        let expected = SemaphoreStatus {
            fence: 9,
            permits: 3,
            holders: vec![
                PermitStatus {
                    fence: 4,
                    remaining: Duration::from_millis(100),
                    label: Some(b"w-1".to_vec()),
                },
                PermitStatus { fence: 9, remaining: Duration::from_millis(250), label: None },
            ],
        };
        assert_eq!(node.decode_status(reply).ok(), Some(Some(Status::Semaphore(expected))));
        let idle = semaphore_reply([9, 0, 3], vec![]);
        let idle_status = SemaphoreStatus { fence: 9, permits: 3, holders: vec![] };
        assert_eq!(node.decode_status(idle).ok(), Some(Some(Status::Semaphore(idle_status))));
        // Counts that disagree, fences out of order, more holders than permits.
        for (head, holders) in [
            ([9, 1, 3], vec![holder(4, 100, None), holder(9, 250, None)]),
            ([9, 2, 3], vec![holder(9, 100, None), holder(4, 250, None)]),
            ([9, 2, 1], vec![holder(4, 100, None), holder(9, 250, None)]),
            ([9, 1, 3], vec![holder(10, 100, None)]),
        ] {
            let err = node.decode_status(semaphore_reply(head, holders)).expect_err("broken");
            assert!(matches!(err, Error::BadReply { .. }), "{err:?}");
        }
        // A holder that is not [fence, pttl, label]: a parse error, not a panic.
        let items = [
            [9, 1, 3].map(redis::Value::Int).to_vec(),
            vec![redis::Value::Array(vec![redis::Value::Int(1)])],
        ];
        assert!(Option::<StatusReply>::from_redis_value(redis::Value::Array(items.concat())).is_err());
    }
}
