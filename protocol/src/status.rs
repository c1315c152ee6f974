//! The `FENCEDLOCK.STATUS` reply: `[fence, held (0/1), pttl_ms or -1]`, then the label while a
//! labelled lease holds the key; `[fence, holders, permits, [[fence, pttl_ms, label or nil],
//! ...]]` for a semaphore key, and for a key held by read leases (`ACQUIRE … SHARED`) with
//! `permits` 0 ([`SHARED_PERMITS`]); nil for no lock state.

use std::fmt;
use std::time::Duration;

use crate::command::{capacity, label_len_ok, permits_ok, SHARED_PERMITS};

/// What `FENCEDLOCK.STATUS` says about a key. Never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStatus {
    /// The key's last fence; kept after release and expiry, so the next grant is higher.
    pub fence: u64,
    /// Whether an unexpired lease holds the key.
    pub held: bool,
    /// Time left on the lease by the server's clock (whole milliseconds), when held.
    pub remaining: Option<Duration>,
    /// The holder's public label (`ACQUIRE … LABEL label`), when held with one.
    pub label: Option<Vec<u8>>,
}

/// A `STATUS` reply that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusError {
    reply: [i64; 3],
    /// The length of the label the reply carried, if any (its bytes are not repeated here).
    label_len: Option<usize>,
    why: &'static str,
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "STATUS replied {:?}", self.reply)?;
        if let Some(len) = self.label_len {
            write!(f, " with a label of {len} bytes")?;
        }
        write!(f, ": {}", self.why)
    }
}

impl std::error::Error for StatusError {}

impl LockStatus {
    /// The reply as the module sends it: three integers, and the label (a bulk string after
    /// them) when there is one.
    pub fn encode(&self) -> ([i64; 3], Option<&[u8]>) {
        let numbers = [
            as_int(u128::from(self.fence)),
            i64::from(self.held),
            self.remaining.map_or(-1, |left| as_int(left.as_millis())),
        ];
        (numbers, self.label.as_deref())
    }

    /// The reply decoded from its three integers and its fourth element, if it had one,
    /// checking every rule of the shape: a positive fence, `held` 0 or 1, a pttl (≥ 0) exactly
    /// when held and -1 otherwise, a label only when held and of an acceptable length.
    pub fn decode(reply: [i64; 3], label: Option<Vec<u8>>) -> Result<LockStatus, StatusError> {
        let label_len = label.as_ref().map(Vec::len);
        let broken = |why| Err(StatusError { reply, label_len, why });
        let [fence, held, pttl] = reply;
        let Ok(fence @ 1..) = u64::try_from(fence) else { return broken("the fence must be positive") };
        if label.as_deref().is_some_and(|label| !label_len_ok(label)) {
            return broken("a label has 1 to MAX_LABEL_LEN bytes");
        }
        match (held, u64::try_from(pttl)) {
            (1, Ok(ms)) => {
                Ok(LockStatus { fence, held: true, remaining: Some(Duration::from_millis(ms)), label })
            }
            (1, Err(_)) => broken("a held lease has a pttl"),
            (0, _) if label.is_some() => broken("only a held lease has a label"),
            (0, _) if pttl == -1 => Ok(LockStatus { fence, held: false, remaining: None, label: None }),
            (0, _) => broken("a free lock has pttl -1"),
            _ => broken("held must be 0 or 1"),
        }
    }

    /// The label as text, for display: invalid UTF-8 replaced (the bytes are opaque).
    pub fn label_lossy(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.label.as_deref().map(String::from_utf8_lossy)
    }
}

/// What `FENCEDLOCK.STATUS` says about a semaphore key: its permits and every unexpired
/// holder. Never a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreStatus {
    /// The key's last fence (the highest any holder got); kept when holders leave.
    pub fence: u64,
    /// How many holders the key admits at once (1: a mutex; [`SHARED_PERMITS`]: held by read
    /// leases, up to `MAX_PERMITS` of them).
    pub permits: u32,
    /// The unexpired holders, oldest grant (lowest fence) first.
    pub holders: Vec<PermitStatus>,
}

/// One unexpired holder of a semaphore key, as `STATUS` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitStatus {
    /// The fence of its grant.
    pub fence: u64,
    /// Time left on its lease by the server's clock (whole milliseconds).
    pub remaining: Duration,
    /// Its public label, if it was granted with one.
    pub label: Option<Vec<u8>>,
}

impl PermitStatus {
    /// The label as text, for display: invalid UTF-8 replaced (the bytes are opaque).
    pub fn label_lossy(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.label.as_deref().map(String::from_utf8_lossy)
    }
}

/// One holder's entry in a semaphore `STATUS` reply: `[fence, pttl_ms]` and the label.
pub type PermitReply<L> = ([i64; 2], Option<L>);

fn as_int(v: u128) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl SemaphoreStatus {
    /// Whether read leases hold the key (`ACQUIRE … SHARED`).
    pub fn is_shared(&self) -> bool {
        self.permits == SHARED_PERMITS
    }

    /// How many holders the key admits at once: its permits, or `MAX_PERMITS` readers.
    pub fn capacity(&self) -> u32 {
        capacity(self.permits)
    }

    /// Permits nobody holds now (for read leases: further readers the key admits).
    pub fn free(&self) -> u32 {
        self.capacity().saturating_sub(u32::try_from(self.holders.len()).unwrap_or(u32::MAX))
    }

    /// The reply as the module sends it: `[fence, holders, permits]`, then one entry per holder.
    pub fn encode(&self) -> ([i64; 3], Vec<PermitReply<&[u8]>>) {
        let head =
            [as_int(u128::from(self.fence)), as_int(self.holders.len() as u128), i64::from(self.permits)];
        let holders = self
            .holders
            .iter()
            .map(|h| ([as_int(u128::from(h.fence)), as_int(h.remaining.as_millis())], h.label.as_deref()))
            .collect();
        (head, holders)
    }

    /// The reply decoded, checking every rule of the shape: a positive fence, a permit count
    /// of 1 to `MAX_PERMITS` or [`SHARED_PERMITS`], as many holders as it says and no more than
    /// the key admits, each
    /// with a fence from 1 to the key's (strictly increasing: oldest grant first), a pttl ≥ 0
    /// and a label of an acceptable length, if any.
    pub fn decode(
        head: [i64; 3],
        holders: Vec<PermitReply<Vec<u8>>>,
    ) -> Result<SemaphoreStatus, StatusError> {
        let broken = |why| Err(StatusError { reply: head, label_len: None, why });
        let [fence, count, permits] = head;
        let Ok(fence @ 1..) = u64::try_from(fence) else { return broken("the fence must be positive") };
        let Some(permits) =
            u64::try_from(permits).ok().filter(|p| permits_ok(*p) || *p == u64::from(SHARED_PERMITS))
        else {
            return broken("permits must be 1 to MAX_PERMITS, or 0 for read leases");
        };
        let admits = u32::try_from(permits).map_or(u64::MAX, |p| u64::from(capacity(p)));
        if u64::try_from(count) != Ok(holders.len() as u64) || holders.len() as u64 > admits {
            return broken("the holder count must match the entries and fit the permits");
        }
        let mut previous = 0;
        let mut decoded = Vec::with_capacity(holders.len());
        for ([holder_fence, pttl], label) in holders {
            let Ok(holder_fence) = u64::try_from(holder_fence) else {
                return broken("a holder's fence is positive");
            };
            if holder_fence <= previous || holder_fence > fence {
                return broken("holders' fences increase, up to the key's");
            }
            let Ok(ms) = u64::try_from(pttl) else { return broken("a holder has a pttl") };
            if label.as_deref().is_some_and(|label| !label_len_ok(label)) {
                return broken("a label has 1 to MAX_LABEL_LEN bytes");
            }
            previous = holder_fence;
            decoded.push(PermitStatus { fence: holder_fence, remaining: Duration::from_millis(ms), label });
        }
        let permits = u32::try_from(permits).unwrap_or(u32::MAX);
        Ok(SemaphoreStatus { fence, permits, holders: decoded })
    }
}

/// A mutex key seen as a semaphore of one permit.
impl From<LockStatus> for SemaphoreStatus {
    fn from(status: LockStatus) -> SemaphoreStatus {
        let holder = status.remaining.map(|remaining| PermitStatus {
            fence: status.fence,
            remaining,
            label: status.label,
        });
        SemaphoreStatus { fence: status.fence, permits: 1, holders: holder.into_iter().collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_LABEL_LEN, MAX_PERMITS};

    fn round_trip(status: &LockStatus) -> Result<LockStatus, StatusError> {
        let (numbers, label) = status.encode();
        LockStatus::decode(numbers, label.map(<[u8]>::to_vec))
    }

    #[test]
    fn round_trips() {
        for status in [
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(250)), label: None },
            LockStatus { fence: 7, held: true, remaining: Some(Duration::ZERO), label: None },
            LockStatus { fence: 1 << 40, held: false, remaining: None, label: None },
            LockStatus {
                fence: 7,
                held: true,
                remaining: Some(Duration::from_millis(9)),
                label: Some(b"a".to_vec()),
            },
            LockStatus {
                fence: 7,
                held: true,
                remaining: Some(Duration::from_millis(9)),
                label: Some(vec![0xff; MAX_LABEL_LEN]),
            },
        ] {
            assert_eq!(round_trip(&status).as_ref(), Ok(&status));
        }
        assert_eq!(LockStatus::decode([7, 0, -1], None).map(|s| s.encode().0), Ok([7, 0, -1]));
    }

    #[test]
    fn labels_show_lossily() {
        let status = LockStatus::decode([7, 1, 5], Some(b"node-\xff".to_vec())).expect("valid");
        assert_eq!(status.label_lossy().as_deref(), Some("node-\u{fffd}"));
        assert_eq!(LockStatus::decode([7, 0, -1], None).expect("valid").label_lossy(), None);
        let holder = SemaphoreStatus::from(status).holders.remove(0);
        assert_eq!(holder.label_lossy().as_deref(), Some("node-\u{fffd}"));
    }

    #[test]
    fn broken_replies_are_refused() {
        for (reply, label, why) in [
            ([0, 0, -1], None, "positive"),
            ([-3, 0, -1], None, "positive"),
            ([7, 2, -1], None, "0 or 1"),
            ([7, 1, -1], None, "has a pttl"),
            ([7, 0, 5], None, "pttl -1"),
            ([7, 0, -1], Some(b"x".to_vec()), "only a held lease"),
            ([7, 1, 5], Some(Vec::new()), "1 to MAX_LABEL_LEN"),
            ([7, 1, 5], Some(vec![b'x'; MAX_LABEL_LEN + 1]), "1 to MAX_LABEL_LEN"),
        ] {
            let err = LockStatus::decode(reply, label).expect_err("broken");
            assert!(err.to_string().contains(why), "{reply:?}: {err}");
        }
        let err = LockStatus::decode([7, 0, -1], Some(b"secret?".to_vec())).expect_err("broken");
        assert!(!err.to_string().contains("secret"), "the label is not repeated: {err}");
    }

    fn semaphore_round_trip(status: &SemaphoreStatus) -> Result<SemaphoreStatus, StatusError> {
        let (head, holders) = status.encode();
        SemaphoreStatus::decode(head, holders.into_iter().map(|(n, l)| (n, l.map(<[u8]>::to_vec))).collect())
    }

    #[test]
    fn semaphore_statuses_round_trip() {
        let holder = |fence, ms, label: Option<&[u8]>| PermitStatus {
            fence,
            remaining: Duration::from_millis(ms),
            label: label.map(<[u8]>::to_vec),
        };
        for status in [
            SemaphoreStatus { fence: 9, permits: 3, holders: vec![] },
            SemaphoreStatus {
                fence: 9,
                permits: 3,
                holders: vec![holder(4, 10, None), holder(9, 0, Some(b"w-1"))],
            },
            SemaphoreStatus {
                fence: 1 << 40,
                permits: MAX_PERMITS,
                holders: vec![holder(1, 5, Some(&[0xff; MAX_LABEL_LEN]))],
            },
            SemaphoreStatus {
                fence: 9,
                permits: SHARED_PERMITS,
                holders: vec![holder(4, 10, None), holder(5, 3, Some(b"r-2")), holder(9, 1, None)],
            },
        ] {
            assert_eq!(semaphore_round_trip(&status).as_ref(), Ok(&status));
            assert_eq!(status.free(), status.capacity() - status.holders.len() as u32);
            assert_eq!(status.is_shared(), status.permits == SHARED_PERMITS);
        }
        let readers =
            SemaphoreStatus { fence: 2, permits: SHARED_PERMITS, holders: vec![holder(2, 1, None)] };
        assert_eq!(readers.free(), MAX_PERMITS - 1);
    }

    #[test]
    fn broken_semaphore_replies_are_refused() {
        let ok = |f, ms| ([f, ms], None::<Vec<u8>>);
        for (head, holders, why) in [
            ([0, 0, 3], vec![], "positive"),
            ([9, 0, -1], vec![], "permits"),
            ([9, 0, i64::from(MAX_PERMITS) + 1], vec![], "permits"),
            ([9, 2, 3], vec![ok(4, 1)], "count"),
            ([9, 2, 1], vec![ok(4, 1), ok(5, 1)], "count"),
            ([9, 2, 3], vec![ok(5, 1), ok(4, 1)], "increase"),
            ([9, 1, 3], vec![ok(10, 1)], "increase"),
            ([9, 1, 3], vec![ok(0, 1)], "increase"),
            ([9, 1, 3], vec![ok(-1, 1)], "positive"),
            ([9, 1, 3], vec![ok(4, -1)], "pttl"),
            ([9, 1, 3], vec![([4, 1], Some(Vec::new()))], "MAX_LABEL_LEN"),
        ] {
            let err = SemaphoreStatus::decode(head, holders).expect_err("broken");
            assert!(err.to_string().contains(why), "{head:?}: {err}");
        }
    }

    #[test]
    fn a_mutex_is_a_semaphore_of_one() {
        let held =
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(9)), label: None };
        let seen = SemaphoreStatus::from(held);
        assert_eq!((seen.fence, seen.permits, seen.free()), (7, 1, 0));
        assert_eq!(seen.holders[0].fence, 7);
        let free = SemaphoreStatus::from(LockStatus { fence: 7, held: false, remaining: None, label: None });
        assert_eq!((free.permits, free.free()), (1, 1));
    }
}
