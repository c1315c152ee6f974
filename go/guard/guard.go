package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
)

// StaleRefusalsTotal is the counter the Rust crate reports refusals under (labelled
// ResourceLabelName with the table's ResourceLabel): export Guard.Refusals, or count in a
// StaleHook, under this name so every language's refusals add up in one series.
const (
	StaleRefusalsTotal = "fencedlock_fence_refusals_total"
	ResourceLabelName  = "resource"
)

// Querier runs statements: *sql.DB, *sql.Tx and *sql.Conn all do. Pass the transaction the
// holder reads and writes in, so the claim's row lock lasts until it commits.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Guard fences writes to the rows of one table in one dialect. It is safe for concurrent use.
type Guard struct {
	dialect  Dialect
	table    Table
	onStale  func(ctx context.Context, step string, err *StaleError)
	refusals atomic.Uint64
}

// Option configures a Guard.
type Option func(*Guard)

// WithStaleHook calls hook for every refusal for a stale fence, after it is counted, with the
// step ("claim" or "write"): for a metrics library or a log line. It must not block.
func WithStaleHook(hook func(ctx context.Context, step string, err *StaleError)) Option {
	return func(g *Guard) { g.onStale = hook }
}

// New is a Guard for table in dialect. Names are checked here, so a bad one fails at start
// rather than on the first write.
func New(dialect Dialect, table Table, opts ...Option) (*Guard, error) {
	if !dialect.valid() {
		return nil, fmt.Errorf("guard: unknown dialect %v", dialect)
	}
	table = table.withDefaults()
	if err := table.check(); err != nil {
		return nil, err
	}
	g := &Guard{dialect: dialect, table: table}
	for _, opt := range opts {
		opt(g)
	}
	return g, nil
}

// Table is the table as the Guard addresses it, defaults filled in.
func (g *Guard) Table() Table { return g.table }

// Refusals is how many claims and writes this Guard refused for a stale fence: each one a
// stale holder caught, the measure of how often pauses outlive leases.
func (g *Guard) Refusals() uint64 { return g.refusals.Load() }

// AddFenceColumn is the schema step: adds the fence column (NOT NULL DEFAULT 0) unless the
// table has it. An existing column is left as it is.
func (g *Guard) AddFenceColumn(ctx context.Context, q Querier) error {
	if g.dialect == Postgres {
		stmt, err := addFenceColumnIfAbsentSQL(g.table)
		if err != nil {
			return err
		}
		_, err = q.ExecContext(ctx, stmt)
		return err
	}
	var one int
	err := q.QueryRowContext(ctx, fenceColumnPresentSQL, g.table.Name, g.schemaArg(), g.table.Fence).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	stmt, err := addFenceColumnSQL(g.table, SQLite)
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, stmt)
	return err
}

// Claim is the first thing after acquiring, in the transaction that reads the row: it raises
// the row's fence to fence unless a newer one is there (and locks the row until the
// transaction ends), so no older holder can write it afterwards. *StaleError (ErrStale) if
// the row carries a newer fence, ErrNotFound without the row, ErrNullFence for a NULL fence.
func (g *Guard) Claim(ctx context.Context, q Querier, id any, fence uint64) error {
	var last int64
	return g.ClaimReturning(ctx, q, id, fence, nil, &last)
}

// ClaimReturning is Claim that scans the columns (the fence if none) of the claimed row into
// dest: the state this holder inherits.
func (g *Guard) ClaimReturning(ctx context.Context, q Querier, id any, fence uint64, columns []string, dest ...any) error {
	bound, err := bindFence(fence)
	if err != nil {
		return err
	}
	stmt, err := claimSQL(g.table, g.dialect, columns)
	if err != nil {
		return err
	}
	if err := g.checkColumns(ctx, q, columns); err != nil {
		return err
	}
	err = q.QueryRowContext(ctx, stmt, bound, id).Scan(dest...)
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	stored, err := g.storedFence(ctx, q, id)
	if err != nil {
		return err
	}
	return g.refused(ctx, "claim", fence, stored, false)
}

// Write is a guarded write: u's assignments plus fence column = fence, where the fence column
// is at most fence (so one holder may write many times) and u's precondition holds, in one
// statement. It reports whether the row was updated: false with a nil error means the fence
// is current but the precondition did not hold (the state moved on: re-read and decide).
// *StaleError (ErrStale) if the row carries a newer fence, ErrNotFound, ErrNullFence.
func (g *Guard) Write(ctx context.Context, q Querier, id any, fence uint64, u *Update) (bool, error) {
	bound, err := bindFence(fence)
	if err != nil {
		return false, err
	}
	stmt, values, err := writeSQL(g.table, g.dialect, u, nil)
	if err != nil {
		return false, err
	}
	if err := g.checkColumns(ctx, q, u.columns()); err != nil {
		return false, err
	}
	res, err := q.ExecContext(ctx, stmt, append([]any{bound, id}, values...)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return err == nil, err
	}
	return false, g.refusedWrite(ctx, q, id, fence, u)
}

// WriteReturning is Write that scans the columns of the updated row into dest.
func (g *Guard) WriteReturning(ctx context.Context, q Querier, id any, fence uint64, u *Update, columns []string, dest ...any) (bool, error) {
	bound, err := bindFence(fence)
	if err != nil {
		return false, err
	}
	if len(columns) == 0 {
		return g.Write(ctx, q, id, fence, u)
	}
	stmt, values, err := writeSQL(g.table, g.dialect, u, columns)
	if err != nil {
		return false, err
	}
	if err := g.checkColumns(ctx, q, append(u.columns(), columns...)); err != nil {
		return false, err
	}
	err = q.QueryRowContext(ctx, stmt, append([]any{bound, id}, values...)...).Scan(dest...)
	if !errors.Is(err, sql.ErrNoRows) {
		return err == nil, err
	}
	return false, g.refusedWrite(ctx, q, id, fence, u)
}

// ClaimSQL is the statement Claim runs: for logs, EXPLAIN, or statements of your own.
func (g *Guard) ClaimSQL(returning ...string) (string, error) {
	return claimSQL(g.table, g.dialect, returning)
}

// WriteSQL is the statement Write (or WriteReturning) runs for u, and the values it binds
// from parameter 3 on (the fence is 1, the id 2).
func (g *Guard) WriteSQL(u *Update, returning ...string) (string, []any, error) {
	return writeSQL(g.table, g.dialect, u, returning)
}

func (g *Guard) refusedWrite(ctx context.Context, q Querier, id any, fence uint64, u *Update) error {
	stored, err := g.storedFence(ctx, q, id)
	if err != nil {
		return err
	}
	return g.refused(ctx, "write", fence, stored, u.hasPrecondition())
}

// stored is the row's fence as read right after a statement matched no row.
type stored struct {
	found bool
	fence sql.NullInt64
}

func (g *Guard) storedFence(ctx context.Context, q Querier, id any) (stored, error) {
	stmt, err := fenceOfSQL(g.table, g.dialect)
	if err != nil {
		return stored{}, err
	}
	var s stored
	switch err := q.QueryRowContext(ctx, stmt, id).Scan(&s.fence); {
	case errors.Is(err, sql.ErrNoRows):
		return stored{}, nil
	case err != nil:
		return stored{}, err
	}
	s.found = true
	return s, nil
}

// refused tells why a statement matched no row: stale (counted) for a newer fence, NULL
// fence, nil for a write whose precondition failed at a current fence, else not found (the
// row was absent when the statement ran).
func (g *Guard) refused(ctx context.Context, step string, fence uint64, s stored, precondition bool) error {
	switch {
	case !s.found:
		return &NotFoundError{Resource: g.table.ResourceLabel()}
	case !s.fence.Valid:
		return &NullFenceError{Table: g.table.qualifiedName(), Column: g.table.Fence}
	case s.fence.Int64 >= 0 && uint64(s.fence.Int64) > fence:
		err := &StaleError{Resource: g.table.ResourceLabel(), Fence: fence, LastFence: uint64(s.fence.Int64), HasLastFence: true}
		g.refusals.Add(1)
		if g.onStale != nil {
			g.onStale(ctx, step, err)
		}
		return err
	case precondition:
		return nil
	}
	return &NotFoundError{Resource: g.table.ResourceLabel()}
}

// checkColumns refuses, on SQLite, a name that is no column of the table: SQLite would read
// a double-quoted unknown name in a condition as a string literal and compare a constant.
// PostgreSQL refuses such a name itself.
func (g *Guard) checkColumns(ctx context.Context, q Querier, names []string) error {
	if g.dialect != SQLite {
		return nil
	}
	names = append([]string{g.table.ID, g.table.Fence}, names...)
	args := append(make([]any, 0, len(names)+2), g.table.Name, g.schemaArg())
	for _, n := range names {
		args = append(args, n)
	}
	var unknown string
	switch err := q.QueryRowContext(ctx, unknownColumnSQL(len(names)), args...).Scan(&unknown); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return &UnknownColumnError{Table: g.table.qualifiedName(), Column: unknown}
}

// schemaArg is the table's schema as SQLite's pragma functions take it: NULL for its search order.
func (g *Guard) schemaArg() any {
	if g.table.Schema == "" {
		return nil
	}
	return g.table.Schema
}
