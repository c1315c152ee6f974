package valkeygo_test

// The shared corpora through this adapter against real servers (fencedlocktest starts them:
// Redis 7.0 or FENCEDLOCK_REDIS_SERVER, Valkey with FENCEDLOCK_FLAVOR=valkey; the module, the
// Functions library and its script form): the conformance cases, the client fault scenarios,
// and the reply conversion on RESP3 (valkey-go's default) and RESP2 connections.

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest/transporttest"
	fencedvalkey "example.invalid/fencedlock/go/valkeygo"
)

// dial makes a valkey-go client to addr as the package's docs tell users to make one
// (AlwaysPipelining, so a connection the server closed is replaced before the next request
// instead of failing it), otherwise with valkey-go's defaults (RESP3, client-side caching on), or
// on RESP2.
func dial(resp2 bool) transporttest.Dial {
	return func(t testing.TB, addr string) fencedlock.Transport {
		t.Helper()
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, AlwaysPipelining: true, AlwaysRESP2: resp2, DisableCache: resp2})
		if err != nil {
			t.Fatalf("valkey-go client to %s: %v", addr, err)
		}
		t.Cleanup(c.Close)
		tr, err := fencedvalkey.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
}

func TestConformanceCorpus(t *testing.T) { transporttest.RunConformance(t, dial(false)) }

func TestClientFaultCorpus(t *testing.T) { transporttest.RunFaults(t, dial(false)) }

func TestReplies(t *testing.T) {
	t.Run("resp3", func(t *testing.T) { transporttest.RunReplies(t, dial(false)) })
	t.Run("resp2", func(t *testing.T) { transporttest.RunReplies(t, dial(true)) })
}
