package fencedlock

import (
	"context"
	"errors"
	"math/big"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// goRedis is the Transport over a go-redis v9 client (NewLocker, NewRedlock): requests on the
// user's client, which routes a cluster's by key itself; blocking requests on clients of its
// own, one per node address.
type goRedis struct {
	client redis.UniversalClient

	mu sync.Mutex
	// waiters are clients of the transport's own, one per node address, for requests that
	// block (ACQUIRE … BLOCK, BLPOP): without read timeout or retries of their own, so a wait
	// is bounded by its context alone and never re-sent by go-redis.
	waiters map[string]*redis.Client
	closed  bool
}

// waitConnsPerNode bounds the connections the waits of one transport hold on one node at once.
const waitConnsPerNode = 4096

func newGoRedis(client redis.UniversalClient) *goRedis {
	return &goRedis{client: client, waiters: map[string]*redis.Client{}}
}

// goRedisConn is one go-redis client as a Conn.
type goRedisConn struct {
	c interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	}
}

// HonoursDeadline: go-redis gives up at a context's deadline itself (on the socket, in the
// pool and in its retries) only with ContextTimeoutEnabled.
func (c goRedisConn) HonoursDeadline() bool { return contextTimeouts(c.c) }

func (g *goRedis) HonoursDeadline() bool { return contextTimeouts(g.client) }

// contextTimeouts says whether a go-redis client was made with ContextTimeoutEnabled.
func contextTimeouts(c any) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func (c goRedisConn) Do(ctx context.Context, cmd Command) (any, error) {
	return goRedisResult(c.c.Do(ctx, cmd.Args...).Result())
}

// goRedisResult is a go-redis reply in the Transport's terms: redis.Nil is a nil reply, an
// error reply a *ReplyError, a RESP3 map keyed by strings, a boolean 1 or 0, a double or big
// number its text.
func goRedisResult(v any, err error) (any, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil, &ReplyError{Reply: re.Error(), Err: err}
	}
	if err != nil {
		return nil, err
	}
	return goRedisValue(v), nil
}

func goRedisValue(v any) any {
	switch v := v.(type) {
	case []any:
		for i, item := range v {
			v[i] = goRedisValue(item)
		}
		return v
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[word(k)] = goRedisValue(item)
		}
		return out
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case float64:
		// go-redis parsed a RESP3 double: its shortest text (the package reads none).
		return strconv.FormatFloat(v, 'g', -1, 64)
	case *big.Int:
		return v.String()
	}
	return v
}

func (g *goRedis) Do(ctx context.Context, cmd Command) (any, error) {
	return goRedisConn{g.client}.Do(ctx, cmd)
}

func (g *goRedis) Pipeline(ctx context.Context, cmds []Command) ([]any, error) {
	pipe := g.client.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, cmd := range cmds {
		sent[i] = pipe.Do(ctx, cmd.Args...)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]any, len(sent))
	for i, c := range sent {
		v, err := goRedisResult(c.Result())
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (g *goRedis) Primaries(ctx context.Context, cmd Command) error {
	if cc, ok := g.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			_, err := goRedisConn{c}.Do(ctx, cmd)
			return err
		})
	}
	_, err := g.Do(ctx, cmd)
	return err
}

func (g *goRedis) Addr() string {
	if c, ok := g.client.(*redis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

func (g *goRedis) Cluster() bool {
	_, ok := g.client.(*redis.ClusterClient)
	return ok
}

// Blocking is a client of the transport's own to the node serving key; nil where the user's
// client gives no node options to copy (a Ring, a custom client): a wait then polls.
func (g *goRedis) Blocking(ctx context.Context, key string) (Conn, error) {
	var node *redis.Client
	switch c := g.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		node = n
	default:
		return nil, nil
	}
	opt := *node.Options()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, redis.ErrClosed
	}
	if w := g.waiters[opt.Addr]; w != nil {
		return goRedisConn{w}, nil
	}
	// The user's settings (address, credentials, TLS, protocol), with the socket bounded by
	// the request's context only and no retries: a blocking ACQUIRE is never sent twice.
	opt.ReadTimeout = -1
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	// A blocked request holds its connection for the whole wait, so the pool must never make
	// a waiter wait for another's connection: go-redis's default of 10 per CPU would leave the
	// waiters past it outside the server's queue until the pool timed them out (and, on the
	// library, woken waiters queue for a connection behind new BLPOPs). Connections are made
	// as waiters come, and closed after the client's idle time.
	opt.PoolSize = waitConnsPerNode
	opt.MaxActiveConns = 0
	opt.MinIdleConns = 0
	opt.MaxIdleConns = 0
	w := redis.NewClient(&opt)
	g.waiters[opt.Addr] = w
	return goRedisConn{w}, nil
}

// Close closes the blocking clients.
func (g *goRedis) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	var errs []error
	for addr, w := range g.waiters {
		errs = append(errs, w.Close())
		delete(g.waiters, addr)
	}
	return errors.Join(errs...)
}
