//! The module-less engine: the `fencedlock` Redis Functions library (`functions.lua`), for
//! servers that cannot load modules. Its functions take the commands' arguments after the
//! key and give the commands' replies and error texts; they live here because they are the
//! same wire contract.
//!
//! `FCALL fencedlock_acquire 2 key floor token ttl_ms …`: `floor` is [`floor_key`] of the
//! key, the one key of the key's slot that keeps the slot's highest fence (a script may touch
//! only the keys it is given, and a lock key of any name must find its floor in its own slot).
//! The library refuses any other floor key, and any wake-up list but [`wake_key`]: a second
//! floor for one slot would let fences repeat. With numkeys 1 the call still works, but fences
//! then rise only while the key lives (and the key is never expired by the library). See
//! `functions.lua` for the rest.

use std::borrow::Cow;

use crate::cluster::{key_slot, SLOTS};
use crate::command::{Command, ACQUIRE, ACQUIREALL, CAD, RAISE, RELEASE, RENEW, STATUS};

/// The library's source, for `FUNCTION LOAD REPLACE` (its first line names the library).
pub const LIBRARY: &str = include_str!("functions.lua");

/// The library as a script, for servers that deny `FUNCTION` but allow `EVALSHA`: the same
/// source without its `#!lua name=…` line (which `EVAL` refuses), called as
/// `EVALSHA sha numkeys keys… function args…` with the function's name as the first argument.
pub fn eval_script() -> &'static str {
    LIBRARY.split_once('\n').map_or(LIBRARY, |(_, body)| body)
}

/// The library's name in `FUNCTION LIST`.
pub const NAME: &str = "fencedlock";

/// The library's version, replied by [`VERSION_FUNCTION`]: a client loads the library when
/// the server's is missing or older (or of this version with other code). Raise it with every
/// change to `functions.lua`, and pin the new source's [`SOURCE_DIGEST`] beside it: servers
/// that run an older library of the same number would otherwise keep it.
pub const VERSION: u64 = 12;

/// [`source_digest`] of the library at [`VERSION`]. A test fails when `functions.lua` changes
/// and this does not, which is the reminder to raise [`VERSION`] with it.
pub const SOURCE_DIGEST: u64 = 0x41b07c43c29fc135;

/// FNV-1a (64 bits) of the library's source: a change detector, not a security measure.
pub fn source_digest() -> u64 {
    LIBRARY
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// The function that replies the loaded library's [`VERSION`] (read-only, like `_status`).
pub const VERSION_FUNCTION: &str = "fencedlock_version";

/// Names of the Functions library's floor keys start with this, followed by the slot's tag
/// and `}`. Not the module's prefix: a server that later loads the module must not find a
/// hash where it keeps its own floor values.
pub const FLOOR_KEY_PREFIX: &str = "fencedlock:fn-floor:{";

/// Names of the wake-up lists start with this, followed by the slot's tag, `}:` and the lock
/// key: one list per lock key, in its slot. A release pushes onto it, and a waiter `BLPOP`s
/// on it between attempts, so it is woken by the release instead of polling for it.
pub const WAKE_KEY_PREFIX: &str = "fencedlock:fn-wake:{";

/// How long a wake-up nobody took stays in its list. A waiter between its refused attempt and
/// its `BLPOP` must still find it; one found later only costs a spurious attempt.
pub const WAKE_TTL_MS: u64 = 10_000;

/// The largest fence the library issues: Lua numbers are doubles, exact only up to 2^53.
/// Beyond it (or a `RAISE` above it) the reply is the module's `FencesExhausted`.
pub const MAX_SAFE_FENCE: u64 = (1 << 53) - 1;

/// How many fences one millisecond of wall clock is worth when the library starts a new epoch
/// (a restart, a promotion, a slot's new owner): the module counts per microsecond, which
/// would leave the doubles' exact range; one grant per µs per slot is still far above what a
/// script can do. `MAX_SAFE_FENCE / 1024` ms after 1970 is the year 2248.
pub const FENCES_PER_MILLISECOND: u64 = 1024;

/// The function that serves `command`, `None` for the module's internal commands.
pub fn function(command: &Command) -> Option<&'static str> {
    [
        (ACQUIRE, "fencedlock_acquire"),
        (ACQUIREALL, "fencedlock_acquireall"),
        (RENEW, "fencedlock_renew"),
        (RELEASE, "fencedlock_release"),
        (RAISE, "fencedlock_raise"),
        (CAD, "fencedlock_cad"),
        (STATUS, "fencedlock_status"),
    ]
    .into_iter()
    .find(|(served, _)| served.name == command.name)
    .map(|(_, name)| name)
}

/// Whether `command` takes the floor key after its lock key (the commands that may grant or
/// change a fence, or a key's expiry; `ACQUIREALL` after all of them, see [`call_keys_all`]);
/// `CAD` and `STATUS` take the lock key alone.
pub fn takes_floor(command: &Command) -> bool {
    !matches!(function(command), None | Some("fencedlock_cad" | "fencedlock_status"))
}

/// Whether `command` always takes the wake-up list as its third key: `RELEASE`, the one
/// function that frees a lease early (an expiry runs no script, so waiters also time their
/// `BLPOP` to the holder's lease). `ACQUIRE` takes it from a waiter: its refusal asks the
/// releases until the refusing leases end to push a wake-up (without one they skip the list).
pub fn takes_wake(command: &Command) -> bool {
    function(command) == Some("fencedlock_release")
}

/// The start of the library's refusal of a floor key other than the lock key's own; the
/// expected key follows.
pub const WRONG_FLOOR_KEY: &str = "ERR fencedlock: wrong floor key; this lock key's is ";

/// The start of the library's refusal of a wake-up list other than the lock key's own; the
/// expected list follows.
pub const WRONG_WAKE_KEY: &str = "ERR fencedlock: wrong wake-up list; this lock key's is ";

/// How long a floor tag is.
pub const FLOOR_TAG_LEN: usize = 6;

/// The floor tag of `slot`: the one string of six ASCII digits, the first two `0`–`7` and the
/// other four `0`–`3`, whose own slot (`CLUSTER KEYSLOT`) is `slot`. The 16,384 such strings
/// hash to 16,384 different slots, so each slot has exactly one floor key, and the library can
/// tell it from any other name: a second floor for the same slot would let fences repeat.
///
/// (The Functions library computes it from the slot with `TAG_ORIGIN` and `TAG_BASIS`: the map
/// from a tag's 14 digit bits to its slot is linear over GF(2), so its inverse is 14 numbers.)
pub fn floor_tag(slot: u16) -> [u8; FLOOR_TAG_LEN] {
    static BY_SLOT: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    let by_slot = BY_SLOT.get_or_init(|| {
        let mut by_slot = vec![0; usize::from(SLOTS)];
        for bits in 0..SLOTS {
            by_slot[usize::from(key_slot(&tag_of_bits(bits)))] = bits;
        }
        by_slot
    });
    tag_of_bits(by_slot[usize::from(slot % SLOTS)])
}

/// The tag whose digits carry `bits` (the low 14): 3, 3, 2, 2, 2 and 2 bits, high bits first.
fn tag_of_bits(bits: u16) -> [u8; FLOOR_TAG_LEN] {
    const WIDTHS: [u32; FLOOR_TAG_LEN] = [3, 3, 2, 2, 2, 2];
    let mut tag = [b'0'; FLOOR_TAG_LEN];
    let mut shift = WIDTHS.iter().sum::<u32>();
    for (digit, width) in tag.iter_mut().zip(WIDTHS) {
        shift -= width;
        // At most 3 bits: the cast cannot truncate.
        *digit += ((bits >> shift) & ((1 << width) - 1)) as u8;
    }
    tag
}

/// The wake-up list of `key`: `fencedlock:fn-wake:{tag}:key`, in `key`'s slot.
pub fn wake_key(key: &[u8]) -> Vec<u8> {
    wake_key_tagged(&floor_tag(key_slot(key)), key)
}

fn wake_key_tagged(tag: &[u8], key: &[u8]) -> Vec<u8> {
    let mut name = WAKE_KEY_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(tag);
    name.extend_from_slice(b"}:");
    name.extend_from_slice(key);
    name
}

/// The floor key of `key`'s slot: `fencedlock:fn-floor:{tag}`, with the slot's [`floor_tag`],
/// so it hashes to the same slot as `key` on any Redis Cluster (and is one of at most 16,384
/// keys elsewhere).
pub fn floor_key(key: &[u8]) -> Vec<u8> {
    floor_key_tagged(&floor_tag(key_slot(key)))
}

fn floor_key_tagged(tag: &[u8]) -> Vec<u8> {
    let mut name = FLOOR_KEY_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(tag);
    name.push(b'}');
    name
}

/// The keys of `fencedlock_acquireall` for `keys` (all of one slot): the lock keys in order,
/// then the floor key of their slot, which the library requires (one floor covers every fence
/// of the set, so a key of another slot is refused as a wrong floor).
pub fn call_keys_all(keys: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = keys.iter().map(|key| key.to_vec()).collect();
    if let Some(first) = keys.first() {
        all.push(floor_key(first));
    }
    all
}

/// The keys a call of `command`'s function names, in order: the lock key, then its floor key
/// where the function [`takes_floor`], then its wake-up list where it [`takes_wake`] or where
/// a waiter's `ACQUIRE` asks for wake-ups (`waiting`). Every client builds its calls from this.
pub fn call_keys(command: &Command, key: &[u8], waiting: bool) -> Vec<Vec<u8>> {
    let mut keys = vec![key.to_vec()];
    if takes_floor(command) {
        let tag = floor_tag(key_slot(key));
        keys.push(floor_key_tagged(&tag));
        if takes_wake(command) || (waiting && command.name == ACQUIRE.name) {
            keys.push(wake_key_tagged(&tag, key));
        }
    }
    keys
}

/// How a request is sent: to the module, or to the library as a function or as a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// The module's command: the words as the request builds them.
    Module,
    /// `FCALL function numkeys keys… rest…`.
    Fcall,
    /// `EVALSHA sha numkeys keys… function rest…`: the library's source as a script
    /// ([`eval_script`], named by [`script_sha`]), for servers that deny `FUNCTION`.
    Evalsha,
}

impl Form {
    /// Every form, in the order the contract lists them.
    pub const ALL: [Form; 3] = [Form::Module, Form::Fcall, Form::Evalsha];

    /// The form's name in the contract (`contract.json`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Form::Module => "module",
            Form::Fcall => "fcall",
            Form::Evalsha => "evalsha",
        }
    }
}

/// The SHA-1 of [`eval_script`] in hex, by which `EVALSHA` names it (what `SCRIPT LOAD`
/// replies for it).
pub fn script_sha() -> &'static str {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHA.get_or_init(|| crate::sha1::hex(eval_script().as_bytes()))
}

/// A request's `words` (the command's name first, then its key or, for `ACQUIREALL`, the
/// keys' count) as `form` sends them: the module's words unchanged; the library's form the
/// function's name, the count of the keys [`call_keys`] (or [`call_keys_all`]) names, those
/// keys, then the words after the key (for the script form, the function's name first). The
/// module's internal commands, which the library does not serve, keep the module's words.
/// Every client sends exactly these words (`waiting`: an `ACQUIRE` sent by a waiter).
pub fn form<'a>(form: Form, command: &Command, words: &[Cow<'a, [u8]>], waiting: bool) -> Vec<Cow<'a, [u8]>> {
    let function = match function(command) {
        Some(function) if form != Form::Module => function,
        _ => return words.to_vec(),
    };
    let (key, rest) = match words {
        [_name, key, rest @ ..] => (&key[..], rest),
        // Every request has its key; a bug here must not send a malformed command.
        _ => (&b""[..], &[][..]),
    };
    let (keys, rest) = if command.counts_keys() {
        // `ACQUIREALL count key…`: the library takes the keys, then their slot's floor (the
        // caller keeps them in one slot).
        let count = std::str::from_utf8(key).ok().and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
        let (keys, rest) = rest.split_at(count.min(rest.len()));
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        (call_keys_all(&keys), rest)
    } else {
        (call_keys(command, key, waiting), rest)
    };
    let mut sent: Vec<Cow<'a, [u8]>> = Vec::with_capacity(4 + keys.len() + rest.len());
    match form {
        Form::Evalsha => {
            sent.extend([Cow::Borrowed(&b"EVALSHA"[..]), Cow::Borrowed(script_sha().as_bytes())])
        }
        _ => sent.extend([Cow::Borrowed(&b"FCALL"[..]), Cow::Borrowed(function.as_bytes())]),
    }
    sent.push(Cow::Owned(keys.len().to_string().into_bytes()));
    sent.extend(keys.into_iter().map(Cow::Owned));
    if form == Form::Evalsha {
        sent.push(Cow::Borrowed(function.as_bytes()));
    }
    sent.extend(rest.iter().cloned());
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{ALL, SHARED_PERMITS};
    use crate::epoch::FENCES_PER_MICROSECOND;
    use crate::limits::{
        DEFAULT_MAX_TTL_MS, DEFAULT_RECLAIM_AFTER_MS, EPOCH_GAP, MAX_ACQUIRE_KEYS, MAX_BLOCK_MS, MAX_FENCE,
        MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN,
    };
    use crate::ReplyError;

    /// `local NAME = value` must be in the Lua source.
    fn has_local(name: &str, value: impl std::fmt::Display) {
        let line = format!("\nlocal {name} = {value}\n");
        assert!(LIBRARY.contains(&line), "functions.lua lacks {line:?}");
    }

    #[test]
    fn the_source_names_the_library_and_its_version() {
        assert!(LIBRARY.starts_with(&format!("#!lua name={NAME}\n")));
        has_local("VERSION", VERSION);
        assert!(!eval_script().starts_with("#!") && LIBRARY.ends_with(eval_script()));
        for command in crate::command::ALL {
            if let Some(name) = function(&command) {
                assert!(
                    LIBRARY.contains(&format!("{name} = {}", &name["fencedlock_".len()..])),
                    "{name} as a script"
                );
            }
        }
    }

    #[test]
    fn the_lua_constants_are_the_protocols() {
        has_local("MAX_TOKEN_LEN", MAX_TOKEN_LEN);
        has_local("MAX_LABEL_LEN", MAX_LABEL_LEN);
        has_local("MAX_PERMITS", MAX_PERMITS);
        has_local("MAX_ACQUIRE_KEYS", MAX_ACQUIRE_KEYS);
        has_local("SHARED_PERMITS", SHARED_PERMITS);
        // The library cannot read configs: its ttl bound and retention are the defaults.
        has_local("MAX_TTL_MS", DEFAULT_MAX_TTL_MS);
        has_local("RETENTION_MS", DEFAULT_RECLAIM_AFTER_MS);
        has_local("MAX_BLOCK_MS", MAX_BLOCK_MS);
        has_local("MAX_FENCE", MAX_FENCE);
        has_local("MAX_SAFE_FENCE", MAX_SAFE_FENCE);
        has_local("FENCES_PER_MS", FENCES_PER_MILLISECOND);
        has_local("EPOCH_GAP", EPOCH_GAP);
        has_local("FLOOR_PREFIX", format!("'{FLOOR_KEY_PREFIX}'"));
        has_local("WAKE_PREFIX", format!("'{WAKE_KEY_PREFIX}'"));
        has_local("WAKE_TTL_MS", WAKE_TTL_MS);
        assert_eq!(FENCES_PER_MILLISECOND, FENCES_PER_MICROSECOND, "the same rate, per ms");
        // Every fence an epoch can start at now and for two centuries is exact in a double.
        let year_2200_ms = 7_258_118_400_000u64;
        assert!(year_2200_ms * FENCES_PER_MILLISECOND + EPOCH_GAP < MAX_SAFE_FENCE);
        const { assert!(MAX_BLOCK_MS < MAX_SAFE_FENCE && DEFAULT_MAX_TTL_MS * 1000 < MAX_SAFE_FENCE) };
    }

    #[test]
    fn the_lua_error_texts_are_the_protocols() {
        for kind in [
            ReplyError::BadTtl,
            ReplyError::BadToken,
            ReplyError::BadFence,
            ReplyError::BadTimeout,
            ReplyError::BadLabel,
            ReplyError::BadPermits,
            ReplyError::Syntax,
            ReplyError::UpgradeRefused,
            ReplyError::FencesExhausted,
            ReplyError::WrongType,
            ReplyError::BadKeys,
        ] {
            let text = format!("'{}'", kind.message(0));
            assert!(LIBRARY.contains(&text), "functions.lua lacks {kind:?}: {text}");
        }
        let too_large = format!("'{}'", ReplyError::TtlTooLarge.message(DEFAULT_MAX_TTL_MS));
        assert!(LIBRARY.contains(&too_large), "{too_large}");
        // The count goes between the two halves.
        let marker = 987_654_321;
        let mismatch = ReplyError::PermitsMismatch.message(marker);
        let (head, tail) = mismatch.split_once(&marker.to_string()).expect("the count is in the text");
        assert!(LIBRARY.contains(&format!("{{'{head}', '{tail}'}}")), "{mismatch}");
        let held_shared = format!("'{}'", ReplyError::PermitsMismatch.message(u64::from(SHARED_PERMITS)));
        assert!(LIBRARY.contains(&held_shared), "{held_shared}");
    }

    #[test]
    fn every_command_of_the_contract_has_a_registered_function() {
        let mut served = 0;
        for command in ALL {
            let Some(name) = function(&command) else { continue };
            served += 1;
            assert_eq!(name, format!("fencedlock_{}", command.name["FENCEDLOCK.".len()..].to_lowercase()));
            let registered = [format!("register_function('{name}'"), format!("function_name = '{name}'")];
            assert!(registered.iter().any(|r| LIBRARY.contains(r)), "{name} is not registered");
            let arity = format!("arity('{}')", command.name.to_lowercase());
            assert!(LIBRARY.contains(&arity), "{name} does not check its arity as {arity}");
        }
        assert_eq!(served, 7);
        assert!(LIBRARY.contains(&format!("function_name = '{VERSION_FUNCTION}'")));
        assert!(takes_floor(&ACQUIRE) && takes_floor(&RAISE) && !takes_floor(&STATUS) && !takes_floor(&CAD));
        assert!(takes_floor(&ACQUIREALL) && !takes_wake(&ACQUIREALL));
        assert!(takes_wake(&RELEASE) && !takes_wake(&ACQUIRE) && !takes_wake(&RENEW));
    }

    #[test]
    fn a_floor_key_is_in_its_keys_slot() {
        for key in [&b"invoice:inv_72"[..], b"", b"{user1}.lock", b"a{b", b"\xff\x00"] {
            let floor = floor_key(key);
            assert!(floor.starts_with(FLOOR_KEY_PREFIX.as_bytes()));
            assert_eq!(key_slot(&floor), key_slot(key), "{}", String::from_utf8_lossy(&floor));
            let wake = wake_key(key);
            assert!(wake.starts_with(WAKE_KEY_PREFIX.as_bytes()) && wake.ends_with(key));
            assert_eq!(key_slot(&wake), key_slot(key), "{}", String::from_utf8_lossy(&wake));
        }
        assert_ne!(FLOOR_KEY_PREFIX, crate::cluster::FLOOR_KEY_PREFIX);
        assert_ne!(wake_key(b"a"), wake_key(b"b"), "one list per lock key");
        for key in [&b"lockk"[..], b"{0}k", b""] {
            let (floor, wake) = (floor_key(key), wake_key(key));
            assert_eq!(call_keys(&STATUS, key, true), [key.to_vec()]);
            assert_eq!(call_keys(&CAD, key, false), [key.to_vec()]);
            assert_eq!(call_keys(&RENEW, key, true), [key.to_vec(), floor.clone()], "only ACQUIRE waits");
            assert_eq!(call_keys(&ACQUIRE, key, false), [key.to_vec(), floor.clone()]);
            assert_eq!(call_keys(&ACQUIRE, key, true), [key.to_vec(), floor.clone(), wake.clone()]);
            assert_eq!(call_keys(&RELEASE, key, false), [key.to_vec(), floor, wake]);
        }
        let set: [&[u8]; 2] = [b"{t}a", b"{t}b"];
        assert_eq!(call_keys_all(&set), [set[0].to_vec(), set[1].to_vec(), floor_key(b"{t}")]);
        // Values the README and the other languages' tests show.
        assert_eq!(floor_key(b"lockk"), b"fencedlock:fn-floor:{221102}");
        assert_eq!(&floor_tag(0), b"253312");
        assert_eq!(wake_key(b"lockk"), b"fencedlock:fn-wake:{221102}:lockk");
    }

    #[test]
    fn every_slot_has_exactly_one_floor_tag_of_the_documented_shape() {
        let mut tags = std::collections::HashSet::new();
        for slot in 0..SLOTS {
            let tag = floor_tag(slot);
            assert_eq!(key_slot(&tag), slot);
            let (high, low) = tag.split_at(2);
            assert!(
                high.iter().all(|d| (b'0'..=b'7').contains(d))
                    && low.iter().all(|d| (b'0'..=b'3').contains(d))
            );
            tags.insert(tag);
        }
        // 8 * 8 * 4^4 strings of that shape, each the tag of one slot: no slot has a second.
        assert_eq!(tags.len(), 8 * 8 * 4 * 4 * 4 * 4);
    }

    /// The number after `local NAME = ` in the Lua source (the line may be indented).
    fn lua_number(name: &str) -> u64 {
        let line = LIBRARY
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("local {name} = ")))
            .unwrap_or_else(|| panic!("no local {name}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// The numbers of the Lua table constructor `local NAME = { … }` (over one or more lines).
    fn lua_numbers(name: &str) -> Vec<u64> {
        let head = format!("local {name} = {{");
        let start = LIBRARY.find(&head).unwrap_or_else(|| panic!("no local {name}")) + head.len();
        let body = LIBRARY[start..].split('}').next().unwrap();
        body.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|n| !n.is_empty())
            .map(|n| n.parse().unwrap())
            .collect()
    }

    #[test]
    fn the_lua_computes_the_same_floor_tags() {
        // The CRC16 table of key_slot, as the protocol's checksum gives it.
        let rows: Vec<String> = (0..256u16)
            .collect::<Vec<_>>()
            .chunks(16)
            .map(|row| {
                let crcs: Vec<String> = row
                    .iter()
                    .map(|&b| crate::cluster::crc16_of_byte(u8::try_from(b).unwrap()).to_string())
                    .collect();
                format!("    {},", crcs.join(", "))
            })
            .collect();
        let table = format!("  local CRC16 = {{\n{}\n  }}\n", rows.join("\n"));
        assert!(LIBRARY.contains(&table), "functions.lua's CRC16 table should be\n{table}");
        // The proof's table of the floor tag's digits: the CRC16 of digit d at place j of six
        // (d and 6 - j zero bytes) at (j - 1) * 8 + (d - '0'); the slot of a tag is the XOR of
        // its six entries, modulo 16384, for every tag of the floor keys' shape.
        let tag_crc = lua_numbers("TAG_CRC");
        assert_eq!(tag_crc.len(), 48);
        for j in 1..=6usize {
            for d in b'0'..=b'7' {
                let mut bytes = vec![d];
                bytes.resize(7 - j, 0);
                assert_eq!(
                    tag_crc[(j - 1) * 8 + usize::from(d - b'0')],
                    u64::from(crate::cluster::crc16(&bytes))
                );
            }
        }
        for slot in 0..SLOTS {
            let tag = floor_tag(slot);
            let crc = tag.iter().enumerate().fold(0, |x, (i, &d)| x ^ tag_crc[i * 8 + usize::from(d - b'0')]);
            assert_eq!(crc % u64::from(SLOTS), u64::from(slot), "slot {slot}");
        }
        // floor_tag's inverse: the Lua's arithmetic, replayed over every slot.
        let origin = lua_number("TAG_ORIGIN");
        let basis = lua_numbers("TAG_BASIS");
        assert_eq!(basis.len(), 14);
        for slot in 0..SLOTS {
            let v = u64::from(slot) ^ origin;
            let bits = (0..14).filter(|i| v >> i & 1 == 1).fold(0, |x, i| x ^ basis[i]);
            assert_eq!(tag_of_bits(u16::try_from(bits).unwrap()), floor_tag(slot), "slot {slot}");
        }
        assert!(LIBRARY.contains(&format!("\nlocal E_FLOOR_KEY = \"{WRONG_FLOOR_KEY}\"\n")));
        assert!(LIBRARY.contains(&format!("\nlocal E_WAKE_KEY = \"{WRONG_WAKE_KEY}\"\n")));
    }

    #[test]
    fn the_version_follows_the_source() {
        assert_eq!(
            source_digest(),
            SOURCE_DIGEST,
            "functions.lua changed: raise VERSION (now {VERSION}) and pin SOURCE_DIGEST = {:#018x}, \
             or servers running version {VERSION} keep their older code",
            source_digest()
        );
    }
}
