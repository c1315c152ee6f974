package fencedlock

import "github.com/redis/go-redis/v9"

// NewGoRedisTransport is the go-redis transport NewLocker makes, for the external tests that
// run the shared corpora through a Transport (transporttest).
func NewGoRedisTransport(client redis.UniversalClient) Transport { return newGoRedis(client) }
