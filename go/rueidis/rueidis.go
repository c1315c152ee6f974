// Package rueidis runs fencedlock over a rueidis client (github.com/redis/rueidis): leases,
// waits, sessions, Redlock and every other part of the package, with the same contract as its
// go-redis form, on the module, the Functions library and its script form.
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"lock1:6379"}, AlwaysPipelining: true})
//	locker, err := fencedrueidis.NewLocker(client, fencedlock.WithTTL(30*time.Second))
//
// A client to one server (standalone or Sentinel) or to a cluster (routed by the lock key's
// slot; the library loaded on every primary). Give
// the client AlwaysPipelining: true: its connection is then read in the background, so one the
// server closed (a restart) is replaced before the next request instead of failing it. Waits
// block on rueidis's pool of dedicated connections (requests marked blocking), never on the
// pipelined one; no request is marked read-only, so rueidis never sends one twice.
//
// The transport is internal/adapter's, written once over the types of rueidis and of its fork
// valkey-go as type parameters; this package passes in only what Go's types cannot share
// (building a rueidis command, whose builder types live in rueidis's internal package; the
// client's Do and DoMulti). See docs/go.md, "Over rueidis and valkey-go".
package rueidis

import (
	"github.com/redis/rueidis"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/internal/adapter"
)

// New is a fencedlock.Transport over client, a rueidis client to one server or to a cluster.
// Its Close closes nothing: the client is the caller's.
func New(client rueidis.Client) (fencedlock.Transport, error) {
	cluster := client != nil && client.Mode() == rueidis.ClientModeCluster
	return adapter.New[rueidis.Completed, rueidis.RedisResult, rueidis.RedisMessage]("fencedlock/rueidis", client, cluster, func(cmd fencedlock.Command, blocking bool) rueidis.Completed {
		return adapter.Build[rueidis.Completed](client.B().Arbitrary, cmd, blocking)
	})
}

// NewLocker is a fencedlock.Locker over client (see New and fencedlock.NewLockerOver).
func NewLocker(client rueidis.Client, opts ...fencedlock.Option) (*fencedlock.Locker, error) {
	return adapter.NewLocker(New, client, opts)
}

// NewRedlock is a fencedlock.Redlock over clients, one per independent server.
func NewRedlock(clients []rueidis.Client, opts ...fencedlock.Option) (*fencedlock.Redlock, error) {
	return adapter.NewRedlock(New, clients, opts)
}
