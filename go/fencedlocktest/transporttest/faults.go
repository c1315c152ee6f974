package transporttest

// The client failure contract as data (protocol/corpus/client-faults.json; how to read it:
// protocol/corpus/README.md), run through a Transport: every scenario, a one-server Locker
// ("single") or a Redlock over all its servers ("redlock"), on every engine it names, against real servers with real faults (SIGSTOP, a
// killed server whose port refuses, a server restarted without the module, DEL on an admin
// connection), through the transports of the client under test. The
// scenarios are read at run time; a step, outcome, engine or locker this runner does not know
// fails the run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
)

type scenario struct {
	Name      string                       `json:"name"`
	Servers   int                          `json:"servers"`
	Locker    string                       `json:"locker"`
	Engines   []string                     `json:"engines"`
	TTLMs     int64                        `json:"ttl_ms"`
	TimeoutMs int64                        `json:"timeout_ms"`
	Steps     []map[string]json.RawMessage `json:"steps"`
}

type faultCorpus struct {
	Schema    int               `json:"schema"`
	Outcomes  map[string]string `json:"outcomes"`
	Key       string            `json:"key"`
	Scenarios []scenario        `json:"scenarios"`
}

// outcomeOf is an acquisition's result in the corpus's words (README, "Outcomes").
func outcomeOf(lease *fencedlock.Lease, err error) string {
	switch {
	case err == nil && lease != nil:
		return "granted"
	case errors.Is(err, fencedlock.ErrNotAcquired):
		return "held"
	case errors.Is(err, fencedlock.ErrNoModule):
		return "no_module"
	case errors.Is(err, fencedlock.ErrUnavailable):
		return "unavailable"
	}
	return fmt.Sprintf("other (%v)", err)
}

// RunFaults runs every scenario of protocol/corpus/client-faults.json on every engine it names
// (each a parallel subtest of t), over transports of dial.
func RunFaults(t *testing.T, dial Dial) {
	var corpus faultCorpus
	fencedlocktest.ReadCorpus(t, "client-faults.json", &corpus)
	ran := 0
	for _, sc := range corpus.Scenarios {
		if sc.Locker != "single" && sc.Locker != "redlock" {
			t.Errorf("%s: unknown locker %q", sc.Name, sc.Locker)
			continue
		}
		for _, e := range sc.Engines {
			sc, e := sc, e
			ran++
			t.Run(sc.Name+"/"+e, func(t *testing.T) { t.Parallel(); runScenario(t, dial, corpus, sc, e) })
		}
	}
	t.Cleanup(func() {
		t.Logf("client fault corpus on %s: %d scenario runs (one per engine named; each its own subtest)", fencedlocktest.Flavor(), ran)
	})
}

// acquirer is a Locker or a Redlock, as a scenario uses it.
type acquirer interface {
	Acquire(ctx context.Context, key string, opts ...fencedlock.Option) (*fencedlock.Lease, error)
	Do(ctx context.Context, key string, fn func(ctx context.Context, lease *fencedlock.Lease) error, opts ...fencedlock.Option) error
}

func runScenario(t *testing.T, dial Dial, corpus faultCorpus, sc scenario, engineName string) {
	setups := map[string]fencedlocktest.Setup{"module": fencedlocktest.Module, "library": fencedlocktest.Managed}
	st, ok := setups[engineName]
	if !ok {
		t.Fatalf("unknown engine %q", engineName)
	}
	ctx := context.Background()
	key := corpus.Key
	servers := make([]*fencedlocktest.Server, sc.Servers)
	for i := range servers {
		servers[i] = fencedlocktest.Start(t, st)
	}
	defer func() {
		for _, s := range servers {
			s.Signal(syscall.SIGCONT)
		}
	}()
	settings := []fencedlock.Option{fencedlock.WithTTL(time.Duration(sc.TTLMs) * time.Millisecond), fencedlock.WithTimeout(time.Duration(sc.TimeoutMs) * time.Millisecond)}
	var locker acquirer
	if sc.Locker == "single" {
		locker = newLocker(t, dial(t, servers[0].Addr()), settings...)
	} else {
		transports := make([]fencedlock.Transport, len(servers))
		for i, s := range servers {
			transports[i] = dial(t, s.Addr())
		}
		r, err := fencedlock.NewRedlockOver(transports, settings...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		locker = r
	}
	var lost <-chan struct{}
	finish := make(chan struct{})
	kept := make(chan error, 1)
	defer func() {
		close(finish)
		if lost != nil {
			<-kept
		}
	}()
	indices := func(raw json.RawMessage, step string) []int {
		var is []int
		if err := json.Unmarshal(raw, &is); err != nil {
			t.Fatalf("%s: bad server indices %s", step, raw)
		}
		for _, i := range is {
			if i < 0 || i >= len(servers) {
				t.Fatalf("%s: server index %d of %d", step, i, len(servers))
			}
		}
		return is
	}
	ms := func(raw json.RawMessage, what string) time.Duration {
		if raw == nil {
			return 0
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
			t.Fatalf("%s must be a number of ms, got %s", what, raw)
		}
		return time.Duration(n) * time.Millisecond
	}
	known := map[string]bool{"hold": true, "warm": true, "stop": true, "resume": true, "after_ms": true, "kill": true, "restart_without_module": true,
		"del": true, "acquire": true, "expect": true, "within_ms": true, "not_before_ms": true, "lost": true, "free": true}
	for _, step := range sc.Steps {
		name, _ := json.Marshal(step)
		for f := range step {
			if !known[f] {
				t.Fatalf("unknown step field %s in %s", f, name)
			}
		}
		switch {
		case step["hold"] != nil:
			for _, i := range indices(step["hold"], "hold") {
				other := newLocker(t, dial(t, servers[i].Addr()), fencedlock.WithTTL(60*time.Second), fencedlock.WithTimeout(2*time.Second))
				if _, err := other.Acquire(ctx, key); err != nil {
					t.Fatalf("another owner takes the key on server %d: %v", i, err)
				}
			}
		case step["warm"] != nil:
			lease, err := locker.Acquire(ctx, "corpus:warm")
			if err != nil {
				t.Fatalf("the warm-up lease: %v", err)
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Fatalf("the warm-up release: %v", err)
			}
		case step["stop"] != nil:
			for _, i := range indices(step["stop"], "stop") {
				servers[i].Signal(syscall.SIGSTOP)
			}
		case step["resume"] != nil:
			targets := indices(step["resume"], "resume")
			resume := func() {
				for _, i := range targets {
					servers[i].Signal(syscall.SIGCONT)
				}
			}
			if after := ms(step["after_ms"], "after_ms"); after > 0 {
				timer := time.AfterFunc(after, resume)
				defer timer.Stop()
			} else {
				resume()
			}
		case step["kill"] != nil:
			for _, i := range indices(step["kill"], "kill") {
				servers[i].Kill()
			}
		case step["restart_without_module"] != nil:
			for _, i := range indices(step["restart_without_module"], "restart_without_module") {
				servers[i].RestartWithoutModule()
			}
		case step["del"] != nil:
			for _, i := range indices(step["del"], "del") {
				if err := servers[i].Admin.Del(ctx, key).Err(); err != nil {
					t.Fatalf("DEL on server %d: %v", i, err)
				}
			}
		case step["acquire"] != nil:
			var ask struct {
				WaitMs    *int64 `json:"wait_ms"`
				KeepAlive *bool  `json:"keep_alive"`
			}
			if err := json.Unmarshal(step["acquire"], &ask); err != nil {
				t.Fatalf("bad acquire in %s", name)
			}
			var wait time.Duration
			if ask.WaitMs != nil {
				wait = time.Duration(*ask.WaitMs) * time.Millisecond
			}
			var expect string
			if err := json.Unmarshal(step["expect"], &expect); err != nil || corpus.Outcomes[expect] == "" {
				t.Fatalf("unknown outcome in %s", name)
			}
			within := ms(step["within_ms"], "within_ms")
			notBefore := ms(step["not_before_ms"], "not_before_ms")
			started := time.Now()
			var lease *fencedlock.Lease
			var err error
			if ask.KeepAlive != nil && *ask.KeepAlive {
				// Do keeps the lease alive; its ctx is the loss signal.
				got := make(chan struct{})
				go func() {
					kept <- locker.Do(ctx, key, func(ctx context.Context, l *fencedlock.Lease) error {
						lease, lost = l, ctx.Done()
						close(got)
						select {
						case <-finish:
						case <-ctx.Done():
						}
						return nil
					}, fencedlock.WithWait(wait))
				}()
				select {
				case <-got:
				case err = <-kept:
					kept <- err
				}
			} else {
				lease, err = locker.Acquire(ctx, key, fencedlock.WithWait(wait))
			}
			took := time.Since(started)
			outcome := outcomeOf(lease, err)
			if lease != nil && lost == nil {
				lease.Release(ctx)
			}
			if outcome != expect {
				t.Fatalf("%s: expected %s, got %s after %v", name, expect, outcome, took)
			}
			if took > within || took < notBefore {
				t.Fatalf("%s: %s after %v, outside [%v, %v]", name, outcome, took, notBefore, within)
			}
		case step["lost"] != nil:
			within := ms(step["within_ms"], "within_ms")
			if lost == nil {
				t.Fatalf("%s: no kept lease to lose", name)
			}
			started := time.Now()
			select {
			case <-lost:
			case <-time.After(within + time.Second):
				t.Fatalf("%s: the loss was not signalled within %v", name, within+time.Second)
			}
			if took := time.Since(started); took > within {
				t.Fatalf("%s: the loss signalled after %v, beyond %v", name, took, within)
			}
		case step["free"] != nil:
			within := ms(step["within_ms"], "within_ms")
			targets := indices(step["free"], "free")
			started := time.Now()
			for {
				free := true
				for _, i := range targets {
					free = free && isFree(t, servers[i], engineName, key)
				}
				if free {
					break
				}
				if time.Since(started) > within {
					t.Fatalf("%s: still held after %v", name, within)
				}
				time.Sleep(50 * time.Millisecond)
			}
		default:
			t.Fatalf("unknown step %s", name)
		}
	}
}

// isFree reads on an admin connection whether nobody holds key (README, "free").
func isFree(t *testing.T, s *fencedlocktest.Server, engineName, key string) bool {
	args := []any{"FENCEDLOCK.STATUS", key}
	if engineName != "module" {
		args = []any{"FCALL", statusFunction, "1", key}
	}
	v, err := s.Admin.Do(context.Background(), args...).Result()
	if err != nil {
		if err.Error() == "redis: nil" {
			return true
		}
		t.Fatalf("STATUS: %v", err)
	}
	items, ok := v.([]any)
	if !ok || len(items) < 2 {
		t.Fatalf("STATUS replied %v", v)
	}
	held, _ := items[1].(int64)
	return held == 0
}
