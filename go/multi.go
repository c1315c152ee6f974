package fencedlock

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"
)

// AcquireAll takes a lease on every key, or none: each lease with its own fence, in the order
// the keys are named. Keys of one slot (hash tags: "{job}a", "{job}b"), at most 64, on a
// server that serves ACQUIREALL (the library always; the module where it knows the command)
// are taken in one command for one token, sent again with backoff while any key is held,
// holding nothing in between. Otherwise key by key, in the keys' byte order (so overlapping
// sets named in other orders never deadlock), giving back what was taken when a key is
// refused. Still held after the wait: an error that errors.Is ErrNotAcquired, naming a key.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts ...Option) ([]*Lease, error) {
	s, err := l.settings.with(opts)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, invalid("AcquireAll needs at least one key")
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, invalid("AcquireAll names %q twice", k)
		}
		seen[k] = true
	}
	srv := l.server
	e, err := srv.detect(ctx)
	if err != nil {
		return nil, l.failure(ctx, keys[0], err)
	}
	atOnce, err := l.servesAcquireAll(ctx, e, keys)
	if err != nil {
		return nil, l.failure(ctx, keys[0], err)
	}
	if atOnce {
		return l.acquireAtOnce(ctx, e, keys, s)
	}
	return l.acquireEach(ctx, keys, opts)
}

// servesAcquireAll says whether keys are taken in one ACQUIREALL on this server.
func (l *Locker) servesAcquireAll(ctx context.Context, e engine, keys []string) (bool, error) {
	if len(keys) > proto.c.Limits.MaxAcquireKeys {
		return false, nil
	}
	slot := keySlot([]byte(keys[0]))
	for _, k := range keys[1:] {
		if keySlot([]byte(k)) != slot {
			if e != engineModule || l.server.isCluster() {
				return false, nil
			}
		}
	}
	if e != engineModule {
		return true, nil
	}
	return l.server.moduleServesAcquireAll(ctx)
}

// acquireAtOnce takes the set in ACQUIREALLs for one token: once, or with backoff until
// granted, an error is final, or the wait runs out. Every attempt sends the same token (an
// attempt whose reply was lost and is sent again gets the same fences); a call that fails after
// an attempt that may have been granted releases every key.
func (l *Locker) acquireAtOnce(ctx context.Context, e engine, keys []string, s settings) ([]*Lease, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	raw := make([][]byte, len(keys))
	for i, k := range keys {
		raw[i] = []byte(k)
	}
	req := acquireRequest{token: token, ttlMs: s.ttl.Milliseconds(), label: s.label, permits: s.permits, shared: s.shared}
	giveUp := time.Now().Add(s.wait)
	mayBeHeld := false
	fail := func(err error) ([]*Lease, error) {
		if mayBeHeld {
			l.giveBackSet(raw, token)
		}
		return nil, err
	}
	for round := 0; ; round++ {
		sent := time.Now()
		reply, err := l.server.call(ctx, acquireAllWords(e, raw, req)...)
		var failure error
		switch {
		case err != nil:
			if !answered(err) {
				mayBeHeld = true
			}
			if ctx.Err() != nil {
				return fail(l.failure(ctx, keys[0], err))
			}
			failure = classify(l.server.name(), keys[0], err)
		case reply != nil:
			fences, ferr := asFences(reply, len(keys))
			if ferr != nil {
				mayBeHeld = true
				return fail(&Error{Kind: KindBadReply, Key: keys[0], Server: l.server.name(), Err: ferr})
			}
			until := sent.Add(s.ttl - drift(s.ttl))
			leases := make([]*Lease, len(keys))
			for i := range keys {
				r := req
				r.key = raw[i]
				leases[i] = newLease(l, r, fences[i], until)
			}
			return leases, nil
		}
		var fe *Error
		if failure != nil && (!errors.As(failure, &fe) || !fe.Retryable()) {
			return fail(failure)
		}
		left := time.Until(giveUp)
		if left <= 0 {
			if failure != nil {
				return fail(failure)
			}
			return fail(&Error{Kind: KindNotAcquired, Key: l.busyKey(ctx, keys), Server: l.server.name()})
		}
		if err := sleep(ctx, min(backoff(round), left)); err != nil {
			return fail(l.failure(ctx, keys[0], err))
		}
	}
}

// asFences reads an ACQUIREALL grant: one fence per key.
func asFences(reply any, n int) ([]uint64, error) {
	items, ok := reply.([]any)
	if !ok || len(items) != n {
		return nil, errors.New("ACQUIREALL must reply one fence per key, or nil")
	}
	out := make([]uint64, n)
	for i, item := range items {
		f, err := asFence(item)
		if err != nil || f == 0 {
			return nil, errors.New("ACQUIREALL must reply a fence for every key of a granted set")
		}
		out[i] = f
	}
	return out, nil
}

// busyKey names a key of the set another owner holds (for the error), the first when none
// can be told.
func (l *Locker) busyKey(ctx context.Context, keys []string) string {
	for _, k := range keys {
		if st, err := l.Status(ctx, k); err == nil && st != nil && len(st.Holders) > 0 {
			return k
		}
	}
	return keys[0]
}

// giveBackSet releases every key of a set that may have been granted to token unheard, in the
// background, at once and one timeout later.
func (l *Locker) giveBackSet(keys [][]byte, token []byte) {
	for _, k := range keys {
		l.giveBack(k, token)
	}
}

// acquireEach takes the keys one by one in byte order, each with the wait left, and gives back
// what it took when one is refused or fails.
func (l *Locker) acquireEach(ctx context.Context, keys []string, opts []Option) ([]*Lease, error) {
	s := l.settings
	for _, o := range opts {
		o(&s)
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare([]byte(keys[order[a]]), []byte(keys[order[b]])) < 0 })
	giveUp := time.Now().Add(s.wait)
	leases := make([]*Lease, len(keys))
	for _, i := range order {
		lease, err := l.Acquire(ctx, keys[i], append(append([]Option{}, opts...), WithWait(max(0, time.Until(giveUp))))...)
		if err != nil {
			for _, taken := range leases {
				if taken != nil {
					_, _ = taken.Release(context.WithoutCancel(ctx))
				}
			}
			return nil, err
		}
		leases[i] = lease
	}
	return leases, nil
}
