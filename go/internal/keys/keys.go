// Package keys computes the key names of the contract (contract.json "keys"): a key's cluster
// slot, and the floor key, wake-up list and run record the library keeps beside it in its
// slot. The package fencedlock names its requests' keys with it, and the corpus runner of
// fencedlocktest builds the README's requests with it, so the rule is written once.
package keys

import (
	"strconv"
	"strings"
	"sync"

	"example.invalid/fencedlock/go/internal/contract"
)

// Keys names the keys of one contract.
type Keys struct {
	c *contract.Contract

	once        sync.Once
	libraryTags []string
	moduleTags  []int
	incomplete  bool
}

// New is the key names of c.
func New(c *contract.Contract) *Keys { return &Keys{c: c} }

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial 0), Redis Cluster's key hash.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Slot is the key's cluster slot: the CRC16 of its hash tag (the bytes between the first
// '{' and the first '}' after it, when there is at least one) or of the whole key.
func (k *Keys) Slot(key []byte) int {
	slots := k.c.Keys.Slots
	if open := strings.IndexByte(string(key), '{'); open >= 0 {
		if end := strings.IndexByte(string(key[open+1:]), '}'); end > 0 {
			return int(crc16(key[open+1:open+1+end])) % slots
		}
	}
	return int(crc16(key)) % slots
}

// build fills the floor tags of every slot: the library's (the one six-digit string, the
// first two digits 0-7 and the other four 0-3, whose own slot is the slot) and the module's
// (the smallest decimal number whose own slot is the slot).
func (k *Keys) build() {
	slots := k.c.Keys.Slots
	k.libraryTags = make([]string, slots)
	k.moduleTags = make([]int, slots)
	for i := range k.moduleTags {
		k.moduleTags[i] = -1
	}
	digits := make([]byte, k.c.Keys.LibraryFloor.TagLen)
	var fill func(pos int)
	fill = func(pos int) {
		if pos == len(digits) {
			k.libraryTags[k.Slot(digits)] = string(digits)
			return
		}
		top := byte('3')
		if pos < 2 {
			top = '7'
		}
		for d := byte('0'); d <= top; d++ {
			digits[pos] = d
			fill(pos + 1)
		}
	}
	fill(0)
	left := slots
	for n := 0; left > 0 && n < 1<<24; n++ {
		s := k.Slot([]byte(strconv.Itoa(n)))
		if k.moduleTags[s] < 0 {
			k.moduleTags[s] = n
			left--
		}
	}
	for _, tag := range k.libraryTags {
		if tag == "" {
			k.incomplete = true
		}
	}
	k.incomplete = k.incomplete || left > 0
}

// Incomplete says whether some slot has no floor tag (a contract the rule does not fit).
func (k *Keys) Incomplete() bool {
	k.once.Do(k.build)
	return k.incomplete
}

// FloorTag is the library's floor tag of the key's slot.
func (k *Keys) FloorTag(key []byte) string {
	k.once.Do(k.build)
	return k.libraryTags[k.Slot(key)]
}

// Floor is the library's floor key of the key's slot: the one key it keeps the slot's fence
// floor in (it refuses any other).
func (k *Keys) Floor(key []byte) string {
	return k.c.Keys.LibraryFloor.Prefix + k.FloorTag(key) + "}"
}

// Wake is the key's wake-up list: a release on the library pushes to it, and a waiter BLPOPs
// on it.
func (k *Keys) Wake(key []byte) string {
	return k.c.Keys.Wake.Prefix + k.FloorTag(key) + "}:" + string(key)
}

// Record is the key's periodic run record, beside it in its slot.
func (k *Keys) Record(key []byte) string {
	return k.c.Keys.Record.Prefix + k.FloorTag(key) + "}:" + string(key)
}

// ModuleFloor is the module's floor key of the key's slot (the vectors check it).
func (k *Keys) ModuleFloor(key []byte) string {
	k.once.Do(k.build)
	return k.c.Keys.ModuleFloor.Prefix + strconv.Itoa(k.moduleTags[k.Slot(key)]) + "}"
}
