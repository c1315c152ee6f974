package fencedlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// watchEvery is how often a Redlock waiter checks that the server it waits on still answers.
const watchEvery = time.Second

// reserve is a Redlock's waiting step, as the other clients take it. Waiting on every
// server's queue at once would split the votes (contender A first in two queues, B in the
// other three: nobody with a majority until the leases expire), so every contender waits on
// one server, the same for all: the key's designated server, first in the ranking. Its grant
// is a reservation; the holder then takes the majority in rounds (see reserved).
//
// A candidate that cannot queue us (no answer, a refusal) is passed for the next in the
// ranking, which every client that sees the same failure picks too; after N-quorum+1
// candidates the rest could not make a majority anyway, and one round decides. A wait that
// ran out ends with one round too: its refusals say the key is held.
func (r *Redlock) reserve(ctx context.Context, key string, s settings, until time.Time) (*Lease, error) {
	req, err := newRequest(key, s)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(r.servers))
	for i, srv := range r.servers {
		names[i] = srv.name()
	}
	for _, i := range ranking(key, names)[:len(r.servers)-r.quorum+1] {
		srv := r.servers[i]
		e, err := srv.detect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		w := turn{srv: srv, timeout: s.timeout, background: &r.background}
		fence, err := watched(ctx, srv, func(ctx context.Context) (uint64, error) {
			return w.wait(ctx, e, req, until)
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if !answered(err) {
				// The wait may be granted after we left: given back there, and the token
				// changed, since that release could reach the server after a round below
				// was granted there with the same token.
				w.giveBack(req.key, req.token)
				if req, err = newRequest(key, s); err != nil {
					return nil, err
				}
			}
			continue
		}
		if fence == 0 {
			return r.round(ctx, req, s)
		}
		return r.reserved(ctx, req, s)
	}
	return r.round(ctx, req, s)
}

// reserved takes the majority for a reservation: rounds, retried for up to one timeout while
// the previous holder's releases to the other servers may still be in flight (or its leases
// there end a moment later than on the designated server). The first round asks with the
// reserved token, which the designated server grants again at once; a failed round gives its
// token back everywhere, the reservation with it, so a retry asks with a new token, which
// those releases cannot reach.
func (r *Redlock) reserved(ctx context.Context, req acquireRequest, s settings) (*Lease, error) {
	settleBy := time.Now().Add(s.timeout)
	for {
		lease, err := r.round(ctx, req, s)
		if err == nil || ctx.Err() != nil || !time.Now().Before(settleBy) {
			return lease, err
		}
		if err := sleep(ctx, s.timeout/10); err != nil {
			return nil, err
		}
		if req, err = newRequest(string(req.key), s); err != nil {
			return nil, err
		}
	}
}

// watched runs wait while checking, every watchEvery, that srv still answers (a PING on the
// user's connection): a server that answers nothing while contenders wait on it would stall
// them all until their waits run out, so a PING without an answer abandons the wait, its
// cause an error of KindUnavailable.
func watched(ctx context.Context, srv *server, wait func(ctx context.Context) (uint64, error)) (uint64, error) {
	wctx, abandon := context.WithCancelCause(ctx)
	defer abandon(nil)
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := srv.do(wctx, "PING"); err != nil && !answered(err) && wctx.Err() == nil {
				abandon(&Error{Kind: KindUnavailable, Server: srv.name(), Err: errors.New("the server stopped answering while we waited on it")})
				return
			}
		}
	}()
	fence, err := wait(wctx)
	close(stop)
	watcher.Wait()
	return fence, err
}
