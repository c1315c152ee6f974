package guardtest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"example.invalid/fencedlock/go/guard"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// database is one engine the tests run on.
type database struct {
	name    string
	dialect guard.Dialect
	open    func(t *testing.T) *sql.DB
}

var databases = []database{
	{"sqlite", guard.SQLite, sqliteDB},
	{"postgres", guard.Postgres, postgresDB},
}

// driverOf is the database/sql driver name of a dialect in these tests.
var driverOf = map[guard.Dialect]string{guard.SQLite: "sqlite", guard.Postgres: "pgx"}

// eachDatabase runs fn on SQLite and on PostgreSQL.
func eachDatabase(t *testing.T, fn func(t *testing.T, db *sql.DB, d guard.Dialect)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) { fn(t, d.open(t), d.dialect) })
	}
}

// sqliteDB is a database file of the test's own, in WAL mode, waiting up to 10 s for the
// write lock (the race test writes from many connections).
func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	db, _ := sqliteDBURL(t)
	return db
}

// sqliteDBURL is sqliteDB and its data source name, for another process to open.
func sqliteDBURL(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guard.db")
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("SQLite: %v", err)
	}
	return db, dsn
}

// jobsTable creates invoice_jobs (job_id, status, note, history) without a fence column, with
// rows 1 and 2 PENDING, and adds the fence column through the guard's schema step.
func jobsTable(t *testing.T, db *sql.DB, d guard.Dialect, opts ...guard.Option) *guard.Guard {
	t.Helper()
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE invoice_jobs (job_id bigint PRIMARY KEY, status text NOT NULL, note text, history text NOT NULL DEFAULT '')`)
	mustExec(t, db, `INSERT INTO invoice_jobs (job_id, status) VALUES (1, 'PENDING'), (2, 'PENDING')`)
	g, err := guard.New(d, guard.Table{Name: "invoice_jobs", ID: "job_id"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second finds the column and leaves it
		if err := g.AddFenceColumn(ctx, db); err != nil {
			t.Fatalf("AddFenceColumn (%d): %v", i+1, err)
		}
	}
	return g
}

func mustExec(t *testing.T, db *sql.DB, stmt string, args ...any) {
	t.Helper()
	if _, err := db.Exec(stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// row is job_id's status, note and fence as stored.
type row struct {
	Status string
	Note   sql.NullString
	Fence  int64
}

func readRow(t *testing.T, db *sql.DB, id int) row {
	t.Helper()
	var r row
	err := db.QueryRow(`SELECT status, note, last_fence FROM invoice_jobs WHERE job_id = `+fmt.Sprint(id)).Scan(&r.Status, &r.Note, &r.Fence)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
