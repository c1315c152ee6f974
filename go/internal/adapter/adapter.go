// Package adapter is the fencedlock.Transport of the rueidis and valkey-go adapters
// (example.invalid/fencedlock/go/rueidis and …/valkeygo), written once over the two libraries'
// types as type parameters: valkey-go is a fork of rueidis, and its client, command, result and
// message types have the same methods under other names (rueidis.RedisMessage,
// valkey.ValkeyMessage, …). What generics cannot reach, each adapter passes in: building a
// command (the builders' Arbitrary and Completed types come from each library's internal
// package, so no type parameter can name their methods) and its client's Do and DoMulti.
// It imports neither library, so the root module's dependencies stay go-redis alone.
package adapter

import (
	"context"
	"errors"

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

// Client is what the adapter needs of a library's client, as functions of its own types.
type Client[C any, R Result[M], M any] struct {
	// Command builds a request: its words, the key at cmd.Key marked as the routing key, and
	// marked blocking (sent on the library's pool of dedicated connections) when asked.
	Command func(cmd fencedlock.Command, blocking bool) C
	// Do sends one request, DoMulti several in one pipeline.
	Do      func(ctx context.Context, c C) R
	DoMulti func(ctx context.Context, cs ...C) []R
	// Addr is the server's address ("" for a cluster).
	Addr string
}

// Transport is the fencedlock.Transport over one library's client to one server. The libraries
// honour a request's context on the socket and retry only requests marked read-only, which
// the adapter never marks: a request is never sent twice.
type Transport[C any, R Result[M], M any, P Message[M]] struct {
	c Client[C, R, M]
}

// New is the transport over c.
func New[C any, R Result[M], M any, P Message[M]](c Client[C, R, M]) *Transport[C, R, M, P] {
	return &Transport[C, R, M, P]{c: c}
}

// Do sends cmd.
func (t *Transport[C, R, M, P]) Do(ctx context.Context, cmd fencedlock.Command) (any, error) {
	return Reply[M, P](t.c.Do(ctx, t.c.Command(cmd, false)).ToMessage())
}

// Pipeline sends cmds in one DoMulti.
func (t *Transport[C, R, M, P]) Pipeline(ctx context.Context, cmds []fencedlock.Command) ([]any, error) {
	built := make([]C, len(cmds))
	for i, cmd := range cmds {
		built[i] = t.c.Command(cmd, false)
	}
	results := t.c.DoMulti(ctx, built...)
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

// Primaries sends cmd to the one server.
func (t *Transport[C, R, M, P]) Primaries(ctx context.Context, cmd fencedlock.Command) error {
	_, err := t.Do(ctx, cmd)
	return err
}

// Blocking is the client itself with requests marked blocking: the library sends them on a
// connection of its pool of dedicated ones, with no read deadline but the request's context.
func (t *Transport[C, R, M, P]) Blocking(context.Context, string) (fencedlock.Conn, error) {
	return blocking[C, R, M, P]{t}, nil
}

type blocking[C any, R Result[M], M any, P Message[M]] struct{ t *Transport[C, R, M, P] }

func (b blocking[C, R, M, P]) Do(ctx context.Context, cmd fencedlock.Command) (any, error) {
	return Reply[M, P](b.t.c.Do(ctx, b.t.c.Command(cmd, true)).ToMessage())
}

// Addr is the server's address.
func (t *Transport[C, R, M, P]) Addr() string { return t.c.Addr }

// Cluster is false: the adapters serve one server (a cluster client is refused by New).
func (t *Transport[C, R, M, P]) Cluster() bool { return false }

// Close closes nothing: the dedicated connections are the library's pool, closed with the
// client (which is the user's).
func (t *Transport[C, R, M, P]) Close() error { return nil }

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
