package transporttest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
	"example.invalid/fencedlock/go/internal/contract"
)

// replyCase is a request to a module server ("module") or a server with the library loaded
// ("library"), sent twice (on an exact connection, then through the transport): each is
// written to reply the same both times, but for the time a lease has left (timed: integers
// may differ by up to a second).
type replyCase struct {
	on    string
	args  []string
	timed bool
}

// replyCases cover every reply shape the package reads (fences, nil, 0/1, STATUS of a lock and
// of a semaphore, error replies of each kind it classifies, COMMAND INFO, FUNCTION LIST …
// WITHCODE, TIME) and those RESP3 adds (maps, sets, booleans, doubles), which the transport
// must give in their RESP2 reading.
var replyCases = []replyCase{
	{"module", []string{"FENCEDLOCK.ACQUIRE", "replies:lock", "token-a", "10000", "LABEL", "worker 1"}, false},
	{"module", []string{"FENCEDLOCK.ACQUIRE", "replies:lock", "token-b", "10000"}, false},
	{"module", []string{"FENCEDLOCK.STATUS", "replies:lock"}, true},
	{"module", []string{"FENCEDLOCK.ACQUIRE", "replies:sem", "token-a", "10000", "PERMITS", "3"}, false},
	{"module", []string{"FENCEDLOCK.STATUS", "replies:sem"}, true},
	{"module", []string{"FENCEDLOCK.STATUS", "replies:none"}, false},
	{"module", []string{"FENCEDLOCK.RENEW", "replies:lock", "token-b", "10000"}, false},
	{"module", []string{"FENCEDLOCK.RELEASE", "replies:lock", "token-z"}, false},
	{"module", []string{"FENCEDLOCK.ACQUIRE", "replies:lock", "token-a", "many"}, false},
	{"module", []string{"FENCEDLOCK.NOSUCH", "replies:lock"}, false},
	{"module", []string{"FENCEDLOCK.ACQUIRE", "replies:hash", "token-a", "10000"}, false},
	{"module", []string{"COMMAND", "INFO", "FENCEDLOCK.ACQUIRE", "FENCEDLOCK.NOSUCH"}, false},
	{"module", []string{"EVAL", "return true", "0"}, false},
	{"module", []string{"EVAL", "return false", "0"}, false},
	{"module", []string{"EVAL", "return redis.status_reply('FINE')", "0"}, false},
	{"module", []string{"EVAL", "return {1, 'two', {3}, false}", "0"}, false},
	{"module", []string{"EVAL", "return redis.error_reply('NOSCRIPT gone')", "0"}, false},
	{"module", []string{"EVAL", "redis.setresp(3); return {double = 3.5}", "0"}, false},
	{"module", []string{"EVAL", "redis.setresp(3); return {map = {a = 1}}", "0"}, false},
	{"module", []string{"EVAL", "redis.setresp(3); return {big_number = '123456789012345678901234567890'}", "0"}, false},
	{"module", []string{"EVAL", "redis.setresp(3); return redis.call('SMEMBERS', KEYS[1])", "1", "replies:set"}, false},
	{"library", []string{"FCALL", "fencedlock_version", "0"}, false},
	{"library", []string{"FUNCTION", "LIST", "LIBRARYNAME", "fencedlock", "WITHCODE"}, false},
	{"library", []string{"FCALL", "nosuchfunction", "0"}, false},
}

// RunReplies sends every reply case through a transport of dial and through an exact RESP2
// connection, and checks that the transport's reply is the RESP2 reply in the Transport's
// terms (fencedlock.Transport): strings of every kind a string, integers int64, nil, arrays
// []any, error replies *fencedlock.ReplyError with the server's whole text, a RESP3 map the
// same pairs as a map[string]any.
func RunReplies(t *testing.T, dial Dial) {
	c, err := contract.Parse(contract.JSON)
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*fencedlocktest.Server{
		"module":  fencedlocktest.Start(t, fencedlocktest.Module),
		"library": fencedlocktest.Start(t, fencedlocktest.Managed),
	}
	ctx := context.Background()
	if err := servers["library"].Admin.Do(ctx, "FUNCTION", "LOAD", "REPLACE", contract.Library).Err(); err != nil {
		t.Fatal(err)
	}
	if err := servers["module"].Admin.Do(ctx, "HSET", "replies:hash", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := servers["module"].Admin.Do(ctx, "SADD", "replies:set", "x").Err(); err != nil {
		t.Fatal(err)
	}
	transports := map[string]fencedlock.Transport{}
	exact := map[string]*fencedlocktest.RESPConn{}
	for name, srv := range servers {
		transports[name] = dial(t, srv.Addr())
		conn, err := fencedlocktest.DialRESP(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		exact[name] = conn
	}
	for i, rc := range replyCases {
		args := rc.args
		if args[0] == "FCALL" && args[1] == "fencedlock_version" {
			args = []string{"FCALL", c.Library.VersionFunction, "0"}
		}
		// The same request on both connections: the exact one first, then the transport.
		words := make([][]byte, len(args))
		anys := make([]any, len(args))
		for j, a := range args {
			words[j], anys[j] = []byte(a), a
		}
		want, err := exact[rc.on].Send(words)
		if err != nil {
			t.Fatalf("case %d %q: %v", i, args, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, gerr := transports[rc.on].Do(rctx, fencedlock.NewCommand(anys...))
		cancel()
		if want.Kind == fencedlocktest.ErrorReply {
			var re *fencedlock.ReplyError
			if !errors.As(gerr, &re) || re.Reply != string(want.Str) {
				t.Errorf("case %d %q: the server replied the error %q; the transport gave %v, %v", i, args, want.Str, got, gerr)
			}
			continue
		}
		if gerr != nil {
			t.Errorf("case %d %q: the server replied %v; the transport failed: %v", i, args, decoded(want), gerr)
			continue
		}
		if !sameReply(got, decoded(want), rc.timed) {
			t.Errorf("case %d %q:\n  RESP2 reply     %#v\n  transport reply %#v", i, args, decoded(want), got)
		}
	}
}

// decoded is an exact RESP2 reply in the Transport's terms.
func decoded(r fencedlocktest.Reply) any {
	switch r.Kind {
	case fencedlocktest.Nil:
		return nil
	case fencedlocktest.Int:
		return r.Int
	case fencedlocktest.Bulk, fencedlocktest.Simple:
		return string(r.Str)
	case fencedlocktest.Array:
		out := make([]any, len(r.Items))
		for i, item := range r.Items {
			out[i] = decoded(item)
		}
		return out
	}
	return fmt.Sprintf("(error) %s", r.Str)
}

// sameReply compares a transport's reply with a RESP2 one: a map of the transport's is the
// RESP2 reply's key/value pairs; timed, integers within a second are the same.
func sameReply(got, want any, timed bool) bool {
	switch g := got.(type) {
	case map[string]any:
		w, ok := want.([]any)
		if !ok || len(w) != 2*len(g) {
			return false
		}
		for i := 0; i < len(w); i += 2 {
			k, ok := w[i].(string)
			if !ok {
				return false
			}
			v, ok := g[k]
			if !ok || !sameReply(v, w[i+1], timed) {
				return false
			}
		}
		return true
	case []any:
		w, ok := want.([]any)
		if !ok || len(w) != len(g) {
			return false
		}
		for i := range g {
			if !sameReply(g[i], w[i], timed) {
				return false
			}
		}
		return true
	case int64:
		if w, ok := want.(int64); ok && timed {
			return g-w >= -1000 && g-w <= 1000
		}
	}
	return reflect.DeepEqual(got, want)
}
