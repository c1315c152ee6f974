package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Holder is one unexpired holder of a key, as STATUS shows it (never its token).
type Holder struct {
	Fence     uint64
	Remaining time.Duration
	// Label is the holder's public label, nil without one.
	Label []byte
}

// Status is what a server says of a key: its fence and its holders, oldest grant first. A
// lock key shows one permit; a semaphore its permits; read leases (SHARED) 0 permits.
type Status struct {
	Fence   uint64
	Permits int
	Shared  bool
	Holders []Holder
}

// Status reads the key's fence and holders; nil for a key without lock state.
func (l *Locker) Status(ctx context.Context, key string) (*Status, error) {
	e, err := l.engineFor(ctx, key)
	if err != nil {
		return nil, err
	}
	srv := l.server
	reply, err := srv.call(ctx, request(e, cmdStatus, []byte(key), nil, false)...)
	if err != nil {
		return nil, l.failure(ctx, key, err)
	}
	st, err := decodeStatus(reply)
	if err != nil {
		return nil, &Error{Kind: KindBadReply, Key: key, Server: srv.name(), Err: err}
	}
	return st, nil
}

// decodeStatus reads a STATUS reply of either shape, checking every rule of it, as the other
// clients do: a positive fence; a lock's held 0 (pttl -1, no label) or 1 (pttl 0 or more); a
// semaphore's permits 1 to max_permits (0: read leases), one entry per holder, their fences
// increasing up to the key's, each with a pttl; labels of 1 to max_label_len bytes.
func decodeStatus(reply any) (*Status, error) {
	if reply == nil {
		return nil, nil
	}
	items, ok := reply.([]any)
	if !ok || len(items) < 3 || len(items) > 4 {
		return nil, errors.New("STATUS must reply an array of 3 or 4")
	}
	fence, ok := items[0].(int64)
	second, ok2 := items[1].(int64)
	third, ok3 := items[2].(int64)
	if !ok || !ok2 || !ok3 || fence < 1 {
		return nil, errors.New("STATUS must reply a fence of 1 or more and two integers")
	}
	st := &Status{Fence: uint64(fence)}
	if holders, ok := itemAt(items, 3).([]any); ok {
		permits := int(third)
		st.Permits, st.Shared = permits, permits == proto.c.Words.SharedPermits
		if !st.Shared && (permits < 1 || permits > proto.c.Limits.MaxPermits) {
			return nil, fmt.Errorf("STATUS permits must be 1 to %d, or 0 for read leases", proto.c.Limits.MaxPermits)
		}
		capacity := permits
		if st.Shared {
			capacity = proto.c.Limits.MaxPermits
		}
		if int64(len(holders)) != second || len(holders) > capacity {
			return nil, errors.New("STATUS holders disagree with its counts")
		}
		var previous int64
		for _, h := range holders {
			entry, ok := h.([]any)
			if !ok || len(entry) != 3 {
				return nil, errors.New("a STATUS holder is [fence, pttl, label]")
			}
			hf, ok := entry[0].(int64)
			pttl, ok2 := entry[1].(int64)
			if !ok || !ok2 || hf <= previous || hf > fence || pttl < 0 {
				return nil, errors.New("STATUS holders' fences increase up to the key's, each with a pttl")
			}
			previous = hf
			label, err := labelOf(entry[2])
			if err != nil {
				return nil, err
			}
			st.Holders = append(st.Holders, Holder{Fence: uint64(hf), Remaining: time.Duration(pttl) * time.Millisecond, Label: label})
		}
		return st, nil
	}
	st.Permits = 1
	switch {
	case second == 0 && third == -1 && len(items) == 3:
		return st, nil
	case second == 1 && third >= 0:
		label, err := labelOf(itemAt(items, 3))
		if err != nil {
			return nil, err
		}
		st.Holders = []Holder{{Fence: uint64(fence), Remaining: time.Duration(third) * time.Millisecond, Label: label}}
		return st, nil
	}
	return nil, errors.New("STATUS held must be 0 (pttl -1, no label) or 1 (a pttl)")
}

func labelOf(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok || len(s) < 1 || len(s) > proto.c.Limits.MaxLabelLen {
		return nil, fmt.Errorf("a STATUS label has 1 to %d bytes", proto.c.Limits.MaxLabelLen)
	}
	return []byte(s), nil
}

// heldForOf is how long a STATUS reply shows the key held by its leases alone: 0 for a free
// key, a semaphore with a free permit, or a reply it cannot read (the wait then asks again
// soon); else the time left on the lease that ends first.
func heldForOf(reply any) time.Duration {
	st, err := decodeStatus(reply)
	if err != nil || st == nil || len(st.Holders) == 0 || (!st.Shared && len(st.Holders) < st.Permits) {
		return 0
	}
	first := st.Holders[0].Remaining
	for _, h := range st.Holders[1:] {
		first = min(first, h.Remaining)
	}
	return first
}

func itemAt(items []any, i int) any {
	if i < len(items) {
		return items[i]
	}
	return nil
}
