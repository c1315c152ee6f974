package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
)

// A contender takes one uncontended lease on key and gives it back.
type contender struct {
	name  string
	lease func(ctx context.Context, key string) error
}

// The lease's time to live for every library: 10 s, fencedlock's default (redsync's is 8 s,
// bsm/redislock takes one on every call). Uncontended, no library retries, so their retry
// settings stay at their defaults.
const leaseTTL = 10 * time.Second

func fencedlockLease(c *redis.Client) (contender, func() error, error) {
	locker, err := fencedlock.NewLocker(c)
	if err != nil {
		return contender{}, nil, err
	}
	return contender{"fencedlock", func(ctx context.Context, key string) error {
		lease, err := locker.Acquire(ctx, key)
		if err != nil {
			return err
		}
		released, err := lease.Release(ctx)
		if err == nil && !released {
			err = fmt.Errorf("fencedlock: the lease on %s had ended before its release", key)
		}
		return err
	}}, locker.Close, nil
}

// redsyncLease is redsync over its go-redis v9 pool: a mutex per lease, as a program that
// locks per entity makes one (NewMutex only fills a struct), Lock then Unlock.
func redsyncLease(c *redis.Client) contender {
	rs := redsync.New(goredis.NewPool(c))
	return contender{"redsync", func(ctx context.Context, key string) error {
		m := rs.NewMutex(key)
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: the mutex on %s had ended before its unlock", key)
		}
		return err
	}}
}

func redislockLease(c *redis.Client) contender {
	locker := redislock.New(c)
	return contender{"bsm/redislock", func(ctx context.Context, key string) error {
		lock, err := locker.Obtain(ctx, key, leaseTTL, nil)
		if err != nil {
			return err
		}
		return lock.Release(ctx)
	}}
}

// compareAndDelete is the release every incumbent sends (as EVALSHA).
var compareAndDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// rawLease is the floor: the two commands an unfenced lock needs (SET NX PX, then the
// compare-and-delete script), with a fresh 128-bit token, and nothing else.
func rawLease(c *redis.Client) contender {
	return contender{"raw SET NX PX + EVALSHA", func(ctx context.Context, key string) error {
		raw := make([]byte, 16)
		_, _ = rand.Read(raw)
		token := hex.EncodeToString(raw)
		ok, err := c.SetNX(ctx, key, token, leaseTTL).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s was held", key)
		}
		return compareAndDelete.Run(ctx, c, []string{key}, token).Err()
	}}
}

// rawModuleLease is the module's floor: its two commands (FENCEDLOCK.ACQUIRE, then
// FENCEDLOCK.RELEASE) sent straight through go-redis, with a fresh token. fencedlock's time
// above it is the package's own.
func rawModuleLease(c *redis.Client) contender {
	return contender{"raw FENCEDLOCK.ACQUIRE + RELEASE", func(ctx context.Context, key string) error {
		raw := make([]byte, 16)
		_, _ = rand.Read(raw)
		token := hex.EncodeToString(raw)
		fence, err := c.Do(ctx, "FENCEDLOCK.ACQUIRE", key, token, leaseTTL.Milliseconds()).Int64()
		if err != nil {
			return err
		}
		if fence < 1 {
			return fmt.Errorf("%s: no fence", key)
		}
		return c.Do(ctx, "FENCEDLOCK.RELEASE", key, token).Err()
	}}
}

// leaseResult is one contender's figures over the rounds on one server.
type leaseResult struct {
	UsPerLease float64 `json:"us_per_lease"`
	// ClientCPUUsPerLease is this process's CPU time per lease (median of rounds): the
	// library's own work and go-redis's, apart from the server's.
	ClientCPUUsPerLease float64 `json:"client_cpu_us_per_lease"`
	// Ratios are the median of per-round time ratios to each incumbent.
	RatioToRedsync   float64 `json:"ratio_to_redsync"`
	RatioToRedislock float64 `json:"ratio_to_redislock"`
}

// leaseBatch is how many leases a contender takes in a row before the next one's turn.
const leaseBatch = 50

// leaseRounds takes leases one at a time, contender after contender: per round, leases
// leases of each, in turns of leaseBatch, the order flipping every turn, so that a burst of
// load on this shared machine lands on all of them alike. Each contender reuses one key of
// its own: the steady state of a lock taken again and again (the module keeps a released
// key's fence record, the library its floor key, so a reused key is their common case).
func leaseRounds(ctx context.Context, contenders []contender, rounds, leases int) (map[string]leaseResult, error) {
	wall := map[string][]float64{}
	cpu := map[string][]float64{}
	for range rounds {
		spent := map[string]time.Duration{}
		used := map[string]time.Duration{}
		order := slices.Clone(contenders)
		for range leases / leaseBatch {
			for _, c := range order {
				key := "lease:" + c.name
				cpu0, start := cpuTime(), time.Now()
				for range leaseBatch {
					if err := c.lease(ctx, key); err != nil {
						return nil, fmt.Errorf("%s: %w", c.name, err)
					}
				}
				spent[c.name] += time.Since(start)
				used[c.name] += cpuTime() - cpu0
			}
			slices.Reverse(order)
		}
		n := float64(leases / leaseBatch * leaseBatch)
		for _, c := range contenders {
			wall[c.name] = append(wall[c.name], float64(spent[c.name].Microseconds())/n)
			cpu[c.name] = append(cpu[c.name], float64(used[c.name].Microseconds())/n)
		}
	}
	out := map[string]leaseResult{}
	for _, c := range contenders {
		out[c.name] = leaseResult{
			UsPerLease:          median(wall[c.name]),
			ClientCPUUsPerLease: median(cpu[c.name]),
			RatioToRedsync:      medianRatio(wall[c.name], wall["redsync"]),
			RatioToRedislock:    medianRatio(wall[c.name], wall["bsm/redislock"]),
		}
	}
	return out, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianRatio is the median of the per-round ratios a[i] / b[i]: 0 without b.
func medianRatio(a, b []float64) float64 {
	if len(b) != len(a) {
		return 0
	}
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return median(r)
}
