// Package guard fences writes at the resource, over database/sql: the other half of a
// fencing token. A lock alone cannot stop a holder that paused past its lease (a GC pause, a
// stopped VM, a slow network) from writing after a newer holder has; the resource must refuse
// it. Here the resource is a table row that carries the last fence that wrote it, and a write
// with fence f succeeds only if f is at least the row's fence, checked in the same UPDATE that
// writes, so no interleaving of holders can slip between the check and the write.
//
// It builds exactly the statements of the Rust crate fencedlock-guard (guard/contract.json,
// embedded in this module and checked by the tests), for PostgreSQL (any database/sql
// driver taking $n placeholders, such as pgx's stdlib) and SQLite (?n):
//
//	claim: UPDATE t SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 RETURNING …
//	write: UPDATE t SET …, "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 [AND …]
//
// Use it in the transaction that reads what the holder inherits:
//
//	jobs, err := guard.New(guard.Postgres, guard.Table{Name: "invoice_jobs", ID: "job_id"})
//	tx, err := db.BeginTx(ctx, nil)
//	var status string
//	err = jobs.ClaimReturning(ctx, tx, 72, lease.Fence(), []string{"status"}, &status)
//	if errors.Is(err, guard.ErrStale) { /* a newer holder owns the row: abandon */ }
//	applied, err := jobs.Write(ctx, tx, 72, lease.Fence(),
//		guard.NewUpdate().Set("status", "SENT").When("status", "PENDING"))
//	err = tx.Commit()
//
// Every refusal for a stale fence is counted (Guard.Refusals, and the StaleHook option for a
// metrics library: the Rust crate's counter is StaleRefusalsTotal, labelled by ResourceLabel).
package guard
