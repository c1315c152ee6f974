package fencedlock

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestACrowdWaitsOnOneKey: more waiters than go-redis pools connections by default (10 per
// CPU) wait on one key, held past the pool's wait for a free connection (the client's read
// timeout + 1 s): every waiter queues at once (on the module, every one in the server's
// queue) and each is granted in turn, none failing for want of a connection.
func TestACrowdWaitsOnOneKey(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, e engine) {
		ctx := context.Background()
		n := 10*runtime.GOMAXPROCS(0) + 12
		l := newTestLocker(t, srv.client(), WithTTL(10*time.Second))
		held := mustAcquire(t, ctx, l, "crowd")
		var wg sync.WaitGroup
		errs := make(chan error, n)
		fences := make(chan uint64, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lease, err := l.Acquire(ctx, "crowd", WithWait(30*time.Second))
				if err != nil {
					errs <- err
					return
				}
				fences <- lease.Fence()
				if _, err := lease.Release(ctx); err != nil {
					errs <- err
				}
			}()
		}
		if e == engineModule {
			deadline := time.Now().Add(5 * time.Second)
			for moduleWaiters(t, srv) != n {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d waiters queued on the server after 5 s", moduleWaiters(t, srv), n)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		time.Sleep(5 * time.Second)
		if _, err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		close(fences)
		for err := range errs {
			t.Errorf("a waiter: %v", err)
		}
		seen := map[uint64]bool{}
		for f := range fences {
			if f <= held.Fence() || seen[f] {
				t.Errorf("fence %d after the holder's %d (seen before: %v)", f, held.Fence(), seen[f])
			}
			seen[f] = true
		}
		if len(seen) != n {
			t.Fatalf("%d of %d waiters granted", len(seen), n)
		}
	})
}
