package guardtest

// A real lock server for the end-to-end tests, found as the fencedlock module's own tests
// find it: Redis (redis-server on PATH, or FENCEDLOCK_REDIS_SERVER) or Valkey
// (FENCEDLOCK_FLAVOR=valkey: .cache/valkey/valkey-server, or FENCEDLOCK_VALKEY_SERVER), with
// the module (target/release/libfencedlock_module.so, or FENCEDLOCK_MODULE) or without it
// (the client loads the Functions library), on a port of 31000-31999, killed when the test ends.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func serverBinary(t *testing.T) string {
	switch f := os.Getenv("FENCEDLOCK_FLAVOR"); f {
	case "", "redis":
		if b := os.Getenv("FENCEDLOCK_REDIS_SERVER"); b != "" {
			return b
		}
		return "redis-server"
	case "valkey":
		if b := os.Getenv("FENCEDLOCK_VALKEY_SERVER"); b != "" {
			return b
		}
		return filepath.Join(repoRoot(t), ".cache/valkey/valkey-server")
	default:
		t.Fatalf("FENCEDLOCK_FLAVOR=%q: expected redis or valkey", f)
		return ""
	}
}

// startRedis starts a server (with the module when module is true) and returns a client of it.
func startRedis(t *testing.T, module bool) *redis.Client {
	t.Helper()
	port, err := freePort(31000, 32000)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "server.log")}
	if module {
		mod := os.Getenv("FENCEDLOCK_MODULE")
		if mod == "" {
			mod = filepath.Join(repoRoot(t), "target/release/libfencedlock_module.so")
		}
		if _, err := os.Stat(mod); err != nil {
			t.Fatalf("the module is not built: %v (cargo build --release -p fencedlock-module)", err)
		}
		args = append(args, "--loadmodule", mod)
	}
	cmd := exec.Command(serverBinary(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start %s: %v (run scripts/setup)", serverBinary(t), err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("%s exited on port %d:\n%s", serverBinary(t), port, tail(string(log), 2000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on port %d within 10 s", serverBinary(t), port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return client
}
