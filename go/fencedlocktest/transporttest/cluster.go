package transporttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
	"example.invalid/fencedlock/go/internal/contract"
	"example.invalid/fencedlock/go/internal/keys"
)

// ClusterDial is a transport of the client under test to the cluster of nodes at addrs.
type ClusterDial func(t testing.TB, addrs []string) fencedlock.Transport

// RunCluster runs a locker over a three-primary cluster (module, and the Functions library),
// each a subtest: requests route by key (floor and wake-up keys share the lock key's slot),
// the library is loaded on every master, waits block on the key's master, and AcquireAll takes
// keys of one slot in one command.
func RunCluster(t *testing.T, dial ClusterDial) {
	c, err := contract.Parse(contract.JSON)
	if err != nil {
		t.Fatal(err)
	}
	names := keys.New(c)
	for _, e := range []struct {
		name  string
		setup fencedlocktest.Setup
	}{{"module", fencedlocktest.Module}, {"functions", fencedlocktest.Managed}} {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			nodes := fencedlocktest.StartCluster(t, e.setup, 3)
			addrs := make([]string, len(nodes))
			for i, n := range nodes {
				addrs[i] = n.Addr()
			}
			l := newLocker(t, dial(t, addrs), fencedlock.WithTTL(10*time.Second), fencedlock.WithTimeout(2*time.Second))
			slots := map[int]bool{}
			for i := 0; i < 12; i++ {
				key := fmt.Sprintf("cluster:%d", i)
				slots[names.Slot([]byte(key))] = true
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if _, err := l.Acquire(ctx, key); !errors.Is(err, fencedlock.ErrNotAcquired) {
					t.Fatalf("%s held: %v", key, err)
				}
				if ok, err := lease.Release(ctx); !ok || err != nil {
					t.Fatalf("%s release: %v %v", key, ok, err)
				}
			}
			if len(slots) < 3 {
				t.Fatalf("the keys fell in %d slots", len(slots))
			}
			held, err := l.Acquire(ctx, "cluster:wait")
			if err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(200 * time.Millisecond); held.Release(ctx) }()
			waited, err := l.Acquire(ctx, "cluster:wait", fencedlock.WithWait(5*time.Second))
			if err != nil || waited.Fence() <= held.Fence() {
				t.Fatalf("a wait on the cluster: %v", err)
			}
			waited.Release(ctx)
			leases, err := l.AcquireAll(ctx, []string{"{grp}a", "{grp}b"})
			if err != nil || len(leases) != 2 {
				t.Fatalf("AcquireAll: %v", err)
			}
			for _, lease := range leases {
				lease.Release(ctx)
			}
		})
	}
}
