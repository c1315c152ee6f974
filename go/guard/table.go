package guard

import "strings"

// The columns used when a Table leaves them empty (guard/contract.json "names").
const (
	DefaultFenceColumn = "last_fence"
	DefaultIDColumn    = "id"
)

// Table is a table whose rows carry a fence column, as the statements address it. Empty
// fields take their defaults: ID "id", Fence "last_fence", Label "schema.name" or "name".
type Table struct {
	Schema string // the schema (PostgreSQL) or attached database (SQLite); empty: none
	Name   string // the table
	ID     string // the column that picks one row
	Fence  string // the column holding the last fence that wrote the row
	// Label is what stale refusals are counted and reported under: keep it to a handful of
	// values per application (tables, never row ids).
	Label string
}

func (t Table) withDefaults() Table {
	if t.ID == "" {
		t.ID = DefaultIDColumn
	}
	if t.Fence == "" {
		t.Fence = DefaultFenceColumn
	}
	return t
}

// ResourceLabel is Label if set, else "schema.name" or "name".
func (t Table) ResourceLabel() string {
	if t.Label != "" {
		return t.Label
	}
	return t.qualifiedName()
}

// qualifiedName is how errors name the table: "schema.name" or "name", unquoted.
func (t Table) qualifiedName() string {
	if t.Schema != "" {
		return t.Schema + "." + t.Name
	}
	return t.Name
}

func (t Table) writeQuotedName(b *strings.Builder) error {
	if t.Schema != "" {
		if err := writeQuoted(b, t.Schema); err != nil {
			return err
		}
		b.WriteByte('.')
	}
	return writeQuoted(b, t.Name)
}

// QuotedName is "schema"."name" or "name", quoted as the statements quote it: for
// statements of your own on the same table.
func (t Table) QuotedName() (string, error) {
	var b strings.Builder
	if err := t.writeQuotedName(&b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// check refuses a name that no statement could quote, before any statement is built.
func (t Table) check() error {
	if t.Schema != "" {
		if err := checkIdentifier(t.Schema); err != nil {
			return err
		}
	}
	for _, name := range []string{t.Name, t.ID, t.Fence} {
		if err := checkIdentifier(name); err != nil {
			return err
		}
	}
	return nil
}
