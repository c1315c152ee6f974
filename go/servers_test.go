package fencedlock

// The tests' real servers come from fencedlocktest (Start: Redis 7.0 or
// FENCEDLOCK_REDIS_SERVER, or Valkey with FENCEDLOCK_FLAVOR=valkey; the module or a managed
// set-up; ports 27000-29999; a server that cannot start fails the test), which the adapter
// modules' tests use too. testServer keeps the package's tests in their short words.

import (
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"example.invalid/fencedlock/go/fencedlocktest"
)

type setup = fencedlocktest.Setup

const (
	setupModule     = fencedlocktest.Module
	setupManaged    = fencedlocktest.Managed
	setupNoFunction = fencedlocktest.NoFunction
	setupNoScripts  = fencedlocktest.NoScripts
)

// testServer is one server process; admin is its all-powerful client while it runs.
type testServer struct {
	s     *fencedlocktest.Server
	admin *redis.Client
}

func wrapServer(s *fencedlocktest.Server) *testServer { return &testServer{s: s, admin: s.Admin} }

func startServer(t testing.TB, s setup) *testServer { return wrapServer(fencedlocktest.Start(t, s)) }

func (s *testServer) addr() string              { return s.s.Addr() }
func (s *testServer) client() *redis.Client     { return s.s.Client() }
func (s *testServer) signal(sig syscall.Signal) { s.s.Signal(sig) }
func (s *testServer) kill()                     { s.s.Kill(); s.admin = s.s.Admin }
func (s *testServer) restartWithoutModule()     { s.s.RestartWithoutModule(); s.admin = s.s.Admin }
func repoRoot(t testing.TB) string              { return fencedlocktest.RepoRoot(t) }
