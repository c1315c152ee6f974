//! The `FENCEDLOCK.STATUS` reply: `[fence, held (0/1), pttl_ms or -1]`, then the label while a
//! labelled lease holds the key; nil for no lock state.

use std::fmt;
use std::time::Duration;

use crate::command::label_len_ok;

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
        let as_int = |v: u128| i64::try_from(v).unwrap_or(i64::MAX);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_LABEL_LEN;

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
}
