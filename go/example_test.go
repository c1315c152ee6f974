package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
)

// A lease, its fence handed to the resource, and a held key told from a server that cannot
// answer. (Compiled, not run: it needs a server; the package's tests run the same calls.)
func ExampleLocker_Acquire() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := fencedlock.NewLocker(client, fencedlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "invoice:inv_72")
	switch {
	case errors.Is(err, fencedlock.ErrNotAcquired):
		fmt.Println("held by another owner")
		return
	case errors.Is(err, fencedlock.ErrUnavailable):
		fmt.Println("the server could not answer: whether the key is held is unknown")
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("write with fence", lease.Fence())
}

// Work under a kept-alive lease: ctx is cancelled, with the loss as its cause, the moment
// the lease is lost.
func ExampleLocker_Do() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := fencedlock.NewLocker(client)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context, lease *fencedlock.Lease) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx) // errors.Is(…, fencedlock.ErrLeaseLost)
		case <-time.After(time.Second):
			return nil
		}
	}, fencedlock.WithWait(10*time.Second))
	fmt.Println(err)
}
