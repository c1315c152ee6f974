package fencedlock

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newTestRedlock(t *testing.T, servers []*testServer, opts ...Option) *Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.client()
	}
	r, err := NewRedlock(clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRedlock(t *testing.T) {
	for _, e := range []struct {
		name  string
		setup setup
	}{{"module", setupModule}, {"functions", setupManaged}} {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			servers := []*testServer{startServer(t, e.setup), startServer(t, e.setup), startServer(t, e.setup)}
			r := newTestRedlock(t, servers, WithTTL(900*time.Millisecond), WithTimeout(250*time.Millisecond))
			// Fences increase across grants even where the servers' own fences differ: a
			// server that saw more grants raises the next lease's fence on every server.
			for i := 0; i < 5; i++ {
				single := newTestLocker(t, servers[0].client())
				l, _ := single.Acquire(ctx, "rl")
				l.Release(ctx)
			}
			var last uint64
			for i := 0; i < 3; i++ {
				lease := mustAcquire(t, ctx, r, "rl")
				if lease.Fence() <= last {
					t.Fatalf("fence %d after %d", lease.Fence(), last)
				}
				last = lease.Fence()
				for _, s := range servers {
					st, _ := newTestLocker(t, s.client()).Status(ctx, "rl")
					if st == nil || st.Fence != last {
						t.Fatalf("a server's fence is %+v, not the lease's %d", st, last)
					}
				}
				if _, err := r.Acquire(ctx, "rl"); !isKind(err, ErrNoQuorum) || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
					t.Fatalf("a held key: %v", err)
				}
				if ok, err := lease.Release(ctx); !ok || err != nil {
					t.Fatalf("release %v %v", ok, err)
				}
			}
			// Kept alive through the ttl with one server stopped; the Do ctx is cancelled when
			// the majority is gone.
			err := r.Do(ctx, "rl", func(ctx context.Context, lease *Lease) error {
				servers[2].signal(syscall.SIGSTOP)
				defer servers[2].signal(syscall.SIGCONT)
				select {
				case <-ctx.Done():
					return errors.New("lost with a majority up")
				case <-time.After(1500 * time.Millisecond):
				}
				servers[1].signal(syscall.SIGSTOP)
				defer servers[1].signal(syscall.SIGCONT)
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(2 * time.Second):
					return errors.New("not lost with the majority gone")
				}
			})
			if !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Do: %v", err)
			}
			if _, err := NewRedlock(nil); !isKind(err, ErrInvalidArgument) {
				t.Fatalf("no servers: %v", err)
			}
			c := servers[0].client()
			if _, err := NewRedlock([]redis.UniversalClient{c, c}); !isKind(err, ErrInvalidArgument) {
				t.Fatalf("a server twice: %v", err)
			}
		})
	}
}
