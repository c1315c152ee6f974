package fencedlock

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Option sets a locker's default (given to NewLocker) or one acquisition's (given to Acquire
// or Do, over the locker's).
type Option func(*settings)

type settings struct {
	ttl     time.Duration
	timeout time.Duration
	wait    time.Duration
	label   []byte
	permits int
	shared  bool
	// set records which options were given, so a bad one is reported, not replaced.
	labelSet bool
}

// The defaults of the other clients: a 10 s lease, a 500 ms request timeout, one attempt.
func defaults() settings {
	return settings{ttl: 10 * time.Second, timeout: 500 * time.Millisecond}
}

// WithTTL is the lease time (whole milliseconds; the server ends the lease this long after
// the grant unless it is renewed). Default 10 s.
func WithTTL(ttl time.Duration) Option { return func(s *settings) { s.ttl = ttl } }

// WithTimeout bounds each request to the server: connection set-up and the client library's
// retries included. A server that does not answer within it is an outage (ErrUnavailable),
// never a held key. Default 500 ms.
func WithTimeout(timeout time.Duration) Option { return func(s *settings) { s.timeout = timeout } }

// WithWait is how long Acquire waits for a held key: queued on the server (the module) or
// woken by the release (the library). Default 0: one attempt. The context bounds it too.
func WithWait(wait time.Duration) Option { return func(s *settings) { s.wait = wait } }

// WithLabel is a public label of the lease (1 to 256 bytes): STATUS shows it, so never put a
// secret in it.
func WithLabel(label string) Option {
	return func(s *settings) { s.label, s.labelSet = []byte(label), true }
}

// WithPermits makes the key a semaphore of n permits (1 to 1024): up to n leases at once,
// each with its own fence. Every holder must ask with the same n while anyone holds the key
// (the server refuses another count).
func WithPermits(n int) Option { return func(s *settings) { s.permits = n } }

// WithShared asks for a read lease of a read-write lock: held together with other read leases,
// never with a write lease (a lease asked without WithShared) on the same key. A writer that
// waits is woken when the last reader leaves.
func WithShared() Option { return func(s *settings) { s.shared = true } }

// drift is the clock-drift allowance taken off a lease's validity: 1 % of the ttl plus 2 ms,
// as the Rust client computes it.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// with applies opts over s and checks the result: the settings of one call, or of a new
// locker, refused before anything is sent.
func (s settings) with(opts []Option) (settings, error) {
	for _, o := range opts {
		o(&s)
	}
	return s, s.check()
}

// check refuses settings no server would take, before anything is sent.
func (s *settings) check() error {
	if s.ttl%time.Millisecond != 0 || s.ttl < time.Millisecond {
		return invalid("ttl must be a whole number of milliseconds, at least 1 ms, got %v", s.ttl)
	}
	if max := time.Duration(proto.c.Limits.MaxMaxTTLMs) * time.Millisecond; s.ttl > max {
		return invalid("ttl must be at most %v, got %v", max, s.ttl)
	}
	if drift(s.ttl) >= s.ttl {
		return invalid("the drift allowance (%v) leaves no validity in a %v ttl", drift(s.ttl), s.ttl)
	}
	if s.timeout <= 0 {
		return invalid("timeout must be positive, got %v", s.timeout)
	}
	if s.wait < 0 {
		return invalid("wait must be 0 or more, got %v", s.wait)
	}
	if s.permits < 0 || s.permits > proto.c.Limits.MaxPermits {
		return invalid("a semaphore has 1 to %d permits, got %d", proto.c.Limits.MaxPermits, s.permits)
	}
	if s.shared && s.permits > 1 {
		return invalid("a read lease (WithShared) is not a semaphore's (WithPermits): ask for one or the other")
	}
	if s.labelSet && (len(s.label) < 1 || len(s.label) > proto.c.Limits.MaxLabelLen) {
		return invalid("a label must be 1 to %d bytes, got %d", proto.c.Limits.MaxLabelLen, len(s.label))
	}
	return nil
}

// checkKey refuses a key clients do not send (contract.json vectors.key_checks): empty,
// blank (only white space), or with a control character (the error names its byte offset).
func checkKey(key string) error {
	if key == "" {
		return invalid("a key must not be empty")
	}
	blank := true
	for at, r := range key {
		if r == utf8.RuneError {
			continue
		}
		if unicode.IsControl(r) {
			return invalid("a key must not contain control characters: %q has one at byte %d", key, at)
		}
		if !unicode.IsSpace(r) {
			blank = false
		}
	}
	if blank {
		return invalid("a key must not be blank: %q", key)
	}
	return nil
}

// keyProblem is checkKey's verdict in the vectors' words: "" (ok), "empty", "blank" or
// "control", and the control character's byte offset.
func keyProblem(key string) (string, int) {
	if key == "" {
		return "empty", -1
	}
	for at, r := range key {
		if r != utf8.RuneError && unicode.IsControl(r) {
			return "control", at
		}
	}
	if checkKey(key) != nil {
		return "blank", -1
	}
	return "", -1
}
