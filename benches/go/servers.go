package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server this benchmark started on 127.0.0.1, and stops.
type redisServer struct {
	port int
	cmd  *exec.Cmd
	dir  string
}

// startServer starts a redis-server on the first free port from `from` (at most 100 tried),
// with the module when module is not "", without persistence, and waits (at most 5 s) until
// it answers PING.
func startServer(from int, module string) (*redisServer, error) {
	port, err := freePort(from)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencedlock-gobench-")
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if module != "" {
		args = append(args, "--loadmodule", module)
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	s := &redisServer{port: port, cmd: cmd, dir: dir}
	c := s.client()
	defer c.Close()
	for range 250 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on port %d did not answer: %w", port, err)
}

// client is a go-redis client to the server, set up as docs/go.md asks of a locker's client
// (ContextTimeoutEnabled), otherwise at go-redis's defaults. Every library gets one alike.
func (s *redisServer) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// freePort is the first port from `from` that nothing listens on (at most 100 tried); all of
// them below Linux's ephemeral range (32768).
func freePort(from int) (int, error) {
	for p := from; p < from+100; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port in %d..%d", from, from+99)
}

// loadAverage is the 1-minute load average (the machine is shared: every figure is recorded
// with it).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// cpuTime is the CPU time (user + system) this process has used: the benchmark's client side,
// since the servers are processes of their own.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandStats is INFO commandstats as command → microseconds per call (the server's own
// time: parsing, execution and reply, not the socket), for the commands called at least once
// since the last CONFIG RESETSTAT.
func commandStats(ctx context.Context, c *redis.Client) (map[string]commandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st commandStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.UsecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out, nil
}

type commandStat struct {
	Calls       int64   `json:"calls"`
	UsecPerCall float64 `json:"usec_per_call"`
}
