//! Redlock's designated master for a key: the masters ranked by a fixed 64-bit hash of key and
//! master address, highest first (rendezvous hashing), ties by address. Every client that
//! lists the same addresses, in any order, waits on the same master first; the vectors of
//! `contract.json` (`vectors.ranking`) hold this function's answers for the other clients.

/// The masters (by index into `names`) in the order in which contenders for `key` wait on
/// them: by [`score`], highest first, ties by name. Every client with the same node
/// addresses computes the same order, whatever order it lists them in.
pub fn ranking<'a>(key: &str, names: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let mut ranked: Vec<(u64, &str, usize)> =
        names.enumerate().map(|(i, name)| (score(key, name), name, i)).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    ranked.into_iter().map(|(_, _, i)| i).collect()
}

/// A fixed 64-bit hash of (key, node name): FNV-1a over both with a separator (`0xff`),
/// finished with the SplitMix64 mixer so that nearby inputs spread. Fixed, so every client and
/// version agrees (std's hasher is randomly seeded per process).
pub fn score(key: &str, name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = key.as_bytes().iter().chain([0xffu8].iter()).chain(name.as_bytes());
    let mut h = bytes.fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_score_is_fixed_across_processes_and_versions() {
        // Changing it would split the votes between old and new clients of one deployment.
        assert_ne!(score("k", "127.0.0.1:6379"), score("k", "127.0.0.1:6380"));
        assert_ne!(score("ab", "c"), score("a", "bc"), "the separator keeps key and name apart");
        assert_eq!(score("invoice:42", "127.0.0.1:6379"), 0x28bc_a2db_ff71_e66b);
        assert_eq!(score("", ""), 0x4f2d_b50f_1240_40cd);
    }

    #[test]
    fn the_order_of_the_names_does_not_matter() {
        let names = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];
        let reversed: Vec<&str> = names.iter().rev().copied().collect();
        let forward: Vec<&str> =
            ranking("invoice:42", names.iter().copied()).into_iter().map(|i| names[i]).collect();
        let backward: Vec<&str> =
            ranking("invoice:42", reversed.iter().copied()).into_iter().map(|i| reversed[i]).collect();
        assert_eq!(forward, backward);
    }
}
