package guardtest

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"example.invalid/fencedlock/go/guard"
	"github.com/jackc/pgx/v5/pgconn"
)

// hookLog records the stale hook's calls.
type hookLog struct {
	mu    sync.Mutex
	steps []string
	errs  []*guard.StaleError
}

func (h *hookLog) hook(_ context.Context, step string, err *guard.StaleError) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.steps = append(h.steps, step)
	h.errs = append(h.errs, err)
}

func TestClaimThenWriteInOneTransaction(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d guard.Dialect) {
		ctx := context.Background()
		g := jobsTable(t, db, d)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var status string
		if err := g.ClaimReturning(ctx, tx, 1, 5, []string{"status"}, &status); err != nil || status != "PENDING" {
			t.Fatalf("claim: %q, %v", status, err)
		}
		applied, err := g.Write(ctx, tx, 1, 5, guard.NewUpdate().Set("status", "SENT").Set("note", "by 5").When("status", "PENDING"))
		if err != nil || !applied {
			t.Fatalf("write: %v, %v", applied, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if r := readRow(t, db, 1); r.Status != "SENT" || r.Note.String != "by 5" || r.Fence != 5 {
			t.Errorf("row 1 after the write: %+v", r)
		}
		// The same holder may write again with its fence; a claim returns the fence by default.
		var fence int64
		if err := g.ClaimReturning(ctx, db, 1, 5, nil, &fence); err != nil || fence != 5 {
			t.Errorf("a second claim at the same fence: %d, %v", fence, err)
		}
		var note string
		applied, err = g.WriteReturning(ctx, db, 1, 6, guard.NewUpdate().Set("note", "by 6"), []string{"note"}, &note)
		if err != nil || !applied || note != "by 6" {
			t.Errorf("write returning at a newer fence: %v %q %v", applied, note, err)
		}
		// A precondition that no longer holds at a current fence: not applied, nothing scanned.
		note = "untouched"
		applied, err = g.WriteReturning(ctx, db, 1, 6, guard.NewUpdate().Set("note", "again").When("status", "PENDING"), []string{"note"}, &note)
		if err != nil || applied || note != "untouched" {
			t.Errorf("write returning with a failed precondition: %v %q %v", applied, note, err)
		}
		if g.Refusals() != 0 {
			t.Errorf("%d refusals counted with no stale fence", g.Refusals())
		}
		if r := readRow(t, db, 2); r.Fence != 0 || r.Status != "PENDING" {
			t.Errorf("row 2 was touched: %+v", r)
		}
	})
}

func TestAStaleFenceIsRefusedCountedAndWritesNothing(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d guard.Dialect) {
		ctx := context.Background()
		var h hookLog
		g := jobsTable(t, db, d, guard.WithStaleHook(h.hook))
		if err := g.Claim(ctx, db, 1, 8); err != nil {
			t.Fatal(err)
		}
		applied, err := g.Write(ctx, db, 1, 7, guard.NewUpdate().Set("status", "LATE"))
		var stale *guard.StaleError
		if applied || !errors.As(err, &stale) || !errors.Is(err, guard.ErrStale) {
			t.Fatalf("a write at fence 7 after a claim at 8: %v, %v", applied, err)
		}
		want := guard.StaleError{Resource: "invoice_jobs", Fence: 7, LastFence: 8, HasLastFence: true}
		if *stale != want {
			t.Errorf("stale error %+v, want %+v", *stale, want)
		}
		if err := g.Claim(ctx, db, 1, 3); !errors.Is(err, guard.ErrStale) {
			t.Errorf("a claim at fence 3 after 8: %v", err)
		}
		var status string
		if _, err := g.WriteReturning(ctx, db, 1, 2, guard.NewUpdate().Set("status", "LATE"), []string{"status"}, &status); !errors.Is(err, guard.ErrStale) {
			t.Errorf("a write returning at fence 2 after 8: %v", err)
		}
		if r := readRow(t, db, 1); r.Status != "PENDING" || r.Fence != 8 {
			t.Errorf("the row after three refusals: %+v", r)
		}
		if g.Refusals() != 3 {
			t.Errorf("%d refusals counted, want 3", g.Refusals())
		}
		if len(h.steps) != 3 || h.steps[0] != "write" || h.steps[1] != "claim" || h.steps[2] != "write" || h.errs[1].Fence != 3 {
			t.Errorf("the hook saw %v %v", h.steps, h.errs)
		}
	})
}

func TestMissingRowsNullFencesPreconditionsAndBadInputs(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db *sql.DB, d guard.Dialect) {
		ctx := context.Background()
		g := jobsTable(t, db, d)
		if err := g.Claim(ctx, db, 99, 1); !errors.Is(err, guard.ErrNotFound) || err.Error() != "no row with that id in invoice_jobs" {
			t.Errorf("claim on a missing row: %v", err)
		}
		if _, err := g.Write(ctx, db, 99, 1, guard.NewUpdate().Set("status", "X")); !errors.Is(err, guard.ErrNotFound) {
			t.Errorf("write on a missing row: %v", err)
		}
		// A precondition that does not hold at a current fence: not applied, no error, nothing written.
		applied, err := g.Write(ctx, db, 1, 4, guard.NewUpdate().Set("status", "SENT").When("status", "DONE"))
		if applied || err != nil {
			t.Errorf("a failed precondition: %v, %v", applied, err)
		}
		applied, err = g.Write(ctx, db, 1, 4, guard.NewUpdate().Set("status", "SENT").WhenIn("status"))
		if applied || err != nil {
			t.Errorf("IN an empty list: %v, %v", applied, err)
		}
		if r := readRow(t, db, 1); r.Status != "PENDING" || r.Fence != 0 {
			t.Errorf("the row after failed preconditions: %+v", r)
		}
		applied, err = g.Write(ctx, db, 1, 4, guard.NewUpdate().Set("status", "SENT").WhenIn("status", "PENDING", "SUBMITTING").WhenSQL(`"job_id" > 0`))
		if !applied || err != nil {
			t.Errorf("IN a list that holds, and an SQL predicate: %v, %v", applied, err)
		}
		for _, f := range []uint64{0, guard.MaxFence + 1} {
			if err := g.Claim(ctx, db, 2, f); !errors.Is(err, guard.ErrInvalidFence) {
				t.Errorf("claim at fence %d: %v", f, err)
			}
		}
		if err := g.Claim(ctx, db, 2, guard.MaxFence); err != nil {
			t.Errorf("claim at the largest fence: %v", err)
		}
		if r := readRow(t, db, 2); r.Fence != guard.MaxFence {
			t.Errorf("row 2 after a claim at MaxFence: %+v", r)
		}

		// A fence column added by hand, nullable: a NULL fence is refused by name.
		mustExec(t, db, `CREATE TABLE legacy (id bigint PRIMARY KEY, v text, last_fence bigint)`)
		mustExec(t, db, `INSERT INTO legacy (id, v) VALUES (1, 'a')`)
		legacy, err := guard.New(d, guard.Table{Name: "legacy"})
		if err != nil {
			t.Fatal(err)
		}
		var nf *guard.NullFenceError
		if err := legacy.Claim(ctx, db, 1, 1); !errors.As(err, &nf) || nf.Column != "last_fence" || nf.Table != "legacy" {
			t.Errorf("claim on a NULL fence: %v", err)
		}
		if _, err := legacy.Write(ctx, db, 1, 1, guard.NewUpdate().Set("v", "b")); !errors.Is(err, guard.ErrNullFence) {
			t.Errorf("write on a NULL fence: %v", err)
		}

		// A misspelt column is refused before anything is written: by the guard on SQLite
		// (which would read it as a string literal), by PostgreSQL itself (42703).
		_, err = g.Write(ctx, db, 1, 9, guard.NewUpdate().Set("status", "OOPS").When("statuss", "SENT"))
		switch d {
		case guard.SQLite:
			var uc *guard.UnknownColumnError
			if !errors.As(err, &uc) || uc.Column != "statuss" || err.Error() != `no column "statuss" in invoice_jobs` {
				t.Errorf("an unknown column on SQLite: %v", err)
			}
		case guard.Postgres:
			var pg *pgconn.PgError
			if !errors.As(err, &pg) || pg.Code != "42703" {
				t.Errorf("an unknown column on PostgreSQL: %v", err)
			}
		}
		if err := g.ClaimReturning(ctx, db, 1, 9, []string{"nope"}, new(string)); err == nil {
			t.Error("a claim returning an unknown column succeeded")
		}
		if r := readRow(t, db, 1); r.Status != "SENT" || r.Fence != 4 {
			t.Errorf("the row after refused names: %+v", r)
		}
		if g.Refusals() != 0 {
			t.Errorf("%d stale refusals counted for errors that are not stale fences", g.Refusals())
		}
	})
}
