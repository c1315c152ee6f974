package fencedlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Transport is what a locker needs of a connection to one server (or one cluster): the
// package is written against it, NewLocker wraps a go-redis client in one, and the adapter
// modules example.invalid/fencedlock/go/rueidis and …/valkeygo make one of a rueidis or
// valkey-go client. NewLockerOver and NewRedlockOver take one directly.
//
// Every request is bounded by its context: the locker gives each a deadline (WithTimeout) and
// gives up on it at that deadline whether or not the transport returns, so a transport must
// not retry a request on its own after it may have reached the server (a second ACQUIRE could
// be granted unheard); the locker retries with a new token where that is safe.
//
// Replies are decoded as the RESP2 reading of the server's answer, whichever protocol the
// connection speaks: nil (a nil bulk string, nil array or RESP3 null), int64 (an integer; a
// RESP3 boolean as 1 or 0), string (a bulk, simple or verbatim string; a RESP3 double or big
// number as its text), []any (an array, set or push) and map[string]any (a RESP3 map, keyed
// by its keys' text). An error reply is returned as a *ReplyError, and only an error reply:
// it tells "the server answered no" (the request did nothing, the connection is in step)
// from "no answer" (a timeout, a refused or broken connection: the request may have been
// applied unheard), and the package decides on that difference.
type Transport interface {
	Conn
	// Pipeline sends cmds in one round trip where the client can (one pipeline per node) and
	// returns their replies in order, or the first error among them.
	Pipeline(ctx context.Context, cmds []Command) ([]any, error)
	// Primaries sends cmd to every primary: the server, or each master of a cluster (to load
	// the library or the script everywhere a key may live).
	Primaries(ctx context.Context, cmd Command) error
	// Blocking is a connection to the node serving key for requests that block on the server
	// (ACQUIRE … BLOCK, BLPOP): kept apart from the client's shared connections, bounded by
	// the request's context alone (no read timeout of its own) and never retried. nil, nil
	// where the transport has none to give: the locker's waits then poll.
	Blocking(ctx context.Context, key string) (Conn, error)
	// Addr is the server's address for error messages, "" where there is no one address (a
	// cluster); a Redlock refuses two transports of one address.
	Addr() string
	// Cluster says whether requests are routed by slot to several nodes (keys of several
	// slots are then never sent in one request).
	Cluster() bool
	// Close closes what the transport opened itself (its blocking connections); never the
	// client it was made from. Locker.Close calls it.
	Close() error
}

// Conn sends one request and returns its decoded reply (see Transport). A Conn (or
// Transport) that returns by its context's deadline on its own may say so with a method
// HonoursDeadline() bool: the package then sends on the caller's goroutine instead of racing
// one of its own against the deadline, which costs a few tens of µs per request.
type Conn interface {
	Do(ctx context.Context, cmd Command) (any, error)
}

// Command is one request: its words (each a string or a []byte) and the index of the key it
// is routed by in a cluster, -1 for a request about no key (COMMAND, FUNCTION, SCRIPT, TIME).
type Command struct {
	Args []any
	Key  int
}

// RoutingKey is the key the command is routed by, "" for none.
func (c Command) RoutingKey() string {
	if c.Key < 0 || c.Key >= len(c.Args) {
		return ""
	}
	return word(c.Args[c.Key])
}

// Strings is the command's words as strings, as most client libraries take them.
func (c Command) Strings() []string {
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = word(a)
	}
	return out
}

// word is a request word as a string: a string as is, a []byte's bytes, anything else as fmt
// prints it (the package sends only strings and byte slices).
func word(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case []byte:
		return string(a)
	case int64:
		return strconv.FormatInt(a, 10)
	}
	return fmt.Sprint(a)
}

// ReplyError is a server's error reply ("CODE detail"), as a Transport returns it: the server
// answered, so the request did nothing and the connection is in step. Err is the client
// library's own error for it, when it has one (errors.As finds it through Unwrap).
type ReplyError struct {
	Reply string
	Err   error
}

func (e *ReplyError) Error() string { return e.Reply }

// Unwrap is the client library's error.
func (e *ReplyError) Unwrap() error { return e.Err }

// commandOf is a request of the package with the index of its routing key: the key after the
// command name (the module's commands, BLPOP), after numkeys (ACQUIREALL; FCALL, EVALSHA and
// EVAL when they name a key), or none.
func commandOf(args []any) Command {
	cmd := Command{Args: args, Key: -1}
	if len(args) < 2 {
		return cmd
	}
	name := strings.ToUpper(word(args[0]))
	switch {
	case name == cmdAcquireAll:
		cmd.Key = keyAfterCount(args, 1)
	case strings.HasPrefix(name, "FENCEDLOCK."), name == "BLPOP":
		cmd.Key = 1
	case name == "FCALL", name == "FCALL_RO", name == "EVALSHA", name == "EVAL":
		cmd.Key = keyAfterCount(args, 2)
	}
	return cmd
}

// keyAfterCount is the index of the first key after the numkeys word at i, -1 when it is 0.
func keyAfterCount(args []any, i int) int {
	if n, err := strconv.Atoi(word(args[i])); err == nil && n > 0 && i+1 < len(args) {
		return i + 1
	}
	return -1
}

// NewCommand is a request of the package's kinds (its own commands, FCALL, EVALSHA, EVAL,
// BLPOP, or a keyless one) with its routing key found as the package finds it.
func NewCommand(args ...any) Command { return commandOf(args) }
