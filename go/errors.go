package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
)

// Kind is what went wrong, in the terms of the failure contract (the Rust client's Cause,
// contract.json "causes"): what a caller decides on. Compare with errors.Is against the
// sentinel errors, or read (*Error).Kind after errors.As.
type Kind int

const (
	// KindOther: the server refused the request for a reason of no other kind.
	KindOther Kind = iota
	// KindNotAcquired: another owner holds the key (the service answered).
	KindNotAcquired
	// KindLeaseLost: the lease ended without a release: a renewal was refused or failed, or
	// its validity ran out.
	KindLeaseLost
	// KindUnavailable: the server did not answer (a timeout, a refused or broken connection)
	// or answered that it cannot serve now (LOADING, READONLY, …): whether the key is held is
	// unknown.
	KindUnavailable
	// KindNoQuorum: no majority of a Redlock's masters granted (see Votes).
	KindNoQuorum
	// KindInvalidArgument: the request was refused before it was sent, or by the server as a
	// bad request.
	KindInvalidArgument
	// KindNoEngine: the server has neither the module nor the library, and the library could
	// not be loaded.
	KindNoEngine
	// KindNoModule: a server the module was detected on no longer knows its commands (it was
	// restarted without it): neither held nor an outage; a fail-open policy must not run.
	KindNoModule
	// KindWrongType: the key holds a value of another type.
	KindWrongType
	// KindUpgradeRefused: the token holds the key SHARED and asked for it exclusively.
	KindUpgradeRefused
	// KindBadReply: the server replied something the contract does not allow.
	KindBadReply
)

var kindNames = [...]string{"other", "not acquired", "lease lost", "unavailable", "no quorum", "invalid argument", "no engine", "no module", "wrong type", "upgrade refused", "bad reply"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// The sentinel errors, one per Kind: errors.Is(err, ErrNotAcquired) tells a held key from
// every other outcome.
var (
	ErrOther           = errors.New("fencedlock: the server refused the request")
	ErrNotAcquired     = errors.New("fencedlock: not acquired: another owner holds the key")
	ErrLeaseLost       = errors.New("fencedlock: lease lost")
	ErrUnavailable     = errors.New("fencedlock: unavailable")
	ErrNoQuorum        = errors.New("fencedlock: no quorum")
	ErrInvalidArgument = errors.New("fencedlock: invalid argument")
	ErrNoEngine        = errors.New("fencedlock: no engine")
	ErrNoModule        = errors.New("fencedlock: the server does not serve the module's commands")
	ErrWrongType       = errors.New("fencedlock: the key holds another type")
	ErrUpgradeRefused  = errors.New("fencedlock: upgrade refused")
	ErrBadReply        = errors.New("fencedlock: bad reply")
)

var sentinels = [...]error{ErrOther, ErrNotAcquired, ErrLeaseLost, ErrUnavailable, ErrNoQuorum, ErrInvalidArgument, ErrNoEngine, ErrNoModule, ErrWrongType, ErrUpgradeRefused, ErrBadReply}

// Votes is how a Redlock's masters answered a round.
type Votes struct {
	Granted, Refused, Failed int
}

// Error is every error the package returns about a request: its Kind, the contract's cause
// (e.g. "TimedOut", "NotReady", "NoModule"), the server's error reply when it answered one
// (never showing the token), and the error it wraps.
type Error struct {
	Kind Kind
	// Cause is the contract's cause name (contract.json "causes"), "" where none applies.
	Cause string
	// Key is the lock key, when the error is about one.
	Key string
	// Server is the server's address, when known.
	Server string
	// Reply is the server's error reply (code and detail), "" when it did not answer one.
	Reply string
	// Votes is set for KindNoQuorum.
	Votes *Votes
	// Err is the underlying error, if any.
	Err error
	// held and outage say what a KindNoQuorum also is: a server refused (the key is held:
	// errors.Is ErrNotAcquired), or none refused and servers could not answer (errors.Is
	// ErrUnavailable).
	held, outage bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("fencedlock: ")
	b.WriteString(e.Kind.String())
	if e.Key != "" {
		fmt.Fprintf(&b, " (key %q)", e.Key)
	}
	if e.Server != "" {
		fmt.Fprintf(&b, " on %s", e.Server)
	}
	if e.Votes != nil {
		fmt.Fprintf(&b, " (granted %d, refused %d, failed %d)", e.Votes.Granted, e.Votes.Refused, e.Votes.Failed)
	}
	if e.Reply != "" {
		b.WriteString(": ")
		b.WriteString(e.Reply)
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is matches the sentinel of the error's Kind.
func (e *Error) Is(target error) bool {
	if e.held && target == ErrNotAcquired || e.outage && target == ErrUnavailable {
		return true
	}
	return int(e.Kind) < len(sentinels) && sentinels[e.Kind] == target
}

// Unwrap is the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Retryable says whether asking again may succeed (the contract's cause table).
func (e *Error) Retryable() bool {
	for _, c := range proto.c.Causes.Kinds {
		if c.Name == e.Cause {
			return c.Retryable
		}
	}
	return false
}

// invalid is a KindInvalidArgument error refused before anything was sent.
func invalid(format string, args ...any) error {
	return &Error{Kind: KindInvalidArgument, Err: fmt.Errorf(format, args...)}
}

// errTimedOut is a request that got no answer within its bound.
var errTimedOut = errors.New("no answer within the request timeout")

// replyError is the text of a server's error reply, if err is one.
func replyError(err error) (string, bool) {
	var re *ReplyError
	if errors.As(err, &re) {
		return re.Reply, true
	}
	return "", false
}

// answered says whether err is the server's answer (an error reply: the connection is in
// step and the request did nothing), not a failure to get one (after which the request may
// have been applied unheard).
func answered(err error) bool {
	_, ok := replyError(err)
	return ok
}

// splitReply splits an error reply at its first space into code and detail.
func splitReply(reply string) (code, detail string) {
	code, detail, _ = strings.Cut(reply, " ")
	return code, detail
}

// errorKind is the module's error kind (contract.json "errors") of a reply, "" for none: the
// kind whose code equals the reply's and whose prefix starts its detail (WRONGTYPE: the code
// alone).
func errorKind(reply string) string {
	code, detail := splitReply(reply)
	for _, k := range proto.c.Errors.Kinds {
		if k.Code != code {
			continue
		}
		if k.Code == "WRONGTYPE" || strings.HasPrefix(detail, k.Prefix) {
			return k.Name
		}
	}
	return ""
}

// causeOfReply is the contract's cause of an error reply: named by its code, or NoModule for
// an ERR whose detail starts with one of the cause's err_details; Other otherwise.
func causeOfReply(reply string) string {
	code, detail := splitReply(reply)
	for _, c := range proto.c.Causes.Kinds {
		for _, cc := range c.Codes {
			if cc == code {
				return c.Name
			}
		}
		for _, cc := range c.ClientCodes {
			if cc == code {
				return c.Name
			}
		}
		if code == "ERR" {
			for _, d := range c.ErrDetails {
				if strings.HasPrefix(detail, d) {
					return c.Name
				}
			}
		}
	}
	return "Other"
}

// isOutage says whether the contract counts the cause as an outage.
func isOutage(cause string) bool {
	for _, c := range proto.c.Causes.Kinds {
		if c.Name == cause {
			return c.Outage
		}
	}
	return false
}

// argsEcho is the part of an "unknown command" reply that echoes the request's arguments
// (the token among them): it never reaches an error message.
var argsEcho = regexp.MustCompile(`, with args beginning with: .*$`)

// classify makes err, a failed request to server about key, the package's *Error: an error
// reply by its code and prefix from the contract data, a failure to get one by what failed.
func classify(server, key string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	if reply, ok := replyError(err); ok {
		reply = argsEcho.ReplaceAllString(reply, ", with args beginning with: <redacted>")
		cause := causeOfReply(reply)
		e := &Error{Cause: cause, Key: key, Server: server, Reply: reply, Err: err}
		kind := errorKind(reply)
		switch {
		case cause == "NoModule":
			e.Kind = KindNoModule
		case cause == "NoEngine":
			e.Kind = KindNoEngine
		case kind == "WaitInterrupted":
			// An interrupted wait is an answer to ask again on, not an outage.
			e.Kind, e.Cause = KindOther, "NotReady"
		case isOutage(cause):
			e.Kind = KindUnavailable
		case kind == "WrongType":
			e.Kind = KindWrongType
		case kind == "UpgradeRefused":
			e.Kind = KindUpgradeRefused
		case kind != "" && badRequest(kind):
			e.Kind = KindInvalidArgument
		default:
			e.Kind = KindOther
		}
		return e
	}
	cause := "Unreachable"
	var ne net.Error
	if errors.Is(err, errTimedOut) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		cause = "TimedOut"
	}
	// Anything else (a refused, reset or closed connection, a failed dial) is no answer either.
	return &Error{Kind: KindUnavailable, Cause: cause, Key: key, Server: server, Err: err}
}

func badRequest(kind string) bool {
	for _, k := range proto.c.Errors.Kinds {
		if k.Name == kind {
			return k.BadRequest
		}
	}
	return false
}
