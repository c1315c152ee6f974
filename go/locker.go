package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker takes leases on one server (or one Redis Cluster, routed by key) over the user's
// go-redis client, with the module's commands where the server has them, else the Functions
// library (loaded by the locker where missing or older), else the library as a script.
//
// Give the client ContextTimeoutEnabled: true: every request is bounded by WithTimeout, and
// go-redis honours a context's deadline on the socket only then. Without it a request to a
// server that stopped answering is still given up at the timeout, but its connection stays
// busy until the client's ReadTimeout, and go-redis may send it again meanwhile.
type Locker struct {
	server   *server
	settings settings
	// background counts the goroutines giving back grants that may have been made unheard;
	// Close waits for them.
	background sync.WaitGroup
}

// NewLocker is a locker over client: a *redis.Client (a failover client on Sentinel is one),
// a *redis.ClusterClient, or another redis.UniversalClient (whose waits then poll). Bad
// options are an error that errors.Is ErrInvalidArgument.
func NewLocker(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, invalid("a locker needs a client")
	}
	return NewLockerOver(newGoRedis(client), opts...)
}

// NewLockerOver is a locker over a Transport: another client library's, through its adapter
// (the modules example.invalid/fencedlock/go/rueidis and …/valkeygo), or one of your own.
// Close closes what the transport opened itself (Transport.Close).
func NewLockerOver(t Transport, opts ...Option) (*Locker, error) {
	if protoErr != nil {
		return nil, protoErr
	}
	if t == nil {
		return nil, invalid("a locker needs a transport")
	}
	s, err := defaults().with(opts)
	if err != nil {
		return nil, err
	}
	return &Locker{server: newServer(t, s.timeout), settings: s}, nil
}

// Close waits for the locker's background releases and closes the connections it opened
// itself for waits; never the client it was given.
func (l *Locker) Close() error {
	l.background.Wait()
	return l.server.close()
}

// Acquire takes a lease on key, waiting up to WithWait (and no longer than ctx) while another
// owner holds it. Another owner's lease is an error that errors.Is ErrNotAcquired; a server
// that cannot answer, ErrUnavailable: the two are never confused.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	s, err := l.settings.with(opts)
	if err != nil {
		return nil, err
	}
	e, err := l.engineFor(ctx, key)
	if err != nil {
		return nil, err
	}
	srv := l.server
	if e != engineModule {
		if max := time.Duration(proto.c.Library.MaxTTLMs) * time.Millisecond; s.ttl > max {
			return nil, invalid("ttl must be at most %v on a server without the module (the Functions library's limit), got %v", max, s.ttl)
		}
	}
	giveUp := time.Now().Add(s.wait)
	var last error
	for round := 0; ; round++ {
		// Every round asks with a token of its own: a round that got no answer may have been
		// granted unheard, and its token is given back in the background, which must never
		// end a later round's lease.
		req, err := newRequest(key, s)
		if err != nil {
			return nil, err
		}
		sent := time.Now()
		var fence uint64
		if s.wait > 0 && time.Now().Before(giveUp) {
			fence, err = l.turn().wait(ctx, e, req, giveUp)
		} else {
			fence, err = attemptOn(ctx, srv, e, req)
		}
		if err == nil && fence > 0 {
			until := sent.Add(s.ttl - drift(s.ttl))
			lease := newLease(l, req, fence, until)
			if s.wait > 0 && time.Since(sent) > (s.ttl-drift(s.ttl))/4 {
				// The wait ate into the lease: a renewal anchors it at now. A failed one
				// leaves the validity counted from the request; a refused one (the lease is
				// gone already) is the outcome.
				if err := lease.Renew(ctx); errors.Is(err, ErrLeaseLost) {
					return nil, err
				}
			}
			return lease, nil
		}
		if err != nil {
			if !answered(err) {
				l.giveBack(req.key, req.token)
			}
			if ctx.Err() != nil {
				return nil, l.failure(ctx, key, err)
			}
			ferr := classify(srv.name(), key, err)
			var fe *Error
			if !errors.As(ferr, &fe) || !fe.Retryable() || !time.Now().Before(giveUp) {
				return nil, ferr
			}
			last = ferr
		} else {
			last = nil
		}
		left := time.Until(giveUp)
		if left <= 0 {
			if last != nil {
				return nil, last
			}
			return nil, &Error{Kind: KindNotAcquired, Key: key, Server: srv.name()}
		}
		if err := sleep(ctx, min(backoff(round), left)); err != nil {
			return nil, l.failure(ctx, key, err)
		}
	}
}

// engineFor checks key and is the server's engine (detected once), or the failure to detect
// it as the package's error.
func (l *Locker) engineFor(ctx context.Context, key string) (engine, error) {
	if err := checkKey(key); err != nil {
		return engineUnknown, err
	}
	e, err := l.server.detect(ctx)
	if err != nil {
		return engineUnknown, l.failure(ctx, key, err)
	}
	return e, nil
}

// failure is err as the package's error: the caller's own context ending is its cause as is.
func (l *Locker) failure(ctx context.Context, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("fencedlock: acquire %q: %w", key, context.Cause(ctx))
	}
	return classify(l.server.name(), key, err)
}

// newRequest is an ACQUIRE of key with a new token and the call's settings.
func newRequest(key string, s settings) (acquireRequest, error) {
	token, err := newToken()
	if err != nil {
		return acquireRequest{}, err
	}
	return acquireRequest{key: []byte(key), token: token, ttlMs: s.ttl.Milliseconds(), label: s.label, permits: s.permits, shared: s.shared}, nil
}

// attemptOn is one ACQUIRE on srv: the fence, or 0 while another token holds the key.
func attemptOn(ctx context.Context, srv *server, e engine, req acquireRequest) (uint64, error) {
	reply, err := srv.call(ctx, acquireWords(e, req, false, -1)...)
	if err != nil {
		return 0, err
	}
	return asFence(reply)
}

// asFence reads an ACQUIRE reply: a fence of 1 or more, or nil (0 here).
func asFence(reply any) (uint64, error) {
	if reply == nil {
		return 0, nil
	}
	n, ok := reply.(int64)
	if !ok || n < 1 {
		return 0, &Error{Kind: KindBadReply, Err: fmt.Errorf("ACQUIRE must reply a fence of 1 or more, or nil; got %v", reply)}
	}
	return uint64(n), nil
}

// name is the server's address, for errors.
func (l *Locker) name() string { return l.server.name() }

// renew is a RENEW of key for token: the new end of its validity (measured from before the
// request), or an error that errors.Is ErrLeaseLost when the server no longer holds it.
func (l *Locker) renew(ctx context.Context, key, token []byte, ttl time.Duration) (time.Time, error) {
	sent := time.Now()
	srv := l.server
	e, err := srv.detect(ctx)
	if err != nil {
		return time.Time{}, classify(srv.name(), string(key), err)
	}
	reply, err := srv.call(ctx, request(e, cmdRenew, key, []any{token, strconv.FormatInt(ttl.Milliseconds(), 10)}, false)...)
	if err != nil {
		return time.Time{}, classify(srv.name(), string(key), err)
	}
	n, ok := reply.(int64)
	if !ok || (n != 0 && n != 1) {
		return time.Time{}, &Error{Kind: KindBadReply, Key: string(key), Server: srv.name(), Err: errors.New("RENEW must reply 0 or 1")}
	}
	if n == 0 {
		return time.Time{}, &Error{Kind: KindLeaseLost, Key: string(key), Server: srv.name(), Err: errors.New("the server no longer holds the lease for this token")}
	}
	return sent.Add(ttl - drift(ttl)), nil
}

// release is a RELEASE of key for token: true when the token held it and it ended now.
func (l *Locker) release(ctx context.Context, key, token []byte) (bool, error) {
	return releaseOn(ctx, l.server, key, token)
}

// releaseOn is a RELEASE of key for token on srv.
func releaseOn(ctx context.Context, srv *server, key, token []byte) (bool, error) {
	e, err := srv.detect(ctx)
	if err != nil {
		return false, classify(srv.name(), string(key), err)
	}
	reply, err := srv.call(ctx, request(e, cmdRelease, key, []any{token}, false)...)
	if err != nil {
		return false, classify(srv.name(), string(key), err)
	}
	n, ok := reply.(int64)
	if !ok || (n != 0 && n != 1) {
		return false, &Error{Kind: KindBadReply, Key: string(key), Server: srv.name(), Err: errors.New("RELEASE must reply 0 or 1")}
	}
	return n == 1, nil
}

// giveBack releases a token whose ACQUIRE got no answer (it may have been granted unheard),
// in the background: at once, and again one timeout later, since a server that answers late
// may grant after the first release. A RELEASE by our own token cannot end another owner's
// lease, so it is always safe to send.
func (l *Locker) giveBack(key, token []byte) { l.turn().giveBack(key, token) }

// turn is the locker's server as a place to wait.
func (l *Locker) turn() turn {
	return turn{srv: l.server, timeout: l.settings.timeout, background: &l.background}
}

// giveBackTwice runs release in the background, counted by background: at once, and again
// after timeout, for the servers that answer late.
func giveBackTwice(background *sync.WaitGroup, timeout time.Duration, release func(context.Context)) {
	background.Add(1)
	go func() {
		defer background.Done()
		ctx := context.Background()
		release(ctx)
		time.Sleep(timeout)
		release(ctx)
	}()
}

// backoff is the jittered delay before retry round: random in [20, min(400, 20·2^round)] ms.
func backoff(round int) time.Duration {
	hi := 20 * time.Millisecond << min(round, 10)
	hi = min(hi, 400*time.Millisecond)
	lo := 20 * time.Millisecond
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
