package guard

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// MaxFence is the largest fence: PostgreSQL's bigint and SQLite's INTEGER are signed 64-bit,
// and the lock servers never hand out a fence above it.
const MaxFence = math.MaxInt64

// The kinds of refusal, for errors.Is; errors.As gives the typed error with its fields. They
// mirror the Rust crate's Error enum, and their texts are the contract's.
var (
	// ErrStale: the row carries a newer fence, so a newer holder has claimed or written it.
	// This holder must abandon its attempt; nothing was written to the row.
	ErrStale = errors.New("guard: stale fence")
	// ErrNotFound: no row has the id (insert it first, fence 0 or the creator's).
	ErrNotFound = errors.New("guard: no row with that id")
	// ErrNullFence: the row's fence column is NULL, so there is no fence to compare.
	ErrNullFence = errors.New("guard: NULL fence")
	// ErrUnknownColumn: a name that is no column of the table (SQLite; PostgreSQL's own
	// error, SQLSTATE 42703, comes from the driver).
	ErrUnknownColumn = errors.New("guard: unknown column")
	// ErrInvalidFence: a fence outside 1..MaxFence. 0 is the column's default: a "fence" of
	// 0 would pass the check on every untouched row.
	ErrInvalidFence = errors.New("guard: invalid fence")
	// ErrIdentifier: a table or column name the package refuses to quote.
	ErrIdentifier = errors.New("guard: invalid SQL identifier")
)

// StaleError is a claim or write refused because the row carries a newer fence.
type StaleError struct {
	Resource     string // the table's ResourceLabel
	Fence        uint64 // the caller's fence
	LastFence    uint64 // the row's fence as read right after the refusal, if HasLastFence
	HasLastFence bool
}

func (e *StaleError) Error() string {
	if e.HasLastFence {
		return fmt.Sprintf("stale fence %d on %s: the row carries fence %d (a newer holder claimed or wrote it)",
			e.Fence, e.Resource, e.LastFence)
	}
	return fmt.Sprintf("stale fence %d on %s: a newer holder claimed or wrote the row", e.Fence, e.Resource)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// NotFoundError is a claim or write on an id no row has.
type NotFoundError struct{ Resource string }

func (e *NotFoundError) Error() string { return "no row with that id in " + e.Resource }

// Is makes errors.Is(err, ErrNotFound) hold.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// NullFenceError is a row whose fence column is NULL: nothing was written. Set the NULLs to
// 0 and make the column NOT NULL.
type NullFenceError struct{ Table, Column string }

func (e *NullFenceError) Error() string {
	return fmt.Sprintf("the fence column %s of %s is NULL on that row: nothing written", strconv.Quote(e.Column), e.Table)
}

// Is makes errors.Is(err, ErrNullFence) hold.
func (e *NullFenceError) Is(target error) bool { return target == ErrNullFence }

// UnknownColumnError is a name that is no column of the table, refused before anything ran.
type UnknownColumnError struct{ Table, Column string }

func (e *UnknownColumnError) Error() string {
	return fmt.Sprintf("no column %s in %s", strconv.Quote(e.Column), e.Table)
}

// Is makes errors.Is(err, ErrUnknownColumn) hold.
func (e *UnknownColumnError) Is(target error) bool { return target == ErrUnknownColumn }

// InvalidFenceError is a fence outside 1..MaxFence, refused before any statement ran.
type InvalidFenceError struct{ Fence uint64 }

func (e *InvalidFenceError) Error() string {
	return fmt.Sprintf("fence %d is not a fence: fences are 1..=%d", e.Fence, uint64(MaxFence))
}

// Is makes errors.Is(err, ErrInvalidFence) hold.
func (e *InvalidFenceError) Is(target error) bool { return target == ErrInvalidFence }

// IdentifierError is a name the package refuses to quote (empty, a NUL byte, too long).
type IdentifierError struct{ Name, Reason string }

func (e *IdentifierError) Error() string {
	return fmt.Sprintf("invalid SQL identifier %s: %s", strconv.Quote(e.Name), e.Reason)
}

// Is makes errors.Is(err, ErrIdentifier) hold.
func (e *IdentifierError) Is(target error) bool { return target == ErrIdentifier }

// bindFence is the fence as the signed 64-bit value the statements bind.
func bindFence(fence uint64) (int64, error) {
	if fence == 0 || fence > MaxFence {
		return 0, &InvalidFenceError{Fence: fence}
	}
	return int64(fence), nil
}
