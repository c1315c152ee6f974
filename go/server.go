package fencedlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"example.invalid/fencedlock/go/internal/contract"
)

// server is one Redis server (or one cluster, routed by key) as a locker talks to it: its
// transport, the per-request timeout and the engine detected on it.
type server struct {
	t       Transport
	timeout time.Duration

	mu     sync.Mutex
	engine engine
	// acquireAll is whether the module serves ACQUIREALL: 0 not asked yet, 1 yes, -1 no.
	acquireAll int
}

// isCluster says whether the client routes by slot (keys of several slots are on several
// nodes).
func (s *server) isCluster() bool { return s.t.Cluster() }

// moduleServesAcquireAll says whether the module on the server knows ACQUIREALL (COMMAND
// INFO, asked once); false when the server will not say.
func (s *server) moduleServesAcquireAll(ctx context.Context) (bool, error) {
	s.mu.Lock()
	known := s.acquireAll
	s.mu.Unlock()
	if known != 0 {
		return known > 0, nil
	}
	info, err := s.do(ctx, "COMMAND", "INFO", cmdAcquireAll)
	if err != nil && !answered(err) {
		return false, err
	}
	serves := err == nil && anyEntry(info)
	s.mu.Lock()
	s.acquireAll = -1
	if serves {
		s.acquireAll = 1
	}
	s.mu.Unlock()
	return serves, nil
}

func newServer(t Transport, timeout time.Duration) *server {
	return &server{t: t, timeout: timeout}
}

// name is the server's address for error messages.
func (s *server) name() string { return s.t.Addr() }

// bounded runs f, returning its result, or errTimedOut once ctx ends first. Where ctx can
// end only at its deadline (the caller's parent cannot be cancelled) and the transport gives
// up at a deadline itself (go-redis with ContextTimeoutEnabled; see honoursDeadline), f runs
// on the caller's goroutine. Otherwise it is raced by a goroutine against ctx, the request
// not cancelled (transports notice a deadline, not a cancellation, while they read): its
// reply is left to arrive and be dropped. A deadline of the caller's own ctx is the caller's
// error, not a timeout of the server.
func bounded(parent, ctx context.Context, honours bool, f func(context.Context) (any, error)) (any, error) {
	var v any
	var err error
	if honours && parent.Done() == nil {
		v, err = f(ctx)
	} else {
		type result struct {
			v   any
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := f(ctx)
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			v, err = r.v, r.err
		case <-ctx.Done():
			select {
			case r := <-done:
				v, err = r.v, r.err
			default:
				return nil, deadlineError(parent)
			}
		}
	}
	// A socket deadline fires a moment before the context's own timer: no answer by the
	// deadline is the deadline's error, not the server's.
	if err != nil && !answered(err) && pastDeadline(ctx) {
		return nil, deadlineError(parent)
	}
	return v, err
}

// pastDeadline says whether ctx's deadline has passed by the clock, whether or not its timer
// has fired yet.
func pastDeadline(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// deadlineError is what a request that ran out of time failed with: the caller's own
// context's end (waited for where its deadline passed and its timer has yet to fire), else
// the request timeout.
func deadlineError(parent context.Context) error {
	if pastDeadline(parent) {
		<-parent.Done()
	}
	if parent.Err() != nil {
		return context.Cause(parent)
	}
	return errTimedOut
}

// honoursDeadline says whether c returns by its context's deadline on its own (a Conn with
// HonoursDeadline() true), so that the package need not race a goroutine of its own per
// request against the deadline (it cost a Go lease 40-60 µs: docs/performance.md, "The Go
// client").
func honoursDeadline(c Conn) bool {
	d, ok := c.(interface{ HonoursDeadline() bool })
	return ok && d.HonoursDeadline()
}

// do sends one request on the transport, bounded by the request timeout.
func (s *server) do(ctx context.Context, args ...any) (any, error) {
	return s.doOn(ctx, s.t, s.timeout, args...)
}

func (s *server) doOn(ctx context.Context, c Conn, timeout time.Duration, args ...any) (any, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return bounded(ctx, tctx, honoursDeadline(c), func(ctx context.Context) (any, error) {
		return c.Do(ctx, commandOf(args))
	})
}

// call sends a lease request in the engine's form on the transport (see callOn).
func (s *server) call(ctx context.Context, args ...any) (any, error) {
	return s.callOn(ctx, s.t, s.timeout, args...)
}

// callOn sends a lease request on c within timeout, loading the script or the library again
// where the server lost it (a restart, SCRIPT FLUSH, FUNCTION FLUSH) and asking once more.
func (s *server) callOn(ctx context.Context, c Conn, timeout time.Duration, args ...any) (any, error) {
	v, err := s.doOn(ctx, c, timeout, args...)
	if reload := lostLoad(err); reload != nil {
		if _, lerr := s.everywhere(ctx, reload...); lerr != nil {
			return nil, lerr
		}
		return s.doOn(ctx, c, timeout, args...)
	}
	return v, err
}

// lostLoad is the load that cures err: the script after NOSCRIPT, the library after
// "Function not found".
func lostLoad(err error) []any {
	reply, ok := replyError(err)
	if !ok {
		return nil
	}
	if strings.HasPrefix(reply, "NOSCRIPT") {
		return []any{"SCRIPT", "LOAD", proto.script}
	}
	if strings.HasPrefix(reply, "ERR Function not found") {
		return []any{"FUNCTION", "LOAD", "REPLACE", contract.Library}
	}
	return nil
}

// everywhere sends a load to every primary: one server, or each master of a cluster.
func (s *server) everywhere(ctx context.Context, args ...any) (any, error) {
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return bounded(ctx, tctx, false, func(ctx context.Context) (any, error) {
		return nil, s.t.Primaries(ctx, commandOf(args))
	})
}

// detect is the engine the server serves leases with, asked once (a failed detection is
// asked again next time): the module where the server knows FENCEDLOCK.ACQUIRE, else the
// Functions library (loaded where missing or older), else the library as a script where
// FUNCTION is denied.
func (s *server) detect(ctx context.Context) (engine, error) {
	s.mu.Lock()
	e := s.engine
	s.mu.Unlock()
	if e != engineUnknown {
		return e, nil
	}
	e, err := s.detectNow(ctx)
	if err != nil {
		return engineUnknown, err
	}
	s.mu.Lock()
	s.engine = e
	s.mu.Unlock()
	return e, nil
}

func (s *server) detectNow(ctx context.Context) (engine, error) {
	var module bool
	info, err := s.do(ctx, "COMMAND", "INFO", cmdAcquire)
	switch {
	case err == nil:
		module = anyEntry(info)
	case answered(err):
		// A server that hides COMMAND runs the module unless it has the library.
		version, verr := s.libraryVersion(ctx)
		if verr != nil {
			return engineUnknown, verr
		}
		module = version < 0
	default:
		return engineUnknown, err
	}
	if module {
		return engineModule, nil
	}
	ferr := s.loadLibrary(ctx)
	if ferr == nil {
		return engineFunctions, nil
	}
	if !answered(ferr) {
		return engineUnknown, ferr
	}
	if _, serr := s.everywhere(ctx, "SCRIPT", "LOAD", proto.script); serr != nil {
		if !answered(serr) {
			return engineUnknown, serr
		}
		reply, _ := replyError(serr)
		return engineUnknown, &Error{Kind: KindNoEngine, Cause: "NoEngine", Server: s.name(), Reply: reply, Err: errors.New(
			"the fencedlock module is not loaded and the Functions library could not be loaded: load the module, " +
				"have an administrator FUNCTION LOAD the library, or allow this user FUNCTION LOAD or SCRIPT LOAD and EVALSHA")}
	}
	return engineScript, nil
}

// anyEntry says whether a COMMAND INFO reply describes a command (unknown ones are nil).
func anyEntry(reply any) bool {
	list, ok := reply.([]any)
	if !ok {
		return false
	}
	for _, e := range list {
		if e != nil {
			return true
		}
	}
	return false
}

// libraryVersion is the server's library version, -1 when it has none.
func (s *server) libraryVersion(ctx context.Context) (int64, error) {
	v, err := s.do(ctx, "FCALL_RO", proto.c.Library.VersionFunction, "0")
	if err != nil {
		if answered(err) {
			return -1, nil
		}
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return -1, nil
	}
	return n, nil
}

// loadLibrary loads the embedded library unless the server has it or a newer one. A library
// of this version whose code differs (changed without a version raise) is replaced too.
func (s *server) loadLibrary(ctx context.Context) error {
	version, err := s.libraryVersion(ctx)
	if err != nil {
		return err
	}
	ours := int64(proto.c.Library.Version)
	if version > ours {
		return nil
	}
	if version == ours {
		differs, err := s.libraryDiffers(ctx)
		if err != nil {
			return err
		}
		if !differs {
			return nil
		}
	}
	_, err = s.everywhere(ctx, "FUNCTION", "LOAD", "REPLACE", contract.Library)
	return err
}

// libraryDiffers says whether the server's library code is other than the embedded one;
// false when the server will not say (an ACL that denies FUNCTION LIST).
func (s *server) libraryDiffers(ctx context.Context) (bool, error) {
	v, err := s.do(ctx, "FUNCTION", "LIST", "LIBRARYNAME", proto.c.Library.Name, "WITHCODE")
	if err != nil {
		if answered(err) {
			return false, nil
		}
		return false, err
	}
	code, ok := libraryCode(v)
	return !ok || code != contract.Library, nil
}

// libraryCode is the library_code of the first library of a FUNCTION LIST … WITHCODE reply
// (a map in RESP3, a flat field/value list in RESP2).
func libraryCode(reply any) (string, bool) {
	list, ok := reply.([]any)
	if !ok || len(list) == 0 {
		return "", false
	}
	switch lib := list[0].(type) {
	case map[any]any:
		code, ok := lib["library_code"].(string)
		return code, ok
	case map[string]any:
		code, ok := lib["library_code"].(string)
		return code, ok
	case []any:
		for i := 0; i+1 < len(lib); i += 2 {
			if name, _ := lib[i].(string); name == "library_code" {
				code, ok := lib[i+1].(string)
				return code, ok
			}
		}
	}
	return "", false
}

// waiter is a connection to the node serving key for blocking requests (Transport.Blocking);
// nil where the transport has none: a wait then polls.
func (s *server) waiter(ctx context.Context, key []byte) (Conn, error) {
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.t.Blocking(tctx, string(key))
}

// close closes what the transport opened itself.
func (s *server) close() error { return s.t.Close() }
