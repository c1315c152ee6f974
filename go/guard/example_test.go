package guard_test

import (
	"context"
	"database/sql"
	"errors"

	"example.invalid/fencedlock/go/guard"
)

// A holder claims the row in the transaction that reads it, then writes under the same
// fence; a holder that paused past its lease gets ErrStale and abandons its attempt.
func ExampleGuard_Write() {
	ctx := context.Background()
	var db *sql.DB        // sql.Open("pgx", …) with github.com/jackc/pgx/v5/stdlib
	var fence uint64 = 42 // lease.Fence()

	jobs, err := guard.New(guard.Postgres, guard.Table{Name: "invoice_jobs", ID: "job_id"})
	if err != nil {
		return
	}
	send := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var status string
		if err := jobs.ClaimReturning(ctx, tx, 72, fence, []string{"status"}, &status); err != nil {
			return err // errors.Is(err, guard.ErrStale): a newer holder owns the row
		}
		if status != "PENDING" {
			return nil
		}
		applied, err := jobs.Write(ctx, tx, 72, fence, guard.NewUpdate().Set("status", "SENT").When("status", "PENDING"))
		if err != nil || !applied {
			return err
		}
		return tx.Commit()
	}
	if err := send(); errors.Is(err, guard.ErrStale) {
		return // abandon: the newer holder's work stands
	}
}
