package fencedlock

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

func TestSession(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTimeout(250*time.Millisecond))
		ss, err := l.Session(WithTTL(600 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var leases []*Lease
		for i := 0; i < 50; i++ {
			lease := mustAcquire(t, ctx, ss, fmt.Sprintf("sess:%d", i))
			leases = append(leases, lease)
		}
		time.Sleep(1500 * time.Millisecond) // past the ttl: renewed by the session
		for _, lease := range leases {
			if lease.Err() != nil || lease.Remaining() <= 0 {
				t.Fatalf("%s: %v, %v left", lease.Key(), lease.Err(), lease.Remaining())
			}
		}
		// One lease taken away is lost alone.
		srv.admin.Del(ctx, "sess:0")
		select {
		case <-leases[0].Done():
		case <-time.After(time.Second):
			t.Fatal("the deleted lease was not signalled lost")
		}
		if !isKind(leases[0].Err(), ErrLeaseLost) || leases[1].Err() != nil || ss.Err() != nil {
			t.Fatalf("after one loss: %v %v %v", leases[0].Err(), leases[1].Err(), ss.Err())
		}
		// A released lease leaves the session.
		leases[1].Release(ctx)
		time.Sleep(300 * time.Millisecond)
		if n := ss.Len(); n != 48 {
			t.Fatalf("%d leases kept", n)
		}
		// The server stops: the session is lost, every lease with it, before validity ends.
		srv.signal(syscall.SIGSTOP)
		start := time.Now()
		select {
		case <-ss.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the session was not lost")
		}
		srv.signal(syscall.SIGCONT)
		if took := time.Since(start); took > 700*time.Millisecond || !isKind(ss.Err(), ErrLeaseLost) || !isKind(leases[2].Err(), ErrLeaseLost) {
			t.Fatalf("after %v: %v %v", took, ss.Err(), leases[2].Err())
		}
		if _, err := ss.Acquire(ctx, "sess:new"); err == nil {
			t.Fatal("a lost session took a lease")
		}
		ss.Close(ctx)
		// Close releases what a live session holds.
		ss2, _ := l.Session(WithTTL(time.Second))
		a := mustAcquire(t, ctx, ss2, "sess:closed")
		if err := ss2.Close(ctx); err != nil || a.Err() != nil {
			t.Fatalf("close: %v %v", err, a.Err())
		}
		if st, _ := l.Status(ctx, "sess:closed"); st == nil || len(st.Holders) != 0 {
			t.Fatalf("after Close: %+v", st)
		}
	})
}
