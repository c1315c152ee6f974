package guard

import (
	"fmt"
	"strings"
)

// Every claim and write binds the fence as parameter 1 and the row id as parameter 2, then
// the update's own values from 3 on (guard/contract.json "parameters").
const (
	fenceParam       = 1
	idParam          = 2
	firstUpdateParam = 3
	firstNameParam   = 3 // unknownColumnSQL: 1 and 2 are the table and its schema
)

// addFenceColumnSQL: the column every fence check reads, NOT NULL DEFAULT 0 so existing rows
// start below every fence.
func addFenceColumnSQL(t Table, d Dialect) (string, error) {
	name, err := t.QuotedName()
	if err != nil {
		return "", err
	}
	fence, err := Quote(t.Fence)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s NOT NULL DEFAULT 0", name, fence, d.fenceType()), nil
}

// addFenceColumnIfAbsentSQL is PostgreSQL's schema step, which can skip a present column itself.
func addFenceColumnIfAbsentSQL(t Table) (string, error) {
	s, err := addFenceColumnSQL(t, Postgres)
	return strings.Replace(s, " ADD COLUMN ", " ADD COLUMN IF NOT EXISTS ", 1), err
}

// fenceColumnPresentSQL asks SQLite whether the table (1, in schema 2) has the column (3).
const fenceColumnPresentSQL = "SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3"

// claimSQL raises the fence where it is not above ours and returns what the holder inherits
// (the fence column when returning is empty).
func claimSQL(t Table, d Dialect, returning []string) (string, error) {
	var b strings.Builder
	b.WriteString("UPDATE ")
	if err := t.writeQuotedName(&b); err != nil {
		return "", err
	}
	b.WriteString(" SET ")
	if err := writeFenceCheck(&b, t, d); err != nil {
		return "", err
	}
	b.WriteString(" RETURNING ")
	if len(returning) == 0 {
		returning = []string{t.Fence}
	}
	if err := writeQuotedList(&b, returning); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeFenceCheck appends `"fence" = $1 WHERE "id" = $2 AND "fence" <= $1`, the part every
// claim and write shares: the check and the raise in one statement.
func writeFenceCheck(b *strings.Builder, t Table, d Dialect) error {
	if err := writeQuoted(b, t.Fence); err != nil {
		return err
	}
	b.WriteString(" = ")
	d.writePlaceholder(b, fenceParam)
	b.WriteString(" WHERE ")
	if err := writeQuoted(b, t.ID); err != nil {
		return err
	}
	b.WriteString(" = ")
	d.writePlaceholder(b, idParam)
	b.WriteString(" AND ")
	if err := writeQuoted(b, t.Fence); err != nil {
		return err
	}
	b.WriteString(" <= ")
	d.writePlaceholder(b, fenceParam)
	return nil
}

// writeSQL is a guarded write: the update's assignments plus the fence, where the fence is not
// above ours and the precondition holds; and the update's values (parameters 3 on).
func writeSQL(t Table, d Dialect, u *Update, returning []string) (string, []any, error) {
	var b, conds strings.Builder
	b.WriteString("UPDATE ")
	if err := t.writeQuotedName(&b); err != nil {
		return "", nil, err
	}
	b.WriteString(" SET ")
	params, err := u.render(d, firstUpdateParam, &b, &conds)
	if err != nil {
		return "", nil, err
	}
	if err := writeFenceCheck(&b, t, d); err != nil {
		return "", nil, err
	}
	b.WriteString(conds.String())
	if len(returning) > 0 {
		b.WriteString(" RETURNING ")
		if err := writeQuotedList(&b, returning); err != nil {
			return "", nil, err
		}
	}
	return b.String(), params, nil
}

// fenceOfSQL reads the row's fence after a statement matched no row, to tell why
// (parameter 1: the id).
func fenceOfSQL(t Table, d Dialect) (string, error) {
	var b strings.Builder
	b.WriteString("SELECT ")
	if err := writeQuoted(&b, t.Fence); err != nil {
		return "", err
	}
	b.WriteString(" FROM ")
	if err := t.writeQuotedName(&b); err != nil {
		return "", err
	}
	b.WriteString(" WHERE ")
	if err := writeQuoted(&b, t.ID); err != nil {
		return "", err
	}
	b.WriteString(" = ")
	d.writePlaceholder(&b, 1)
	return b.String(), nil
}

// unknownColumnSQL (SQLite only) selects the first of n names (parameters 3 on) that is no
// column of the table (parameter 1, in schema 2 or NULL). SQLite reads a double-quoted name
// that matches no column as a string literal, so a misspelt condition would compare a
// constant instead of failing: the names are checked first. They match as SQLite matches them
// (ASCII case folded); rowid, oid and _rowid_ are names unless the table is WITHOUT ROWID.
func unknownColumnSQL(n int) string {
	var b strings.Builder
	b.WriteString("SELECT n.column1 FROM (VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		SQLite.writePlaceholder(&b, firstNameParam+i)
		b.WriteByte(')')
	}
	b.WriteString(") AS n WHERE EXISTS (SELECT 1 FROM pragma_table_xinfo(?1, ?2)) " +
		"AND n.column1 COLLATE NOCASE NOT IN (SELECT name FROM pragma_table_xinfo(?1, ?2)) " +
		"AND (n.column1 COLLATE NOCASE NOT IN ('rowid', 'oid', '_rowid_') " +
		"OR EXISTS (SELECT 1 FROM pragma_index_list(?1, ?2) AS i WHERE i.origin = 'pk' " +
		"AND NOT EXISTS (SELECT 1 FROM pragma_index_xinfo(i.name, ?2) WHERE cid = -1))) LIMIT 1")
	return b.String()
}
