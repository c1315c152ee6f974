package valkeygo_test

// The shared corpora through this adapter against real servers (transporttest.Run;
// fencedlocktest starts them: Redis 7.0 or FENCEDLOCK_REDIS_SERVER, Valkey with
// FENCEDLOCK_FLAVOR=valkey; the module, the Functions library and its script form): the
// conformance cases, the client fault scenarios, the reply conversion on RESP3 and RESP2, and
// a three-primary cluster.

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	"example.invalid/fencedlock/go/fencedlocktest/transporttest"
	"example.invalid/fencedlock/go/valkeygo"
)

// The clients are made as the package's docs tell users to make them (AlwaysPipelining),
// otherwise with valkey-go's defaults (RESP3, client-side caching on), or on RESP2 (which
// client-side caching needs off).
func TestCorpora(t *testing.T) {
	transporttest.Run(t, func(addrs []string, resp2 bool) (valkey.Client, error) {
		return valkey.NewClient(valkey.ClientOption{InitAddress: addrs, AlwaysPipelining: true, AlwaysRESP2: resp2, DisableCache: resp2})
	}, valkeygo.New)
}
