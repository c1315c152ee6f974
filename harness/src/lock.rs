//! Reading the module's state straight from a server, bypassing the client under test:
//! `FENCEDLOCK.STATUS` decoded and checked, and the `INFO fencedlock` counters.
//!
//! The reply's shape and its rules live in the protocol crate ([`LockStatus::decode`]); this
//! only takes the reply out of a [`redis::Value`].

use std::time::{Duration, Instant};

use fencedlock_protocol::command::STATUS;
use fencedlock_protocol::{LockStatus, SemaphoreStatus};
use redis::{ToRedisArgs, Value};

use crate::reply::error_text;
use crate::server::Server;

/// A `STATUS` reply decoded: `Ok(None)` for nil, `Err` (naming the reply) for one that breaks
/// the contract: not `[int, int, int]` or `[int, int, int, bulk label]`, or a status
/// [`LockStatus::decode`] refuses.
pub fn try_decode_status(reply: &Value) -> Result<Option<LockStatus>, String> {
    let decode = |numbers, label| LockStatus::decode(numbers, label).map(Some).map_err(|e| e.to_string());
    match reply {
        Value::Nil => Ok(None),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(fence), Value::Int(held), Value::Int(pttl)] => decode([*fence, *held, *pttl], None),
            [Value::Int(fence), Value::Int(held), Value::Int(pttl), Value::BulkString(label)] => {
                decode([*fence, *held, *pttl], Some(label.clone()))
            }
            _ => Err(format!("STATUS must be [fence, held, pttl] or [fence, held, pttl, label]: {reply:?}")),
        },
        other => Err(format!("STATUS replied {other:?}")),
    }
}

/// A `STATUS` reply decoded, `None` for nil. Panics on a reply that breaks the contract, so
/// every test that reads a status also checks its shape.
pub fn decode_status(reply: &Value) -> Option<LockStatus> {
    try_decode_status(reply).unwrap_or_else(|why| panic!("{why}"))
}

/// A `STATUS` reply of any lock key seen as a semaphore: a semaphore's `[fence, holders,
/// permits, [[fence, pttl_ms, label or nil], ...]]` decoded and checked
/// ([`SemaphoreStatus::decode`]), a mutex's reply as one permit; `Ok(None)` for nil, `Err`
/// (naming the reply) for one that breaks the contract.
pub fn try_decode_semaphore_status(reply: &Value) -> Result<Option<SemaphoreStatus>, String> {
    let Value::Array(items) = reply else { return Ok(try_decode_status(reply)?.map(SemaphoreStatus::from)) };
    let [Value::Int(fence), Value::Int(count), Value::Int(permits), Value::Array(entries)] = items.as_slice()
    else {
        return Ok(try_decode_status(reply)?.map(SemaphoreStatus::from));
    };
    let holders = entries
        .iter()
        .map(|entry| match entry {
            Value::Array(e) => match e.as_slice() {
                [Value::Int(f), Value::Int(pttl), Value::Nil] => Ok(([*f, *pttl], None)),
                [Value::Int(f), Value::Int(pttl), Value::BulkString(label)] => {
                    Ok(([*f, *pttl], Some(label.clone())))
                }
                _ => Err(format!("a holder is [fence, pttl_ms, label or nil]: {reply:?}")),
            },
            _ => Err(format!("a holder is [fence, pttl_ms, label or nil]: {reply:?}")),
        })
        .collect::<Result<Vec<_>, String>>()?;
    SemaphoreStatus::decode([*fence, *count, *permits], holders).map(Some).map_err(|e| e.to_string())
}

/// Waits (async, bounded by `limit`) until no server in `servers` holds `key`, e.g. for a
/// release a dropped lease sends in the background. Panics naming the servers still holding.
pub async fn wait_released(servers: &[&Server], key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let holding: Vec<String> = servers.iter().filter(|s| s.lock_held(key)).map(|s| s.addr()).collect();
        if holding.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "after {limit:?} these servers still hold {key:?}: {holding:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Server {
    /// `FENCEDLOCK.STATUS key`, decoded and checked ([`decode_status`]); `None` for a key
    /// without lock state. Panics on an error reply.
    pub fn lock_status(&self, key: impl ToRedisArgs) -> Option<LockStatus> {
        let reply: Value = self
            .query(redis::cmd(STATUS.name).arg(key))
            .unwrap_or_else(|e| panic!("STATUS on {}: {}", self.addr(), error_text(&e)));
        decode_status(&reply)
    }

    /// `FENCEDLOCK.STATUS key` seen as a semaphore ([`try_decode_semaphore_status`]: a mutex
    /// is one permit); `None` for a key without lock state. Panics on an error reply or a
    /// reply that breaks the contract.
    pub fn semaphore_status(&self, key: impl ToRedisArgs) -> Option<SemaphoreStatus> {
        let reply: Value = self
            .query(redis::cmd(STATUS.name).arg(key))
            .unwrap_or_else(|e| panic!("STATUS on {}: {}", self.addr(), error_text(&e)));
        try_decode_semaphore_status(&reply).unwrap_or_else(|why| panic!("{why}"))
    }

    /// The public label of the lease holding `key` ([`Server::lock_status`]); `None` when the
    /// key is free, missing, or held without one.
    pub fn lock_label(&self, key: impl ToRedisArgs) -> Option<Vec<u8>> {
        self.lock_status(key).and_then(|st| st.label)
    }

    /// Whether this server shows an unexpired lease on `key` ([`Server::lock_status`]).
    pub fn lock_held(&self, key: impl ToRedisArgs) -> bool {
        self.lock_status(key).is_some_and(|st| st.held)
    }

    /// One numeric `INFO fencedlock` field, e.g. `fencedlock_high_water_mark`; panics if it
    /// is missing or not a number.
    pub fn fencedlock_counter(&self, name: &str) -> u64 {
        let info = self.info("fencedlock");
        let value = info
            .get(name)
            .unwrap_or_else(|| panic!("INFO fencedlock on {} has no {name}: {info:?}", self.addr()));
        value.parse().unwrap_or_else(|e| panic!("{name}={value:?} is not a number: {e}"))
    }

    /// The server's fence high-water mark (`fencedlock_high_water_mark`).
    pub fn high_water(&self) -> u64 {
        self.fencedlock_counter("fencedlock_high_water_mark")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(f: i64, h: i64, p: i64) -> Value {
        Value::Array(vec![Value::Int(f), Value::Int(h), Value::Int(p)])
    }

    #[test]
    fn decodes_status_replies() {
        assert_eq!(decode_status(&Value::Nil), None);
        let held =
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(250)), label: None };
        assert_eq!(decode_status(&reply(7, 1, 250)), Some(held.clone()));
        assert_eq!(
            decode_status(&reply(7, 0, -1)),
            Some(LockStatus { fence: 7, held: false, remaining: None, label: None })
        );
        let Value::Array(mut items) = reply(7, 1, 250) else { unreachable!() };
        items.push(Value::BulkString(b"node-a".to_vec()));
        assert_eq!(
            decode_status(&Value::Array(items.clone())),
            Some(LockStatus { label: Some(b"node-a".to_vec()), ..held })
        );
        items[3] = Value::Int(1);
        assert!(try_decode_status(&Value::Array(items)).is_err(), "a label is a bulk string");
        assert!(try_decode_status(&Value::Array(vec![Value::Int(7), Value::Int(1)])).is_err());
        assert!(try_decode_status(&Value::Int(7)).is_err());
    }

    #[test]
    fn decodes_semaphore_status_replies() {
        let holder = |f: i64, ms: i64, label: Value| Value::Array(vec![Value::Int(f), Value::Int(ms), label]);
        let semaphore = |holders: Vec<Value>| {
            let n = holders.len() as i64;
            Value::Array(vec![Value::Int(9), Value::Int(n), Value::Int(3), Value::Array(holders)])
        };
        let st = try_decode_semaphore_status(&semaphore(vec![
            holder(4, 250, Value::Nil),
            holder(9, 10, Value::BulkString(b"w-1".to_vec())),
        ]))
        .expect("valid")
        .expect("a key");
        assert_eq!((st.fence, st.permits, st.free()), (9, 3, 1));
        assert_eq!(st.holders[1].label.as_deref(), Some(&b"w-1"[..]));
        let mutex = try_decode_semaphore_status(&reply(7, 1, 250)).expect("valid").expect("a key");
        assert_eq!((mutex.permits, mutex.holders.len()), (1, 1), "a mutex is one permit");
        assert_eq!(try_decode_semaphore_status(&Value::Nil), Ok(None));
        assert!(try_decode_semaphore_status(&semaphore(vec![holder(4, 250, Value::Int(1))])).is_err());
        assert!(try_decode_semaphore_status(&semaphore(vec![
            holder(9, 1, Value::Nil),
            holder(4, 1, Value::Nil)
        ]))
        .is_err());
    }

    #[test]
    #[should_panic(expected = "a free lock has pttl -1")]
    fn a_free_lock_with_a_pttl_breaks_the_contract() {
        decode_status(&reply(7, 0, 5));
    }
}
