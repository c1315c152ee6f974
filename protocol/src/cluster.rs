//! Keys the module itself writes in Redis Cluster mode.

/// Each slot that has granted a lease holds a floor key named `fencedlock:floor:{<tag>}`, where
/// the hash tag maps it to that slot: a lock value without a holder whose fence is at or above
/// every fence the slot granted. It migrates with the slot, so the slot's next owner never
/// repeats a fence of a key that was deleted or reclaimed before the migration. Never reclaimed;
/// not to be deleted.
pub const FLOOR_KEY_PREFIX: &str = "fencedlock:floor:{";

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ crc16_of_byte(((crc >> 8) as u8) ^ b))
}

/// The CRC16 of one byte `b`, shifted through: the table entry of table-driven CRC16 (the
/// Functions library keeps these 256 in its source).
pub(crate) fn crc16_of_byte(b: u8) -> u16 {
    (0..8).fold(u16::from(b) << 8, |crc, _| if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 })
}

/// The slot of `key` (`CLUSTER KEYSLOT`), with Redis's hash-tag rule: when the key has a `{`
/// followed later by a `}` with something between them, only that part is hashed.
pub fn key_slot(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter().position(|&b| b == b'}').filter(|&len| len > 0).map(|len| &rest[..len])
    });
    crc16(tag.unwrap_or(key)) % SLOTS
}

/// The hash tag that maps a key to slot `of` (taken modulo [`SLOTS`]): the smallest decimal
/// number that hashes there, found once (about 160,000 checksums, a few milliseconds). Floor
/// keys (the module's and the Functions library's) are named with it.
pub fn slot_tag(of: u16) -> u32 {
    static TAGS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut missing = SLOTS;
        let mut n = 0u32;
        while missing > 0 {
            let tag = &mut tags[usize::from(key_slot(n.to_string().as_bytes()))];
            if *tag == u32::MAX {
                *tag = n;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    tags[usize::from(of % SLOTS)]
}

/// The module's floor key of `slot`: `fencedlock:floor:{<tag>}`, the tag [`slot_tag`] in
/// decimal, so the key hashes to `slot` itself.
pub fn floor_key(slot: u16) -> Vec<u8> {
    let mut name = FLOOR_KEY_PREFIX.as_bytes().to_vec();
    name.extend_from_slice(slot_tag(slot).to_string().as_bytes());
    name.push(b'}');
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_cluster_keyslot() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Values from `CLUSTER KEYSLOT` on a real server.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"lockk"), 6125);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"), "an empty tag hashes the whole key");
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn every_slot_tag_hashes_to_its_slot() {
        for slot in 0..SLOTS {
            assert_eq!(key_slot(slot_tag(slot).to_string().as_bytes()), slot);
            assert_eq!(key_slot(&floor_key(slot)), slot);
        }
    }
}
