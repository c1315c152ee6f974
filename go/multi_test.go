package fencedlock

import (
	"context"
	"testing"
	"time"
)

func TestAcquireAll(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(10*time.Second))
		for _, keys := range [][]string{
			{"{job}b", "{job}a", "{job}c"},  // one slot: one ACQUIREALL
			{"batch:2", "batch:1", "other"}, // several slots: the module's one command, else key by key
		} {
			leases, err := l.AcquireAll(ctx, keys)
			if err != nil {
				t.Fatalf("%v: %v", keys, err)
			}
			for i, lease := range leases {
				if lease.Key() != keys[i] || lease.Fence() < 1 {
					t.Fatalf("%v: lease %d is %q fence %d", keys, i, lease.Key(), lease.Fence())
				}
			}
			// All or none: one key held elsewhere, and no key of the set is taken.
			other := newTestLocker(t, srv.client())
			if _, err := other.AcquireAll(ctx, []string{keys[2] + "x", keys[1]}); !isKind(err, ErrNotAcquired) {
				t.Fatalf("%v: a set with a held key: %v", keys, err)
			}
			if st, err := l.Status(ctx, keys[2]+"x"); err != nil || (st != nil && len(st.Holders) != 0) {
				t.Fatalf("%v: a key of a refused set is held: %+v %v", keys, st, err)
			}
			// A wait is granted when the holder releases.
			go func() {
				time.Sleep(200 * time.Millisecond)
				for _, lease := range leases {
					lease.Release(ctx)
				}
			}()
			again, err := other.AcquireAll(ctx, keys, WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("%v: after the release: %v", keys, err)
			}
			for i := range again {
				if again[i].Fence() <= leases[i].Fence() {
					t.Fatalf("%v: fence %d after %d", keys, again[i].Fence(), leases[i].Fence())
				}
				again[i].Release(ctx)
			}
		}
		for name, keys := range map[string][]string{"none": nil, "twice": {"a", "a"}, "blank": {"a", " "}} {
			if _, err := l.AcquireAll(ctx, keys); !isKind(err, ErrInvalidArgument) {
				t.Fatalf("%s: %v", name, err)
			}
		}
	})
}
