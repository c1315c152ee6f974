package fencedlock

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"example.invalid/fencedlock/go/internal/contract"
	"example.invalid/fencedlock/go/internal/keys"
)

// The contract's facts the package uses, read from the embedded contract.json at init (never
// restated by hand: contract_test.go checks them against the vectors the protocol crate
// computed). A contract that cannot be read leaves protoErr set, which NewLocker returns.
var proto, protoErr = loadProtocol()

// The command names of the contract, as the module serves them.
const (
	cmdAcquire = "FENCEDLOCK.ACQUIRE"
	cmdRenew   = "FENCEDLOCK.RENEW"
	cmdRelease = "FENCEDLOCK.RELEASE"
	cmdStatus  = "FENCEDLOCK.STATUS"
)

// protocol is what the package reads of the contract.
type protocol struct {
	c *contract.Contract
	// keys names the keys beside a lock key (floor, wake-up list, run record).
	keys *keys.Keys
	// commands by name, and whether each takes the floor key and the wake-up list.
	commands map[string]contract.Command
	// The option words of ACQUIRE.
	block, label, permits, shared string
	// script is the library without its first line (#!lua name=…), for EVAL/EVALSHA.
	script string
}

func loadProtocol() (*protocol, error) {
	c, err := contract.Parse(contract.JSON)
	if err != nil {
		return nil, err
	}
	p := &protocol{c: c, keys: keys.New(c), commands: map[string]contract.Command{}}
	for _, cmd := range c.Commands {
		p.commands[cmd.Name] = cmd
	}
	for _, name := range []string{cmdAcquire, cmdRenew, cmdRelease, cmdStatus} {
		if _, ok := p.commands[name]; !ok {
			return nil, fmt.Errorf("contract.json has no command %s", name)
		}
		if c.Library.Functions[name] == "" {
			return nil, fmt.Errorf("contract.json names no library function for %s", name)
		}
	}
	p.block, p.label, p.permits, p.shared = c.Words.Block, c.Words.Label, c.Words.Permits, c.Words.Shared
	nl := strings.IndexByte(contract.Library, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("functions.lua has no first line")
	}
	p.script = contract.Library[nl+1:]
	// The script is named by its SHA1 in EVALSHA: the contract's must be this script's.
	sum := sha1.Sum([]byte(p.script))
	if got := hex.EncodeToString(sum[:]); got != c.Library.ScriptSHA1 {
		return nil, fmt.Errorf("functions.lua's script SHA1 %s is not contract.json's %s: run go generate", got, c.Library.ScriptSHA1)
	}
	return p, nil
}

// keySlot is the key's cluster slot (internal/keys).
func keySlot(key []byte) int { return proto.keys.Slot(key) }

// floorTag is the library's floor tag of the key's slot.
func floorTag(key []byte) string { return proto.keys.FloorTag(key) }

// floorKey is the library's floor key of the key's slot: the one key it keeps the slot's
// fence floor in (it refuses any other).
func floorKey(key []byte) string { return proto.keys.Floor(key) }

// wakeKey is the key's wake-up list: a release on the library pushes to it, and a waiter
// BLPOPs on it.
func wakeKey(key []byte) string { return proto.keys.Wake(key) }

// recordKey is the key's periodic run record, beside it in its slot.
func recordKey(key []byte) string { return proto.keys.Record(key) }

// moduleFloorKey is the module's floor key of the key's slot (the vectors check it).
func moduleFloorKey(key []byte) string { return proto.keys.ModuleFloor(key) }

// engine is how a server serves the contract.
type engine int

const (
	engineUnknown engine = iota
	// engineModule: the module's FENCEDLOCK.* commands.
	engineModule
	// engineFunctions: the Functions library by FCALL.
	engineFunctions
	// engineScript: the library's source as a script by EVALSHA, where FUNCTION is denied.
	engineScript
)

func (e engine) String() string {
	switch e {
	case engineModule:
		return "module"
	case engineFunctions:
		return "functions"
	case engineScript:
		return "script"
	}
	return "unknown"
}

// request is the command on key with rest after it, in the engine's form. The library forms
// name the key's floor key where the function takes it, and its wake-up list for a release
// and for a waiter's ACQUIRE (waiting).
func request(e engine, command string, key []byte, rest []any, waiting bool) []any {
	if e == engineModule {
		return append([]any{command, key}, rest...)
	}
	cmd := proto.commands[command]
	wake := waiting || cmd.TakesWake
	keys := []any{key}
	if cmd.TakesFloor || wake {
		keys = append(keys, floorKey(key))
	}
	if wake {
		keys = append(keys, wakeKey(key))
	}
	return libraryCall(e, command, keys, rest)
}

// libraryCall is the library's function for command on keys with rest after them: FCALL fn
// numkeys keys… rest…, or in the script form EVALSHA sha numkeys keys… fn rest….
func libraryCall(e engine, command string, keys, rest []any) []any {
	fn := proto.c.Library.Functions[command]
	var words []any
	if e == engineScript {
		words = append([]any{"EVALSHA", proto.c.Library.ScriptSHA1, strconv.Itoa(len(keys))}, keys...)
		words = append(words, fn)
	} else {
		words = append([]any{"FCALL", fn, strconv.Itoa(len(keys))}, keys...)
	}
	return append(words, rest...)
}

// acquireRequest is what an ACQUIRE asks for.
type acquireRequest struct {
	key     []byte
	token   []byte
	ttlMs   int64
	label   []byte
	permits int
	shared  bool
}

// acquireWords is the ACQUIRE of req in the engine's form: token, ttl, then the options in the
// contract's order (LABEL, PERMITS only above 1, SHARED, BLOCK last; blockMs < 0: none).
func acquireWords(e engine, req acquireRequest, waiting bool, blockMs int64) []any {
	rest := []any{req.token, strconv.FormatInt(req.ttlMs, 10)}
	if len(req.label) > 0 {
		rest = append(rest, proto.label, req.label)
	}
	if req.permits > 1 {
		rest = append(rest, proto.permits, strconv.Itoa(req.permits))
	}
	if req.shared {
		rest = append(rest, proto.shared)
	}
	if blockMs >= 0 {
		rest = append(rest, proto.block, strconv.FormatInt(blockMs, 10))
	}
	return request(e, cmdAcquire, req.key, rest, waiting)
}

// cmdAcquireAll is the command that takes several keys of one slot for one token.
const cmdAcquireAll = "FENCEDLOCK.ACQUIREALL"

// acquireAllWords is ACQUIREALL of keys for req's token and options, in the engine's form:
// the module's `numkeys key… token ttl options`, or the library's function with the keys and
// then the first key's floor key (the caller keeps the keys in one slot).
func acquireAllWords(e engine, keys [][]byte, req acquireRequest) []any {
	rest := acquireWords(engineModule, req, false, -1)[2:] // token, ttl, options
	if e == engineModule {
		words := []any{cmdAcquireAll, strconv.Itoa(len(keys))}
		for _, k := range keys {
			words = append(words, k)
		}
		return append(words, rest...)
	}
	all := make([]any, 0, len(keys)+1)
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, floorKey(keys[0]))
	return libraryCall(e, cmdAcquireAll, all, rest)
}
