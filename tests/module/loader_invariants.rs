//! The module's loader trusts nothing (issue 30). A `fencelock` value that arrives from outside
//! the commands — a `RESTORE` payload, an RDB file, an AOF's `APPLY` / `APPLYSEM` records — is
//! refused when it breaks any invariant the commands keep, and the server's log names the
//! invariant (never a token). The payloads here carry a correct checksum, as a tampered one does
//! on a server that does not check it (Redis 8.6 accepts an all-zero checksum), so only the
//! module stands between them and the key space. Valid values of every encoding version still
//! restore, edge values included.

use std::path::{Path, PathBuf};

use fencedlock_protocol::limits::{MAX_FENCE, MAX_LABEL_LEN, MAX_MAX_TTL_MS, MAX_PERMITS, MAX_TOKEN_LEN};
use harness::redis::{self, RedisResult};
use harness::Server;

use crate::support::*;

/// A token no log line may ever show.
const SECRET: &[u8] = b"loader-secret-token";
/// The longest lease a record may carry, in µs (the largest `fencedlock.max-ttl-ms`).
const LONGEST_LEASE: u64 = MAX_MAX_TTL_MS * 1000;
/// Time left on the leases of the valid values, in µs.
const MINUTE: u64 = 60_000_000;

/// The holder tags of the value layout (`module/src/lock/layout.rs`).
const NO_HOLDER: u64 = 0;
const HOLDER: u64 = 1;
const LABELLED_HOLDER: u64 = 2;
const SEMAPHORE: u64 = 3;

/// One field of a module value.
#[derive(Debug, Clone)]
enum Field {
    Num(u64),
    Str(Vec<u8>),
}

fn num(v: u64) -> Field {
    Field::Num(v)
}

fn text(b: &[u8]) -> Field {
    Field::Str(b.to_vec())
}

/// A holder's token, µs left and label.
type Lease<'a> = (&'a [u8], u64, Option<&'a [u8]>);

/// A mutex value's fields: fence, tag, and for a holder its token, time left and label.
fn mutex(fence: u64, holder: Option<Lease<'_>>) -> Vec<Field> {
    match holder {
        None => vec![num(fence), num(NO_HOLDER)],
        Some((token, remaining, None)) => vec![num(fence), num(HOLDER), text(token), num(remaining)],
        Some((token, remaining, Some(label))) => {
            vec![num(fence), num(LABELLED_HOLDER), text(token), num(remaining), text(label)]
        }
    }
}

/// A semaphore value's fields: fence, tag, permits, holder count, and per holder its fence,
/// token, time left and label (empty: none).
fn semaphore(fence: u64, permits: u64, holders: &[(u64, &[u8], u64)]) -> Vec<Field> {
    let mut fields = vec![num(fence), num(SEMAPHORE), num(permits), num(holders.len() as u64)];
    for (holder_fence, token, remaining) in holders {
        fields.extend([num(*holder_fence), text(token), num(*remaining), text(b"")]);
    }
    fields
}

/// Redis's RDB length encoding: 6 bits, 14 bits, 32 or 64 bits big-endian.
fn push_len(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0x3f => out.push(n as u8),
        0x40..=0x3fff => out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]),
        0x4000..=0xffff_ffff => {
            out.push(0x80);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(0x81);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// The length at the start of `bytes` and how many bytes it took.
fn read_len(bytes: &[u8]) -> (u64, usize) {
    let be = |n: usize| bytes[1..=n].iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b));
    match bytes[0] >> 6 {
        0 => (u64::from(bytes[0] & 0x3f), 1),
        1 => (u64::from(bytes[0] & 0x3f) << 8 | u64::from(bytes[1]), 2),
        _ if bytes[0] == 0x80 => (be(4), 5),
        _ if bytes[0] == 0x81 => (be(8), 9),
        _ => panic!("not a length: {:#x}", bytes[0]),
    }
}

/// How this server frames a `fencelock` value (a module value, `RDB_TYPE_MODULE_2`): the type
/// byte, the module id (its low 10 bits the encoding version), each field as an opcode (2 a
/// number, 5 a string) and its bytes, an EOF opcode; a `DUMP` payload adds the server's RDB
/// version and the CRC-64. Learned from the server's own `DUMP`, which the encoder must
/// reproduce byte for byte.
struct Layout {
    type_byte: u8,
    /// The module id without its encoding version.
    module_id: u64,
    rdb_version: [u8; 2],
}

const ENCVER_BITS: u64 = 1023;
const UINT_OPCODE: u8 = 2;
const STRING_OPCODE: u8 = 5;
const EOF_OPCODE: u8 = 0;
/// The fence of the key whose `DUMP` teaches the layout.
const PROBE_KEY: &str = "loader:probe";

impl Layout {
    fn of(s: &Server) -> Layout {
        let fence = grant(s, PROBE_KEY, b"probe", LONG_TTL);
        assert_eq!(release(s, PROBE_KEY, b"probe"), 1);
        let dump: Vec<u8> = s.cmd(&["DUMP", PROBE_KEY]).unwrap();
        let (id, used) = read_len(&dump[1..]);
        let n = dump.len();
        let layout = Layout {
            type_byte: dump[0],
            module_id: id & !ENCVER_BITS,
            rdb_version: [dump[n - 10], dump[n - 9]],
        };
        let _: i64 = s.cmd(&["DEL", PROBE_KEY]).unwrap();
        assert_eq!(id & ENCVER_BITS, 4, "the module saves encoding version 4");
        assert_eq!(used, 9, "a module id takes 64 bits");
        assert_eq!(
            layout.payload(4, &mutex(fence, None)),
            dump,
            "the encoder reproduces the server's own DUMP, so what a test crafts is what the module reads"
        );
        layout
    }

    /// The value as it stands in an RDB file after its key: module id, fields, EOF.
    fn value(&self, encver: u64, fields: &[Field]) -> Vec<u8> {
        let mut out = Vec::new();
        push_len(&mut out, self.module_id | encver);
        for field in fields {
            match field {
                Field::Num(v) => {
                    out.push(UINT_OPCODE);
                    push_len(&mut out, *v);
                }
                Field::Str(b) => {
                    out.push(STRING_OPCODE);
                    push_len(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
            }
        }
        out.push(EOF_OPCODE);
        out
    }

    /// A `DUMP` payload of the value, with a correct checksum.
    fn payload(&self, encver: u64, fields: &[Field]) -> Vec<u8> {
        self.framed(self.value(encver, fields))
    }

    /// A payload around raw value bytes (for damage the encoder would not make).
    fn framed(&self, value: Vec<u8>) -> Vec<u8> {
        let mut body = vec![self.type_byte];
        body.extend(value);
        body.extend_from_slice(&self.rdb_version);
        harness::seal_dump(&body)
    }
}

/// The payload with its CRC-64 trailer zeroed.
fn zero_checksum(payload: &[u8]) -> Vec<u8> {
    let mut out = payload.to_vec();
    let n = out.len();
    out[n - 8..].fill(0);
    out
}

fn restore(s: &Server, key: &str, payload: &[u8], replace: bool) -> RedisResult<()> {
    let mut cmd = redis::cmd("RESTORE");
    cmd.arg(key).arg(0).arg(payload);
    if replace {
        cmd.arg("REPLACE");
    }
    s.query(&cmd)
}

fn exists(s: &Server, key: &str) -> bool {
    s.cmd::<i64>(&["EXISTS", key]).unwrap() == 1
}

/// A value that breaks one rule, and what the module's log line says about it (`None`: the
/// server itself refuses it before the module is asked).
struct Broken {
    what: &'static str,
    encver: u64,
    value: Vec<u8>,
    logged: Option<&'static str>,
}

fn broken_values(layout: &Layout) -> Vec<Broken> {
    let long_token = vec![b't'; MAX_TOKEN_LEN + 1];
    let long_label = vec![b'l'; MAX_LABEL_LEN + 1];
    let held = |remaining| Some((SECRET, remaining, None));
    let case = |what, encver, fields: Vec<Field>, logged| Broken {
        what,
        encver,
        value: layout.value(encver, &fields),
        logged: Some(logged),
    };
    let mut trailing = layout.value(3, &mutex(5, None));
    trailing.pop();
    trailing.extend([UINT_OPCODE, 7, EOF_OPCODE]);
    let mut unterminated = layout.value(3, &mutex(5, None));
    unterminated.pop();
    vec![
        // Invariants (`module/src/lock/validate.rs`).
        case("fence 0", 3, mutex(0, None), "fence 0: a stored key was granted at least once"),
        case("fence 0 held", 3, mutex(0, held(MINUTE)), "fence 0: a stored key was granted at least once"),
        case("fence 0 semaphore", 3, semaphore(0, 2, &[]), "fence 0: a stored key was granted"),
        case("fence above the largest", 3, mutex(MAX_FENCE + 1, None), "is above the largest fence"),
        case("empty token", 3, mutex(5, Some((b"", MINUTE, None))), "a token of 0 bytes"),
        case("long token", 3, mutex(5, Some((&long_token, MINUTE, None))), "a token of 513 bytes"),
        case("empty label", 3, mutex(5, Some((SECRET, MINUTE, Some(b"")))), "a label of 0 bytes"),
        case("long label", 3, mutex(5, Some((SECRET, MINUTE, Some(&long_label)))), "a label of 257 bytes"),
        case("expired lease", 3, mutex(5, held(0)), "a lease with no time left"),
        case("expired lease, v1", 1, mutex(5, held(0)), "a lease with no time left"),
        case(
            "lease beyond the longest ttl",
            3,
            mutex(5, held(LONGEST_LEASE + 1)),
            "longer than the longest ttl",
        ),
        case("1 permit", 3, semaphore(9, 1, &[]), "1 permits (a semaphore has 2 to 1024, read leases 0)"),
        case(
            "read leases in version 3",
            3,
            semaphore(9, 0, &[(4, b"a", MINUTE)]),
            "read leases (permits 0) do not exist in encoding version 3",
        ),
        case(
            "readers out of grant order",
            4,
            semaphore(9, 0, &[(5, b"a", MINUTE), (4, b"b", MINUTE)]),
            "holder fences out of grant order (4 after 5)",
        ),
        case("permits above the limit", 3, semaphore(9, u64::from(MAX_PERMITS) + 1, &[]), "1025 permits"),
        case("permits beyond 32 bits", 3, semaphore(9, 1 << 32, &[]), "4294967296 permits"),
        case(
            "more holders than permits",
            3,
            semaphore(9, 2, &[(1, b"a", MINUTE), (2, b"b", MINUTE), (3, b"c", MINUTE)]),
            "3 holders for 2 permits",
        ),
        case(
            "holders out of grant order",
            3,
            semaphore(9, 3, &[(5, b"a", MINUTE), (4, b"b", MINUTE)]),
            "holder fences out of grant order (4 after 5)",
        ),
        case(
            "two holders with one fence",
            3,
            semaphore(9, 3, &[(4, b"a", MINUTE), (4, b"b", MINUTE)]),
            "holder fences out of grant order (4 after 4)",
        ),
        case(
            "a holder above the key",
            3,
            semaphore(9, 3, &[(10, b"a", MINUTE)]),
            "a holder's fence 10 is above the key's fence 9",
        ),
        case(
            "a token holding two permits",
            3,
            semaphore(9, 3, &[(4, SECRET, MINUTE), (5, SECRET, MINUTE)]),
            "one token holds two permits",
        ),
        case(
            "an expired permit",
            3,
            semaphore(9, 3, &[(4, b"a", MINUTE), (5, b"b", 0)]),
            "a lease with no time left",
        ),
        // The layout's rules (`module/src/lock/layout.rs`).
        case(
            "a label in version 1",
            1,
            mutex(5, Some((SECRET, MINUTE, Some(b"l")))),
            "holder tag 2 does not exist in encoding version 1",
        ),
        case(
            "a semaphore in version 2",
            2,
            semaphore(9, 3, &[]),
            "holder tag 3 does not exist in encoding version 2",
        ),
        case("an unknown tag", 3, vec![num(5), num(4)], "holder tag 4 does not exist in encoding version 3"),
        case("an unknown version", 5, mutex(5, None), "encoding version 5 is not one this module reads"),
        case("version 0", 0, mutex(5, None), "encoding version 0 is not one this module reads"),
        case(
            "a holder count beyond any semaphore",
            3,
            vec![num(9), num(SEMAPHORE), num(3), num(u64::from(MAX_PERMITS) + 1)],
            "a count of 1025 holders",
        ),
        case("truncated", 3, vec![num(5), num(HOLDER), text(SECRET)], "the value is truncated"),
        case("a string for a number", 3, vec![text(b"5"), num(NO_HOLDER)], "the value is truncated"),
        // The server's own: a module value ends with its EOF marker, right after the last field.
        Broken { what: "a field after the value", encver: 3, value: trailing, logged: None },
        Broken { what: "no EOF marker", encver: 3, value: unterminated, logged: None },
    ]
}

#[test]
fn restore_refuses_every_value_that_breaks_an_invariant() {
    let s = Server::start();
    let layout = Layout::of(&s);
    let held_fence = grant(&s, "loader:held", SECRET, LONG_TTL);
    let held_before = status_of(&s, "loader:held");
    // Whether this server skips the checksum when it is zero (Redis 8.6 does; 7.0, 7.4 and
    // Valkey 9.1 refuse such a payload).
    let zero_unchecked =
        restore(&s, "loader:unchecked", &zero_checksum(&layout.payload(3, &mutex(5, None))), false).is_ok();
    eprintln!("this server restores a payload with a zero checksum: {zero_unchecked}");
    for broken in broken_values(&layout) {
        let payload = layout.framed(broken.value.clone());
        let log_before = s.log_contents().len();
        let fresh = restore(&s, "loader:dst", &payload, false);
        assert!(fresh.is_err(), "{} (v{}): RESTORE accepted it", broken.what, broken.encver);
        assert!(!exists(&s, "loader:dst"), "{}: a refused RESTORE left a key", broken.what);
        // Over a held lock, REPLACE refuses it too and leaves the lock as it was.
        assert!(restore(&s, "loader:held", &payload, true).is_err(), "{}: REPLACE accepted it", broken.what);
        let now = status_of(&s, "loader:held");
        assert_eq!(
            (now.fence, now.held),
            (held_before.fence, true),
            "{}: the held lock changed",
            broken.what
        );
        if let Some(logged) = broken.logged {
            let log = s.log_contents();
            let new = &log[log_before.min(log.len())..];
            assert!(
                new.contains("fencedlock: refusing a lock value: ") && new.contains(logged),
                "{}: the log does not say \"{logged}\":\n{new}",
                broken.what
            );
        }
        // With its checksum zeroed: where the server takes that as "not checked", the module is
        // all that refuses it.
        let logged_before = broken.logged.map(|l| s.log_contents().matches(l).count());
        let unchecked = zero_checksum(&payload);
        assert!(
            restore(&s, "loader:dst", &unchecked, false).is_err(),
            "{}: zero checksum accepted",
            broken.what
        );
        assert!(!exists(&s, "loader:dst"), "{}: a refused RESTORE left a key", broken.what);
        if let (true, Some(logged), Some(before)) = (zero_unchecked, broken.logged, logged_before) {
            assert!(
                s.log_contents().matches(logged).count() > before,
                "{}: not refused by the module",
                broken.what
            );
        }
    }
    let log = s.log_contents();
    assert!(!log.contains(std::str::from_utf8(SECRET).unwrap()), "a token reached the log");
    // The lock held throughout is intact: its holder still holds it and releases it.
    assert_eq!(release(&s, "loader:held", SECRET), 1);
    assert!(grant(&s, "loader:held", b"next", LONG_TTL) > held_fence);
}

#[test]
fn valid_values_of_every_encoding_version_restore() {
    let s = Server::start();
    let layout = Layout::of(&s);
    let longest_token = vec![b'T'; MAX_TOKEN_LEN];
    let longest_label = vec![b'L'; MAX_LABEL_LEN];
    let restored = |key: &str, encver, fields: &[Field]| {
        restore(&s, key, &layout.payload(encver, fields), false)
            .unwrap_or_else(|e| panic!("{key} (v{encver}): {e}"));
    };

    restored("loader:v1", 1, &mutex(11, Some((b"v1-holder", MINUTE, None))));
    restored("loader:v2", 2, &mutex(12, Some((b"v2-holder", MINUTE, Some(b"node-2")))));
    restored("loader:v3:idle", 3, &mutex(13, None));
    restored("loader:v3:sem", 3, &semaphore(15, 3, &[(14, b"sem-a", MINUTE), (15, b"sem-b", MINUTE)]));
    restored(
        "loader:v4:readers",
        4,
        &semaphore(17, 0, &[(16, b"reader-a", MINUTE), (17, b"reader-b", MINUTE)]),
    );
    // The edges of every range are inside it.
    restored("loader:edges", 3, &mutex(1, Some((&longest_token, LONGEST_LEASE, Some(&longest_label)))));
    let full: Vec<(u64, Vec<u8>, u64)> =
        (1..=u64::from(MAX_PERMITS)).map(|f| (f, f.to_be_bytes().to_vec(), MINUTE)).collect();
    let full: Vec<(u64, &[u8], u64)> = full.iter().map(|(f, t, r)| (*f, t.as_slice(), *r)).collect();
    restored("loader:full", 3, &semaphore(u64::from(MAX_PERMITS), u64::from(MAX_PERMITS), &full));

    let st = status_of(&s, "loader:v1");
    assert_eq!((st.fence, st.held, st.label), (11, true, None));
    let st = status_of(&s, "loader:v2");
    assert_eq!((st.fence, st.held, st.label.as_deref()), (12, true, Some(&b"node-2"[..])));
    let st = status_of(&s, "loader:v3:idle");
    assert_eq!((st.fence, st.held), (13, false));
    let sem = s.semaphore_status("loader:v3:sem").expect("a semaphore");
    assert_eq!((sem.fence, sem.permits), (15, 3));
    assert_eq!(sem.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), vec![14, 15]);
    let readers = s.semaphore_status("loader:v4:readers").expect("read leases");
    assert!(readers.is_shared() && readers.holders.len() == 2, "{readers:?}");
    let st = status_of(&s, "loader:edges");
    assert_eq!((st.fence, st.held, st.label), (1, true, Some(longest_label.clone())));
    let left = st.remaining.expect("held").as_millis();
    assert!(left <= u128::from(MAX_MAX_TTL_MS) && left > u128::from(MAX_MAX_TTL_MS - 60_000), "{left} ms");
    let sem = s.semaphore_status("loader:full").expect("a semaphore");
    assert_eq!((sem.permits as usize, sem.holders.len()), (MAX_PERMITS as usize, MAX_PERMITS as usize));

    // The tokens travelled: each holder still holds, and releases.
    assert_eq!(release(&s, "loader:v1", b"v1-holder"), 1);
    assert_eq!(release(&s, "loader:v2", b"v2-holder"), 1);
    assert_eq!(release(&s, "loader:v3:sem", b"sem-a"), 1);
    assert_eq!(release(&s, "loader:v4:readers", b"reader-b"), 1);
    assert_eq!(release(&s, "loader:edges", &longest_token), 1);
    assert_eq!(release(&s, "loader:full", &1024u64.to_be_bytes()), 1);
    // And restored fences are never issued again.
    assert!(grant(&s, "loader:v3:idle", b"t", LONG_TTL) > 15);
}

/// The file's bytes with the value of `key` (a released lock whose `DUMP` is `dump`) replaced
/// by `value`, the trailing checksum made right again.
fn with_value_replaced(rdb: &[u8], key: &str, dump: &[u8], value: &[u8]) -> Vec<u8> {
    let mut entry = dump[..1].to_vec();
    push_len(&mut entry, key.len() as u64);
    entry.extend_from_slice(key.as_bytes());
    let old_value = &dump[1..dump.len() - 10];
    entry.extend_from_slice(old_value);
    let at =
        rdb.windows(entry.len()).position(|w| w == entry.as_slice()).expect("the key's entry in the RDB");
    let value_at = at + entry.len() - old_value.len();
    let mut out = rdb[..value_at].to_vec();
    out.extend_from_slice(value);
    out.extend_from_slice(&rdb[value_at + old_value.len()..rdb.len() - 8]);
    harness::seal_dump(&out)
}

#[test]
fn an_rdb_with_a_value_that_breaks_an_invariant_fails_to_load() {
    let mut s = Server::start();
    let layout = Layout::of(&s);
    let key = "loader:rdb";
    grant(&s, key, b"t", LONG_TTL);
    assert_eq!(release(&s, key, b"t"), 1);
    let dump: Vec<u8> = s.cmd(&["DUMP", key]).unwrap();
    s.save();
    let path: PathBuf = s.dir().join("dump.rdb");
    let good = std::fs::read(&path).expect("the saved RDB");
    let bad_value = layout.value(3, &semaphore(9, 3, &[(10, b"a", MINUTE)]));
    std::fs::write(&path, with_value_replaced(&good, key, &dump, &bad_value)).expect("write the RDB");
    let why = "a holder's fence 10 is above the key's fence 9";

    // A reload from the file fails, and says why.
    let reload = s.query::<()>(redis::cmd("DEBUG").arg("RELOAD").arg("NOSAVE"));
    assert!(reload.is_err(), "DEBUG RELOAD loaded the broken value");
    assert!(s.log_contents().contains(why), "{}", s.log_tail(10));

    // So does a start from it: the server refuses to run with the value rather than load it.
    s.stop();
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.restart()));
    assert!(started.is_err(), "the server started from an RDB with a broken value");
    assert!(s.log_contents().matches(why).count() >= 2, "{}", s.log_tail(10));

    // The same file with the value as it was loads.
    std::fs::write(&path, &good).expect("write the RDB");
    s.restart();
    assert_eq!(status_of(&s, key).fence, read_fence(&dump));
}

/// The fence of a released lock's `DUMP`: its first field (opcode, length-encoded number).
fn read_fence(dump: &[u8]) -> u64 {
    let (_, id_len) = read_len(&dump[1..]);
    let at = 1 + id_len;
    assert_eq!(dump[at], UINT_OPCODE);
    read_len(&dump[at + 1..]).0
}

/// A RESP command, as the AOF holds it.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// An `APPLYSEM` holders argument: per holder its fence and µs left (8 bytes each), its token's
/// and label's lengths (2 bytes each) and their bytes, all little-endian.
fn holders_blob(holders: &[(u64, &[u8], u64)]) -> Vec<u8> {
    let mut blob = Vec::new();
    for (fence, token, remaining) in holders {
        blob.extend_from_slice(&fence.to_le_bytes());
        blob.extend_from_slice(&remaining.to_le_bytes());
        blob.extend_from_slice(&(token.len() as u16).to_le_bytes());
        blob.extend_from_slice(&0u16.to_le_bytes());
        blob.extend_from_slice(token);
    }
    blob
}

/// The incremental AOF file of a server's multi-part AOF (Redis 7+, Valkey).
fn incr_aof(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir.join("appendonlydir"))
        .expect("the AOF directory")
        .map(|e| e.expect("a dir entry").path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file")
}

#[test]
fn aof_records_that_break_an_invariant_are_not_applied() {
    let mut s = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let kept = grant(&s, "loader:aof:kept", b"t", LONG_TTL);
    s.stop();
    let minute = MINUTE.to_string();
    let apply = |key: &str, rest: &[&[u8]]| {
        let mut args: Vec<&[u8]> = vec![b"FENCEDLOCK.APPLY", key.as_bytes()];
        args.extend_from_slice(rest);
        resp(&args)
    };
    let applysem = |key: &str, fence: &str, permits: &str, holders: &[(u64, &[u8], u64)]| {
        let blob = holders_blob(holders);
        resp(&[b"FENCEDLOCK.APPLYSEM", key.as_bytes(), b"1", fence.as_bytes(), permits.as_bytes(), &blob])
    };
    let too_long = (LONGEST_LEASE + 1).to_string();
    let above_max = (MAX_FENCE + 1).to_string();
    let mut records = vec![resp(&[b"SELECT", b"0"])];
    let bad_keys = [
        ("loader:aof:fence0", apply("loader:aof:fence0", &[b"1", b"0"])),
        ("loader:aof:empty-token", apply("loader:aof:empty-token", &[b"1", b"5", b"", minute.as_bytes()])),
        ("loader:aof:expired", apply("loader:aof:expired", &[b"1", b"5", SECRET, b"0"])),
        ("loader:aof:too-long", apply("loader:aof:too-long", &[b"1", b"5", SECRET, too_long.as_bytes()])),
        (
            "loader:aof:empty-label",
            apply("loader:aof:empty-label", &[b"1", b"5", SECRET, minute.as_bytes(), b""]),
        ),
        ("loader:aof:mark", apply("loader:aof:mark", &[above_max.as_bytes(), b"5"])),
        ("loader:aof:fence", apply("loader:aof:fence", &[b"1", above_max.as_bytes()])),
        ("loader:aof:order", applysem("loader:aof:order", "9", "3", &[(5, b"a", MINUTE), (4, b"b", MINUTE)])),
        (
            "loader:aof:twice",
            applysem("loader:aof:twice", "9", "3", &[(4, SECRET, MINUTE), (5, SECRET, MINUTE)]),
        ),
        ("loader:aof:above", applysem("loader:aof:above", "9", "3", &[(10, b"a", MINUTE)])),
        ("loader:aof:permits", applysem("loader:aof:permits", "9", "1", &[(4, b"a", MINUTE)])),
        (
            "loader:aof:crowded",
            applysem(
                "loader:aof:crowded",
                "9",
                "2",
                &[(1, b"a", MINUTE), (2, b"b", MINUTE), (3, b"c", MINUTE)],
            ),
        ),
    ];
    records.extend(bad_keys.iter().map(|(_, r)| r.clone()));
    records.push(apply("loader:aof:good", &[b"1", b"77", b"good-holder", minute.as_bytes()]));
    records.push(applysem("loader:aof:good-sem", "9", "3", &[(4, b"a", MINUTE), (9, b"b", MINUTE)]));
    let path = incr_aof(s.dir());
    let mut aof = std::fs::read(&path).expect("the AOF");
    aof.extend(records.concat());
    std::fs::write(&path, aof).expect("write the AOF");
    s.restart();

    for (key, _) in &bad_keys {
        assert!(!exists(&s, key), "{key}: a record that breaks an invariant was applied");
    }
    assert_eq!(status_of(&s, "loader:aof:kept").fence, kept);
    let st = status_of(&s, "loader:aof:good");
    assert_eq!((st.fence, st.held), (77, true));
    assert_eq!(release(&s, "loader:aof:good", b"good-holder"), 1);
    let sem = s.semaphore_status("loader:aof:good-sem").expect("a semaphore");
    assert_eq!(sem.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), vec![4, 9]);
    assert!(!s.log_contents().contains(std::str::from_utf8(SECRET).unwrap()), "a token reached the log");
}
