package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/rueidis"

	fencedlock "example.invalid/fencedlock/go"
	fencedrueidis "example.invalid/fencedlock/go/rueidis"
)

// A lease over a rueidis client, waited for on the server's queue and kept alive while the
// work runs; Done is closed if it is lost. The rest of the API is the package's
// (fencedlock.Locker). (Compiled, not run: it needs a server; the adapter's tests run the
// shared corpora through the same transport.)
func ExampleNewLocker() {
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, AlwaysPipelining: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := fencedrueidis.NewLocker(client, fencedlock.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "invoice:inv_72", fencedlock.WithWait(5*time.Second))
	if errors.Is(err, fencedlock.ErrNotAcquired) {
		return // still held by another owner after 5 s
	} else if err != nil {
		log.Fatal(err) // errors.Is(err, fencedlock.ErrUnavailable): no answer
	}
	defer lease.Release(ctx)
	lease.KeepAlive()
	select {
	case <-lease.Done():
		fmt.Println("lost:", lease.Err())
	case <-time.After(time.Minute): // the work, writing with lease.Fence()
		fmt.Println("sent with fence", lease.Fence())
	}
}
