//! How fencedlock's keys look in a server's keyspace, for tools that find lock keys by
//! scanning (`fencedlock list`) and for the election journal: the type a lock key has on each
//! engine, and the names of the keys fencedlock writes beside lock keys.

use crate::cluster::{self, key_slot};
use crate::functions::{self, floor_tag};
use crate::periodic;

/// The data type the module registers for lock keys: what `TYPE key` answers for one, and
/// the name `SCAN … TYPE` filters by.
pub const MODULE_TYPE: &str = "fencelock";

/// The Redis type of the Functions library's lock keys: a hash whose `kind` field is
/// `fencedlock` (any other hash is `WRONGTYPE` to the library).
pub const LIBRARY_TYPE: &str = "hash";

/// The value of a library lock key's `kind` field.
pub const LIBRARY_KIND: &str = "fencedlock";

/// An election's journal: `fencedlock:elected:{tag}:key` (the tag is the key's slot's
/// [`floor_tag`], so the journal lives in the election key's slot), a stream to which every
/// leader appends `epoch E label L` when it is elected. A watcher that reads it from where it
/// last stopped sees every leader, a leader that resigned before the watcher's next `STATUS`
/// included. Written by the leaders that keep it; a missing journal is no error.
pub const JOURNAL_KEY_PREFIX: &str = "fencedlock:elected:{";

/// The journal keeps about this many entries (`XADD … MAXLEN ~`).
pub const JOURNAL_LENGTH: u64 = 64;

/// A journal lives this long after its last entry (`PEXPIRE`), so one election key leaves no
/// stream behind for ever: a day, far longer than a watcher is expected to be disconnected.
pub const JOURNAL_RETENTION_MS: u64 = 86_400_000;

/// The journal entry's fields.
pub const JOURNAL_EPOCH: &str = "epoch";
/// The leader's label (absent for a leader elected without one).
pub const JOURNAL_LABEL: &str = "label";

/// The prefixes of the keys fencedlock writes beside lock keys (floors, wake-up lists,
/// journals, periodic jobs' records): never lock keys themselves, so a listing leaves them out.
pub const INTERNAL_PREFIXES: [&str; 5] = [
    cluster::FLOOR_KEY_PREFIX,
    functions::FLOOR_KEY_PREFIX,
    functions::WAKE_KEY_PREFIX,
    JOURNAL_KEY_PREFIX,
    periodic::RECORD_KEY_PREFIX,
];

/// The journal of the election on `key`: `fencedlock:elected:{tag}:key`, in `key`'s slot.
pub fn journal_key(key: &[u8]) -> Vec<u8> {
    let mut name = JOURNAL_KEY_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(&floor_tag(key_slot(key)));
    name.extend_from_slice(b"}:");
    name.extend_from_slice(key);
    name
}

/// Whether `key` is one of the keys fencedlock writes beside lock keys.
pub fn is_internal(key: &[u8]) -> bool {
    INTERNAL_PREFIXES.iter().any(|prefix| key.starts_with(prefix.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_is_in_its_election_keys_slot() {
        for key in [&b"scheduler"[..], b"lockk", b"{user:7}:leader", b"a{}b", b""] {
            let journal = journal_key(key);
            assert_eq!(key_slot(&journal), key_slot(key), "{:?}", String::from_utf8_lossy(key));
            assert!(journal.ends_with(key) && is_internal(&journal));
        }
        assert_eq!(journal_key(b"lockk"), b"fencedlock:elected:{221102}:lockk");
    }

    #[test]
    fn internal_keys_are_told_from_lock_keys() {
        assert!(is_internal(&functions::floor_key(b"k")));
        assert!(is_internal(&functions::wake_key(b"k")));
        assert!(is_internal(format!("{}123}}", cluster::FLOOR_KEY_PREFIX).as_bytes()));
        assert!(!is_internal(b"fencedlock:job") && !is_internal(b"invoice:42"));
    }

    #[test]
    fn the_library_writes_its_lock_keys_as_hashes_of_its_kind() {
        let library = functions::LIBRARY;
        assert!(library.contains(&format!("\nlocal KIND = '{LIBRARY_KIND}'\n")));
        assert!(library.contains("redis.call('HSET', key, 'kind', KIND"), "lock keys are hashes");
        assert_eq!(LIBRARY_TYPE, "hash");
    }
}
