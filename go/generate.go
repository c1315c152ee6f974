package fencedlock

// The contract and the library are copied in from ../protocol (see internal/gen).
//go:generate go run ./internal/gen
