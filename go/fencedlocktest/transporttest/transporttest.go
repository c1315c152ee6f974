// Package transporttest runs the shared corpora through a fencedlock.Transport, for the
// package's go-redis transport and the adapter modules (rueidis, valkey-go), against real
// servers started by fencedlocktest: the conformance cases (RunConformance), the client fault
// scenarios (RunFaults) and the conversion of replies into the Transport's terms, checked
// against an exact RESP2 connection (RunReplies).
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	fencedlock "example.invalid/fencedlock/go"
	"example.invalid/fencedlock/go/fencedlocktest"
	"example.invalid/fencedlock/go/internal/contract"
)

// Dial is a transport of the client under test to addr, as the server's default user; the
// client behind it is closed when t ends.
type Dial func(t testing.TB, addr string) fencedlock.Transport

// statusFunction is the library's function for STATUS (contract.json), for isFree.
var statusFunction = func() string {
	c, err := contract.Parse(contract.JSON)
	if err != nil {
		return ""
	}
	return c.Library.Functions["FENCEDLOCK.STATUS"]
}()

// newLocker is a locker over t, closed when the test ends.
func newLocker(tb testing.TB, t fencedlock.Transport, opts ...fencedlock.Option) *fencedlock.Locker {
	tb.Helper()
	l, err := fencedlock.NewLockerOver(t, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// sender sends the corpus's requests through a transport.
type sender struct{ t fencedlock.Transport }

func (s sender) Send(words [][]byte) (fencedlocktest.Reply, error) {
	args := make([]any, len(words))
	for i, w := range words {
		args[i] = w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return asReply(s.t.Do(ctx, fencedlock.NewCommand(args...)))
}

// asReply is a transport's decoded reply as the corpus runner compares replies: strings of
// every kind as bulk strings (the runner compares the module's and the library's replies, each
// read the same way), a map as its key/value pairs in key order.
func asReply(v any, err error) (fencedlocktest.Reply, error) {
	var re *fencedlock.ReplyError
	if errors.As(err, &re) {
		return fencedlocktest.Reply{Kind: fencedlocktest.ErrorReply, Str: []byte(re.Reply)}, nil
	}
	if err != nil {
		return fencedlocktest.Reply{}, err
	}
	switch v := v.(type) {
	case nil:
		return fencedlocktest.Reply{Kind: fencedlocktest.Nil}, nil
	case int64:
		return fencedlocktest.Reply{Kind: fencedlocktest.Int, Int: v}, nil
	case string:
		return fencedlocktest.Reply{Kind: fencedlocktest.Bulk, Str: []byte(v)}, nil
	case []any:
		out := fencedlocktest.Reply{Kind: fencedlocktest.Array, Items: make([]fencedlocktest.Reply, len(v))}
		for i, item := range v {
			if out.Items[i], err = asReply(item, nil); err != nil {
				return out, err
			}
		}
		return out, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := fencedlocktest.Reply{Kind: fencedlocktest.Array}
		for _, k := range keys {
			item, err := asReply(v[k], nil)
			if err != nil {
				return out, err
			}
			out.Items = append(out.Items, fencedlocktest.Reply{Kind: fencedlocktest.Bulk, Str: []byte(k)}, item)
		}
		return out, nil
	}
	return fencedlocktest.Reply{}, fmt.Errorf("a reply of type %T is outside the Transport's terms", v)
}

// RunConformance runs the conformance corpus (fencedlocktest.RunConformance) through
// transports of dial.
func RunConformance(t *testing.T, dial Dial) {
	fencedlocktest.RunConformance(t, fencedlocktest.Conformance{
		Dial: func(t *testing.T, addr string) fencedlocktest.Sender { return sender{dial(t, addr)} },
	})
}

// Run runs the conformance corpus, the client fault corpus (on RESP3 clients), the reply
// conversion (on RESP3 and RESP2 clients) and the cluster test through the transports newT
// makes of the clients newClient makes (to one server, or to a cluster's nodes), each a subtest
// of t; every client is closed when its test ends.
func Run[T interface{ Close() }](t *testing.T, newClient func(addrs []string, resp2 bool) (T, error), newT func(T) (fencedlock.Transport, error)) {
	open := func(t testing.TB, addrs []string, resp2 bool) fencedlock.Transport {
		t.Helper()
		c, err := newClient(addrs, resp2)
		if err != nil {
			t.Fatalf("a client to %v: %v", addrs, err)
		}
		t.Cleanup(c.Close)
		tr, err := newT(c)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	dial := func(resp2 bool) Dial {
		return func(t testing.TB, addr string) fencedlock.Transport { return open(t, []string{addr}, resp2) }
	}
	t.Run("conformance", func(t *testing.T) { RunConformance(t, dial(false)) })
	t.Run("faults", func(t *testing.T) { RunFaults(t, dial(false)) })
	t.Run("replies-resp3", func(t *testing.T) { RunReplies(t, dial(false)) })
	t.Run("replies-resp2", func(t *testing.T) { RunReplies(t, dial(true)) })
	t.Run("cluster", func(t *testing.T) {
		RunCluster(t, func(t testing.TB, addrs []string) fencedlock.Transport { return open(t, addrs, false) })
	})
}
