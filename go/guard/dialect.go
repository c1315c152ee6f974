package guard

import (
	"strconv"
	"strings"
)

// Dialect is the database a statement is written for: its placeholders and its fence
// column's type.
type Dialect int

const (
	// Postgres writes $n and stores the fence as bigint.
	Postgres Dialect = iota + 1
	// SQLite writes ?n and stores the fence as INTEGER (signed 64-bit).
	SQLite
)

// String is the dialect's name as guard/contract.json spells it.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

func (d Dialect) valid() bool { return d == Postgres || d == SQLite }

// writePlaceholder appends the 1-based parameter n.
func (d Dialect) writePlaceholder(b *strings.Builder, n int) {
	if d == SQLite {
		b.WriteByte('?')
	} else {
		b.WriteByte('$')
	}
	b.WriteString(strconv.Itoa(n))
}

func (d Dialect) fenceType() string {
	if d == SQLite {
		return "INTEGER"
	}
	return "bigint"
}
