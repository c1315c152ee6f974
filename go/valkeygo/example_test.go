package valkeygo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/valkey-io/valkey-go"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
	"example.invalid/fencedlock/go/valkeygo"
)

// serverAddrs are the independent servers the example talks to: in an application their
// addresses ("lock1:6379", …); here three the tests start with the module.
var serverAddrs []string

func TestMain(m *testing.M) {
	var stops []func()
	code := 1
	for range 3 {
		srv, stop, err := fencedlocktest.StartMain(fencedlocktest.Module)
		if err != nil {
			fmt.Fprintln(os.Stderr, "the example's servers:", err)
			break
		}
		stops = append(stops, stop)
		serverAddrs = append(serverAddrs, srv.Addr())
	}
	if len(serverAddrs) == 3 {
		code = m.Run()
	}
	for _, stop := range stops {
		stop()
	}
	os.Exit(code)
}

// A fenced Redlock over three independent servers, each through its valkey-go client, doing
// work under a kept-alive lease: ctx is cancelled (cause fencedlock.ErrLeaseLost) the moment a
// majority no longer holds it.
func ExampleNewRedlock() {
	var clients []valkey.Client
	for _, addr := range serverAddrs {
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
		fmt.Println("the report, written with a fence:", lease.Fence() > 0)
		return nil
	})
	if errors.Is(err, fencedlock.ErrNoQuorum) {
		fmt.Println("no majority granted")
	}
	// Output: the report, written with a fence: true
}
