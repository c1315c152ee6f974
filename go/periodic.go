package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Outcome is what RunAtMostEvery came to.
type Outcome int

const (
	// Ran: the job was due; it ran under the lease and its run was recorded.
	Ran Outcome = iota
	// NotDue: the last recorded run started less than a period ago, on the server's clock.
	NotDue
	// Busy: another holder has the lock (running the job, or finding it not due).
	Busy
)

func (o Outcome) String() string {
	return [...]string{"ran", "not due", "busy"}[o]
}

// LastRun is a job's last recorded run, as the server keeping its record tells it.
type LastRun struct {
	// Started is when the run started, on the server's clock.
	Started time.Time
	// Age is how long ago that was, on the server's clock.
	Age time.Duration
	// Fence is the fence of the lease the run held; Label its label, if any.
	Fence uint64
	Label []byte
	// Exit is the run's exit code (0 for a job that returned nil).
	Exit int64
}

// Periodic is RunAtMostEvery's result.
type Periodic struct {
	Outcome Outcome
	// Last is the run on record before this call (nil: none).
	Last *LastRun
	// DueIn is, for NotDue, how long until the job is due.
	DueIn time.Duration
}

// RunAtMostEvery runs job at most once every `every`, whichever process calls it, measured on
// the server's clock: under a lease on key, it reads the run record beside the key (with the
// server's TIME), runs job only when the last recorded run started at least `every` ago,
// keeping the lease alive (job's ctx is cancelled, cause ErrLeaseLost, at its loss), and
// records the run before it releases, so the next holder finds it whatever its own clock says.
// A job that fails or loses its lease is not recorded (its error is returned). A held key is
// Busy, not an error.
func (l *Locker) RunAtMostEvery(ctx context.Context, key string, every time.Duration, job func(ctx context.Context, lease *Lease) error, opts ...Option) (Periodic, error) {
	if every < time.Millisecond || every%time.Millisecond != 0 {
		return Periodic{}, invalid("a periodic job's period is a whole number of milliseconds, at least 1 ms, got %v", every)
	}
	if job == nil {
		return Periodic{}, invalid("RunAtMostEvery needs a job")
	}
	lease, err := l.Acquire(ctx, key, opts...)
	if errors.Is(err, ErrNotAcquired) {
		return Periodic{Outcome: Busy}, nil
	}
	if err != nil {
		return Periodic{}, err
	}
	release := func() { _, _ = lease.Release(context.WithoutCancel(ctx)) }
	now, last, err := l.readRecord(ctx, lease)
	if err != nil {
		release()
		return Periodic{}, err
	}
	everyMs := every.Milliseconds()
	if last != nil && last.Age < every {
		release()
		return Periodic{Outcome: NotDue, Last: last, DueIn: every - last.Age}, nil
	}
	run, stop := keptAlive(ctx, lease)
	jerr := job(run, lease)
	if lost := stop(); lost != nil {
		release()
		return Periodic{}, errors.Join(lost, jerr)
	}
	if jerr != nil {
		release()
		return Periodic{}, jerr
	}
	_, werr := l.writeRecord(ctx, lease, now, everyMs)
	release()
	if werr != nil {
		return Periodic{}, werr
	}
	return Periodic{Outcome: Ran, Last: last}, nil
}

// readRecord reads the run record with the server's time (the contract's read script): the
// server's now in ms, and the last run, nil when none is recorded.
func (l *Locker) readRecord(ctx context.Context, lease *Lease) (int64, *LastRun, error) {
	srv := l.server
	reply, err := srv.do(ctx, "EVAL", proto.c.Periodic.Read.Text, "1", recordKey(lease.key))
	if err != nil {
		return 0, nil, classify(srv.name(), lease.Key(), err)
	}
	bad := &Error{Kind: KindBadReply, Key: lease.Key(), Server: srv.name(), Err: errors.New("the run record is not one fencedlock writes")}
	fields, ok := reply.([]any)
	if !ok || len(fields) != 6 {
		return 0, nil, bad
	}
	num := func(v any) (int64, bool, bool) { // value, present, ok
		if v == nil {
			return 0, false, true
		}
		s, ok := v.(string)
		if !ok {
			if n, isInt := v.(int64); isInt {
				return n, true, true
			}
			return 0, true, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, true, err == nil
	}
	secs, p1, ok1 := num(fields[0])
	micros, p2, ok2 := num(fields[1])
	started, p3, ok3 := num(fields[2])
	fence, p4, ok4 := num(fields[3])
	exit, _, ok5 := num(fields[5])
	if !p1 || !p2 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || p3 != p4 || secs < 0 || micros < 0 || started < 0 || fence < 0 {
		return 0, nil, bad
	}
	now := secs*1000 + micros/1000
	if !p3 {
		return now, nil, nil
	}
	var label []byte
	if s, ok := fields[4].(string); ok {
		label = []byte(s)
	}
	// A start stamped later than now (a server clock that stepped back) is of age 0: the job
	// is not made due early.
	age := max(now-started, 0)
	return now, &LastRun{Started: time.UnixMilli(started), Age: time.Duration(age) * time.Millisecond, Fence: uint64(fence), Label: label, Exit: exit}, nil
}

// writeRecord records the run (the contract's write script, fence-checked: a newer holder's
// run on record is kept): true when written.
func (l *Locker) writeRecord(ctx context.Context, lease *Lease, startedMs, everyMs int64) (bool, error) {
	srv := l.server
	retention := everyMs + int64(proto.c.Periodic.RetentionMs)
	if retention < 0 {
		retention = math.MaxInt64
	}
	reply, err := srv.do(ctx, "EVAL", proto.c.Periodic.Write.Text, "1", recordKey(lease.key),
		strconv.FormatInt(startedMs, 10), strconv.FormatUint(lease.Fence(), 10), lease.label, "0", strconv.FormatInt(retention, 10))
	if err != nil {
		return false, classify(srv.name(), lease.Key(), err)
	}
	n, ok := reply.(int64)
	if !ok {
		return false, &Error{Kind: KindBadReply, Key: lease.Key(), Server: srv.name(), Err: fmt.Errorf("the record write replied %v", reply)}
	}
	return n == 1, nil
}
