package fencedlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestElection(t *testing.T) {
	eachEngine(t, func(t *testing.T, srv *testServer, _ engine) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l := newTestLocker(t, srv.client(), WithTTL(900*time.Millisecond))
		el, err := l.Election("leader")
		if err != nil {
			t.Fatal(err)
		}
		if who, err := el.Leader(ctx); who != nil || err != nil {
			t.Fatalf("a leader before any campaign: %+v %v", who, err)
		}
		watch, stop := context.WithCancel(ctx)
		defer stop()
		seen := el.Observe(watch, 50*time.Millisecond)
		if first := <-seen; first != nil {
			t.Fatalf("observed %+v first", first)
		}
		a, err := el.Campaign(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if got := <-seen; got == nil || string(got.Label) != "node-a" || got.Epoch != a.Epoch() {
			t.Fatalf("observed %+v", got)
		}
		// A second candidate queues, and is elected when the first resigns, with a higher epoch.
		elected := make(chan *Leadership, 1)
		go func() {
			b, err := el.Campaign(ctx, "node-b")
			if err != nil {
				t.Error(err)
			}
			elected <- b
		}()
		time.Sleep(1500 * time.Millisecond) // past the ttl: a's leadership is kept alive
		select {
		case <-a.Done():
			t.Fatalf("the leader lost its leadership: %v", a.Err())
		case <-elected:
			t.Fatal("elected while another leads")
		default:
		}
		if ok, err := a.Resign(ctx); !ok || err != nil {
			t.Fatalf("resign: %v %v", ok, err)
		}
		b := <-elected
		if b == nil || b.Epoch() <= a.Epoch() {
			t.Fatalf("the successor's epoch is not above %d", a.Epoch())
		}
		if got := <-seen; got == nil || string(got.Label) != "node-b" || got.Epoch != b.Epoch() {
			t.Fatalf("observed %+v", got)
		}
		// A campaign gives up with its ctx.
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancelShort()
		if _, err := el.Campaign(short, "node-c"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a campaign past its ctx: %v", err)
		}
		b.Resign(ctx)
		stop()
		for range seen {
		}
	})
}
