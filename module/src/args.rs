//! Parsing of command arguments (the `APPLY` records' are `lock::record`'s). Pure, so every bad input is unit-tested without a server.

use fencedlock_protocol::command::{permits_ok, BLOCK, LABEL, PERMITS};
use fencedlock_protocol::limits::{MAX_BLOCK_MS, MAX_FENCE};

use crate::error::LockError;
use crate::lock::terms::{check_label, check_token, parse_u64, Micros};

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

/// ACQUIRE's options, each given at most once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcquireOptions<'a> {
    /// `BLOCK timeout_ms`: the timeout in ms, 0 for none.
    pub block: Option<u64>,
    /// `LABEL label`: the lease's public label.
    pub label: Option<&'a [u8]>,
    /// `PERMITS n`: how many holders the key admits (absent: 1, the mutex).
    pub permits: Option<u32>,
}

impl AcquireOptions<'_> {
    /// The permit count asked for: 1 (the mutex) without `PERMITS`.
    pub fn permits(&self) -> u32 {
        self.permits.unwrap_or(1)
    }
}

/// ACQUIRE's options after `ttl_ms`: `BLOCK timeout_ms`, `LABEL label` and `PERMITS n`, the words in any
/// case, in any order, each at most once. An unknown word, a repeat or a word without its value
/// is a syntax error (the arity check lets only pairs through).
pub fn acquire_options<'a>(args: &[&'a [u8]]) -> Result<AcquireOptions<'a>, LockError> {
    let mut options = AcquireOptions::default();
    for pair in args.chunks(2) {
        let [word, value] = pair else { return Err(LockError::Syntax) };
        if word.eq_ignore_ascii_case(BLOCK.as_bytes()) && options.block.is_none() {
            options.block =
                Some(parse_u64(value).filter(|ms| *ms <= MAX_BLOCK_MS).ok_or(LockError::BadTimeout)?);
        } else if word.eq_ignore_ascii_case(LABEL.as_bytes()) && options.label.is_none() {
            check_label(value)?;
            options.label = Some(value);
        } else if word.eq_ignore_ascii_case(PERMITS.as_bytes()) && options.permits.is_none() {
            let n = parse_u64(value).filter(|n| permits_ok(*n)).ok_or(LockError::BadPermits)?;
            options.permits = Some(u32::try_from(n).map_err(|_| LockError::BadPermits)?);
        } else {
            return Err(LockError::Syntax);
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use fencedlock_protocol::limits::MAX_LABEL_LEN;

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
    fn permits_are_bounded() {
        let permits = |n: &[u8]| acquire_options(&[b"PERMITS", n]).map(|o| o.permits());
        assert_eq!(permits(b"1"), Ok(1));
        assert_eq!(permits(b"1024"), Ok(1024));
        for bad in
            [&b"0"[..], b"1025", b"-1", b"", b"x", b"2.5", b" 2", b"4294967298", b"99999999999999999999"]
        {
            assert_eq!(permits(bad), Err(LockError::BadPermits), "{bad:?}");
        }
    }

    fn block(word: &[u8], timeout: &[u8]) -> Result<u64, LockError> {
        acquire_options(&[word, timeout]).map(|o| o.block.expect("a BLOCK option"))
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
        for bad in [&b"BLOK"[..], b"", b"BLOCKS", b"WAIT", b"LABELS"] {
            assert_eq!(block(bad, b"10"), Err(LockError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn options_come_in_any_order_each_at_most_once() {
        let both = AcquireOptions { block: Some(10), label: Some(&b"node-a"[..]), permits: None };
        assert_eq!(acquire_options(&[]), Ok(AcquireOptions::default()));
        assert_eq!(acquire_options(&[b"BLOCK", b"10", b"LABEL", b"node-a"]), Ok(both));
        assert_eq!(acquire_options(&[b"label", b"node-a", b"block", b"10"]), Ok(both));
        assert_eq!(
            acquire_options(&[b"LaBeL", b"x"]),
            Ok(AcquireOptions { block: None, label: Some(&b"x"[..]), permits: None })
        );
        let all = acquire_options(&[b"permits", b"3", b"BLOCK", b"10", b"LABEL", b"node-a"]);
        assert_eq!(all, Ok(AcquireOptions { permits: Some(3), ..both }));
        assert_eq!(all.map(|o| o.permits()), Ok(3));
        assert_eq!(AcquireOptions::default().permits(), 1, "no PERMITS is the mutex");
        for repeated in [
            &[&b"BLOCK"[..], b"10", b"BLOCK", b"10"][..],
            &[b"LABEL", b"a", b"label", b"b"],
            &[b"LABEL", b"a", b"BLOCK", b"1", b"LABEL", b"a"],
            &[b"PERMITS", b"2", b"PERMITS", b"2"],
        ] {
            assert_eq!(acquire_options(repeated), Err(LockError::Syntax), "{repeated:?}");
        }
        // A dangling word (the arity check lets none through; refused all the same).
        assert_eq!(acquire_options(&[b"LABEL"]), Err(LockError::Syntax));
        assert_eq!(acquire_options(&[b"BLOCK", b"1", b"LABEL"]), Err(LockError::Syntax));
    }

    #[test]
    fn labels_are_1_to_max_label_len_opaque_bytes() {
        let label = |l: &[u8]| acquire_options(&[b"LABEL", l]).map(|o| o.label.map(<[u8]>::to_vec));
        assert_eq!(label(b"\x00\xff \r\n"), Ok(Some(b"\x00\xff \r\n".to_vec())));
        assert_eq!(label(&[b'x'; MAX_LABEL_LEN]), Ok(Some(vec![b'x'; MAX_LABEL_LEN])));
        assert_eq!(label(b""), Err(LockError::BadLabel));
        assert_eq!(label(&[b'x'; MAX_LABEL_LEN + 1]), Err(LockError::BadLabel));
        // The first bad option decides the error.
        assert_eq!(acquire_options(&[b"LABEL", b"", b"BLOCK", b"x"]), Err(LockError::BadLabel));
        assert_eq!(acquire_options(&[b"BLOCK", b"x", b"LABEL", b""]), Err(LockError::BadTimeout));
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = ttl(&bytes, u64::MAX);
            let _ = fence(&bytes);
            let _ = token(&bytes);
            let _ = crate::lock::record::parse_apply(&[&bytes, &bytes, &bytes, &bytes]);
            let _ = crate::lock::record::parse_apply(&[&bytes, &bytes, &bytes, &bytes, &bytes]);
            let _ = acquire_options(&[&bytes, &bytes]);
            let _ = acquire_options(&[b"LABEL", &bytes, &bytes, &bytes]);
        }

        #[test]
        fn decimal_round_trip(n in 1u64..=MAX_FENCE) {
            proptest::prop_assert_eq!(fence(n.to_string().as_bytes()), Ok(n));
        }
    }
}
