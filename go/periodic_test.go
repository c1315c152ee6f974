package fencedlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRunAtMostEvery(t *testing.T) {
	for _, e := range engines[:2] { // the periodic scripts are EVAL'd: not where scripts are denied
		e := e
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := startServer(t, e.setup)
			l := newTestLocker(t, srv.client(), WithLabel("host-a"))
			runs := 0
			job := func(ctx context.Context, lease *Lease) error { runs++; return nil }
			p, err := l.RunAtMostEvery(ctx, "nightly", 800*time.Millisecond, job)
			if err != nil || p.Outcome != Ran || p.Last != nil || runs != 1 {
				t.Fatalf("first: %+v %v (runs %d)", p, err, runs)
			}
			p, err = l.RunAtMostEvery(ctx, "nightly", 800*time.Millisecond, job)
			if err != nil || p.Outcome != NotDue || p.Last == nil || string(p.Last.Label) != "host-a" || p.DueIn <= 0 || runs != 1 {
				t.Fatalf("second: %+v %v (runs %d)", p, err, runs)
			}
			// Busy while another holds the key.
			held, _ := newTestLocker(t, srv.client()).Acquire(ctx, "nightly")
			if p, err := l.RunAtMostEvery(ctx, "nightly", time.Millisecond, job); err != nil || p.Outcome != Busy {
				t.Fatalf("busy: %+v %v", p, err)
			}
			held.Release(ctx)
			time.Sleep(900 * time.Millisecond)
			// A failing job is not recorded: due again at once.
			boom := errors.New("boom")
			if _, err := l.RunAtMostEvery(ctx, "nightly", 800*time.Millisecond, func(context.Context, *Lease) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("a failing job: %v", err)
			}
			if p, err := l.RunAtMostEvery(ctx, "nightly", 800*time.Millisecond, job); err != nil || p.Outcome != Ran || runs != 2 {
				t.Fatalf("after a failure: %+v %v", p, err)
			}
			if _, err := l.RunAtMostEvery(ctx, "nightly", 0, job); !isKind(err, ErrInvalidArgument) {
				t.Fatalf("period 0: %v", err)
			}
		})
	}
}
