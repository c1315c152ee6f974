package valkeygo_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/valkey-io/valkey-go"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/valkeygo"
)

// A fenced Redlock over three independent Valkey servers, each through its valkey-go client,
// doing work under a kept-alive lease: ctx is cancelled (cause fencedlock.ErrLeaseLost) the
// moment a majority no longer holds it. (Compiled, not run: it needs the servers; the
// adapter's tests run the shared corpora through the same transport.)
func ExampleNewRedlock() {
	var clients []valkey.Client
	for _, addr := range []string{"lock1:6379", "lock2:6379", "lock3:6379"} {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, AlwaysPipelining: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.Close()
		clients = append(clients, c)
	}
	redlock, err := valkeygo.NewRedlock(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer redlock.Close()
	err = redlock.Do(context.Background(), "nightly-report", func(ctx context.Context, lease *fencedlock.Lease) error {
		fmt.Println("report under fence", lease.Fence())
		return nil
	})
	if errors.Is(err, fencedlock.ErrNoQuorum) {
		fmt.Println("no majority granted")
	}
}
