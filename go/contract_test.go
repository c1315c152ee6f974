package fencedlock

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"example.invalid/fencedlock/go/internal/contract"
)

// The embedded copies are the repository's, byte for byte: after a change of the contract or
// the library, run `go generate ./...` in go/ and commit the copies.
func TestEmbeddedContractIsCurrent(t *testing.T) {
	for _, c := range []struct{ repo, copy string }{
		{"protocol/contract.json", "internal/contract/contract.json"},
		{"protocol/src/functions.lua", "internal/contract/functions.lua"},
		{"guard/contract.json", "internal/contract/guard.json"},
	} {
		want, err := os.ReadFile(filepath.Join(repoRoot(t), c.repo))
		if err != nil {
			t.Fatalf("the repository's %s: %v", c.repo, err)
		}
		got, err := os.ReadFile(filepath.FromSlash(c.copy))
		if err != nil {
			t.Fatalf("the module's copy %s: %v", c.copy, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from ../%s: run `go generate ./...` in go/", c.copy, c.repo)
		}
	}
	if !bytes.Equal([]byte(contract.Library), mustRead(t, "internal/contract/functions.lua")) {
		t.Error("the embedded library is not the copy on disk")
	}
	if !bytes.Equal(contract.GuardJSON, mustRead(t, "internal/contract/guard.json")) {
		t.Error("the embedded guard contract is not the copy on disk")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vectors is contract.json's vectors, as the protocol crate computed them.
type vectors struct {
	Keys []struct {
		Key            contract.Bytes `json:"key"`
		Slot           int            `json:"slot"`
		ModuleFloorKey string         `json:"module_floor_key"`
		FloorTag       string         `json:"floor_tag"`
		FloorKey       string         `json:"floor_key"`
		WakeKey        contract.Bytes `json:"wake_key"`
		RecordKey      contract.Bytes `json:"record_key"`
	} `json:"keys"`
	KeyChecks []struct {
		Key     string  `json:"key"`
		OK      bool    `json:"ok"`
		Problem *string `json:"problem"`
		At      *int    `json:"at"`
	} `json:"key_checks"`
	Requests []struct {
		Name    string `json:"name"`
		Command string `json:"command"`
		Request struct {
			Key     *contract.Bytes  `json:"key"`
			Keys    []contract.Bytes `json:"keys"`
			Token   contract.Bytes   `json:"token"`
			TTLMs   int64            `json:"ttl_ms"`
			Label   *contract.Bytes  `json:"label"`
			Permits int              `json:"permits"`
			Shared  bool             `json:"shared"`
			BlockMs *int64           `json:"block_ms"`
			Fence   *contract.Int    `json:"fence"`
			Value   *contract.Bytes  `json:"value"`
		} `json:"request"`
		Waiting bool             `json:"waiting"`
		Module  []contract.Bytes `json:"module"`
		FCall   []contract.Bytes `json:"fcall"`
		EvalSHA []contract.Bytes `json:"evalsha"`
	} `json:"requests"`
	Status []struct {
		Name    string          `json:"name"`
		Reply   json.RawMessage `json:"reply"`
		Valid   bool            `json:"valid"`
		Decoded json.RawMessage `json:"decoded"`
	} `json:"status"`
	Errors []struct {
		Reply  string  `json:"reply"`
		Code   string  `json:"code"`
		Detail string  `json:"detail"`
		Kind   *string `json:"kind"`
	} `json:"errors"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	var v struct {
		Vectors vectors `json:"vectors"`
	}
	if err := json.Unmarshal(contract.JSON, &v); err != nil {
		t.Fatal(err)
	}
	return v.Vectors
}

func TestProtocolLoads(t *testing.T) {
	if protoErr != nil {
		t.Fatal(protoErr)
	}
}

func TestKeyVectors(t *testing.T) {
	v := loadVectors(t)
	if len(v.Keys) == 0 {
		t.Fatal("no key vectors")
	}
	for _, k := range v.Keys {
		if got := keySlot(k.Key); got != k.Slot {
			t.Errorf("%q: slot %d, want %d", k.Key, got, k.Slot)
		}
		if got := floorTag(k.Key); got != k.FloorTag {
			t.Errorf("%q: floor tag %s, want %s", k.Key, got, k.FloorTag)
		}
		if got := floorKey(k.Key); got != k.FloorKey {
			t.Errorf("%q: floor key %s, want %s", k.Key, got, k.FloorKey)
		}
		if got := wakeKey(k.Key); got != string(k.WakeKey) {
			t.Errorf("%q: wake key %q, want %q", k.Key, got, k.WakeKey)
		}
		if got := recordKey(k.Key); got != string(k.RecordKey) {
			t.Errorf("%q: record key %q, want %q", k.Key, got, k.RecordKey)
		}
		if got := moduleFloorKey(k.Key); got != k.ModuleFloorKey {
			t.Errorf("%q: module floor key %s, want %s", k.Key, got, k.ModuleFloorKey)
		}
	}
	if proto.keys.Incomplete() {
		t.Error("some slot has no floor tag")
	}
}

func TestKeyCheckVectors(t *testing.T) {
	for _, k := range loadVectors(t).KeyChecks {
		err := checkKey(k.Key)
		if (err == nil) != k.OK {
			t.Errorf("%q: checkKey says %v, want ok=%v", k.Key, err, k.OK)
			continue
		}
		problem, at := keyProblem(k.Key)
		if k.OK {
			continue
		}
		if problem != *k.Problem {
			t.Errorf("%q: problem %s, want %s", k.Key, problem, *k.Problem)
		}
		if k.At != nil && at != *k.At {
			t.Errorf("%q: at %d, want %d", k.Key, at, *k.At)
		}
		if !isKind(err, ErrInvalidArgument) {
			t.Errorf("%q: %v is not an invalid argument", k.Key, err)
		}
	}
}

func words(ws []any) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		switch w := w.(type) {
		case string:
			out[i] = w
		case []byte:
			out[i] = string(w)
		default:
			out[i] = fmt.Sprint(w)
		}
	}
	return out
}

func bytesWords(ws []contract.Bytes) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = string(w)
	}
	return out
}

// Every request vector the package builds (ACQUIRE, RENEW, RELEASE, STATUS) is the contract's
// words in each engine's form.
func TestRequestVectors(t *testing.T) {
	built := 0
	for _, r := range loadVectors(t).Requests {
		q := r.Request
		var build func(e engine) []any
		switch r.Command {
		case cmdAcquire:
			req := acquireRequest{key: *q.Key, token: q.Token, ttlMs: q.TTLMs, permits: q.Permits, shared: q.Shared}
			if q.Label != nil {
				req.label = *q.Label
			}
			block := int64(-1)
			if q.BlockMs != nil {
				block = *q.BlockMs
			}
			build = func(e engine) []any { return acquireWords(e, req, r.Waiting, block) }
		case cmdRenew:
			build = func(e engine) []any {
				return request(e, cmdRenew, *q.Key, []any{[]byte(q.Token), strconv.FormatInt(q.TTLMs, 10)}, false)
			}
		case cmdRelease:
			build = func(e engine) []any { return request(e, cmdRelease, *q.Key, []any{[]byte(q.Token)}, false) }
		case cmdStatus:
			build = func(e engine) []any { return request(e, cmdStatus, *q.Key, nil, false) }
		case cmdAcquireAll:
			req := acquireRequest{token: q.Token, ttlMs: q.TTLMs, permits: q.Permits, shared: q.Shared}
			if q.Label != nil {
				req.label = *q.Label
			}
			keys := make([][]byte, len(q.Keys))
			for i, k := range q.Keys {
				keys[i] = k
			}
			build = func(e engine) []any { return acquireAllWords(e, keys, req) }
		default:
			continue // RAISE, CAD: not built by this package yet
		}
		built++
		for _, form := range []struct {
			e    engine
			want []contract.Bytes
		}{{engineModule, r.Module}, {engineFunctions, r.FCall}, {engineScript, r.EvalSHA}} {
			got, want := words(build(form.e)), bytesWords(form.want)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("%s (%s): built %q, want %q", r.Name, form.e, got, want)
			}
		}
	}
	if built < 10 {
		t.Errorf("only %d request vectors built", built)
	}
}

// The periodic scripts are the contract's, by their SHA1.
func TestPeriodicScripts(t *testing.T) {
	for _, sc := range []contract.Script{proto.c.Periodic.Read, proto.c.Periodic.Write} {
		sum := sha1.Sum([]byte(sc.Text))
		if hex.EncodeToString(sum[:]) != sc.SHA1 || sc.Text == "" {
			t.Errorf("a periodic script's SHA1 is not the contract's %s", sc.SHA1)
		}
	}
}

func TestErrorVectors(t *testing.T) {
	for _, e := range loadVectors(t).Errors {
		code, detail := splitReply(e.Reply)
		if code != e.Code || detail != e.Detail {
			t.Errorf("%q: split into %q / %q", e.Reply, code, detail)
		}
		want := ""
		if e.Kind != nil {
			want = *e.Kind
		}
		if got := errorKind(e.Reply); got != want {
			t.Errorf("%q: kind %q, want %q", e.Reply, got, want)
		}
	}
}

// Each vector reply decodes as the contract says, or is refused.
func TestStatusVectors(t *testing.T) {
	for _, s := range loadVectors(t).Status {
		reply, err := replyOf(s.Reply)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		st, err := decodeStatus(reply)
		if !s.Valid {
			if err == nil {
				t.Errorf("%s: decoded %+v, want a refusal", s.Name, st)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		var want struct {
			Type      string            `json:"type"`
			Fence     contract.Int      `json:"fence"`
			Held      bool              `json:"held"`
			Remaining *int64            `json:"remaining_ms"`
			Label     *contract.Bytes   `json:"label"`
			Permits   int               `json:"permits"`
			Shared    bool              `json:"shared"`
			Holders   []json.RawMessage `json:"holders"`
		}
		if string(s.Decoded) == "null" {
			if st != nil {
				t.Errorf("%s: decoded %+v, want nil", s.Name, st)
			}
			continue
		}
		if err := json.Unmarshal(s.Decoded, &want); err != nil {
			t.Fatal(err)
		}
		if st.Fence != uint64(want.Fence) {
			t.Errorf("%s: fence %d, want %d", s.Name, st.Fence, want.Fence)
		}
		if want.Type == "lock" {
			if (len(st.Holders) == 1) != want.Held || st.Permits != 1 {
				t.Errorf("%s: %+v, want held=%v", s.Name, st, want.Held)
			}
			if want.Held && (st.Holders[0].Remaining.Milliseconds() != *want.Remaining ||
				(want.Label == nil) != (st.Holders[0].Label == nil) || (want.Label != nil && string(*want.Label) != string(st.Holders[0].Label))) {
				t.Errorf("%s: holder %+v", s.Name, st.Holders[0])
			}
			continue
		}
		if st.Permits != want.Permits || st.Shared != want.Shared || len(st.Holders) != len(want.Holders) {
			t.Errorf("%s: %+v, want permits %d shared %v holders %d", s.Name, st, want.Permits, want.Shared, len(want.Holders))
		}
	}
}

// replyOf turns a vector reply (integers, byte strings, nil, arrays) into what go-redis gives.
func replyOf(raw json.RawMessage) (any, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil {
		out := make([]any, len(list))
		for i, item := range list {
			v, err := replyOf(item)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	var n contract.Int
	if err := json.Unmarshal(raw, &n); err == nil {
		var probe any
		if json.Unmarshal(raw, &probe); probe != nil {
			if _, isString := probe.(string); !isString {
				if m, isMap := probe.(map[string]any); !isMap || m["int"] != nil {
					return int64(n), nil
				}
			}
		}
	}
	var b contract.Bytes
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	return string(b), nil
}
