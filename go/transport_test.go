package fencedlock_test

// The shared corpora through the go-redis transport NewLocker makes (transporttest, which the
// rueidis and valkey-go adapters run too): the client fault scenarios, and the reply
// conversion on RESP3 (go-redis's default) and RESP2 connections; a three-primary cluster
// through a ClusterClient.

import (
	"testing"

	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest/transporttest"
)

// goRedis dials a go-redis client as docs/go.md tells users to make one, speaking protocol.
func goRedis(protocol int) transporttest.Dial {
	return func(t testing.TB, addr string) fencedlock.Transport {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, Protocol: protocol})
		t.Cleanup(func() { c.Close() })
		return fencedlock.NewGoRedisTransport(c)
	}
}

func TestClientFaultCorpus(t *testing.T) { transporttest.RunFaults(t, goRedis(3)) }

func TestTransportReplies(t *testing.T) {
	t.Run("resp3", func(t *testing.T) { transporttest.RunReplies(t, goRedis(3)) })
	t.Run("resp2", func(t *testing.T) { transporttest.RunReplies(t, goRedis(2)) })
}

func TestCluster(t *testing.T) {
	transporttest.RunCluster(t, func(t testing.TB, addrs []string) fencedlock.Transport {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return fencedlock.NewGoRedisTransport(c)
	})
}
