//! How a lock's records (`record`) travel as bytes: their RDB layout ([`save`], [`load`]), the
//! `APPLYSEM` holders' blob, the text of the records' integers ([`Decimal`]), and the parsing
//! of `FENCEDLOCK.APPLY` / `APPLYSEM` arguments. The FFI side gives the RDB stream
//! (`ffi/datatype.rs`) and sends the records to replicas and the AOF (`ffi/replication.rs`).
//! This file reads the layout only; whether a value read is one the commands could have made
//! is `validate`'s to say, at `Lock::from_snapshot`.

use fencedlock_protocol::command::SHARED_PERMITS;
use fencedlock_protocol::limits::MAX_PERMITS;
use thiserror::Error;

use fencedlock_protocol::request::parse_u64;

use super::record::{Holding, PermitHolding, Record, SemaphoreRecord, Snapshot};
use super::validate::{self, Broken};
use crate::error::LockError;

/// A record's integer as the decimal text an `APPLY` / `APPLYSEM` argument carries, clamped to
/// `i64::MAX` (the largest integer Redis reads back; fences stop below it). Built on the stack:
/// handed to Redis as bytes it becomes one string, where Redis's own integer format ("l") made
/// two allocations and a conversion per argument, on every grant, renew and release.
#[derive(Clone, Copy)]
pub struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn of(v: u64) -> Self {
        // Two digits a step: a record's numbers (marks and fences after an epoch, remaining µs)
        // have 7 to 19 digits, and this runs three times per record.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut v = v.min(i64::MAX as u64);
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        while v >= 100 {
            let pair = (v % 100) as usize * 2;
            v /= 100;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if v >= 10 {
            let pair = v as usize * 2;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            digits[start] = b'0' + v as u8;
        }
        Self { digits, start }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.digits.get(self.start..).unwrap_or(&[])
    }
}

/// The holders as one `APPLYSEM` argument: per holder its fence and remaining µs (8 bytes each,
/// little-endian), its token's and label's lengths (2 bytes each; 0: no label) and their bytes.
/// Only the module writes it, and `decode_holders` checks every byte of it.
pub fn encode_holders(holders: &[PermitHolding<'_>]) -> Vec<u8> {
    let mut blob = Vec::new();
    for PermitHolding { fence, holding } in holders {
        let label = holding.label.unwrap_or_default();
        blob.extend_from_slice(&fence.to_le_bytes());
        blob.extend_from_slice(&holding.remaining.to_le_bytes());
        // Lengths are bounded by MAX_TOKEN_LEN and MAX_LABEL_LEN, far below 2^16.
        blob.extend_from_slice(&u16::try_from(holding.token.len()).unwrap_or(u16::MAX).to_le_bytes());
        blob.extend_from_slice(&u16::try_from(label.len()).unwrap_or(u16::MAX).to_le_bytes());
        blob.extend_from_slice(holding.token);
        blob.extend_from_slice(label);
    }
    blob
}

/// The holders of an `APPLYSEM` argument; `None` for a truncated or malformed one (the values'
/// rules are `Semaphore::from_record`'s).
pub fn decode_holders(mut blob: &[u8]) -> Option<Vec<PermitHolding<'_>>> {
    fn take<'b>(blob: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
        let (head, rest) = (blob.get(..n)?, blob.get(n..)?);
        *blob = rest;
        Some(head)
    }
    let mut holders = Vec::new();
    while !blob.is_empty() {
        let fence = u64::from_le_bytes(take(&mut blob, 8)?.try_into().ok()?);
        let remaining = u64::from_le_bytes(take(&mut blob, 8)?.try_into().ok()?);
        let token_len = u16::from_le_bytes(take(&mut blob, 2)?.try_into().ok()?);
        let label_len = u16::from_le_bytes(take(&mut blob, 2)?.try_into().ok()?);
        let token = take(&mut blob, usize::from(token_len))?;
        let label = take(&mut blob, usize::from(label_len))?;
        let label = (!label.is_empty()).then_some(label);
        holders.push(PermitHolding { fence, holding: Holding { token, remaining, label } });
    }
    Some(holders)
}

/// The arguments of `FENCEDLOCK.APPLY key high_water fence [token remaining_us [label]]` after
/// the key. The values' rules are `validate`'s (the mark's here, the record's when it is built).
pub fn parse_apply<'a>(args: &[&'a [u8]]) -> Result<(u64, Record<'a>), LockError> {
    let num = |b: &[u8]| parse_u64(b).ok_or(LockError::BadRecord);
    let holding =
        |token, remaining, label| Ok::<_, LockError>(Holding { token, remaining: num(remaining)?, label });
    let (high_water, fence, holder) = match args {
        [hw, fence] => (num(hw)?, num(fence)?, None),
        [hw, fence, token, remaining] => (num(hw)?, num(fence)?, Some(holding(*token, remaining, None)?)),
        [hw, fence, token, remaining, label] => {
            (num(hw)?, num(fence)?, Some(holding(*token, remaining, Some(*label))?))
        }
        _ => return Err(LockError::BadRecord),
    };
    validate::high_water(high_water)?;
    Ok((high_water, Record { fence, holder }))
}

/// The arguments of `FENCEDLOCK.APPLYSEM key high_water fence permits holders` after the key.
pub fn parse_applysem<'a>(args: &[&'a [u8]]) -> Result<(u64, SemaphoreRecord<'a>), LockError> {
    let num = |b: &[u8]| parse_u64(b).ok_or(LockError::BadRecord);
    let [hw, fence, permits, holders] = args else { return Err(LockError::BadRecord) };
    let permits = u32::try_from(num(permits)?).map_err(|_| LockError::BadRecord)?;
    let holders = decode_holders(holders).ok_or(LockError::BadRecord)?;
    let high_water = num(hw)?;
    validate::high_water(high_water)?;
    Ok((high_water, SemaphoreRecord { fence: num(fence)?, permits, holders }))
}

/// The on-disk encoding version. Bump it when the layout below changes; a load refuses
/// versions it does not know instead of guessing. 2 added the label, 3 semaphore keys, 4 read
/// leases (a semaphore value of `SHARED_PERMITS`); older values still load.
pub const ENCODING_VERSION: i32 = 4;

/// The versions a load reads (values and the mark's aux data): every layout so far.
pub const READABLE_VERSIONS: std::ops::RangeInclusive<i32> = 1..=ENCODING_VERSION;

/// The holder tag of a saved value: none, a holder, a holder with a label (encver 2 on), a
/// semaphore's holders (encver 3 on).
const NO_HOLDER: u64 = 0;
const HOLDER: u64 = 1;
const LABELLED_HOLDER: u64 = 2;
const SEMAPHORE: u64 = 3;

/// Where a saved value goes (the RDB, `DUMP`): unsigned numbers and byte strings.
pub trait Sink {
    fn unsigned(&mut self, v: u64);
    fn bytes(&mut self, b: &[u8]);
}

/// Where a saved value comes from; `None` once the input is truncated or unreadable.
pub trait Source {
    type Bytes: AsRef<[u8]>;
    fn unsigned(&mut self) -> Option<u64>;
    fn bytes(&mut self) -> Option<Self::Bytes>;
}

/// Saves a value. Layout (encver 3 and 4, which differ only in allowing read leases, a
/// semaphore of `SHARED_PERMITS`): fence, holder tag ([`NO_HOLDER`], [`HOLDER`],
/// [`LABELLED_HOLDER`], [`SEMAPHORE`]), and for a holder its token and remaining µs, then its
/// label if tagged so; for a semaphore its permits and holder count, then per holder its fence,
/// token, remaining µs and label (empty: none). Encver 1 had only the first two tags, 2 the first
/// three, so a mutex value is saved exactly as before.
pub fn save(snapshot: &Snapshot<'_>, out: &mut impl Sink) {
    match snapshot {
        Snapshot::Mutex(record) => {
            out.unsigned(record.fence);
            match record.holder {
                None => out.unsigned(NO_HOLDER),
                Some(Holding { token, remaining, label }) => {
                    out.unsigned(if label.is_some() { LABELLED_HOLDER } else { HOLDER });
                    out.bytes(token);
                    out.unsigned(remaining);
                    if let Some(label) = label {
                        out.bytes(label);
                    }
                }
            }
        }
        Snapshot::Semaphore(record) => {
            out.unsigned(record.fence);
            out.unsigned(SEMAPHORE);
            out.unsigned(u64::from(record.permits));
            out.unsigned(record.holders.len() as u64);
            for PermitHolding { fence, holding } in &record.holders {
                out.unsigned(*fence);
                out.bytes(holding.token);
                out.unsigned(holding.remaining);
                out.bytes(holding.label.unwrap_or_default());
            }
        }
    }
}

/// Why a saved value was not loaded: its layout ([`load`]'s rules), or an invariant it breaks
/// (`validate`'s). The text is for the server's log and never holds a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Refused {
    #[error("encoding version {0} is not one this module reads")]
    UnknownVersion(i32),
    #[error("the value is truncated or not in the layout")]
    Truncated,
    #[error("holder tag {tag} does not exist in encoding version {encver}")]
    UnknownTag { tag: u64, encver: i32 },
    #[error("a count of {0} holders, more than any semaphore admits")]
    HolderCount(u64),
    #[error("read leases (permits {SHARED_PERMITS}) do not exist in encoding version {0}")]
    SharedBefore(i32),
    #[error("it breaks an invariant: {0}")]
    Broken(#[from] Broken),
}

/// Reads a value saved with encoding `encver` and hands its record to `build` (the record
/// borrows the input's buffers), which checks and keeps it (`Lock::from_snapshot`). Refuses a
/// version it does not know, a truncated input, a tag the version does not have, and whatever
/// `build` refuses.
pub fn load<S: Source, T>(
    input: &mut S,
    encver: i32,
    build: impl FnOnce(Snapshot<'_>) -> Result<T, Broken>,
) -> Result<T, Refused> {
    if !READABLE_VERSIONS.contains(&encver) {
        return Err(Refused::UnknownVersion(encver));
    }
    let fence = input.unsigned().ok_or(Refused::Truncated)?;
    let (token_buf, label_buf);
    let holder = match input.unsigned().ok_or(Refused::Truncated)? {
        NO_HOLDER => None,
        // Encver 1 had no labels.
        tag @ (HOLDER | LABELLED_HOLDER) if tag == HOLDER || encver >= 2 => {
            token_buf = input.bytes().ok_or(Refused::Truncated)?;
            let remaining = input.unsigned().ok_or(Refused::Truncated)?;
            let label = match tag {
                LABELLED_HOLDER => {
                    label_buf = input.bytes().ok_or(Refused::Truncated)?;
                    Some(label_buf.as_ref())
                }
                _ => None,
            };
            Some(Holding { token: token_buf.as_ref(), remaining, label })
        }
        SEMAPHORE if encver >= 3 => return load_semaphore(input, encver, fence, build),
        tag => return Err(Refused::UnknownTag { tag, encver }),
    };
    Ok(build(Snapshot::Mutex(Record { fence, holder }))?)
}

/// Reads the high-water mark saved as aux data with encoding `encver` (the same layout, one
/// number, in every version so far).
pub fn load_mark<S: Source>(input: &mut S, encver: i32) -> Result<u64, Refused> {
    if !READABLE_VERSIONS.contains(&encver) {
        return Err(Refused::UnknownVersion(encver));
    }
    let mark = input.unsigned().ok_or(Refused::Truncated)?;
    validate::high_water(mark)?;
    Ok(mark)
}

/// A semaphore value after its fence and tag (see [`save`]).
fn load_semaphore<S: Source, T>(
    input: &mut S,
    encver: i32,
    fence: u64,
    build: impl FnOnce(Snapshot<'_>) -> Result<T, Broken>,
) -> Result<T, Refused> {
    let permits = input.unsigned().ok_or(Refused::Truncated)?;
    let permits = u32::try_from(permits).map_err(|_| Broken::PermitsOutOfRange(permits))?;
    // No module before encver 4 wrote read leases: such a value is damage, not a state.
    if permits == SHARED_PERMITS && encver < 4 {
        return Err(Refused::SharedBefore(encver));
    }
    let count = input.unsigned().ok_or(Refused::Truncated)?;
    // The loop below runs once per holder: a corrupt count must not run it past the largest
    // valid one. (Holders against the key's own count are `validate`'s.)
    if count > u64::from(MAX_PERMITS) {
        return Err(Refused::HolderCount(count));
    }
    let mut buffers = Vec::new();
    for _ in 0..count {
        let fence = input.unsigned().ok_or(Refused::Truncated)?;
        let token = input.bytes().ok_or(Refused::Truncated)?;
        let remaining = input.unsigned().ok_or(Refused::Truncated)?;
        let label = input.bytes().ok_or(Refused::Truncated)?;
        buffers.push((fence, token, remaining, label));
    }
    let holders = buffers
        .iter()
        .map(|(fence, token, remaining, label)| PermitHolding {
            fence: *fence,
            holding: Holding {
                token: token.as_ref(),
                remaining: *remaining,
                label: Some(label.as_ref()).filter(|l| !l.is_empty()),
            },
        })
        .collect();
    Ok(build(Snapshot::Semaphore(SemaphoreRecord { fence, permits, holders }))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_integer_is_the_decimal_redis_wrote_for_it() {
        let edges = [0, 1, 9, 10, 99, 100, 4_294_967_296, i64::MAX as u64 - 1, i64::MAX as u64];
        for v in edges.into_iter().chain((0..2000).map(|i| i * 7919 + i * i * 104_729)) {
            assert_eq!(Decimal::of(v).as_bytes(), v.to_string().as_bytes());
            assert_eq!(parse_u64(Decimal::of(v).as_bytes()), Some(v));
        }
        // Above what Redis reads as an integer, as its "l" format sent it: clamped.
        for v in [i64::MAX as u64 + 1, u64::MAX] {
            assert_eq!(Decimal::of(v).as_bytes(), i64::MAX.to_string().as_bytes());
        }
    }

    /// An RDB stream in memory.
    #[derive(Default)]
    struct Tape(std::collections::VecDeque<Result<u64, Vec<u8>>>);

    impl Sink for Tape {
        fn unsigned(&mut self, v: u64) {
            self.0.push_back(Ok(v));
        }

        fn bytes(&mut self, b: &[u8]) {
            self.0.push_back(Err(b.to_vec()));
        }
    }

    impl Source for Tape {
        type Bytes = Vec<u8>;

        fn unsigned(&mut self) -> Option<u64> {
            self.0.pop_front()?.ok()
        }

        fn bytes(&mut self) -> Option<Vec<u8>> {
            self.0.pop_front()?.err()
        }
    }

    fn reloaded(snapshot: &Snapshot<'_>, encver: i32, cut: usize) -> Option<String> {
        let mut tape = Tape::default();
        save(snapshot, &mut tape);
        tape.0.truncate(tape.0.len() - cut);
        load(&mut tape, encver, |s| Ok(format!("{s:?}"))).ok()
    }

    #[test]
    fn values_round_trip_through_the_rdb_layout_and_truncation_is_refused() {
        let holding = Holding { token: b"tok", remaining: 250, label: None };
        let labelled = Holding { label: Some(b"node-a"), ..holding };
        let snapshots = [
            Snapshot::Mutex(Record { fence: 3, holder: None }),
            Snapshot::Mutex(Record { fence: 3, holder: Some(holding) }),
            Snapshot::Mutex(Record { fence: 3, holder: Some(labelled) }),
            Snapshot::Semaphore(SemaphoreRecord {
                fence: 9,
                permits: 3,
                holders: vec![
                    PermitHolding { fence: 8, holding },
                    PermitHolding { fence: 9, holding: labelled },
                ],
            }),
            Snapshot::Semaphore(SemaphoreRecord {
                fence: 9,
                permits: SHARED_PERMITS,
                holders: vec![PermitHolding { fence: 7, holding }, PermitHolding { fence: 9, holding }],
            }),
        ];
        for snapshot in &snapshots {
            assert_eq!(reloaded(snapshot, ENCODING_VERSION, 0), Some(format!("{snapshot:?}")));
            assert_eq!(reloaded(snapshot, ENCODING_VERSION, 1), None, "{snapshot:?}");
        }
        // Older encodings had no labels (1) and no semaphores (1, 2).
        assert_eq!(reloaded(&snapshots[2], 1, 0), None);
        assert_eq!(reloaded(&snapshots[3], 2, 0), None);
        assert!(reloaded(&snapshots[1], 1, 0).is_some());
        // Read leases are new in 4: an older value claiming them is damage.
        assert!(reloaded(&snapshots[3], 3, 0).is_some());
        assert_eq!(reloaded(&snapshots[4], 3, 0), None);
        let mut tape = Tape::default();
        save(&snapshots[4], &mut tape);
        assert_eq!(load(&mut tape, 3, |_| Ok(())), Err(Refused::SharedBefore(3)));
    }

    #[test]
    fn holders_round_trip_through_their_blob() {
        let long = [0xab; fencedlock_protocol::limits::MAX_LABEL_LEN];
        let holders = [
            PermitHolding { fence: 3, holding: Holding { token: b"a", remaining: 5, label: None } },
            PermitHolding {
                fence: u64::MAX,
                holding: Holding { token: &[0; 512], remaining: u64::MAX, label: Some(&long) },
            },
        ];
        let blob = encode_holders(&holders);
        assert_eq!(decode_holders(&blob), Some(holders.to_vec()));
        assert_eq!(decode_holders(&[]), Some(Vec::new()));
        for cut in 1..blob.len() {
            if cut != 21 {
                assert_eq!(decode_holders(&blob[..cut]), None, "cut at {cut}");
            }
        }
    }

    #[test]
    fn records_parse_with_and_without_a_holder_and_a_label() {
        assert_eq!(parse_apply(&[b"9", b"3"]), Ok((9, Record { fence: 3, holder: None })));
        let holding = Holding { token: &b"tok"[..], remaining: 250, label: None };
        assert_eq!(
            parse_apply(&[b"9", b"3", b"tok", b"250"]),
            Ok((9, Record { fence: 3, holder: Some(holding) }))
        );
        let labelled = Holding { label: Some(&b"node-a"[..]), ..holding };
        assert_eq!(
            parse_apply(&[b"9", b"3", b"tok", b"250", b"node-a"]),
            Ok((9, Record { fence: 3, holder: Some(labelled) }))
        );
        for bad in [
            &[&b"9"[..]][..],
            &[b"9", b"x"],
            &[b"9", b"3", b"tok"],
            &[b"9", b"3", b"t", b"-1"],
            &[b"9", b"3", b"t", b"-1", b"l"],
            &[b"9", b"3", b"t", b"1", b"l", b"x"],
        ] {
            assert_eq!(parse_apply(bad), Err(LockError::BadRecord), "{bad:?}");
        }
    }

    #[test]
    fn semaphore_records_parse_and_refuse_garbage() {
        let holders =
            [PermitHolding { fence: 3, holding: Holding { token: b"t", remaining: 9, label: None } }];
        let blob = encode_holders(&holders);
        let parsed = parse_applysem(&[b"9", b"3", b"2", &blob]);
        assert_eq!(parsed, Ok((9, SemaphoreRecord { fence: 3, permits: 2, holders: holders.to_vec() })));
        for bad in [
            &[&b"9"[..], b"3", b"2", &blob[..5]][..],
            &[b"9", b"3", b"x", &blob],
            &[b"9", b"3", b"4294967296", &blob],
            &[b"9", b"3", b"2"],
        ] {
            assert_eq!(parse_applysem(bad), Err(LockError::BadRecord));
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_record_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = parse_apply(&[&bytes, &bytes, &bytes, &bytes]);
            let _ = parse_apply(&[&bytes, &bytes, &bytes, &bytes, &bytes]);
            let _ = parse_applysem(&[&bytes, &bytes, &bytes, &bytes]);
        }
    }
}
