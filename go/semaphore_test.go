package fencedlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSemaphore(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithPermits(2), WithTTL(10*time.Second))
		a := mustAcquire(t, ctx, l, "pool")
		b := mustAcquire(t, ctx, l, "pool")
		if b.Fence() <= a.Fence() {
			t.Fatalf("fences %d then %d", a.Fence(), b.Fence())
		}
		if _, err := l.Acquire(ctx, "pool"); !isKind(err, ErrNotAcquired) {
			t.Fatalf("a third holder of two permits: %v", err)
		}
		st, err := l.Status(ctx, "pool")
		if err != nil || st.Permits != 2 || len(st.Holders) != 2 || st.Shared {
			t.Fatalf("status %+v %v", st, err)
		}
		// Another count while held is refused by the server, and is no held key.
		if _, err := l.Acquire(ctx, "pool", WithPermits(3)); err == nil || errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("a permits mismatch: %v", err)
		}
		// A waiter gets the permit a holder frees.
		go func() { time.Sleep(200 * time.Millisecond); a.Release(ctx) }()
		c, err := l.Acquire(ctx, "pool", WithWait(5*time.Second))
		if err != nil || c.Fence() <= b.Fence() {
			t.Fatalf("a waiter: %v", err)
		}
		b.Release(ctx)
		c.Release(ctx)
		for _, n := range []int{-1, 1025} {
			if _, err := l.Acquire(ctx, "pool", WithPermits(n)); !isKind(err, ErrInvalidArgument) {
				t.Fatalf("permits %d: %v", n, err)
			}
		}
	})
}

func TestReadWrite(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(10*time.Second))
		r1 := mustAcquire(t, ctx, l, "doc", WithShared())
		r2 := mustAcquire(t, ctx, l, "doc", WithShared())
		if _, err := l.Acquire(ctx, "doc"); !isKind(err, ErrNotAcquired) {
			t.Fatalf("a writer among readers: %v", err)
		}
		st, err := l.Status(ctx, "doc")
		if err != nil || !st.Shared || len(st.Holders) != 2 {
			t.Fatalf("status %+v %v", st, err)
		}
		// A waiting writer is granted when the last reader leaves, with a fence above theirs.
		go func() {
			time.Sleep(150 * time.Millisecond)
			r1.Release(ctx)
			time.Sleep(150 * time.Millisecond)
			r2.Release(ctx)
		}()
		start := time.Now()
		w, err := l.Acquire(ctx, "doc", WithWait(5*time.Second))
		if err != nil || time.Since(start) < 250*time.Millisecond || w.Fence() <= r2.Fence() {
			t.Fatalf("the writer after %v: %v", time.Since(start), err)
		}
		if _, err := l.Acquire(ctx, "doc", WithShared()); !isKind(err, ErrNotAcquired) {
			t.Fatalf("a reader while written: %v", err)
		}
		w.Release(ctx)
		if _, err := l.Acquire(ctx, "doc", WithShared(), WithPermits(2)); !isKind(err, ErrInvalidArgument) {
			t.Fatalf("shared with permits: %v", err)
		}
	})
}
