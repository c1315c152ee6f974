//! Parsing of command arguments: ACQUIRE's are the protocol's (`fencedlock_protocol::request`,
//! shared with the clients that build them), the `APPLY` records' are `lock::record`'s, the
//! rest are here. Pure, so every bad input is unit-tested without a server.

use fencedlock_protocol::limits::MAX_FENCE;

use crate::error::LockError;
use crate::lock::terms::{check_token, parse_u64, Micros};

/// A lease ttl in milliseconds, from 1 to `max_ms`, returned in microseconds.
pub fn ttl(bytes: &[u8], max_ms: u64) -> Result<Micros, LockError> {
    let ms = parse_u64(bytes).filter(|ms| *ms > 0).ok_or(LockError::BadTtl)?;
    if ms > max_ms {
        return Err(LockError::TtlTooLarge { max_ms });
    }
    ms.checked_mul(1000).ok_or(LockError::TtlTooLarge { max_ms })
}

pub fn token(bytes: &[u8]) -> Result<&[u8], LockError> {
    check_token(bytes).map(|()| bytes)
}

/// A fence to raise to: 1 to `MAX_FENCE`.
pub fn fence(bytes: &[u8]) -> Result<u64, LockError> {
    parse_u64(bytes).filter(|f| (1..=MAX_FENCE).contains(f)).ok_or(LockError::BadFence)
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn ttl_accepts_plain_positive_integers_up_to_the_maximum() {
        assert_eq!(ttl(b"1", 10), Ok(1000));
        assert_eq!(ttl(b"10", 10), Ok(10_000));
        assert_eq!(ttl(b"0010", 10), Ok(10_000));
    }

    #[test]
    fn ttl_rejects_everything_else() {
        for bad in [&b""[..], b"0", b"-5", b"+5", b" 5", b"5 ", b"1.5", b"1e3", b"abc", b"\xff"] {
            assert_eq!(ttl(bad, 100), Err(LockError::BadTtl), "{bad:?}");
        }
        assert_eq!(ttl(b"101", 100), Err(LockError::TtlTooLarge { max_ms: 100 }));
        assert_eq!(ttl(b"9223372036854775808", u64::MAX), Err(LockError::TtlTooLarge { max_ms: u64::MAX }));
        assert_eq!(ttl(b"99999999999999999999", u64::MAX), Err(LockError::BadTtl));
        assert_eq!(ttl(b"184467440737095516150", u64::MAX), Err(LockError::BadTtl));
    }

    #[test]
    fn fence_is_bounded_to_redis_integers() {
        assert_eq!(fence(b"1"), Ok(1));
        assert_eq!(fence(b"9223372036854775807"), Ok(MAX_FENCE));
        for bad in [&b"0"[..], b"9223372036854775808", b"-1", b"x"] {
            assert_eq!(fence(bad), Err(LockError::BadFence));
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = ttl(&bytes, u64::MAX);
            let _ = fence(&bytes);
            let _ = token(&bytes);
            let _ = crate::lock::record::parse_apply(&[&bytes, &bytes, &bytes, &bytes]);
            let _ = crate::lock::record::parse_apply(&[&bytes, &bytes, &bytes, &bytes, &bytes]);
        }

        #[test]
        fn decimal_round_trip(n in 1u64..=MAX_FENCE) {
            proptest::prop_assert_eq!(fence(n.to_string().as_bytes()), Ok(n));
        }
    }
}
