package fencedlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A locker over a ClusterClient of three primaries: requests route by key (floor and wake-up
// keys share the lock key's slot), the library is loaded on every master, waits block on the
// key's master, and AcquireAll takes keys of one slot in one command.
func TestCluster(t *testing.T) {
	for _, e := range engines[:2] {
		e := e
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			nodes := startCluster(t, e.setup, 3)
			addrs := make([]string, len(nodes))
			for i, n := range nodes {
				addrs[i] = n.addr()
			}
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { client.Close() })
			l := newTestLocker(t, client, WithTTL(10*time.Second), WithTimeout(2*time.Second))
			slots := map[int]bool{}
			for i := 0; i < 12; i++ {
				key := fmt.Sprintf("cluster:%d", i)
				slots[keySlot([]byte(key))] = true
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if _, err := l.Acquire(ctx, key); !isKind(err, ErrNotAcquired) {
					t.Fatalf("%s held: %v", key, err)
				}
				if ok, err := lease.Release(ctx); !ok || err != nil {
					t.Fatalf("%s release: %v %v", key, ok, err)
				}
			}
			if len(slots) < 3 {
				t.Fatalf("the keys fell in %d slots", len(slots))
			}
			held := mustAcquire(t, ctx, l, "cluster:wait")
			go func() { time.Sleep(200 * time.Millisecond); held.Release(ctx) }()
			waited, err := l.Acquire(ctx, "cluster:wait", WithWait(5*time.Second))
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
