package fencedlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// turn is one server's wait for a key, for a Locker or for a Redlock's designated server: the
// server, the request timeout, and the owner's background goroutines (its Close waits for
// them). A grant that comes after the caller stopped waiting is released on this server.
type turn struct {
	srv        *server
	timeout    time.Duration
	background *sync.WaitGroup
}

// wait is one waiting ACQUIRE until `until` at most: on the module the server's own FIFO
// queue (ACQUIRE … BLOCK), on the library attempts woken by the key's wake-up list (BLPOP),
// each on a connection of the owner's own (a blocked request holds its connection). 0: the
// wait ran out with the key still held. Where the transport gives no connection to wait on,
// one attempt (the caller's rounds then poll with backoff).
func (w turn) wait(ctx context.Context, e engine, req acquireRequest, until time.Time) (uint64, error) {
	c, err := w.srv.waiter(ctx, req.key)
	if err != nil {
		return 0, err
	}
	if c == nil {
		return attemptOn(ctx, w.srv, e, req)
	}
	if e == engineModule {
		return w.blocked(ctx, c, e, req, until)
	}
	return w.woken(ctx, c, e, req, until)
}

// giveBack releases token on this server in the background, at once and one timeout later.
func (w turn) giveBack(key, token []byte) {
	giveBackTwice(w.background, w.timeout, func(ctx context.Context) {
		_, _ = releaseOn(ctx, w.srv, key, token)
	})
}

// blocked queues on the module: ACQUIRE … BLOCK for the time left. The server answers at the
// grant or when the time is up; a caller that stops waiting first leaves the request to its
// answer, and a grant that comes then is released.
func (w turn) blocked(ctx context.Context, c Conn, e engine, req acquireRequest, until time.Time) (uint64, error) {
	// BLOCK 0 would wait without limit: a wait with nothing left is one attempt of 1 ms.
	blockMs := max(1, int64(time.Until(until)/time.Millisecond)+1)
	blockMs = min(blockMs, int64(proto.c.Limits.MaxBlockMs))
	words := acquireWords(e, req, false, blockMs)
	rctx, cancel := context.WithTimeout(context.Background(), time.Duration(blockMs)*time.Millisecond+w.timeout)
	type outcome struct {
		fence uint64
		err   error
	}
	res := make(chan outcome, 1)
	var mu sync.Mutex
	abandoned := false
	w.background.Add(1)
	go func() {
		defer w.background.Done()
		defer cancel()
		v, err := c.Do(rctx, commandOf(words))
		var fence uint64
		if err == nil {
			fence, err = asFence(v)
		}
		mu.Lock()
		left := abandoned
		if !left {
			res <- outcome{fence, err}
		}
		mu.Unlock()
		if left && (fence > 0 || (err != nil && !answered(err))) {
			_, _ = releaseOn(context.Background(), w.srv, req.key, req.token)
		}
	}()
	select {
	case o := <-res:
		if o.err != nil && rctx.Err() != nil {
			return 0, fmt.Errorf("%w: %w", errTimedOut, o.err)
		}
		return o.fence, o.err
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		var granted uint64
		select {
		case o := <-res:
			granted = o.fence
		default:
		}
		mu.Unlock()
		if granted > 0 {
			w.giveBack(req.key, req.token)
		}
		return 0, context.Cause(ctx)
	}
}

// woken waits where the server cannot block (the library): an attempt; then, while refused,
// a waiter's attempt (which names the wake-up list, so the release pushes to it) and a BLPOP
// on the list for as long as STATUS shows the holder's lease to last, then again.
func (w turn) woken(ctx context.Context, c Conn, e engine, req acquireRequest, until time.Time) (uint64, error) {
	srv, timeout := w.srv, w.timeout
	send := func(args []any, bound time.Duration) (any, error) {
		return srv.callOn(ctx, c, bound, args...)
	}
	try := func(waiting bool) (uint64, error) {
		v, err := send(acquireWords(e, req, waiting, -1), timeout)
		if err != nil {
			return 0, err
		}
		return asFence(v)
	}
	fence, err := try(false)
	for {
		if err != nil || fence > 0 {
			return fence, err
		}
		left := time.Until(until)
		if left <= 0 {
			return 0, nil
		}
		var heldFor time.Duration
		if v, err := send(request(e, cmdStatus, req.key, nil, false), timeout); err != nil {
			return 0, err
		} else {
			heldFor = heldForOf(v)
		}
		if fence, err = try(true); err != nil || fence > 0 {
			return fence, err
		}
		nap := min(max(heldFor+time.Millisecond, 5*time.Millisecond), left)
		napMs := max(1, int64((nap+time.Millisecond-1)/time.Millisecond))
		seconds := fmt.Sprintf("%d.%03d", napMs/1000, napMs%1000)
		if _, err := send([]any{"BLPOP", wakeKey(req.key), seconds}, time.Duration(napMs)*time.Millisecond+timeout); err != nil {
			return 0, err
		}
		// The attempt after a wake-up names the wake-up list too: a reader granted then
		// passes the wake-up on to the readers behind it.
		fence, err = try(true)
	}
}
