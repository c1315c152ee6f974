package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock takes leases by majority of N independent servers (no replication between them),
// fenced: after a majority granted, every granting server's fence for the key is raised to the
// majority's largest (owner-checked, RAISE), and the lease is handed out only once a majority
// confirmed, so successive grants carry increasing fences while a majority keeps its state.
// Validity is the ttl minus the round's time minus drift.
type Redlock struct {
	servers  []*server
	settings settings
	quorum   int
	// background counts the goroutines giving back tokens; Close waits for them.
	background sync.WaitGroup
}

// NewRedlock is a Redlock over clients, one per independent server, each given once.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	transports := make([]Transport, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, invalid("a Redlock's client is nil")
		}
		transports[i] = newGoRedis(c)
	}
	return NewRedlockOver(transports, opts...)
}

// NewRedlockOver is a Redlock over transports, one per independent server, each given once
// (see NewLockerOver).
func NewRedlockOver(transports []Transport, opts ...Option) (*Redlock, error) {
	if protoErr != nil {
		return nil, protoErr
	}
	if len(transports) == 0 {
		return nil, invalid("a Redlock needs at least one server")
	}
	s, err := defaults().with(opts)
	if err != nil {
		return nil, err
	}
	r := &Redlock{settings: s, quorum: len(transports)/2 + 1}
	names := map[string]bool{}
	for _, t := range transports {
		if t == nil {
			return nil, invalid("a Redlock's transport is nil")
		}
		srv := newServer(t, s.timeout)
		if n := srv.name(); n != "" {
			if names[n] {
				return nil, invalid("server %s is given twice; a Redlock needs independent servers, each once", n)
			}
			names[n] = true
		}
		r.servers = append(r.servers, srv)
	}
	return r, nil
}

// Close waits for the background releases and closes the connections the Redlock opened
// itself; never the clients it was given.
func (r *Redlock) Close() error {
	r.background.Wait()
	var errs []error
	for _, s := range r.servers {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

func (r *Redlock) name() string { return fmt.Sprintf("a Redlock of %d servers", len(r.servers)) }

// vote is one server's answer in a round.
type vote struct {
	srv   *server
	e     engine
	fence uint64
	err   error
}

// each runs f on every server at once and returns the answers in the servers' order.
func (r *Redlock) each(ctx context.Context, f func(ctx context.Context, srv *server) vote) []vote {
	votes := make([]vote, len(r.servers))
	var wg sync.WaitGroup
	for i, srv := range r.servers {
		wg.Add(1)
		go func(i int, srv *server) {
			defer wg.Done()
			votes[i] = f(ctx, srv)
			votes[i].srv = srv
		}(i, srv)
	}
	wg.Wait()
	return votes
}

// Acquire takes a lease on key from a majority, waiting up to WithWait (and no longer than
// ctx) while another owner holds it: queued on the key's designated server (see reserve),
// else in rounds with backoff. No majority is an error of KindNoQuorum with the votes: it
// errors.Is ErrNotAcquired when a server refused (the key is held), ErrUnavailable when none
// refused and servers could not answer (whether the key is held is unknown).
func (r *Redlock) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	s, err := r.settings.with(opts)
	if err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	giveUp := time.Now().Add(s.wait)
	for round := 0; ; round++ {
		var lease *Lease
		if s.wait > 0 && time.Now().Before(giveUp) {
			lease, err = r.reserve(ctx, key, s, giveUp)
		} else {
			lease, err = r.roundFor(ctx, key, s)
		}
		if err == nil {
			return lease, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fencedlock: acquire %q: %w", key, context.Cause(ctx))
		}
		var fe *Error
		if errors.As(err, &fe) && fe.Kind != KindNoQuorum && !fe.Retryable() {
			return nil, err
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, err
		}
		if serr := sleep(ctx, min(backoff(round), left)); serr != nil {
			return nil, fmt.Errorf("fencedlock: acquire %q: %w", key, serr)
		}
	}
}

// roundFor is one round for a new token.
func (r *Redlock) roundFor(ctx context.Context, key string, s settings) (*Lease, error) {
	req, err := newRequest(key, s)
	if err != nil {
		return nil, err
	}
	return r.round(ctx, req, s)
}

// round is one Redlock round for req: ACQUIRE on every server at once, the raise step on a
// majority's grants, and the token given back everywhere when no lease comes of it.
func (r *Redlock) round(ctx context.Context, req acquireRequest, s settings) (*Lease, error) {
	key := string(req.key)
	sent := time.Now()
	votes := r.ask(ctx, func(e engine) []any { return acquireWords(e, req, false, -1) }, asFence)
	tally, failure := count(votes, key)
	var target uint64
	for _, v := range votes {
		target = max(target, v.fence)
	}
	if tally.Granted >= r.quorum {
		if confirmed := r.raise(ctx, req, votes, target); confirmed >= r.quorum {
			until := sent.Add(s.ttl - drift(s.ttl))
			if time.Now().Before(until) {
				return newLease(r, req, target, until), nil
			}
		}
	}
	r.giveBack(req.key, req.token)
	outage := false
	var fe *Error
	if errors.As(failure, &fe) {
		outage = fe.Kind == KindUnavailable
	}
	return nil, &Error{Kind: KindNoQuorum, Key: key, Server: r.name(), Votes: &tally, Err: failure, held: tally.Refused > 0, outage: tally.Refused == 0 && outage}
}

// raise is the fenced step: every granting server whose fence is below target raises it to
// target for our token (RAISE, owner-checked). The number of servers holding the lease at
// target after it.
func (r *Redlock) raise(ctx context.Context, req acquireRequest, votes []vote, target uint64) int {
	raised := r.each(ctx, func(ctx context.Context, srv *server) vote {
		var v vote
		for _, g := range votes {
			if g.srv == srv {
				v = g
			}
		}
		if v.err != nil || v.fence == 0 {
			return vote{}
		}
		if v.fence == target {
			return vote{fence: target}
		}
		reply, err := srv.call(ctx, request(v.e, "FENCEDLOCK.RAISE", req.key, []any{req.token, strconv.FormatUint(target, 10)}, false)...)
		if err != nil {
			return vote{err: err}
		}
		f, err := asFence(reply)
		return vote{fence: f, err: err}
	})
	confirmed := 0
	for _, v := range raised {
		if v.err == nil && v.fence >= target && v.fence > 0 {
			confirmed++
		}
	}
	return confirmed
}

// renew renews the lease on every server at once: the new end of its validity when a
// majority renewed in time; a lost lease when so many refused that no majority can.
func (r *Redlock) renew(ctx context.Context, key, token []byte, ttl time.Duration) (time.Time, error) {
	sent := time.Now()
	votes := r.ask(ctx, func(e engine) []any {
		return request(e, cmdRenew, key, []any{token, strconv.FormatInt(ttl.Milliseconds(), 10)}, false)
	}, asOne)
	tally, failure := count(votes, string(key))
	until := sent.Add(ttl - drift(ttl))
	if tally.Granted >= r.quorum && time.Now().Before(until) {
		return until, nil
	}
	if tally.Refused > len(r.servers)-r.quorum || tally.Granted >= r.quorum {
		return time.Time{}, &Error{Kind: KindLeaseLost, Key: string(key), Server: r.name(), Votes: &tally, Err: errors.New("no majority holds the lease any more")}
	}
	return time.Time{}, &Error{Kind: KindNoQuorum, Key: string(key), Server: r.name(), Votes: &tally, Err: failure, outage: true}
}

// release releases the lease on every server at once: true when any server held it.
func (r *Redlock) release(ctx context.Context, key, token []byte) (bool, error) {
	votes := r.ask(ctx, func(e engine) []any { return request(e, cmdRelease, key, []any{token}, false) }, asOne)
	tally, failure := count(votes, string(key))
	if tally.Granted == 0 && tally.Failed == len(votes) {
		return false, failure
	}
	return tally.Granted > 0, nil
}

// ask sends the request words makes in each server's engine form to every server at once; a
// server's vote is its reply read by read (a fence, or 1 for yes), or its failure.
func (r *Redlock) ask(ctx context.Context, words func(e engine) []any, read func(reply any) (uint64, error)) []vote {
	return r.each(ctx, func(ctx context.Context, srv *server) vote {
		e, err := srv.detect(ctx)
		if err != nil {
			return vote{err: err}
		}
		reply, err := srv.call(ctx, words(e)...)
		if err != nil {
			return vote{e: e, err: err}
		}
		f, err := read(reply)
		return vote{e: e, fence: f, err: err}
	})
}

// asOne reads a RENEW or RELEASE reply: 1 yes, anything else no.
func asOne(reply any) (uint64, error) {
	if n, _ := reply.(int64); n == 1 {
		return 1, nil
	}
	return 0, nil
}

// count tallies a round's votes about key: granted (a fence, or 1), refused, failed, and the
// first failure as the package's error.
func count(votes []vote, key string) (Votes, error) {
	var tally Votes
	var failure error
	for _, v := range votes {
		switch {
		case v.err != nil:
			tally.Failed++
			if failure == nil {
				failure = classify(v.srv.name(), key, v.err)
			}
		case v.fence > 0:
			tally.Granted++
		default:
			tally.Refused++
		}
	}
	return tally, failure
}

// giveBack releases token on every server in the background, at once and one timeout later:
// a server that answers late may still grant after the first release.
func (r *Redlock) giveBack(key, token []byte) {
	giveBackTwice(&r.background, r.settings.timeout, func(ctx context.Context) {
		_, _ = r.release(ctx, key, token)
	})
}

// Do is Locker.Do over a Redlock lease.
func (r *Redlock) Do(ctx context.Context, key string, fn func(ctx context.Context, lease *Lease) error, opts ...Option) error {
	return doUnder(ctx, r.Acquire, key, fn, opts)
}
