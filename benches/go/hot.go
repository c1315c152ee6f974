package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
)

// hold is how long a holder keeps the hot key: ~1 ms of work.
const hold = time.Millisecond

// A taker waits for the hot key until ctx ends: a release function, or nil when the wait
// ended without the key.
type taker struct {
	name string
	take func(ctx context.Context, key string) (release func(), err error)
}

// fencedlockTaker waits as Acquire with WithWait does: queued on the server (ACQUIRE … BLOCK)
// on the module, woken through the key's wake-up list (BLPOP) on the library.
func fencedlockTaker(name string, locker *fencedlock.Locker) taker {
	return taker{name, func(ctx context.Context, key string) (func(), error) {
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		lease, err := locker.Acquire(ctx, key, fencedlock.WithWait(left))
		if errors.Is(err, fencedlock.ErrNotAcquired) || ctx.Err() != nil {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return func() { _, _ = lease.Release(context.Background()) }, nil
	}}
}

// redsyncTaker is redsync at its defaults: Lock tries 32 times, 50 to 250 ms apart; a
// holder whose tries ran out asks again, until the contest ends.
func redsyncTaker(c *redis.Client) taker {
	rs := redsync.New(goredis.NewPool(c))
	return taker{"redsync", func(ctx context.Context, key string) (func(), error) {
		m := rs.NewMutex(key)
		err := m.LockContext(ctx)
		if errors.Is(err, redsync.ErrFailed) || ctx.Err() != nil {
			return nil, nil
		}
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return func() { _, _ = m.UnlockContext(context.Background()) }, nil
	}}
}

// hotResult is one taker's contest figures, over the rounds.
type hotResult struct {
	GrantsPerS float64 `json:"grants_per_s"`
	// RatioToRedsync is the median of per-round ratios to redsync's grants/s.
	RatioToRedsync float64 `json:"ratio_to_redsync"`
	// Fewest and Most are the fewest and most grants one holder got in a round, over all
	// rounds: a holder with 0 was starved.
	Fewest int `json:"fewest_grants"`
	Most   int `json:"most_grants"`
	// LongestWaitMs is the longest a holder waited for one grant (or for nothing, at the end).
	LongestWaitMs float64 `json:"longest_wait_ms"`
	// Errors is how many takes failed with an error (not a refusal), over all rounds.
	Errors int `json:"errors"`
}

// contest runs holders goroutines on one key for d: each takes the key, holds it ~1 ms and
// gives it back, again and again. Grants per second, and per holder.
func contest(t taker, key string, holders int, d time.Duration) contestResult {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	grants := make([]int, holders)
	longest := make([]time.Duration, holders)
	errs := make([]int, holders)
	first := make([]error, holders)
	var wg sync.WaitGroup
	start := time.Now()
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				asked := time.Now()
				release, err := t.take(ctx, key)
				longest[h] = max(longest[h], time.Since(asked))
				if err != nil {
					// An error is counted and the holder asks again (after a pause, so a
					// server that stopped answering is not hammered): the contest's figures
					// say how many there were.
					errs[h]++
					if first[h] == nil {
						first[h] = err
					}
					time.Sleep(hold)
					continue
				}
				if release == nil {
					continue
				}
				grants[h]++
				time.Sleep(hold)
				release()
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	total := 0
	for _, g := range grants {
		total += g
	}
	failed := 0
	for _, n := range errs {
		failed += n
	}
	var firstErr error
	for _, err := range first {
		if err != nil {
			firstErr = err
			break
		}
	}
	return contestResult{float64(total) / secs, grants, slices.Max(longest), failed, firstErr}
}

type contestResult struct {
	rate    float64
	grants  []int
	longest time.Duration
	// errors is how many takes failed (not a refusal: an error), firstError one of them.
	errors     int
	firstError error
}

// hotRounds runs the takers' contests in turn, round after round (the order flipping every
// round), each on a fresh key.
func hotRounds(takers []taker, rounds, holders int, d time.Duration) map[string]hotResult {
	rates := map[string][]float64{}
	out := map[string]hotResult{}
	order := slices.Clone(takers)
	for round := range rounds {
		for _, t := range order {
			c := contest(t, "hot:"+t.name+":"+string(rune('a'+round)), holders, d)
			if c.errors > 0 {
				fmt.Fprintf(os.Stderr, "go-locks: hot key, %s: %d errors, such as: %v\n", t.name, c.errors, c.firstError)
			}
			rates[t.name] = append(rates[t.name], c.rate)
			r, seen := out[t.name]
			if !seen {
				r.Fewest = c.grants[0]
			}
			r.Fewest = min(r.Fewest, slices.Min(c.grants))
			r.Most = max(r.Most, slices.Max(c.grants))
			r.LongestWaitMs = max(r.LongestWaitMs, float64(c.longest.Microseconds())/1000)
			r.Errors += c.errors
			out[t.name] = r
		}
		slices.Reverse(order)
	}
	for name, r := range out {
		r.GrantsPerS = median(rates[name])
		r.RatioToRedsync = medianRatio(rates[name], rates["redsync"])
		out[name] = r
	}
	return out
}

// measuredHold is the median time.Sleep(hold) actually takes here (the timer's slack): the
// limit one holder at a time allows is 1 / (that + one round trip).
func measuredHold() time.Duration {
	var ds []float64
	for range 200 {
		start := time.Now()
		time.Sleep(hold)
		ds = append(ds, float64(time.Since(start)))
	}
	return time.Duration(median(ds))
}
