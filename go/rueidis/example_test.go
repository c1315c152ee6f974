package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	fencedlock "example.invalid/fencedlock/go"
	fencedrueidis "example.invalid/fencedlock/go/rueidis"
)

// A lease over a rueidis client, its fence handed to the resource; the rest of the API is the
// package's (fencedlock.Locker). (Compiled, not run: it needs a server; the adapter's tests
// run the same calls through the shared corpora.)
func ExampleNewLocker() {
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, AlwaysPipelining: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	locker, err := fencedrueidis.NewLocker(client, fencedlock.WithTTL(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "invoice:inv_72", fencedlock.WithWait(5*time.Second))
	switch {
	case errors.Is(err, fencedlock.ErrNotAcquired):
		fmt.Println("held by another owner")
		return
	case err != nil: // errors.Is(err, fencedlock.ErrUnavailable): no answer
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("write with fence", lease.Fence())
}
