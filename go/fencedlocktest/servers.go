// Package fencedlocktest is the test support of the Go module, importable by other modules
// (the rueidis and valkey-go adapters, the benchmarks): it starts real servers for a test
// (Start, StartCluster) and runs the shared conformance corpus against them
// (RunConformance) through any client that can send a request. Its sibling package
// transporttest runs the corpus, the client fault corpus and the reply conversion checks
// through a fencedlock.Transport.
//
// Real servers for the tests: Redis 7.0 (redis-server on PATH, or FENCEDLOCK_REDIS_SERVER),
// or Valkey 9.1 (FENCEDLOCK_FLAVOR=valkey: .cache/valkey/valkey-server, or
// FENCEDLOCK_VALKEY_SERVER), with the module (target/release/libfencedlock_module.so, or
// FENCEDLOCK_MODULE) or without it as a managed service runs them (an ACL user without MODULE,
// CONFIG or DEBUG; FUNCTION denied too for the script form), the same variables the Rust
// harness reads. Each runs in a temp dir on 127.0.0.1, on a port of 27000-29999 (the Rust,
// Python and Node suites use others), and is killed when its test ends. A server that cannot
// start fails the test with the reason: nothing is skipped.

package fencedlocktest

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

// RepoRoot is the checkout the test runs in: the first directory above it with
// protocol/corpus/conformance.json.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "protocol/corpus/conformance.json")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no checkout above %s (protocol/corpus/conformance.json)", dir)
		}
	}
}

// Setup is how a server is run.
type Setup string

const (
	// Module loads the module.
	Module Setup = "module"
	// Managed runs without the module, as a managed service: the default user without
	// MODULE, CONFIG or DEBUG (the package loads its Functions library).
	Managed Setup = "managed"
	// NoFunction denies FUNCTION too: the package's script by EVALSHA.
	NoFunction Setup = "managed-no-function"
	// NoScripts denies FUNCTION and scripts too: no engine can be loaded.
	NoScripts Setup = "managed-no-scripts"
)

// AdminUser and AdminPassword are the all-powerful user of a managed server (the default
// user of a module server is one).
const AdminUser, AdminPassword = "admin", "admin-secret"

// Flavor is the server under test: FENCEDLOCK_FLAVOR, redis (the default) or valkey.
func Flavor() string {
	if f := os.Getenv("FENCEDLOCK_FLAVOR"); f != "" {
		return f
	}
	return "redis"
}

func serverBinary(t testing.TB) string {
	t.Helper()
	switch f := Flavor(); f {
	case "redis":
		if b := os.Getenv("FENCEDLOCK_REDIS_SERVER"); b != "" {
			return b
		}
		return "redis-server"
	case "valkey":
		if b := os.Getenv("FENCEDLOCK_VALKEY_SERVER"); b != "" {
			return b
		}
		return filepath.Join(RepoRoot(t), ".cache/valkey/valkey-server")
	default:
		t.Fatalf("FENCEDLOCK_FLAVOR=%q: expected redis or valkey", f)
		return ""
	}
}

func modulePath(t testing.TB) string {
	if m := os.Getenv("FENCEDLOCK_MODULE"); m != "" {
		return m
	}
	return filepath.Join(RepoRoot(t), "target/release/libfencedlock_module.so")
}

var (
	portMu   sync.Mutex
	nextPort = 27000 + (os.Getpid()%30)*100
)

// FreePort is a port of 27000-29999 nobody listens on.
func FreePort(t testing.TB) int {
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

// Server is one server process.
type Server struct {
	t     testing.TB
	setup Setup
	extra []string
	port  int
	dir   string
	cmd   *exec.Cmd
	// Admin is a go-redis client of the all-powerful user, for set-up and checks.
	Admin *redis.Client
}

// Start starts a server of the flavor under test, stopped at the test's end.
func Start(t testing.TB, s Setup) *Server {
	t.Helper()
	srv := &Server{t: t, setup: s, port: FreePort(t), dir: t.TempDir()}
	srv.launch()
	t.Cleanup(srv.stop)
	return srv
}

func (s *Server) args() []string {
	args := append([]string{}, s.extra...)
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--save", "", "--appendonly", "no",
		"--enable-debug-command", "yes", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "server.log"))
	if s.setup == Module {
		return append(args, "--loadmodule", modulePath(s.t))
	}
	args = append(args, "--user", "default", "on", "nopass", "~*", "&*", "+@all", "-module", "-config", "-debug")
	switch s.setup {
	case NoFunction:
		args = append(args, "-function")
	case NoScripts:
		args = append(args, "-function", "-script", "-evalsha", "-eval")
	}
	return append(args, "--user", AdminUser, "on", ">"+AdminPassword, "~*", "&*", "+@all")
}

// launch starts the process and waits until it answers PING.
func (s *Server) launch() {
	t := s.t
	t.Helper()
	if s.setup == Module {
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
	opt := &redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 10 * time.Second}
	if s.setup != Module {
		opt.Username, opt.Password = AdminUser, AdminPassword
	}
	s.Admin = redis.NewClient(opt)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Fatalf("%s exited on port %d:\n%s", serverBinary(t), s.port, tail(string(log), 2000))
		default:
		}
		if s.Admin.Ping(context.Background()).Err() == nil {
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

// StartCluster starts a cluster of n primaries (slots spread by redis-cli --cluster create),
// each with its bus on a port of the test range too, and waits until every node reports
// cluster_state:ok.
func StartCluster(t testing.TB, s Setup, n int) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	addrs := make([]string, n)
	for i := range nodes {
		srv := &Server{t: t, setup: s, port: FreePort(t), dir: t.TempDir()}
		srv.extra = []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(FreePort(t)),
			"--cluster-config-file", filepath.Join(srv.dir, "nodes.conf")}
		srv.launch()
		t.Cleanup(srv.stop)
		nodes[i], addrs[i] = srv, srv.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-yes")
	if s != Module {
		args = append([]string{"--user", AdminUser, "--pass", AdminPassword, "--no-auth-warning"}, args...)
	}
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range nodes {
		for {
			info, _ := node.Admin.ClusterInfo(context.Background()).Result()
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

// Addr is the server's host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Client is a go-redis client as the package's docs tell users to make one.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Signal sends sig to the process (SIGSTOP, SIGCONT).
func (s *Server) Signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Kill stops the process with SIGKILL and waits for its port to refuse.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", s.Addr(), 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if s.Admin != nil {
		s.Admin.Close()
		s.Admin = nil
	}
}

// RestartWithoutModule kills the server and starts it again on the same port without the
// module and without data, as a managed service: a module server that lost its module.
func (s *Server) RestartWithoutModule() {
	s.Kill()
	s.setup = Managed
	s.dir = s.t.TempDir()
	s.launch()
}

func (s *Server) stop() {
	s.Kill()
}
