package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Session keeps many leases of one locker alive with one renewal pipeline per interval
// (etcd's Session model): a process holding 1,000 leases sends one round trip per interval,
// not 1,000. Every lease stays an ordinary lease on the server (fences, STATUS, waiting
// unchanged); only the renewals are batched.
//
// A renewal round that fails (the server does not answer within the timeout, or the validity
// runs out first) loses the session: every lease ends lost, Done is closed, and the leases
// are released in the background. A lease refused on its own (deleted, taken over) is lost
// alone; the others carry on.
type Session struct {
	locker *Locker
	ttl    time.Duration
	opts   []Option

	mu     sync.Mutex
	leases map[*Lease]struct{}
	lost   error
	closed bool

	done     chan struct{}
	doneOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	running  sync.WaitGroup
}

// Session starts a session whose leases are taken with opts (WithTTL sets their common ttl,
// and so the renewal interval, a third of it).
func (l *Locker) Session(opts ...Option) (*Session, error) {
	s, err := l.settings.with(opts)
	if err != nil {
		return nil, err
	}
	ss := &Session{locker: l, ttl: s.ttl, opts: opts, leases: map[*Lease]struct{}{}, done: make(chan struct{}), stop: make(chan struct{})}
	ss.running.Add(1)
	go ss.keepAlive()
	return ss, nil
}

// Acquire takes a lease on key, kept alive by the session (not by Lease.KeepAlive).
func (ss *Session) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	ss.mu.Lock()
	lost, closed := ss.lost, ss.closed
	ss.mu.Unlock()
	if lost != nil {
		return nil, lost
	}
	if closed {
		return nil, invalid("the session is closed")
	}
	all := append(append(append([]Option{}, ss.opts...), opts...), WithTTL(ss.ttl))
	lease, err := ss.locker.Acquire(ctx, key, all...)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	if ss.lost != nil || ss.closed {
		ss.mu.Unlock()
		_, _ = lease.Release(ctx)
		return nil, &Error{Kind: KindLeaseLost, Key: key, Err: errors.New("the session ended while the lease was taken")}
	}
	ss.leases[lease] = struct{}{}
	ss.mu.Unlock()
	return lease, nil
}

// Len is the number of leases the session keeps alive.
func (ss *Session) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.leases)
}

// Done is closed when the session is lost or closed; Err says which.
func (ss *Session) Done() <-chan struct{} { return ss.done }

// Err is nil while the session runs or after Close, and errors.Is ErrLeaseLost once lost.
func (ss *Session) Err() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.lost
}

// Close stops the renewals and releases every lease still held.
func (ss *Session) Close(ctx context.Context) error {
	ss.stopOnce.Do(func() { close(ss.stop) })
	ss.running.Wait()
	ss.mu.Lock()
	ss.closed = true
	leases := ss.take()
	ss.mu.Unlock()
	ss.doneOnce.Do(func() { close(ss.done) })
	var errs []error
	for _, lease := range leases {
		if _, err := lease.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// take empties the session's leases (ss.mu held).
func (ss *Session) take() []*Lease {
	out := make([]*Lease, 0, len(ss.leases))
	for lease := range ss.leases {
		out = append(out, lease)
		delete(ss.leases, lease)
	}
	return out
}

func (ss *Session) keepAlive() {
	defer ss.running.Done()
	every := ss.ttl / 3
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-ss.stop:
			return
		case <-timer.C:
		}
		if err := ss.renewAll(); err != nil {
			ss.lose(err)
			return
		}
		timer.Reset(every)
	}
}

// renewAll renews every held lease in one pipeline, bounded by the timeout and by the first
// validity to run out.
func (ss *Session) renewAll() error {
	ss.mu.Lock()
	leases := make([]*Lease, 0, len(ss.leases))
	for lease := range ss.leases {
		if lease.Remaining() == 0 && lease.Err() == nil {
			// Released by its holder.
			delete(ss.leases, lease)
			continue
		}
		if lease.Err() != nil {
			delete(ss.leases, lease)
			continue
		}
		leases = append(leases, lease)
	}
	ss.mu.Unlock()
	if len(leases) == 0 {
		return nil
	}
	first := leases[0].validity()
	for _, lease := range leases[1:] {
		first = minTime(first, lease.validity())
	}
	ctx, cancel := context.WithDeadline(context.Background(), first)
	defer cancel()
	go func() {
		select {
		case <-ss.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	srv := ss.locker.server
	e, err := srv.detect(ctx)
	if err != nil {
		return err
	}
	sent := time.Now()
	ttl := strconv.FormatInt(ss.ttl.Milliseconds(), 10)
	replies, err := ss.pipeline(ctx, e, leases, ttl)
	if err != nil {
		return err
	}
	for i, lease := range leases {
		switch replies[i] {
		case 1:
			lease.renewed(sent.Add(ss.ttl - drift(ss.ttl)))
		default:
			lease.end(&Error{Kind: KindLeaseLost, Key: lease.Key(), Server: srv.name(), Err: errors.New("the server no longer holds the lease for this token")})
			ss.mu.Lock()
			delete(ss.leases, lease)
			ss.mu.Unlock()
		}
	}
	return nil
}

// pipeline sends one RENEW per lease in one pipeline (again after loading a script or
// library the server lost): each reply 1 or 0.
func (ss *Session) pipeline(ctx context.Context, e engine, leases []*Lease, ttl string) ([]int64, error) {
	srv := ss.locker.server
	for attempt := 0; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, srv.timeout)
		v, err := bounded(ctx, tctx, false, func(ctx context.Context) (any, error) {
			cmds := make([]Command, len(leases))
			for i, lease := range leases {
				cmds[i] = commandOf(request(e, cmdRenew, lease.key, []any{lease.token, ttl}, false))
			}
			replies, err := srv.t.Pipeline(ctx, cmds)
			if err != nil {
				return nil, err
			}
			out := make([]int64, len(cmds))
			for i, r := range replies {
				n, ok := r.(int64)
				if !ok {
					return nil, &Error{Kind: KindBadReply, Server: srv.name(), Err: fmt.Errorf("RENEW must reply 0 or 1, got %v", r)}
				}
				out[i] = n
			}
			return out, nil
		})
		cancel()
		if reload := lostLoad(err); reload != nil && attempt == 0 {
			if _, lerr := srv.everywhere(ctx, reload...); lerr != nil {
				return nil, lerr
			}
			continue
		}
		if err != nil {
			return nil, classify(srv.name(), "", err)
		}
		return v.([]int64), nil
	}
}

// lose ends the session: every lease lost, released in the background.
func (ss *Session) lose(cause error) {
	lost := &Error{Kind: KindLeaseLost, Server: ss.locker.server.name(), Err: cause}
	ss.mu.Lock()
	if ss.lost == nil && !ss.closed {
		ss.lost = lost
	}
	leases := ss.take()
	ss.mu.Unlock()
	for _, lease := range leases {
		lease.end(lost)
		ss.locker.giveBack(lease.key, lease.token)
	}
	ss.doneOnce.Do(func() { close(ss.done) })
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
