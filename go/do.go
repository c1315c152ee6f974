package fencedlock

import (
	"context"
	"errors"
)

// Do runs fn under a lease on key, kept alive (KeepAlive) while fn runs and released when it
// returns. fn's ctx is cancelled, with a cause that errors.Is ErrLeaseLost
// (context.Cause(ctx)), the moment the lease is lost: stop writing then. fn never runs
// without the lease: a key held elsewhere (after the wait) is an error that errors.Is
// ErrNotAcquired, and fn is not called. Do returns fn's error, joined with the loss when the
// lease was lost while fn ran.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, lease *Lease) error, opts ...Option) error {
	return doUnder(ctx, l.Acquire, key, fn, opts)
}

// doUnder takes a lease on key with acquire (a Locker's or a Redlock's), runs fn under it
// kept alive (runKept), and releases it; fn never runs without the lease.
func doUnder(ctx context.Context, acquire func(context.Context, string, ...Option) (*Lease, error), key string, fn func(ctx context.Context, lease *Lease) error, opts []Option) error {
	if fn == nil {
		return invalid("Do needs a function")
	}
	lease, err := acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	return runKept(ctx, lease, fn)
}

// runKept runs fn under lease, kept alive, and releases it: fn's ctx is cancelled with the
// loss as its cause when the lease is lost.
func runKept(ctx context.Context, lease *Lease, fn func(ctx context.Context, lease *Lease) error) error {
	run, stop := keptAlive(ctx, lease)
	ferr := fn(run, lease)
	lost := stop()
	// The release is sent even when the caller's ctx has ended: the lease must not be left
	// to run out.
	_, rerr := lease.Release(context.WithoutCancel(ctx))
	if lost != nil {
		if ferr != nil && !errors.Is(ferr, ErrLeaseLost) {
			return errors.Join(lost, ferr)
		}
		return lost
	}
	if ferr != nil {
		return ferr
	}
	if rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		return rerr
	}
	return nil
}

// keptAlive keeps lease alive and is the context to work under it: cancelled, with the loss as
// its cause, the moment the lease is lost. stop ends the watch (its goroutine gone when it
// returns) and is the loss, nil while the lease holds.
func keptAlive(ctx context.Context, lease *Lease) (run context.Context, stop func() error) {
	lease.KeepAlive()
	run, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lease.Done():
			if lost := lease.Err(); lost != nil {
				cancel(lost)
			}
		case <-run.Done():
		}
	}()
	return run, func() error {
		lost := lease.Err()
		cancel(nil)
		<-watched
		return lost
	}
}
