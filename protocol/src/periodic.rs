//! Jobs that run at most once per period: the record of a job's last counted run, kept beside
//! its lock key, and the rule that says whether the job is due.
//!
//! A lock alone cannot say "at most once an hour": a job that finished in 2 s leaves the key
//! free, and a host whose cron fires 3 s later runs it again. So the holder of the lock reads
//! the record (under the lease), runs the job only if the last counted run started at least
//! one period ago, and writes the record before it releases.
//!
//! **The server's clock decides.** Both scripts read `TIME` on the server that holds the
//! record, and a run's start is that server's time, so hosts whose clocks disagree (or step)
//! all measure the period on one clock. The server's clock is assumed not to step back, as
//! for the fences' epochs.
//!
//! **A stale holder cannot overwrite a newer record.** The write is refused when the record
//! already carries a higher fence: a holder paused past its lease, whose successor ran and
//! recorded, leaves the successor's run in place.

use crate::cluster::key_slot;
use crate::functions::floor_tag;
use crate::request::parse_u64;

/// A job's record: `fencedlock:last-run:{tag}:key` (the tag is the key's slot's
/// [`floor_tag`], so the record lives in the lock key's slot), a hash of the fields below.
pub const RECORD_KEY_PREFIX: &str = "fencedlock:last-run:{";

/// When the run started: the server's `TIME`, in milliseconds since the Unix epoch.
pub const STARTED_MS: &str = "started_ms";
/// The fence of the lease the run held.
pub const FENCE: &str = "fence";
/// The lease's label (absent for a lease without one).
pub const LABEL: &str = "label";
/// The job's exit code (0 unless failed runs are counted too).
pub const EXIT: &str = "exit";

/// A record lives this long beyond the period it guards (`PEXPIRE`), so that `status` still
/// shows the last run for a day and a job key that is no longer used leaves nothing behind.
pub const RECORD_RETENTION_MS: u64 = 86_400_000;

/// The record of the job on `key`: `fencedlock:last-run:{tag}:key`, in `key`'s slot.
pub fn record_key(key: &[u8]) -> Vec<u8> {
    let mut name = RECORD_KEY_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(&floor_tag(key_slot(key)));
    name.extend_from_slice(b"}:");
    name.extend_from_slice(key);
    name
}

/// `EVAL READ 1 record`: the server's time and the record, in one step so the age of the
/// last run is measured on the clock that stamped it. Replies `{seconds, microseconds,
/// started_ms, fence, label, exit}`, each field nil where the record has none.
pub const READ: &str = "\
local now = redis.call('TIME')
local r = redis.call('HMGET', KEYS[1], 'started_ms', 'fence', 'label', 'exit')
return {now[1], now[2], r[1], r[2], r[3], r[4]}
";

/// `EVAL WRITE 1 record started_ms fence label exit retention_ms`: records a run unless the
/// record holds a higher fence (compared as decimal strings: fences exceed the 2^53 that Lua
/// numbers hold exactly). An empty label removes the field. Replies 1 when written, 0 when a
/// newer holder's run is recorded already.
pub const WRITE: &str = "\
local cur, fence = redis.call('HGET', KEYS[1], 'fence'), ARGV[2]
if cur and (#cur > #fence or (#cur == #fence and cur > fence)) then return 0 end
redis.call('HSET', KEYS[1], 'started_ms', ARGV[1], 'fence', fence, 'exit', ARGV[4])
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'label') else redis.call('HSET', KEYS[1], 'label', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// A job's last counted run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The server's time when the run started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// The fence of the lease the run held.
    pub fence: u64,
    /// The lease's label, if it had one.
    pub label: Option<Vec<u8>>,
    /// The job's exit code.
    pub exit: i64,
}

/// The reply of [`READ`], decoded: the server's time and the record, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReply {
    /// The server's time, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// The last counted run; `None` when the job has none on record.
    pub last: Option<RunRecord>,
}

/// Why a [`READ`] reply could not be decoded (a record written by something else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedRecord;

impl std::fmt::Display for MalformedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the job's run record is malformed (not written by fencedlock?)")
    }
}

impl std::error::Error for MalformedRecord {}

impl ReadReply {
    /// Decodes the six fields of a [`READ`] reply.
    pub fn parse(fields: &[Option<Vec<u8>>]) -> Result<ReadReply, MalformedRecord> {
        let number = |i: usize| -> Result<Option<u64>, MalformedRecord> {
            match fields.get(i).ok_or(MalformedRecord)? {
                None => Ok(None),
                Some(bytes) => parse_u64(bytes).map(Some).ok_or(MalformedRecord),
            }
        };
        if fields.len() != 6 {
            return Err(MalformedRecord);
        }
        let (Some(seconds), Some(micros)) = (number(0)?, number(1)?) else {
            return Err(MalformedRecord);
        };
        let now_ms = seconds.saturating_mul(1000).saturating_add(micros / 1000);
        let last = match (number(2)?, number(3)?) {
            (None, None) => None,
            (Some(started_ms), Some(fence)) => {
                let exit = match &fields[5] {
                    None => 0,
                    Some(bytes) => {
                        std::str::from_utf8(bytes).ok().and_then(|s| s.parse().ok()).ok_or(MalformedRecord)?
                    }
                };
                Some(RunRecord { started_ms, fence, label: fields[4].clone(), exit })
            }
            _ => return Err(MalformedRecord),
        };
        Ok(ReadReply { now_ms, last })
    }

    /// How long ago the last counted run started, on the server's clock (zero for a start
    /// stamped later than now: a clock that stepped back must not make a job due early).
    pub fn age_ms(&self) -> Option<u64> {
        self.last.as_ref().map(|last| self.now_ms.saturating_sub(last.started_ms))
    }

    /// Whether a job that runs at most once every `every_ms` is due now: `Ok(())` when it has
    /// no run on record or the last one started at least `every_ms` ago, else how long until
    /// it is due.
    pub fn due(&self, every_ms: u64) -> Result<(), u64> {
        match self.age_ms() {
            Some(age) if age < every_ms => Err(every_ms - age),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::is_internal;
    use proptest::prelude::*;

    fn reply(now_ms: u64, last: Option<(u64, u64)>) -> ReadReply {
        ReadReply {
            now_ms,
            last: last.map(|(started_ms, fence)| RunRecord { started_ms, fence, label: None, exit: 0 }),
        }
    }

    #[test]
    fn a_record_is_in_its_lock_keys_slot_and_internal() {
        for key in [&b"report"[..], b"lockk", b"{user:7}:nightly", b"a{}b", b""] {
            let record = record_key(key);
            assert_eq!(key_slot(&record), key_slot(key), "{:?}", String::from_utf8_lossy(key));
            assert!(record.ends_with(key) && is_internal(&record));
        }
        assert_eq!(record_key(b"lockk"), b"fencedlock:last-run:{221102}:lockk");
    }

    #[test]
    fn the_scripts_use_the_field_names_defined_here() {
        for field in [STARTED_MS, FENCE, LABEL, EXIT] {
            assert!(READ.contains(&format!("'{field}'")), "READ lacks {field}");
            assert!(WRITE.contains(&format!("'{field}'")), "WRITE lacks {field}");
        }
    }

    #[test]
    fn a_reply_is_decoded_and_what_is_not_a_record_is_refused() {
        let b = |s: &str| Some(s.as_bytes().to_vec());
        let none = ReadReply::parse(&[b("1700000000"), b("250000"), None, None, None, None]);
        assert_eq!(none, Ok(ReadReply { now_ms: 1_700_000_000_250, last: None }));
        let full = ReadReply::parse(&[
            b("1700000000"),
            b("0"),
            b("1699999999000"),
            b("1839547780606977"),
            b("host-a"),
            b("3"),
        ])
        .expect("a record");
        let last = full.last.expect("a run");
        assert_eq!((last.started_ms, last.fence, last.exit), (1_699_999_999_000, 1_839_547_780_606_977, 3));
        assert_eq!(last.label.as_deref(), Some(&b"host-a"[..]));
        for malformed in [
            vec![b("1700000000"), b("0"), b("x"), b("1"), None, None],
            vec![b("1700000000"), b("0"), b("1"), None, None, None],
            vec![b("1700000000"), b("0"), b("1"), b("1"), None, b("-x")],
            vec![None, b("0"), None, None, None, None],
            vec![b("1700000000"), b("0")],
        ] {
            assert_eq!(ReadReply::parse(&malformed), Err(MalformedRecord), "{malformed:?}");
        }
    }

    #[test]
    fn due_at_exactly_one_period_and_never_early_on_a_clock_that_stepped_back() {
        assert_eq!(reply(10_000, None).due(60_000), Ok(()));
        assert_eq!(reply(70_000, Some((10_000, 5))).due(60_000), Ok(()));
        assert_eq!(reply(69_999, Some((10_000, 5))).due(60_000), Err(1));
        // A start stamped in the future counts as just now.
        assert_eq!(reply(5_000, Some((10_000, 5))).due(60_000), Err(60_000));
    }

    proptest! {
        #[test]
        fn due_iff_a_whole_period_passed(now in 0u64..1 << 50, started in 0u64..1 << 50, every in 1u64..1 << 40) {
            let due = reply(now, Some((started, 1))).due(every);
            prop_assert_eq!(due.is_ok(), now >= started && now - started >= every);
            if let Err(wait) = due {
                prop_assert!(wait >= 1 && wait <= every);
            }
        }
    }
}
