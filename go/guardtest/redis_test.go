package guardtest

// A real lock server for the end-to-end tests, started as the fencedlock module's own tests
// start one (fencedlocktest.Start: Redis, redis-server on PATH or FENCEDLOCK_REDIS_SERVER, or
// Valkey with FENCEDLOCK_FLAVOR=valkey; with the module, or as a managed service where the
// client loads the Functions library), killed when the test ends.

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"example.invalid/fencedlock/go/fencedlocktest"
)

// startRedis starts a server (with the module when module is true) and returns a client of
// it, made as docs/go.md tells users to make one.
func startRedis(t *testing.T, module bool) *redis.Client {
	t.Helper()
	setup := fencedlocktest.Managed
	if module {
		setup = fencedlocktest.Module
	}
	return fencedlocktest.Start(t, setup).Client()
}

// eachLockServer runs f, a subtest, on a lock server with the module and on one without it
// (the Functions library).
func eachLockServer(t *testing.T, f func(t *testing.T, client *redis.Client)) {
	for _, engine := range []struct {
		name   string
		module bool
	}{{"module", true}, {"library", false}} {
		t.Run(engine.name, func(t *testing.T) { f(t, startRedis(t, engine.module)) })
	}
}
