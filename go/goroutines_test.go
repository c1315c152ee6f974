package fencedlock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownGoroutines are the stacks of the running goroutines that a non-test file of this package
// started (its keep-alives, waits, give-backs, watchers), read from the runtime's own dump.
func ownGoroutines(t *testing.T) []string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var own []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// The creator's file is the line after "created by …".
		_, after, found := strings.Cut(g, "\ncreated by ")
		if !found {
			continue
		}
		lines := strings.SplitN(after, "\n", 3)
		if len(lines) < 2 {
			continue
		}
		file := strings.TrimSpace(lines[1])
		// The package's own files only: not its tests, nor fencedlocktest's servers below it.
		rel, inDir := strings.CutPrefix(file, dir+string(os.PathSeparator))
		if inDir && !strings.ContainsRune(rel, os.PathSeparator) && !strings.Contains(file, "_test.go:") {
			own = append(own, g)
		}
	}
	return own
}

// requireNoneLeft fails when a goroutine of the package's is still running a moment after
// everything was released and closed (a goroutine ends a moment after the call that stops it
// returns: allowed two seconds).
func requireNoneLeft(t *testing.T, after string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := ownGoroutines(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutine(s) of the package still running after %s:\n\n%s", len(left), after, strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNoGoroutineLeftAfterReleaseOrClose: every way the package starts a goroutine (a
// kept-alive lease, Do's watcher, a wait abandoned by its caller, a session's renewals, a
// Redlock's rounds and give-backs, a periodic job) ends by the Release or Close that the
// docs say ends it. Not parallel: it reads every goroutine of the process.
func TestNoGoroutineLeftAfterReleaseOrClose(t *testing.T) {
	for _, e := range engines[:2] {
		t.Run(e.name, func(t *testing.T) {
			srv := startServer(t, e.setup)
			ctx := context.Background()
			requireNoneLeft(t, "nothing (before the test)")

			locker, err := NewLocker(srv.client(), WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			lease := mustAcquire(t, ctx, locker, "leak:kept")
			lease.KeepAlive()
			// The reading sees the package's goroutines at all: the keep-alive is one.
			if len(ownGoroutines(t)) == 0 {
				t.Fatal("no goroutine of the package's seen while a lease is kept alive: the stack reading is broken")
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			requireNoneLeft(t, "a kept-alive lease's Release")

			if err := locker.Do(ctx, "leak:do", func(context.Context, *Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			requireNoneLeft(t, "Do's return")

			// A wait its caller abandons: the blocked request is left to its answer (on the
			// module, granted once the holder releases, then given back).
			held := mustAcquire(t, ctx, locker, "leak:wait")
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = locker.Acquire(short, "leak:wait", WithWait(5*time.Second))
			cancel()
			if err == nil || errors.Is(err, ErrNotAcquired) {
				t.Fatalf("an abandoned wait returned %v, want the context's end", err)
			}
			if _, err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}

			session, err := locker.Session()
			if err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, ctx, session, "leak:s1")
			mustAcquire(t, ctx, session, "leak:s2")
			if err := session.Close(ctx); err != nil {
				t.Fatal(err)
			}

			if _, err := locker.RunAtMostEvery(ctx, "leak:periodic", time.Minute, func(context.Context, *Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := locker.Close(); err != nil {
				t.Fatal(err)
			}
			requireNoneLeft(t, "an abandoned wait, a session's Close, a periodic job and the locker's Close")

			clients := []redis.UniversalClient{srv.client(), startServer(t, e.setup).client(), startServer(t, e.setup).client()}
			redlock, err := NewRedlock(clients, WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			fenced := mustAcquire(t, ctx, redlock, "leak:redlock")
			fenced.KeepAlive()
			if _, err := fenced.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := redlock.Do(ctx, "leak:redlock-do", func(context.Context, *Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if err := redlock.Close(); err != nil {
				t.Fatal(err)
			}
			requireNoneLeft(t, "a Redlock lease's Release, its Do and the Redlock's Close")
		})
	}
}
