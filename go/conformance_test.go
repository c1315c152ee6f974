package fencedlock

// The shared conformance corpus (protocol/corpus/conformance.json, run by
// fencedlocktest.RunConformance on a module server, a Functions library server and a script
// server) on exact RESP2 connections, which tell a simple string from a bulk string and nil
// from an empty array, with every request the package has a builder for built by it
// (acquireWords, acquireAllWords, request: floorKey, wakeKey) and checked against the
// README's rule. The adapters run the same corpus through their transports.

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"example.invalid/fencedlock/go/fencedlocktest"
)

func TestConformanceCorpus(t *testing.T) {
	fencedlocktest.RunConformance(t, fencedlocktest.Conformance{
		Dial: func(t *testing.T, addr string) fencedlocktest.Sender {
			c, err := fencedlocktest.DialRESP(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c
		},
		Build: buildWithPackage,
	})
}

var engineOf = map[fencedlocktest.Engine]engine{
	fencedlocktest.ModuleEngine: engineModule,
	fencedlocktest.Functions:    engineFunctions,
	fencedlocktest.Script:       engineScript,
}

// buildWithPackage is a step's request as the package builds it, where it has a builder for
// the shape: ACQUIREALL of a set (without BLOCK), ACQUIRE in the package's grammar, and every
// other call on one key (key_only only on the module, where it is the same request).
func buildWithPackage(fe fencedlocktest.Engine, call string, form fencedlocktest.KeyForm, key []byte, args [][]byte) ([][]byte, string, bool) {
	e := engineOf[fe]
	cmd, known := proto.commands[call]
	if known && cmd.CountsKeys && form.Form == "set" && len(form.Set) > 0 {
		keys := make([][]byte, len(form.Set))
		for i, s := range form.Set {
			keys[i] = append(append([]byte{}, key...), s...)
		}
		if req, block, ok := acquireOf(nil, args); ok && block < 0 {
			return toBytes(acquireAllWords(e, keys, req)), "acquireAllWords", true
		}
	}
	keyed := form.Form == "with_floor" || form.Form == "member" || (form.Form == "key_only" && e == engineModule)
	if !keyed || !known || cmd.CountsKeys {
		return nil, "", false
	}
	lock := key
	if form.Form == "member" {
		lock = append(append([]byte{}, key...), form.Suffix...)
	}
	if req, block, ok := acquireOf(lock, args); call == cmdAcquire && ok {
		return toBytes(acquireWords(e, req, false, block)), "acquireWords", true
	}
	rest := make([]any, len(args))
	for i, a := range args {
		rest[i] = a
	}
	return toBytes(request(e, call, lock, rest, false)), "request", true
}

var decimal = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)

func asInt(b []byte) (int64, bool) {
	if b == nil || !decimal.Match(b) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// acquireOf is the ACQUIRE of args if the package's grammar makes exactly these words: token,
// ttl, then LABEL l, PERMITS n (above 1), SHARED, BLOCK ms, each at most once, in that order.
func acquireOf(key []byte, args [][]byte) (acquireRequest, int64, bool) {
	if len(args) < 2 {
		return acquireRequest{}, 0, false
	}
	ttl, ok := asInt(args[1])
	if !ok || len(args[0]) == 0 {
		return acquireRequest{}, 0, false
	}
	req := acquireRequest{key: key, token: args[0], ttlMs: ttl}
	block := int64(-1)
	at := func(i int) []byte {
		if i < len(args) {
			return args[i]
		}
		return nil
	}
	i := 2
	if bytes.Equal(at(i), []byte(proto.label)) && at(i+1) != nil {
		req.label, i = at(i+1), i+2
		if len(req.label) == 0 {
			return acquireRequest{}, 0, false
		}
	}
	if bytes.Equal(at(i), []byte(proto.permits)) {
		n, ok := asInt(at(i + 1))
		if !ok || n <= 1 {
			return acquireRequest{}, 0, false
		}
		req.permits, i = int(n), i+2
	}
	if bytes.Equal(at(i), []byte(proto.shared)) {
		req.shared, i = true, i+1
	}
	if bytes.Equal(at(i), []byte(proto.block)) {
		n, ok := asInt(at(i + 1))
		if !ok || n < 0 {
			return acquireRequest{}, 0, false
		}
		block, i = n, i+2
	}
	if i != len(args) {
		return acquireRequest{}, 0, false
	}
	return req, block, true
}

func toBytes(ws []any) [][]byte {
	out := make([][]byte, len(ws))
	for i, w := range ws {
		switch w := w.(type) {
		case string:
			out[i] = []byte(w)
		case []byte:
			out[i] = w
		default:
			out[i] = []byte(fmt.Sprint(w))
		}
	}
	return out
}
