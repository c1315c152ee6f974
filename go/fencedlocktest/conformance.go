package fencedlocktest

// The command contract's cases as data (protocol/corpus/conformance.json; how a runner runs
// them: protocol/corpus/README.md, "The contract cases"), run against real servers through the
// client under test (Conformance.Dial): one with the module (the reference), a managed one with
// the package's Functions library (FCALL), and a managed one where FUNCTION is denied,
// answering the package's script by EVALSHA. Requests are the README's rule (built here with
// the same key names as the package, internal/keys); where the client has a builder for a
// shape (Conformance.Build) its request must equal the rule's. Each step goes to the module, then to each library
// server; every library reply must agree with the module's once normalised, except the listed
// differences, which must differ exactly as listed. A step, field or key form this runner does
// not know fails the run.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"example.invalid/fencedlock/go/internal/contract"
	"example.invalid/fencedlock/go/internal/keys"
)

type corpusCase struct {
	Name  string                       `json:"name"`
	Key   contract.Bytes               `json:"key"`
	Steps []map[string]json.RawMessage `json:"steps"`
}

type conformanceCorpus struct {
	Schema      int          `json:"schema"`
	Cases       []corpusCase `json:"cases"`
	Differences []struct {
		Case string `json:"case"`
		Step int    `json:"step"`
		Why  string `json:"why"`
	} `json:"differences"`
}

// KeyForm is a step's "keys": Form with_floor, key_only, none, member (with Suffix) or set
// (with Set).
type KeyForm struct {
	Form   string
	Suffix string
	Set    []string
}

func parseKeyForm(raw json.RawMessage) (KeyForm, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil && (s == "with_floor" || s == "key_only" || s == "none") {
		return KeyForm{Form: s}, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) == 1 {
		if v, ok := m["member"]; ok && json.Unmarshal(v, &s) == nil {
			return KeyForm{Form: "member", Suffix: s}, nil
		}
		var set []string
		if v, ok := m["set"]; ok && json.Unmarshal(v, &set) == nil {
			return KeyForm{Form: "set", Set: set}, nil
		}
	}
	return KeyForm{}, fmt.Errorf("unknown key form %s", raw)
}

// resolveArg is a step's argument for one server: bytes, the case's key, or that server's
// highest fence so far plus d.
func resolveArg(raw json.RawMessage, key []byte, fences []int64) ([]byte, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil && len(obj) == 1 {
		if v, ok := obj["key"]; ok && string(v) == "true" {
			return key, nil
		}
		if v, ok := obj["fence_plus"]; ok {
			d, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || len(fences) == 0 {
				return nil, fmt.Errorf("bad fence_plus %s (fences so far %v)", v, fences)
			}
			high := fences[0]
			for _, f := range fences {
				high = max(high, f)
			}
			return []byte(strconv.FormatInt(high+d, 10)), nil
		}
	}
	var b contract.Bytes
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("unknown argument %s", raw)
	}
	return b, nil
}

// readmeWords is the README's rule for a request.
func readmeWords(e Engine, call string, form KeyForm, key []byte, args [][]byte) ([][]byte, error) {
	member := func(s string) []byte { return append(append([]byte{}, key...), s...) }
	lib := func(fn string, keys [][]byte) [][]byte {
		n := []byte(strconv.Itoa(len(keys)))
		var out [][]byte
		if e == Script {
			out = append([][]byte{[]byte("EVALSHA"), []byte(c.Library.ScriptSHA1), n}, keys...)
			out = append(out, []byte(fn))
		} else {
			out = append([][]byte{[]byte("FCALL"), []byte(fn), n}, keys...)
		}
		return append(out, args...)
	}
	cmd, ok := commands[call]
	if !ok {
		return nil, fmt.Errorf("unknown command %s", call)
	}
	fn := c.Library.Functions[call]
	if cmd.CountsKeys {
		if form.Form != "set" {
			return nil, fmt.Errorf("%s takes the set key form", call)
		}
		var keys [][]byte
		for _, s := range form.Set {
			keys = append(keys, member(s))
		}
		if e == ModuleEngine {
			out := append([][]byte{[]byte(call), []byte(strconv.Itoa(len(keys)))}, keys...)
			return append(out, args...), nil
		}
		if len(keys) > 0 {
			keys = append(keys, []byte(names.Floor(keys[0])))
		}
		return lib(fn, keys), nil
	}
	switch form.Form {
	case "set":
		return nil, fmt.Errorf("%s does not take a set", call)
	case "none":
		if e == ModuleEngine {
			return append([][]byte{[]byte(call)}, args...), nil
		}
		return lib(fn, nil), nil
	}
	lock := key
	if form.Form == "member" {
		lock = member(form.Suffix)
	}
	if e == ModuleEngine {
		return append([][]byte{[]byte(call), lock}, args...), nil
	}
	if form.Form == "key_only" {
		return lib(fn, [][]byte{lock}), nil
	}
	keys := [][]byte{lock}
	if cmd.TakesFloor || cmd.TakesWake {
		keys = append(keys, []byte(names.Floor(lock)))
	}
	if cmd.TakesWake {
		keys = append(keys, []byte(names.Wake(lock)))
	}
	return lib(fn, keys), nil
}

// build is a step's request for one server: the README's rule, and the client's own builder
// where it has one for the shape, which must make the same words (mismatch otherwise).
func build(c Conformance, e Engine, call string, form KeyForm, key []byte, args [][]byte) (words [][]byte, via string, mismatch string, err error) {
	readme, err := readmeWords(e, call, form, key, args)
	if err != nil {
		return nil, "", "", err
	}
	if c.Build == nil {
		return readme, "readme", "", nil
	}
	pkg, via, ok := c.Build(e, call, form, key, args)
	if !ok {
		return readme, "readme", "", nil
	}
	if fmt.Sprintf("%q", pkg) != fmt.Sprintf("%q", readme) {
		return pkg, via, fmt.Sprintf("the package's %s built %q, the README's rule %q", via, pkg, readme), nil
	}
	return pkg, via, "", nil
}

// norm is a normalised reply.
type norm struct {
	k     string // error nil int same new pttl bytes simple array
	text  string
	n     int64
	above bool
	items []norm
}

func relate(fences *[]int64, f int64) norm {
	for i, seen := range *fences {
		if seen == f {
			return norm{k: "same", n: int64(i)}
		}
	}
	above := true
	for _, seen := range *fences {
		if f <= seen {
			above = false
		}
	}
	*fences = append(*fences, f)
	return norm{k: "new", n: int64(len(*fences) - 1), above: above}
}

func plain(r Reply) norm {
	switch r.Kind {
	case Nil:
		return norm{k: "nil"}
	case Int:
		return norm{k: "int", n: r.Int}
	case Bulk:
		return norm{k: "bytes", text: string(r.Str)}
	case Simple:
		return norm{k: "simple", text: string(r.Str)}
	case ErrorReply:
		return norm{k: "error", text: string(r.Str)}
	}
	out := norm{k: "array"}
	for _, item := range r.Items {
		out.items = append(out.items, plain(item))
	}
	return out
}

func normalise(call string, r Reply, fences *[]int64) norm {
	switch {
	case r.Kind == Int && (call == "FENCEDLOCK.ACQUIRE" || call == "FENCEDLOCK.RAISE"):
		return relate(fences, r.Int)
	case r.Kind == Array && commands[call].CountsKeys:
		out := norm{k: "array"}
		for _, item := range r.Items {
			if item.Kind == Int {
				out.items = append(out.items, relate(fences, item.Int))
			} else {
				out.items = append(out.items, plain(item))
			}
		}
		return out
	case r.Kind == Array && call == "FENCEDLOCK.STATUS":
		semaphore := len(r.Items) > 3 && r.Items[3].Kind == Array
		out := norm{k: "array"}
		for i, item := range r.Items {
			switch {
			case i == 0 && item.Kind == Int:
				out.items = append(out.items, relate(fences, item.Int))
			case i == 2 && !semaphore && item.Kind == Int:
				out.items = append(out.items, norm{k: "pttl", n: item.Int})
			case i == 3 && semaphore:
				holders := norm{k: "array"}
				for _, entry := range item.Items {
					if entry.Kind != Array {
						holders.items = append(holders.items, plain(entry))
						continue
					}
					h := norm{k: "array"}
					for j, part := range entry.Items {
						switch {
						case j == 0 && part.Kind == Int:
							h.items = append(h.items, relate(fences, part.Int))
						case j == 1 && part.Kind == Int:
							h.items = append(h.items, norm{k: "pttl", n: part.Int})
						default:
							h.items = append(h.items, plain(part))
						}
					}
					holders.items = append(holders.items, h)
				}
				out.items = append(out.items, holders)
			default:
				out.items = append(out.items, plain(item))
			}
		}
		return out
	}
	return plain(r)
}

// pttlTolerance is how far two pttls may differ (README: within 150 ms).
const pttlTolerance = 150

func agrees(a, b norm) bool {
	if a.k != b.k {
		return false
	}
	switch a.k {
	case "pttl":
		if a.n < 0 || b.n < 0 {
			return a.n == b.n
		}
		d := a.n - b.n
		return d <= pttlTolerance && -d <= pttlTolerance
	case "array":
		if len(a.items) != len(b.items) {
			return false
		}
		for i := range a.items {
			if !agrees(a.items[i], b.items[i]) {
				return false
			}
		}
		return true
	case "new":
		return a.n == b.n && a.above == b.above
	}
	return a.n == b.n && a.text == b.text
}

func (n norm) String() string {
	switch n.k {
	case "error":
		return "(error) " + n.text
	case "nil":
		return "nil"
	case "int":
		return strconv.FormatInt(n.n, 10)
	case "same":
		return fmt.Sprintf("fence#%d", n.n)
	case "new":
		return fmt.Sprintf("fence#%d(new, above all: %v)", n.n, n.above)
	case "pttl":
		return fmt.Sprintf("pttl %d", n.n)
	case "bytes":
		return strconv.Quote(n.text)
	case "simple":
		return "+" + n.text
	}
	parts := make([]string, len(n.items))
	for i, item := range n.items {
		parts[i] = item.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

type stepOutcome struct {
	reply  norm
	waited *bool
}

func (o stepOutcome) agrees(p stepOutcome) bool {
	if (o.waited == nil) != (p.waited == nil) || (o.waited != nil && *o.waited != *p.waited) {
		return false
	}
	return agrees(o.reply, p.reply)
}

func (o stepOutcome) String() string {
	if o.waited == nil {
		return o.reply.String()
	}
	if *o.waited {
		return o.reply.String() + " (waited)"
	}
	return o.reply.String() + " (at once)"
}

func errorText(name string) string {
	for _, k := range c.Errors.Kinds {
		if k.Name == name {
			return k.Text
		}
	}
	return ""
}

// expectedDifferences checks each listed difference's exact pair (README, "Expected
// differences").
var expectedDifferences = map[string]func(module, library stepOutcome) bool{
	// The module raises above 2^53; the library replies the module's FencesExhausted text.
	"raise:above-2^53": func(m, l stepOutcome) bool {
		return m.reply.k == "new" && m.reply.above && l.reply.k == "error" && l.reply.text == errorText("FencesExhausted")
	},
	// The module replies nil after waiting; the library replies nil at once.
	"block:busy-key": func(m, l stepOutcome) bool {
		return m.reply.k == "nil" && m.waited != nil && *m.waited && l.reply.k == "nil" && l.waited != nil && !*l.waited
	},
}

// ReadCorpus reads protocol/corpus/name into corpus, failing t unless it reads and its schema
// is 1, the one the runners read.
func ReadCorpus(t testing.TB, name string, corpus any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(t), "protocol/corpus", name))
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if head.Schema != 1 {
		t.Fatalf("%s: corpus schema %d, this runner reads 1", name, head.Schema)
	}
	if err := json.Unmarshal(raw, corpus); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Engine is how a server serves the contract.
type Engine string

// The engines the corpus runs on.
const (
	ModuleEngine Engine = "module"
	Functions    Engine = "functions"
	Script       Engine = "script"
)

// Conformance is the client under test, for RunConformance.
type Conformance struct {
	// Dial opens a connection of the client to addr, as the server's default (application)
	// user, closed when t ends.
	Dial func(t *testing.T, addr string) Sender
	// Build, where set, is the client's own builder: for a step it has one for, the words it
	// sends (via names the builder, for the log) and true; they must be the README's.
	Build func(e Engine, call string, form KeyForm, key []byte, args [][]byte) (words [][]byte, via string, ok bool)
}

// The contract as the runner reads it: the package's embedded copy, its key names, commands
// by name and the library as a script.
var (
	c, contractErr = contract.Parse(contract.JSON)
	names          *keys.Keys
	commands       = map[string]contract.Command{}
	script         string
)

func init() {
	if contractErr != nil {
		return
	}
	names = keys.New(c)
	for _, cmd := range c.Commands {
		commands[cmd.Name] = cmd
	}
	_, script, _ = strings.Cut(contract.Library, "\n")
}

// RunConformance runs every case of protocol/corpus/conformance.json on three servers it
// starts (module, Functions library, script) through the client's connections, each a subtest
// of t.
func RunConformance(t *testing.T, client Conformance) {
	if contractErr != nil {
		t.Fatal(contractErr)
	}
	var corpus conformanceCorpus
	ReadCorpus(t, "conformance.json", &corpus)
	var listed []string
	for _, d := range corpus.Differences {
		listed = append(listed, d.Case)
	}
	var known []string
	for name := range expectedDifferences {
		known = append(known, name)
	}
	sort.Strings(listed)
	sort.Strings(known)
	if fmt.Sprint(listed) != fmt.Sprint(known) {
		t.Fatalf("the corpus lists differences %v, this runner checks %v", listed, known)
	}
	type target struct {
		name string
		e    Engine
		srv  *Server
		conn Sender
	}
	targets := []*target{{name: "module", e: ModuleEngine}, {name: "functions", e: Functions}, {name: "script", e: Script}}
	setups := []Setup{Module, Managed, NoFunction}
	for i, tg := range targets {
		tg.srv = Start(t, setups[i])
		tg.conn = client.Dial(t, tg.srv.Addr())
	}
	// The package's library, loaded by the default (application) user; FUNCTION is denied on
	// the script server, where the package's script is loaded instead and must be the SHA1 the
	// package sends.
	if r, err := targets[1].conn.Send([][]byte{[]byte("FUNCTION"), []byte("LOAD"), []byte("REPLACE"), []byte(contract.Library)}); err != nil || r.Kind != Bulk || string(r.Str) != c.Library.Name {
		t.Fatalf("FUNCTION LOAD: %+v %v", r, err)
	}
	if r, _ := targets[2].conn.Send([][]byte{[]byte("FUNCTION"), []byte("LIST")}); r.Kind != ErrorReply {
		t.Fatal("FUNCTION is not denied on the script server")
	}
	if r, err := targets[2].conn.Send([][]byte{[]byte("SCRIPT"), []byte("LOAD"), []byte(script)}); err != nil || string(r.Str) != c.Library.ScriptSHA1 {
		t.Fatalf("SCRIPT LOAD replied %+v %v, the package sends %s", r, err, c.Library.ScriptSHA1)
	}
	seenNames := map[string]bool{}
	seenKeys := map[string]bool{}
	for _, cs := range corpus.Cases {
		if seenNames[cs.Name] || seenKeys[string(cs.Key)] {
			t.Fatalf("case %s: names and keys must be unique (the servers are shared)", cs.Name)
		}
		seenNames[cs.Name], seenKeys[string(cs.Key)] = true, true
	}
	vias := map[string]int{}
	passed, steps := 0, 0
	start := time.Now()
	for _, cs := range corpus.Cases {
		ok := t.Run(cs.Name, func(t *testing.T) {
			fences := make([][]int64, len(targets))
			differ := map[int]bool{}
			for _, d := range corpus.Differences {
				if d.Case == cs.Name {
					differ[d.Step] = true
				}
			}
			for i, step := range cs.Steps {
				steps++
				at := fmt.Sprintf("%s step %d", cs.Name, i)
				fields := make([]string, 0, len(step))
				for f := range step {
					fields = append(fields, f)
				}
				sort.Strings(fields)
				switch fs := strings.Join(fields, ","); {
				case fs == "sleep_ms":
					var ms int
					if err := json.Unmarshal(step["sleep_ms"], &ms); err != nil || ms < 0 {
						t.Fatalf("%s: bad sleep_ms", at)
					}
					time.Sleep(time.Duration(ms) * time.Millisecond)
				case fs == "raw":
					var ws []json.RawMessage
					if err := json.Unmarshal(step["raw"], &ws); err != nil || len(ws) == 0 {
						t.Fatalf("%s: bad raw step", at)
					}
					for j, tg := range targets {
						words := make([][]byte, len(ws))
						for k, w := range ws {
							var err error
							if words[k], err = resolveArg(w, cs.Key, fences[j]); err != nil {
								t.Fatalf("%s: %v", at, err)
							}
						}
						if r, err := tg.conn.Send(words); err != nil || r.Kind == ErrorReply {
							t.Fatalf("%s: set-up %q failed on the %s server: %s %v", at, words, tg.name, r.Str, err)
						}
					}
				case fs == "args,call,keys" || fs == "args,block_ms,call,keys":
					var call string
					var args []json.RawMessage
					if json.Unmarshal(step["call"], &call) != nil || json.Unmarshal(step["args"], &args) != nil {
						t.Fatalf("%s: bad call step", at)
					}
					form, err := parseKeyForm(step["keys"])
					if err != nil {
						t.Fatalf("%s: %v", at, err)
					}
					blockMs := int64(-1)
					if b, ok := step["block_ms"]; ok {
						if err := json.Unmarshal(b, &blockMs); err != nil || blockMs <= 0 {
							t.Fatalf("%s: bad block_ms", at)
						}
					}
					outcomes := make([]stepOutcome, len(targets))
					requests := make([]string, len(targets))
					for j, tg := range targets {
						resolved := make([][]byte, len(args))
						for k, a := range args {
							if resolved[k], err = resolveArg(a, cs.Key, fences[j]); err != nil {
								t.Fatalf("%s: %v", at, err)
							}
						}
						words, via, mismatch, err := build(client, tg.e, call, form, cs.Key, resolved)
						if err != nil {
							t.Fatalf("%s: %v", at, err)
						}
						if mismatch != "" {
							t.Errorf("%s (%s): %s", at, tg.name, mismatch)
						}
						vias[via]++
						requests[j] = fmt.Sprintf("%q", words)
						sent := time.Now()
						r, err := tg.conn.Send(words)
						if err != nil {
							t.Fatalf("%s: the %s server: %v", at, tg.name, err)
						}
						o := stepOutcome{reply: normalise(call, r, &fences[j])}
						if blockMs > 0 {
							waited := time.Since(sent) >= time.Duration(blockMs)*time.Millisecond*3/4
							o.waited = &waited
						}
						outcomes[j] = o
					}
					for j := 1; j < len(targets); j++ {
						agree := outcomes[0].agrees(outcomes[j])
						report := func(what string) {
							t.Errorf("%s: %s\n    module request: %s\n    %s request: %s\n    module: %v\n    %s: %v",
								at, what, requests[0], targets[j].name, requests[j], outcomes[0], targets[j].name, outcomes[j])
						}
						switch {
						case differ[i] && agree:
							report("the listed difference did not show")
						case differ[i] && !expectedDifferences[cs.Name](outcomes[0], outcomes[j]):
							report("differs otherwise than listed")
						case !differ[i] && !agree:
							report("disagrees with the module")
						}
					}
				default:
					t.Fatalf("%s: unknown step fields %s", at, fs)
				}
			}
		})
		if ok {
			passed++
		}
	}
	t.Logf("conformance corpus on %s: %d of %d cases passed, %d steps, on module / functions / script; requests built by %v; in %v",
		Flavor(), passed, len(corpus.Cases), steps, vias, time.Since(start).Round(time.Millisecond))
}
