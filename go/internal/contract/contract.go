// Package contract holds the wire contract as the protocol crate exports it
// (protocol/contract.json) and the Functions library (protocol/src/functions.lua), embedded
// byte for byte (copied by `go generate`, see internal/gen), and parsed once. The client takes
// every fact of the contract from here, never from a hand-written copy, so a change of the
// contract reaches it by regenerating, and the vectors test it.
package contract

import (
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// JSON is contract.json as the protocol crate rendered it.
//
//go:embed contract.json
var JSON []byte

// Library is functions.lua, the Functions library's source (`FUNCTION LOAD`).
//
//go:embed functions.lua
var Library string

// GuardJSON is guard/contract.json, the SQL contract of the resource guard (package guard
// builds its statements to it; its tests compare them).
//
//go:embed guard.json
var GuardJSON []byte

// Bytes is a byte string of the contract: a JSON string when valid UTF-8, else {"hex": …}.
type Bytes []byte

// UnmarshalJSON reads either form.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*b = Bytes(s)
		return nil
	}
	var h struct {
		Hex *string `json:"hex"`
	}
	if err := json.Unmarshal(data, &h); err != nil || h.Hex == nil {
		return fmt.Errorf("contract: not a byte string: %s", data)
	}
	raw, err := hex.DecodeString(*h.Hex)
	if err != nil {
		return fmt.Errorf("contract: bad hex %q: %w", *h.Hex, err)
	}
	*b = raw
	return nil
}

// Int is an integer of the contract: a JSON number up to 2^53-1, else {"int": "<decimal>"},
// so no fence is rounded through a float.
type Int int64

// UnmarshalJSON reads either form.
func (n *Int) UnmarshalJSON(data []byte) error {
	var w struct {
		Int *string `json:"int"`
	}
	text := string(data)
	if err := json.Unmarshal(data, &w); err == nil && w.Int != nil {
		text = *w.Int
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return fmt.Errorf("contract: not an integer: %s", data)
	}
	*n = Int(v)
	return nil
}

// Command is one command of the contract.
type Command struct {
	Name       string `json:"name"`
	Arity      int    `json:"arity"`
	CountsKeys bool   `json:"counts_keys"`
	Internal   bool   `json:"internal"`
	Function   string `json:"function"`
	TakesFloor bool   `json:"takes_floor"`
	TakesWake  bool   `json:"takes_wake"`
	Options    []struct {
		Word string `json:"word"`
	} `json:"options"`
}

// ErrorKind is one of the module's error replies, told by its code and the start of its detail.
type ErrorKind struct {
	Name       string `json:"name"`
	Code       string `json:"code"`
	Prefix     string `json:"prefix"`
	BadRequest bool   `json:"bad_request"`
	Text       string `json:"text"`
}

// Cause is one kind of the Rust client's Cause: the failure contract.
type Cause struct {
	Name        string   `json:"name"`
	Retryable   bool     `json:"retryable"`
	Outage      bool     `json:"outage"`
	Codes       []string `json:"codes"`
	ClientCodes []string `json:"client_codes"`
	ErrDetails  []string `json:"err_details"`
}

// KeyPattern is a prefix of the internal keys.
type KeyPattern struct {
	Prefix string `json:"prefix"`
	TagLen int    `json:"tag_len"`
}

// Script is a script of the contract: its text and its SHA1.
type Script struct {
	Text string `json:"text"`
	SHA1 string `json:"sha1"`
}

// Contract is the part of contract.json the client reads.
type Contract struct {
	Format   int       `json:"format"`
	Commands []Command `json:"commands"`
	Words    struct {
		Block         string `json:"block"`
		Label         string `json:"label"`
		Permits       string `json:"permits"`
		Shared        string `json:"shared"`
		SharedPermits int    `json:"shared_permits"`
	} `json:"words"`
	Limits struct {
		MaxTokenLen    int `json:"max_token_len"`
		MaxLabelLen    int `json:"max_label_len"`
		MaxPermits     int `json:"max_permits"`
		MaxAcquireKeys int `json:"max_acquire_keys"`
		MaxMaxTTLMs    Int `json:"max_max_ttl_ms"`
		MaxBlockMs     Int `json:"max_block_ms"`
		MaxFence       Int `json:"max_fence"`
		Slots          int `json:"slots"`
	} `json:"limits"`
	Errors struct {
		Kinds []ErrorKind `json:"kinds"`
	} `json:"errors"`
	Causes struct {
		Kinds []Cause `json:"kinds"`
	} `json:"causes"`
	Keys struct {
		Slots        int        `json:"slots"`
		ModuleFloor  KeyPattern `json:"module_floor"`
		LibraryFloor KeyPattern `json:"library_floor"`
		Wake         KeyPattern `json:"wake"`
		Record       KeyPattern `json:"record"`
	} `json:"keys"`
	Periodic struct {
		RetentionMs Int    `json:"retention_ms"`
		Read        Script `json:"read"`
		Write       Script `json:"write"`
	} `json:"periodic"`
	Library struct {
		Name            string            `json:"name"`
		Version         int               `json:"version"`
		VersionFunction string            `json:"version_function"`
		SourceSHA1      string            `json:"source_sha1"`
		ScriptSHA1      string            `json:"script_sha1"`
		Functions       map[string]string `json:"functions"`
		TakesFloor      []string          `json:"takes_floor"`
		TakesWake       []string          `json:"takes_wake"`
		MaxTTLMs        Int               `json:"max_ttl_ms"`
	} `json:"library"`
}

// Parse reads a contract.json.
func Parse(data []byte) (*Contract, error) {
	var c Contract
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("contract.json: %w", err)
	}
	if c.Format != 1 {
		return nil, fmt.Errorf("contract.json: format %d, this package reads format 1", c.Format)
	}
	return &c, nil
}
