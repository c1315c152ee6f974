// Package valkeygo runs fencedlock over a valkey-go client (github.com/valkey-io/valkey-go):
// leases, waits, sessions, Redlock and every other part of the package, with the same contract
// as its go-redis form, on the module, the Functions library and its script form.
//
//	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"lock1:6379"}, AlwaysPipelining: true})
//	locker, err := valkeygo.NewLocker(client, fencedlock.WithTTL(30*time.Second))
//
// A client to one server (standalone or Sentinel) or to a cluster (routed by the lock key's
// slot; the library loaded on every primary). Give
// the client AlwaysPipelining: true: its connection is then read in the background, so one the
// server closed (a restart) is replaced before the next request instead of failing it. Waits
// block on valkey-go's pool of dedicated connections (requests marked blocking), never on the
// pipelined one; no request is marked read-only, so valkey-go never sends one twice.
//
// valkey-go is a fork of rueidis, and this package is the rueidis adapter's twin: the transport
// is internal/adapter's, written once over both libraries' types as type parameters. What is
// repeated here is what Go's types cannot share: building a command (the builders' Arbitrary
// and Completed types live in each library's internal package, so no type parameter or
// interface can name their methods), the type arguments, and the constructors' signatures
// (valkey.Client and rueidis.Client are distinct interface types). See docs/go.md.
package valkeygo

import (
	"github.com/valkey-io/valkey-go"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/internal/adapter"
)

// New is a fencedlock.Transport over client, a valkey client to one server or to a cluster.
// Its Close closes nothing: the client is the caller's.
func New(client valkey.Client) (fencedlock.Transport, error) {
	cluster := client != nil && client.Mode() == valkey.ClientModeCluster
	return adapter.New[valkey.Completed, valkey.ValkeyResult, valkey.ValkeyMessage]("fencedlock/valkeygo", client, cluster, func(cmd fencedlock.Command, blocking bool) valkey.Completed {
		return adapter.Build[valkey.Completed](client.B().Arbitrary, cmd, blocking)
	})
}

// NewLocker is a fencedlock.Locker over client (see New and fencedlock.NewLockerOver).
func NewLocker(client valkey.Client, opts ...fencedlock.Option) (*fencedlock.Locker, error) {
	return adapter.NewLocker(New, client, opts)
}

// NewRedlock is a fencedlock.Redlock over clients, one per independent server.
func NewRedlock(clients []valkey.Client, opts ...fencedlock.Option) (*fencedlock.Redlock, error) {
	return adapter.NewRedlock(New, clients, opts)
}
