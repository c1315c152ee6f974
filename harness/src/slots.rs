//! Keys in given Redis Cluster slots, and the names of the module's per-slot fence floor keys.
//! The slot hash itself is the protocol crate's (`key_slot`).
//!
//! Tests use this to pick keys in a given slot (for example a slot that `redis-cli --cluster
//! reshard` will move) and to tell floor keys from lock keys in a node's keyspace.

pub use fencedlock_protocol::cluster::{key_slot, FLOOR_KEY_PREFIX, SLOTS};

/// A key `{prefix}{{n}}` (the prefix, then a decimal hash tag) that hashes to `slot`: the
/// smallest such `n`. Every slot has one below 200,000.
pub fn key_in_slot(prefix: &str, slot: u16) -> String {
    assert!(slot < SLOTS, "slot {slot} out of range");
    (0u32..200_000)
        .map(|n| format!("{prefix}{{{n}}}"))
        .find(|key| key_slot(key.as_bytes()) == slot)
        .unwrap_or_else(|| panic!("no decimal tag below 200000 hashes to slot {slot}"))
}

/// Whether `key` is named like a floor key: the prefix, a non-empty decimal tag, `}`.
pub fn is_floor_key(key: &str) -> bool {
    key.strip_prefix(FLOOR_KEY_PREFIX)
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|tag| !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_key_in_any_slot() {
        for slot in [0, 1, 6125, 16383] {
            let key = key_in_slot("k:", slot);
            assert!(key.starts_with("k:{"), "{key}");
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn recognises_floor_key_names() {
        assert!(is_floor_key("fencedlock:floor:{1234}"));
        assert!(!is_floor_key("fencedlock:floor:{}"));
        assert!(!is_floor_key("fencedlock:floor:{12a}"));
        assert!(!is_floor_key("invoice:{1234}"));
    }
}
