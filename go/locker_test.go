package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// engines are the server set-ups every behaviour test runs on: the module, the Functions
// library (loaded by the locker), and its script form where FUNCTION is denied.
var engines = []struct {
	name  string
	setup setup
	want  engine
}{
	{"module", setupModule, engineModule},
	{"functions", setupManaged, engineFunctions},
	{"script", setupNoFunction, engineScript},
}

func eachEngine(t *testing.T, f func(t *testing.T, srv *testServer, want engine)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			f(t, startServer(t, e.setup), e.want)
		})
	}
}

// mustAcquire is a lease on key from l (a Locker, a Redlock or a Session), or the test's end.
func mustAcquire(t testing.TB, ctx context.Context, l interface {
	Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error)
}, key string, opts ...Option) *Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

func newTestLocker(t *testing.T, c redis.UniversalClient, opts ...Option) *Locker {
	t.Helper()
	l, err := NewLocker(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestAcquireReleaseAndFences(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, want engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(5*time.Second))
		a := mustAcquire(t, ctx, l, "job:a")
		if got := l.server.engine; got != want {
			t.Fatalf("engine %v, want %v", got, want)
		}
		if a.Fence() < 1 || a.Key() != "job:a" || len(a.Token()) != 32 || a.Remaining() <= 0 || a.Remaining() > 5*time.Second {
			t.Fatalf("lease %d %q %q %v", a.Fence(), a.Key(), a.Token(), a.Remaining())
		}
		// Another owner is refused: held, not an outage.
		other := newTestLocker(t, srv.client())
		_, err := other.Acquire(ctx, "job:a")
		if !isKind(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("a held key: %v", err)
		}
		st, err := l.Status(ctx, "job:a")
		if err != nil || st == nil || st.Fence != a.Fence() || len(st.Holders) != 1 {
			t.Fatalf("status %+v %v", st, err)
		}
		if err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := a.Release(ctx); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
		select {
		case <-a.Done():
		default:
			t.Fatal("Done is not closed after Release")
		}
		if a.Err() != nil {
			t.Fatalf("a released lease reports %v", a.Err())
		}
		if ok, err := a.Release(ctx); ok || err != nil {
			t.Fatalf("a second release: %v %v", ok, err)
		}
		b := mustAcquire(t, ctx, other, "job:a")
		if b.Fence() <= a.Fence() {
			t.Fatalf("fence %d after %d", b.Fence(), a.Fence())
		}
		// A renewal by a lease that was released is refused as lost.
		if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("renew after release: %v", err)
		}
		b.Release(ctx)
	})
}

func TestBadArgumentsAreRefusedBeforeSending(t *testing.T) {
	srv := startServer(t, setupModule)
	l := newTestLocker(t, srv.client())
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"empty key":   func() error { _, err := l.Acquire(ctx, ""); return err },
		"blank key":   func() error { _, err := l.Acquire(ctx, "   "); return err },
		"control":     func() error { _, err := l.Acquire(ctx, "job\n"); return err },
		"zero ttl":    func() error { _, err := l.Acquire(ctx, "k", WithTTL(0)); return err },
		"sub-ms ttl":  func() error { _, err := l.Acquire(ctx, "k", WithTTL(1500*time.Microsecond)); return err },
		"tiny ttl":    func() error { _, err := l.Acquire(ctx, "k", WithTTL(2*time.Millisecond)); return err },
		"huge ttl":    func() error { _, err := l.Acquire(ctx, "k", WithTTL(1<<62)); return err },
		"wait":        func() error { _, err := l.Acquire(ctx, "k", WithWait(-time.Second)); return err },
		"empty label": func() error { _, err := l.Acquire(ctx, "k", WithLabel("")); return err },
		"long label":  func() error { _, err := l.Acquire(ctx, "k", WithLabel(strings.Repeat("x", 257))); return err },
		"locker":      func() error { _, err := NewLocker(srv.client(), WithTimeout(0)); return err },
		"nil client":  func() error { _, err := NewLocker(nil); return err },
		"nil fn":      func() error { return l.Do(ctx, "k", nil) },
	} {
		if err := f(); !isKind(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid argument", name, err)
		}
	}
	if st, _ := l.Status(ctx, "k"); st != nil {
		t.Fatalf("a refused request changed the key: %+v", st)
	}
}

func TestLabelShowsInStatus(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithLabel("node-a"))
		lease := mustAcquire(t, ctx, l, "labelled")
		defer lease.Release(ctx)
		st, err := l.Status(ctx, "labelled")
		if err != nil || len(st.Holders) != 1 || string(st.Holders[0].Label) != "node-a" {
			t.Fatalf("status %+v %v", st, err)
		}
	})
}

// A wait is granted at the holder's release, and bounded by the wait and by ctx.
func TestWaiting(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(10*time.Second))
		held := mustAcquire(t, ctx, l, "waited")
		go func() {
			time.Sleep(300 * time.Millisecond)
			held.Release(ctx)
		}()
		start := time.Now()
		lease, err := l.Acquire(ctx, "waited", WithWait(5*time.Second))
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if took < 250*time.Millisecond || took > 3*time.Second {
			t.Fatalf("granted after %v, want at the release (300 ms)", took)
		}
		if lease.Fence() <= held.Fence() {
			t.Fatal("the fence did not increase")
		}
		// Held throughout: not acquired after the wait.
		start = time.Now()
		_, err = l.Acquire(ctx, "waited", WithWait(400*time.Millisecond))
		if took := time.Since(start); !errors.Is(err, ErrNotAcquired) || took < 350*time.Millisecond || took > 2*time.Second {
			t.Fatalf("after %v: %v", took, err)
		}
		// The caller's ctx ends the wait first; nothing is held for it afterwards.
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(cctx, "waited", WithWait(10*time.Second))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a wait past ctx: %v", err)
		}
		lease.Release(ctx)
		l.Close()
		if st, err := l.Status(ctx, "waited"); err != nil || len(st.Holders) != 0 {
			t.Fatalf("after the abandoned wait: %+v %v", st, err)
		}
	})
}

func TestKeepAliveAndLoss(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(600*time.Millisecond))
		lease := mustAcquire(t, ctx, l, "kept")
		lease.KeepAlive()
		lease.KeepAlive()
		select {
		case <-lease.Done():
			t.Fatalf("lost while kept alive: %v", lease.Err())
		case <-time.After(1500 * time.Millisecond):
		}
		if lease.Remaining() <= 0 {
			t.Fatal("no validity while kept alive")
		}
		if err := srv.admin.Del(ctx, "kept").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-lease.Done():
		case <-time.After(time.Second):
			t.Fatal("the loss was not signalled")
		}
		if !isKind(lease.Err(), ErrLeaseLost) {
			t.Fatalf("Err %v", lease.Err())
		}
		if ok, err := lease.Release(ctx); ok || err != nil {
			t.Fatalf("release of a lost lease: %v %v", ok, err)
		}
	})
}

func TestDo(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(900*time.Millisecond))
		var fence uint64
		err := l.Do(ctx, "done", func(ctx context.Context, lease *Lease) error {
			fence = lease.Fence()
			time.Sleep(1200 * time.Millisecond) // past the ttl: kept alive
			return ctx.Err()
		})
		if err != nil || fence == 0 {
			t.Fatalf("Do: %v (fence %d)", err, fence)
		}
		if st, _ := l.Status(ctx, "done"); st == nil || len(st.Holders) != 0 {
			t.Fatalf("Do did not release: %+v", st)
		}
		// The function's error is Do's.
		boom := errors.New("boom")
		if err := l.Do(ctx, "done", func(context.Context, *Lease) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Do returned %v", err)
		}
		// Held elsewhere: the function never runs.
		other := newTestLocker(t, srv.client())
		held := mustAcquire(t, ctx, other, "done")
		ran := false
		err = l.Do(ctx, "done", func(context.Context, *Lease) error { ran = true; return nil })
		if ran || !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("ran %v, err %v", ran, err)
		}
		held.Release(ctx)
		// Lost while running: ctx is cancelled with the loss as its cause.
		err = l.Do(ctx, "done", func(ctx context.Context, lease *Lease) error {
			srv.admin.Del(context.Background(), "done")
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
				return errors.New("ctx not cancelled")
			}
			if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
				return errors.New("the cause is not the loss")
			}
			return ctx.Err()
		})
		if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do after a loss: %v", err)
		}
	})
}

func TestErrorKindsFromServers(t *testing.T) {
	ctx := context.Background()
	t.Run("wrong type", func(t *testing.T) {
		eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
			srv.admin.Set(ctx, "plain", "x", 0)
			l := newTestLocker(t, srv.client())
			_, err := l.Acquire(ctx, "plain")
			var fe *Error
			if !isKind(err, ErrWrongType) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Reply, "WRONGTYPE") {
				t.Fatalf("%v", err)
			}
		})
	})
	t.Run("invalid argument from the server", func(t *testing.T) {
		srv := startServer(t, setupModule)
		l := newTestLocker(t, srv.client())
		_, err := l.Acquire(ctx, "k", WithTTL(48*time.Hour)) // above fencedlock.max-ttl-ms
		var fe *Error
		if !isKind(err, ErrInvalidArgument) || !errors.As(err, &fe) || !strings.Contains(fe.Reply, "ttl exceeds") {
			t.Fatalf("%v", err)
		}
		managed := newTestLocker(t, startServer(t, setupManaged).client())
		if _, err := managed.Acquire(ctx, "k", WithTTL(48*time.Hour)); !isKind(err, ErrInvalidArgument) {
			t.Fatalf("the library's limit: %v", err)
		}
	})
	t.Run("no engine", func(t *testing.T) {
		l := newTestLocker(t, startServer(t, setupNoScripts).client())
		_, err := l.Acquire(ctx, "k")
		var fe *Error
		if !isKind(err, ErrNoEngine) || !errors.As(err, &fe) || fe.Cause != "NoEngine" || fe.Reply == "" {
			t.Fatalf("%v", err)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		srv := startServer(t, setupModule)
		l := newTestLocker(t, srv.client(), WithTimeout(200*time.Millisecond))
		srv.signal(syscall.SIGSTOP)
		defer srv.signal(syscall.SIGCONT)
		start := time.Now()
		_, err := l.Acquire(ctx, "k")
		var fe *Error
		if !isKind(err, ErrUnavailable) || !errors.As(err, &fe) || fe.Cause != "TimedOut" || !fe.Retryable() || time.Since(start) > time.Second {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
		srv.signal(syscall.SIGCONT)
		srv.kill()
		start = time.Now()
		_, err = l.Acquire(ctx, "k")
		if !isKind(err, ErrUnavailable) || time.Since(start) > time.Second {
			t.Fatalf("a killed server, after %v: %v", time.Since(start), err)
		}
	})
	t.Run("no module", func(t *testing.T) {
		srv := startServer(t, setupModule)
		l := newTestLocker(t, srv.client())
		lease := mustAcquire(t, ctx, l, "k")
		srv.restartWithoutModule()
		_, err := l.Acquire(ctx, "k")
		var fe *Error
		if !isKind(err, ErrNoModule) || errors.Is(err, ErrUnavailable) || !errors.As(err, &fe) || strings.Contains(err.Error(), lease.Token()) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("lease lost", func(t *testing.T) {
		srv := startServer(t, setupModule)
		l := newTestLocker(t, srv.client())
		lease, _ := l.Acquire(ctx, "k")
		srv.admin.Del(ctx, "k")
		if err := lease.Renew(ctx); !isKind(err, ErrLeaseLost) {
			t.Fatalf("%v", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("Done not closed")
		}
	})
}

// Kinds told by the contract's codes and prefixes, for replies a test cannot make a server
// send on demand.
func TestClassifyReplies(t *testing.T) {
	for reply, want := range map[string]error{
		"ERR upgrade refused: the token holds the key SHARED; release it, then acquire without SHARED (a new, higher fence)":                    ErrUpgradeRefused,
		"LOADING Redis is loading the dataset in memory":                                                                                        ErrUnavailable,
		"READONLY You can't write against a read only replica.":                                                                                 ErrUnavailable,
		"OOM command not allowed when used memory > 'maxmemory'.":                                                                               ErrUnavailable,
		"ERR unknown command 'FENCEDLOCK.ACQUIRE', with args beginning with: 'k' 's3cret'":                                                      ErrNoModule,
		"NOPERM User app has no permissions":                                                                                                    ErrOther,
		"ERR token must be 1 to 512 bytes":                                                                                                      ErrInvalidArgument,
		"TRYAGAIN fencedlock wait interrupted: the lock key was deleted or its slot moved on this cluster node; nothing was granted, ask again": ErrOther,
	} {
		_, reply := goRedisResult(nil, fakeReply(reply)) // as the go-redis transport returns it
		err := classify("s", "k", reply)
		if !isKind(err, want) {
			t.Errorf("%q: %v, want %v", reply, err, want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the token shows in %v", reply, err)
		}
	}
	q := &Error{Kind: KindNoQuorum, Votes: &Votes{Granted: 1, Failed: 2}}
	if !isKind(q, ErrNoQuorum) || errors.Is(q, ErrNotAcquired) {
		t.Error("no quorum")
	}
}

// fakeReply is an error reply as go-redis returns one (a redis.Error).
type fakeReply string

func (e fakeReply) Error() string { return string(e) }
func (fakeReply) RedisError()     {}

// The showing: a lease kept alive through a 2 s SIGSTOP of the server on a 1 s ttl
// reports the loss on Done and cancels Do's ctx before its validity ends.
func TestLossBeforeValidityEnds(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx := context.Background()
		l := newTestLocker(t, srv.client(), WithTTL(time.Second), WithTimeout(250*time.Millisecond))
		err := l.Do(ctx, "paused", func(ctx context.Context, lease *Lease) error {
			time.Sleep(100 * time.Millisecond)
			srv.signal(syscall.SIGSTOP)
			defer srv.signal(syscall.SIGCONT)
			var validUntil time.Time
			select {
			case <-ctx.Done():
				return errors.New("lost before the server stopped")
			case <-time.After(0):
				validUntil = lease.validity()
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
				return errors.New("ctx not cancelled during the stop")
			}
			lost := time.Now()
			select {
			case <-lease.Done():
			default:
				return errors.New("Done not closed when ctx was cancelled")
			}
			if lost.After(validUntil) {
				return fmt.Errorf("loss signalled at %v, the validity ended at %v", lost.Sub(validUntil), validUntil)
			}
			return context.Cause(ctx)
		})
		if !isKind(err, ErrLeaseLost) {
			t.Fatalf("%v", err)
		}
	})
}
