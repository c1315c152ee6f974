// Package adapter is the fencedlock.Transport of the rueidis and valkey-go adapters
// (example.invalid/fencedlock/go/rueidis and …/valkeygo), written once over the two libraries'
// types as type parameters: valkey-go is a fork of rueidis, and its client, command, result and
// message types have the same methods under other names (rueidis.RedisMessage,
// valkey.ValkeyMessage, …). What generics cannot reach, each adapter passes in: building a
// command (the builders' Arbitrary and Completed types come from each library's internal
// package: Build reaches them only by inference from the client's B().Arbitrary), the type
// arguments, and the constructors' signatures (each takes its library's Client).
// It imports neither library, so the root module's dependencies stay go-redis alone.
package adapter

import (
	"context"
	"errors"
	"strings"

	fencedlock "example.invalid/fencedlock/go"
)

// Message is what a reply message of either library offers (its methods have pointer
// receivers, hence *M).
type Message[M any] interface {
	*M
	IsNil() bool
	IsInt64() bool
	IsBool() bool
	IsArray() bool
	IsMap() bool
	Error() error
	ToInt64() (int64, error)
	AsBool() (bool, error)
	ToString() (string, error)
	ToArray() ([]M, error)
	AsMap() (map[string]M, error)
}

// Result is a library's result of one request: its message, and the error of a failed
// request or of an error reply.
type Result[M any] interface {
	ToMessage() (M, error)
}

// Doer is what the adapter sends requests with: a library's client (rueidis.Client,
// valkey.Client), its commands C and results R.
type Doer[C, R any] interface {
	Do(ctx context.Context, c C) R
	DoMulti(ctx context.Context, cs ...C) []R
}

// Arbitrary is a library's builder of an arbitrary command (the type its client's
// B().Arbitrary returns, which lives in the library's internal package: it is only ever
// inferred, never named).
type Arbitrary[A, C any] interface {
	Args(args ...string) A
	Keys(keys ...string) A
	Build() C
	Blocking() C
}

// Build is cmd built with the library's arbitrary builder start: the key at cmd.Key given as
// the routing key (a cluster client's slot), marked blocking (sent on the library's pool of
// dedicated connections, with no read deadline but the context) when asked.
func Build[C any, A Arbitrary[A, C]](start func(token ...string) A, cmd fencedlock.Command, blocking bool) C {
	words := cmd.Strings()
	b := start(words[0])
	if cmd.Key > 0 {
		b = b.Args(words[1:cmd.Key]...).Keys(words[cmd.Key]).Args(words[cmd.Key+1:]...)
	} else {
		b = b.Args(words[1:]...)
	}
	if blocking {
		return b.Blocking()
	}
	return b.Build()
}

// Node is a library's client (rueidis.Client, valkey.Client): it sends requests, and names
// its nodes, each a client of the same type (one for a client to one server).
type Node[T, C, R any] interface {
	Doer[C, R]
	Nodes() map[string]T
}

// Transport is the fencedlock.Transport over one library's client: to one server, or to a
// cluster (the client routes each request by the slot of the key Build marked). The libraries
// honour a request's context on the socket and retry only requests marked read-only, which the
// adapter never marks: a request is never sent twice (a cluster's MOVED or ASK is resent by
// the client, which is safe: the node refused it).
type Transport[C any, R Result[M], M any, P Message[M], T Node[T, C, R]] struct {
	client  T
	cluster bool
	command func(cmd fencedlock.Command, blocking bool) C
}

// New is the transport over client (name is the adapter's, for errors; cluster whether the
// client is a cluster client; command builds a request with Build and the client's
// B().Arbitrary), or an error for no client.
func New[C any, R Result[M], M any, P Message[M], T Node[T, C, R]](name string, client T, cluster bool, command func(cmd fencedlock.Command, blocking bool) C) (fencedlock.Transport, error) {
	if any(client) == nil {
		return nil, errors.New(name + ": a nil client")
	}
	return &Transport[C, R, M, P, T]{client: client, cluster: cluster, command: command}, nil
}

// NewLocker is a locker over the transport newT makes of client.
func NewLocker[T any](newT func(T) (fencedlock.Transport, error), client T, opts []fencedlock.Option) (*fencedlock.Locker, error) {
	t, err := newT(client)
	if err != nil {
		return nil, err
	}
	return fencedlock.NewLockerOver(t, opts...)
}

// NewRedlock is a Redlock over the transports newT makes of clients.
func NewRedlock[T any](newT func(T) (fencedlock.Transport, error), clients []T, opts []fencedlock.Option) (*fencedlock.Redlock, error) {
	transports := make([]fencedlock.Transport, len(clients))
	for i, c := range clients {
		t, err := newT(c)
		if err != nil {
			return nil, err
		}
		transports[i] = t
	}
	return fencedlock.NewRedlockOver(transports, opts...)
}

// Do sends cmd.
func (t *Transport[C, R, M, P, T]) Do(ctx context.Context, cmd fencedlock.Command) (any, error) {
	return Reply[M, P](t.client.Do(ctx, t.command(cmd, false)).ToMessage())
}

// HonoursDeadline is true: both libraries return by a request's context deadline themselves (a
// pipelined request stops waiting for its reply, a request on a connection of its own has the
// deadline on the socket), so the package sends on the caller's goroutine (fencedlock.Conn).
func (t *Transport[C, R, M, P, T]) HonoursDeadline() bool { return true }

// Pipeline sends cmds in one DoMulti.
func (t *Transport[C, R, M, P, T]) Pipeline(ctx context.Context, cmds []fencedlock.Command) ([]any, error) {
	built := make([]C, len(cmds))
	for i, cmd := range cmds {
		built[i] = t.command(cmd, false)
	}
	results := t.client.DoMulti(ctx, built...)
	out := make([]any, len(results))
	for i, r := range results {
		v, err := Reply[M, P](r.ToMessage())
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Primaries sends cmd to the one server, or to every node of a cluster: a replica's READONLY
// refusal (of FUNCTION LOAD) is no failure, it has the load by replication from its primary.
func (t *Transport[C, R, M, P, T]) Primaries(ctx context.Context, cmd fencedlock.Command) error {
	if !t.cluster {
		_, err := t.Do(ctx, cmd)
		return err
	}
	for _, node := range t.client.Nodes() {
		_, err := Reply[M, P](node.Do(ctx, t.command(fencedlock.Command{Args: cmd.Args, Key: -1}, false)).ToMessage())
		var re *fencedlock.ReplyError
		if errors.As(err, &re) && strings.HasPrefix(re.Reply, "READONLY") {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Blocking is the client itself with requests marked blocking: the library sends them on a
// connection of its pool of dedicated ones, with no read deadline but the request's context.
func (t *Transport[C, R, M, P, T]) Blocking(context.Context, string) (fencedlock.Conn, error) {
	return blocking[C, R, M, P, T]{t}, nil
}

type blocking[C any, R Result[M], M any, P Message[M], T Node[T, C, R]] struct{ t *Transport[C, R, M, P, T] }

// HonoursDeadline is true (see Transport.HonoursDeadline).
func (b blocking[C, R, M, P, T]) HonoursDeadline() bool { return true }

func (b blocking[C, R, M, P, T]) Do(ctx context.Context, cmd fencedlock.Command) (any, error) {
	return Reply[M, P](b.t.client.Do(ctx, b.t.command(cmd, true)).ToMessage())
}

// Addr is the server's address, "" for a cluster.
func (t *Transport[C, R, M, P, T]) Addr() string {
	if t.cluster {
		return ""
	}
	for addr := range t.client.Nodes() {
		return addr
	}
	return ""
}

// Cluster says whether the client is a cluster client.
func (t *Transport[C, R, M, P, T]) Cluster() bool { return t.cluster }

// Close closes nothing: the dedicated connections are the library's pool, closed with the
// client (which is the user's).
func (t *Transport[C, R, M, P, T]) Close() error { return nil }

// Reply is a library's message (and the error it came with) in the Transport's terms: a nil
// reply nil, an error reply a *fencedlock.ReplyError with the server's whole text (the
// libraries' own error drops a leading "ERR ", which the package's classification reads), a
// boolean 1 or 0, a double or big number its text, an array or set []any, a map
// map[string]any. An error without an error message (a timeout, a closed connection) is no
// answer and is returned as is.
func Reply[M any, P Message[M]](m M, err error) (any, error) {
	p := P(&m)
	if err != nil {
		if p.Error() == nil {
			return nil, err
		}
		if p.IsNil() {
			return nil, nil
		}
		text, _ := p.ToString()
		return nil, &fencedlock.ReplyError{Reply: text, Err: err}
	}
	return value[M, P](p)
}

// value converts one message that is not an error reply.
func value[M any, P Message[M]](p P) (any, error) {
	switch {
	case p.IsNil():
		return nil, nil
	case p.IsInt64():
		return p.ToInt64()
	case p.IsBool():
		b, err := p.AsBool()
		if b {
			return int64(1), err
		}
		return int64(0), err
	case p.IsArray():
		items, err := p.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i := range items {
			if out[i], err = item[M, P](&items[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case p.IsMap():
		entries, err := p.AsMap()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, len(entries))
		for k, e := range entries {
			if out[k], err = item[M, P](&e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// Strings of every kind: bulk, simple, verbatim, and a double's or big number's text.
	return p.ToString()
}

// errNestedError is an error reply inside an array or map, which no request of the package
// gets.
var errNestedError = errors.New("an error reply inside a reply")

func item[M any, P Message[M]](m *M) (any, error) {
	p := P(m)
	if !p.IsNil() && p.Error() != nil {
		text, _ := p.ToString()
		return nil, &fencedlock.ReplyError{Reply: text, Err: errNestedError}
	}
	return value[M, P](p)
}
