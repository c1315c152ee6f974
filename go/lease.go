package fencedlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lease is a granted lease: its key, token and fence, and how long it is valid, measured on
// this process's monotonic clock from before the request was sent, less the drift allowance.
// Hand the fence to the resource with every write: only a check there stops a paused holder.
type Lease struct {
	owner owner
	key   []byte
	token []byte
	fence uint64
	ttl   time.Duration
	// label is the lease's public label, nil without one.
	label []byte

	mu         sync.Mutex
	validUntil time.Time
	ended      bool
	lost       error

	done     chan struct{}
	doneOnce sync.Once
	// stop ends the keep-alive; kept is done when its goroutine has returned.
	stop     chan struct{}
	stopOnce sync.Once
	kept     sync.WaitGroup
	keep     bool
}

func newLease(o owner, req acquireRequest, fence uint64, validUntil time.Time) *Lease {
	return &Lease{owner: o, key: req.key, token: req.token, fence: fence, label: req.label, ttl: time.Duration(req.ttlMs) * time.Millisecond,
		validUntil: validUntil, done: make(chan struct{}), stop: make(chan struct{})}
}

// owner is who granted a lease and renews and releases it: a Locker (one server) or a
// Redlock (a majority of independent servers).
type owner interface {
	// renew extends key's lease for token to ttl from now: the new end of its validity, or an
	// error (one that errors.Is ErrLeaseLost when the lease is no longer held).
	renew(ctx context.Context, key, token []byte, ttl time.Duration) (time.Time, error)
	// release ends key's lease for token: true when it was held and ended now.
	release(ctx context.Context, key, token []byte) (bool, error)
	// name names the server(s) in errors.
	name() string
}

// Fence is the lease's fencing token: above every fence the key had before. Writes at the
// resource must carry it, and the resource must refuse a write with a fence below one it saw.
func (l *Lease) Fence() uint64 { return l.fence }

// Token is the lease's secret token (32 hex digits): whoever has it can renew and release
// the lease, so it never shows in errors or logs.
func (l *Lease) Token() string { return string(l.token) }

// Key is the lock key.
func (l *Lease) Key() string { return string(l.key) }

// TTL is the lease time it was granted for.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Remaining is how long the lease is still valid by this process's clock; 0 once it is not.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return 0
	}
	return max(0, time.Until(l.validUntil))
}

// Done is closed when the lease ends: lost (the first failed renewal of KeepAlive, or its
// validity running out) or released. Err says which.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is held or after it was released, and an error that
// errors.Is(err, ErrLeaseLost) once it was lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// validity is the end of the lease's validity.
func (l *Lease) validity() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// renewed records a renewal's new validity.
func (l *Lease) renewed(until time.Time) {
	l.mu.Lock()
	if !l.ended {
		l.validUntil = until
	}
	l.mu.Unlock()
}

func (l *Lease) end(lost error) {
	l.mu.Lock()
	if !l.ended {
		l.ended = true
		l.lost = lost
	}
	l.mu.Unlock()
	l.doneOnce.Do(func() { close(l.done) })
}

// Renew extends the lease to its ttl from now. A lease the server no longer holds for this
// token (expired, taken over, deleted) is an error that errors.Is ErrLeaseLost; the lease
// then ends (Done is closed).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	ended, lost := l.ended, l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	if ended {
		return &Error{Kind: KindLeaseLost, Key: string(l.key), Err: errors.New("the lease was released")}
	}
	until, err := l.owner.renew(ctx, l.key, l.token, l.ttl)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			l.end(err)
		}
		return err
	}
	l.mu.Lock()
	if !l.ended {
		l.validUntil = until
	}
	l.mu.Unlock()
	return nil
}

// Release ends the lease on the server (the fence is kept: the next grant's is higher), and
// stops its keep-alive. true when the lease was held and ended now; false when it had already
// ended (expired, taken over). Safe to call more than once.
func (l *Lease) Release(ctx context.Context) (bool, error) {
	l.stopKeepAlive()
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	released, err := l.owner.release(ctx, l.key, l.token)
	if err == nil || lost != nil {
		l.end(nil)
	}
	if lost != nil {
		return false, nil
	}
	return released, err
}

// KeepAlive renews the lease every third of its ttl in a goroutine of its own until Release,
// and ends it (closing Done, with an Err that errors.Is ErrLeaseLost) at the first failed
// renewal, or when its validity runs out while a renewal hangs. Calling it again does nothing.
func (l *Lease) KeepAlive() {
	l.mu.Lock()
	if l.keep || l.ended {
		l.mu.Unlock()
		return
	}
	l.keep = true
	l.kept.Add(1)
	l.mu.Unlock()
	go l.keepAlive()
}

func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	keep := l.keep
	l.keep = false
	l.mu.Unlock()
	if keep {
		l.stopOnce.Do(func() { close(l.stop) })
		l.kept.Wait()
	}
}

func (l *Lease) keepAlive() {
	defer l.kept.Done()
	every := l.ttl / 3
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.done:
			return
		case <-timer.C:
		}
		l.mu.Lock()
		until := l.validUntil
		l.mu.Unlock()
		// The renewal may not outlast the validity: loss is signalled when it runs out, even
		// while the server does not answer.
		ctx, cancel := context.WithDeadline(context.Background(), until)
		go func() {
			select {
			case <-l.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := l.Renew(ctx)
		expired := ctx.Err() != nil && time.Now().After(until)
		cancel()
		select {
		case <-l.stop:
			return
		default:
		}
		if err != nil {
			if !errors.Is(err, ErrLeaseLost) {
				why := err
				if expired {
					why = errors.New("its validity ran out while a renewal got no answer")
				}
				l.end(&Error{Kind: KindLeaseLost, Key: string(l.key), Server: l.owner.name(), Err: why})
			}
			return
		}
		timer.Reset(every)
	}
}
