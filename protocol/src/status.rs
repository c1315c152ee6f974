//! The `FENCEDLOCK.STATUS` reply: `[fence, held (0/1), pttl_ms or -1]`, nil for no lock state.

use std::fmt;
use std::time::Duration;

/// What `FENCEDLOCK.STATUS` says about a key. Never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockStatus {
    /// The key's last fence; kept after release and expiry, so the next grant is higher.
    pub fence: u64,
    /// Whether an unexpired lease holds the key.
    pub held: bool,
    /// Time left on the lease by the server's clock (whole milliseconds), when held.
    pub remaining: Option<Duration>,
}

/// A `STATUS` reply that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusError {
    reply: [i64; 3],
    why: &'static str,
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "STATUS replied {:?}: {}", self.reply, self.why)
    }
}

impl std::error::Error for StatusError {}

impl LockStatus {
    /// The reply as the module sends it.
    pub fn encode(&self) -> [i64; 3] {
        let as_int = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
        [
            as_int(u128::from(self.fence)),
            i64::from(self.held),
            self.remaining.map_or(-1, |left| as_int(left.as_millis())),
        ]
    }

    /// The reply decoded, checking every rule of the shape: a positive fence, `held` 0 or 1,
    /// a pttl (≥ 0) exactly when held and -1 otherwise.
    pub fn decode(reply: [i64; 3]) -> Result<LockStatus, StatusError> {
        let broken = |why| Err(StatusError { reply, why });
        let [fence, held, pttl] = reply;
        let Ok(fence @ 1..) = u64::try_from(fence) else { return broken("the fence must be positive") };
        match (held, u64::try_from(pttl)) {
            (1, Ok(ms)) => Ok(LockStatus { fence, held: true, remaining: Some(Duration::from_millis(ms)) }),
            (1, Err(_)) => broken("a held lease has a pttl"),
            (0, _) if pttl == -1 => Ok(LockStatus { fence, held: false, remaining: None }),
            (0, _) => broken("a free lock has pttl -1"),
            _ => broken("held must be 0 or 1"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for status in [
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(250)) },
            LockStatus { fence: 7, held: true, remaining: Some(Duration::ZERO) },
            LockStatus { fence: 1 << 40, held: false, remaining: None },
        ] {
            assert_eq!(LockStatus::decode(status.encode()), Ok(status));
        }
        assert_eq!(LockStatus::decode([7, 0, -1]).map(|s| s.encode()), Ok([7, 0, -1]));
    }

    #[test]
    fn broken_replies_are_refused() {
        for (reply, why) in [
            ([0, 0, -1], "positive"),
            ([-3, 0, -1], "positive"),
            ([7, 2, -1], "0 or 1"),
            ([7, 1, -1], "has a pttl"),
            ([7, 0, 5], "pttl -1"),
        ] {
            let err = LockStatus::decode(reply).expect_err("broken");
            assert!(err.to_string().contains(why), "{reply:?}: {err}");
        }
    }
}
