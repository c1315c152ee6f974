// Package guardtest runs package guard against real databases: SQLite (modernc.org/sqlite,
// pure Go) and PostgreSQL (pgx's database/sql driver, a server the tests start), and shows
// the guarantee end to end with leases from a real lock server.
//
// It is a module of its own because every served release of those drivers asks for a newer
// Go than the 1.22 the fencedlock module promises its users; package guard itself needs
// nothing but database/sql. Run it from go/guardtest with `go test ./...` (scripts/test does).
package guardtest
