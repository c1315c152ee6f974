package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
	fencedrueidis "example.invalid/fencedlock/go/rueidis"
)

// serverAddr is the server the example talks to: in an application its address
// ("lock1:6379"); here one the tests start with the module.
var serverAddr string

func TestMain(m *testing.M) {
	srv, stop, err := fencedlocktest.StartMain(fencedlocktest.Module)
	if err != nil {
		fmt.Fprintln(os.Stderr, "the example's server:", err)
		os.Exit(1)
	}
	serverAddr = srv.Addr()
	code := m.Run()
	stop()
	os.Exit(code)
}

// A lease over a rueidis client, waited for on the server's queue and kept alive while the
// work runs (Done is closed if it is lost). The rest of the API is the package's
// (fencedlock.Locker).
func ExampleNewLocker() {
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{serverAddr}, AlwaysPipelining: true})
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
	default: // the work, each write to the resource with lease.Fence()
		fmt.Println("writing with a fence:", lease.Fence() > 0)
	}
	// Output: writing with a fence: true
}
