package fencedlock

// Real servers for the tests: Redis 7.0 (redis-server on PATH, or FENCEDLOCK_REDIS_SERVER),
// or Valkey 9.1 (FENCEDLOCK_FLAVOR=valkey: .cache/valkey/valkey-server, or
// FENCEDLOCK_VALKEY_SERVER), with the module (target/release/libfencedlock_module.so, or
// FENCEDLOCK_MODULE) or without it as a managed service runs them (an ACL user without MODULE,
// CONFIG or DEBUG; FUNCTION denied too for the script form), the same variables the Rust
// harness reads. Each runs in a temp dir on 127.0.0.1, on a port of 27000-29999 (the Rust,
// Python and Node suites use others), and is killed when its test ends. A server that cannot
// start fails the test with the reason: nothing is skipped.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// repoRoot is the checkout above go/.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

type setup string

const (
	setupModule     setup = "module"
	setupManaged    setup = "managed"
	setupNoFunction setup = "managed-no-function"
	// setupNoScripts denies FUNCTION and scripts too: no engine can be loaded.
	setupNoScripts setup = "managed-no-scripts"
)

var adminUser, adminPassword = "admin", "admin-secret"

func flavor() string {
	if f := os.Getenv("FENCEDLOCK_FLAVOR"); f != "" {
		return f
	}
	return "redis"
}

func serverBinary(t testing.TB) string {
	t.Helper()
	switch f := flavor(); f {
	case "redis":
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

func modulePath(t testing.TB) string {
	if m := os.Getenv("FENCEDLOCK_MODULE"); m != "" {
		return m
	}
	return filepath.Join(repoRoot(t), "target/release/libfencedlock_module.so")
}

var (
	portMu   sync.Mutex
	nextPort = 27000 + (os.Getpid()%30)*100
)

// freePort is a port of 27000-29999 nobody listens on.
func freePort(t testing.TB) int {
	portMu.Lock()
	defer portMu.Unlock()
	for tries := 0; tries < 3000; tries++ {
		p := nextPort
		nextPort++
		if nextPort > 29999 {
			nextPort = 27000
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 27000-29999")
	return 0
}

// testServer is one server process.
type testServer struct {
	t     testing.TB
	setup setup
	extra []string
	port  int
	dir   string
	cmd   *exec.Cmd
	admin *redis.Client
}

// startServer starts a server of the flavor under test, stopped at the test's end.
func startServer(t testing.TB, s setup) *testServer {
	t.Helper()
	srv := &testServer{t: t, setup: s, port: freePort(t), dir: t.TempDir()}
	srv.launch()
	t.Cleanup(srv.stop)
	return srv
}

func (s *testServer) args() []string {
	args := append([]string{}, s.extra...)
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--save", "", "--appendonly", "no",
		"--enable-debug-command", "yes", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "server.log"))
	if s.setup == setupModule {
		return append(args, "--loadmodule", modulePath(s.t))
	}
	args = append(args, "--user", "default", "on", "nopass", "~*", "&*", "+@all", "-module", "-config", "-debug")
	switch s.setup {
	case setupNoFunction:
		args = append(args, "-function")
	case setupNoScripts:
		args = append(args, "-function", "-script", "-evalsha", "-eval")
	}
	return append(args, "--user", adminUser, "on", ">"+adminPassword, "~*", "&*", "+@all")
}

// launch starts the process and waits until it answers PING.
func (s *testServer) launch() {
	t := s.t
	t.Helper()
	if s.setup == setupModule {
		if _, err := os.Stat(modulePath(t)); err != nil {
			t.Fatalf("the module is not built: %v (cargo build --release -p fencedlock-module)", err)
		}
	}
	s.cmd = exec.Command(serverBinary(t), s.args()...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("cannot start %s: %v (run scripts/setup)", serverBinary(t), err)
	}
	exited := make(chan struct{})
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(s.cmd)
	opt := &redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 10 * time.Second}
	if s.setup != setupModule {
		opt.Username, opt.Password = adminUser, adminPassword
	}
	s.admin = redis.NewClient(opt)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Fatalf("%s exited on port %d:\n%s", serverBinary(t), s.port, tail(string(log), 2000))
		default:
		}
		if s.admin.Ping(context.Background()).Err() == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer on port %d within 10 s", serverBinary(t), s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startCluster starts a cluster of n primaries (slots spread by redis-cli --cluster create),
// each with its bus on a port of the test range too, and waits until every node reports
// cluster_state:ok.
func startCluster(t testing.TB, s setup, n int) []*testServer {
	t.Helper()
	nodes := make([]*testServer, n)
	addrs := make([]string, n)
	for i := range nodes {
		srv := &testServer{t: t, setup: s, port: freePort(t), dir: t.TempDir()}
		srv.extra = []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(t)),
			"--cluster-config-file", filepath.Join(srv.dir, "nodes.conf")}
		srv.launch()
		t.Cleanup(srv.stop)
		nodes[i], addrs[i] = srv, srv.addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-yes")
	if s != setupModule {
		args = append([]string{"--user", adminUser, "--pass", adminPassword, "--no-auth-warning"}, args...)
	}
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range nodes {
		for {
			info, _ := node.admin.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cluster is not ok within 30 s: %s", info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

func (s *testServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// client is a go-redis client as the package's docs tell users to make one.
func (s *testServer) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

func (s *testServer) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// kill stops the process with SIGKILL and waits for its port to refuse.
func (s *testServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", s.addr(), 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
}

// restartWithoutModule kills the server and starts it again on the same port without the
// module and without data, as a managed service: a module server that lost its module.
func (s *testServer) restartWithoutModule() {
	s.kill()
	s.setup = setupManaged
	s.dir = s.t.TempDir()
	s.launch()
}

func (s *testServer) stop() {
	s.kill()
}
