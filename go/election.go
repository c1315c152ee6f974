package fencedlock

import (
	"context"
	"errors"
	"time"
)

// minCampaignWindow is the shortest time one campaign request waits in the queue before it is
// sent again (a wait is bounded; a campaign is not).
const minCampaignWindow = time.Second

// Election is leader election on one key, after etcd's Election API: candidates campaign in
// the server's queue, the leader holds a kept-alive lease carrying its public label, and the
// lease's fence is the leader's epoch. Resources must refuse writes with an older epoch: a
// deposed leader that was paused still believes it leads until it next looks.
type Election struct {
	locker *Locker
	key    string
}

// Election is the election on key.
func (l *Locker) Election(key string) (*Election, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return &Election{locker: l, key: key}, nil
}

// Leader is who leads, as the server tells anyone (never the token).
type Leader struct {
	// Label is the leader's public label.
	Label []byte
	// Epoch is the leader's lease's fence: above every earlier leader's.
	Epoch uint64
	// Remaining is how long the leader's lease lasts unless renewed.
	Remaining time.Duration
}

// Leadership is being the leader: a kept-alive lease whose fence is the epoch.
type Leadership struct {
	lease *Lease
	label string
}

// Epoch is the leadership's epoch: send it with every write.
func (p *Leadership) Epoch() uint64 { return p.lease.Fence() }

// Lease is the leadership's lease.
func (p *Leadership) Lease() *Lease { return p.lease }

// Done is closed when the leadership ends: lost (before a successor can be elected) or
// resigned. Err says which.
func (p *Leadership) Done() <-chan struct{} { return p.lease.Done() }

// Err is nil while leading or after Resign, and errors.Is ErrLeaseLost once lost.
func (p *Leadership) Err() error { return p.lease.Err() }

// Resign steps down: the next queued candidate is elected at once. true if we still led.
func (p *Leadership) Resign(ctx context.Context) (bool, error) { return p.lease.Release(ctx) }

// Campaign waits until elected, with no time limit but ctx's (which gives up, leaving nothing
// behind), then leads under a kept-alive lease labelled label (public: Leader shows it).
func (e *Election) Campaign(ctx context.Context, label string, opts ...Option) (*Leadership, error) {
	s := e.locker.settings
	for _, o := range opts {
		o(&s)
	}
	window := max(s.wait, minCampaignWindow)
	opts = append(append([]Option{}, opts...), WithLabel(label), WithWait(window))
	for {
		lease, err := e.locker.Acquire(ctx, e.key, opts...)
		if errors.Is(err, ErrNotAcquired) {
			continue
		}
		if err != nil {
			return nil, err
		}
		lease.KeepAlive()
		return &Leadership{lease: lease, label: label}, nil
	}
}

// Leader is who leads now; nil while nobody does.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	st, err := e.locker.Status(ctx, e.key)
	if err != nil || st == nil || len(st.Holders) == 0 {
		return nil, err
	}
	h := st.Holders[0]
	return &Leader{Label: h.Label, Epoch: h.Fence, Remaining: h.Remaining}, nil
}

// Observe sends the leadership as it changes: the current one first (nil while nobody leads),
// then each change of leader or epoch (never a mere renewal), polled every `every` (0: a third
// of the locker's ttl) and just after the current lease would run out. The channel is closed
// when ctx ends; a failed poll is retried at the next.
func (e *Election) Observe(ctx context.Context, every time.Duration) <-chan *Leader {
	if every <= 0 {
		every = e.locker.settings.ttl / 3
	}
	every = max(every, 10*time.Millisecond)
	out := make(chan *Leader)
	go func() {
		defer close(out)
		first := true
		var last Leader
		var pause time.Duration
		for {
			if sleep(ctx, pause) != nil {
				return
			}
			leader, err := e.Leader(ctx)
			pause = every
			if err != nil {
				continue
			}
			var now Leader
			if leader != nil {
				now = *leader
				pause = max(10*time.Millisecond, min(every, leader.Remaining+time.Millisecond))
			}
			if !first && now.Epoch == last.Epoch && string(now.Label) == string(last.Label) {
				continue
			}
			first, last = false, now
			select {
			case out <- leader:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
