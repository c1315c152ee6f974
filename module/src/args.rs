//! Parsing of command arguments. Pure, so every bad input is unit-tested without a server.

use fencedlock_protocol::command::BLOCK;
use fencedlock_protocol::limits::{MAX_BLOCK_MS, MAX_FENCE};

use crate::error::LockError;
use crate::lease::{check_token, Micros, Record};

/// A strict unsigned decimal: ASCII digits only, no sign, no spaces, no overflow.
fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

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

/// ACQUIRE's optional `BLOCK timeout_ms` (the word in any case): the timeout in ms, 0 for none.
pub fn block(word: &[u8], timeout: &[u8]) -> Result<u64, LockError> {
    if !word.eq_ignore_ascii_case(BLOCK.as_bytes()) {
        return Err(LockError::Syntax);
    }
    parse_u64(timeout).filter(|ms| *ms <= MAX_BLOCK_MS).ok_or(LockError::BadTimeout)
}

/// The arguments of `FENCEDLOCK.APPLY key high_water fence [token remaining_us]` after the key.
pub fn record<'a>(args: &[&'a [u8]]) -> Result<(u64, Record<'a>), LockError> {
    let num = |b: &[u8]| parse_u64(b).filter(|n| *n <= MAX_FENCE).ok_or(LockError::BadRecord);
    let (high_water, fence, holder) = match args {
        [hw, fence] => (num(hw)?, num(fence)?, None),
        [hw, fence, token, remaining] => (num(hw)?, num(fence)?, Some((*token, num(remaining)?))),
        _ => return Err(LockError::BadRecord),
    };
    Ok((high_water, Record { fence, holder }))
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

    #[test]
    fn block_takes_the_word_in_any_case_and_a_bounded_timeout() {
        assert_eq!(block(b"BLOCK", b"0"), Ok(0));
        assert_eq!(block(b"block", b"250"), Ok(250));
        assert_eq!(block(b"BlOcK", MAX_BLOCK_MS.to_string().as_bytes()), Ok(MAX_BLOCK_MS));
        for bad in [&b"-1"[..], b"", b"1.5", b"abc", b" 5", b"9223372036854775808"] {
            assert_eq!(block(b"BLOCK", bad), Err(LockError::BadTimeout), "{bad:?}");
        }
        assert_eq!(block(b"BLOCK", (MAX_BLOCK_MS + 1).to_string().as_bytes()), Err(LockError::BadTimeout));
        for bad in [&b"BLOK"[..], b"", b"BLOCKS", b"WAIT"] {
            assert_eq!(block(bad, b"10"), Err(LockError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn records_parse_with_and_without_a_holder() {
        assert_eq!(record(&[b"9", b"3"]), Ok((9, Record { fence: 3, holder: None })));
        assert_eq!(
            record(&[b"9", b"3", b"tok", b"250"]),
            Ok((9, Record { fence: 3, holder: Some((&b"tok"[..], 250)) }))
        );
        for bad in [&[&b"9"[..]][..], &[b"9", b"x"], &[b"9", b"3", b"tok"], &[b"9", b"3", b"t", b"-1"]] {
            assert_eq!(record(bad), Err(LockError::BadRecord));
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = ttl(&bytes, u64::MAX);
            let _ = fence(&bytes);
            let _ = token(&bytes);
            let _ = record(&[&bytes, &bytes, &bytes, &bytes]);
        }

        #[test]
        fn decimal_round_trip(n in 1u64..=MAX_FENCE) {
            proptest::prop_assert_eq!(fence(n.to_string().as_bytes()), Ok(n));
        }
    }
}
