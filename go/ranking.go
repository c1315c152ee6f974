package fencedlock

import (
	"cmp"
	"slices"
)

// ranking is the servers (by index into names) in the order in which contenders for key wait
// on them, the first being the key's designated server: by score, highest first, ties by name.
// Every client that lists the same addresses, in any order and in any language, waits on the
// same server first (contract.json's vectors.ranking hold the protocol crate's answers), so
// that waiters queue in one place instead of splitting their votes.
func ranking(key string, names []string) []int {
	order := make([]int, len(names))
	scores := make([]uint64, len(names))
	for i, name := range names {
		order[i] = i
		scores[i] = score(key, name)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := cmp.Compare(scores[b], scores[a]); c != 0 {
			return c
		}
		return cmp.Compare(names[a], names[b])
	})
	return order
}

// score is a fixed 64-bit hash of key and server name: FNV-1a over the key, a 0xff separator
// and the name, finished with SplitMix64's mixer. Fixed, because clients of every version and
// language must agree on it; the separator keeps ("ab", "c") apart from ("a", "bc").
func score(key, name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	mix := func(b byte) { h = (h ^ uint64(b)) * 0x100000001b3 }
	for i := 0; i < len(key); i++ {
		mix(key[i])
	}
	mix(0xff)
	for i := 0; i < len(name); i++ {
		mix(name[i])
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ (h >> 31)
}
