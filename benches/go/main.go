// Command go-locks measures the Go package against redsync and bsm/redislock, side by side in
// one run (issue 45), on two redis-servers it starts on 127.0.0.1:
//
//  1. one uncontended lease at a time (acquire + release) on a server with the module:
//     fencedlock, redsync (v4, its go-redis v9 pool), bsm/redislock, and the two raw commands
//     an unfenced lock needs (SET NX PX + the compare-and-delete EVALSHA) as the floor;
//  2. the same on a second server without the module (a managed service's case: the locker
//     finds no module and loads the Functions library itself);
//     both in alternating turns of 50 leases, the ratio being the median of per-round ratios
//     (the machine is shared and noisy), with this process's CPU time per lease and the
//     server's time per call (INFO commandstats);
//  3. a hot key: 32 goroutines each taking one key, holding it ~1 ms and giving it back, for a
//     fixed time: grants/s and the fewest grants any goroutine got, fencedlock waiting on the
//     module's queue and on the library's wake-up list against redsync at its defaults.
//
// Usage, from benches/go: go run . [-quick] [-out FILE.json] [-cpuprofile FILE]
// (FENCEDLOCK_MODULE names the module; default target/release/libfencedlock_module.so).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	fencedlock "example.invalid/fencedlock/go"
)

const holders = 32

type result struct {
	Redis          string            `json:"redis"`
	Go             string            `json:"go"`
	GOMAXPROCS     int               `json:"gomaxprocs"`
	Versions       map[string]string `json:"versions"`
	Rounds         int               `json:"rounds"`
	LeasesPerRound int               `json:"leases_per_round"`
	// Lease is the module's server, Managed the server without it (the Functions library).
	Lease   serverLeases `json:"lease"`
	Managed serverLeases `json:"managed"`

	HotSeconds float64              `json:"hot_seconds"`
	HotRounds  int                  `json:"hot_rounds"`
	Holders    int                  `json:"holders"`
	Hot        map[string]hotResult `json:"hot"`
	HotLoad    [2]float64           `json:"hot_load"`
	HoldMs     float64              `json:"hold_ms"`
	// LimitGrantsPerS is what one holder at a time allows: 1 / (the measured hold + one round
	// trip, half the raw lease).
	LimitGrantsPerS float64 `json:"limit_grants_per_s"`
}

type serverLeases struct {
	Rows map[string]leaseResult `json:"rows"`
	// ServerUsecPerCall is INFO commandstats over the measured rounds.
	ServerUsecPerCall map[string]commandStat `json:"server_usec_per_call"`
	// Load is the 1-minute load average before and after.
	Load [2]float64 `json:"load"`
}

func main() {
	quick := flag.Bool("quick", false, "a short run (3 rounds of 300 leases, 1 s contests)")
	out := flag.String("out", "", "write the results as JSON to this file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the lease rounds to this file")
	flag.Parse()
	if err := run(*quick, *out, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "go-locks:", err)
		os.Exit(1)
	}
}

func run(quick bool, out, cpuprofile string) error {
	rounds, leases, hotRoundsN, hotFor := 7, 1500, 3, 3*time.Second
	if quick {
		rounds, leases, hotRoundsN, hotFor = 3, 300, 2, time.Second
	}
	module, err := modulePath()
	if err != nil {
		return err
	}
	withModule, err := startServer(27900, module)
	if err != nil {
		return err
	}
	defer withModule.stop()
	bare, err := startServer(withModule.port+1, "")
	if err != nil {
		return err
	}
	defer bare.stop()

	ctx := context.Background()
	var clients []*redis.Client
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	client := func(s *redisServer) *redis.Client {
		c := s.client()
		clients = append(clients, c)
		return c
	}
	// Every library gets a client of its own, made alike.
	contenders := func(s *redisServer) ([]contender, error) {
		ours, closeOurs, err := fencedlockLease(client(s))
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeOurs)
		cs := []contender{ours, redsyncLease(client(s)), redislockLease(client(s)), rawLease(client(s))}
		if s == withModule {
			cs = append(cs, rawModuleLease(client(s)))
		}
		return cs, nil
	}

	res := result{
		Go: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), Versions: versions(),
		Rounds: rounds, LeasesPerRound: leases,
		HotSeconds: hotFor.Seconds(), HotRounds: hotRoundsN, Holders: holders,
	}
	admin := client(withModule)
	if info, err := admin.InfoMap(ctx, "server").Result(); err == nil {
		res.Redis = "Redis " + info["Server"]["redis_version"]
	}

	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	for _, side := range []struct {
		server *redisServer
		into   *serverLeases
		what   string
	}{{withModule, &res.Lease, "with the module"}, {bare, &res.Managed, "without the module"}} {
		cs, err := contenders(side.server)
		if err != nil {
			return err
		}
		if err := warm(ctx, cs); err != nil {
			return err
		}
		stats := client(side.server)
		if err := stats.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		side.into.Load[0] = loadAverage()
		if side.into.Rows, err = leaseRounds(ctx, cs, rounds, leases); err != nil {
			return fmt.Errorf("leases %s: %w", side.what, err)
		}
		side.into.Load[1] = loadAverage()
		if side.into.ServerUsecPerCall, err = commandStats(ctx, stats); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "go-locks: one lease at a time %s done\n", side.what)
	}
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}

	onModule, err := fencedlock.NewLocker(client(withModule))
	if err != nil {
		return err
	}
	closers = append(closers, onModule.Close)
	onLibrary, err := fencedlock.NewLocker(client(bare))
	if err != nil {
		return err
	}
	closers = append(closers, onLibrary.Close)
	takers := []taker{
		fencedlockTaker("fencedlock (waits on the module's queue)", onModule),
		fencedlockTaker("fencedlock, no module (woken through the library's wake-up list)", onLibrary),
		redsyncTaker(client(withModule)),
	}
	hold := measuredHold()
	res.HoldMs = float64(hold.Microseconds()) / 1000
	res.HotLoad[0] = loadAverage()
	res.Hot = hotRounds(takers, hotRoundsN, holders, hotFor)
	res.HotLoad[1] = loadAverage()
	rtt := res.Lease.Rows["raw SET NX PX + EVALSHA"].UsPerLease / 2 / 1000
	res.LimitGrantsPerS = 1000 / (res.HoldMs + rtt)

	printResult(&res)
	if out != "" {
		b, err := json.MarshalIndent(&res, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(out, append(b, '\n'), 0o644)
	}
	return nil
}

// warm takes 200 leases with each contender: connections, the script cache, the engine's
// detection and the library's load happen here, before anything is measured.
func warm(ctx context.Context, cs []contender) error {
	for _, c := range cs {
		for range 200 {
			if err := c.lease(ctx, "warm:"+c.name); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
	}
	return nil
}

// modulePath is FENCEDLOCK_MODULE, else target/release/libfencedlock_module.so of the
// repository this is run in.
func modulePath() (string, error) {
	if m := os.Getenv("FENCEDLOCK_MODULE"); m != "" {
		return m, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 10 {
		m := filepath.Join(dir, "target", "release", "libfencedlock_module.so")
		if _, err := os.Stat(m); err == nil {
			return m, nil
		}
		dir = filepath.Dir(dir)
	}
	return "", errors.New("the module was not found: build it (cargo build --release -p fencedlock-module) or set FENCEDLOCK_MODULE")
}

// versions are the incumbents' and go-redis's versions this binary was built with.
func versions() map[string]string {
	out := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9":
			out[d.Path] = d.Version
		}
	}
	return out
}

// clientCommands are the commands the libraries send (commandstats also counts the ones
// their scripts and functions call inside).
var clientCommands = map[string]bool{"FENCEDLOCK.ACQUIRE": true, "FENCEDLOCK.RELEASE": true, "fcall": true, "evalsha": true, "set": true}

func printResult(r *result) {
	for _, side := range []struct {
		title string
		s     serverLeases
	}{{"one lease (acquire + release), with the module", r.Lease}, {"one lease, without the module (the Functions library)", r.Managed}} {
		fmt.Printf("\n| %s, load %.1f–%.1f | µs per lease | client CPU µs | ÷ redsync | ÷ bsm/redislock |\n", side.title, side.s.Load[0], side.s.Load[1])
		fmt.Println("| --- | ---: | ---: | ---: | ---: |")
		for _, name := range sortedKeys(side.s.Rows) {
			row := side.s.Rows[name]
			fmt.Printf("| %s | %.0f | %.0f | %.2f× | %.2f× |\n", name, row.UsPerLease, row.ClientCPUUsPerLease, row.RatioToRedsync, row.RatioToRedislock)
		}
		fmt.Print("server µs per call:")
		for _, cmd := range sortedKeys(side.s.ServerUsecPerCall) {
			if st := side.s.ServerUsecPerCall[cmd]; clientCommands[cmd] {
				fmt.Printf(" %s %.1f (%d calls);", cmd, st.UsecPerCall, st.Calls)
			}
		}
		fmt.Println()
	}
	fmt.Printf("\n| hot key, %d goroutines holding ~1 ms, %.0f s × %d rounds, load %.1f–%.1f | grants/s | ÷ redsync | fewest grants of a goroutine | most | longest wait (ms) | errors |\n",
		r.Holders, r.HotSeconds, r.HotRounds, r.HotLoad[0], r.HotLoad[1])
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, name := range sortedKeys(r.Hot) {
		h := r.Hot[name]
		fmt.Printf("| %s | %.0f | %.2f× | %d | %d | %.0f | %d |\n", name, h.GrantsPerS, h.RatioToRedsync, h.Fewest, h.Most, h.LongestWaitMs, h.Errors)
	}
	fmt.Printf("\n(one holder at a time allows 1 / (%.2f ms hold + one round trip) ≈ %.0f grants/s)\n", r.HoldMs, r.LimitGrantsPerS)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
