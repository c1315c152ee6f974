package fencedlock

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// moduleWaiters is INFO fencedlock's count of requests queued on the server now.
func moduleWaiters(t *testing.T, s *testServer) int {
	t.Helper()
	info, err := s.admin.Info(context.Background(), "fencedlock").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "fencedlock_waiters:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO fencedlock has no fencedlock_waiters:\n%s", info)
	return 0
}

// designated is the server a Redlock's waiters of key queue on.
func designated(servers []*testServer, key string) int {
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.addr()
	}
	return ranking(key, names)[0]
}

type acquired struct {
	lease *Lease
	err   error
	at    time.Time
}

// heldAndAwaited starts three servers, takes key on them by a Redlock lease of 30 s, and
// starts a second Redlock's wait of up to wait for it; done gets the waiter's outcome.
func heldAndAwaited(t *testing.T, s setup, key string, wait time.Duration, opts ...Option) (servers []*testServer, held *Lease, done <-chan acquired) {
	t.Helper()
	ctx := context.Background()
	servers = []*testServer{startServer(t, s), startServer(t, s), startServer(t, s)}
	opts = append([]Option{WithTTL(30 * time.Second)}, opts...)
	held = mustAcquire(t, ctx, newTestRedlock(t, servers, opts...), key)
	waiter := newTestRedlock(t, servers, opts...)
	outcome := make(chan acquired, 1)
	go func() {
		lease, err := waiter.Acquire(ctx, key, WithWait(wait))
		outcome <- acquired{lease, err, time.Now()}
	}()
	return servers, held, outcome
}

// TestRedlockWaitsOnTheDesignatedServersQueue: a Redlock acquisition that may wait queues on
// the key's designated server alone (the same for every client), not on every server and not
// by polling, and is granted the majority the moment the holder releases.
func TestRedlockWaitsOnTheDesignatedServersQueue(t *testing.T) {
	ctx := context.Background()
	const key = "rw:queue"
	servers, held, done := heldAndAwaited(t, setupModule, key, 10*time.Second)
	first := designated(servers, key)
	deadline := time.Now().Add(3 * time.Second)
	for moduleWaiters(t, servers[first]) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no waiter queued on the designated server %s within 3 s", servers[first].addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, s := range servers {
		if i != first {
			if n := moduleWaiters(t, s); n != 0 {
				t.Fatalf("%d waiter(s) queued on %s, which is not the key's designated server", n, s.addr())
			}
		}
	}
	released := time.Now()
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("the waiter got %v after the release", got.err)
	}
	defer got.lease.Release(ctx)
	if got.lease.Fence() <= held.Fence() {
		t.Fatalf("the waiter's fence %d is not above the holder's %d", got.lease.Fence(), held.Fence())
	}
	if took := got.at.Sub(released); took > 2*time.Second {
		t.Fatalf("the waiter was granted %v after the release", took)
	}
}

// TestRedlockWaitPassesOverASilentDesignatedServer: the designated server stops answering
// (SIGSTOP) while a waiter is queued on it; the waiter notices (its PING goes unanswered),
// moves to the next server in the ranking, and takes the majority of the two that answer as
// soon as the holder releases: long before the holder's lease would have expired.
func TestRedlockWaitPassesOverASilentDesignatedServer(t *testing.T) {
	for _, e := range engines[:2] {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const key = "rw:silent"
			servers, held, done := heldAndAwaited(t, e.setup, key, 20*time.Second, WithTimeout(300*time.Millisecond))
			first := designated(servers, key)
			time.Sleep(300 * time.Millisecond) // queued there by now
			servers[first].signal(syscall.SIGSTOP)
			t.Cleanup(func() { servers[first].signal(syscall.SIGCONT) })
			if _, err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			select {
			case got := <-done:
				if got.err != nil {
					t.Fatalf("the waiter got %v", got.err)
				}
				if got.lease.Fence() <= held.Fence() {
					t.Fatalf("the waiter's fence %d is not above the holder's %d", got.lease.Fence(), held.Fence())
				}
				t.Logf("granted %v after the release", got.at.Sub(released))
				servers[first].signal(syscall.SIGCONT)
				if _, err := got.lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case <-time.After(8 * time.Second):
				t.Fatal("the waiter still waits 8 s after the release, with two of three servers answering")
			}
		})
	}
}
